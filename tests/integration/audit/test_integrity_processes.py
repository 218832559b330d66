"""Several processes appending to one sealed audit file at once (the control plane and `kgov users` commands
share `events.jsonl`): lines and seals of different processes interleave in any order the scheduler picks,
and the trail verifies; removing one process's lines and seals afterwards does not."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from audit.integrity import IntegrityKey, audit_files_in, chain_path, verify_directory, verify_paths

KEY_TEXT = "k" * 43

WRITER = textwrap.dedent("""
    import sys
    from audit.integrity import IntegrityKey
    from audit.sinks import TextLineSink
    sink = TextLineSink(sys.argv[1], integrity=IntegrityKey(sys.argv[2].encode()), max_bytes=10**9)
    sys.stdin.readline()  # every writer is started before any writes
    for i in range(1500):  # enough for the writers to interleave
        sink.write_line(f"{sys.argv[3]} line {i} " + "x" * (i % 17))
    sink.close()
""")


def run_writers(script: str, argvs: list[list[str]]) -> list[subprocess.Popen[str]]:
    """Runs `script` once per argument list, all released at once; waits for them to exit cleanly."""
    root = str(Path(__file__).resolve().parents[3])
    procs = [subprocess.Popen([sys.executable, "-c", script, *argv], stdin=subprocess.PIPE, cwd=root,
                              env={"PYTHONPATH": root}, text=True)
             for argv in argvs]
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.close()
    for p in procs:
        assert p.wait(timeout=120) == 0
    return procs


def test_processes_writing_one_file_at_once_verify_and_one_cut_out_does_not(tmp_path: Path) -> None:
    target = tmp_path / "events.log"
    procs = run_writers(WRITER, [[str(target), KEY_TEXT, name] for name in ("p1", "p2", "p3")])
    key = IntegrityKey(KEY_TEXT.encode())
    [report] = verify_paths(audit_files_in(tmp_path), key)
    assert report.ok and report.records == 4500 and report.writers == 3, report

    # The process that wrote the first line, cut out with all its seals: the others' lines moved up.
    lines = target.read_text().splitlines(keepends=True)
    name = lines[0].split()[0]
    pid = procs[("p1", "p2", "p3").index(name)].pid
    chain = chain_path(target)
    entries = [json.loads(x) for x in chain.read_text().splitlines()]
    writer = next(e["w"] for e in entries if e.get("pid") == pid)
    target.write_text("".join(x for x in lines if not x.startswith(name + " ")))
    chain.write_text("".join(json.dumps(e) + "\n" for e in entries if e["w"] != writer))
    [report] = verify_paths(audit_files_in(tmp_path), key)
    assert not report.ok


ROTATING_WRITER = textwrap.dedent("""
    import sys
    from audit.integrity import IntegrityKey
    from audit.sinks import TextLineSink
    sink = TextLineSink(sys.argv[1], integrity=IntegrityKey(sys.argv[2].encode()), max_bytes=int(sys.argv[4]),
                        backups=10_000)
    sys.stdin.readline()
    for i in range(int(sys.argv[5])):
        sink.write_line(f"{sys.argv[3]} {i:05d} " + "x" * (i % 23))
    sink.close()
""")


def test_processes_rotating_one_file_at_once_lose_and_misorder_nothing_and_verify(tmp_path: Path) -> None:
    """Each process decides to rotate on its own, about every 20 lines of all of them: without the rotation
    lock two rotations at once overwrote a moved file and writers kept appending to renamed files."""
    target = tmp_path / "events.log"
    names = ("p1", "p2", "p3", "p4")
    run_writers(ROTATING_WRITER, [[str(target), KEY_TEXT, name, "1000", "400"] for name in names])
    files = sorted((p for p in tmp_path.iterdir() if not p.name.startswith(".")),
                   key=lambda p: -int(p.name.rsplit(".", 1)[1]) if p.name != target.name else 0)
    assert len(files) > 30
    written = [x for p in files for x in p.read_text().splitlines()]
    assert len(written) == 1600  # nothing lost, nothing twice
    for name in names:  # each process's lines in the order it wrote them, oldest file first
        mine = [int(x.split()[1]) for x in written if x.split()[0] == name]
        assert mine == list(range(400))
    assert all(p.stat().st_size <= 1000 for p in files)  # every rotation decided on the file's real size
    reports = verify_paths(audit_files_in(tmp_path), IntegrityKey(KEY_TEXT.encode()))
    assert len(reports) == len(files) and all(r.ok for r in reports), [str(p) for r in reports for p in r.problems]


def test_verify_sees_a_consistent_trail_while_another_process_writes_and_rotates_it(tmp_path: Path) -> None:
    """`kgov audit verify` on the live directory: it opens each family under the writers' lock, so a line
    without its seal yet, or a rotation half done, is never what it reads."""
    target = tmp_path / "events.log"
    root = str(Path(__file__).resolve().parents[3])
    writer = subprocess.Popen([sys.executable, "-c", ROTATING_WRITER, str(target), KEY_TEXT, "p1", "1500", "6000"],
                              stdin=subprocess.PIPE, cwd=root, env={"PYTHONPATH": root}, text=True)
    assert writer.stdin is not None
    writer.stdin.write("go\n")
    writer.stdin.close()
    key = IntegrityKey(KEY_TEXT.encode())
    rounds = 0
    try:
        while writer.poll() is None or rounds < 3:
            if target.exists():
                reports = verify_directory(tmp_path, key)
                assert all(r.ok for r in reports), [str(p) for r in reports for p in r.problems]
                rounds += 1
    finally:
        writer.wait(timeout=120)
    assert writer.returncode == 0 and rounds >= 3
