"""The SparkSession the audit job runs in: local by default, any cluster with `--master`."""

from __future__ import annotations

import os
import re

from pyspark.sql import SparkSession

# Reports and the ingest compute calendar dates and hours in UTC (`ingest.parse_lines`).
SESSION_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    # Untrusted input must never raise: the ingest uses try_* functions; ANSI off is a second net.
    "spark.sql.ansi.enabled": "false",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    # The ingest's row carries two nested JSON structs (~80 leaf fields): above the default of 100 fields
    # Spark gives up whole-stage code generation, which measured 2-3x slower here.
    "spark.sql.codegen.maxFields": "2000",
    # The event table is written partitioned by date: a writer per date open at once instead of sorting
    # every row by date first (a week of logs is 7-8 partitions per task; more fall back to the sort).
    "spark.sql.maxConcurrentOutputFileWriters": "64",
}


def default_driver_memory() -> str:
    """A local session's heap (driver and executors are one JVM): a quarter of the machine, 1-8 GiB,
    rather than Spark's own default of 1 GiB, for the reports' aggregations and joins."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return "1g"
    return f"{max(1, min(8, total // 4 // 2**30))}g"


class SessionError(ValueError):
    """A session setting from the environment that Spark could not start with."""


def driver_memory() -> str:
    """`KGOV_AUDIT_DRIVER_MEMORY` (a JVM size such as `12g`) or the default; a malformed value is refused
    here, with its name, rather than by a JVM that fails to start."""
    value = os.environ.get("KGOV_AUDIT_DRIVER_MEMORY", "").strip()
    if not value:
        return default_driver_memory()
    if not re.fullmatch(r"[1-9]\d*[kKmMgGtT]?", value):
        raise SessionError(f"KGOV_AUDIT_DRIVER_MEMORY must be a JVM heap size such as 4g or 12288m, not {value!r}")
    return value


def build_session(master: str | None = None, *, app_name: str = "kgov-audit",
                  shuffle_partitions: int | None = None, ui: bool = False) -> SparkSession:
    """A session with the job's settings. Under `spark-submit`, `master=None` keeps the submitted one."""
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    # Only takes effect when this call starts the JVM (not under spark-submit, which sized it already).
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):
        builder = builder.config("spark.driver.memory", driver_memory())
    builder = builder.config("spark.ui.enabled", "true" if ui else "false")
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    for key, value in SESSION_CONF.items():  # an existing session (spark-submit, notebooks) too
        spark.conf.set(key, value)
    spark.sparkContext.setLogLevel("ERROR")
    return spark
