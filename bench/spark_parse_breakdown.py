"""Where the ingest's time goes: CPU time per line of each log file kind, in one `local[1]` JVM.

    .venv/bin/python bench/spark_parse_breakdown.py --data DIR [--rounds 2]

`DIR` is a `kgov audit generate` output. Its files are grouped by name (`kafka-authorizer.log`,
`kafka-request.log`, `server.log`, `events.jsonl`), and each group is run three ways into Spark's
`noop` sink:
- `read`: the text lines alone;
- `split` (authorizer lines only): the authorizer pattern's one `regexp_replace` and `split`, 12 raw
  columns, with no normalising;
- `parse`: the job's whole `ingest.parse_lines`.

The figure is the JVM's CPU time (user + system, from /proc) per line, not wall time, so a busy
machine disturbs it less. It includes the JIT and GC threads. Each measure repeats `--rounds` times
after one warm-up run; the smallest value is printed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KINDS = ("kafka-authorizer.log", "kafka-request.log", "server.log", "events.jsonl")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, type=Path, help="a `kgov audit generate` output directory")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()

    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    from spark_compliance import ingest
    from spark_compliance import kafka_lines as K
    from spark_compliance.session import build_session

    spark = build_session("local[1]", app_name="kgov-parse-breakdown")
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    pid = jvm.java.lang.ProcessHandle.current().pid()
    tick = os.sysconf("SC_CLK_TCK")

    def cpu_seconds() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    def measure(df: DataFrame) -> float:
        df.write.format("noop").mode("overwrite").save()  # warm-up: code generation, JIT
        best = float("inf")
        for _ in range(args.rounds):
            before = cpu_seconds()
            df.write.format("noop").mode("overwrite").save()
            best = min(best, cpu_seconds() - before)
        return best

    print(f"{'file kind':24s} {'lines':>9s} {'measure':>7s} {'us/line':>8s} {'lines/s':>9s}")
    total_lines, total_parse = 0, 0.0
    for kind in KINDS:
        files = sorted(str(f) for f in args.data.rglob(kind))
        if not files:
            continue
        lines = ingest.read_lines(spark, files)
        n = lines.count()
        measures: dict[str, DataFrame] = {"read": lines, "parse": ingest.compact(ingest.parse_lines(lines))}
        if kind == "kafka-authorizer.log":
            f = F.split(F.regexp_replace(F.col("value"), K.AUTHZ, K.AUTHZ_FIELDS), K.FIELD_SEP)
            measures["split"] = lines.select(*[f[i].alias(f"f{i}") for i in range(12)], "file_path")
        for name in ("read", "split", "parse"):
            if name not in measures:
                continue
            seconds = measure(measures[name])
            if name == "parse":
                total_lines, total_parse = total_lines + n, total_parse + seconds
            print(f"{kind:24s} {n:9,d} {name:>7s} {1e6 * seconds / n:8.1f} {n / seconds:9,.0f}", flush=True)
    if total_lines:
        print(f"{'all kinds (parse)':24s} {total_lines:9,d} {'parse':>7s} {1e6 * total_parse / total_lines:8.1f} "
              f"{total_lines / total_parse:9,.0f}")
    spark.stop()


if __name__ == "__main__":
    main()
