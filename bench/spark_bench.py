"""Compliance-audit throughput: generated logs through ingest and every report, Spark vs pure Python.

    .venv/bin/python bench/spark_bench.py [--lines 10000000] [--seed 1] [--data DIR] [--keep]

One run: generates `--lines` mixed-format lines (`kgov audit generate`), parses them with the
single-process pure-Python parser (`spark_compliance.reference_parser`), then runs the whole job
(`spark_compliance.job.run`: ingest, event table, all reports, findings, HTML) with `local[1]` (pinned
to one core with taskset when available, so the figure is per core) and with `local[2]`, each in its
own process (one SparkContext per process). JVM start-up is excluded; everything after it is timed.

Prints lines/s (end to end and for the ingest stage alone), lines/s per core, the local[2]/local[1]
speed-up and the Spark/pure-Python ratio. Targets (issue 7): >= 250k lines/s per core end to end,
speed-up >= 1.6 on 2 cores, >= 5x the pure-Python baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def worker(master: str, data: str, out: str) -> None:
    from spark_compliance.job import JobOptions, Progress, run
    from spark_compliance.session import build_session

    spark = build_session(master, app_name="kgov-bench", shuffle_partitions=8)
    spark.range(1000).count()  # JVM and Python worker warm

    marks: dict[str, float] = {}

    class Timed(Progress):
        def __call__(self, message: str) -> None:
            if message.startswith("[3/5]"):
                marks["ingest_done"] = time.perf_counter()
            super().__call__(message)

    t0 = time.perf_counter()
    summary = run(JobOptions(inputs=[data], out=out, master=master), spark=spark,
                  progress=Timed(spark, stream=sys.stderr, interval=30.0))
    total = time.perf_counter() - t0
    print(json.dumps({"master": master, "seconds": total, "ingest_seconds": marks["ingest_done"] - t0,
                      "lines": summary["lines"], "events": summary["events"],
                      "findings": sum(summary["findings_by_rule"].values())}))
    spark.stop()


def _spark_run(master: str, data: Path, out: Path, pin: bool) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", master, "--data", str(data), "--out", str(out)]
    if pin and shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lines", type=int, default=10_000_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data", help="reuse (or create) generated logs here")
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--keep", action="store_true", help="keep the generated logs and outputs")
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.data, args.out)
        return 0

    from spark_compliance.generator import generate
    from spark_compliance.reference_parser import parse_tree

    tmp = Path(tempfile.mkdtemp(prefix="kgov-spark-bench-"))
    data = Path(args.data) if args.data else tmp / "logs"
    try:
        if not (data / "planted.json").exists():
            t = time.perf_counter()
            generate(data, args.lines, args.seed)
            print(f"generated {args.lines:,} lines in {time.perf_counter() - t:.1f}s into {data}")
        size = sum(f.stat().st_size for f in data.rglob("*") if f.is_file())
        print(f"input: {size / 1e9:.2f} GB; machine: {os.cpu_count()} cores")

        t = time.perf_counter()
        counts = parse_tree(data)
        py_s = time.perf_counter() - t
        py_lines = sum(counts.values())
        py_rate = py_lines / py_s
        print(f"pure Python (1 process, parse only): {py_lines:,} lines in {py_s:.1f}s = {py_rate:,.0f} lines/s")

        one = _spark_run("local[1]", data, tmp / "out1", pin=True)
        two = _spark_run("local[2]", data, tmp / "out2", pin=False)
        for r, cores in ((one, 1), (two, 2)):
            rate = r["lines"] / r["seconds"]
            ingest = r["lines"] / r["ingest_seconds"]
            print(f"spark {r['master']}: ingest+all reports {r['seconds']:.1f}s = {rate:,.0f} lines/s "
                  f"({rate / cores:,.0f} per core); ingest stage alone {ingest:,.0f} lines/s "
                  f"({ingest / cores:,.0f} per core); {r['events']:,} events, {r['findings']} findings")
        r1 = one["lines"] / one["seconds"]
        r2 = two["lines"] / two["seconds"]
        print(f"speed-up local[2]/local[1]: {r2 / r1:.2f}x (target >= 1.6)")
        print(f"per core, end to end: {r1:,.0f} lines/s (target >= 250,000)")
        print(f"spark local[2] / pure Python: {r2 / py_rate:.2f}x; spark local[1] / pure Python: "
              f"{r1 / py_rate:.2f}x (target >= 5x)")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
