"""Tamper evidence for the audit files: an HMAC-SHA-256 chain per writer, kept in a sidecar file.

Why a sidecar: `kafka-authorizer.log` must stay byte-for-byte what Kafka's log4j layout writes (Kafka's
tooling, grep-based SIEM rules and `spark_compliance`'s ingest read it), and `events.jsonl` plain CloudEvents.
So the data files are left untouched and every audit file `NAME` (and each rotated `NAME.<i>`) has a chain
file `.NAME.chain` (`.NAME.<i>.chain`) beside it, rotated with it. Its name starts with a dot: Spark's file
source and shell globs such as `events.jsonl*` skip it.

A chain file holds one JSON object per line, each sealed by a MAC over the previous seal of the same writer:

- `start`: a writer (one sink in one process) begins: writer id, host, pid, process start, key id, and the
  last seal the file held (`after`), so a restart chains to what the previous run wrote last;
- `cont`: the same writer continues in a new file after a rotation (carries the previous seal, so every file
  verifies on its own and the link between two files is checked when both are present);
- `r`: one data line, by its SHA-256 and where it ends in the file; `end`: the writer rotated this file away;
  `stop`: the sink was closed.

Several writers may append to one file (the control plane and each `kgov users` command write
`events.jsonl`): each has its own chain and the verifier matches lines to seals by hash, per writer in order,
and checks that lines of different writers were not moved past each other (`_crossed_writers`).

What is detected: a changed, inserted, deleted or reordered line or seal; a rotated file whose tail was cut
(no `end`); a middle file deleted or files reordered (the `cont` link); a file under a name or at a place in
its family other than the one its headers seal (`file`, `g`: `_check_names`); a chain sealed with another key.
What is not: records cut from the end of the newest file of a writer still running (or of a writer that
crashed) when no later `start` anchors them; the oldest files deleted (indistinguishable from rotation
beyond `backups`); anything by someone who holds the key. `kgov audit verify` prints the newest seal of each current
file: kept elsewhere and passed back with `--anchor` (`missing_anchors`), it is the anchor for the tail.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import contextlib
import enum
import fcntl
import functools
import hashlib
import heapq
import hmac
import itertools
import json
import os
import re
import secrets
import socket
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from audit.key_files import read_owner_only

CHAIN_FORMAT_VERSION = 2  # 2: headers carry `g`, the file's place in its family; 1 is still verified
KEY_MIN_CHARS = 32
_ZERO = bytes(32)
_KEY_ID_LABEL = b"kgov audit integrity key id"
_ROTATED = re.compile(r"(?P<base>.+?)\.(?P<index>\d+)")
# The audit files kgov writes (control plane, `gateway-` for the gateway), rotated to NAME.1, NAME.2, ...
AUDIT_FILE_PATTERN = r"(gateway-)?(events\.jsonl|kafka-authorizer\.log|kafka-request\.log)(\.\d+)?"
_AUDIT_FILE = re.compile(AUDIT_FILE_PATTERN)


class IntegrityKeyError(Exception):
    """The chain key is missing, unreadable or too short. The message names the file, never its content."""


@dataclass(frozen=True, slots=True)
class IntegrityKey:
    secret: bytes = field(repr=False)
    # HMAC-SHA-256 (RFC 2104) with the padded key's inner and outer hash states computed once: the same
    # MAC as `hmac.digest`, about three times faster per record here (OpenSSL 3 sets a context up per call).
    _pads: tuple[hashlib._Hash, hashlib._Hash] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        block = (hashlib.sha256(self.secret).digest() if len(self.secret) > 64 else self.secret).ljust(64, b"\0")
        object.__setattr__(self, "_pads", (hashlib.sha256(bytes(b ^ 0x36 for b in block)),
                                           hashlib.sha256(bytes(b ^ 0x5C for b in block))))

    def mac(self, message: bytes) -> bytes:
        inner, outer = self._pads[0].copy(), self._pads[1].copy()
        inner.update(message)
        outer.update(inner.digest())
        return outer.digest()

    @property
    def key_id(self) -> str:
        """Names the key in `start` records without revealing it: verifying with another key says so."""
        return self.mac(_KEY_ID_LABEL).hex()[:16]


def lock_path(data_file: Path) -> Path:
    """`.events.jsonl.lock` for `events.jsonl`: its writers' rotation lock (`audit.rotation`)."""
    return data_file.with_name(f".{data_file.name}.lock")


def chain_path(data_file: Path) -> Path:
    """`.events.jsonl.chain` for `events.jsonl`, `.events.jsonl.1.chain` for `events.jsonl.1`."""
    return data_file.with_name(f".{data_file.name}.chain")


def load_key(path: Path) -> IntegrityKey:
    """The key of an existing key file (`kgov audit verify`; the writers' key is generated by `kgov.settings`)."""
    raw = read_owner_only(path, "audit integrity key file", IntegrityKeyError)
    try:
        text = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise IntegrityKeyError(f"cannot read the audit integrity key file {path}: not a text key") from None
    if len(text) < KEY_MIN_CHARS:
        raise IntegrityKeyError(f"{path} holds a key of {len(text)} characters, fewer than the {KEY_MIN_CHARS} "
                                f"needed; restore the key the audit files were sealed with")
    return IntegrityKey(text.encode("ascii"))


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def _b64(raw: bytes) -> str:
    """base64url without padding (43 characters for 32 bytes)."""
    return binascii.b2a_base64(raw, newline=False).translate(_URLSAFE).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    """The bytes `_b64` wrote as `text`; ValueError for any other spelling. Only the canonical one: the
    decoder also takes `/` for `_`, `+` for `-` and any value of a last character's unused low bits, so
    an edited chain file could otherwise decode to the same MAC and verify."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64(raw) != text:
        raise ValueError("not the canonical base64url spelling")
    return raw


def _canonical(entry: dict[str, Any]) -> bytes:
    return json.dumps({k: v for k, v in entry.items() if k != "m"}, sort_keys=True,
                      separators=(",", ":")).encode("utf-8")


def _seal(key: IntegrityKey, prev: bytes, entry: dict[str, Any]) -> bytes:
    return key.mac(prev + _canonical(entry))


def line_digest(line: bytes) -> str:
    return _b64(hashlib.sha256(line).digest())


_WRITER_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")


@dataclass(frozen=True, slots=True)
class WriterInfo:
    writer: str
    host: str
    pid: int
    started: str

    def __post_init__(self) -> None:
        if not _WRITER_ID.fullmatch(self.writer):  # `Chain.record` writes it into JSON unescaped
            raise ValueError("a writer id is 1-64 characters of [0-9A-Za-z_-]")

    @staticmethod
    def of_this_process(now: datetime | None = None, token: Callable[[int], str] = secrets.token_hex) -> WriterInfo:
        ts = (now or datetime.now(UTC)).astimezone(UTC)
        return WriterInfo(token(6), socket.gethostname(), os.getpid(), ts.isoformat(timespec="milliseconds"))


class Chain:
    """One writer's chain: turns data lines into chain-file lines. No I/O; the sink writes what it returns
    and calls `commit` once that is on disk, so a failed write does not advance the chain."""

    def __init__(self, key: IntegrityKey, info: WriterInfo) -> None:
        self._key = key
        self._key_id = key.key_id
        self.info = info
        self.seq = -1
        self.mac = _ZERO
        self._pending: tuple[int, bytes] | None = None

    def _entry(self, entry: dict[str, Any], prev: bytes) -> str:
        mac = _seal(self._key, prev, entry)
        entry["m"] = _b64(mac)
        self._pending = (entry["n"], mac)
        return json.dumps(entry, separators=(",", ":"))

    def header(self, file_name: str, after: dict[str, Any] | None = None,
               prefix: dict[str, Any] | None = None, generation: int | None = None,
               previous_generation: int | None = None) -> str:
        """`start` the first time, `cont` after a rotation; `after` is the file's last seal before us,
        `prefix` (`prefix_digest`) what the file held before it had a chain file, `generation`
        (`file_generation`) which file of its family this is: with `file_name`, what binds the seals to
        the name the file has as it rotates. A `cont` names the file the writer continues from
        (`previous_generation`): one that other writers' rotations have since pushed out is then told
        from one deleted from the middle."""
        entry: dict[str, Any] = {
            "v": CHAIN_FORMAT_VERSION, "k": "start" if self.seq < 0 else "cont", "w": self.info.writer,
            "n": self.seq + 1, "prev": _b64(self.mac), "host": self.info.host, "pid": self.info.pid,
            "started": self.info.started, "key": self._key_id, "file": file_name,
        }
        if generation is not None:
            entry["g"] = generation
        if previous_generation is not None and self.seq >= 0:
            entry["pg"] = previous_generation
        if after is not None and self.seq < 0:
            entry["after"] = after
        if prefix is not None and self.seq < 0:
            entry["prefix"] = prefix
        return self._entry(entry, self.mac)

    def record(self, line: str, end: int | None = None) -> str:
        """The seal of `line`; `end` is where the line ends in its file (bytes), so that lines removed from or
        added to the file before it, by any writer, show (`o`; the sinks always give it)."""
        # The hot path: the canonical form (`_canonical`: sorted keys, no spaces) written directly, since
        # every value is JSON-safe as it is (base64url, an int, a checked writer id). Verified the slow way.
        n = self.seq + 1
        where = "" if end is None else f',"o":{int(end)}'
        body = f'{{"h":"{line_digest(line.encode("utf-8"))}","k":"r","n":{n}{where},"w":"{self.info.writer}"'
        mac = self._key.mac(self.mac + body.encode("ascii") + b"}")
        self._pending = (n, mac)
        return f'{body},"m":"{_b64(mac)}"}}'

    def marker(self, kind: str) -> str:
        """`end` (this file is rotated away) or `stop` (the sink is closed)."""
        return self._entry({"k": kind, "w": self.info.writer, "n": self.seq + 1}, self.mac)

    def commit(self) -> None:
        if self._pending is not None:
            self.seq, self.mac = self._pending
            self._pending = None


def _first_header(chain_file: Path) -> dict[str, Any] | None:
    try:
        with open(chain_file, "rb") as fh:
            head = fh.read(64 * 1024)
    except FileNotFoundError:
        return None
    for raw in head.splitlines():
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if isinstance(doc, dict) and doc.get("k") in ("start", "cont"):
            return doc
    return None


def file_generation(chain_file: Path, older_chain_file: Path) -> int | None:
    """Which file of its family a chain file seals (`g` of its headers): the one its first header names when
    it has one (None for a format-1 file, which names none), else one more than the file rotated before it
    (`older_chain_file`, NAME.1's), else 0. So NAME.<i> is file `g(NAME) - i` while rotations move it up."""
    first = _first_header(chain_file)
    if first is not None:
        return first["g"] if type(first.get("g")) is int else None
    older = _first_header(older_chain_file)
    return older["g"] + 1 if older is not None and type(older.get("g")) is int else 0


def last_seal(chain_file: Path) -> dict[str, Any] | None:
    """The newest entry of a chain file as `{"w", "n", "m"}`, for the next writer's `start` to anchor it."""
    try:
        with open(chain_file, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 4096))
            tail = fh.read()
    except FileNotFoundError:
        return None
    for raw in reversed(tail.splitlines()):
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if (isinstance(doc, dict) and isinstance(doc.get("w"), str) and type(doc.get("n")) is int
                and isinstance(doc.get("m"), str)):
            return {"w": doc["w"], "n": doc["n"], "m": doc["m"]}
    return None


# ---------------------------------------------------------------------------------------------------------
# Verification: pure functions over the bytes of each file of a family, oldest first.


class Reason(enum.StrEnum):
    MODIFIED = "modified"
    INSERTED = "inserted"
    DELETED = "deleted"
    REORDERED = "reordered"
    TRUNCATED = "truncated"
    TRUNCATED_MIDDLE_FILE = "truncated middle file"
    DELETED_MIDDLE_FILE = "deleted middle file"
    UNSEALED = "not sealed"
    RENAMED = "renamed"
    UNKNOWN_KEY = "unknown key"
    NO_CHAIN = "no chain file"
    NO_DATA = "data file deleted"


@dataclass(frozen=True, slots=True)
class Problem:
    file: str
    line: int
    reason: Reason
    detail: str

    def __str__(self) -> str:
        return f"{self.file} line {self.line}: {self.reason}: {self.detail}"


@dataclass(frozen=True, slots=True)
class FileReport:
    file: str
    records: int
    writers: int
    problems: tuple[Problem, ...]
    notes: tuple[str, ...] = ()
    head: str | None = None  # `writer:seq:seal` of the newest entry: an anchor to keep elsewhere
    newest: bool = False  # the family's current file (NAME, not NAME.<i>)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True, slots=True)
class AuditFile:
    """One file of a family as read from disk: the data bytes and the chain-file bytes (None: missing)."""
    name: str
    chain_name: str
    data: bytes | None
    chain: bytes | None


@dataclass(slots=True)
class _Segment:
    """One writer's run of entries in one file."""
    writer: str
    kind: str
    first_n: int
    prev: bytes
    header_line: int
    last_n: int
    last_mac: bytes
    last_kind: str
    sealed_name: str | None = None  # `file` of the header: the name the file had when the writer joined it
    generation: int | None = None  # `g` of the header (format 2): which file of its family this is
    previous_generation: int | None = None  # `pg` of a `cont`: the file the writer continues from


@dataclass(slots=True)
class _Entry:
    line: int  # 1-based line in the chain file
    doc: dict[str, Any]
    data_line: int | None = None


def _split_lines(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def _parse_chain(f: AuditFile, problems: list[Problem]) -> list[_Entry]:
    entries: list[_Entry] = []
    for i, raw in enumerate(_split_lines(f.chain or b""), 1):
        try:
            doc = json.loads(raw)
            ok = (isinstance(doc, dict) and _flat(doc) and isinstance(doc.get("w"), str)
                  and type(doc.get("n")) is int and isinstance(doc.get("m"), str)
                  and doc.get("k") in ("start", "cont", "r", "end", "stop")
                  and (doc["k"] != "r" or isinstance(doc.get("h"), str)))
        except (ValueError, RecursionError):
            ok = False
        if not ok:
            problems.append(Problem(f.chain_name, i, Reason.MODIFIED, "not a chain entry"))
            continue
        entries.append(_Entry(i, doc))
    return entries


def _flat(doc: dict[str, Any]) -> bool:
    """What a writer writes: scalars, and objects of scalars (`after`, `prefix`). Anything nested deeper is
    refused here: sealing it again for the check could exceed the recursion limit that parsing just met."""
    for v in doc.values():
        if type(v) is list or (type(v) is dict and any(type(x) in (list, dict) for x in v.values())):
            return False
    return True


def _match_lines(f: AuditFile, entries: list[_Entry], problems: list[Problem]) -> int:
    """Pairs data lines with `r` entries (per writer, in order); reports the first line that does not pair."""
    queues: dict[str, list[_Entry]] = {}
    for e in entries:
        if e.doc["k"] == "r":
            queues.setdefault(e.doc["w"], []).append(e)
    heads = dict.fromkeys(queues, 0)
    # Each writer's next seal, by the digest it seals: a line finds its writer without a scan of all writers
    # (a crafted chain file may name a writer per entry). Entries a skip left behind are dropped when met.
    waiting: dict[str, list[tuple[int, str]]] = {}
    for w, q in queues.items():
        heapq.heappush(waiting.setdefault(q[0].doc["h"], []), (q[0].line, w))
    lines = _split_lines(f.data or b"")
    digests = [line_digest(line) for line in lines]
    first: Problem | None = None
    unsealed = _unsealed_prefix(f, entries, lines)
    if unsealed is not None:
        first, skip = unsealed
        digests = [""] * skip + digests[skip:]
    for i, digest in enumerate(digests):
        if not digest:
            continue
        # Of several writers whose next seal is this line (the same text twice), the one that sealed first.
        taken: str | None = None
        candidates = waiting.get(digest, [])
        while candidates and taken is None:
            at_line, w = heapq.heappop(candidates)
            if heads[w] < len(queues[w]) and queues[w][heads[w]].line == at_line:
                taken = w
        if taken is not None:
            queues[taken][heads[taken]].data_line = i + 1
            heads[taken] += 1
            if heads[taken] < len(queues[taken]):
                head = queues[taken][heads[taken]]
                heapq.heappush(waiting.setdefault(head.doc["h"], []), (head.line, taken))
            continue
        if first is not None:
            continue
        later = next(((w, j) for w, q in queues.items() for j in range(heads[w] + 1, len(q))
                      if q[j].doc["h"] == digest), None)
        if later is not None:
            w, j = later
            skipped = {q.doc["h"] for q in queues[w][heads[w]:j]}
            moved = any(d in skipped for d in digests[i + 1:])
            reason = Reason.REORDERED if moved else Reason.DELETED
            detail = ("this line was sealed after one that comes later" if moved
                      else f"{j - heads[w]} sealed line(s) before this one are missing")
            first = Problem(f.name, i + 1, reason, detail)
            queues[w][j].data_line = i + 1
            heads[w] = j + 1
            _wait_for_head(waiting, queues[w], heads[w])
            continue
        rest = set(digests[i + 1:])
        # A writer whose next sealed line is nowhere further down: this line took its place.
        replaced = next((w for w, q in queues.items() if heads[w] < len(q) and q[heads[w]].doc["h"] not in rest),
                        None)
        if replaced is not None:
            first = Problem(f.name, i + 1, Reason.MODIFIED, "the line does not match its seal")
            queues[replaced][heads[replaced]].data_line = i + 1
            heads[replaced] += 1
            _wait_for_head(waiting, queues[replaced], heads[replaced])
        else:
            unsealed_tail = i == len(digests) - 1
            first = Problem(f.name, i + 1, Reason.INSERTED,
                            "the line has no seal" + (" (or its writer stopped before sealing it)"
                                                      if unsealed_tail else ""))
    if first is None:
        missing = sum(len(q) - heads[w] for w, q in queues.items())
        if missing:
            first = Problem(f.name, len(lines) + 1, Reason.TRUNCATED,
                            f"{missing} sealed line(s) at the end of the file are missing")
    if first is None:
        first = _crossed_writers(f, entries)
    if first is not None:
        problems.append(first)
    return len(lines)


def _moved_lines(f: AuditFile, entries: list[_Entry]) -> Problem | None:
    """Every line sealed and in order, but not where it was written (a seal's `o`): lines before it were
    removed or added with their seals, such as all of a writer that has stopped (nothing else names its
    last entry). Checked last, when nothing more precise was found."""
    ends = list(itertools.accumulate(len(line) + 1 for line in _split_lines(f.data or b"")))
    for e in sorted((e for e in entries if e.data_line is not None), key=lambda e: e.data_line or 0):
        assert e.data_line is not None
        end, actual = e.doc.get("o"), ends[e.data_line - 1]
        if type(end) is int and end != actual:
            if end > actual:
                return Problem(f.name, e.data_line, Reason.DELETED,
                               f"{end - actual} byte(s) of lines before this one are missing (any writer's)")
            return Problem(f.name, e.data_line, Reason.INSERTED,
                           f"{actual - end} byte(s) of lines before this one were added")
    return None


def _wait_for_head(waiting: dict[str, list[tuple[int, str]]], queue: list[_Entry], head: int) -> None:
    if head < len(queue):
        heapq.heappush(waiting.setdefault(queue[head].doc["h"], []), (queue[head].line, queue[head].doc["w"]))


def _crossed_writers(f: AuditFile, entries: list[_Entry]) -> Problem | None:
    """Lines of different writers moved past each other (each writer's own order is checked by pairing).

    A writer writes its line and then seals it, one line at a time, so its line comes after its previous
    chain entry (its header or last seal) in time. If another writer's seal is earlier in the chain file than
    that previous entry, that writer's line was written before this one: it must come first in the data
    file. Lines and seals of concurrent writers may otherwise cross (a line written, another writer's line
    written and sealed, then the first sealed): that is allowed."""
    previous: dict[str, int] = {}
    after: dict[int, int] = {}  # data line -> chain line of its writer's entry before its seal
    sealed_at: dict[int, int] = {}  # data line -> chain line of its seal
    for e in entries:
        if e.data_line is not None:
            after[e.data_line] = previous.get(e.doc["w"], 0)
            sealed_at[e.data_line] = e.line
        previous[e.doc["w"]] = e.line
    bound = 0
    for data_line in sorted(sealed_at):
        if sealed_at[data_line] < bound:
            return Problem(f.name, data_line, Reason.REORDERED,
                           "this line was sealed before a line above it (by another writer) was written")
        bound = max(bound, after[data_line])
    return None


def _unsealed_prefix(f: AuditFile, entries: list[_Entry], lines: list[bytes]) -> tuple[Problem, int] | None:
    """The lines a file held before its chain began (`start`'s `prefix`): integrity was off when they were
    written, or the chain file was deleted and a writer started again. Never a pass: they are reported,
    and compared with the digest taken when sealing began."""
    prefix = entries[0].doc.get("prefix") if entries and entries[0].doc["k"] == "start" else None
    if not isinstance(prefix, dict):
        return None
    size, total, count = prefix.get("bytes"), 0, 0
    while type(size) is int and count < len(lines) and total < size:
        total += len(lines[count]) + 1
        count += 1
    covered = b"".join(x + b"\n" for x in lines[:count])
    if total != size or _b64(hashlib.sha256(covered).digest()) != prefix.get("h"):
        return Problem(f.name, 1, Reason.MODIFIED, "lines written before sealing began were changed since"), count
    return Problem(f.name, 1, Reason.UNSEALED,
                   f"the first {count} line(s) were written before sealing began (integrity turned on, or the "
                   f"chain file deleted and the writer restarted); unchanged since"), count


def prefix_digest(data_file: Path, size: int) -> dict[str, Any]:
    """What a `start` records of the lines a file already holds when its chain file is new."""
    digest = hashlib.sha256()
    with open(data_file, "rb") as fh:
        remaining = size
        while remaining and (chunk := fh.read(min(remaining, 1 << 20))):
            digest.update(chunk)
            remaining -= len(chunk)
    return {"bytes": size, "h": _b64(digest.digest())}


def _check_chain(f: AuditFile, entries: list[_Entry], key: IntegrityKey,
                 problems: list[Problem]) -> dict[str, _Segment]:
    segments: dict[str, _Segment] = {}
    foreign: set[str] = set()

    def at(e: _Entry) -> tuple[str, int]:
        return (f.name, e.data_line) if e.data_line is not None else (f.chain_name, e.line)

    def report(e: _Entry, reason: Reason, detail: str) -> None:
        name, line = at(e)
        problems.append(Problem(name, line, reason, detail))

    # Per writer, its sequence numbers in this file (sorted) and, per entry, the writer's next entry: what the
    # checks below ask about the rest of the file, without a scan per entry (a crafted file must not hang us).
    numbers: dict[str, list[int]] = {}
    following: list[_Entry | None] = [None] * len(entries)
    last_of: dict[str, int] = {}
    for idx, e in enumerate(entries):
        numbers.setdefault(e.doc["w"], []).append(e.doc["n"])
        if (before := last_of.get(e.doc["w"])) is not None:
            following[before] = e
        last_of[e.doc["w"]] = idx
    for ns in numbers.values():
        ns.sort()

    for idx, e in enumerate(entries):
        d, w, kind = e.doc, e.doc["w"], e.doc["k"]
        if kind in ("start", "cont"):
            if w in segments:
                report(e, Reason.INSERTED, f"a second header for writer {w} in one file")
                continue
            try:
                prev = _unb64(str(d.get("prev", "")))
            except ValueError:
                prev = b""
            if d.get("key") != key.key_id:
                foreign.add(w)
                report(e, Reason.UNKNOWN_KEY, f"writer {w} sealed with key {d.get('key')}, not {key.key_id}")
            elif not hmac.compare_digest(_seal(key, prev, d), _unb64_safe(d["m"])):
                report(e, Reason.MODIFIED, f"the header of writer {w} does not verify")
            elif kind == "start" and (d["n"] != 0 or prev != _ZERO):
                report(e, Reason.MODIFIED, f"writer {w}'s start is not the beginning of its chain")
            segments[w] = _Segment(w, kind, d["n"], prev, e.line, d["n"], _unb64_safe(d["m"]), kind,
                                   d["file"] if isinstance(d.get("file"), str) else None,
                                   d["g"] if type(d.get("g")) is int else None,
                                   d["pg"] if type(d.get("pg")) is int else None)
            continue
        seg = segments.get(w)
        if seg is None:
            report(e, Reason.INSERTED, f"writer {w} has no header in this file")
            continue
        if w in foreign:
            seg.last_n, seg.last_mac, seg.last_kind = d["n"], _unb64_safe(d["m"]), kind
            continue
        mac = _unb64_safe(d["m"])
        if d["n"] <= seg.last_n:
            report(e, Reason.REORDERED, f"writer {w}'s record {d['n']} comes after its record {seg.last_n}")
        elif d["n"] > seg.last_n + 1:
            ns = numbers[w]
            pos = bisect.bisect_right(ns, seg.last_n)
            if pos < len(ns) and ns[pos] < d["n"]:  # a skipped record is elsewhere in this file
                report(e, Reason.REORDERED, f"writer {w}'s record {d['n']} comes before its record {seg.last_n + 1}")
            else:
                report(e, Reason.DELETED, f"writer {w}'s records {seg.last_n + 1}..{d['n'] - 1} are missing")
        elif not hmac.compare_digest(_seal(key, seg.last_mac, d), mac):
            nxt = following[idx]
            if (nxt is not None and nxt.doc["n"] == d["n"]
                    and hmac.compare_digest(_seal(key, seg.last_mac, nxt.doc), _unb64_safe(nxt.doc["m"]))):
                report(e, Reason.INSERTED, f"a seal of writer {w} that its chain skips")
                continue
            report(e, Reason.MODIFIED, "the seal does not verify")
        seg.last_n, seg.last_mac, seg.last_kind = d["n"], mac, kind
    return segments


def _unb64_safe(text: str) -> bytes:
    try:
        return _unb64(text)
    except ValueError:
        return b""


def _check_after(f: AuditFile, entries: list[_Entry], problems: list[Problem]) -> None:
    """A `start` names the file's last seal before it: that entry must still be there, earlier."""
    seen: set[tuple[str, int, str]] = set()
    for e in entries:
        after = e.doc.get("after")
        if e.doc["k"] == "start" and isinstance(after, dict):
            ref = (str(after.get("w")), after.get("n") if type(after.get("n")) is int else -1, str(after.get("m")))
            if ref not in seen:
                problems.append(Problem(f.chain_name, e.line, Reason.DELETED,
                                        f"entries before writer {e.doc['w']} started (up to writer {ref[0]}'s "
                                        f"record {ref[1]}) are missing"))
        seen.add((e.doc["w"], e.doc["n"], e.doc["m"]))


@dataclass(slots=True)
class _Checked:
    """One file after its own checks, before the links between files."""
    name: str
    chain_name: str
    lines: int
    segments: dict[str, _Segment]
    problems: list[Problem]
    notes: list[str]
    head: str | None
    last_kind: str | None = None  # of the file's last entry: `end` when it was rotated away whole


def _check_file(f: AuditFile, key: IntegrityKey) -> _Checked:
    problems: list[Problem] = []
    if f.chain is None:
        problems.append(Problem(f.name, 1, Reason.NO_CHAIN,
                                f"{f.chain_name} is missing (deleted, or written with integrity off)"))
        return _Checked(f.name, f.chain_name, len(_split_lines(f.data or b"")), {}, problems, [], None)
    if f.data is None:
        problems.append(Problem(f.name, 1, Reason.NO_DATA, f"{f.chain_name} seals a file that is gone"))
    entries = _parse_chain(f, problems)
    lines = _match_lines(f, entries, problems)
    segments = _check_chain(f, entries, key, problems)
    _check_after(f, entries, problems)
    if not problems and (moved := _moved_lines(f, entries)) is not None:
        problems.append(moved)
    head = f"{entries[-1].doc['w']}:{entries[-1].doc['n']}:{entries[-1].doc['m']}" if entries else None
    return _Checked(f.name, f.chain_name, lines, segments, problems, [], head,
                    entries[-1].doc["k"] if entries else None)


def _check_link(files: list[_Checked], index: int, seg: _Segment, oldest: int | None) -> None:
    """A `cont` names the seal its writer ended the previous file with: that file must be the older one."""
    here = files[index]
    found = next((j for j, c in enumerate(files) if j != index and (s := c.segments.get(seg.writer)) is not None
                  and s.last_n == seg.first_n - 1 and hmac.compare_digest(s.last_mac, seg.prev)), None)
    if found is not None:
        if found > index:
            here.problems.append(Problem(here.chain_name, seg.header_line, Reason.REORDERED,
                                         f"writer {seg.writer} continues here from {files[found].name}, "
                                         f"a newer file"))
        return
    if index == 0 or (seg.previous_generation is not None and oldest is not None
                      and seg.previous_generation < oldest):
        # The oldest file here, or a writer whose file other writers' rotations pushed out of the family
        # while it wrote nothing (its `cont` names a file older than any here).
        here.notes.append(f"writer {seg.writer} continues from a file no longer here (rotated out)")
        return
    older = [c for c in files[:index] if seg.writer in c.segments]
    p = older[-1].segments[seg.writer] if older else None
    if p is not None and p.last_n >= seg.first_n:
        here.problems.append(Problem(here.chain_name, seg.header_line, Reason.REORDERED,
                                     f"{older[-1].name} holds later records of writer {seg.writer} than this file"))
        return
    # The writer's previous file is missing, or its tail is: a whole older file ends with an `end`.
    prior = older[-1] if older else files[index - 1]
    complete = (p.last_kind if p is not None else prior.last_kind) == "end"
    if complete:
        here.problems.append(Problem(here.chain_name, seg.header_line, Reason.DELETED_MIDDLE_FILE,
                                     f"a file between {prior.name} and {here.name} is missing"))
    else:
        here.problems.append(Problem(prior.name, prior.lines + 1, Reason.TRUNCATED_MIDDLE_FILE,
                                     f"writer {seg.writer}'s records before {seg.first_n} were cut from the end "
                                     f"of {prior.name}"))


def verify_family(files: Iterable[AuditFile], key: IntegrityKey) -> list[FileReport]:
    """`files` are one audit file and its rotations, oldest first (`NAME.<backups>` ... `NAME.1`, `NAME`).
    Each is read and checked in turn (a family may be `backups + 1` files of `max_bytes`); only what
    links files together is kept."""
    checked = [_check_file(f, key) for f in files]
    oldest = min((s.generation for c in checked for s in c.segments.values() if s.generation is not None),
                 default=None)
    seen: dict[str, tuple[int, str]] = {}  # writer -> its highest record so far, and where
    for index, c in enumerate(checked):
        for seg in c.segments.values():
            if seg.kind == "cont":
                _check_link(checked, index, seg, oldest)
            before = seen.get(seg.writer)
            if before is not None and seg.first_n <= before[0]:
                c.problems.append(Problem(c.chain_name, seg.header_line, Reason.REORDERED,
                                          f"writer {seg.writer}'s records from {seg.first_n} also appear in "
                                          f"the older {before[1]}"))
            seen[seg.writer] = (max(seg.last_n, before[0] if before else -1), c.name)
        if index < len(checked) - 1:
            # A rotated file's writers end with `end` (rotated away) or `stop` (closed). A writer that goes on
            # in a newer file is checked by its `cont` link; one that does not crashed, or its tail was cut.
            c.notes.extend(f"writer {w} ends without closing (a crash, or its last records were cut)"
                           for w, seg in c.segments.items() if seg.last_kind not in ("end", "stop"))
    _check_names(checked)
    return [FileReport(c.name, c.lines, len(c.segments),
                       tuple(sorted(c.problems, key=lambda p: (p.file != c.name, p.line))),
                       tuple(c.notes), c.head, newest=index == len(checked) - 1)
            for index, c in enumerate(checked)]


def _position(name: str, sealed_name: str) -> int | None:
    """Where `name` stands in the family of `sealed_name` (0: the file itself, i: `sealed_name.<i>`), or None
    when it is not one of that family's names."""
    if name == sealed_name:
        return 0
    rest = name[len(sealed_name) + 1:] if name.startswith(sealed_name + ".") else ""
    return int(rest) if rest.isascii() and rest.isdigit() else None


def _check_names(files: list[_Checked]) -> None:
    """Each file's headers name the file they were written into (`file`, always the family's current name)
    and, from format 2, which file of the family it is (`g`, one more per rotation). So the name a file has
    now must be `file` or `file.<i>`, and i must be how many rotations it is older than the newest file here
    (its `g` that much lower): a file renamed, copied under another name or swapped with another shows,
    while the renames of rotation keep both true."""
    placed: list[tuple[_Checked, _Segment, int]] = []  # file, the header that places it, its position
    for c in files:
        named = [s for s in c.segments.values() if s.sealed_name is not None]
        for s in named:
            if _position(c.name, s.sealed_name or "") is None:
                c.problems.append(Problem(c.name, 1, Reason.RENAMED, f"sealed as part of {s.sealed_name}, "
                                          f"not under this name (header of writer {s.writer})"))
        numbered = [s for s in named if s.generation is not None]
        if len({(s.sealed_name, s.generation) for s in numbered}) > 1:
            c.problems.append(Problem(c.name, 1, Reason.RENAMED, "its headers name different files: "
                                      + ", ".join(sorted({f"{s.sealed_name} file {s.generation}" for s in numbered}))))
        elif numbered and (position := _position(c.name, numbered[0].sealed_name or "")) is not None:
            placed.append((c, numbered[0], position))
    if not placed:
        return
    newest, top, top_position = placed[-1]
    assert top.generation is not None
    reference = top.generation + top_position  # the generation the family's current file has
    for c, s, position in placed:
        assert s.generation is not None and s.sealed_name is not None
        belongs = reference - s.generation
        if s.sealed_name == top.sealed_name and belongs == position:
            continue
        if s.sealed_name != top.sealed_name:
            where = f"it is file {s.generation} of {s.sealed_name}, {newest.name} file {top.generation} of " \
                    f"{top.sealed_name}"
        elif belongs < 0:
            where = f"it is file {s.generation} of {s.sealed_name}, newer than {newest.name} (file {top.generation})"
        else:
            where = (f"it is file {s.generation} of {s.sealed_name}, so {s.sealed_name}"
                     f"{f'.{belongs}' if belongs else ''} beside {newest.name} (file {top.generation})")
        c.problems.append(Problem(c.name, 1, Reason.RENAMED, f"not sealed under this name: {where}"))


def _base_and_index(name: str) -> tuple[str, int]:
    m = _ROTATED.fullmatch(name)
    return (m["base"], int(m["index"])) if m else (name, 0)


def family_order(paths: Iterable[Path]) -> dict[str, list[Path]]:
    """Groups data files by their base name (`events.jsonl.3` -> `events.jsonl`), oldest first."""
    families: dict[str, list[tuple[int, Path]]] = {}
    for p in paths:
        base, index = _base_and_index(p.name)
        families.setdefault(str(p.with_name(base)), []).append((index, p))
    return {base: [p for _, p in sorted(members, key=lambda t: -t[0])] for base, members in families.items()}


def audit_files_in(directory: Path) -> list[Path]:
    """The audit files of a directory: kgov's own names, those with a chain file, and their rotations."""
    names = {p.name for p in directory.iterdir() if p.is_file()}
    found = {n for n in names if _AUDIT_FILE.fullmatch(n)}
    found |= {data_file_of(directory / n).name for n in names if n.startswith(".") and n.endswith(".chain")}
    bases = {_base_and_index(n)[0] for n in found}
    found |= {n for n in names if not n.startswith(".") and _base_and_index(n)[0] in bases}
    return [directory / n for n in sorted(found)]


def data_file_of(path: Path) -> Path:
    """`events.jsonl` for `.events.jsonl.chain` (a chain file named on the command line); else `path`."""
    name = path.name
    if name.startswith(".") and name.endswith(".chain") and len(name) > len("..chain"):
        return path.with_name(name[1:-len(".chain")])
    return path


def verify_paths(paths: Iterable[Path], key: IntegrityKey) -> list[FileReport]:
    """The files named (and their chain files), by family, each family read under its writers' lock
    (`_verify_locked`)."""
    unique = dict.fromkeys(data_file_of(p) for p in paths)
    reports: list[FileReport] = []
    for base, members in sorted(family_order(unique).items()):
        reports.extend(_verify_locked(Path(base), members.copy, key))
    return reports


def verify_directory(directory: Path, key: IntegrityKey) -> list[FileReport]:
    """Every audit family of `directory` (`audit_files_in`), each listed again under its writers' lock: a
    listing taken while a writer rotates may hold a file under its old and its new name, or neither."""
    reports: list[FileReport] = []
    for base in sorted(family_order(audit_files_in(directory))):
        reports.extend(_verify_locked(Path(base), functools.partial(_family_members, directory, base), key))
    return reports


def _family_members(directory: Path, base: str) -> list[Path]:
    named = (p for p in audit_files_in(directory) if _base_and_index(p.name)[0] == Path(base).name)
    return family_order(named).get(base, [])


@contextlib.contextmanager
def _shared_lock(data_file: Path) -> Iterator[None]:
    """The writers' rotation lock (`audit.rotation`), shared: while it is held no line is written without
    its seal yet and no rotation is half done. Not taken when there is none to open (an archive; a reader
    the 0600 file shuts out): then as before there was one."""
    try:
        fd = os.open(lock_path(data_file), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        yield
        return
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # and its lock


def _verify_locked(base: Path, members: Callable[[], list[Path]], key: IntegrityKey) -> list[FileReport]:
    """Opens `members()` and their chain files under the family's lock and reads them after, up to the
    sizes they had then: a consistent view of a trail that is being written and rotated (a rename does not
    move an open file), one file in memory at a time."""
    with contextlib.ExitStack() as files:
        def opened(path: Path) -> tuple[BinaryIO, int] | None:
            try:
                fh = files.enter_context(open(path, "rb"))
            except FileNotFoundError:
                return None
            return fh, os.fstat(fh.fileno()).st_size

        def read(sized: tuple[BinaryIO, int] | None) -> bytes | None:
            return None if sized is None else sized[0].read(sized[1])

        with _shared_lock(base):
            snapshot = [(p, opened(p), opened(chain_path(p))) for p in members()]
        return verify_family((AuditFile(p.name, chain_path(p).name, read(data), read(side))
                              for p, data, side in snapshot), key)


def missing_anchors(paths: Iterable[Path], anchors: Iterable[str]) -> list[str]:
    """The anchors (`writer:seq:seal`, a `FileReport.head` kept from an earlier verify) that no chain file of
    `paths` holds any more: records were cut from the end, or the files were replaced."""
    wanted = set(anchors)
    for path in dict.fromkeys(data_file_of(p) for p in paths):
        try:
            raw = chain_path(path).read_bytes()
        except FileNotFoundError:
            continue
        for line in _split_lines(raw):
            if not wanted:
                return []
            try:
                doc = json.loads(line)
                wanted.discard(f"{doc['w']}:{doc['n']}:{doc['m']}")
            except (ValueError, RecursionError, TypeError, KeyError):
                continue
    return sorted(wanted)
