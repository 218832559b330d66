"""`kgov audit generate` + `kgov audit run`: every planted incident is found, and nothing else."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from kgov.cli import main as kgov_main

pytestmark = [pytest.mark.spark, pytest.mark.slow]

KEYS = ("principal", "host", "resource")


def _matches(planted: dict[str, Any], finding: dict[str, Any]) -> bool:
    """A planted incident names the fields it is sure of; None means "any value"."""
    return planted["rule"] == finding["rule"] and all(
        planted[k] is None or planted[k] == finding[k] for k in KEYS)


@pytest.fixture(scope="module")
def audit_run(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    data = tmp_path_factory.mktemp("audit-input")
    out = tmp_path_factory.mktemp("audit-out")
    # generate runs as a real command line; run reuses this process's Spark session.
    subprocess.run([sys.executable, "-m", "kgov", "audit", "generate", "--lines", "8000", "--seed", "11",
                    "--out", str(data)], check=True, capture_output=True, timeout=120)
    assert kgov_main(["audit", "run", "--input", str(data), "--out", str(out), "--master", "local[2]"]) == 0
    return data, out


def test_every_planted_incident_is_found_and_no_other(audit_run: tuple[Path, Path]) -> None:
    data, out = audit_run
    planted = json.loads((data / "planted.json").read_text())
    findings = json.loads((out / "findings.json").read_text())
    assert {p["rule"] for p in planted} == {
        "SENSITIVE_ACCESS", "DENIED_SPIKE", "BRUTE_FORCE", "PRIVILEGED_OPERATION", "SUPER_USER_ACTIVITY",
        "DEFAULT_ALLOW", "DORMANT_ACL", "EXCESSIVE_GRANT", "OFF_HOURS_ACCESS", "NEW_PRINCIPAL", "NEW_HOST",
        "EXFILTRATION_VOLUME", "OUTDATED_CLIENT", "AUDIT_GAP"}
    missed = [p for p in planted if not any(_matches(p, f) for f in findings)]
    false = [f for f in findings if not any(_matches(p, f) for p in planted)]
    assert missed == []
    assert false == []
    assert len(findings) == len(planted)
    for f in findings:
        assert set(f) == {"rule", "severity", "principal", "host", "resource", "count", "first_seen", "last_seen",
                          "evidence", "regulations"}
        assert f["evidence"] and f["regulations"] and f["severity"] in ("CRITICAL", "HIGH", "MEDIUM", "LOW")


def test_outputs_event_table_reports_and_input_quality(audit_run: tuple[Path, Path]) -> None:
    _, out = audit_run
    days = sorted(p.name for p in (out / "events").iterdir() if p.name.startswith("dt="))
    assert days == [f"dt=2024-04-0{d}" for d in range(1, 8)]
    assert not (out / "_lines").exists()  # the parse's staging table is removed
    reports = sorted(p.name for p in (out / "reports").iterdir())
    assert len(reports) == 13 and all(any((out / "reports" / r).glob("*.parquet")) for r in reports)
    summary = json.loads((out / "summary.json").read_text())
    # The generator writes a few truncated lines into server.log: counted and shown, never fatal.
    assert summary["bad_lines"] >= 1 and summary["bad_line_sample"]
    assert {s["reason"] for s in summary["bad_line_sample"]} <= {
        "unparseable kafka.authorizer.logger line", "unknown line format"}
    assert summary["events"] > 6000
    page = (out / "report.html").read_text()
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert page.count("<svg") == 4


@pytest.mark.browser
def test_report_renders_in_headless_chromium(audit_run: tuple[Path, Path], tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium is not None, "Debian's chromium is required (make test installs it)"
    data, out = audit_run
    planted = json.loads((data / "planted.json").read_text())
    shot = tmp_path / "report.png"
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'u'}",
              "--enable-logging=stderr", "--v=0", "--virtual-time-budget=3000"]
    page = (out / "report.html").as_uri()
    dom = subprocess.run([*common, "--dump-dom", page], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0
    assert f"Findings ({len(planted)})" in dom.stdout and "BRUTE_FORCE" in dom.stdout
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == []
    snap = subprocess.run([*common, "--window-size=1400,1800", f"--screenshot={shot}", page], capture_output=True,
                          text=True, timeout=120)
    assert snap.returncode == 0 and shot.stat().st_size > 50_000


def test_spark_ingest_agrees_with_the_pure_python_parser(spark: SparkSession, audit_run: tuple[Path, Path]) -> None:
    from pyspark.sql import functions as F

    from spark_compliance import ingest, reference_parser

    data, _ = audit_run
    parsed = ingest.parse_lines(ingest.read_lines(spark, [str(data)]))
    kind = F.when(F.col("kind") == "excluded", F.lit("event")).otherwise(F.col("kind"))
    rows = (parsed.groupBy(kind.alias("k"), "event_type", "principal").agg(F.sum("line_weight").alias("n"))
            .collect())
    from_spark = {(r["k"], r["event_type"] if r["k"] == "event" else None, r["principal"] if r["k"] == "event"
                   else None): r["n"] for r in rows}
    from_python = dict(reference_parser.parse_tree(data))
    assert from_spark == from_python


def test_missing_input_and_bad_inventory_are_clear_errors(spark: SparkSession, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert kgov_main(["audit", "run", "--input", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "kgov audit run:" in capsys.readouterr().err
    logs = tmp_path / "in" / "broker-1"
    logs.mkdir(parents=True)
    (logs / "server.log").write_text("garbage\n")
    (tmp_path / "inv.json").write_text('{"acls": [{"resource_type": "TOPIC"}]}')
    assert kgov_main(["audit", "run", "--input", str(tmp_path / "in"), "--out", str(tmp_path / "o"),
                      "--inventory", str(tmp_path / "inv.json")]) == 2
    assert "acls[0]: resource_type, resource_name, principal and operation are required" in capsys.readouterr().err


def test_input_without_any_event_gives_an_empty_audit(spark: SparkSession, tmp_path: Path) -> None:
    logs = tmp_path / "in" / "broker-1"
    logs.mkdir(parents=True)
    (logs / "server.log").write_text("[2024-05-01 10:00:00,000] INFO started (kafka.server.KafkaServer)\n")
    (logs / "empty.log").write_text("")
    assert kgov_main(["audit", "run", "--input", str(tmp_path / "in"), "--out", str(tmp_path / "o")]) == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert (summary["lines"], summary["events"], summary["bad_lines"]) == (1, 0, 0)
    assert json.loads((tmp_path / "o" / "findings.json").read_text()) == []
    assert not (tmp_path / "o" / "_lines").exists()
