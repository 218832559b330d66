"""The audit chain: real files, real rotation, restarts; every tampering case is found, a valid trail verifies."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit.integrity import (
    FileReport,
    IntegrityKey,
    IntegrityKeyError,
    Reason,
    WriterInfo,
    audit_files_in,
    chain_path,
    load_key,
    verify_paths,
)
from audit.model import authorization_event
from audit.sinks import AuditWriteError, JsonLinesSink, TextLineSink

KEY = IntegrityKey(b"k" * 43)
OTHER_KEY = IntegrityKey(b"o" * 43)
NOW = datetime(2024, 5, 1, 10, 0, 0, 123000, tzinfo=UTC)


def line(run: int, i: int) -> str:
    return f"[2024-05-01 10:00:{i % 60:02d},123] INFO Principal = User:u{run}-{i} is Denied operation = READ " \
           f"from host = 10.0.0.1 on resource = Topic:LITERAL:t for request = Fetch with resourceRefCount = 1 " \
           f"based on rule DefaultDeny (kafka.authorizer.logger)"


def write_trail(d: Path, *, runs: int = 3, per_run: int = 12, max_bytes: int = 1000, backups: int = 50,
                key: IntegrityKey = KEY) -> Path:
    """`runs` restarts of one writer, each `per_run` lines: about four lines per file, so many rotations."""
    for run in range(runs):
        sink = TextLineSink(d / "a.log", max_bytes=max_bytes, backups=backups, integrity=key)
        for i in range(per_run):
            sink.write_line(line(run, i))
        sink.close()
    return d / "a.log"


def verify(d: Path, key: IntegrityKey = KEY) -> list[FileReport]:
    return verify_paths(audit_files_in(d), key)


def problems(d: Path, key: IntegrityKey = KEY) -> list[tuple[str, int, Reason]]:
    return [(p.file, p.line, p.reason) for r in verify(d, key) for p in r.problems]


def lines_of(p: Path) -> list[str]:
    return p.read_text().splitlines(keepends=True)


def rewrite(p: Path, edit: Callable[[list[str]], list[str]]) -> None:
    p.write_text("".join(edit(lines_of(p))))


def last_seal_index(chain_lines: list[str]) -> int:
    return max(i for i, x in enumerate(chain_lines) if json.loads(x)["k"] == "r")


def test_a_trail_over_rotations_and_restarts_verifies_and_its_lines_are_unchanged(tmp_path: Path) -> None:
    write_trail(tmp_path / "sealed")
    write_trail(tmp_path / "plain", key=None)  # type: ignore[arg-type]
    reports = verify(tmp_path / "sealed")
    assert len(reports) > 6 and all(r.ok for r in reports), reports
    assert sum(r.records for r in reports) == 36
    assert reports[-1].newest and reports[-1].head is not None
    # The data files are byte for byte what the sink writes without integrity; only the chain files are added.
    sealed = sorted(p.name for p in (tmp_path / "sealed").iterdir() if not p.name.startswith("."))
    assert sealed == sorted(p.name for p in (tmp_path / "plain").iterdir() if not p.name.startswith("."))
    for name in sealed:
        assert (tmp_path / "sealed" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes()
    assert sorted(p.name for p in (tmp_path / "sealed").iterdir() if p.name.startswith(".")) == \
        sorted([".a.log.lock", *(chain_path(tmp_path / "sealed" / n).name for n in sealed)])
    assert [p.name for p in (tmp_path / "plain").glob(".*")] == [".a.log.lock"]  # the rotation lock only
    # Each restart is explicit: a `start` naming the writer, host, pid and the seal the file held before it.
    starts = [json.loads(x) for p in (tmp_path / "sealed").glob(".*.chain") for x in p.read_text().splitlines()
              if json.loads(x)["k"] == "start"]
    assert len(starts) == 3 and len({s["w"] for s in starts}) == 3
    assert all(s["pid"] == os.getpid() and s["host"] and s["key"] == KEY.key_id for s in starts)
    assert sum("after" in s for s in starts) == 2


def test_json_lines_verify_too_and_stay_plain_cloudevents(tmp_path: Path) -> None:
    sink = JsonLinesSink(tmp_path / "events.jsonl", max_bytes=3000, backups=20, integrity=KEY)
    for i in range(20):
        sink.write(authorization_event(source="s", time=NOW, principal=f"User:u{i}", granted=False,
                                       operation="Read", resource_type="Topic", resource_name="t",
                                       pattern_type="LITERAL", client_address="10.0.0.1", method_name="Fetch",
                                       rule="DefaultDeny"))
    sink.close()
    reports = verify(tmp_path)
    assert len(reports) > 2 and all(r.ok for r in reports) and sum(r.records for r in reports) == 20
    for p in tmp_path.glob("events.jsonl*"):
        for text in p.read_text().splitlines():
            assert set(json.loads(text)) == {"specversion", "id", "source", "type", "datacontenttype", "subject",
                                             "time", "kgovformatversion", "data"}


def test_a_modified_line_is_found_with_its_file_and_line(tmp_path: Path) -> None:
    write_trail(tmp_path)
    target = tmp_path / "a.log.3"
    rewrite(target, lambda ls: [ls[0], ls[1].replace("Denied", "Allowed"), *ls[2:]])
    assert problems(tmp_path) == [("a.log.3", 2, Reason.MODIFIED)]


def test_an_inserted_line_is_found(tmp_path: Path) -> None:
    write_trail(tmp_path)
    rewrite(tmp_path / "a.log.4", lambda ls: [ls[0], line(9, 9) + "\n", *ls[1:]])
    assert problems(tmp_path) == [("a.log.4", 2, Reason.INSERTED)]


def test_a_deleted_line_is_found(tmp_path: Path) -> None:
    write_trail(tmp_path)
    rewrite(tmp_path / "a.log.2", lambda ls: [ls[0], *ls[2:]])
    assert problems(tmp_path) == [("a.log.2", 2, Reason.DELETED)]


def test_a_line_deleted_with_its_seal_is_found(tmp_path: Path) -> None:
    write_trail(tmp_path)
    rewrite(tmp_path / "a.log.2", lambda ls: [ls[0], *ls[2:]])
    rewrite(chain_path(tmp_path / "a.log.2"), lambda ls: [ls[0], ls[1], *ls[3:]])  # header, seal 1, [seal 2]
    assert problems(tmp_path) == [("a.log.2", 2, Reason.DELETED)]


def test_reordered_lines_are_found_with_or_without_their_seals(tmp_path: Path) -> None:
    write_trail(tmp_path)
    rewrite(tmp_path / "a.log.5", lambda ls: [ls[1], ls[0], *ls[2:]])
    assert problems(tmp_path) == [("a.log.5", 1, Reason.REORDERED)]
    rewrite(chain_path(tmp_path / "a.log.5"), lambda ls: [ls[0], ls[2], ls[1], *ls[3:]])
    assert [r for _, _, r in problems(tmp_path)][:1] == [Reason.REORDERED]


def test_a_forged_seal_does_not_verify(tmp_path: Path) -> None:
    """Who rewrites a line and its hash in the chain file still cannot make the MAC without the key."""
    write_trail(tmp_path)
    data, side = tmp_path / "a.log.3", chain_path(tmp_path / "a.log.3")
    rewrite(data, lambda ls: [ls[0].replace("Denied", "Allowed"), *ls[1:]])
    from audit.integrity import line_digest

    def forge(ls: list[str]) -> list[str]:
        entry = json.loads(ls[1])
        entry["h"] = line_digest(lines_of(data)[0].rstrip("\n").encode())
        return [ls[0], json.dumps(entry, separators=(",", ":")) + "\n", *ls[2:]]

    rewrite(side, forge)
    assert problems(tmp_path) == [("a.log.3", 1, Reason.MODIFIED)]


def test_a_deleted_middle_file_is_found_renumbered_or_not(tmp_path: Path) -> None:
    write_trail(tmp_path)
    for p in (tmp_path / "a.log.4", chain_path(tmp_path / "a.log.4")):
        p.unlink()
    assert [(f, r) for f, _, r in problems(tmp_path)] == [(".a.log.3.chain", Reason.DELETED_MIDDLE_FILE)]
    # The same with the older files renamed down to close the gap: each of those says it was renamed.
    moved = []
    for i in range(5, 50):
        if (tmp_path / f"a.log.{i}").exists():
            moved.append(f"a.log.{i - 1}")
        for p in (tmp_path / f"a.log.{i}", chain_path(tmp_path / f"a.log.{i}")):
            if p.exists():
                p.rename(p.with_name(p.name.replace(f".{i}", f".{i - 1}")))
    found = [(f, r) for f, _, r in problems(tmp_path)]
    assert sorted(found) == sorted([(".a.log.3.chain", Reason.DELETED_MIDDLE_FILE),
                                    *((n, Reason.RENAMED) for n in moved)])


def test_reordered_files_are_found(tmp_path: Path) -> None:
    write_trail(tmp_path)
    for a, b in ((tmp_path / "a.log.2", tmp_path / "a.log.3"),
                 (chain_path(tmp_path / "a.log.2"), chain_path(tmp_path / "a.log.3"))):
        a.rename(tmp_path / "swap")
        b.rename(a)
        (tmp_path / "swap").rename(b)
    assert Reason.REORDERED in [r for _, _, r in problems(tmp_path)]


def test_a_middle_file_whose_tail_was_cut_is_found(tmp_path: Path) -> None:
    write_trail(tmp_path)
    rewrite(tmp_path / "a.log.3", lambda ls: ls[:-1])
    rewrite(chain_path(tmp_path / "a.log.3"), lambda ls: ls[:last_seal_index(ls)])  # the last seal and after
    n = len(lines_of(tmp_path / "a.log.3"))
    assert problems(tmp_path) == [("a.log.3", n + 1, Reason.TRUNCATED_MIDDLE_FILE)]


def test_lines_cut_from_a_file_but_not_their_seals_are_found(tmp_path: Path) -> None:
    write_trail(tmp_path)
    rewrite(tmp_path / "a.log", lambda ls: ls[:-1])
    assert problems(tmp_path) == [("a.log", len(lines_of(tmp_path / "a.log")) + 1, Reason.TRUNCATED)]


def test_the_previous_runs_tail_is_anchored_by_the_next_start(tmp_path: Path) -> None:
    """Two runs in one file: cutting the first run's last lines and seals shows at the second run's start."""
    write_trail(tmp_path, runs=2, per_run=3, max_bytes=10**6)
    chain = chain_path(tmp_path / "a.log")
    kinds = [json.loads(x)["k"] for x in chain.read_text().splitlines()]
    assert kinds == ["start", "r", "r", "r", "stop", "start", "r", "r", "r", "stop"]
    rewrite(tmp_path / "a.log", lambda ls: [*ls[:2], *ls[3:]])
    rewrite(chain, lambda ls: [*ls[:3], *ls[5:]])  # run 1's last seal and its stop
    assert problems(tmp_path) == [(".a.log.chain", 4, Reason.DELETED)]


def test_what_is_not_detectable_the_newest_tail_and_the_oldest_files(tmp_path: Path) -> None:
    """Documented limits (audit.integrity): the head seal printed by `kgov audit verify` is the anchor."""
    write_trail(tmp_path)
    head_before = verify(tmp_path)[-1].head
    rewrite(tmp_path / "a.log", lambda ls: ls[:-1])
    rewrite(chain_path(tmp_path / "a.log"), lambda ls: ls[:last_seal_index(ls)])  # the last seal and the `stop`
    oldest = max(int(p.name.rsplit(".", 1)[1]) for p in tmp_path.glob("a.log.*"))
    for p in (tmp_path / f"a.log.{oldest}", chain_path(tmp_path / f"a.log.{oldest}")):
        p.unlink()
    reports = verify(tmp_path)
    assert all(r.ok for r in reports)
    assert reports[-1].head != head_before  # ... but the kept anchor no longer matches
    assert any("rotated out" in n for n in reports[0].notes)


def test_a_trail_sealed_with_another_key_says_unknown_key(tmp_path: Path) -> None:
    write_trail(tmp_path, runs=1)
    found = {r for _, _, r in problems(tmp_path, OTHER_KEY)}
    assert found == {Reason.UNKNOWN_KEY}


def test_a_deleted_chain_file_fails(tmp_path: Path) -> None:
    write_trail(tmp_path)
    chain_path(tmp_path / "a.log.2").unlink()
    assert problems(tmp_path)[0] == ("a.log.2", 1, Reason.NO_CHAIN)


def test_a_garbled_chain_entry_is_reported_where_it_is(tmp_path: Path) -> None:
    write_trail(tmp_path)
    rewrite(chain_path(tmp_path / "a.log.2"), lambda ls: [ls[0], "not json\n", *ls[2:]])
    found = problems(tmp_path)
    assert (".a.log.2.chain", 2, Reason.MODIFIED) in found


def test_several_writers_in_one_file_each_keep_their_chain(tmp_path: Path) -> None:
    """The control plane and a `kgov scram` command both append to events.jsonl: interleaved, still verified."""
    a = TextLineSink(tmp_path / "e.log", integrity=KEY,
                     writer=WriterInfo("aaaaaaaaaaaa", "h1", 1, "2024-05-01T10:00:00.000+00:00"))
    b = TextLineSink(tmp_path / "e.log", integrity=KEY,
                     writer=WriterInfo("bbbbbbbbbbbb", "h2", 2, "2024-05-01T10:00:01.000+00:00"))
    for i in range(10):
        (a if i % 3 else b).write_line(line(0, i))
    a.write_line(line(0, 3))  # the same text twice, by another writer: still paired in order
    a.close()
    b.close()
    [report] = verify(tmp_path)
    assert report.ok and report.records == 11 and report.writers == 2
    rewrite(tmp_path / "e.log", lambda ls: [*ls[:5], ls[5].replace("u0-5", "u0-6"), *ls[6:]])
    assert problems(tmp_path) == [("e.log", 6, Reason.MODIFIED)]


def test_a_line_written_but_not_sealed_fails_loudly_and_shows(tmp_path: Path) -> None:
    sink = TextLineSink(tmp_path / "a.log", integrity=KEY)
    sink.write_line(line(0, 0))

    class FullDisk:
        closed = False

        def write(self, _: str) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self) -> None: ...

        def close(self) -> None: ...

    real = sink._file._side
    sink._file._side = FullDisk()  # type: ignore[assignment]  # disk full: not causable here
    with pytest.raises(AuditWriteError, match="No space left"):
        sink.write_line(line(0, 1))
    sink._file._side = real
    sink.write_line(line(0, 2))  # the chain did not advance past the failed seal
    sink.close()
    assert problems(tmp_path) == [("a.log", 2, Reason.INSERTED)]


def test_a_crash_between_line_and_seal_leaves_an_unsealed_last_line(tmp_path: Path) -> None:
    write_trail(tmp_path, runs=1, per_run=3, max_bytes=10**6)
    with open(tmp_path / "a.log", "a") as fh:
        fh.write(line(1, 1) + "\n")
    [report] = verify(tmp_path)
    assert report.problems[0].reason is Reason.INSERTED and "stopped before sealing" in report.problems[0].detail


def test_rotation_with_no_backups_drops_the_chain_file_with_the_data(tmp_path: Path) -> None:
    write_trail(tmp_path, runs=2, backups=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".a.log.chain", ".a.log.lock", "a.log"]
    [report] = verify(tmp_path)
    assert report.ok and report.notes  # continues from a rotated-out file


def test_load_key_errors_name_the_file_never_the_content(tmp_path: Path) -> None:
    with pytest.raises(IntegrityKeyError, match="does not exist"):
        load_key(tmp_path / "missing.key")
    short = tmp_path / "short.key"
    short.write_text("tiny-secret-value\n")
    short.chmod(0o600)
    with pytest.raises(IntegrityKeyError) as refused:
        load_key(short)
    assert "tiny-secret-value" not in str(refused.value) and "17 characters" in str(refused.value)
    good = tmp_path / "good.key"
    good.write_text("g" * 43 + "\n")
    good.chmod(0o600)
    key = load_key(good)
    assert "g" * 10 not in repr(key) and len(key.key_id) == 16 and key.key_id != KEY.key_id


@pytest.mark.parametrize(("secret", "message", "expected"), [
    # RFC 4231 test cases 1 and 6 (a key longer than SHA-256's block is hashed first)
    (b"\x0b" * 20, b"Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
    (b"\xaa" * 131, b"Test Using Larger Than Block-Size Key - Hash Key First",
     "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
])
def test_the_precomputed_hmac_is_hmac_sha256(secret: bytes, message: bytes, expected: str) -> None:
    assert IntegrityKey(secret).mac(message).hex() == expected


def test_the_precomputed_hmac_matches_the_standard_library_on_any_length() -> None:
    import hmac
    import random

    rng = random.Random(7)
    for _ in range(200):
        secret = rng.randbytes(rng.randrange(1, 200))
        message = rng.randbytes(rng.randrange(0, 300))
        key = IntegrityKey(secret)
        assert key.mac(message) == hmac.digest(secret, message, "sha256")
        assert key.mac(message) == key.mac(message)  # the precomputed states are copied, never consumed


def test_lines_from_before_integrity_are_reported_not_sealed_and_their_change_is_found(tmp_path: Path) -> None:
    """Turning integrity on over an existing file (or restarting after its chain file was deleted): the
    lines already there are never passed as sealed; a digest taken then shows any later change."""
    plain = TextLineSink(tmp_path / "a.log")
    for i in range(3):
        plain.write_line(line(0, i))
    plain.close()
    write_trail(tmp_path, runs=1, per_run=2, max_bytes=10**6)
    [report] = verify(tmp_path)
    assert [(p.line, p.reason) for p in report.problems] == [(1, Reason.UNSEALED)]
    assert "first 3 line(s)" in report.problems[0].detail and report.records == 5
    rewrite(tmp_path / "a.log", lambda ls: [ls[0], ls[1].replace("Denied", "Allowed"), *ls[2:]])
    assert problems(tmp_path) == [("a.log", 1, Reason.MODIFIED)]
    # The chain file deleted and a writer started again: the same, never a clean pass.
    write_trail(tmp_path / "b", runs=1, per_run=3, max_bytes=10**6)
    chain_path(tmp_path / "b" / "a.log").unlink()
    write_trail(tmp_path / "b", runs=1, per_run=1, max_bytes=10**6)
    assert problems(tmp_path / "b") == [("a.log", 1, Reason.UNSEALED)]


def _valid_family(tmp_path: Path) -> tuple[bytes, bytes]:
    write_trail(tmp_path, runs=2, per_run=3, max_bytes=10**6)
    return (tmp_path / "a.log").read_bytes(), chain_path(tmp_path / "a.log").read_bytes()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_change_to_a_sealed_file_fails_and_nothing_crashes_the_verifier(tmp_path: Path,
                                                                            data: st.DataObject) -> None:
    """Reference model: the untouched pair verifies; any edit of either file (bytes flipped, inserted, cut,
    or JSON of any shape in the chain file) never verifies and never raises. Cuts are at most 60 bytes,
    shorter than any chain entry: whole entries cut from the newest tail are the documented blind spot."""
    from audit.integrity import AuditFile, verify_family

    if not (tmp_path / "a.log").exists():
        _valid_family(tmp_path)
    good_data, good_chain = (tmp_path / "a.log").read_bytes(), chain_path(tmp_path / "a.log").read_bytes()
    assert verify_family([AuditFile("a.log", ".a.log.chain", good_data, good_chain)], KEY)[0].ok
    target = data.draw(st.sampled_from(["data", "chain"]))
    original = good_data if target == "data" else good_chain
    edit = data.draw(st.sampled_from(["flip", "insert", "cut", "json"]))
    pos = data.draw(st.integers(0, len(original) - 1))
    if edit == "flip":
        changed = original[:pos] + bytes([original[pos] ^ data.draw(st.integers(1, 255))]) + original[pos + 1:]
    elif edit == "insert":
        changed = original[:pos] + data.draw(st.binary(min_size=1, max_size=40)) + original[pos:]
    elif edit == "cut":
        changed = original[:pos] + original[pos + data.draw(st.integers(1, 60)):]
    else:
        junk = data.draw(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                                      lambda c: st.lists(c, max_size=3) | st.dictionaries(
                                          st.sampled_from(["w", "n", "m", "k", "h", "after", "prefix", "prev"]),
                                          c, max_size=5), max_leaves=10))
        lines = original.split(b"\n")
        lines.insert(data.draw(st.integers(0, len(lines) - 1)), json.dumps(junk).encode())
        changed = b"\n".join(lines)
    if changed == original:
        return
    pair = (changed, good_chain) if target == "data" else (good_data, changed)
    [report] = verify_family([AuditFile("a.log", ".a.log.chain", *pair)], KEY)
    # A trailing newline cut from either file leaves the same lines: the one edit that changes nothing.
    if changed + b"\n" != original:
        assert not report.ok


def test_a_file_copied_in_as_an_older_rotation_is_found(tmp_path: Path) -> None:
    write_trail(tmp_path)
    for src in (tmp_path / "a.log.1", chain_path(tmp_path / "a.log.1")):
        (src.parent / src.name.replace("a.log.1", "a.log.40")).write_bytes(src.read_bytes())
    found = problems(tmp_path)
    assert ("a.log.40", 1, Reason.RENAMED) in found and {r for _, _, r in found} <= {Reason.REORDERED,
                                                                                     Reason.RENAMED}, found


def test_lines_of_two_writers_moved_past_each_other_are_found(tmp_path: Path) -> None:
    """A `kgov users` command (b) grants, the control plane (a) then logs reads, b revokes. Moving the grant
    below the reads keeps each writer's own order, yet the reads now seem to come before the grant."""
    b = TextLineSink(tmp_path / "e.log", integrity=KEY,
                     writer=WriterInfo("bbbbbbbbbbbb", "h2", 2, "2024-05-01T10:00:01.000+00:00"))
    b.write_line("granted: User:alice ALL on Topic:payments")
    a = TextLineSink(tmp_path / "e.log", integrity=KEY,
                     writer=WriterInfo("aaaaaaaaaaaa", "h1", 1, "2024-05-01T10:00:00.000+00:00"))
    for i in range(3):
        a.write_line(f"allowed: User:alice READ Topic:payments ({i})")
    b.write_line("revoked: User:alice ALL on Topic:payments")
    a.close()
    b.close()
    assert all(r.ok for r in verify(tmp_path))
    rewrite(tmp_path / "e.log", lambda ls: [*ls[1:4], ls[0], ls[4]])
    assert problems(tmp_path) == [("e.log", 4, Reason.REORDERED)]


def test_interleaved_writers_whose_lines_and_seals_cross_still_verify(tmp_path: Path) -> None:
    """Two processes: a writes its line, b writes and seals its own, then a seals. The data file and the
    chain file then list the two in opposite orders; that is no tampering."""
    a = TextLineSink(tmp_path / "e.log", integrity=KEY,
                     writer=WriterInfo("aaaaaaaaaaaa", "h1", 1, "2024-05-01T10:00:00.000+00:00"))
    b = TextLineSink(tmp_path / "e.log", integrity=KEY,
                     writer=WriterInfo("bbbbbbbbbbbb", "h2", 2, "2024-05-01T10:00:01.000+00:00"))
    chain_a = a._file._chain
    assert chain_a is not None
    seal = a._file._seal_line
    for i in range(3):
        assert a._file._data is not None
        a._file._data.write((line(0, i) + "\n").encode())  # as an older kgov did, without the rotation lock
        b.write_line(line(1, i))
        # where a's line ended: its descriptor's offset, which b's append in between did not move
        seal(chain_a.record(line(0, i), os.lseek(a._file._data.fileno(), 0, os.SEEK_CUR)))
    a.close()
    b.close()
    [report] = verify(tmp_path)
    assert report.ok and report.records == 6, report
    assert all("o" in json.loads(x) for x in chain_path(tmp_path / "e.log").read_text().splitlines()
               if json.loads(x)["k"] == "r")


def _crafted(entries: list[dict[str, object]]) -> bytes:
    return "".join(json.dumps(e) + "\n" for e in entries).encode()


@pytest.mark.parametrize("shape", ["every seal skips a number", "a writer per seal"])
def test_a_crafted_chain_file_cannot_make_verify_hang(shape: str) -> None:
    """20,000 entries: checks that looked through the rest of the file for every entry took minutes (the
    work grew with the square of the file); now each entry costs about the same. The bound is wide: the
    check takes well under a second even on a loaded machine."""
    import time

    from audit.integrity import AuditFile, verify_family

    n = 20_000
    header = {"k": "start", "w": "a", "n": 0, "m": "x", "prev": "", "key": KEY.key_id}
    if shape == "every seal skips a number":
        chain = _crafted([header, *({"k": "r", "w": "a", "n": 2 * i + 2, "m": "x", "h": "y"} for i in range(n))])
        data = b""
    else:
        chain = _crafted([{"k": "r", "w": f"w{i}", "n": 1, "m": "x", "h": f"h{i}"} for i in range(n)])
        data = "".join(f"line {i}\n" for i in range(n)).encode()
    started = time.monotonic()
    [report] = verify_family([AuditFile("a.log", ".a.log.chain", data, chain)], KEY)
    assert time.monotonic() - started < 10.0
    assert not report.ok


def test_a_deeply_nested_chain_entry_is_refused_not_a_crash() -> None:
    """JSON nested nearly as deep as the parser allows, in an entry that names the right key: sealing it
    again for the check needs a few more levels than parsing did (RecursionError). Where the limit falls
    depends on the stack, so every depth near it is tried, from several stack depths."""
    from audit.integrity import AuditFile, verify_family

    def at_depth(extra: int, chain: bytes) -> list[FileReport]:
        if extra:
            return at_depth(extra - 1, chain)
        return verify_family([AuditFile("a.log", ".a.log.chain", b"x\n", chain)], KEY)

    for depth in range(850, 1000):
        nested = "[" * depth + "]" * depth
        chain = (f'{{"k":"start","w":"a","n":0,"m":"x","key":"{KEY.key_id}","x":{nested}}}\n'
                 f'{{"k":"r","w":"a","n":1,"m":"x","h":"y","after":{{"w":{nested}}}}}\n').encode()
        for extra in range(0, 40, 3):
            [report] = at_depth(extra, chain)
            assert not report.ok


def test_a_writer_starts_after_a_chain_file_whose_tail_is_garbage(tmp_path: Path) -> None:
    """The next `start` anchors the file's last entry: a garbled tail (deep JSON, wrong types) is skipped
    over, never a crash at start-up and never copied into the new writer's sealed `start`."""
    write_trail(tmp_path, runs=1, per_run=2, max_bytes=10**6)
    chain = chain_path(tmp_path / "a.log")
    last = json.loads(chain.read_text().splitlines()[-1])
    with open(chain, "a") as fh:
        fh.write('{"w":{"x":1},"n":1,"m":"x"}\n')
        fh.write('{"w":"a","n":' + "[" * 1500 + "]" * 1500 + ',"m":"x"}\n')
    sink = TextLineSink(tmp_path / "a.log", integrity=KEY)
    sink.close()
    start = json.loads(chain.read_text().splitlines()[-2])
    assert start["k"] == "start" and start["after"] == {"w": last["w"], "n": last["n"], "m": last["m"]}


def test_a_whole_writer_cut_from_the_middle_of_a_shared_file_is_found(tmp_path: Path) -> None:
    """The control plane (a) runs on; a `kgov users` command (b) writes its credential change and stops. No
    later `start` names b's last entry; removing b's line and all of b's chain entries must still show."""
    a = TextLineSink(tmp_path / "e.log", integrity=KEY,
                     writer=WriterInfo("aaaaaaaaaaaa", "h1", 1, "2024-05-01T10:00:00.000+00:00"))
    a.write_line(line(0, 0))
    b = TextLineSink(tmp_path / "e.log", integrity=KEY,
                     writer=WriterInfo("bbbbbbbbbbbb", "h2", 2, "2024-05-01T10:00:01.000+00:00"))
    b.write_line("credential change: User:eve added with super user rights")
    b.close()
    for i in range(1, 3):
        a.write_line(line(0, i))
    a.close()
    assert all(r.ok for r in verify(tmp_path))
    rewrite(tmp_path / "e.log", lambda ls: [x for x in ls if "User:eve" not in x])
    rewrite(chain_path(tmp_path / "e.log"), lambda ls: [x for x in ls if json.loads(x)["w"] != "bbbbbbbbbbbb"])
    assert problems(tmp_path) == [("e.log", 2, Reason.DELETED)]


def test_a_seal_torn_by_a_crash_spoils_only_itself(tmp_path: Path) -> None:
    """Power lost (or the disk full) while a seal was written leaves half a chain entry without its newline.
    The next start begins on a line of its own: its records verify, only the torn entry and its line show."""
    write_trail(tmp_path, runs=1, per_run=3, max_bytes=10**6)
    chain = chain_path(tmp_path / "a.log")
    torn = line(0, 99)
    with open(tmp_path / "a.log", "a") as fh:
        fh.write(torn + "\n")
    with open(chain, "a") as fh:
        fh.write('{"h":"RPw5fMk_9x1M2LH3-jgK7jwnR0Yp336L')
    write_trail(tmp_path, runs=1, per_run=3, max_bytes=10**6)
    found = problems(tmp_path)
    assert found and all((f, n) in (("a.log", 4), (".a.log.chain", 6)) for f, n, _ in found), found


def test_a_key_file_others_may_read_or_that_is_no_file_is_refused(tmp_path: Path) -> None:
    """Whoever reads the key can rewrite the trail undetected: as for encryption's key ring, only the owner
    may read it. A FIFO (or a device) is refused without waiting for a writer."""
    import threading

    loose = tmp_path / "loose.key"
    loose.write_text("g" * 43 + "\n")
    for mode in (0o644, 0o640, 0o604, 0o620):
        loose.chmod(mode)
        with pytest.raises(IntegrityKeyError, match=f"mode 0{mode:o}.*chmod 600 {loose}") as refused:
            load_key(loose)
        assert "g" * 10 not in str(refused.value)
    fifo = tmp_path / "fifo.key"
    os.mkfifo(fifo, 0o600)
    outcome: list[BaseException] = []

    def load() -> None:
        try:
            load_key(fifo)
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)

    reader = threading.Thread(target=load, daemon=True)  # a regression blocks only this thread
    reader.start()
    reader.join(10)
    assert outcome and isinstance(outcome[0], IntegrityKeyError) and "not a regular file" in str(outcome[0])


def test_a_seal_that_could_not_be_written_is_not_written_later(tmp_path: Path) -> None:
    """A real failed write (the file size limit, RLIMIT_FSIZE, standing in for a full disk) of a seal: the
    write fails loudly, and the seal must not be left buffered and written with the next one, out of
    place. The unsealed line then shows as the docs say, and nothing after it."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import resource, signal, sys
        from pathlib import Path
        from audit.integrity import IntegrityKey, chain_path
        from audit.sinks import AuditWriteError, TextLineSink
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal
        target = Path(sys.argv[1])
        sink = TextLineSink(target, integrity=IntegrityKey(b"k" * 43))
        sink.write_line("one")
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (chain_path(target).stat().st_size, hard))
        try:
            sink.write_line("two")  # the short data line fits, its seal does not
        except AuditWriteError as exc:
            print("refused:", exc)
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        sink.write_line("three")
        sink.close()
    """)
    root = str(Path(__file__).resolve().parents[3])
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "a.log")], cwd=root,
                          env={"PYTHONPATH": root}, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.startswith("refused: cannot write audit record to"), done.stdout + done.stderr
    assert (tmp_path / "a.log").read_text() == "one\ntwo\nthree\n"
    assert problems(tmp_path) == [("a.log", 2, Reason.INSERTED)]


def move_pair(src: Path, dst: Path, *, copy: bool = False) -> None:
    for a, b in ((src, dst), (chain_path(src), chain_path(dst))):
        if copy:
            b.write_bytes(a.read_bytes())
        else:
            a.rename(b)


def renamed(d: Path, names: list[Path] | None = None) -> dict[str, str]:
    reports = verify_paths(names, KEY) if names is not None else verify(d)
    return {p.file: p.detail for r in reports for p in r.problems if p.reason is Reason.RENAMED}


def test_normal_rotation_keeps_each_file_at_the_place_its_headers_name(tmp_path: Path) -> None:
    write_trail(tmp_path)
    names = sorted(p.name for p in tmp_path.glob("a.log*"))
    for name in names:
        header = json.loads(chain_path(tmp_path / name).read_text().splitlines()[0])
        assert header["v"] == 2 and header["file"] == "a.log"
        position = 0 if name == "a.log" else int(name.rsplit(".", 1)[1])
        assert header["g"] == len(names) - 1 - position  # file 0 is the first the family had
    assert renamed(tmp_path) == {}


def test_a_file_renamed_within_its_family_or_swapped_says_where_it_belongs(tmp_path: Path) -> None:
    write_trail(tmp_path)
    newest = json.loads(chain_path(tmp_path / "a.log").read_text().splitlines()[0])["g"]
    move_pair(tmp_path / "a.log.3", tmp_path / "swap")
    move_pair(tmp_path / "a.log.2", tmp_path / "a.log.3")
    move_pair(tmp_path / "swap", tmp_path / "a.log.2")
    found = renamed(tmp_path)
    assert set(found) == {"a.log.2", "a.log.3"}
    assert found["a.log.2"] == f"not sealed under this name: it is file {newest - 3} of a.log, so a.log.3 beside " \
                               f"a.log (file {newest})"
    # An archive copied over a newer one: the copy says it is older; nothing else is passed as renamed.
    for name in ("a.log.2", "a.log.3"):
        (tmp_path / name).unlink()
        chain_path(tmp_path / name).unlink()
    write_trail(tmp_path / "fresh")
    move_pair(tmp_path / "fresh" / "a.log.3", tmp_path / "fresh" / "a.log.1", copy=True)
    assert set(renamed(tmp_path / "fresh")) == {"a.log.1"}


def test_a_file_verified_alone_under_another_family_name_says_so(tmp_path: Path) -> None:
    write_trail(tmp_path)
    move_pair(tmp_path / "a.log.3", tmp_path / "b.log.3", copy=True)
    found = renamed(tmp_path, [tmp_path / "b.log.3"])
    assert list(found) == ["b.log.3"] and found["b.log.3"].startswith("sealed as part of a.log, not under this name")
    # Alone, a file only knows its family's name: its place needs the newer files beside it.
    move_pair(tmp_path / "a.log.3", tmp_path / "a.log.9", copy=True)
    assert renamed(tmp_path, [tmp_path / "a.log.9"]) == {}
    assert set(renamed(tmp_path, [tmp_path / "a.log.9", tmp_path / "a.log.1"])) == {"a.log.9"}


def test_format_1_chains_without_a_generation_still_verify_and_an_upgrade_numbers_the_next_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    with monkeypatch.context() as m:  # what kgov wrote before the format had `g`
        m.setattr("audit.integrity.CHAIN_FORMAT_VERSION", 1)
        m.setattr("audit.sinks.file_generation", lambda *_: None)
        write_trail(tmp_path, runs=2)
    old = sorted(p.name for p in tmp_path.glob("a.log*"))
    assert all(json.loads(x).get("g") is None for p in tmp_path.glob(".*.chain") for x in p.read_text().splitlines())
    assert all(r.ok for r in verify(tmp_path))
    write_trail(tmp_path, runs=1)  # upgraded: continues the format-1 file, then numbers new files from 0
    reports = verify(tmp_path)
    assert all(r.ok for r in reports), [str(p) for r in reports for p in r.problems]
    headers = [json.loads(chain_path(tmp_path / "a.log").read_text().splitlines()[0])]
    assert headers[0]["v"] == 2 and type(headers[0]["g"]) is int and len(reports) > len(old)



def test_a_mac_respelled_in_another_base64_form_does_not_verify(tmp_path: Path) -> None:
    """base64url decoders also take `/` for `_`, `+` for `-` and any value of the last character's unused
    bits: a chain file edited that way decodes to the same MACs, and must fail all the same (found by the
    property test above in CI)."""
    from audit.integrity import AuditFile, verify_family

    _valid_family(tmp_path)
    data, chain = (tmp_path / "a.log").read_bytes(), chain_path(tmp_path / "a.log").read_bytes()
    assert verify_family([AuditFile("a.log", ".a.log.chain", data, chain)], KEY)[0].ok
    first = json.loads(chain.split(b"\n")[0])
    mac = first["m"]
    respelled = [mac[:-1] + chr(ord(mac[-1]) ^ 1)]  # the last character's unused low bit
    respelled += [mac.replace(a, b, 1) for a, b in (("_", "/"), ("-", "+")) if a in mac]
    for other in respelled:
        edited = chain.replace(f'"m":"{mac}"'.encode(), f'"m":"{other}"'.encode(), 1)
        assert edited != chain
        assert not verify_family([AuditFile("a.log", ".a.log.chain", data, edited)], KEY)[0].ok, other
