"""The audit job: ingest -> event table -> reports -> findings.json, Parquet per report, report.html.

Runs in-process (`kgov audit run`) or under `spark-submit` unchanged (verified with PySpark's own
spark-submit, `--master local[2]`):
    zip -r kgov-audit.zip spark_compliance audit
    spark-submit --master spark://host:7077 --py-files kgov-audit.zip spark_compliance/job.py --input ... --out ...
(`python -m spark_compliance.job` takes the same arguments as `kgov audit run`.)

Output directory:
    events/dt=YYYY-MM-DD/*.parquet   the normalised event table (schema.EVENT_SCHEMA)
    reports/<report>/*.parquet       one table per report
    findings.json                    a JSON array, one object per finding
    summary.json                     period, line counts per source and kind, bad-line sample, findings per rule
    report.html                      the self-contained page
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampType

from spark_compliance import findings as FD
from spark_compliance import html_report, ingest
from spark_compliance import reports as R
from spark_compliance import schema as S
from spark_compliance.inventory import load_classification, load_inventory
from spark_compliance.session import SESSION_CONF, build_session


@dataclass(frozen=True, slots=True)
class JobOptions:
    inputs: Sequence[str]
    out: str
    inventory: str | None = None
    classification: str | None = None
    master: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    default_zone: str = "UTC"
    source_zones: dict[str, str] = field(default_factory=dict)
    exclude_principals: tuple[str, ...] = ("User:kafka",)
    params: R.Params = field(default_factory=R.Params)


class Progress:
    """Stage lines on stderr, and while Spark works, its running stage's task counts every few seconds."""

    def __init__(self, spark: SparkSession | None, stream: Any = None, interval: float = 3.0) -> None:
        self.spark = spark
        self.stream = stream or sys.stderr
        self.interval = interval
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, message: str) -> None:
        print(f"[{time.monotonic() - self.t0:7.1f}s] {message}", file=self.stream, flush=True)

    def start(self) -> None:
        if self.spark is None:
            return
        tracker = self.spark.sparkContext.statusTracker()

        def poll() -> None:
            while not self._stop.wait(self.interval):
                for sid in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(sid)
                    if info is not None and info.numTasks:
                        self(f"  spark stage {sid}: {info.numCompletedTasks}/{info.numTasks} tasks")

        self._thread = threading.Thread(target=poll, name="audit-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def discover(inputs: Sequence[str], name: str) -> str | None:
    """`inventory.json` / `classification.json` in a local input directory (as the generator writes)."""
    for p in inputs:
        candidate = Path(p) / name
        if candidate.is_file():
            return str(candidate)
    return None


def utc_rows(df: DataFrame) -> list[Any]:
    """`df.collect()` with its timestamps as naive UTC datetimes. PySpark turns a TIMESTAMP into a naive
    datetime in the Python process's local zone (`datetime.fromtimestamp`), so on an auditor's machine
    outside UTC every time in findings.json and report.html would be local time marked UTC; a
    TIMESTAMP_NTZ (read in the job's UTC session) comes back as the UTC wall-clock time."""
    return df.select(*[F.col(f.name).cast("timestamp_ntz").alias(f.name) if isinstance(f.dataType, TimestampType)
                       else F.col(f.name) for f in df.schema.fields]).collect()


def _iso(ts: Any) -> str | None:
    if ts is None:
        return None
    if isinstance(ts, datetime):
        return ts.replace(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if ts.tzinfo is None else (
            ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return str(ts)


def _finding_dict(row: Any) -> dict[str, Any]:
    d = row.asDict()
    d["first_seen"] = _iso(d["first_seen"])
    d["last_seen"] = _iso(d["last_seen"])
    d["evidence"] = list(d["evidence"] or [])
    d["regulations"] = list(d["regulations"] or [])
    return {k: d[k] for k in FD.FINDING_COLUMNS}


def _sev_rank(f: dict[str, Any]) -> tuple[int, str, str]:
    return (FD.SEVERITY_ORDER.index(f["severity"]), f["rule"], str(f.get("principal") or ""))


def report_tables(events: DataFrame, inv_acls: DataFrame, inv_bindings: DataFrame, super_users: Sequence[str],
                  classification: DataFrame, params: R.Params) -> dict[str, tuple[DataFrame,
                                                                                   Callable[[DataFrame], DataFrame]]]:
    """Every report with the function that turns its table into findings."""
    return {
        "sensitive_access": (R.sensitive_access(events, classification), FD.sensitive_access),
        "denied_summary": (R.denied_summary(events), _no_findings),  # the table is the evidence; spikes are findings
        "denied_spikes": (R.denied_spikes(events, params), FD.denied_spike),
        "brute_force": (R.brute_force(events, params), FD.brute_force),
        "privileged_operations": (R.privileged_operations(events), FD.privileged_operation),
        "super_user_activity": (R.super_user_activity(events, super_users), FD.super_user_activity),
        "default_allow": (R.default_allow(events), FD.default_allow),
        "acl_usage": (R.acl_usage(events, inv_acls, inv_bindings, params),
                      lambda df: FD.dormant_acl(df).unionByName(FD.excessive_grant(df))),
        "off_hours_access": (R.off_hours_access(events, params), FD.off_hours_access),
        "first_seen": (R.first_seen(events, params), FD.first_seen),
        "volume": (R.volume(events, params), FD.exfiltration_volume),
        "client_inventory": (R.client_inventory(events, params), FD.outdated_client),
        "audit_gaps": (R.audit_gaps(events, params), FD.audit_gap),
    }


def _no_findings(df: DataFrame) -> DataFrame:
    spark = df.sparkSession
    return spark.createDataFrame([], "rule string, severity string, principal string, host string, resource string, "
                                     "count long, first_seen timestamp, last_seen timestamp, evidence array<string>, "
                                     "regulations array<string>")


def chart_data(events: DataFrame) -> dict[str, Any]:
    d = events.filter(F.col("event_type") == S.AUTHORIZATION)
    denials = utc_rows(d.filter((F.col("decision") == "DENIED") & F.col("logged"))
                       .groupBy(F.date_trunc("hour", "ts").alias("h")).count().orderBy("h"))
    top = (d.filter(F.col("principal").isNotNull()).groupBy("principal").count()
           .orderBy(F.desc("count"), "principal").limit(12).collect())
    heat = (d.filter((F.col("decision") == "ALLOWED") & F.col("logged"))
            .groupBy(((F.dayofweek("ts") + 5) % 7).alias("d"), F.hour("ts").alias("h")).count().collect())
    vol = (events.filter((F.col("event_type") == S.REQUEST) & (F.col("api") == "FETCH") & F.col("bytes").isNotNull())
           .groupBy("principal").agg(F.sum("bytes").alias("b")).orderBy(F.desc("b"), "principal").limit(12).collect())
    return {
        "denials": [(r["h"].strftime("%m-%d %H:00"), float(r["count"])) for r in denials],
        "top_principals": [(r["principal"], float(r["count"])) for r in top],
        "access_heat": [(r["d"], r["h"], float(r["count"])) for r in heat],
        "volume": [(r["principal"] or "?", float(r["b"])) for r in vol],
    }


class OutputError(ValueError):
    """An `--out` the job must not write to (checked before Spark starts)."""


# What a run writes directly under `--out`: an existing directory holding only these is an earlier run's.
OUTPUT_ENTRIES = frozenset({"events", "reports", "_lines", "findings.json", "summary.json", "report.html"})
_URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def _local(path: str) -> Path | None:
    """A local path as written (`file:` URIs too); None for another file system or a glob."""
    local = path.removeprefix("file://") if path.startswith("file://") else path.removeprefix("file:")
    if _URI_SCHEME.match(local) or any(c in local for c in "*?[{"):
        return None
    return Path(local)


def check_output(out: str, inputs: Sequence[str]) -> None:
    """Refuses an `--out` a run would damage or read back, before anything is written.

    A run replaces `events/`, `reports/<name>/` and `_lines/` under `--out` wholesale (Spark's overwrite
    mode deletes them first) and reads its inputs recursively. So `--out` must not overlap an input
    (the run would read its own output next time, or delete input files), and an existing `--out` must be
    empty or hold only an earlier run's output, none of its entries a symbolic link."""
    local = _local(out)
    if local is None:
        return
    target = local.resolve()
    for inp in inputs:
        path = _local(inp)
        if path is None:
            continue
        src = path.resolve()
        if target == src or target.is_relative_to(src) or src.is_relative_to(target):
            raise OutputError(f"--out {out} overlaps --input {inp}: the run would read back or replace "
                              "its own input; name a directory outside the inputs")
    if not local.exists() and not local.is_symlink():
        return
    if not target.is_dir():
        raise OutputError(f"--out {out} exists and is not a directory")
    entries = {p.name: p for p in target.iterdir()}
    if foreign := sorted(set(entries) - OUTPUT_ENTRIES):
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise OutputError(f"--out {out} is not empty and not an earlier audit's output (it holds {shown}); "
                          "name a new or empty directory")
    if links := sorted(name for name, p in entries.items() if p.is_symlink()):
        raise OutputError(f"--out {out}: {', '.join(links)} is a symbolic link; remove it or name another directory")


def _write_file(directory: Path, name: str, text: str) -> None:
    """Writes `directory/name` through a new file renamed over it: a symbolic link planted at that name
    (between the check and the write) is replaced, never followed, and readers never see half a file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, directory / name)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run(opts: JobOptions, spark: SparkSession | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Runs the whole job; returns the summary (also written to summary.json)."""
    check_output(opts.out, opts.inputs)
    # Stop the session at the end only if this call started it (not a notebook's or a test's).
    own = spark is None and SparkSession.getActiveSession() is None
    spark = spark or build_session(opts.master)
    # A session passed in (a notebook's) gets the job's settings for the run, its own back afterwards:
    # log4j stamps are read as wall-clock time and every report's dates and hours are UTC only in a UTC
    # session, and untrusted input must not raise (ANSI mode off).
    saved = {key: spark.conf.get(key, None) for key in SESSION_CONF}
    for key, value in SESSION_CONF.items():
        spark.conf.set(key, value)
    progress = progress or Progress(spark)
    progress.start()
    try:
        return _run(opts, spark, progress)
    finally:
        progress.stop()
        if own:
            spark.stop()
        else:
            for key, old in saved.items():
                if old is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, old)


def _delete(spark: SparkSession, path: str) -> None:
    """Removes a directory the job wrote, on whatever file system holds it (Hadoop's API, as Spark wrote it)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).delete(hadoop_path, True)


def _run(opts: JobOptions, spark: SparkSession, progress: Progress) -> dict[str, Any]:
    out = opts.out.rstrip("/")
    local = _local(out)
    local_out = local if local is not None and "://" not in out else None
    inventory_path = opts.inventory or discover(opts.inputs, "inventory.json")
    classification_path = opts.classification or discover(opts.inputs, "classification.json")
    progress(f"[1/5] reading {', '.join(opts.inputs)} (inventory: {inventory_path or 'none'}, "
             f"classification: {classification_path or 'none'})")
    inv = load_inventory(spark, inventory_path)
    classification = load_classification(spark, classification_path)
    lines = ingest.read_lines(spark, opts.inputs)
    # Parsed once, in one pass written to Parquet by kind (memory stays flat however large the input):
    # the event table (topic ids resolved to names, which needs every line parsed first) and the line
    # counts are read from that. It is about 10% faster than caching the parsed rows, which measured 52 s
    # to build plus 11 s to write from on 2M lines, against 50 s + 7 s. The reports then read the event
    # table: only the columns each needs, with a small query plan.
    parsed = ingest.compact(ingest.parse_lines(lines, default_zone=opts.default_zone, source_zones=opts.source_zones,
                                               exclude_principals=opts.exclude_principals))
    staging = f"{out}/_lines"
    progress("[2/5] parsing (Parquet by kind), then writing the event table (Parquet, partitioned by dt)")
    try:
        parsed.write.mode("overwrite").partitionBy("kind").parquet(staging)
        lines_table = spark.read.schema(parsed.schema).parquet(staging)  # (an empty input writes no files)
        ingest.within_period(ingest.events_of(lines_table), opts.since, opts.until).write.mode(
            "overwrite").partitionBy("dt").parquet(f"{out}/events")
        quality = [r.asDict() for r in ingest.line_quality(lines_table).orderBy("source", "kind").collect()]
        bad_sample = [r.asDict() for r in ingest.bad_line_sample(lines_table).collect()]
    finally:
        _delete(spark, staging)
    table = spark.read.schema(S.EVENT_SCHEMA).parquet(f"{out}/events")
    stats = utc_rows(table.agg(F.count(F.lit(1)).alias("n"), F.min("ts").alias("a"), F.max("ts").alias("b")))[0]
    n_events = int(stats["n"]) if stats else 0
    progress(f"      {n_events:,} events; {sum(q['lines'] for q in quality if q['kind'] == 'bad'):,} bad lines")

    progress("[3/5] reports")
    all_findings: list[dict[str, Any]] = []
    tables = report_tables(table, inv.acls, inv.role_bindings, inv.super_users, classification, opts.params)
    for i, (name, (df, to_findings)) in enumerate(tables.items(), start=1):
        path = f"{out}/reports/{name}"
        df.write.mode("overwrite").parquet(path)
        written = spark.read.parquet(path)
        rows = [_finding_dict(r) for r in utc_rows(to_findings(written))]
        all_findings.extend(rows)
        progress(f"      {i:2d}/{len(tables)} {name}: {len(rows)} finding(s)")
    all_findings.sort(key=_sev_rank)

    progress("[4/5] charts")
    charts = chart_data(table)
    summary: dict[str, Any] = {
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "inputs": list(opts.inputs),
        "inventory": inventory_path, "classification": classification_path,
        "period": {"start": _iso(stats["a"]) if stats else None, "end": _iso(stats["b"]) if stats else None},
        "lines": int(sum(q["lines"] for q in quality)),
        "events": n_events,
        "bad_lines": int(sum(q["lines"] for q in quality if q["kind"] == ingest.KIND_BAD)),
        "line_quality": quality,
        "bad_line_sample": bad_sample,
        "findings_by_rule": {r: sum(1 for f in all_findings if f["rule"] == r) for r in FD.RULES},
    }
    progress("[5/5] writing findings.json, summary.json, report.html")
    page = html_report.render(summary=summary, findings=all_findings, charts=charts)
    documents = {"findings.json": json.dumps(all_findings, indent=2) + "\n",
                 "summary.json": json.dumps(summary, indent=2, default=str) + "\n", "report.html": page}
    for fname, text in documents.items():
        if local_out is not None:
            local_out.mkdir(parents=True, exist_ok=True)
            _write_file(local_out, fname, text)
        else:  # a cluster file system: one text file written through Spark
            spark.createDataFrame([(text,)], "value string").coalesce(1).write.mode("overwrite").text(f"{out}/{fname}")
    progress(f"done: {len(all_findings)} finding(s) in {out}/findings.json")
    return summary


# --- command line (shared with `kgov audit run`) ------------------------------------------------------------
def _utc(text: str) -> datetime:
    ts = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def _zones(values: Sequence[str]) -> tuple[str, dict[str, str]]:
    default, per_source = "UTC", {}
    for v in values:
        if "=" in v:
            src, zone = v.split("=", 1)
            per_source[src] = zone
        else:
            default = v
    return default, per_source


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", nargs="+", action="extend", required=True, metavar="PATH",
                   help="log files or directories (recursive; .gz fine); repeatable")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="output directory (local or any Hadoop URI): new, empty or an earlier run's, outside the inputs")
    p.add_argument("--inventory", metavar="FILE", help="`kgov acls export` JSON (default: inventory.json in an input)")
    p.add_argument("--classification", metavar="FILE",
                   help="topic classification JSON (default: classification.json in an input)")
    p.add_argument("--master", metavar="URL", help="Spark master (default local[*]; kept under spark-submit)")
    p.add_argument("--since", type=_utc, metavar="ISO", help="only events at or after this time (UTC if no zone)")
    p.add_argument("--until", type=_utc, metavar="ISO", help="only events before this time")
    p.add_argument("--log-timezone", action="append", default=[], metavar="[SOURCE=]ZONE",
                   help="zone of log4j timestamps (Kafka writes local time), globally or per source; repeatable")
    p.add_argument("--exclude-principal", action="append", metavar="PRINCIPAL",
                   help="inter-broker principals to drop (default User:kafka); repeatable")
    p.add_argument("--business-hours", default="8-18", metavar="START-END", help="business hours, e.g. 8-18")
    p.add_argument("--business-timezone", default="UTC", metavar="ZONE")
    p.add_argument("--dormant-days", type=int, default=30, metavar="N")
    p.add_argument("--baseline-days", type=float, default=2.0, metavar="N",
                   help="first days of the period that define known principals and hosts")
    p.add_argument("--gap-minutes", type=int, default=60, metavar="N")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="any other report threshold, e.g. brute-force-threshold=50 or volume-factor=20; "
                        f"repeatable; names: {', '.join(_TUNABLE)}")
    p.add_argument("--min-client-version", action="append", default=[], metavar="SOFTWARE=VERSION",
                   help="oldest acceptable version of a client library (adds to or replaces the defaults: "
                        f"{', '.join(f'{k}={v}' for k, v in R.DEFAULT_MIN_CLIENT_VERSIONS.items())}); repeatable")


# Report thresholds settable with `--param` (the numeric `Params` fields without a flag of their own).
_FLAGGED = ("business_zone", "business_start_hour", "business_end_hour", "dormant_days", "baseline_days",
            "gap_minutes")
_DEFAULTS = R.Params()
_TUNABLE: dict[str, type] = {
    f.name.replace("_", "-"): type(getattr(_DEFAULTS, f.name))
    for f in dataclass_fields(R.Params)
    if f.name not in _FLAGGED and type(getattr(_DEFAULTS, f.name)) in (int, float)
}

_RANGES: dict[str, tuple[float, float]] = {"off-hours-max-share": (0, 1), "brute-force-window-minutes": (1, math.inf)}


def _tuned(values: Sequence[str]) -> dict[str, Any]:
    """`--param` values as `Params` keyword arguments; a clear SystemExit for anything malformed."""
    out: dict[str, Any] = {}
    for item in values:
        name, sep, text = (part.strip() for part in item.partition("="))
        name = name.replace("_", "-")
        if not sep or name not in _TUNABLE:
            raise SystemExit(f"--param {item!r}: expected NAME=VALUE with NAME one of {', '.join(_TUNABLE)}")
        kind = _TUNABLE[name]
        try:
            value = kind(text)
        except ValueError:
            raise SystemExit(f"--param {name}: {text!r} is not a{'n integer' if kind is int else ' number'}") from None
        low, high = _RANGES.get(name, (0, math.inf))
        if not low <= value <= high:  # (NaN fails too)
            raise SystemExit(f"--param {name}: {text!r} is out of range ({low} to {high})")
        out[name.replace("-", "_")] = value
    return out


def _client_versions(values: Sequence[str]) -> dict[str, str]:
    versions = dict(R.DEFAULT_MIN_CLIENT_VERSIONS)
    for item in values:
        software, sep, version = item.partition("=")
        if not sep or not software.strip() or not re.fullmatch(r"v?\d+(\.\d+){0,2}", version.strip()):
            raise SystemExit(f"--min-client-version {item!r}: expected SOFTWARE=VERSION such as librdkafka=2.3.0")
        versions[software.strip()] = version.strip()
    return versions


def options_from_args(args: argparse.Namespace) -> JobOptions:
    start, _, end = str(args.business_hours).partition("-")
    if not (start.isdigit() and end.isdigit() and 0 <= int(start) < int(end) <= 24):
        raise SystemExit("--business-hours must look like 8-18")
    default_zone, per_source = _zones(args.log_timezone)
    params = R.Params(business_zone=args.business_timezone, business_start_hour=int(start),
                      business_end_hour=int(end), dormant_days=args.dormant_days, baseline_days=args.baseline_days,
                      gap_minutes=args.gap_minutes, min_client_versions=_client_versions(args.min_client_version),
                      **_tuned(args.param))
    # Under spark-submit the JVM started this driver (PYSPARK_GATEWAY_PORT) and owns the master.
    master = args.master or (None if os.environ.get("PYSPARK_GATEWAY_PORT") else "local[*]")
    return JobOptions(inputs=args.input, out=args.out, inventory=args.inventory, classification=args.classification,
                      master=master, since=args.since, until=args.until, default_zone=default_zone,
                      source_zones=per_source, exclude_principals=tuple(args.exclude_principal or ("User:kafka",)),
                      params=params)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="spark_compliance.job", description="Kafka compliance audit on Spark")
    add_run_arguments(p)
    opts = options_from_args(p.parse_args(argv))
    try:
        run(opts)
    except OutputError as e:
        raise SystemExit(f"spark_compliance.job: {e}") from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
