"""The control plane ships its audit events to `[audit] kafka_topic` (audit.kafka_sink), counted on /metrics."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from kgov.app import build_app
from kgov.settings import Settings
from tests.support.audit_topic import create_topic, read_topic
from tests.support.leaks import KAFKA_PYTHON_CONNECT_LEAKS, collect_kafka_python_connect_leaks
from tests.support.server import serve_app
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.broker]
collect_leaks = collect_kafka_python_connect_leaks

ADMIN = ("admin", "correct-horse-battery")


def settings_shipping_to(data: Path, bootstrap: str, **audit: Any) -> Settings:
    return Settings(data_dir=data, cluster_id="c1", admin={"user": ADMIN[0], "password": ADMIN[1]},
                    sasl={"failed_authentication_delay_ms": 0},
                    audit={"kafka_bootstrap_servers": bootstrap, **audit})


def deny(base: str, topic: str) -> float:
    """An audited denial through the OPA decision API (eve may do nothing); seconds the request took."""
    started = time.monotonic()
    body = {"input": {
        "action": {"operation": "READ", "resourcePattern": {"resourceType": "TOPIC", "name": topic,
                                                           "patternType": "LITERAL"},
                   "resourceReferenceCount": 1, "logIfAllowed": True, "logIfDenied": True},
        "requestContext": {"clientAddress": "/10.0.0.5", "principal": {"principalType": "User", "name": "eve"},
                           "listenerName": "SASL_SSL", "securityProtocol": "SASL_SSL",
                           "header": {"name": {"clientId": "c", "correlationId": 1, "requestApiKey": 1,
                                               "requestApiVersion": 12}, "headerVersion": 2}}}}
    assert httpx.post(base + "/v1/data/kafka/authz/allow", json=body, timeout=10).json() == {"result": False}
    return time.monotonic() - started


def metric(base: str, name: str, **labels: str) -> float:
    text = httpx.get(base + "/metrics", auth=ADMIN, timeout=10).text
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    found = re.search(rf"^{name}{{{wanted}}} (\S+)$", text, re.M)
    return float(found.group(1)) if found else -1.0


def test_audited_decisions_reach_the_topic_exactly_as_in_the_file(kafka_broker: str, tmp_path: Path) -> None:
    topic = create_topic(kafka_broker)
    app = build_app(settings_shipping_to(tmp_path, kafka_broker, kafka_topic=topic))
    with serve_app(app) as base:
        for name in ("secret-a", "secret-b", "secret-c"):
            deny(base, name)
        assert wait_for(lambda: metric(base, "kgov_audit_kafka_shipped_events_total", component="control_plane") >= 3)
        assert metric(base, "kgov_audit_kafka_delivery_failures_total", component="control_plane") == 0
    lines = (tmp_path / "audit" / "events.jsonl").read_text().splitlines()
    denials = [line for line in lines if '"granted":false' in line]
    assert len(denials) == 3
    records = read_topic(kafka_broker, topic, len(lines))
    assert [r.value.decode() for r in records] == lines
    assert {r.key for r in records} == {b"crn:///kafka=c1"}
    assert all(name == "kgov-seal" for r in records for name, _ in r.headers[1:])


def test_the_control_planes_records_are_signed_with_the_data_directorys_key_and_verify(
    kafka_broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`kgov audit verify --kafka-bootstrap` without --public-key takes the public half of the key the
    control plane generated at its start (audit.kafka_seal)."""
    from kgov.cli import main

    topic = create_topic(kafka_broker)
    app = build_app(settings_shipping_to(tmp_path, kafka_broker, kafka_topic=topic, kafka_seal_writer="cp-1"))
    with serve_app(app) as base:
        deny(base, "secret-a")
        assert wait_for(lambda: metric(base, "kgov_audit_kafka_shipped_events_total", component="control_plane") >= 1)
    assert (tmp_path / "audit-seal.key").stat().st_mode & 0o777 == 0o600
    monkeypatch.setenv("KGOV_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("KGOV_AUDIT__KAFKA_BOOTSTRAP_SERVERS", kafka_broker)
    capsys.readouterr()
    rc = main(["audit", "verify", "--kafka-bootstrap", kafka_broker, "--topic", topic, "--timeout", "20"])
    out = capsys.readouterr().out
    lines = (tmp_path / "audit" / "events.jsonl").read_text().splitlines()
    assert rc == 0, out
    assert f"OK, {len(lines)} records verified (seq 0-{len(lines) - 1})" in out and "writer cp-1 epoch" in out


@KAFKA_PYTHON_CONNECT_LEAKS
@pytest.mark.usefixtures("collect_leaks")
def test_an_unreachable_cluster_delays_no_request_and_is_counted(refused_port: int, tmp_path: Path) -> None:
    app = build_app(settings_shipping_to(tmp_path, f"127.0.0.1:{refused_port}", kafka_close_timeout_s=0.2))
    with serve_app(app) as base:
        slowest = max(deny(base, f"secret-{i}") for i in range(5))
        # The producer waits 1 s for a cluster and 30 s for an answer: a request waiting on either would show.
        assert slowest < 0.5
        assert wait_for(lambda: metric(base, "kgov_audit_kafka_delivery_failures_total", component="control_plane") >= 1)
        assert metric(base, "kgov_audit_kafka_shipped_events_total", component="control_plane") == 0
        lines = (tmp_path / "audit" / "events.jsonl").read_text().splitlines()
        assert len([line for line in lines if '"granted":false' in line]) == 5  # the file has every one
        assert metric(base, "kgov_audit_kafka_buffered_events", component="control_plane") == len(lines)
    stats = app.state.audit_kafka["control_plane"].stats()
    # counted at shutdown, after at most kafka_close_timeout_s
    assert (stats.shipped, stats.unshipped_at_close, stats.buffered_events) == (0, len(lines), 0)


def test_without_kafka_settings_nothing_is_shipped_or_reported(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, admin={"user": ADMIN[0], "password": ADMIN[1]})
    app = build_app(settings)
    assert app.state.audit_kafka == {}
    with serve_app(app) as base:
        assert "kgov_audit_kafka" not in httpx.get(base + "/metrics", auth=ADMIN, timeout=10).text
