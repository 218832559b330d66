"""The gateway re-authenticates its upstream connections before their KIP-368 session ends.

Two chained gateways, all real: gateway B fronts the session's Tansu broker and grants sessions of
`LIFETIME_MS` (`connections_max_reauth_ms`; B closes a connection used after its session ended, as
a Kafka broker does); gateway A fronts B, logging in with SCRAM or OAUTHBEARER (a token from kgov's
own issuer over B's database); confluent-kafka produces and consumes through A across several
session lifetimes.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from gateway.codec import SPECS
from tests.integration.gateway.conftest import RawClient, RunningGateway, serve_control_plane, wait_until
from tests.integration.gateway.test_proxy import FAST_GROUP, create_topics
from tests.integration.gateway.test_sasl import ADMIN, auth_events, grant_prefix
from tests.integration.gateway.test_upstream_oauth import CLIENT_ID, SECRET, Clock, outer_gateway_section

pytestmark = [pytest.mark.broker]

# Kafka's clients re-authenticate at 85-95% of the session; a broker (and B) refuses a second
# re-authentication within one second of the previous one, so the lifetime must exceed ~1.2 s. The
# margin before the session ends is 5-15% of it: 5 s leaves 250-750 ms, enough for a loaded 2-core CI
# machine (2 s, i.e. 100-300 ms, once saw A's timer fire after B had closed the session).
LIFETIME_MS = 5000
SVC, SVC_PASSWORD = "svc-reauth", "svc-reauth-password-7f3a"


@pytest.fixture
def inner(runtime_factory: Callable[..., RunningGateway]) -> RunningGateway:
    """Gateway B: SASL in front of Tansu, sessions of LIFETIME_MS."""
    gw = runtime_factory(name="b", gateway={"address_mode": "single"},
                         sasl={"failed_authentication_delay_ms": 0, "connections_max_reauth_ms": LIFETIME_MS})
    gw.runtime.credentials.set_scram_credential(SVC, "SCRAM-SHA-512", SVC_PASSWORD, actor=ADMIN)
    gw.runtime.credentials.set_client(CLIENT_ID, SECRET, actor=ADMIN)
    for principal in (f"User:{SVC}", f"User:{CLIENT_ID}"):
        grant_prefix(gw, principal, "reauth-")
    return gw


@pytest.fixture
def token_endpoint(inner: RunningGateway) -> Iterator[str]:
    with serve_control_plane(inner.settings) as url:  # type: ignore[attr-defined]
        yield f"{url}/oauth/token"


def scram_outer(factory: Callable[..., RunningGateway], inner: RunningGateway,
                mechanism: str = "SCRAM-SHA-512") -> RunningGateway:
    """Gateway A: plain TCP for its clients (everyone allowed), SCRAM-SHA-512 (or PLAIN) to gateway B."""
    return factory(name="a", upstream=inner.bootstrap, authz={"allow_everyone_if_no_acl_found": True}, gateway={
        "security_protocol": "PLAINTEXT", "address_mode": "single", "upstream_security_protocol": "SASL_PLAINTEXT",
        "upstream_sasl_mechanism": mechanism, "upstream_username": SVC, "upstream_password": SVC_PASSWORD})


def reauths(gw: RunningGateway, *, success: bool = True) -> int:
    return sum(1 for e in auth_events(gw) if e["result"]["reauthentication"] and e["result"]["success"] is success)


def first_logins(gw: RunningGateway) -> int:
    return sum(1 for e in auth_events(gw) if not e["result"]["reauthentication"])


class Traffic:
    """A producer and a consumer through `bootstrap`: one record every 50 ms, consumed as it goes."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.errors: list[KafkaError] = []
        self.delivered: list[Any] = []
        self.consumed: list[bytes] = []
        self.sent = 0
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "error_cb": self.errors.append})
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                                  **FAST_GROUP, "error_cb": self.errors.append})
        self.consumer.subscribe([topic])

    def run(self, seconds: float, *, until_consumed: bool = False) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if until_consumed and self.consumed:
                return
            self.producer.produce(self.topic, f"m{self.sent}".encode(),
                                  on_delivery=lambda err, msg: self.delivered.append(err))
            self.sent += 1
            self.producer.poll(0)
            self._poll(0.05)

    def finish(self, timeout: float = 20) -> None:
        assert self.producer.flush(timeout) == 0
        deadline = time.monotonic() + timeout
        while len(self.consumed) < self.sent and time.monotonic() < deadline:
            self._poll(0.2)
        self.consumer.close()

    def _poll(self, timeout: float) -> None:
        m = self.consumer.poll(timeout)
        if m is not None:
            assert m.error() is None, m.error()
            self.consumed.append(m.value())


def assert_traffic_survives_several_sessions(
    outer: RunningGateway, inner: RunningGateway, kafka_broker: str, caplog: pytest.LogCaptureFixture,
    mid_way: Callable[[], None] = lambda: None,
) -> None:
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    traffic = Traffic(outer.bootstrap, topic)
    traffic.run(20, until_consumed=True)  # warm-up: every connection the clients need is open
    assert traffic.consumed, traffic.errors
    clients, upstreams = outer.gateway.connection_counter, inner.gateway.connection_counter
    logins, done_before = first_logins(inner), outer.gateway.upstream_reauthentications
    caplog.set_level(logging.DEBUG, logger="kgov.gateway")
    traffic.run(1.5 * LIFETIME_MS / 1000)
    mid_way()
    traffic.run(1.5 * LIFETIME_MS / 1000)  # three session lifetimes in all
    live = len(outer.gateway._connections)
    traffic.finish()
    # every record went through, in order, without a single client error (a disconnect is one)
    assert traffic.errors == []
    assert traffic.delivered == [None] * traffic.sent
    assert traffic.consumed == [f"m{i}".encode() for i in range(traffic.sent)]
    # no client reconnected to A, A opened no new upstream connection, B saw no new login ...
    assert outer.gateway.connection_counter == clients
    assert inner.gateway.connection_counter == upstreams
    assert first_logins(inner) == logins
    assert "upstream connection lost" not in caplog.text and "before (re-)authentication" not in caplog.text
    # ... because A's upstream connections re-authenticated on their open connections (at least twice
    # each, on average, over the three lifetimes; producer and consumer have 2+ connections), B
    # accepting every one
    assert outer.gateway.upstream_reauthentications - done_before >= 2 * live >= 4, live
    assert reauths(inner) >= outer.gateway.upstream_reauthentications  # B audits before it answers
    assert reauths(inner, success=False) == 0 and outer.gateway.upstream_reauthentication_failures == 0


def test_scram_upstream_sessions_are_reauthenticated_without_disconnecting_clients(
    runtime_factory: Callable[..., RunningGateway], inner: RunningGateway, kafka_broker: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    outer = scram_outer(runtime_factory, inner)
    assert_traffic_survives_several_sessions(outer, inner, kafka_broker, caplog)
    assert {e["authenticationInfo"]["principal"] for e in auth_events(inner)} == {f"User:{SVC}"}
    assert SVC_PASSWORD not in caplog.text


def test_oauthbearer_upstream_sessions_are_reauthenticated_with_the_current_token(
    runtime_factory: Callable[..., RunningGateway], inner: RunningGateway, token_endpoint: str, kafka_broker: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Replaces the test that asserted A's clients were dropped when B's session ended."""
    clock = Clock()
    outer = runtime_factory(name="a", upstream=inner.bootstrap, clock=clock,
                            authz={"allow_everyone_if_no_acl_found": True},
                            gateway=outer_gateway_section(token_endpoint))
    login = outer.gateway.options.upstream_oauth
    assert login is not None
    tokens = login.tokens
    first = tokens._token
    lifetime_s = inner.settings.oauth.token_lifetime_s  # type: ignore[attr-defined]

    def past_the_refresh_point() -> None:
        # the cached token served every re-authentication so far; now it is due for refresh, so the
        # next re-authentications fetch and present a new one
        assert tokens.fetches == 1
        clock.offset = timedelta(seconds=lifetime_s * 0.8 + 5)

    assert_traffic_survives_several_sessions(outer, inner, kafka_broker, caplog, past_the_refresh_point)
    assert tokens.fetches == 2 and tokens._token.value != first.value
    oauth = [e for e in auth_events(inner) if e["authenticationInfo"]["mechanism"] == "OAUTHBEARER"]
    assert oauth and all(e["authenticationInfo"]["principal"] == f"User:{CLIENT_ID}" for e in oauth)
    assert first.value not in caplog.text and SECRET not in caplog.text


def test_plain_upstream_session_of_an_idle_client_is_kept_alive(
    runtime_factory: Callable[..., RunningGateway], inner: RunningGateway,
) -> None:
    """Re-authentication runs on its timer, not at the next request: a client idle for two session
    lifetimes finds its connection (and A's upstream connection) still usable."""
    outer = scram_outer(runtime_factory, inner, "PLAIN")
    metadata = SPECS[3].request[12](topics=[], allow_auto_topic_creation=False)
    raw = RawClient(outer.bootstrap)
    assert raw.call(3, 12, metadata).brokers
    upstreams = inner.gateway.connection_counter
    # Idle for 2.2 lifetimes, and past A's second re-authentication (due at about 1.8 of them: on a loaded
    # machine it may come later, which is not what this test is about).
    idle_until = time.monotonic() + 2.2 * LIFETIME_MS / 1000
    wait_until(lambda: time.monotonic() >= idle_until and outer.gateway.upstream_reauthentications >= 2)
    assert raw.call(3, 12, metadata).brokers
    raw.close()
    assert inner.gateway.connection_counter == upstreams
    done = outer.gateway.upstream_reauthentications
    assert done >= 2 and reauths(inner) >= done  # (B audits before it answers: it may be one ahead)
    assert {e["authenticationInfo"]["mechanism"] for e in auth_events(inner)} == {"PLAIN"}


def test_a_failed_reauthentication_drops_the_client_with_a_clear_log(
    runtime_factory: Callable[..., RunningGateway], inner: RunningGateway, caplog: pytest.LogCaptureFixture,
) -> None:
    """The service credential is deleted on B after A logged in: the next re-authentication fails."""
    caplog.set_level(logging.DEBUG)
    outer = scram_outer(runtime_factory, inner)
    started = time.monotonic()
    raw = RawClient(outer.bootstrap)
    assert raw.call(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False)).brokers
    inner.runtime.credentials.delete_scram_credential(SVC, None, actor=ADMIN)
    assert raw.closed_by_peer(timeout=10)
    raw.close()
    # closed at the re-authentication (85-95% of the session), not at the next request
    assert 0.8 * LIFETIME_MS / 1000 < time.monotonic() - started < 3 * LIFETIME_MS / 1000
    assert outer.gateway.upstream_reauthentication_failures == 1
    assert (f"re-authentication to upstream {inner.bootstrap} failed; closing client connection " in caplog.text)
    assert ("upstream SCRAM-SHA-512 authentication failed (error 58): Authentication failed during "
            "re-authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512") in caplog.text
    assert SVC_PASSWORD not in caplog.text
    # B audited the refusal as a failed re-authentication of A's session (its credential service is
    # told which principal's session the exchange renews)
    failed = [e for e in auth_events(inner) if not e["result"]["success"]]
    assert [(e["authenticationInfo"]["mechanism"], e["result"]["reauthentication"]) for e in failed] == [
        ("SCRAM-SHA-512", True)]
    assert reauths(inner) == 0 and first_logins(inner) == 1  # A's login; the refused attempt renewed it
