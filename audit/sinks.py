"""Where audit records go. A sink never drops silently: a failed write raises `AuditWriteError`."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from audit.integrity import (
    Chain,
    IntegrityKey,
    WriterInfo,
    chain_path,
    file_generation,
    last_seal,
    prefix_digest,
)
from audit.model import AuditEvent
from audit.rotation import FamilyLock


class AuditWriteError(RuntimeError):
    """An audit record could not be written. Callers decide whether to fail the request (fail closed)."""


class AuditSink(Protocol):
    def write(self, event: AuditEvent) -> None: ...


class LineSink(Protocol):
    def write_line(self, line: str) -> None: ...


class _RotatingFile:
    """Append-only text file rotated by size: `path`, `path.1` (newest) ... `path.<backups>`.

    Several processes may append to one file and rotate it: every append holds the file's lock
    (`audit.rotation.FamilyLock`; the one at its path, also when the lock file was deleted since the last
    append), under which the size that decides a rotation is the file's real one and a rotation by another
    process is seen and followed before the line is written.

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
        # Both unbuffered: a line or seal that fails to write must not stay in a buffer and go out with the next.
        self._data: io.FileIO | None = None  # None: to be opened (first append, or after a rotation)
        self._side: io.FileIO | None = None
        self._data_torn = False  # a line was written in part: the next starts on a line of its own
        self._side_torn = False  # likewise for a seal
        self._closed = False
        self._generation: int | None = None  # of the file this writer has open or last had (its `g`)
        self._family = FamilyLock(self.path)
        self._seen = -1  # the lock file's version at this writer's last append
        try:
            with self._family:
                self._settle(0)
        except BaseException:
            self._family.close()
            raise

    def _settle(self, incoming: int) -> None:
        """With the family lock held, before an append of `incoming` bytes: finishes a rotation left half
        done, follows one another process did (this writer's file is no longer NAME), rotates when the line
        would take NAME past `max_bytes`, and opens NAME if this writer has it closed."""
        self._family.follow_if_replaced()
        pending = self._family.pending()
        if self._data is not None and (pending is not None or not self._is_current()):
            self._close_files("end")
        if pending is not None:
            self._family.rotate(pending)
        if self._data is None:
            self._open()  # NAME as the other writers left it: it may be as full as this writer's was
        assert self._data is not None
        size = os.lseek(self._data.fileno(), 0, os.SEEK_END)
        if size and size + incoming > self.max_bytes:
            self._close_files("end")
            self._family.rotate(self._family.begin_rotation(self.backups))
            self._open()
        self._seen = self._family.version()

    def _is_current(self) -> bool:
        """Whether this writer's open file is still NAME (nobody rotated, moved or deleted it)."""
        assert self._data is not None
        try:
            now = os.stat(self.path)  # followed, as the open was
        except FileNotFoundError:
            return False
        held = os.fstat(self._data.fileno())
        return (now.st_ino, now.st_dev) == (held.st_ino, held.st_dev)

    def _open(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)  # private: audit lines name principals, hosts and resources
        data = io.FileIO(fd, "a")
        if self._chain is not None:
            side = chain_path(self.path)
            after = prefix = None
            generation = file_generation(side, chain_path(self.path.with_name(f"{self.path.name}.1")))
            if self._chain.seq < 0:
                after = last_seal(side)
                held = os.lseek(fd, 0, os.SEEK_END)
                if held and not (side.exists() and side.stat().st_size):
                    prefix = prefix_digest(self.path, held)  # lines from before integrity (or a lost chain)
            try:
                sfd = os.open(side, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                self._side = io.FileIO(sfd, "a")
                # Half an entry left by a crash (or a full disk): the header starts a line of its own, so only
                # that entry fails to verify, not every later one of this writer.
                self._side_torn = _ends_torn(side)
                self._seal_line(self._chain.header(self.path.name, after, prefix, generation, self._generation))
            except BaseException:
                if self._side is not None:
                    with contextlib.suppress(OSError):  # a retried open must not leak the chain file's descriptor
                        self._side.close()
                    self._side = None
                data.close()
                raise
        self._data = data
        self._data_torn = _ends_torn(self.path)
        if self._chain is not None:
            self._generation = generation

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
        self._side = None
        if self._data is not None:
            self._data.close()
            self._data = None

    def append(self, line: str) -> None:
        data = (line + "\n").encode("utf-8")
        try:
            with self._lock:
                if self._closed:
                    raise OSError(errno.EBADF, "the sink is closed")
                with self._family:
                    # None: the lock file had been deleted or replaced, and this writer now holds the new one.
                    version = self._family.checked_version()
                    size = -1 if self._data is None else os.lseek(self._data.fileno(), 0, os.SEEK_END)
                    if (size < 0 or version is None or version != self._seen
                            or (size and size + len(data) > self.max_bytes)):
                        self._settle(len(data))
                        assert self._data is not None
                        size = os.lseek(self._data.fileno(), 0, os.SEEK_END)
                    assert self._data is not None
                    if self._data_torn:
                        data = b"\n" + data
                    written = self._data.write(data)
                    if written != len(data):
                        self._data_torn = bool(written)
                        raise OSError(errno.EIO, f"the audit file took {written} of {len(data)} bytes")
                    self._data_torn = False
                    if self._chain is not None:
                        # Where the line ends in the file: exact, since every writer appends under the lock.
                        self._seal_line(self._chain.record(line, size + len(data)))
        except OSError as exc:
            raise AuditWriteError(f"cannot write audit record to {self.path}: {exc.strerror}") from exc

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                with self._family:
                    self._family.checked_version()  # the `stop` under the lock file at the path, as a line
                    self._close_files("stop")
            finally:
                self._family.close()


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
