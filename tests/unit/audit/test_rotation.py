"""audit.rotation: the lock and rotation log every writer of one audit file shares (real files, real flock;
the processes case is tests/integration/audit/test_integrity_processes.py)."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.integrity import IntegrityKey, Reason, audit_files_in, chain_path, lock_path, verify_paths
from audit.rotation import FamilyLock, Rotation, pending_rotation, rotation_top
from audit.sinks import AuditWriteError, TextLineSink

KEY = IntegrityKey(b"k" * 43)


def moves(first: int) -> range:
    return range(first, -1, -1)


def test_the_log_tells_which_moves_of_an_unfinished_rotation_are_left() -> None:
    assert pending_rotation(b"") is None
    assert pending_rotation(b"rotate 10 3\n") == Rotation(10, moves(3))
    # Beyond backups (left by a larger `backups`): NAME.30 .. NAME.10 are deleted, then the moves.
    assert pending_rotation(b"rotate 10 30\n") == Rotation(10, moves(30))
    assert pending_rotation(b"rotate 3 2\nmoved 2\nmoved 1\n") == Rotation(3, moves(0))
    assert pending_rotation(b"rotate 3 2\nmoved 2\nmoved 1\nmoved 0\ndone\n") is None
    assert pending_rotation(b"rotate 0 0\n") == Rotation(0, moves(0))  # NAME is deleted
    # The last rotation counts; torn or unknown records are skipped.
    assert pending_rotation(b"rotate 2 1\nmoved 1\nmoved 0\ndone\nrotate 2 1\nmov\nmoved 1\n") == Rotation(2, moves(0))
    assert pending_rotation(b"rotate x 1\nmoved \xff\n") is None
    assert pending_rotation(b"rotate 3 2\nmoved 9\nmoved 2 \n done\n") == Rotation(3, moves(2))
    assert pending_rotation(b"rotate 3 2\nmoved " + b"9" * 5000 + b"\n") == Rotation(3, moves(2))


def test_a_record_whose_write_was_cut_short_does_not_count() -> None:
    """`moved 1` is what a full disk leaves of `moved 12`: unterminated, it is not a record; once a later
    record follows, the `~` the writer put after it spoils it (`FamilyLock._log`)."""
    begun = b"rotate 20 12\n"
    assert pending_rotation(begun + b"moved 1") == Rotation(20, moves(12))
    assert pending_rotation(begun + b"moved 1~\nmoved 12\n") == Rotation(20, moves(11))
    assert pending_rotation(b"rotate 20 1~\n") is None
    assert pending_rotation(begun + b"moved 12\nmoved 11\ndon~\n") == Rotation(20, moves(10))


def test_a_rotation_starts_at_the_last_file_of_the_run_beyond_backups_else_at_the_oldest_kept() -> None:
    assert rotation_top(set(), 10) == 0
    assert rotation_top({1, 2, 3}, 10) == 3
    assert rotation_top(set(range(1, 11)), 10) == 9  # NAME.10 is pushed out by the move of NAME.9 onto it
    assert rotation_top({1, 2, 3, 4, 5, 9}, 2) == 5  # 3 .. 5 are deleted; 9, after a gap, is not the family's
    assert rotation_top({1, 2, 4, 5}, 2) == 1  # no NAME.3: nothing beyond the count to delete
    assert rotation_top({1, 2}, 0) == 2
    assert rotation_top(set(), 0) == 0


def lines_in(d: Path, name: str) -> list[str]:
    return (d / name).read_text().splitlines()


def test_a_rotation_cut_short_by_a_crash_is_finished_by_the_next_writer_not_redone(tmp_path: Path) -> None:
    target = tmp_path / "a.log"
    sink = TextLineSink(target, max_bytes=40, backups=3, integrity=KEY)
    for i in range(4):
        sink.write_line(f"line {i} " + "x" * 20)  # one line per file: a.log.3 .. a.log
    sink.close()
    before = {n: lines_in(tmp_path, n) for n in ("a.log", "a.log.1", "a.log.2")}
    # Another writer began a rotation, moved a.log.2 up and logged it, moved a.log.1's data but not its
    # chain file, and died.
    log = lock_path(target)
    log.write_bytes(log.read_bytes() + b"rotate 3 2\n")
    for a, b in ((tmp_path / "a.log.2", tmp_path / "a.log.3"),
                 (chain_path(tmp_path / "a.log.2"), chain_path(tmp_path / "a.log.3"))):
        os.replace(a, b)
    log.write_bytes(log.read_bytes() + b"moved 2\n")
    os.replace(tmp_path / "a.log.1", tmp_path / "a.log.2")

    sink = TextLineSink(target, max_bytes=40, backups=3, integrity=KEY)  # finishes it, then opens a new a.log
    sink.write_line("after")
    sink.close()
    assert lines_in(tmp_path, "a.log.3") == before["a.log.2"]
    assert lines_in(tmp_path, "a.log.2") == before["a.log.1"]
    assert lines_in(tmp_path, "a.log.1") == before["a.log"]
    assert lines_in(tmp_path, "a.log") == ["after"]
    reports = verify_paths(audit_files_in(tmp_path), KEY)
    assert len(reports) == 4 and all(r.ok for r in reports), reports
    assert lock_path(target).read_text().endswith("moved 1\nmoved 0\ndone\n")


@pytest.mark.parametrize("backups", [0, 2])
def test_a_writer_follows_a_rotation_another_did_instead_of_writing_into_the_rotated_file(
    tmp_path: Path, backups: int,
) -> None:
    """Two sinks of one file (each its own lock descriptor: flock excludes them as it does processes)."""
    target = tmp_path / "a.log"
    a = TextLineSink(target, max_bytes=100, backups=backups, integrity=KEY)
    b = TextLineSink(target, max_bytes=100, backups=backups, integrity=KEY)
    b.write_line("b before")
    for i in range(6):
        a.write_line(f"a {i} " + "x" * 30)  # a rotates; b's file is now a.log.1, or deleted with backups=0
    b.write_line("b after")  # must reach the current a.log, not the rotated-away file
    a.close()
    b.close()
    assert lines_in(tmp_path, "a.log")[-1] == "b after"
    reports = verify_paths(audit_files_in(tmp_path), KEY)
    assert all(r.ok for r in reports), reports
    assert all(p.stat().st_size <= 100 for p in tmp_path.glob("a.log*"))


def test_the_lock_file_is_private_and_never_a_symlink_or_a_fifo(tmp_path: Path) -> None:
    TextLineSink(tmp_path / "a.log").close()
    assert stat.S_IMODE(lock_path(tmp_path / "a.log").stat().st_mode) == 0o600
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("keep")
    lock_path(tmp_path / "b.log").symlink_to(elsewhere)
    with pytest.raises(OSError):
        TextLineSink(tmp_path / "b.log")
    assert elsewhere.read_text() == "keep"
    os.mkfifo(lock_path(tmp_path / "c.log"))
    with pytest.raises(OSError, match="not a regular file"):
        TextLineSink(tmp_path / "c.log")  # refused at once, not hung on the FIFO


def test_a_deleted_lock_file_is_given_up_for_the_new_one_at_the_next_rotation(tmp_path: Path) -> None:
    target = tmp_path / "a.log"
    a = TextLineSink(target, max_bytes=100, backups=2)
    lock_path(target).unlink()
    b = TextLineSink(target, max_bytes=100, backups=2)  # creates a new lock file
    for i in range(4):
        a.write_line(f"a {i} " + "x" * 30)  # a rotates: it takes the new lock file first
    held = os.fstat(a._file._family._fd)
    assert (held.st_ino, held.st_dev) == (lock_path(target).stat().st_ino, lock_path(target).stat().st_dev)
    a.close()
    b.close()


@pytest.mark.parametrize("how", ["deleted", "replaced", "renamed"])
def test_a_writer_takes_the_lock_file_now_at_its_path_at_its_next_append(tmp_path: Path, how: str) -> None:
    """The lock file is deleted (or another put in its place, or it is moved away) while a writer runs, and
    another writer creates a new one: from its next append the first waits for the second, no rotation
    needed."""
    target = tmp_path / "a.log"
    a = TextLineSink(target, max_bytes=1000, backups=2, integrity=KEY)
    a.write_line("a 0")
    if how == "deleted":
        lock_path(target).unlink()
    elif how == "replaced":
        (tmp_path / "new").write_bytes(b"")
        os.replace(tmp_path / "new", lock_path(target))
    else:
        os.rename(lock_path(target), tmp_path / "moved.lock")
    other = FamilyLock(target)  # another writer: opens (or creates) the lock file at the path
    written = threading.Event()
    with other:
        thread = threading.Thread(target=lambda: (a.write_line("a 1"), written.set()))
        thread.start()
        assert not written.wait(0.3)  # waits for `other`
    thread.join(10)
    assert written.is_set()
    a.close()
    other.close()
    assert lines_in(tmp_path, "a.log") == ["a 0", "a 1"]
    assert all(r.ok for r in verify_paths(audit_files_in(tmp_path), KEY))


def test_a_writer_that_takes_a_new_lock_file_follows_the_rotations_logged_in_it(tmp_path: Path) -> None:
    """Sizes of two lock files do not compare: the new log, one rotation long, is as long as the old one."""
    target = tmp_path / "a.log"
    a = TextLineSink(target, max_bytes=40, backups=1, integrity=KEY)
    a.write_line("a 0 " + "x" * 20)
    a.write_line("a 1 " + "x" * 20)  # rotates once: its log holds one rotation
    lock_path(target).unlink()
    b = TextLineSink(target, max_bytes=40, backups=1, integrity=KEY)  # creates a new lock file
    b.write_line("b 0 " + "x" * 20)  # rotates once: a's file is now a.log.1
    a.write_line("a 2")  # into a.log, not the rotated-away a.log.1
    a.close()
    b.close()
    assert lines_in(tmp_path, "a.log") == ["b 0 " + "x" * 20, "a 2"]
    assert lines_in(tmp_path, "a.log.1") == ["a 1 " + "x" * 20]
    reports = verify_paths(audit_files_in(tmp_path), KEY)
    assert all(r.ok for r in reports), [str(p) for r in reports for p in r.problems]


def files_of(target: Path, count: int, backups: int) -> dict[str, list[str]]:
    """`count` files of one sealed line each, a.log.<count-1> .. a.log, and what each holds."""
    sink = TextLineSink(target, max_bytes=40, backups=backups, integrity=KEY)
    for i in range(count):
        sink.write_line(f"line {i} " + "x" * 20)
    sink.close()
    return {n: lines_in(target.parent, n) for n in ["a.log", *(f"a.log.{i}" for i in range(1, count))]}


def assert_moved_up_one(target: Path, before: dict[str, list[str]], newest: list[str]) -> None:
    d = target.parent
    for name, lines in before.items():
        index = int(name.rsplit(".", 1)[1]) if name != "a.log" else 0
        assert lines_in(d, f"a.log.{index + 1}") == lines, name
    assert lines_in(d, "a.log") == newest
    reports = verify_paths(audit_files_in(d), KEY)
    assert all(r.ok for r in reports), [str(p) for r in reports for p in r.problems]


def test_a_rotation_record_cut_short_by_a_full_disk_is_not_taken_for_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The disk fills as `moved 12` is logged: `moved 1` is on disk, and nothing more can be written or
    renamed. The next writer must not take it for `moved 1` (and push a.log onto a.log.1): it finishes the
    rotation from `moved 13`, every file one place older."""
    target = tmp_path / "a.log"
    before = files_of(target, 14, backups=20)
    full = [False]
    real_write, real_replace = os.write, os.replace

    def write(fd: int, data: bytes) -> int:
        if full[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        if data == b"moved 12\n":
            full[0] = True
            return real_write(fd, data[:7])
        return real_write(fd, data)

    def replace(a: Path, b: Path) -> None:
        if full[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_replace(a, b)

    writer = TextLineSink(target, max_bytes=40, backups=20, integrity=KEY)
    monkeypatch.setattr("audit.rotation.os.write", write)
    monkeypatch.setattr("audit.rotation.os.replace", replace)
    with pytest.raises(AuditWriteError):
        writer.write_line("y" * 30)
    monkeypatch.undo()
    writer.close()
    assert lock_path(target).read_bytes().endswith(b"moved 13\nmoved 1")

    after = TextLineSink(target, max_bytes=40, backups=20, integrity=KEY)
    after.write_line("after")
    after.close()
    assert_moved_up_one(target, before, ["after"])
    assert b"moved 1~\nmoved 12\n" in lock_path(target).read_bytes()


def test_a_rotation_of_thousands_of_files_left_half_done_is_finished(tmp_path: Path) -> None:
    """With `backups = 9000` a rotation logs about 80 KiB: one that died after moving all but the three
    newest files has its `rotate` further back than one read of the log's tail."""
    target = tmp_path / "a.log"
    before = files_of(target, 3, backups=9000)
    log = lock_path(target)
    log.write_bytes(log.read_bytes() + b"rotate 9000 8999\n" + b"".join(b"moved %d\n" % i for i in range(8999, 2, -1)))
    assert log.stat().st_size > 64 * 1024
    sink = TextLineSink(target, max_bytes=40, backups=9000, integrity=KEY)  # finishes it
    sink.write_line("after")
    sink.close()
    assert_moved_up_one(target, before, ["after"])


@pytest.mark.parametrize("fails_at", [None, *range(8)])
def test_lowering_backups_deletes_the_files_beyond_it_at_the_next_rotation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails_at: int | None,
) -> None:
    """Six files with `backups = 5`, then `backups = 2`: the next rotation deletes a.log.5 .. a.log.2
    (oldest first, each with its chain file) and moves the rest, so the family is three files that verify,
    as if it had always had `backups = 2`; a deletion that fails is finished by the next writer. A file
    numbered after a gap is not the family's and is left."""
    target = tmp_path / "a.log"
    before = files_of(target, 6, backups=5)
    stray = tmp_path / "a.log.9"
    stray.write_text("kept by hand\n")
    lowered = TextLineSink(target, max_bytes=40, backups=2, integrity=KEY)
    family = [p for p in audit_files_in(tmp_path) if p != stray]
    assert all(r.ok for r in verify_paths(family, KEY))  # until the next rotation, nothing changes
    if fails_at is not None:
        calls = [0]
        real_unlink = os.unlink

        def unlink(path: Path) -> None:
            calls[0] += 1
            if calls[0] == fails_at + 1:
                raise OSError(errno.EIO, "Input/output error")
            real_unlink(path)

        monkeypatch.setattr("audit.rotation.os.unlink", unlink)
        with pytest.raises(AuditWriteError):
            lowered.write_line("y" * 30)
        monkeypatch.undo()
        lowered.close()
        lowered = TextLineSink(target, max_bytes=40, backups=2, integrity=KEY)
    lowered.write_line("y" * 30)  # does not fit: rotates (or, after a failure, finishes the rotation)
    lowered.close()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "a.log", "a.log.1", "a.log.2", "a.log.9"]
    assert sorted(p.name for p in tmp_path.glob(".*.chain")) == [".a.log.1.chain", ".a.log.2.chain", ".a.log.chain"]
    assert lines_in(tmp_path, "a.log.2") == before["a.log.1"]
    assert lines_in(tmp_path, "a.log.1") == before["a.log"]
    assert lines_in(tmp_path, "a.log") == ["y" * 30]
    assert stray.read_text() == "kept by hand\n"
    reports = verify_paths([p for p in audit_files_in(tmp_path) if p != stray], KEY)
    assert all(r.ok for r in reports), [str(p) for r in reports for p in r.problems]


@pytest.mark.parametrize(("fails", "at"), [("replace", k) for k in range(6)] + [("log", k) for k in range(5)])
def test_a_rotation_that_fails_at_any_step_ends_as_if_it_had_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  fails: str, at: int) -> None:
    """The rotation's six renames (three files, each with its chain file) and its log records: whichever
    fails first, the writer that comes next finishes it and every file ends up one place older, none lost
    and none moved twice."""
    target = tmp_path / "a.log"
    before = files_of(target, 4, backups=3)
    calls = [0]

    def failing(real: Callable[..., object]) -> Callable[..., object]:
        def step(*args: object) -> object:
            calls[0] += 1
            if calls[0] == at + 1:
                raise OSError(errno.EIO, "Input/output error")
            return real(*args)
        return step

    writer = TextLineSink(target, max_bytes=40, backups=3, integrity=KEY)
    if fails == "replace":
        monkeypatch.setattr("audit.rotation.os.replace", failing(os.replace))
    else:
        monkeypatch.setattr(FamilyLock, "_log", failing(FamilyLock._log))
    with pytest.raises(AuditWriteError, match="Input/output error"):
        writer.write_line("y" * 30)  # does not fit: rotates, and fails part-way
    monkeypatch.undo()
    writer.close()  # as if it had died: its files were already closed for the rotation

    after = TextLineSink(target, max_bytes=40, backups=3, integrity=KEY)
    after.write_line("after")
    after.close()
    if (fails, at) == ("log", 0):  # its first record failed: no rotation began, and "after" fits
        assert {n: lines_in(tmp_path, n) for n in before} == {**before, "a.log": [*before["a.log"], "after"]}
    else:
        assert {n: lines_in(tmp_path, n) for n in ("a.log.1", "a.log.2", "a.log.3")} == {
            "a.log.1": before["a.log"], "a.log.2": before["a.log.1"], "a.log.3": before["a.log.2"]}
        assert lines_in(tmp_path, "a.log") == ["after"]
    assert not (tmp_path / "a.log.4").exists()
    reports = verify_paths(audit_files_in(tmp_path), KEY)
    assert all(r.ok for r in reports), [str(p) for r in reports for p in r.problems]


def test_a_writer_idle_while_others_rotate_its_file_out_continues_without_a_false_alarm(tmp_path: Path) -> None:
    """The control plane wrote one line; `kgov users` commands then rotated the file past `backups`. The
    control plane's next `cont` names the file it continues from (`pg`): one rotated out is a note, as for
    the oldest files; one still within the family's range but gone is a deleted middle file."""
    target = tmp_path / "a.log"
    idle = TextLineSink(target, max_bytes=100, backups=2, integrity=KEY)
    idle.write_line("idle 0")
    busy = TextLineSink(target, max_bytes=100, backups=2, integrity=KEY)
    for i in range(12):
        busy.write_line(f"busy {i} " + "x" * 30)  # four rotations: the idle writer's file is gone
    idle.write_line("idle 1")
    idle.close()
    busy.close()
    reports = verify_paths(audit_files_in(tmp_path), KEY)
    assert all(r.ok for r in reports), [str(p) for r in reports for p in r.problems]
    assert any("rotated out" in n for r in reports for n in r.notes)
    # The same file gone from the middle of the family is still found.
    (tmp_path / "a.log.1").unlink()
    chain_path(tmp_path / "a.log.1").unlink()
    found = {p.reason for r in verify_paths(audit_files_in(tmp_path), KEY) for p in r.problems}
    assert found == {Reason.DELETED_MIDDLE_FILE}


@settings(max_examples=40, deadline=None)
@given(max_bytes=st.integers(60, 400), backups=st.sampled_from([1, 3, 1000]),
       ops=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 70)), min_size=1, max_size=60))
def test_writers_of_one_file_in_any_order_lose_nothing_and_verify(max_bytes: int, backups: int,
                                                                  ops: list[tuple[int, int]]) -> None:
    """Three sinks of one file (as three processes: each its own lock descriptor), writing in any order
    lines of any length: the kept files hold the newest lines, in the order written, each rotated file
    within `max_bytes` unless one line alone is larger; the trail verifies."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        sinks = [TextLineSink(d / "a.log", max_bytes=max_bytes, backups=backups, integrity=KEY) for _ in range(3)]
        written = [f"w{w} {i} " + "x" * size for i, (w, size) in enumerate(ops)]
        for (w, _), text in zip(ops, written, strict=True):
            sinks[w].write_line(text)
        for s in sinks:
            s.close()
        kept = sorted((p for p in d.iterdir() if not p.name.startswith(".")),
                      key=lambda p: -int(p.name.rsplit(".", 1)[1]) if p.name != "a.log" else 0)
        lines = [x for p in kept for x in p.read_text().splitlines()]
        assert lines == written[len(written) - len(lines):]  # the newest, in order, nothing missing between
        if backups == 1000:
            assert lines == written
        assert len(kept) <= backups + 1
        assert all(p.stat().st_size <= max_bytes or len(p.read_text().splitlines()) == 1 for p in kept)
        reports = verify_paths(audit_files_in(d), KEY)
        assert all(r.ok for r in reports), [str(p) for r in reports for p in r.problems]


def test_files_left_beyond_a_lowered_backups_by_the_old_rotation_are_deleted_by_the_next(tmp_path: Path) -> None:
    """The old rotation with `backups = 2` moved only a.log.1 and a.log (as `rotate 2 1` does), leaving
    a.log.3 .. a.log.5 behind a dropped file: `verify` reports them; the next rotation deletes them."""
    target = tmp_path / "a.log"
    files_of(target, 6, backups=5)
    log = lock_path(target)
    log.write_bytes(log.read_bytes() + b"rotate 2 1\n")  # a rotation as the old code did it, not yet done
    sink = TextLineSink(target, max_bytes=40, backups=2, integrity=KEY)  # does it
    found = {p.reason for r in verify_paths(audit_files_in(tmp_path), KEY) for p in r.problems}
    assert Reason.RENAMED in found
    sink.write_line("y" * 30)  # into the empty a.log the rotation left
    sink.write_line("z" * 30)  # rotates: deletes a.log.5 .. a.log.2, moves a.log.1 and a.log
    sink.close()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["a.log", "a.log.1", "a.log.2"]
    reports = verify_paths(audit_files_in(tmp_path), KEY)
    assert all(r.ok for r in reports), [str(p) for r in reports for p in r.problems]
