"""The gateway's audit files (CloudEvents, Kafka's authorizer and request lines) are sealed as it writes them."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from audit.integrity import audit_files_in, verify_paths
from tests.integration.gateway.conftest import RunningGateway
from tests.integration.gateway.test_proxy import create_topics
from tests.integration.gateway.test_sasl import sasl_conf

pytestmark = [pytest.mark.broker]


def test_a_denied_produce_leaves_a_verifiable_trail(runtime_factory: Callable[..., RunningGateway],
                                                    kafka_broker: str, tmp_path: Path) -> None:
    gw = runtime_factory(sasl={"failed_authentication_delay_ms": 0})
    gw.runtime.credentials.set_scram_credential("bob", "SCRAM-SHA-512", "bob-password-0123", actor="test")
    topic = f"chain-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    outcome: list[KafkaError | None] = []
    p = Producer({**sasl_conf(gw, "SCRAM-SHA-512", "bob", "bob-password-0123"), "message.timeout.ms": 8000})
    p.produce(topic, b"x", on_delivery=lambda err, msg: outcome.append(err))
    p.flush(15)
    assert outcome[0] is not None and outcome[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    key = gw.settings.audit_integrity_key()  # type: ignore[attr-defined]
    reports = {r.file: r for r in verify_paths(audit_files_in(tmp_path / "audit"), key)}
    assert set(reports) == {"gateway-events.jsonl", "gateway-kafka-authorizer.log", "gateway-kafka-request.log"}
    assert all(r.ok for r in reports.values()), reports
    assert all(r.records > 0 for r in reports.values())
    denial = (tmp_path / "audit" / "gateway-kafka-authorizer.log").read_text().splitlines()[0]
    assert denial.endswith("(kafka.authorizer.logger)") and "User:bob is Denied operation = " in denial
    assert f"on resource = Topic:LITERAL:{topic} " in denial  # Kafka's line, as without the chain
