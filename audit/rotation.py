"""One lock per audit file, shared by every process that appends to it or rotates it.

The control plane and each `kgov users ...` command append to the same `events.jsonl` and may each decide
to rotate it. Two rotations at once (each `os.replace`-ing NAME.<i> to NAME.<i+1>) can overwrite a file the
other just moved, and a process that does not see another's rotation keeps appending to a file that has
been renamed away (or deleted, with `backups = 0`). So beside each audit file NAME there is a lock file
`.NAME.lock` (hidden like the chain files, 0600, never followed if a symlink), and a writer holds an
exclusive `flock` on it for each append: for the check that decides to rotate, the rotation, and the line
and its seal.

The lock file is also the family's rotation log, one short line per step: `rotate <backups> <top>` when a
rotation begins (`top`: the oldest NAME.<i> there, where the moves start), `moved <i>` when NAME.<i> (0: NAME) and its chain file have been moved up, `done`. Its
size therefore changes with every rotation: a writer that finds it unchanged since its last append knows
that nobody rotated in between, with one `lseek` (no `stat` of the audit file per append). A rotation that
failed or crashed part-way is finished, from its last `moved`, by whichever writer next takes the lock
before creating NAME or rotating: never started over, since a move done twice pushes a kept file out.
The log only grows (about 10 bytes per kept file per rotation): a size that went down and up again could
look unchanged to a writer.

Deleting a lock file while writers run voids the exclusion between those holding the old one and those that
open the new one (each writer checks for that when it rotates or follows a rotation, not on every append).
"""

from __future__ import annotations

import fcntl
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from audit.integrity import chain_path, lock_path

# The tail read to find an unfinished rotation: its records take about 9 bytes per kept file.
_TAIL_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Rotation:
    """A rotation under way: `backups` as its writer had it, and the moves still to do, by source index,
    oldest first (NAME.<i> to NAME.<i+1>, 0 being NAME itself; with `backups = 0` NAME is deleted)."""

    backups: int
    remaining: tuple[int, ...]


def pending_rotation(log: bytes) -> Rotation | None:
    """The rotation the log's tail began and did not finish. Pure: lines it does not know are skipped (a
    record torn by a full disk), so a damaged log at worst repeats no move (see `FamilyLock.rotate`)."""
    begun: Rotation | None = None
    for raw in log.splitlines():
        word, _, arg = raw.decode("ascii", "replace").partition(" ")
        backups, _, top = arg.partition(" ")
        if word == "rotate" and backups.isdigit() and top.isdigit():
            first = min(int(top), int(backups) - 1)
            begun = Rotation(int(backups), tuple(range(first, -1, -1)) if int(backups) else (0,))
        elif word == "moved" and arg.isdigit() and begun is not None and int(arg) in begun.remaining:
            done = int(arg)
            begun = Rotation(begun.backups, tuple(i for i in begun.remaining if i < done))
        elif word == "done":
            begun = None
    return begun if begun is not None and begun.remaining else None


def _rotation_index(name: str, base: str) -> int | None:
    """i for `NAME.<i>` or its chain file `.NAME.<i>.chain`, else None."""
    if name.startswith(".") and name.endswith(".chain"):
        name = name[1:-len(".chain")]
    rest = name[len(base) + 1:] if name.startswith(base + ".") else ""
    return int(rest) if rest.isdigit() and rest.isascii() else None


class FamilyLock:
    """The lock file of one audit file (see the module docstring). `with lock:` holds it exclusively."""

    def __init__(self, data_file: Path) -> None:
        self.data_file = data_file
        self.path = lock_path(data_file)
        self._fd = self._open()

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

    def follow_if_replaced(self) -> None:
        """Held: if the lock file was deleted or replaced, takes the one now at its path instead (and lets
        the old go), so that this writer excludes the writers that opened the new one."""
        while True:
            try:
                now = os.stat(self.path, follow_symlinks=False)
            except FileNotFoundError:
                now = None
            held = os.fstat(self._fd)
            if now is not None and (now.st_ino, now.st_dev) == (held.st_ino, held.st_dev):
                return
            fd = self._open()
            fcntl.flock(fd, fcntl.LOCK_EX)
            old, self._fd = self._fd, fd
            os.close(old)  # releases its lock

    def pending(self) -> Rotation | None:
        size = self.version()
        return pending_rotation(os.pread(self._fd, _TAIL_BYTES, max(0, size - _TAIL_BYTES)))

    def _log(self, record: str) -> None:
        os.write(self._fd, f"{record}\n".encode("ascii"))

    def begin_rotation(self, backups: int) -> Rotation:
        base = self.data_file.name
        kept = (_rotation_index(n, base) for n in os.listdir(self.data_file.parent))
        record = f"rotate {backups} {max((i for i in kept if i is not None), default=0)}"
        self._log(record)
        rotation = pending_rotation(record.encode())
        assert rotation is not None
        return rotation

    def rotate(self, rotation: Rotation) -> None:
        """Held: does the moves still to do, logging each, then `done`. Each move skips a file that is not
        there: after a crash between a move and its record, the source has gone and nothing is moved twice
        (the next move, which would refill it, is only begun once this one is logged)."""
        name = self.data_file.name
        for index in rotation.remaining:
            src = self.data_file if index == 0 else self.data_file.with_name(f"{name}.{index}")
            dst = None if rotation.backups == 0 else self.data_file.with_name(f"{name}.{index + 1}")
            for a, b in ((src, dst), (chain_path(src), chain_path(dst) if dst is not None else None)):
                # The chain file is moved with its data file, also one left from a run with integrity on.
                if b is None:
                    a.unlink(missing_ok=True)
                elif a.exists():
                    os.replace(a, b)
            self._log(f"moved {index}")
        self._log("done")

    def close(self) -> None:
        os.close(self._fd)
