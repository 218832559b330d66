"""Where audit records go. A sink never drops silently: a failed write raises `AuditWriteError`."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol, TextIO

from audit.integrity import Chain, IntegrityKey, WriterInfo, chain_path, last_seal, prefix_digest
from audit.model import AuditEvent


class AuditWriteError(RuntimeError):
    """An audit record could not be written. Callers decide whether to fail the request (fail closed)."""


class AuditSink(Protocol):
    def write(self, event: AuditEvent) -> None: ...


class LineSink(Protocol):
    def write_line(self, line: str) -> None: ...


class _RotatingFile:
    """Append-only text file rotated by size: `path`, `path.1` (newest) ... `path.<backups>`.

    With an integrity key every line is also sealed in the chain file beside it (`audit.integrity`), which
    rotates with it; the data file itself stays exactly as without."""

    def __init__(self, path: str | os.PathLike[str], max_bytes: int, backups: int,
                 integrity: IntegrityKey | None = None, writer: WriterInfo | None = None) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        if backups < 0:
            raise ValueError("backups must not be negative")
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._chain = Chain(integrity, writer or WriterInfo.of_this_process()) if integrity else None
        # Unbuffered: a seal that fails to write must not stay in a buffer and go out with the next one.
        self._side: io.FileIO | None = None
        self._side_torn = False  # a seal was written in part: the next starts on a line of its own
        # The moves of a rotation still to do (data file, then its chain file, each only if there): one that
        # failed part-way is finished by the next append, never started over (a move done twice pushes a kept
        # file out), and once the files are moved only the opening is retried.
        self._moves: list[tuple[Path, Path | None]] | None = None
        self._fh = self._open()
        self._size = self._fh.tell()

    def _open(self) -> TextIO:
        fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the sink's life
        if self._chain is not None:
            side = chain_path(self.path)
            after = prefix = None
            if self._chain.seq < 0:
                after = last_seal(side)
                held = fh.tell()
                if held and not (side.exists() and side.stat().st_size):
                    prefix = prefix_digest(self.path, held)  # lines from before integrity (or a lost chain)
            try:
                fd = os.open(side, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                self._side = io.FileIO(fd, "a")
                # Half an entry left by a crash (or a full disk): the header starts a line of its own, so only
                # that entry fails to verify, not every later one of this writer.
                self._side_torn = _ends_torn(side)
                self._seal_line(self._chain.header(self.path.name, after, prefix))
            except BaseException:
                if self._side is not None:
                    with contextlib.suppress(OSError):  # a retried open must not leak the chain file's descriptor
                        self._side.close()
                fh.close()
                raise
        return fh

    def _seal_line(self, entry: str) -> None:
        assert self._side is not None and self._chain is not None
        data = ("\n" if self._side_torn else "").encode() + entry.encode("utf-8") + b"\n"
        written = self._side.write(data)  # one append, nothing kept back: it is on disk or it failed
        if written != len(data):
            self._side_torn = bool(written)
            raise OSError(errno.EIO, f"the chain file took {written} of {len(data)} bytes")
        self._side_torn = False
        self._chain.commit()

    def _close_files(self, marker: str) -> None:
        if self._chain is not None and self._side is not None and not self._side.closed:
            with contextlib.suppress(OSError, ValueError):  # the chain's `cont` link still tells what follows
                self._seal_line(self._chain.marker(marker))
            self._side.close()
        self._fh.close()

    def _rotate(self) -> None:
        self._close_files("end")
        name = self.path.name
        if self.backups == 0:
            self._moves = [(self.path, None)]
        else:
            self._moves = [(self.path.with_name(f"{name}.{i}"), self.path.with_name(f"{name}.{i + 1}"))
                           for i in range(self.backups - 1, 0, -1)]
            self._moves.append((self.path, self.path.with_name(f"{name}.1")))
        self._finish_rotation()

    def _finish_rotation(self) -> None:
        assert self._moves is not None
        while self._moves:
            src, dst = self._moves[0]
            for a, b in ((src, dst), (chain_path(src), chain_path(dst) if dst is not None else None)):
                # The chain file is moved with its data file, also one left from a run with integrity on.
                if b is None:
                    a.unlink(missing_ok=True)
                elif a.exists():
                    os.replace(a, b)
            self._moves.pop(0)
        self._fh = self._open()
        self._size = 0
        self._moves = None

    def append(self, line: str) -> None:
        data = line + "\n"
        size = len(data.encode("utf-8"))
        try:
            with self._lock:
                if self._moves is not None:
                    self._finish_rotation()
                elif self._size and self._size + size > self.max_bytes:
                    self._rotate()
                self._fh.write(data)
                self._fh.flush()
                self._size += size
                if self._chain is not None:
                    # Where the line ended up: the kernel's offset after the append (another process may
                    # have appended before it; the buffered file's own position would not know).
                    end = os.lseek(self._fh.fileno(), 0, os.SEEK_CUR)
                    self._seal_line(self._chain.record(line, end))
        except OSError as exc:
            raise AuditWriteError(f"cannot write audit record to {self.path}: {exc.strerror}") from exc

    def close(self) -> None:
        with self._lock:
            self._close_files("stop")


def _ends_torn(path: Path) -> bool:
    """Whether the file ends inside a line (not with a newline)."""
    with open(path, "rb") as fh:
        if fh.seek(0, os.SEEK_END) == 0:
            return False
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) != b"\n"


class JsonLinesSink:
    """One CloudEvents JSON object per line, rotated by size."""

    def __init__(
        self, path: str | os.PathLike[str], *, max_bytes: int = 100 * 1024 * 1024, backups: int = 10,
        integrity: IntegrityKey | None = None, writer: WriterInfo | None = None,
    ) -> None:
        self._file = _RotatingFile(path, max_bytes, backups, integrity, writer)

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, event: AuditEvent) -> None:
        self._file.append(event.to_json())

    def close(self) -> None:
        self._file.close()


class TextLineSink:
    """Plain text lines (Kafka's log4j layout), rotated by size: what Kafka's log tooling reads."""

    def __init__(
        self, path: str | os.PathLike[str], *, max_bytes: int = 100 * 1024 * 1024, backups: int = 10,
        integrity: IntegrityKey | None = None, writer: WriterInfo | None = None,
    ) -> None:
        self._file = _RotatingFile(path, max_bytes, backups, integrity, writer)

    def write_line(self, line: str) -> None:
        self._file.append(line)

    def close(self) -> None:
        self._file.close()


class MemorySink:
    """Keeps events and lines in memory (tests, and the control plane's recent-events view)."""

    def __init__(self) -> None:
        self.events: list[AuditEvent] = []
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def write(self, event: AuditEvent) -> None:
        with self._lock:
            self.events.append(event)

    def write_line(self, line: str) -> None:
        with self._lock:
            self.lines.append(line)


class MultiSink:
    """Fans one event out to several sinks; every sink is tried, then the first failure is raised."""

    def __init__(self, sinks: Iterable[AuditSink]) -> None:
        self.sinks = list(sinks)

    def write(self, event: AuditEvent) -> None:
        failure: AuditWriteError | None = None
        for sink in self.sinks:
            try:
                sink.write(event)
            except AuditWriteError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
