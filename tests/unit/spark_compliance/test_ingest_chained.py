"""The compliance ingest reads an audit directory written with integrity on exactly as one without:
the chain files (`.NAME.chain`, hidden) are not read as log lines, and every line parses."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from audit.integrity import IntegrityKey, audit_files_in, verify_paths
from audit.kafka_format import authorizer_log_line, log4j_envelope
from audit.model import authorization_event
from audit.sinks import JsonLinesSink, TextLineSink
from spark_compliance import ingest

pytestmark = pytest.mark.spark

TS = datetime(2024, 5, 1, 10, 0, 0, 123000, tzinfo=UTC)
KEY = IntegrityKey(b"s" * 43)


def write_audit_dir(d: Path) -> int:
    """The control plane's two files, sealed, rotated and restarted; returns how many records were written."""
    written = 0
    for _ in range(2):  # a restart: a second writer appends to the same files
        events = JsonLinesSink(d / "events.jsonl", max_bytes=4000, backups=20, integrity=KEY)
        lines = TextLineSink(d / "kafka-authorizer.log", max_bytes=2000, backups=20, integrity=KEY)
        for i in range(15):
            principal = f"User:u{i}"
            events.write(authorization_event(
                source="crn:///kafka=c", time=TS, principal=principal, granted=False, operation="Read",
                resource_type="Topic", resource_name="orders", pattern_type="LITERAL",
                client_address="10.0.0.1", method_name="kafka.Fetch", rule="DefaultDeny"))
            lines.write_line(log4j_envelope(TS, "INFO", authorizer_log_line(
                principal=principal, allowed=False, operation="READ", host="10.0.0.1", resource_type="TOPIC",
                pattern_type="LITERAL", resource_name="orders", request_name="Fetch", resource_ref_count=1,
                rule="DefaultDeny"), "kafka.authorizer.logger"))
            written += 2
        events.close()
        lines.close()
    return written


def test_a_sealed_audit_directory_ingests_with_no_bad_line(spark: SparkSession, tmp_path: Path) -> None:
    d = tmp_path / "kgov-1"
    written = write_audit_dir(d)
    assert len(list(d.glob(".*.chain"))) > 4  # the chain files are there, beside rotated files
    assert len(list(d.glob(".*.lock"))) == 2  # and the rotation locks, which log each rotation's steps
    assert all(r.ok for r in verify_paths(audit_files_in(d), KEY))
    parsed = ingest.parse_lines(ingest.read_lines(spark, [str(tmp_path)])).cache()
    paths = {r["file_path"] for r in parsed.select("file_path").distinct().collect()}
    assert paths and not any(".chain" in p or ".lock" in p for p in paths)
    kinds = {r["kind"]: r["n"] for r in parsed.groupBy("kind").agg(F.sum("line_weight").alias("n")).collect()}
    assert kinds == {ingest.KIND_EVENT: written}
    parsed.unpersist()
