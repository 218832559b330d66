"""Several processes appending to one sealed audit file at once (the control plane and `kgov users` commands
share `events.jsonl`): lines and seals of different processes interleave in any order the scheduler picks,
and the trail verifies; removing one process's lines and seals afterwards does not."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from audit.integrity import IntegrityKey, audit_files_in, chain_path, verify_paths

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


def test_processes_writing_one_file_at_once_verify_and_one_cut_out_does_not(tmp_path: Path) -> None:
    target = tmp_path / "events.log"
    root = str(Path(__file__).resolve().parents[3])
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(target), KEY_TEXT, name], stdin=subprocess.PIPE,
                              cwd=root, env={"PYTHONPATH": root}, text=True)
             for name in ("p1", "p2", "p3")]
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.close()
    for p in procs:
        assert p.wait(timeout=120) == 0
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
