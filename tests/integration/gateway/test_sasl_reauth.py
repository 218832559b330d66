"""Client-facing KIP-368 re-authentication through the production assembly, in front of Tansu, checked
against what Kafka's broker does (SocketServer, KafkaChannel, SaslServerAuthenticator, KafkaApis):
raw frames where a real client would never misbehave, librdkafka where one can show it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

from authz.model import Principal
from gateway.codec import SPECS
from sasl.scram import MECHANISMS, ScramClient
from tests.integration.gateway.conftest import RawClient, RunningGateway
from tests.integration.gateway.test_sasl import PASSWORD, auth_events, grant_prefix, sasl_conf, scram_login

pytestmark = [pytest.mark.broker]

ADMIN = Principal("User", "admin")
DELAY_MS = 300


class FrozenClock:
    """The gateway's time, moved only by the test (sessions expire without sleeping, and a slow
    machine cannot push two steps a second apart)."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def gateway(factory: Callable[..., RunningGateway], max_reauth_ms: int = 60_000, delay_ms: int = DELAY_MS,
            **kwargs: Any) -> RunningGateway:
    gw = factory(sasl={"connections_max_reauth_ms": max_reauth_ms, "failed_authentication_delay_ms": delay_ms},
                 **kwargs)
    for user in ("alice", "bob"):
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            gw.runtime.credentials.set_scram_credential(user, mech, PASSWORD, actor=ADMIN)
    return gw


def metadata(names: list[str] | None = None) -> Any:
    cls = SPECS[3].request[12]
    topics = None if names is None else [cls.MetadataRequestTopic(name=n) for n in names]
    return cls(topics=topics, allow_auto_topic_creation=False)


def handshake(raw: RawClient, mechanism: str = "SCRAM-SHA-512") -> int:
    return int(raw.call(17, 1, SPECS[17].request[1](mechanism=mechanism)).error_code)


def logged_in(gw: RunningGateway, mechanism: str = "SCRAM-SHA-512") -> RawClient:
    raw = RawClient(gw.bootstrap)
    assert scram_login(raw, mechanism, "alice", PASSWORD).error_code == 0
    return raw


def test_a_request_during_reauthentication_is_answered_illegal_sasl_state_and_closes(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    gw = gateway(runtime_factory)
    raw = logged_in(gw)
    assert handshake(raw) == 0  # the re-authentication begins
    started = time.monotonic()
    refused = raw.call(3, 12, metadata(["reauth-topic"]))
    # Kafka's handleSaslToken: the request's own error response, ILLEGAL_SASL_STATE, after the delay.
    assert [(t.name, t.error_code) for t in refused.topics] == [("reauth-topic", 34)]
    assert time.monotonic() - started >= DELAY_MS / 1000 * 0.9
    assert raw.closed_by_peer()
    raw.close()
    failure = auth_events(gw)[-1]
    assert failure["result"] == {"success": False, "reauthentication": True,
                                 "reason": "Unexpected Kafka request of type METADATA during SASL authentication."}
    assert failure["authenticationInfo"] == {"principal": "User:alice", "mechanism": "SCRAM-SHA-512"}


def test_frames_of_a_reauthentication_are_bounded_like_those_of_a_first_login(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    gw = gateway(runtime_factory)
    raw = logged_in(gw)
    raw.sock.sendall((600_000).to_bytes(4, "big"))  # allowed once authenticated: the rest is awaited
    assert _waits(raw)
    raw.close()
    raw = logged_in(gw)
    assert handshake(raw) == 0
    raw.sock.sendall((600_000).to_bytes(4, "big"))  # over sasl.server.max.receive.size (512 KiB)
    assert raw.closed_by_peer()
    raw.close()


def _waits(raw: RawClient) -> bool:
    """True when the gateway neither answers nor closes within half a second."""
    raw.sock.settimeout(0.5)
    try:
        raw.sock.recv(1)
    except TimeoutError:
        return True
    return False


def test_a_request_during_the_first_exchange_is_refused_the_same_way(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    gw = gateway(runtime_factory)
    raw = RawClient(gw.bootstrap)
    assert handshake(raw) == 0
    refused = raw.call(10, 3, SPECS[10].request[3](key="g", key_type=0))
    assert refused.error_code == 34
    assert raw.closed_by_peer()
    raw.close()
    failure = auth_events(gw)[-1]
    assert failure["result"]["success"] is False and failure["result"]["reauthentication"] is False
    assert failure["authenticationInfo"]["principal"] is None


def test_a_reauthentication_handshake_without_an_expiring_session_is_refused_and_the_connection_goes_on(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    gw = gateway(runtime_factory, max_reauth_ms=0)
    raw = logged_in(gw)
    assert handshake(raw) == 34  # KafkaApis.handleSaslHandshakeRequest
    assert raw.call(3, 12, metadata([])).brokers  # still served, as on a broker
    after = raw.call(36, 1, SPECS[36].request[1](auth_bytes=b"x"))
    assert (after.error_code, after.error_message) == (
        34, "SaslAuthenticate request received after successful authentication")
    assert raw.call(3, 12, metadata([])).brokers
    raw.close()
    refusal = auth_events(gw)[-1]
    assert refusal["result"] == {"success": False, "reauthentication": True,
                                 "reason": "re-authentication refused: the session does not expire"}
    assert refusal["authenticationInfo"]["principal"] == "User:alice"


def test_a_second_reauthentication_within_a_second_is_refused_without_closing(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    clock = FrozenClock()
    gw = gateway(runtime_factory, clock=clock)
    raw = logged_in(gw)
    assert scram_login(raw, "SCRAM-SHA-512", "alice", PASSWORD).error_code == 0  # re-authenticated
    clock.advance(0.999)
    assert handshake(raw) == 34
    assert raw.call(3, 12, metadata([])).brokers
    clock.advance(0.001)
    assert scram_login(raw, "SCRAM-SHA-512", "alice", PASSWORD).error_code == 0
    raw.close()
    events = auth_events(gw)
    assert [(e["result"]["success"], e["result"]["reauthentication"]) for e in events[-4:]] == [
        (True, False), (True, True), (False, True), (True, True)]


def test_a_failed_reauthentication_is_audited_as_one_for_the_sessions_principal(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    gw = gateway(runtime_factory)
    raw = logged_in(gw)
    started = time.monotonic()
    final = scram_login(raw, "SCRAM-SHA-512", "alice", "not-the-password")
    assert final.error_code == 58
    assert final.error_message == ("Authentication failed during re-authentication due to invalid credentials "
                                   "with SASL mechanism SCRAM-SHA-512")
    assert time.monotonic() - started >= DELAY_MS / 1000 * 0.9
    assert raw.closed_by_peer()
    raw.close()
    failure = auth_events(gw)[-1]  # written by the credential service's mechanism
    assert failure["result"]["success"] is False and failure["result"]["reauthentication"] is True
    assert failure["authenticationInfo"]["principal"] == "User:alice"
    assert "not-the-password" not in str(auth_events(gw))


def test_reauthenticating_as_another_principal_fails_and_is_audited(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    gw = gateway(runtime_factory)
    raw = logged_in(gw)
    final = scram_login(raw, "SCRAM-SHA-512", "bob", PASSWORD)
    assert (final.error_code, final.error_message) == (
        58, "Cannot change principals during re-authentication from User.alice: User.bob")
    assert raw.closed_by_peer()
    raw.close()
    failure = auth_events(gw)[-1]
    assert failure["result"] == {"success": False, "reauthentication": True, "reason": final.error_message}
    assert failure["authenticationInfo"]["principal"] == "User:alice"


def test_reauthenticating_with_another_mechanism_fails_unanswered(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    gw = gateway(runtime_factory)
    raw = logged_in(gw, "SCRAM-SHA-512")
    assert handshake(raw, "SCRAM-SHA-256") == 0  # as on a broker: the handshake itself succeeds
    client = ScramClient(MECHANISMS["SCRAM-SHA-256"], "alice", PASSWORD)
    raw.send(36, 1, SPECS[36].request[1](auth_bytes=client.first_message()))
    with pytest.raises(ConnectionError):
        raw.receive(36, 1)
    raw.close()
    failure = auth_events(gw)[-1]
    assert failure["result"]["reason"] == ("SASL mechanism 'SCRAM-SHA-256' requested by client is not supported "
                                           "for re-authentication of mechanism 'SCRAM-SHA-512'")
    assert failure["result"]["reauthentication"] is True and failure["result"]["success"] is False


def test_a_reauthentication_with_a_mechanism_not_enabled_is_33_delayed_and_audited(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    gw = gateway(runtime_factory)
    raw = logged_in(gw)
    started = time.monotonic()
    assert handshake(raw, "GSSAPI") == 33
    assert time.monotonic() - started >= DELAY_MS / 1000 * 0.9  # Kafka delays this answer too
    assert raw.closed_by_peer()
    raw.close()
    failure = auth_events(gw)[-1]
    assert failure["result"]["reauthentication"] is True and failure["authenticationInfo"]["mechanism"] == "GSSAPI"


def test_any_request_on_an_expired_session_closes_at_once_with_a_log_line(
    runtime_factory: Callable[..., RunningGateway], caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FrozenClock()
    gw = gateway(runtime_factory, max_reauth_ms=5_000, clock=clock)
    caplog.set_level(logging.INFO, logger="kgov.gateway")
    raw = logged_in(gw)
    clock.advance(4.999)
    assert raw.call(18, 3, SPECS[18].request[3](client_software_name="t", client_software_version="1")).api_keys
    clock.advance(0.001)
    raw.send(18, 3, SPECS[18].request[3](client_software_name="t", client_software_version="1"))
    assert raw.closed_by_peer()
    raw.close()
    assert gw.gateway.expired_connections_killed == 1
    lines = [r.getMessage() for r in caplog.records if "without re-authentication" in r.getMessage()]
    assert len(lines) == 1 and "User:alice" in lines[0] and "API_VERSIONS refused" in lines[0]
    assert PASSWORD not in caplog.text
    # An expired session may still re-authenticate (its SaslHandshake is the one request admitted).
    raw = logged_in(gw)
    clock.advance(6)
    assert scram_login(raw, "SCRAM-SHA-512", "alice", PASSWORD).error_code == 0
    assert raw.call(3, 12, metadata([])).brokers
    raw.close()
    assert gw.gateway.expired_connections_killed == 1


def test_librdkafka_whose_credential_is_deleted_fails_its_reauthentication_audited_as_one(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    # A client re-authenticates at 85-95% of its session: 3 s leaves it 150-450 ms of slack (on a loaded
    # machine a late renewal is a killed connection, and its retry a first login, not a re-authentication).
    gw = gateway(runtime_factory, max_reauth_ms=3000)
    grant_prefix(gw, "User:alice", "reauth-")
    errors: list[KafkaError] = []
    p = Producer({**sasl_conf(gw, "SCRAM-SHA-512"), "linger.ms": 0, "error_cb": errors.append})
    p.produce("reauth-deleted", b"x")
    assert p.flush(10) == 0
    gw.runtime.credentials.delete_scram_credential("alice", None, actor=ADMIN)
    deadline = time.monotonic() + 30  # librdkafka re-authenticates at 85-95% of the 3 s session
    while time.monotonic() < deadline and not any(
            e["result"]["reauthentication"] and not e["result"]["success"] for e in auth_events(gw)):
        p.poll(0.2)
    del p
    failures = [e for e in auth_events(gw) if not e["result"]["success"]]
    assert failures and failures[0]["result"]["reauthentication"] is True
    assert failures[0]["authenticationInfo"] == {"principal": "User:alice", "mechanism": "SCRAM-SHA-512"}


def test_kafka_python_reauthenticates_and_a_refused_renewal_is_audited_as_one(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    from kafka import KafkaProducer

    gw = gateway(runtime_factory, max_reauth_ms=3000)  # the slack of a renewal: see the test above
    grant_prefix(gw, "User:alice", "reauth-")
    producer = KafkaProducer(bootstrap_servers=gw.bootstrap, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                             sasl_plain_password=PASSWORD, acks=1, linger_ms=0)
    try:
        deadline = time.monotonic() + 30  # until two re-authentications of the 3 s session (about 6 s)
        renewed: list[dict[str, Any]] = []
        while time.monotonic() < deadline and len(renewed) < 2:
            producer.send("reauth-kafka-python", b"x").get(timeout=10)
            time.sleep(0.2)
            renewed = [e for e in auth_events(gw) if e["result"]["reauthentication"]]
        assert len(renewed) >= 2 and all(e["result"]["success"] for e in renewed)
        gw.runtime.credentials.delete_scram_credential("alice", None, actor=ADMIN)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and all(e["result"]["success"] for e in auth_events(gw)):
            time.sleep(0.1)
    finally:
        producer.close(timeout=2)
    failures = [e for e in auth_events(gw) if not e["result"]["success"]]
    assert failures and failures[0]["result"]["reauthentication"] is True
    assert failures[0]["authenticationInfo"]["principal"] == "User:alice"
    assert gw.gateway.expired_connections_killed == 0  # every session was renewed in time
