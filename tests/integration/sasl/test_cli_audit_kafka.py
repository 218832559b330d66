"""`kgov users` ships the credential changes it audits to `[audit] kafka_topic` as well (audit.kafka_sink)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from kgov.cli import main
from tests.support.audit_topic import create_topic, read_topic

pytestmark = pytest.mark.broker


def test_a_credential_change_made_on_the_command_line_reaches_the_topic(
    kafka_broker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    topic = create_topic(kafka_broker)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KGOV_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("KGOV_SASL__SCRAM_ITERATIONS", "4096")
    monkeypatch.setenv("KGOV_AUDIT__KAFKA_BOOTSTRAP_SERVERS", kafka_broker)
    monkeypatch.setenv("KGOV_AUDIT__KAFKA_TOPIC", topic)
    monkeypatch.setattr("sys.stdin", io.StringIO("alice-cli-password\n"))
    assert main(["users", "add", "alice", "--mechanism", "SCRAM-SHA-512", "--password-stdin"]) == 0
    capsys.readouterr()
    lines = (tmp_path / "audit" / "events.jsonl").read_text().splitlines()
    assert len(lines) == 1 and "io.kgov.credential_change" in lines[0]
    assert [r.value.decode() for r in read_topic(kafka_broker, topic, 1, timeout=5)] == lines
