"""The gateway ships its audit events to `[audit] kafka_topic` (audit.kafka_sink); and the sink logs in to a
secured cluster (SASL SCRAM, TLS), here a kgov gateway in front of Tansu, with each client (librdkafka and
kafka-python: `[audit] kafka_client`)."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from audit.kafka_sink import KafkaAuditSettings, KafkaSink
from audit.model import EventType, change_event
from authz.model import Acl, Operation, PatternType, Permission, Principal, ResourceType
from tests.integration.gateway.conftest import RunningGateway
from tests.integration.gateway.test_tls import mtls_gateway, self_signed
from tests.support.audit_topic import create_topic, read_topic
from tests.support.leaks import KAFKA_PYTHON_CONNECT_LEAKS, collect_kafka_python_connect_leaks
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.broker, KAFKA_PYTHON_CONNECT_LEAKS, pytest.mark.usefixtures("collect_leaks")]
collect_leaks = collect_kafka_python_connect_leaks

ADMIN = Principal("User", "admin")
PASSWORD = "auditor-secret-password"
SASL = {"failed_authentication_delay_ms": 0}


@pytest.fixture(params=["librdkafka", "kafka-python"])
def client(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_the_gateway_ships_its_events_exactly_as_in_its_file(
    runtime_factory: Callable[..., RunningGateway], kafka_broker: str,
) -> None:
    topic = create_topic(kafka_broker)
    gw = runtime_factory(sasl=SASL, audit={"kafka_bootstrap_servers": kafka_broker, "kafka_topic": topic})
    assert gw.runtime.audit_kafka is not None
    gw.runtime.credentials.set_scram_credential("alice", "SCRAM-SHA-512", PASSWORD, actor=ADMIN)
    # alice may not write: the gateway audits the denied Produce (and her login)
    p = Producer({"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": PASSWORD,
                  "message.timeout.ms": 3000})
    p.produce(topic, b"x")
    p.flush(10)
    del p
    assert wait_for(lambda: any(e.type is EventType.AUTHORIZATION for e in gw.memory.events))  # type: ignore[attr-defined]
    gw.call(gw.runtime.stop())  # closes the sink: ships what is buffered, within its bounded wait
    lines = (gw.settings.audit_dir / "gateway-events.jsonl").read_text().splitlines()  # type: ignore[attr-defined]
    assert any('"granted":false' in line for line in lines)
    records = read_topic(kafka_broker, topic, len(lines))
    assert [r.value.decode() for r in records] == lines
    stats = gw.runtime.audit_kafka.stats()
    assert (stats.shipped, stats.delivery_failures, stats.unshipped_at_close) == (len(lines), 0, 0)


def _secured_cluster(runtime_factory: Callable[..., RunningGateway], topic: str) -> RunningGateway:
    """A gateway that requires SCRAM logins in front of Tansu; User:auditor may write `topic`."""
    gw = runtime_factory(sasl=SASL)
    gw.runtime.credentials.set_scram_credential("auditor", "SCRAM-SHA-512", PASSWORD, actor=ADMIN)
    acl = Acl(ResourceType.TOPIC, topic, PatternType.LITERAL, "User:auditor", "*", Operation.WRITE, Permission.ALLOW)
    assert gw.runtime.authorizer.create_acls([acl], actor=ADMIN) == [None]
    return gw


def _sink(gw: RunningGateway, topic: str, password: str, client: str, seal_key: Any = None) -> KafkaSink:
    settings = KafkaAuditSettings(kafka_bootstrap_servers=gw.bootstrap, kafka_topic=topic,
                                  kafka_security_protocol="SASL_PLAINTEXT", kafka_sasl_mechanism="SCRAM-SHA-512",
                                  kafka_sasl_username="auditor", kafka_sasl_password=password,
                                  kafka_client=client, kafka_seal_writer="node-1")  # type: ignore[arg-type]
    sink = KafkaSink.from_settings(settings, seal_key, delivery_timeout_ms=3000, retry_backoff_max_s=0.3)
    assert sink is not None
    return sink


def _ship(sink: KafkaSink, events: list[Any]) -> None:
    """Writes `events`, then closes `sink`, which ships them first; all of them must have been shipped."""
    for event in events:
        sink.write(event)
    sink.close(timeout_s=20)
    assert sink.stats().shipped == len(events)


def _events(n: int) -> list[Any]:
    now = datetime.now(UTC)
    return [change_event(type=EventType.ACL_CHANGE, source="crn:///kafka=x", time=now, principal="User:admin",
                         method_name="CreateAcls", target=f"topic=t{i}", details={}) for i in range(n)]


def test_the_sink_logs_in_to_a_secured_cluster_with_scram(
    runtime_factory: Callable[..., RunningGateway], kafka_broker: str, client: str,
) -> None:
    topic = create_topic(kafka_broker)
    gw = _secured_cluster(runtime_factory, topic)
    events = _events(10)
    _ship(_sink(gw, topic, PASSWORD, client), events)
    assert [r.value.decode() for r in read_topic(kafka_broker, topic, 10)] == [e.to_json() for e in events]
    logins = [e for e in gw.memory.events if e.type is EventType.AUTHENTICATION]  # type: ignore[attr-defined]
    assert logins and all(e.data["authenticationInfo"]["principal"] == "User:auditor" for e in logins)


def test_a_refused_login_is_a_counted_failure_and_the_password_is_never_logged(
    runtime_factory: Callable[..., RunningGateway], kafka_broker: str, caplog: pytest.LogCaptureFixture, client: str,
) -> None:
    topic = create_topic(kafka_broker)
    gw = _secured_cluster(runtime_factory, topic)
    wrong = "wrong-password-do-not-log-it"
    with caplog.at_level(logging.DEBUG):
        sink = _sink(gw, topic, wrong, client)
        assert wrong not in repr(sink)
        sink.write(_events(1)[0])
        assert wait_for(lambda: sink.stats().delivery_failures >= 1, 20)
        sink.close(timeout_s=0)
    assert sink.stats().shipped == 0 and sink.stats().unshipped_at_close == 1
    assert any(r.name == "kgov.audit.kafka" and "failed" in r.getMessage() for r in caplog.records)
    assert not any(wrong in r.getMessage() for r in caplog.records)


def test_the_sink_ships_over_tls_with_sasl_and_refuses_an_unknown_certificate(
    runtime_factory: Callable[..., RunningGateway], kafka_broker: str, tmp_path: Path, client: str,
) -> None:
    cert, key = self_signed(tmp_path)
    topic = create_topic(kafka_broker)
    gw = runtime_factory(sasl=SASL, gateway={"security_protocol": "SASL_SSL", "tls_cert_file": str(cert),
                                             "tls_key_file": str(key)})
    gw.runtime.credentials.set_scram_credential("auditor", "SCRAM-SHA-256", PASSWORD, actor=ADMIN)
    acl = Acl(ResourceType.TOPIC, topic, PatternType.LITERAL, "User:auditor", "*", Operation.WRITE, Permission.ALLOW)
    assert gw.runtime.authorizer.create_acls([acl], actor=ADMIN) == [None]
    tls = {"kafka_bootstrap_servers": gw.bootstrap, "kafka_topic": topic, "kafka_security_protocol": "SASL_SSL",
           "kafka_sasl_mechanism": "SCRAM-SHA-256", "kafka_sasl_username": "auditor", "kafka_sasl_password": PASSWORD,
           "kafka_client": client}
    events = _events(3)

    untrusting = KafkaSink.from_settings(KafkaAuditSettings(**tls), delivery_timeout_ms=3000)  # the system CAs
    assert untrusting is not None
    untrusting.write(events[0])
    assert wait_for(lambda: untrusting.stats().delivery_failures >= 1, 20)
    untrusting.close(timeout_s=0)
    assert untrusting.stats().shipped == 0

    sink = KafkaSink.from_settings(KafkaAuditSettings(**tls, kafka_ssl_ca_file=cert), delivery_timeout_ms=3000)
    assert sink is not None
    _ship(sink, events)
    assert [r.value.decode() for r in read_topic(kafka_broker, topic, 3)] == [e.to_json() for e in events]
    requests = [e.data for e in gw.memory.events if e.type is EventType.REQUEST]  # type: ignore[attr-defined]
    assert {r["principal"] for r in requests if r["requestHeader"]["requestApiKey"] == 0} == {"User:auditor"}
    assert {r["securityProtocol"] for r in requests} == {"SASL_SSL"}


def test_the_sink_presents_a_client_certificate(
    runtime_factory: Callable[..., RunningGateway], kafka_broker: str, tmp_path: Path, client: str,
) -> None:
    gw, server_cert, client_cert, client_key = mtls_gateway(runtime_factory, tmp_path)
    topic = create_topic(kafka_broker)
    principal = "User:CN=alice,OU=payments,O=kgov"
    acl = Acl(ResourceType.TOPIC, topic, PatternType.LITERAL, principal, "*", Operation.WRITE, Permission.ALLOW)
    assert gw.runtime.authorizer.create_acls([acl], actor=ADMIN) == [None]
    settings = KafkaAuditSettings(kafka_bootstrap_servers=gw.bootstrap, kafka_topic=topic,
                                  kafka_security_protocol="SSL", kafka_ssl_ca_file=server_cert,
                                  kafka_ssl_cert_file=client_cert, kafka_ssl_key_file=client_key,
                                  kafka_client=client)  # type: ignore[arg-type]
    sink = KafkaSink.from_settings(settings, delivery_timeout_ms=3000)
    assert sink is not None
    events = _events(2)
    _ship(sink, events)
    assert [r.value.decode() for r in read_topic(kafka_broker, topic, 2)] == [e.to_json() for e in events]


def test_a_siem_verifies_the_sealed_topic_through_a_secured_cluster_with_scram(
    runtime_factory: Callable[..., RunningGateway], kafka_broker: str, client: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`kgov audit verify --kafka-bootstrap` logs in as a consumer needs (audit.kafka_topic_reader, the sink's
    connection settings): User:siem may read the topic only; a wrong password is a clear error without it."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from audit.kafka_seal import public_key_pem
    from kgov.cli import main

    topic = create_topic(kafka_broker)
    gw = _secured_cluster(runtime_factory, topic)
    gw.runtime.credentials.set_scram_credential("siem", "SCRAM-SHA-512", PASSWORD, actor=ADMIN)
    acls = [Acl(ResourceType.TOPIC, topic, PatternType.LITERAL, "User:siem", "*", op, Permission.ALLOW)
            for op in (Operation.READ, Operation.DESCRIBE)]
    assert gw.runtime.authorizer.create_acls(acls, actor=ADMIN) == [None, None]
    key = Ed25519PrivateKey.generate()
    (tmp_path / "node.pem").write_text(public_key_pem(key))
    _ship(_sink(gw, topic, PASSWORD, client, seal_key=key), _events(5))

    def verify(password: str, timeout: str = "10", stdin: bool = False) -> tuple[int, str, str]:
        if stdin:
            monkeypatch.delenv("KGOV_AUDIT__KAFKA_SASL_PASSWORD", raising=False)
            monkeypatch.setattr("sys.stdin", io.StringIO(password + "\n"))
        else:
            monkeypatch.setenv("KGOV_AUDIT__KAFKA_SASL_PASSWORD", password)
        capsys.readouterr()
        rc = main(["audit", "verify", "--kafka-bootstrap", gw.bootstrap, "--topic", topic, "--client", client,
                   "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "SCRAM-SHA-512",
                   "--sasl-username", "siem", "--public-key", str(tmp_path / "node.pem"), "--timeout", timeout,
                   *(["--sasl-password-stdin"] if stdin else [])])
        out, err = capsys.readouterr()
        return rc, out, err

    rc, out, err = verify(PASSWORD)
    assert (rc, err) == (0, ""), err
    assert "writer node-1 epoch " in out and "OK, 5 records verified (seq 0-4)" in out
    assert verify(PASSWORD, stdin=True)[0] == 0
    wrong = "wrong-siem-password-never-shown"
    rc, out, err = verify(wrong, "3")
    assert (rc, out) == (2, "") and f"cannot read topic {topic}" in err and wrong not in err
