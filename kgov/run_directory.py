"""Private directories in the temporary directory for the life of one run, which a killed run does not
leave behind for good.

`kgov up` keeps its sandboxed broker's Unix sockets in such a directory (kgov.up.isolated_broker). A run
stopped normally removes it; a run killed with SIGKILL cannot, and its directory stays. The next run
sweeps those (sweep_stale), and only those whose run is provably gone:

- the run holds an exclusive flock(2) on the directory itself for its whole life. The kernel drops it
  when the last descriptor of that open file goes, so also when the run is killed: a lock the sweeper
  can take means no run holds the directory any more (Popen children do not inherit the descriptor);
- the run writes RUN_MARKER into the directory only once it holds that lock, so a directory without it
  (one this code did not make, or a run between mkdtemp and its lock) is never taken for a dead run's.
  The marker names the kernel that took the lock (its boot id): a temporary directory shared between
  hosts whose locks are local to each (NFS mounted with local_lock=flock, Lustre with localflock) shows
  no lock of another host's live run, so only this kernel's runs are swept;
- only this user's directories whose name starts with the prefix, opened without following symlinks,
  and removed with shutil.rmtree's descriptor-based walk (which does not follow symlinks inside either).

A starting run takes its lock blocking: a sweeper holds a directory's lock only while it looks, and it
never removes one without the marker, so the run's directory cannot be swept between mkdtemp and lock.
Where the file system refuses to lock a directory (NFS), the run's directory stays unmarked: removed at
the run's end, left behind by a killed run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

RUN_MARKER = ".kgov-run"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_MARKER_BYTES = 4096  # read of a marker at most: it holds a pid and a boot id


def _this_kernel() -> str:
    """This boot of this host's kernel, as the marker names it: Linux's boot id, else "" (where there is
    none, any marker that names none is taken as this kernel's, as before boot ids were written)."""
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


@contextlib.contextmanager
def run_directory(prefix: str, parent: Path | None = None) -> Iterator[Path]:
    """A new directory (0700) named `prefix...` in `parent` (default: the temporary directory), locked for
    as long as the context lasts, then removed. Stale directories of earlier runs with the same prefix
    are swept first."""
    sweep_stale(prefix, parent)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        fd = os.open(path, _DIR_FLAGS)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            # A file system that cannot lock a directory (NFS takes an exclusive flock for a write lock,
            # which needs a descriptor open for writing: EBADF; ENOLCK without a lock manager): the run
            # goes on with its directory unmarked, which no sweep removes, as before runs were locked.
            locked = False
        else:
            locked = True
        if locked:
            marker = os.open(RUN_MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                             0o600, dir_fd=fd)
            try:
                # the pid for a human reading /tmp; the lock is the proof, on this kernel
                os.write(marker, f"{os.getpid()}\n{_this_kernel()}\n".encode())
            finally:
                os.close(marker)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)  # removed while still locked: no sweeper races the removal
        os.close(fd)


def sweep_stale(prefix: str, parent: Path | None = None, *, uid: int | None = None) -> list[Path]:
    """Removes the directories `prefix*` in `parent` (default: the temporary directory) that belong to
    `uid` (default: this process's effective uid) and whose run is gone (see the module docstring).
    Returns what it removed. Anything it cannot prove stale, or cannot read, is left alone."""
    if not shutil.rmtree.avoids_symlink_attacks:  # no descriptor-based removal on this platform
        return []
    where = Path(parent if parent is not None else tempfile.gettempdir())
    owner = os.geteuid() if uid is None else uid
    try:
        parent_fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return []
    removed = []
    try:
        for name in os.listdir(parent_fd):
            if name.startswith(prefix) and _remove_if_stale(parent_fd, name, owner):
                removed.append(where / name)
    finally:
        os.close(parent_fd)
    return removed


def _remove_if_stale(parent_fd: int, name: str, owner: int) -> bool:
    try:
        info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != owner or stat.S_IMODE(info.st_mode) & 0o077:
        return False  # a symlink or a file, another user's, or not a private directory as mkdtemp makes them
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError:
        return False
    try:
        if not os.path.samestat(info, os.fstat(fd)):
            return False  # replaced since it was looked at
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # its run is alive
        try:
            marker = os.stat(RUN_MARKER, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return False  # no run ever held it (or one is starting): not provably stale
        if not stat.S_ISREG(marker.st_mode) or not _marked_here(fd):
            return False
        shutil.rmtree(name, dir_fd=parent_fd, ignore_errors=True)
        try:
            os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            return True
        return False
    finally:
        os.close(fd)


def _marked_here(fd: int) -> bool:
    """Whether the marker in the directory `fd` was written by a run of this kernel, whose lock this
    sweeper would have seen."""
    try:
        marker = os.open(RUN_MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return False
    try:
        lines = os.read(marker, _MARKER_BYTES).decode(errors="replace").split("\n")
    except OSError:
        return False
    finally:
        os.close(marker)
    return len(lines) > 2 and lines[1] == _this_kernel()
