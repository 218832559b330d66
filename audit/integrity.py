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
- `r`: one data line, by its SHA-256; `end`: the writer rotated this file away; `stop`: the sink was closed.

Several writers may append to one file (the control plane and a `kgov scram` command both write
`events.jsonl`): each has its own chain and the verifier matches lines to seals by hash, per writer in order.

What is detected: a changed, inserted, deleted or reordered line or seal; a rotated file whose tail was cut
(no `end`); a middle file deleted or files reordered (the `cont` link); a chain sealed with another key.
What is not: records cut from the end of the newest file of a writer still running (or of a writer that
crashed) when no later `start` anchors them; the oldest files deleted (indistinguishable from rotation
beyond `backups`); anything by someone who holds the key. `kgov audit verify` prints the newest seal of each
file: kept elsewhere, it is the anchor for the tail.
"""

from __future__ import annotations

import base64
import contextlib
import enum
import hashlib
import hmac
import json
import os
import re
import secrets
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

CHAIN_FORMAT_VERSION = 1
KEY_MIN_CHARS = 32
_ZERO = bytes(32)
_KEY_ID_LABEL = b"kgov audit integrity key id"
_ROTATED = re.compile(r"(?P<base>.+?)\.(?P<index>\d+)")


class IntegrityKeyError(Exception):
    """The chain key is missing, unreadable or too short. The message names the file, never its content."""


@dataclass(frozen=True, slots=True)
class IntegrityKey:
    secret: bytes = field(repr=False)

    @property
    def key_id(self) -> str:
        """Names the key in `start` records without revealing it: verifying with another key says so."""
        return hmac.new(self.secret, _KEY_ID_LABEL, hashlib.sha256).hexdigest()[:16]


def chain_path(data_file: Path) -> Path:
    """`.events.jsonl.chain` for `events.jsonl`, `.events.jsonl.1.chain` for `events.jsonl.1`."""
    return data_file.with_name(f".{data_file.name}.chain")


def load_key(path: Path) -> IntegrityKey:
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        raise IntegrityKeyError(f"audit integrity key file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise IntegrityKeyError(f"cannot read the audit integrity key file {path}: "
                                f"{getattr(exc, 'strerror', None) or 'not a text key'}") from None
    if len(text) < KEY_MIN_CHARS:
        raise IntegrityKeyError(f"{path} holds a key of {len(text)} characters, fewer than the {KEY_MIN_CHARS} "
                                f"needed; restore the key the audit files were sealed with")
    return IntegrityKey(text.encode("ascii"))


def load_or_create_key(path: Path) -> IntegrityKey:
    """The writers' key: generated on first use (43 random characters, 0600, written whole under a
    temporary name then linked, as `kgov up`'s other local keys), the same on every later start."""
    if not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        staged = path.with_name(path.name + ".new")
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()  # left by a crash between writing and linking
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="ascii") as fh:
                fh.write(secrets.token_urlsafe(32) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            with contextlib.suppress(FileExistsError):  # never replaces a key another start wrote meanwhile
                os.link(staged, path)
        finally:
            staged.unlink()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(fd, 0o600)  # a copy or an older version may have left it readable to others
    finally:
        os.close(fd)
    return load_key(path)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _canonical(entry: dict[str, Any]) -> bytes:
    return json.dumps({k: v for k, v in entry.items() if k != "m"}, sort_keys=True,
                      separators=(",", ":")).encode("utf-8")


def _seal(key: bytes, prev: bytes, entry: dict[str, Any]) -> bytes:
    return hmac.new(key, prev + _canonical(entry), hashlib.sha256).digest()


def line_digest(line: bytes) -> str:
    return _b64(hashlib.sha256(line).digest())


@dataclass(frozen=True, slots=True)
class WriterInfo:
    writer: str
    host: str
    pid: int
    started: str

    @staticmethod
    def of_this_process(now: datetime | None = None, token: Callable[[int], str] = secrets.token_hex) -> WriterInfo:
        ts = (now or datetime.now(UTC)).astimezone(UTC)
        return WriterInfo(token(6), socket.gethostname(), os.getpid(), ts.isoformat(timespec="milliseconds"))


class Chain:
    """One writer's chain: turns data lines into chain-file lines. No I/O; the sink writes what it returns
    and calls `commit` once that is on disk, so a failed write does not advance the chain."""

    def __init__(self, key: IntegrityKey, info: WriterInfo) -> None:
        self._key = key.secret
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

    def header(self, file_name: str, after: dict[str, Any] | None = None) -> str:
        """`start` the first time, `cont` after a rotation; `after` is the file's last seal before us."""
        entry: dict[str, Any] = {
            "v": CHAIN_FORMAT_VERSION, "k": "start" if self.seq < 0 else "cont", "w": self.info.writer,
            "n": self.seq + 1, "prev": _b64(self.mac), "host": self.info.host, "pid": self.info.pid,
            "started": self.info.started, "key": self._key_id, "file": file_name,
        }
        if after is not None and self.seq < 0:
            entry["after"] = after
        return self._entry(entry, self.mac)

    def record(self, line: str) -> str:
        entry = {"k": "r", "w": self.info.writer, "n": self.seq + 1,
                 "h": line_digest(line.encode("utf-8"))}
        return self._entry(entry, self.mac)

    def marker(self, kind: str) -> str:
        """`end` (this file is rotated away) or `stop` (the sink is closed)."""
        return self._entry({"k": kind, "w": self.info.writer, "n": self.seq + 1}, self.mac)

    def commit(self) -> None:
        if self._pending is not None:
            self.seq, self.mac = self._pending
            self._pending = None


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
        except ValueError:
            continue
        if isinstance(doc, dict) and {"w", "n", "m"} <= doc.keys():
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
            ok = (isinstance(doc, dict) and isinstance(doc.get("w"), str) and type(doc.get("n")) is int
                  and isinstance(doc.get("m"), str) and doc.get("k") in ("start", "cont", "r", "end", "stop")
                  and (doc["k"] != "r" or isinstance(doc.get("h"), str)))
        except ValueError:
            ok = False
        if not ok:
            problems.append(Problem(f.chain_name, i, Reason.MODIFIED, "not a chain entry"))
            continue
        entries.append(_Entry(i, doc))
    return entries


def _match_lines(f: AuditFile, entries: list[_Entry], problems: list[Problem]) -> int:
    """Pairs data lines with `r` entries (per writer, in order); reports the first line that does not pair."""
    queues: dict[str, list[_Entry]] = {}
    for e in entries:
        if e.doc["k"] == "r":
            queues.setdefault(e.doc["w"], []).append(e)
    heads = dict.fromkeys(queues, 0)
    lines = _split_lines(f.data or b"")
    digests = [line_digest(line) for line in lines]
    first: Problem | None = None
    for i, digest in enumerate(digests):
        taken = next((w for w, q in queues.items() if heads[w] < len(q) and q[heads[w]].doc["h"] == digest), None)
        if taken is not None:
            queues[taken][heads[taken]].data_line = i + 1
            heads[taken] += 1
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
            continue
        pending = {q[heads[w]].doc["h"] for w, q in queues.items() if heads[w] < len(q)}
        if pending and not pending & set(digests[i + 1:]):
            first = Problem(f.name, i + 1, Reason.MODIFIED, "the line does not match its seal")
            w = next(w for w, q in queues.items() if heads[w] < len(q))
            queues[w][heads[w]].data_line = i + 1
            heads[w] += 1
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
    if first is not None:
        problems.append(first)
    return len(lines)


def _check_chain(f: AuditFile, entries: list[_Entry], key: IntegrityKey,
                 problems: list[Problem]) -> dict[str, _Segment]:
    segments: dict[str, _Segment] = {}
    foreign: set[str] = set()

    def at(e: _Entry) -> tuple[str, int]:
        return (f.name, e.data_line) if e.data_line is not None else (f.chain_name, e.line)

    def report(e: _Entry, reason: Reason, detail: str) -> None:
        name, line = at(e)
        problems.append(Problem(name, line, reason, detail))

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
            elif not hmac.compare_digest(_seal(key.secret, prev, d), _unb64_safe(d["m"])):
                report(e, Reason.MODIFIED, f"the header of writer {w} does not verify")
            elif kind == "start" and (d["n"] != 0 or prev != _ZERO):
                report(e, Reason.MODIFIED, f"writer {w}'s start is not the beginning of its chain")
            segments[w] = _Segment(w, kind, d["n"], prev, e.line, d["n"], _unb64_safe(d["m"]), kind)
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
            report(e, Reason.DELETED, f"writer {w}'s records {seg.last_n + 1}..{d['n'] - 1} are missing")
        elif not hmac.compare_digest(_seal(key.secret, seg.last_mac, d), mac):
            following = next((x for x in entries[idx + 1:] if x.doc["w"] == w), None)
            if (following is not None and following.doc["n"] == d["n"]
                    and hmac.compare_digest(_seal(key.secret, seg.last_mac, following.doc),
                                            _unb64_safe(following.doc["m"]))):
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
            ref = (after.get("w"), after.get("n"), after.get("m"))
            if ref not in seen:
                problems.append(Problem(f.chain_name, e.line, Reason.DELETED,
                                        f"entries before writer {e.doc['w']} started (up to writer {ref[0]}'s "
                                        f"record {ref[1]}) are missing"))
        seen.add((e.doc["w"], e.doc["n"], e.doc["m"]))


def verify_family(files: Sequence[AuditFile], key: IntegrityKey) -> list[FileReport]:
    """`files` are one audit file and its rotations, oldest first (`NAME.<backups>` ... `NAME.1`, `NAME`)."""
    reports: list[FileReport] = []
    last: dict[str, tuple[_Segment, str]] = {}  # writer -> its segment in the newest file seen so far
    lines_in: dict[str, int] = {}
    for index, f in enumerate(files):
        problems: list[Problem] = []
        notes: list[str] = []
        if f.chain is None:
            problems.append(Problem(f.name, 1, Reason.NO_CHAIN,
                                    f"{f.chain_name} is missing (deleted, or written with integrity off)"))
            reports.append(FileReport(f.name, len(_split_lines(f.data or b"")), 0, tuple(problems)))
            continue
        if f.data is None:
            problems.append(Problem(f.name, 1, Reason.NO_DATA, f"{f.chain_name} seals a file that is gone"))
        entries = _parse_chain(f, problems)
        count = lines_in[f.name] = _match_lines(f, entries, problems)
        segments = _check_chain(f, entries, key, problems)
        _check_after(f, entries, problems)
        for w, seg in segments.items():
            if seg.kind != "cont":
                last[w] = (seg, f.name)
                continue
            before = last.get(w)
            if before is None:
                if index == 0:
                    notes.append(f"writer {w} continues from a file no longer here (rotated out)")
                else:
                    problems.append(Problem(f.chain_name, seg.header_line, Reason.DELETED_MIDDLE_FILE,
                                            f"writer {w}'s records before {seg.first_n} are in no older file"))
            else:
                prior, prior_name = before
                if prior.last_n >= seg.first_n:
                    problems.append(Problem(f.chain_name, seg.header_line, Reason.REORDERED,
                                            f"{prior_name} holds later records of writer {w} than this file"))
                elif prior.last_n < seg.first_n - 1 or not hmac.compare_digest(prior.last_mac, seg.prev):
                    if prior.last_kind == "end":
                        problems.append(Problem(f.chain_name, seg.header_line, Reason.DELETED_MIDDLE_FILE,
                                                f"a file between {prior_name} and {f.name} is missing"))
                    else:
                        problems.append(Problem(prior_name, lines_in[prior_name] + 1,
                                                Reason.TRUNCATED_MIDDLE_FILE,
                                                f"writer {w}'s records after {prior.last_n} were cut from "
                                                f"{prior_name}"))
            last[w] = (seg, f.name)
        head = None
        if entries:
            e = entries[-1]
            head = f"{e.doc['w']}:{e.doc['n']}:{e.doc['m']}"
        if index < len(files) - 1:
            # A rotated file's writers end with `end` (rotated away) or `stop` (closed). A writer that goes on
            # in a newer file is checked by its `cont` link; one that does not crashed, or its tail was cut.
            notes.extend(f"writer {w} ends without closing (a crash, or its last records were cut)"
                         for w, seg in segments.items() if seg.last_kind not in ("end", "stop"))
        problems.sort(key=lambda p: (p.file != f.name, p.line))
        reports.append(FileReport(f.name, count, len(segments), tuple(problems), tuple(notes), head))
    return reports


def family_order(paths: Iterable[Path]) -> dict[str, list[Path]]:
    """Groups data files by their base name (`events.jsonl.3` -> `events.jsonl`), oldest first."""
    families: dict[str, list[tuple[int, Path]]] = {}
    for p in paths:
        m = _ROTATED.fullmatch(p.name)
        base, index = (m["base"], int(m["index"])) if m else (p.name, 0)
        families.setdefault(str(p.with_name(base)), []).append((index, p))
    return {base: [p for _, p in sorted(members, key=lambda t: -t[0])] for base, members in families.items()}


def data_files_in(directory: Path) -> list[Path]:
    """The audit files of a directory: every regular file with a chain file, and every non-hidden one."""
    names = {p.name for p in directory.iterdir() if p.is_file()}
    found = {n for n in names if not n.startswith(".")}
    found |= {n[1:-len(".chain")] for n in names if n.startswith(".") and n.endswith(".chain")}
    return [directory / n for n in sorted(found)]


def read_audit_file(path: Path) -> AuditFile:
    side = chain_path(path)

    def read(p: Path) -> bytes | None:
        try:
            return p.read_bytes()
        except FileNotFoundError:
            return None

    return AuditFile(path.name, side.name, read(path), read(side))


def verify_paths(paths: Iterable[Path], key: IntegrityKey) -> list[FileReport]:
    reports: list[FileReport] = []
    for _, members in sorted(family_order(paths).items()):
        reports.extend(verify_family([read_audit_file(p) for p in members], key))
    return reports
