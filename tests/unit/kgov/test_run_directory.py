"""kgov.run_directory: a killed run's private directory is swept by the next run, and nothing else is."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import kgov.up
from kgov.broker_sandbox import OwnerUnknowable
from kgov.run_directory import RUN_MARKER, run_directory, sweep_stale

PREFIX = "kgov-test-run-"
ROOT = Path(__file__).resolve().parents[3]

# Holds a run directory until killed; prints its path once it is locked and marked.
HOLDER = """
import sys, time
from pathlib import Path
from kgov.run_directory import run_directory
with run_directory(sys.argv[1], Path(sys.argv[2])) as path:
    print(path, flush=True)
    time.sleep(120)
"""


@contextlib.contextmanager
def _holder(parent: Path, prefix: str = PREFIX) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """Another process (another run) holding a run directory in `parent`."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, prefix, str(parent)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout is not None
        yield proc, Path(proc.stdout.readline().strip())
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def _killed_run(parent: Path, prefix: str = PREFIX) -> Path:
    """The directory a run left behind when it was killed with SIGKILL."""
    with _holder(parent, prefix) as (proc, path):
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
    assert (path / RUN_MARKER).is_file()  # no clean-up ran
    return path


def test_a_killed_runs_directory_is_swept_and_a_live_runs_is_kept(tmp_path: Path) -> None:
    with _holder(tmp_path) as (_, alive):
        dead = _killed_run(tmp_path)  # whose start swept nothing: `alive` is locked
        assert alive.is_dir()
        assert sweep_stale(PREFIX, tmp_path) == [dead]
        assert not dead.exists()
        assert alive.is_dir() and (alive / RUN_MARKER).is_file()
    # once its run is gone too, the next sweep takes it
    assert sweep_stale(PREFIX, tmp_path) == [alive]
    assert list(tmp_path.iterdir()) == []


def test_a_run_in_this_process_keeps_its_directory_and_removes_it_at_its_end(tmp_path: Path) -> None:
    with run_directory(PREFIX, tmp_path) as path:
        assert path.parent == tmp_path and path.name.startswith(PREFIX)
        assert path.stat().st_mode & 0o777 == 0o700
        (path / "s-1").mkdir()
        assert sweep_stale(PREFIX, tmp_path) == []
        assert (path / "s-1").is_dir()
    assert not path.exists()


def test_a_run_sweeps_its_killed_predecessors_when_it_starts(tmp_path: Path) -> None:
    dead = _killed_run(tmp_path)
    with run_directory(PREFIX, tmp_path) as path:
        assert not dead.exists() and path.exists()


def test_what_is_not_provably_a_dead_runs_directory_is_left_alone(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    outside = _killed_run(elsewhere)  # stale, but not in the directory swept
    (outside / "keep").write_text("x")
    # a symlink with the prefix, to a stale directory: not followed
    (tmp_path / f"{PREFIX}link").symlink_to(outside)
    # a directory no run ever locked and marked (an older kgov's, or a run between mkdtemp and its lock)
    unmarked = Path(tempfile.mkdtemp(prefix=PREFIX, dir=tmp_path))
    # a stale directory that others may read: not as mkdtemp makes them
    opened = _killed_run(tmp_path)
    opened.chmod(0o755)
    # a file with the prefix
    (tmp_path / f"{PREFIX}file").write_text("x")
    # a marker that is a symlink, not a file
    odd = Path(tempfile.mkdtemp(prefix=PREFIX, dir=tmp_path))
    (odd / RUN_MARKER).symlink_to(outside / RUN_MARKER)
    # another prefix
    other = _killed_run(tmp_path, prefix="other-")

    assert sweep_stale(PREFIX, tmp_path) == []
    assert (outside / "keep").exists() and (outside / RUN_MARKER).exists()
    assert unmarked.is_dir() and opened.is_dir() and odd.is_dir() and other.is_dir()
    assert (tmp_path / f"{PREFIX}link").is_symlink() and (tmp_path / f"{PREFIX}file").is_file()


def test_another_users_stale_directory_is_left_alone(tmp_path: Path) -> None:
    dead = _killed_run(tmp_path)
    assert sweep_stale(PREFIX, tmp_path, uid=os.geteuid() + 4242) == []
    assert dead.is_dir()
    if os.geteuid() == 0:  # as root, a directory that really is another user's
        os.chown(dead, 65533, 65533)
        assert sweep_stale(PREFIX, tmp_path) == []
        assert dead.is_dir()


def test_symlinks_inside_a_stale_directory_are_removed_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "precious").write_text("x")
    parent = tmp_path / "runs"
    parent.mkdir()
    dead = _killed_run(parent)
    (dead / "s-1").mkdir()
    (dead / "s-1" / "link").symlink_to(target)
    (dead / "link").symlink_to(target / "precious")
    assert sweep_stale(PREFIX, parent) == [dead]
    assert (target / "precious").read_text() == "x"


def test_a_directory_locked_by_someone_else_is_not_swept(tmp_path: Path) -> None:
    """The lock, not the process tree, says a run is alive: a descriptor that still holds it keeps it."""
    dead = _killed_run(tmp_path)
    fd = os.open(dead, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert sweep_stale(PREFIX, tmp_path) == []
        assert dead.is_dir()
    finally:
        os.close(fd)
    assert sweep_stale(PREFIX, tmp_path) == [dead]


def test_the_sandboxed_broker_sweeps_killed_runs_directories_before_it_starts(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """kgov.up.isolated_broker: a killed `kgov up` left its directory in the temporary directory; the next
    run removes it, and leaves none of its own when it cannot start (here: no owner lookup)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    dead = _killed_run(tmp, prefix=kgov.up.BROKER_RUN_PREFIX)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))

    def no_lookup(*args: object, **kwargs: object) -> None:
        raise OwnerUnknowable("test: no owner lookup")

    monkeypatch.setattr(kgov.up, "OwnerOnlyRelay", no_lookup)
    with pytest.raises(kgov.up.IsolationUnavailable), kgov.up.isolated_broker(tmp_path):
        pass
    assert not dead.exists()
    assert list(tmp.iterdir()) == []


def test_a_run_whose_directory_cannot_be_locked_still_gets_it_unmarked(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Where flock(2) refuses a directory (NFS emulates an exclusive flock as a write lock, which needs a
    descriptor open for writing: EBADF on a directory; ENOLCK without a lock manager), the run goes on
    as before run directories were locked: its directory is private and removed at its end, but unmarked,
    so no later sweep takes it for a dead run's."""
    for error in (errno.EBADF, errno.ENOLCK):
        def refused(fd: int, operation: int, error: int = error) -> None:
            raise OSError(error, os.strerror(error))

        monkeypatch.setattr(fcntl, "flock", refused)
        with run_directory(PREFIX, tmp_path) as path:
            assert path.is_dir() and path.stat().st_mode & 0o777 == 0o700
            assert not (path / RUN_MARKER).exists()
            monkeypatch.undo()
            assert sweep_stale(PREFIX, tmp_path) == []  # unmarked: left alone
            assert path.is_dir()
        assert not path.exists()


def test_a_directory_marked_on_another_host_is_left_alone(tmp_path: Path) -> None:
    """A temporary directory shared between hosts whose locks are local to each (NFS mounted with
    local_lock=flock, Lustre with localflock): another host's live run holds a lock this host cannot see,
    and its directory, were it removed, could be made again by another user of that host, where the relay
    looks for the broker's socket. Only runs of this kernel (its boot id) are swept."""
    dead = _killed_run(tmp_path)
    pid, boot, *_ = (dead / RUN_MARKER).read_text().split("\n")
    assert int(pid) > 0 and boot == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    (dead / RUN_MARKER).write_text(f"{pid}\n00000000-1111-2222-3333-444444444444\n")
    assert sweep_stale(PREFIX, tmp_path) == []
    (dead / RUN_MARKER).write_text(f"{pid}\n")  # marked by the version before boot ids
    assert sweep_stale(PREFIX, tmp_path) == []
    assert dead.is_dir()
    (dead / RUN_MARKER).write_text(f"{pid}\n{boot}\n")
    assert sweep_stale(PREFIX, tmp_path) == [dead]
