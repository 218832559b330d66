"""Where `kgov audit run` writes: never over its inputs, a stranger's directory or a symbolic link's target;
and in UTC whatever session it is given."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from kgov.cli import main as kgov_main
from spark_compliance import ingest, job

LINE = ("[2024-05-01 10:00:00,123] INFO Principal = User:mallory is Denied Operation = Read from host = 10.0.0.66"
        " on resource = Topic:orders (kafka.authorizer.logger)\n")


def _logs(root: Path) -> Path:
    (root / "broker-1").mkdir(parents=True)
    (root / "broker-1" / "kafka-authorizer.log").write_text(LINE)
    return root


def _refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], inp: Path, out: Path) -> str:
    assert kgov_main(["audit", "run", "--input", str(inp), "--out", str(out), "--master", "local[1]"]) == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("where", ["same", "inside", "around"])
def test_out_overlapping_an_input_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str) -> None:
    logs = _logs(tmp_path / "logs")
    out = {"same": logs, "inside": logs / "audit", "around": tmp_path}[where]
    assert "overlaps --input" in _refused(tmp_path, capsys, logs, out)
    assert sorted(p.name for p in logs.rglob("*")) == ["broker-1", "kafka-authorizer.log"]


def test_out_holding_other_files_or_links_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = _logs(tmp_path / "logs")
    home = tmp_path / "home"
    (home / "events").mkdir(parents=True)
    (home / ".bashrc").write_text("keep me\n")
    assert "not an earlier audit's output (it holds .bashrc)" in _refused(tmp_path, capsys, logs, home)
    assert (home / ".bashrc").read_text() == "keep me\n" and (home / "events").is_dir()
    prior = tmp_path / "prior"
    prior.mkdir()
    (prior / "events").symlink_to(home)
    assert "events is a symbolic link" in _refused(tmp_path, capsys, logs, prior)
    (tmp_path / "file").write_text("x")
    assert "is not a directory" in _refused(tmp_path, capsys, logs, tmp_path / "file")
    assert (home / ".bashrc").read_text() == "keep me\n"


def test_out_on_another_file_system_is_left_to_spark(tmp_path: Path) -> None:
    job.check_output("hdfs://nn/audit", [str(tmp_path)])
    job.check_output(str(tmp_path / "new"), ["s3a://bucket/logs", "hdfs:/logs"])


def test_documents_replace_a_planted_link_never_its_target(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (out / "report.html").symlink_to(victim)  # planted after the check, by a local user racing the run
    job._write_file(out, "report.html", "<html></html>\n")
    assert victim.read_text() == "keep me\n"
    assert not (out / "report.html").is_symlink() and (out / "report.html").read_text() == "<html></html>\n"
    assert (out / "report.html").stat().st_mode & 0o777 == 0o644
    assert sorted(os.listdir(out)) == ["report.html"]  # no temporary file left


@pytest.mark.spark
def test_a_session_passed_in_runs_the_job_in_utc_and_gets_its_own_settings_back(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Log4j stamps are wall-clock times read in the session's zone, and every report's dates and hours
    are the session's: a notebook's session in New York would shift the whole audit by four hours."""
    seen: dict[str, str | None] = {}

    def fake_run(opts: job.JobOptions, session: SparkSession, progress: object) -> dict[str, object]:
        seen.update({k: session.conf.get(k) for k in ("spark.sql.session.timeZone", "spark.sql.ansi.enabled")})
        return {}

    monkeypatch.setattr(job, "_run", fake_run)
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    spark.conf.set("spark.sql.ansi.enabled", "true")
    try:
        job.run(job.JobOptions(inputs=[str(_logs(tmp_path / "logs"))], out=str(tmp_path / "out")), spark=spark)
        assert seen == {"spark.sql.session.timeZone": "UTC", "spark.sql.ansi.enabled": "false"}
        assert spark.conf.get("spark.sql.session.timeZone") == "America/New_York"
        assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        spark.conf.set("spark.sql.ansi.enabled", "false")


@pytest.fixture
def new_york_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The Python process in New York time (an auditor's laptop); the JVM and the session stay UTC."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.spark
def test_times_stay_utc_on_a_machine_outside_utc(spark: SparkSession, new_york_process: None) -> None:
    ten = datetime(2024, 5, 1, 10, 0)
    events = spark.createDataFrame(
        [(ten, "AUTHORIZATION", "DENIED", True, "User:m", "FETCH", None)],
        "ts timestamp, event_type string, decision string, logged boolean, principal string, api string, bytes long")
    # Written to the session as 10:00 UTC (aware, so PySpark does not read it as New York time).
    events = events.withColumn("ts", F.to_timestamp(F.lit("2024-05-01 10:00:00")))
    assert [r["ts"] for r in job.utc_rows(events)] == [ten]
    assert job.chart_data(events)["denials"] == [("05-01 10:00", 1.0)]
    kept = ingest.within_period(events, datetime(2024, 5, 1, 10, 0, tzinfo=UTC), datetime(2024, 5, 1, 10, 1))
    assert kept.count() == 1
    assert ingest.within_period(events, datetime(2024, 5, 1, 6, 0, 1, tzinfo=ZoneInfo("America/New_York")),
                                None).count() == 0
