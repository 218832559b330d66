"""Tamper evidence for the audit events on a Kafka topic: a hash chain per writer, signed with Ed25519 at
checkpoints.

`audit.integrity` chains the audit files with an HMAC, so whoever can verify can also forge. The topic's
readers (a SIEM, an auditor) get a signature they check with a public key instead: each record carries a
header `kgov-seal` (binary, 58 bytes plus the writer id, and 64 more on a checkpoint):

    version (1) | key id (8) | epoch (8) | seq (8, big-endian) | prev (32) | writer length (1) | writer
        | signature (64, version 2: on checkpoints only; version 1: always)

- key id: the first 8 bytes of SHA-256 over the raw public key, so a verifier given several keys (one per
  node) picks the right one, and a record sealed under a key it was not given is reported as such;
- writer: who wrote it (`[audit] kafka_seal_writer`, by default the host name); epoch: 8 random bytes drawn at
  each sink start, so each start of each process is a chain of its own (several gateways and control planes
  write one topic);
- seq: 0, 1, 2, ... per epoch, contiguous; prev: the link (below) of the record sealed before it in the same
  epoch, 32 zero bytes for seq 0;
- the link of a record is the SHA-256 of `_DOMAIN`, the fields above (without the signature) and the SHA-256
  of the record's value: every record's link covers the whole chain before it;
- signature: Ed25519 (RFC 8032) over that same message (so over the link): it proves the checkpoint and,
  through the prev links, every earlier record of its epoch.

Version 2 (this one): one signature costs 50-80 µs, a link a few; the sink (`Sealer.seal`) signs the last
record of each attempt after which its queue is empty, and under sustained load at least every
`CHECKPOINT_RECORDS` records or `CHECKPOINT_S` seconds (docs/benchmarks.md, audit_kafka_seal_bench). Version 1
(builds of 2026-11-22 before it) signed every record; such records still verify: each is a checkpoint.

The key is not in the signed message: Kafka's record key is the event's `source`, which the value carries.
The topic name is not either, so a mirrored copy of the topic (MirrorMaker, another name) still verifies.

`verify_records` (pure: records in, report out) rebuilds every chain from the records of all partitions (a
writer's events go to the partition of their `source`), walks each back from its checkpoints, and reports per
chain: records verified (a checkpoint, or linked to a verified record after it), records after the chain's
last checkpoint ("not yet signed": neither verified nor disproved; a writer that has gone idle has none),
duplicates (delivery is at least once: a resent record is the same bytes), gaps in seq (records deleted or
lost), records out of order within a partition, a start that is missing, two different records sealed for
one seq, a link that does not match, and records cut off from every checkpoint by a gap. Records with no
seal, a malformed seal, an unknown key, a bad signature, or an unsigned record that contradicts the link a
verified record carries are reported per topic with their partition and offset. What it cannot see: the
newest records of a chain deleted (nothing comes after them to show the gap) unless an anchor printed by an
earlier verify (`Anchor`) is passed back; what is in a chain's unsigned tail until its next checkpoint;
anything done by whoever holds a private key.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import secrets
import struct
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from audit.key_files import link_new_key, read_owner_only

SEAL_HEADER = "kgov-seal"
SEAL_VERSION = 2
_READABLE_VERSIONS = (1, 2)
# Under sustained load (the sink's queue never empty), a checkpoint at least this often. Measured
# (docs/benchmarks.md): at 1000 a signature adds under 0.1 µs per record, and an attempt (at most 1000
# records) carries about one; a process killed under load leaves at most this many records, or this many
# seconds of them, unsigned.
CHECKPOINT_RECORDS = 1000
CHECKPOINT_S = 1.0
_DOMAIN = b"kgov audit kafka seal\n"
# version, key id, epoch, seq, prev, writer length
_FIXED = struct.Struct(">B8s8sQ32sB")
_SIGNATURE_BYTES = 64
_ZERO = bytes(32)
MAX_WRITER_BYTES = 255
# The writer id may hold colons: the three fields after it are fixed.
_ANCHOR = re.compile(r"(?P<writer>\S{1,255}):(?P<epoch>[0-9a-f]{16}):(?P<seq>\d{1,20}):(?P<link>[0-9a-f]{64})")


class SealKeyError(Exception):
    """The seal's key file is missing, unreadable or not an Ed25519 key. The message names the file, never
    its content."""


class SealFormatError(ValueError):
    """A `kgov-seal` header that cannot be parsed."""


def key_id(public_key: Ed25519PublicKey) -> bytes:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).digest()[:8]


def public_key_pem(private_key: Ed25519PrivateKey) -> str:
    """The public half (SubjectPublicKeyInfo PEM) to hand to the topic's verifiers."""
    return private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode("ascii")


# ---------------------------------------------------------------------------------------------- key files


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 private key (PKCS#8 PEM, unencrypted) of an existing owner-only file."""
    data = read_owner_only(path, "audit seal key file", SealKeyError)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):  # never echo what the file holds
        raise SealKeyError(f"audit seal key file {path} does not hold an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SealKeyError(f"audit seal key file {path} holds a {type(key).__name__.lstrip('_')}, not an Ed25519 "
                           "private key")
    return key


def generated_private_key(path: Path) -> Ed25519PrivateKey:
    """The key at `path`, generated there (0600) first when absent: as `kgov.private_files.local_secret`, a
    new key is written whole under a name of its own and linked into place, so a crash never leaves half a
    key, and two first starts at once (control plane and gateway) both end up with the one linked first."""
    if not path.exists():
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        link_new_key(path, pem)
    return load_private_key(path)


def load_public_keys(paths: Iterable[Path]) -> dict[bytes, Ed25519PublicKey]:
    """Verifiers' keys by key id: public keys (PEM), or a private key file (its public half)."""
    keys: dict[bytes, Ed25519PublicKey] = {}
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise SealKeyError(f"cannot read the public key file {path}: {exc.strerror}") from None
        public: object
        try:
            public = serialization.load_pem_public_key(data)
        except (ValueError, TypeError, UnsupportedAlgorithm):
            try:  # a private key given by mistake still only verifies; it is not echoed
                public = load_private_key(path).public_key()
            except SealKeyError:
                raise SealKeyError(f"{path} does not hold a PEM public key") from None
        if not isinstance(public, Ed25519PublicKey):
            raise SealKeyError(f"{path} holds a {type(public).__name__.lstrip('_')}, not an Ed25519 public key")
        keys[key_id(public)] = public
    return keys


# ---------------------------------------------------------------------------------------------- sealing


def _signed_message(fields: bytes, value: bytes) -> bytes:
    return _DOMAIN + fields + hashlib.sha256(value).digest()


class Sealer:
    """One writer epoch's chain: links record values in order, signing checkpoints. No I/O and not
    thread-safe: the sink's shipper thread alone calls `seal`, once per record (a record sent again keeps
    its seal)."""

    def __init__(self, private_key: Ed25519PrivateKey, writer: str,
                 token: Callable[[int], bytes] = secrets.token_bytes, *,
                 checkpoint_records: int = CHECKPOINT_RECORDS, checkpoint_s: float = CHECKPOINT_S,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        raw = writer.encode("utf-8")
        if not 1 <= len(raw) <= MAX_WRITER_BYTES:
            raise ValueError(f"an audit seal writer id is 1-{MAX_WRITER_BYTES} bytes of UTF-8")
        if checkpoint_records < 1 or checkpoint_s < 0:
            raise ValueError("an audit seal checkpoint is at least every record and never more than 0 s apart")
        self._key = private_key
        self._key_id = key_id(private_key.public_key())
        self.writer = writer
        self._writer = raw
        self.epoch = token(8)
        self.seq = 0  # of the next record
        self.prev = _ZERO
        self.checkpoint_records = checkpoint_records
        self.checkpoint_s = checkpoint_s
        self._monotonic = monotonic
        self.unsigned = 0  # records sealed since the last checkpoint
        self._signed_at = monotonic()

    @property
    def size(self) -> int:
        """Most bytes of a seal (a checkpoint's)."""
        return _FIXED.size + len(self._writer) + _SIGNATURE_BYTES

    def __repr__(self) -> str:  # the key stays out of it
        return f"Sealer(writer={self.writer!r}, epoch={self.epoch.hex()}, seq={self.seq})"

    def seal(self, value: bytes, *, last: bool = True) -> bytes:
        """The `kgov-seal` header value for the next record, whose value is `value`. `last`: nothing else is
        waiting to be sealed after it (the sink's queue runs empty): it is a checkpoint. Otherwise it is one
        only when `checkpoint_records` records have been sealed since the last or `checkpoint_s` has passed."""
        fields = _FIXED.pack(SEAL_VERSION, self._key_id, self.epoch, self.seq, self.prev, len(self._writer)) \
            + self._writer
        message = _signed_message(fields, value)
        self.prev = hashlib.sha256(message).digest()
        self.seq += 1
        self.unsigned += 1
        if not (last or self.unsigned >= self.checkpoint_records
                or self._monotonic() - self._signed_at >= self.checkpoint_s):
            return fields
        self.unsigned = 0
        self._signed_at = self._monotonic()
        return fields + self._key.sign(message)


@dataclass(frozen=True, slots=True)
class Seal:
    key_id: bytes
    epoch: bytes
    seq: int
    prev: bytes
    writer: str
    fields: bytes = field(repr=False)
    signature: bytes | None = field(repr=False)  # None: version 2, not a checkpoint
    version: int = SEAL_VERSION


def parse_seal(header: bytes) -> Seal:
    """The fields of a `kgov-seal` header (version 1 or 2); SealFormatError saying what is wrong."""
    if len(header) < _FIXED.size + 1:
        raise SealFormatError(f"{len(header)} bytes, shorter than any seal")
    version, kid, epoch, seq, prev, writer_len = _FIXED.unpack_from(header)
    if version not in _READABLE_VERSIONS:
        raise SealFormatError(f"version {version}, not one of {', '.join(map(str, _READABLE_VERSIONS))}")
    end = _FIXED.size + writer_len
    if writer_len == 0:
        raise SealFormatError("an empty writer id")
    lengths = (end + _SIGNATURE_BYTES,) if version == 1 else (end, end + _SIGNATURE_BYTES)
    if len(header) not in lengths:
        raise SealFormatError(f"{len(header)} bytes, not the {' or '.join(map(str, lengths))} its writer length "
                              "says")
    try:
        writer = header[_FIXED.size:end].decode("utf-8")
    except UnicodeDecodeError:
        raise SealFormatError("the writer id is not UTF-8") from None
    return Seal(kid, epoch, seq, prev, writer, header[:end], header[end:] or None, version)


# ---------------------------------------------------------------------------------------------- verifying


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """What the verifier needs of one consumed record."""

    partition: int
    offset: int
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


ChainId = tuple[str, bytes]  # writer, epoch


@dataclass(frozen=True, slots=True)
class Anchor:
    """A chain's newest record as `verify` printed it (`WRITER:EPOCH:SEQ:LINK`), kept elsewhere: passed back,
    the records up to it must still be there, so a cut tail shows."""

    writer: str
    epoch: bytes
    seq: int
    link: bytes

    def __str__(self) -> str:
        return f"{self.writer}:{self.epoch.hex()}:{self.seq}:{self.link.hex()}"

    @staticmethod
    def parse(text: str) -> Anchor:
        match = _ANCHOR.fullmatch(text.strip())
        if match is None:
            raise ValueError(f"{text!r} is not an anchor WRITER:EPOCH(16 hex):SEQ:LINK(64 hex) printed by verify")
        return Anchor(match["writer"], bytes.fromhex(match["epoch"]), int(match["seq"]), bytes.fromhex(match["link"]))


@dataclass(slots=True)
class ChainReport:
    writer: str
    epoch: bytes
    key_id: bytes
    verified: int = 0
    duplicates: int = 0
    first_seq: int = 0
    last_seq: int = 0
    # Records after the chain's last checkpoint: not verified, not disproved (`pending_seqs`: first, last).
    pending: int = 0
    pending_seqs: tuple[int, int] | None = None
    newest: Anchor | None = None  # the newest verified record
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def name(self) -> str:
        return f"writer {self.writer} epoch {self.epoch.hex()}"


@dataclass(slots=True)
class TopicReport:
    records: int = 0
    chains: list[ChainReport] = field(default_factory=list)
    # (partition, offset, what): records that verify as no writer's
    unsigned: list[tuple[int, int]] = field(default_factory=list)
    malformed: list[tuple[int, int, str]] = field(default_factory=list)
    forged: list[tuple[int, int, str]] = field(default_factory=list)
    anchors_missing: list[Anchor] = field(default_factory=list)

    @property
    def pending(self) -> int:
        """Records not yet signed (after their chain's last checkpoint): not counted as verified, nor by `ok`."""
        return sum(c.pending for c in self.chains)

    @property
    def ok(self) -> bool:
        return (not self.unsigned and not self.malformed and not self.forged and not self.anchors_missing
                and all(c.ok for c in self.chains))


@dataclass(slots=True)
class _Sealed:
    """What a chain keeps of a record whose seal parsed under a given key (a topic may hold millions)."""

    seq: int
    prev: bytes
    link: bytes
    partition: int
    offset: int
    signed: bool  # a checkpoint whose signature verified; after `_resolve`, any verified record


@dataclass(slots=True)
class _Chain:
    report: ChainReport
    first: dict[int, _Sealed] = field(default_factory=dict)  # the first record seen of each seq
    others: dict[int, list[_Sealed]] = field(default_factory=dict)  # other records claiming a seq (rare)


def verify_records(records: Iterable[TopicRecord], keys: Mapping[bytes, Ed25519PublicKey], *,
                   anchors: Iterable[Anchor] = (), missing_start_ok: bool = False) -> TopicReport:
    """Checks every record's seal and every writer epoch's chain (module docstring). `records` in offset
    order within each partition. `missing_start_ok`: a chain starting past seq 0 is a note, not a problem
    (a topic whose retention deletes old records)."""
    report = TopicReport()
    chains: dict[ChainId, _Chain] = {}
    for record in records:
        report.records += 1
        where = (record.partition, record.offset)
        seals = [v for k, v in record.headers if k == SEAL_HEADER]
        if not seals:
            report.unsigned.append(where)
            continue
        if len(seals) > 1 or seals[0] is None:
            report.malformed.append((*where, "several kgov-seal headers" if len(seals) > 1 else "an empty kgov-seal"))
            continue
        try:
            seal = parse_seal(seals[0])
        except SealFormatError as exc:
            report.malformed.append((*where, str(exc)))
            continue
        public = keys.get(seal.key_id)
        if public is None:
            report.forged.append((*where, f"sealed under key {seal.key_id.hex()}, which was not given"))
            continue
        message = _signed_message(seal.fields, record.value or b"")
        if seal.signature is not None:
            try:
                public.verify(seal.signature, message)
            except InvalidSignature:
                report.forged.append((*where, f"bad signature (claims writer {seal.writer} epoch {seal.epoch.hex()} "
                                              f"seq {seal.seq})"))
                continue
        chain_id = (seal.writer, seal.epoch)
        chain = chains.get(chain_id)
        if chain is None:
            chain = chains[chain_id] = _Chain(ChainReport(seal.writer, seal.epoch, seal.key_id))
        sealed = _Sealed(seal.seq, seal.prev, hashlib.sha256(message).digest(), *where, seal.signature is not None)
        if seal.key_id != chain.report.key_id:
            chain.report.problems.append(f"seq {seal.seq} at {_at(sealed)} is sealed under key {seal.key_id.hex()}, "
                                         f"the chain's other records under {chain.report.key_id.hex()}")
        earlier = chain.first.get(seal.seq)
        if earlier is None:
            chain.first[seal.seq] = sealed
            continue
        same = next((e for e in (earlier, *chain.others.get(seal.seq, ())) if e.link == sealed.link), None)
        if same is None:
            chain.others.setdefault(seal.seq, []).append(sealed)
        else:
            chain.report.duplicates += 1  # sent again after an answer was lost: the same bytes
            same.signed = same.signed or sealed.signed
    for _, chain in sorted(chains.items(), key=lambda item: item[0]):
        kept = _resolve(chain, report)
        _check_chain(chain.report, kept, missing_start_ok)
        report.chains.append(chain.report)
        chain.first = kept  # what the anchors are checked against
    for anchor in anchors:
        found = chains[(anchor.writer, anchor.epoch)].first.get(anchor.seq) \
            if (anchor.writer, anchor.epoch) in chains else None
        if found is None or found.link != anchor.link or not found.signed:
            report.anchors_missing.append(anchor)
    return report



def _resolve(chain: _Chain, topic: TopicReport) -> dict[int, _Sealed]:
    """Walks the chain back from its newest seq: a record is verified when it is a checkpoint or when the
    verified record of the next seq links to it. Returns the chain's record of each seq (`signed` set on
    every verified one); records that contradict a verified one go to `topic.forged`."""
    report = chain.report
    checkpoints = [s for s, e in chain.first.items() if e.signed] + [
        s for s, others in chain.others.items() if any(e.signed for e in others)]
    last_checkpoint = max(checkpoints, default=-1)
    kept: dict[int, _Sealed] = {}
    uncovered: list[int] = []
    pending: list[int] = []
    expect: tuple[int, bytes] | None = None  # the seq and link the verified record after it says
    for seq in sorted(chain.first, reverse=True):
        variants = [chain.first[seq], *chain.others.get(seq, ())]
        linked = expect is not None and expect[0] == seq
        covered = [v for v in variants if v.signed or (linked and expect is not None and v.link == expect[1])]
        pick = covered[0] if covered else variants[0]
        for v in (covered or variants)[1:]:
            report.problems.append(f"two different records sealed as seq {seq}: at {_at(pick)} and {_at(v)}")
        claims = f"claims writer {report.writer} epoch {report.epoch.hex()} seq {seq}"
        if covered:
            for v in variants:
                if not any(v is c for c in covered):
                    topic.forged.append((v.partition, v.offset, f"{claims} unsigned, but the verified seq {seq + 1} "
                                         "links to another record" if linked else f"{claims} unsigned, but "
                                         "another record is that seq's checkpoint"))
            for v in covered:
                v.signed = True
            kept[seq] = pick
            expect = (seq - 1, pick.prev)
            continue
        expect = None
        if linked:  # the verified next record names another link for this seq: these were changed
            for v in variants:
                topic.forged.append((v.partition, v.offset, f"{claims}, but the verified seq {seq + 1} links to "
                                     "another record"))
            continue
        kept[seq] = pick
        (pending if seq > last_checkpoint else uncovered).append(seq)
    report.verified = sum(1 for e in kept.values() if e.signed)
    if pending:
        report.pending, report.pending_seqs = len(pending), (min(pending), max(pending))
    if uncovered:
        report.problems.append(f"{len(uncovered)} record(s) not covered by any checkpoint (a gap or a changed "
                               f"record cuts them off from the checkpoint after them): seq {_ranges(uncovered)}")
    return kept


def _ranges(seqs: Iterable[int]) -> str:
    spans: list[list[int]] = []
    for seq in sorted(seqs):
        if spans and seq == spans[-1][1] + 1:
            spans[-1][1] = seq
        else:
            spans.append([seq, seq])
    shown = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans[:20])
    return shown + (f" and {len(spans) - 20} more ranges" if len(spans) > 20 else "")


def _at(sealed: _Sealed) -> str:
    return f"partition {sealed.partition} offset {sealed.offset}"


def _check_chain(report: ChainReport, chain: dict[int, _Sealed], missing_start_ok: bool) -> None:
    if not chain:  # every record of it was shown changed
        report.problems.append("no record of the chain stands")
        return
    seqs = sorted(chain)
    report.first_seq, report.last_seq = seqs[0], seqs[-1]
    newest = next((chain[s] for s in reversed(seqs) if chain[s].signed), None)
    if newest is not None:
        report.newest = Anchor(report.writer, report.epoch, newest.seq, newest.link)
    if seqs[0] != 0:
        message = f"the chain's start is missing: its first record is seq {seqs[0]} (seq 0-{seqs[0] - 1} deleted)"
        (report.notes if missing_start_ok else report.problems).append(message)
    elif chain[0].prev != _ZERO:
        report.problems.append(f"seq 0 at {_at(chain[0])} does not start a chain (its previous link is not zero)")
    gaps = [(a + 1, b - 1) for a, b in itertools.pairwise(seqs) if b > a + 1]
    if gaps:
        lost = sum(last - first + 1 for first, last in gaps)
        shown = ", ".join(str(first) if first == last else f"{first}-{last}" for first, last in gaps[:20])
        report.problems.append(f"{lost} record(s) missing (deleted or lost): seq {shown}"
                               + (f" and {len(gaps) - 20} more gaps" if len(gaps) > 20 else ""))
    for a, b in itertools.pairwise(seqs):
        if b == a + 1 and chain[b].prev != chain[a].link:
            report.problems.append(f"seq {b} at {_at(chain[b])} does not link to seq {a} at {_at(chain[a])}")
    # Within a partition a writer's records arrive in seq order (one request in flight, batches written
    # whole); a record that comes after a higher seq of its chain in the same partition was moved.
    highest: dict[int, int] = {}
    for sealed in sorted(chain.values(), key=lambda e: (e.partition, e.offset)):
        top = highest.get(sealed.partition)
        if top is not None and sealed.seq < top:
            report.problems.append(f"reordered: seq {sealed.seq} at {_at(sealed)} comes after seq {top} in "
                                   f"partition {sealed.partition}")
        else:
            highest[sealed.partition] = sealed.seq
