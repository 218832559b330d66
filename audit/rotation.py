"""One lock per audit file, shared by every process that appends to it or rotates it.

The control plane and each `kgov users ...` command append to the same `events.jsonl` and may each decide
to rotate it. Two rotations at once (each `os.replace`-ing NAME.<i> to NAME.<i+1>) can overwrite a file the
other just moved, and a process that does not see another's rotation keeps appending to a file that has
been renamed away (or deleted, with `backups = 0`). So beside each audit file NAME there is a lock file
`.NAME.lock` (hidden like the chain files, 0600, never followed if a symlink), and a writer holds an
exclusive `flock` on it for each append: for the check that decides to rotate, the rotation, and the line
and its seal.

The lock file is also the family's rotation log, one short line per step: `rotate <backups> <top>` when a
rotation begins (`top`: the oldest NAME.<i> it moves or, beyond `backups`, deletes), `moved <i>` when
NAME.<i> (0: NAME) and its chain file have been moved up (or deleted), `done`. Its size therefore changes
with every rotation: a writer that finds it unchanged since its last append knows that nobody rotated in
between, with one `fstat` (no `stat` of the audit file per append). A rotation that failed or crashed
part-way is finished, from its last `moved`, by whichever writer next takes the lock before creating NAME
or rotating: never started over, since a move done twice pushes a kept file out. A record is only one once
its newline is written: a write cut short (a full disk) fails the rotation, and the next record starts on
a line of its own after a `~` that spoils the torn one, so `moved 1` left of `moved 12` never counts. The
log only grows (about 10 bytes per kept file per rotation): a size that went down and up again could look
unchanged to a writer; the last rotation's records are read back however far they reach.

Files numbered above `backups` (left by a larger `backups`; the run NAME.<backups+1>, NAME.<backups+2>, ...
without a gap) are deleted by the next rotation, oldest first and as logged steps of it, as rotation drops
the oldest kept file: so the family stays one run of files, each one rotation older than the next, which
is what `audit.integrity` verifies. A file numbered after a gap in that run is not the family's and is left.
(Log4j 2's `DefaultRolloverStrategy` purge also deletes the oldest files beyond `max` at a rollover, but
every file its pattern matches, gaps and all.)

A writer notices on every append, by the link count and change time of the lock file it holds (one
`fstat`), that it was deleted, replaced or renamed away, and takes the one now at its path (creating it)
before writing: writers that opened the old lock file and writers that created the new one exclude each
other again from their next append on. An append already under way when the file is deleted is not
excluded from one by a writer that creates the new file (the lock cannot protect its own name).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from audit.integrity import chain_path, lock_path

# The log is first read back this far from its end, then twice as far each time until the last rotation's
# `rotate` (or a `done`) is in: one read unless a rotation of more than about 400 files is half done.
_TAIL_BYTES = 4 * 1024
# At most 18 digits: a damaged record of thousands would not even convert (int's digit limit).
_RECORD = re.compile(rb"rotate (\d{1,18}) (\d{1,18})|moved (\d{1,18})|done")
_TORN = b"~"  # ends a record whose write was cut short: no record ends in it


@dataclass(frozen=True, slots=True)
class Rotation:
    """A rotation under way: `backups` as its writer had it, and the steps still to do, by source index,
    oldest first: NAME.<i> to NAME.<i+1> (0 being NAME itself), or NAME.<i> deleted when i >= `backups`
    (NAME itself with `backups = 0`; only the files there, see `FamilyLock.rotate`)."""

    backups: int
    remaining: range


def _scan(log: bytes) -> tuple[Rotation | None, bool]:
    """The rotation `log` began last and did not finish, and whether `log` holds a `rotate` or a `done`
    (if not, an older part of the log may hold the `rotate` its `moved` records belong to). Only the last
    of those and the records after it count, so the scan starts from there."""
    # The last piece has no newline: a record whose write was cut short, or empty.
    lines = log.split(b"\n")[:-1]
    for at in range(len(lines) - 1, -1, -1):
        m = _RECORD.fullmatch(lines[at])  # a torn or unknown record does not match
        if m is not None and m[3] is None:
            break
    else:
        return None, False
    if m[1] is None:
        return None, True  # `done`
    begun = Rotation(int(m[1]), range(int(m[2]), -1, -1))
    for raw in lines[at + 1:]:
        if (m := _RECORD.fullmatch(raw)) is not None and m[3] is not None and int(m[3]) in begun.remaining:
            begun = Rotation(begun.backups, range(int(m[3]) - 1, -1, -1))
    return (begun if begun.remaining else None), True


def pending_rotation(log: bytes) -> Rotation | None:
    """The rotation the log began and did not finish. Pure: lines it does not know are skipped (a record
    torn by a full disk, an unterminated last one), so a damaged log at worst repeats no move (see
    `FamilyLock.rotate`)."""
    return _scan(log)[0]


def _rotation_index(name: str, base: str) -> int | None:
    """i for `NAME.<i>` or its chain file `.NAME.<i>.chain`, else None."""
    if name.startswith(".") and name.endswith(".chain"):
        name = name[1:-len(".chain")]
    rest = name[len(base) + 1:] if name.startswith(base + ".") else ""
    return int(rest) if rest.isdigit() and rest.isascii() else None


def rotation_top(present: set[int], backups: int) -> int:
    """Where a rotation of a family whose NAME.<i> (or their chain files) are `present` starts: the last of
    the run of files beyond `backups` (NAME.<backups+1> ... with no gap), which it deletes; else the oldest
    kept file it moves (NAME.<backups> is pushed out by the move onto it)."""
    if backups + 1 in present:
        top = backups + 1
        while top + 1 in present:
            top += 1
        return top
    return min(max(present, default=0), max(backups - 1, 0))


class FamilyLock:
    """The lock file of one audit file (see the module docstring). `with lock:` holds it exclusively."""

    def __init__(self, data_file: Path) -> None:
        self.data_file = data_file
        self.path = lock_path(data_file)
        self._fd = self._open()
        self._checked = -1  # the held lock file's change time when it was last found at its path

    def _open(self) -> int:
        # Non-blocking open: a FIFO put in its place must not hang a writer; it is refused below.
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
                     | os.O_NONBLOCK, 0o600)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(f"{self.path} is not a regular file")
        return fd

    def __enter__(self) -> FamilyLock:
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def version(self) -> int:
        """Changes with every rotation step any writer logs (the log's size)."""
        return os.lseek(self._fd, 0, os.SEEK_END)

    def checked_version(self) -> int | None:
        """Held, for each append: `version()`, or None when the lock file held had been deleted, replaced or
        renamed away and this writer has taken the one now at its path instead (`follow_if_replaced`): the
        versions of two lock files do not compare, so the caller settles as after a rotation. One `fstat`
        when nothing changed: a deleted or replaced file has no link left, and a rename (as a write to the
        log) changes the file's change time, which sends to the full check."""
        held = os.fstat(self._fd)
        if held.st_nlink and held.st_ctime_ns == self._checked:
            return held.st_size
        return None if self.follow_if_replaced() else self.version()

    def follow_if_replaced(self) -> bool:
        """Held: if the lock file was deleted or replaced, takes the one now at its path instead (creating
        it, and letting the old go), so that this writer excludes the writers that opened the new one.
        Whether it did."""
        followed = False
        while True:
            held = os.fstat(self._fd)  # before the path: a rename after it changes the time recorded
            try:
                now = os.stat(self.path, follow_symlinks=False)
            except FileNotFoundError:
                now = None
            if now is not None and (now.st_ino, now.st_dev) == (held.st_ino, held.st_dev):
                self._checked = held.st_ctime_ns
                return followed
            fd = self._open()
            fcntl.flock(fd, fcntl.LOCK_EX)
            old, self._fd = self._fd, fd
            os.close(old)  # releases its lock
            followed = True

    def pending(self) -> Rotation | None:
        """Held: the rotation the log began last and did not finish, read back from the log's end as far
        as its last `rotate` or `done` (`_TAIL_BYTES` first, then twice as much each time)."""
        size = self.version()
        want = _TAIL_BYTES
        while True:
            start = max(0, size - want)
            window = os.pread(self._fd, size - start, start)
            # From the first whole line: the window may begin inside a record.
            whole = window if start == 0 else window[window.index(b"\n") + 1:] if b"\n" in window else b""
            rotation, anchored = _scan(whole)
            if anchored or start == 0:
                return rotation
            want *= 2

    def _log(self, record: str) -> None:
        """Appends one record. A write cut short raises: the step it records is then not known as done, and
        the next record spoils the torn one (`_TORN`) and starts on a line of its own."""
        size = self.version()
        torn = size > 0 and os.pread(self._fd, 1, size - 1) != b"\n"
        data = (_TORN + b"\n" if torn else b"") + record.encode("ascii") + b"\n"
        written = os.write(self._fd, data)
        if written != len(data):
            raise OSError(errno.EIO, f"the rotation log took {written} of {len(data)} bytes")

    def _indices(self) -> Iterator[int]:
        base = self.data_file.name
        for name in os.listdir(self.data_file.parent):
            if (index := _rotation_index(name, base)) is not None:
                yield index

    def begin_rotation(self, backups: int) -> Rotation:
        record = f"rotate {backups} {rotation_top(set(self._indices()), backups)}"
        self._log(record)
        rotation = pending_rotation(f"{record}\n".encode())
        assert rotation is not None
        return rotation

    def rotate(self, rotation: Rotation) -> None:
        """Held: does the steps still to do, logging each, then `done`: first the files beyond `backups`
        there, oldest first, deleted; then the moves. Each step skips a file that is not there: after a crash
        between a move and its record, the source has gone and nothing is moved twice (the next move, which
        would refill it, is only begun once this one is logged)."""
        name = self.data_file.name
        first, backups = rotation.remaining.start, rotation.backups
        # Only the files there: the range may be long (a log's `top`), the family is not. NAME (0) is not
        # listed as a NAME.<i>: with `backups = 0` it is deleted all the same.
        beyond = sorted({i for i in self._indices() if backups <= i <= first} | ({0} if backups == 0 else set()),
                        reverse=True) if first >= backups else []
        for index in itertools.chain(beyond, range(min(first, backups - 1), -1, -1)):
            src = self.data_file if index == 0 else self.data_file.with_name(f"{name}.{index}")
            dst = None if index >= backups else self.data_file.with_name(f"{name}.{index + 1}")
            for a, b in ((src, dst), (chain_path(src), chain_path(dst) if dst is not None else None)):
                # The chain file is moved with its data file, also one left from a run with integrity on.
                if b is None:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(a)
                elif a.exists():
                    os.replace(a, b)
            self._log(f"moved {index}")
        self._log("done")

    def close(self) -> None:
        os.close(self._fd)
