"""audit.kafka_seal: the kgov-seal header, the key files, and the chain verifier over records built here
(the topic itself: tests/integration/audit/test_kafka_seal.py)."""

from __future__ import annotations

import hashlib
import os
import stat
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.kafka_seal import (
    SEAL_HEADER,
    Anchor,
    Sealer,
    SealFormatError,
    SealKeyError,
    TopicRecord,
    generated_private_key,
    key_id,
    load_private_key,
    load_public_keys,
    parse_seal,
    public_key_pem,
    verify_records,
)

KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
OTHER = Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
KEYS = {key_id(KEY.public_key()): KEY.public_key()}


def epoch(n: int) -> Iterator[bytes]:
    while True:
        yield n.to_bytes(8, "big")


def sealer(writer: str = "node-a", n: int = 1, key: Ed25519PrivateKey = KEY) -> Sealer:
    epochs = epoch(n)
    return Sealer(key, writer, token=lambda size: next(epochs))


def records(s: Sealer, count: int, partition: int = 0, start_offset: int = 0) -> list[TopicRecord]:
    out = []
    for i in range(count):
        value = f'{{"n":{s.seq},"w":"{s.writer}"}}'.encode()
        out.append(TopicRecord(partition, start_offset + i, value,
                               (("content-type", b"application/cloudevents+json"), (SEAL_HEADER, s.seal(value)))))
    return out


def v1_seal(value: bytes, seq: int = 0, prev: bytes = bytes(32), writer: bytes = b"old") -> bytes:
    """A version 1 seal, as builds before checkpoints wrote them: every record signed."""
    fields = struct.pack(">B8s8sQ32sB", 1, key_id(KEY.public_key()), bytes(8), seq, prev, len(writer)) + writer
    return fields + KEY.sign(b"kgov audit kafka seal\n" + fields + hashlib.sha256(value).digest())


def renumber(recs: list[TopicRecord]) -> list[TopicRecord]:
    """Offsets 0, 1, ... per partition, as a topic holding just these records would give them."""
    offsets: dict[int, int] = {}
    out = []
    for r in recs:
        out.append(TopicRecord(r.partition, offsets.get(r.partition, 0), r.value, r.headers))
        offsets[r.partition] = offsets.get(r.partition, 0) + 1
    return out


# ------------------------------------------------------------------------------------------- the header


def test_a_seal_is_compact_versioned_and_carries_writer_epoch_seq_and_the_previous_link() -> None:
    s = sealer("gw-1", 7)
    first, second = s.seal(b"a"), s.seal(b"b")
    assert len(first) == len(second) == 122 + len("gw-1")
    a, b = parse_seal(first), parse_seal(second)
    assert (a.writer, a.epoch, a.seq, a.prev, a.key_id) == ("gw-1", (7).to_bytes(8, "big"), 0, bytes(32),
                                                             key_id(KEY.public_key()))
    assert (b.seq, b.epoch) == (1, a.epoch)
    assert b.prev != bytes(32)
    assert first[0] == 2  # the version comes first
    assert a.signature is not None and b.signature is not None  # each the last of its call: a checkpoint
    link = s.seal(b"c", last=False)
    assert len(link) == 58 + len("gw-1") and parse_seal(link).signature is None


def test_each_sink_start_is_a_new_random_epoch() -> None:
    assert Sealer(KEY, "n").epoch != Sealer(KEY, "n").epoch


@pytest.mark.parametrize("writer", ["", "x" * 256])
def test_a_writer_id_must_fit_its_length_byte(writer: str) -> None:
    with pytest.raises(ValueError, match="writer id"):
        Sealer(KEY, writer)


def test_the_private_key_is_not_in_the_sealers_repr() -> None:
    raw = KEY.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                            serialization.NoEncryption())
    text = repr(sealer())
    assert raw.hex() not in text and "node-a" in text


@pytest.mark.parametrize(("header", "message"), [
    (b"", "shorter than any seal"),
    (bytes([3]) + bytes(200), "version 3, not one of 1, 2"),
    (v1_seal(b"v")[:-64], "not the 125 its writer length"),
    (sealer().seal(b"v")[:-1], "not the 64 or 128"),
    (sealer().seal(b"v") + b"x", "not the"),
    (struct.pack(">B8s8sQ32sB", 1, bytes(8), bytes(8), 0, bytes(32), 0) + bytes(65), "an empty writer id"),
    (struct.pack(">B8s8sQ32sB", 1, bytes(8), bytes(8), 0, bytes(32), 1) + b"\xff" + bytes(64), "not UTF-8"),
])
def test_a_malformed_header_is_a_format_error_saying_what_is_wrong(header: bytes, message: str) -> None:
    with pytest.raises(SealFormatError, match=message):
        parse_seal(header)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.one_of(st.none(), st.binary(max_size=300)))
def test_any_header_bytes_give_a_report_never_a_crash(value: bytes, header: bytes | None) -> None:
    report = verify_records([TopicRecord(0, 0, value, ((SEAL_HEADER, header),))], KEYS)
    assert not report.ok
    assert len(report.malformed) + len(report.forged) == 1


# ------------------------------------------------------------------------------------------- the chains


def test_several_writers_over_several_partitions_verify() -> None:
    a, b = sealer("node-a", 1), sealer("node-b", 2)
    # Each writer's records spread over partitions (by source), interleaved as the consumer returns them.
    ra, rb = records(a, 6), records(b, 4)
    topic = renumber([TopicRecord(i % 2, 0, r.value, r.headers) for i, r in enumerate(ra)]
                     + [TopicRecord(2, 0, r.value, r.headers) for r in rb])
    report = verify_records(topic, KEYS)
    assert report.ok, report
    assert [(c.writer, c.verified, c.first_seq, c.last_seq, c.duplicates) for c in report.chains] == [
        ("node-a", 6, 0, 5, 0), ("node-b", 4, 0, 3, 0)]
    assert report.records == 10


def test_a_record_sent_again_is_a_duplicate_not_a_problem() -> None:
    recs = records(sealer(), 3)
    report = verify_records(renumber([*recs, recs[1], recs[2]]), KEYS)  # an attempt whose answer was lost
    assert report.ok
    assert (report.chains[0].verified, report.chains[0].duplicates) == (3, 2)


def test_a_changed_value_or_seal_field_is_forged() -> None:
    recs = records(sealer(), 3)
    changed_value = TopicRecord(0, 1, recs[1].value.replace(b'"n":1', b'"n":9'), recs[1].headers)  # type: ignore[union-attr]
    header = bytearray(dict(recs[2].headers)[SEAL_HEADER])  # type: ignore[arg-type]
    header[17 + 7] ^= 1  # seq 2 -> 3
    changed_seq = TopicRecord(0, 2, recs[2].value, (("content-type", b"x"), (SEAL_HEADER, bytes(header))))
    report = verify_records([recs[0], changed_value, changed_seq], KEYS)
    assert [(p, o) for p, o, _ in report.forged] == [(0, 1), (0, 2)]
    assert "bad signature" in report.forged[0][2] and "seq 3" in report.forged[1][2]
    assert not report.ok


def test_a_record_signed_by_a_key_not_given_is_reported_as_such() -> None:
    report = verify_records(records(sealer(key=OTHER), 1), KEYS)
    assert len(report.forged) == 1 and "was not given" in report.forged[0][2]
    both = {**KEYS, key_id(OTHER.public_key()): OTHER.public_key()}
    assert verify_records(records(sealer(key=OTHER), 1), both).ok


def test_an_unsigned_or_doubly_sealed_record_fails() -> None:
    good = records(sealer(), 2)
    inserted = TopicRecord(0, 2, b'{"n":"inserted"}', (("content-type", b"x"),))
    doubled = TopicRecord(0, 3, good[0].value, (*good[0].headers, good[1].headers[1]))
    report = verify_records([*good, inserted, doubled], KEYS)
    assert report.unsigned == [(0, 2)]
    assert report.malformed == [(0, 3, "several kgov-seal headers")]
    assert report.chains[0].ok and not report.ok


def test_deleted_records_show_as_gaps_with_their_seqs() -> None:
    recs = records(sealer(), 10)
    kept = [r for i, r in enumerate(recs) if i not in (3, 4, 7)]
    report = verify_records(renumber(kept), KEYS)
    chain = report.chains[0]
    assert chain.problems == ["3 record(s) missing (deleted or lost): seq 3-4, 7"]
    assert chain.verified == 7 and not report.ok


def test_a_missing_start_fails_unless_retention_is_expected() -> None:
    recs = records(sealer(), 5)[2:]
    strict = verify_records(renumber(recs), KEYS)
    assert strict.chains[0].problems == ["the chain's start is missing: its first record is seq 2 (seq 0-1 deleted)"]
    lenient = verify_records(renumber(recs), KEYS, missing_start_ok=True)
    assert lenient.ok and lenient.chains[0].notes == strict.chains[0].problems


def test_records_moved_within_a_partition_are_reordered() -> None:
    recs = records(sealer(), 4)
    report = verify_records(renumber([recs[0], recs[2], recs[1], recs[3]]), KEYS)
    assert report.chains[0].problems == ["reordered: seq 1 at partition 0 offset 2 comes after seq 2 in partition 0"]


def test_two_records_sealed_for_one_seq_and_a_broken_link_are_reported() -> None:
    # Two sealers sharing a writer and an epoch: what only a copied key (and a copied epoch) can do.
    a, b = sealer("n", 5), sealer("n", 5)
    first = TopicRecord(0, 0, b"x", ((SEAL_HEADER, a.seal(b"x")),))
    other = TopicRecord(1, 0, b"y", ((SEAL_HEADER, b.seal(b"y")),))  # the same seq 0, another value
    conflict = verify_records([first, other], KEYS)
    assert conflict.chains[0].problems == [
        "two different records sealed as seq 0: at partition 0 offset 0 and partition 1 offset 0"]
    c, d = sealer("m", 6), sealer("m", 6)
    c0 = TopicRecord(0, 0, b"c0", ((SEAL_HEADER, c.seal(b"c0")),))
    d.seal(b"d0")
    d1 = TopicRecord(0, 1, b"d1", ((SEAL_HEADER, d.seal(b"d1")),))
    broken = verify_records([c0, d1], KEYS)  # d's seq 1 links to d's seq 0, not to c's
    assert broken.chains[0].problems == ["seq 1 at partition 0 offset 1 does not link to seq 0 at partition 0 offset 0"]


def test_an_anchor_shows_a_cut_tail() -> None:
    recs = records(sealer(), 5)
    full = verify_records(recs, KEYS)
    anchor = full.chains[0].newest
    assert anchor is not None and anchor.seq == 4
    assert Anchor.parse(str(anchor)) == anchor
    assert verify_records(recs, KEYS, anchors=[anchor]).ok
    cut = verify_records(recs[:3], KEYS, anchors=[anchor])
    assert cut.anchors_missing == [anchor] and not cut.ok
    assert cut.chains[0].ok  # without the anchor, the cut tail is invisible


def test_an_anchor_of_a_writer_id_with_colons_parses_back() -> None:
    anchor = Anchor("host:8080", bytes(range(8)), 12, bytes(range(32)))
    assert Anchor.parse(str(anchor)) == anchor


@pytest.mark.parametrize("text", ["", "w:00:1:00", "w:" + "0" * 16 + ":x:" + "0" * 64])
def test_a_malformed_anchor_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not an anchor"):
        Anchor.parse(text)


# ------------------------------------------------------------------------------------------- key files


def test_the_key_file_is_generated_owner_only_once_and_then_reused(tmp_path: Path) -> None:
    path = tmp_path / "audit-seal.key"
    first = generated_private_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = generated_private_key(path)
    assert public_key_pem(first) == public_key_pem(again)
    assert [p.name for p in tmp_path.iterdir()] == ["audit-seal.key"]  # no staged file left


def test_a_key_file_readable_by_others_or_of_another_kind_is_refused_without_its_content(tmp_path: Path) -> None:
    path = tmp_path / "k"
    generated_private_key(path)
    os.chmod(path, 0o644)
    with pytest.raises(SealKeyError, match="chmod 600"):
        load_private_key(path)
    ec_pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    path.write_bytes(ec_pem)
    os.chmod(path, 0o600)
    with pytest.raises(SealKeyError, match="not an Ed25519") as info:
        load_private_key(path)
    assert "PRIVATE" not in str(info.value)
    path.write_text("secret-looking-garbage")
    with pytest.raises(SealKeyError) as info:
        load_private_key(path)
    assert "secret-looking-garbage" not in str(info.value)
    with pytest.raises(SealKeyError, match="does not exist"):
        load_private_key(tmp_path / "absent")


def test_verifiers_load_public_keys_or_the_public_half_of_a_private_key(tmp_path: Path) -> None:
    public = tmp_path / "pub.pem"
    public.write_text(public_key_pem(KEY))
    private = tmp_path / "priv.key"
    generated_private_key(private)
    keys = load_public_keys([public, private])
    assert set(keys) == {key_id(KEY.public_key()), key_id(load_private_key(private).public_key())}
    junk = tmp_path / "junk"
    junk.write_text("nope")
    with pytest.raises(SealKeyError, match="does not hold a PEM public key"):
        load_public_keys([junk])


def test_a_key_file_reached_through_a_symbolic_link_loads(tmp_path: Path) -> None:
    """As a Kubernetes secret volume presents its files; the link's target must still be owner-only."""
    target = tmp_path / "secret"
    generated_private_key(target)
    link = tmp_path / "audit-seal.key"
    link.symlink_to(target)
    assert public_key_pem(load_private_key(link)) == public_key_pem(load_private_key(target))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_verifier_agrees_with_a_naive_model_on_any_deletion_copy_and_reordering(data: st.DataObject) -> None:
    """The topic as any sequence of one writer's sealed records (each in its own source's partition): the
    verdicts a naive reading gives. Start missing: the first seq is gone; gap: a seq between two present
    ones is gone; reordered: in some partition, the records first seen are not in seq order. A cut tail and
    copies of a record are invisible."""
    n = data.draw(st.integers(1, 10))
    partition_of = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    s = sealer("w", 3)
    sealed = [(partition_of[i], b"v%d" % i, s.seal(b"v%d" % i)) for i in range(n)]
    order = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=2 * n))
    offsets = [0, 0, 0]
    topic = []
    for i in order:
        partition, value, seal = sealed[i]
        topic.append(TopicRecord(partition, offsets[partition], value, ((SEAL_HEADER, seal),)))
        offsets[partition] += 1
    report = verify_records(topic, KEYS)

    present = sorted(set(order))
    start_missing = present[0] > 0
    gap = len(present) != present[-1] - present[0] + 1
    firsts: dict[int, list[int]] = {}
    for i in dict.fromkeys(order):  # first occurrences, in topic order
        firsts.setdefault(partition_of[i], []).append(i)
    reordered = any(seqs != sorted(seqs) for seqs in firsts.values())
    problems = report.chains[0].problems
    assert any("start is missing" in p for p in problems) == start_missing
    assert any("missing (deleted or lost)" in p for p in problems) == gap
    assert any(p.startswith("reordered") for p in problems) == reordered
    assert report.ok == (not (start_missing or gap or reordered))
    assert (report.chains[0].verified, report.chains[0].duplicates) == (len(present), len(order) - len(present))


def test_a_chain_continued_under_another_key_is_reported() -> None:
    """Two keys, both given, sealing as one writer and epoch: the chain's records are not one signer's."""
    a, b = sealer("n", 9, KEY), sealer("n", 9, OTHER)
    first = TopicRecord(0, 0, b"x", ((SEAL_HEADER, a.seal(b"x")),))
    b.seq, b.prev = a.seq, a.prev  # b carries on where a stopped, links and all
    second = TopicRecord(0, 1, b"y", ((SEAL_HEADER, b.seal(b"y")),))
    both = {**KEYS, key_id(OTHER.public_key()): OTHER.public_key()}
    report = verify_records([first, second], both)
    assert report.chains[0].problems == [
        f"seq 1 at partition 0 offset 1 is sealed under key {key_id(OTHER.public_key()).hex()}, the chain's other "
        f"records under {key_id(KEY.public_key()).hex()}"]


# ------------------------------------------------------------------------------------------- checkpoints


def chain_of(n: int, checkpoints: set[int], s: Sealer | None = None) -> list[TopicRecord]:
    """n records of one writer in partition 0, signed at the seqs in `checkpoints` only."""
    s = s or Sealer(KEY, "w", token=lambda size: bytes(size), checkpoint_records=10**9, checkpoint_s=1e9)
    return [TopicRecord(0, i, b"v%d" % i, ((SEAL_HEADER, s.seal(b"v%d" % i, last=i in checkpoints)),))
            for i in range(n)]


def test_the_sealer_signs_when_told_it_is_the_last_and_under_load_every_n_records_or_t_seconds() -> None:
    now = [0.0]
    s = Sealer(KEY, "w", checkpoint_records=3, checkpoint_s=0.5, monotonic=lambda: now[0])
    signed = [parse_seal(s.seal(b"x", last=False)).signature is not None for _ in range(7)]
    assert signed == [False, False, True, False, False, True, False]  # every 3rd under load
    assert parse_seal(s.seal(b"x", last=True)).signature is not None  # the queue runs empty: signed now
    assert parse_seal(s.seal(b"x", last=False)).signature is None
    now[0] += 0.5
    assert parse_seal(s.seal(b"x", last=False)).signature is not None  # half a second since the last
    with pytest.raises(ValueError, match="checkpoint"):
        Sealer(KEY, "w", checkpoint_records=0)


def test_records_linked_to_a_checkpoint_verify_and_an_unsigned_tail_is_not_yet_signed() -> None:
    recs = chain_of(10, {3, 6})
    report = verify_records(recs, KEYS)
    chain = report.chains[0]
    assert (chain.verified, chain.pending, chain.pending_seqs, chain.last_seq) == (7, 3, (7, 9), 9)
    assert report.ok and report.pending == 3 and chain.problems == []
    assert chain.newest is not None and chain.newest.seq == 6  # the anchor is the newest verified record
    signed_tail = verify_records(chain_of(10, {3, 9}), KEYS)
    assert (signed_tail.chains[0].verified, signed_tail.pending) == (10, 0)


def test_a_record_changed_between_two_checkpoints_is_forged_and_cuts_off_the_records_before_it() -> None:
    recs = chain_of(10, {2, 8})
    recs[5] = TopicRecord(0, 5, b"changed", recs[5].headers)
    report = verify_records(recs, KEYS)
    assert [(p, o) for p, o, _ in report.forged] == [(0, 5)]
    assert "seq 5, but the verified seq 6 links to another record" in report.forged[0][2]
    chain = report.chains[0]
    assert chain.verified == 3 + 3  # 0-2 by checkpoint 2, 6-8 by checkpoint 8
    assert chain.problems == ["2 record(s) not covered by any checkpoint (a gap or a changed record cuts them off "
                              "from the checkpoint after them): seq 3-4",
                              "1 record(s) missing (deleted or lost): seq 5"]
    assert chain.pending == 1 and not report.ok


def test_a_record_inserted_with_a_claimed_seq_is_forged_when_the_chain_says_otherwise() -> None:
    recs = chain_of(4, {3})
    stolen = dict(recs[1].headers)[SEAL_HEADER]
    assert stolen is not None
    report = verify_records([*recs, TopicRecord(0, 4, b"inserted", ((SEAL_HEADER, stolen),))], KEYS)
    assert [(p, o) for p, o, _ in report.forged] == [(0, 4)]
    assert report.chains[0].verified == 4 and report.chains[0].ok and not report.ok


def test_a_checkpoint_deleted_or_stripped_of_its_signature() -> None:
    recs = chain_of(10, {4, 9})
    deleted = verify_records(renumber(recs[:4] + recs[5:]), KEYS)  # checkpoint 4 gone: 0-3 are cut off
    assert deleted.chains[0].problems == [
        "4 record(s) not covered by any checkpoint (a gap or a changed record cuts them off from the checkpoint "
        "after them): seq 0-3",
        "1 record(s) missing (deleted or lost): seq 4"]
    assert deleted.chains[0].verified == 5
    last = recs[9]
    header = dict(last.headers)[SEAL_HEADER]
    assert header is not None
    stripped = verify_records([*recs[:9], TopicRecord(0, 9, last.value, ((SEAL_HEADER, header[:-64]),))], KEYS)
    chain = stripped.chains[0]  # the last checkpoint made a link again: 5-9 are not yet signed, nothing is lost
    assert (chain.verified, chain.pending, chain.pending_seqs, chain.problems) == (5, 5, (5, 9), [])
    earlier = dict(recs[4].headers)[SEAL_HEADER]
    assert earlier is not None  # checkpoint 4 stripped: checkpoint 9 still covers every record
    inner = verify_records([*recs[:4], TopicRecord(0, 4, recs[4].value, ((SEAL_HEADER, earlier[:-64]),)),
                            *recs[5:]], KEYS)
    assert (inner.chains[0].verified, inner.pending, inner.ok) == (10, 0, True)


def test_version_1_records_each_signed_still_verify() -> None:
    first = v1_seal(b"a")
    link = hashlib.sha256(b"kgov audit kafka seal\n" + first[:-64] + hashlib.sha256(b"a").digest()).digest()
    second = v1_seal(b"b", 1, link)
    report = verify_records([TopicRecord(0, 0, b"a", ((SEAL_HEADER, first),)),
                             TopicRecord(0, 1, b"b", ((SEAL_HEADER, second),))], KEYS)
    assert report.ok and (report.chains[0].verified, report.pending) == (2, 0)
    assert parse_seal(first).version == 1
    bad = verify_records([TopicRecord(0, 0, b"changed", ((SEAL_HEADER, first),))], KEYS)
    assert "bad signature" in bad.forged[0][2]


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_the_verifier_agrees_with_a_reference_model_of_checkpoints(data: st.DataObject) -> None:
    """One writer's records, some signed (checkpoints), put on the topic with deletions, copies and moves, and
    maybe one record's value changed (every copy of it). The model: a record is verified when it is an intact
    checkpoint or the next seq is verified; a changed record is forged when it was a checkpoint or the next
    seq is verified, else kept unverified; unverified records after the last intact checkpoint are not yet
    signed, before it not covered (a problem)."""
    n = data.draw(st.integers(1, 10))
    partition_of = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    is_cp = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    s = Sealer(KEY, "w", token=lambda size: bytes(size), checkpoint_records=10**9, checkpoint_s=1e9)
    sealed = [(partition_of[i], b"v%d" % i, s.seal(b"v%d" % i, last=is_cp[i])) for i in range(n)]
    order = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=2 * n))
    tamper = data.draw(st.one_of(st.none(), st.sampled_from(order)))
    offsets = [0, 0, 0]
    topic = []
    for i in order:
        partition, value, seal = sealed[i]
        topic.append(TopicRecord(partition, offsets[partition], b"X" if i == tamper else value, ((SEAL_HEADER, seal),)))
        offsets[partition] += 1
    report = verify_records(topic, KEYS)

    genuine = set(order) - {tamper}
    verified: set[int] = set()
    for i in sorted(genuine, reverse=True):
        if is_cp[i] or i + 1 in verified:
            verified.add(i)
    forged = tamper is not None and (is_cp[tamper] or tamper + 1 in verified)
    kept = genuine | ({tamper} if tamper is not None and not forged else set())
    last_cp = max((i for i in genuine if is_cp[i]), default=-1)
    pending = {i for i in kept - verified if i > last_cp}
    uncovered = kept - verified - pending
    copies = order.count(tamper) if tamper is not None else 0
    assert len(report.forged) == (copies if forged and is_cp[tamper] else 1 if forged else 0)  # type: ignore[index]
    if not kept:
        assert report.chains == [] and not report.ok
        return
    present = sorted(kept)
    start_missing = present[0] > 0
    gap = len(present) != present[-1] - present[0] + 1
    broken = tamper in kept and tamper + 1 in kept  # type: ignore[operator]
    firsts: dict[int, list[int]] = {}
    for i in dict.fromkeys(order):
        if i in kept:
            firsts.setdefault(partition_of[i], []).append(i)
    reordered = any(seqs != sorted(seqs) for seqs in firsts.values())
    chain = report.chains[0]
    problems = chain.problems
    assert any("start is missing" in p for p in problems) == start_missing
    assert any("missing (deleted or lost)" in p for p in problems) == gap
    assert any(p.startswith("reordered") for p in problems) == reordered
    assert any("not covered by any checkpoint" in p for p in problems) == bool(uncovered)
    assert any("does not link" in p for p in problems) == broken
    assert report.ok == (not (start_missing or gap or reordered or uncovered or broken or forged))
    assert (chain.verified, chain.pending) == (len(verified), len(pending))
    forged_copies = copies if forged and is_cp[tamper] else 0  # type: ignore[index]
    assert chain.duplicates == len(order) - len(set(order)) - max(forged_copies - 1, 0)
