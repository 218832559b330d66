"""The gateway logs in upstream with OAUTHBEARER, its token from an OIDC client-credentials endpoint.

Two chained gateways, all real: gateway B fronts the session's Tansu broker and accepts OAUTHBEARER,
validating tokens of kgov's own issuer; kgov's control plane over B's database serves the token
endpoint; gateway A fronts B with `upstream_sasl_mechanism = "OAUTHBEARER"`; confluent-kafka
produces and consumes through A.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from gateway.codec import SPECS
from gateway.upstream_token import UpstreamLoginError
from tests.integration.gateway.conftest import RawClient, RunningGateway, serve_control_plane, wait_until
from tests.integration.gateway.test_proxy import consume, create_topics
from tests.integration.gateway.test_sasl import ADMIN, grant_prefix
from tests.support.hanging import HangingEndpoint

pytestmark = [pytest.mark.broker]

CLIENT_ID = "gw-upstream"
SECRET = "gw-upstream-secret-5e1d"
WRONG_SECRET = "wrong-secret-a9b8c7"


def secrets_in(text: str) -> list[str]:
    """The client secrets, plain or as they travel (HTTP Basic), found in `text`."""
    forms = [s for secret in (SECRET, WRONG_SECRET)
             for s in (secret, base64.b64encode(f"{CLIENT_ID}:{secret}".encode()).decode())]
    return [s for s in forms if s in text]


class Clock:
    """Gateway A's clock (build_runtime's `clock`): the real time plus an offset the test moves."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


@pytest.fixture
def inner(runtime_factory: Callable[..., RunningGateway]) -> RunningGateway:
    """Gateway B: SASL (OAUTHBEARER among its mechanisms) in front of Tansu."""
    gw = runtime_factory(name="b", gateway={"address_mode": "single"}, sasl={"failed_authentication_delay_ms": 0})
    gw.runtime.credentials.set_client(CLIENT_ID, SECRET, actor=ADMIN)
    grant_prefix(gw, f"User:{CLIENT_ID}", "upoauth-")
    return gw


@pytest.fixture
def token_endpoint(inner: RunningGateway) -> Iterator[str]:
    with serve_control_plane(inner.settings) as url:  # type: ignore[attr-defined]
        yield f"{url}/oauth/token"


def outer_gateway_section(endpoint: str, secret: str = SECRET) -> dict[str, Any]:
    return {"security_protocol": "PLAINTEXT", "address_mode": "single",
            "upstream_security_protocol": "SASL_PLAINTEXT", "upstream_sasl_mechanism": "OAUTHBEARER",
            "upstream_oauth_token_endpoint": endpoint, "upstream_oauth_client_id": CLIENT_ID,
            "upstream_oauth_client_secret": secret}


def outer_gateway(factory: Callable[..., RunningGateway], inner: RunningGateway, endpoint: str, *,
                  secret: str = SECRET, clock: Clock | None = None, name: str = "a") -> RunningGateway:
    """Gateway A: plain TCP for its clients (everyone allowed), OAUTHBEARER to gateway B."""
    return factory(name=name, upstream=inner.bootstrap, clock=clock, authz={"allow_everyone_if_no_acl_found": True},
                   gateway=outer_gateway_section(endpoint, secret))


def tokens_of(gw: RunningGateway) -> Any:
    login = gw.gateway.options.upstream_oauth
    assert login is not None
    return login.tokens


def produce(bootstrap: str, topic: str, *values: bytes) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    errors: list[Any] = []
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(20) == 0
    assert errors == [None] * len(values), [str(e) for e in errors]


def oauth_logins(inner: RunningGateway) -> list[dict[str, Any]]:
    return [e.data for e in inner.memory.events  # type: ignore[attr-defined]
            if str(e.type) == "io.kgov.authentication"
            and e.data["authenticationInfo"].get("mechanism") == "OAUTHBEARER"]


def test_produce_and_consume_through_a_gateway_that_logs_in_with_oauthbearer(
    runtime_factory: Callable[..., RunningGateway], inner: RunningGateway, token_endpoint: str, kafka_broker: str,
) -> None:
    outer = outer_gateway(runtime_factory, inner, token_endpoint)
    assert tokens_of(outer).fetches == 1  # fetched at start
    topic = f"upoauth-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    produce(outer.bootstrap, topic, *(f"m{i}".encode() for i in range(5)))
    assert sorted(consume(outer.bootstrap, topic, 5)) == [f"m{i}".encode() for i in range(5)]
    logins = oauth_logins(inner)
    # every upstream connection A opened (producer, consumer, coordinator) logged in as the client id ...
    assert len(logins) >= 3
    assert all(e["authenticationInfo"]["principal"] == f"User:{CLIENT_ID}" and e["result"]["success"]
               for e in logins), logins
    # ... with the one cached token
    assert tokens_of(outer).fetches == 1
    # and B authorized the produce for that principal
    produced = {e.data["principal"] for e in inner.memory.events  # type: ignore[attr-defined]
                if str(e.type) == "io.kgov.request" and e.data["requestHeader"]["requestApiKey"] == 0}
    assert produced == {f"User:{CLIENT_ID}"}


def test_token_is_refreshed_in_the_background_at_80_percent_of_its_life_and_traffic_continues(
    runtime_factory: Callable[..., RunningGateway], inner: RunningGateway, token_endpoint: str, kafka_broker: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)  # httpx and httpcore included
    clock = Clock()
    # librdkafka's schedule (80%, no jitter, no buffer before expiry), so the refresh point is exact
    outer = runtime_factory(name="a", upstream=inner.bootstrap, clock=clock,
                            authz={"allow_everyone_if_no_acl_found": True},
                            gateway={**outer_gateway_section(token_endpoint),
                                     "upstream_oauth_refresh_window_jitter": 0, "upstream_oauth_refresh_buffer_s": 0})
    source = tokens_of(outer)
    first = source._token
    lifetime_s = inner.settings.oauth.token_lifetime_s  # type: ignore[attr-defined]
    topic = f"upoauth-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    produce(outer.bootstrap, topic, b"before")
    assert source.fetches == 1
    clock.offset = timedelta(seconds=lifetime_s * 0.8 - 5)  # just before the refresh point: still cached
    produce(outer.bootstrap, topic, b"cached")
    time.sleep(1.2)  # more than the refresher's 1 s look at the clock
    assert source.fetches == 1
    clock.offset = timedelta(seconds=lifetime_s * 0.8 + 5)  # past it: refreshed without any client
    wait_until(lambda: source.fetches == 2)
    assert source._token.value != first.value
    produce(outer.bootstrap, topic, b"after")
    assert sorted(consume(outer.bootstrap, topic, 3)) == [b"after", b"before", b"cached"]
    assert source.fetches == 2
    fetched = [r.getMessage() for r in caplog.records if "fetched an upstream OAuth token" in r.getMessage()]
    assert len(fetched) == 2
    assert "HTTP Request: POST" in caplog.text  # httpx's own log lines are in what was searched
    assert not secrets_in(caplog.text) and first.value not in caplog.text


def test_new_clients_do_not_wait_for_a_hanging_token_endpoint_while_the_token_is_valid(
    runtime_factory: Callable[..., RunningGateway], inner: RunningGateway, token_endpoint: str, kafka_broker: str,
) -> None:
    """The identity provider hangs at the refresh point: A's refresh waits up to its 10 s deadline,
    but clients connecting meanwhile are logged in upstream with the current token at once; and the
    runtime stops promptly with that fetch in flight, leaving no task behind."""
    clock = Clock()
    outer = outer_gateway(runtime_factory, inner, token_endpoint, clock=clock)
    source = tokens_of(outer)
    topic = f"upoauth-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    hanging = HangingEndpoint()
    try:
        source.endpoint = hanging.url
        clock.offset = timedelta(seconds=inner.settings.oauth.token_lifetime_s * 0.9)  # type: ignore[attr-defined]
        wait_until(lambda: len(hanging.accepted) == 1)  # the refresh is in flight and hangs
        started = time.monotonic()
        produce(outer.bootstrap, topic, b"while-the-idp-hangs")
        # The producer's new connection: logged in upstream well before the hanging fetch's 10 s deadline.
        # (Not the consumer's group join below: its time is the broker's, whatever the token does.)
        assert time.monotonic() - started < 5, "a client waited for the token endpoint"
        assert sorted(consume(outer.bootstrap, topic, 1)) == [b"while-the-idp-hangs"]
        assert source.fetches == 1 and source.attempts == 2 and len(hanging.accepted) == 1
        started = time.monotonic()
        outer.call(outer.runtime.stop(), timeout=5)
        assert time.monotonic() - started < 2

        async def other_tasks() -> list[str]:
            return [t.get_name() for t in asyncio.all_tasks() if t is not asyncio.current_task()]

        assert outer.call(other_tasks()) == []
    finally:
        hanging.close()


def test_wrong_client_secret_stops_the_start_with_a_clear_error_without_the_secret(
    runtime_factory: Callable[..., RunningGateway], inner: RunningGateway, token_endpoint: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(UpstreamLoginError) as info:
        outer_gateway(runtime_factory, inner, token_endpoint, secret=WRONG_SECRET)
    message = str(info.value)
    assert message == (f"the upstream OAuth token endpoint {token_endpoint} refused client '{CLIENT_ID}': "
                       "invalid_client (HTTP 401): client authentication failed")
    assert not secrets_in(caplog.text)


def test_unreachable_token_endpoint_lets_the_gateway_start_drops_clients_and_is_retried_in_the_background(
    runtime_factory: Callable[..., RunningGateway], inner: RunningGateway, caplog: pytest.LogCaptureFixture,
    refused_port: int,
) -> None:
    caplog.set_level(logging.DEBUG)
    endpoint = f"http://127.0.0.1:{refused_port}/oauth/token"
    outer = outer_gateway(runtime_factory, inner, endpoint)  # no exception: it may come back
    assert f"the upstream OAuth token endpoint {endpoint} could not be reached" in caplog.text
    raw = RawClient(outer.bootstrap)
    raw.send(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False))
    assert raw.closed_by_peer(timeout=10)
    raw.close()
    assert tokens_of(outer).fetches == 0 and not oauth_logins(inner)
    # retried with nobody asking: after about 0.1 s, 0.2 s, 0.4 s (Kafka's sasl.login.retry.backoff.ms doubling)
    wait_until(lambda: tokens_of(outer).attempts >= 4, timeout=5)
    assert "upstream logins fail until a token is fetched; retrying in 0.1 s" in caplog.text
    assert not secrets_in(caplog.text)


def test_https_token_endpoint_is_verified_against_the_configured_ca(
    runtime_factory: Callable[..., RunningGateway], inner: RunningGateway, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from tests.integration.gateway.test_tls import self_signed

    cert, key = self_signed(tmp_path)
    with serve_control_plane(inner.settings, tls=(cert, key)) as url:  # type: ignore[attr-defined]
        endpoint = f"{url}/oauth/token"
        trusting = runtime_factory(name="a-ca", upstream=inner.bootstrap, gateway={
            **outer_gateway_section(endpoint), "upstream_oauth_ca_file": str(cert)})
        assert tokens_of(trusting).fetches == 1
        caplog.set_level(logging.WARNING)
        untrusting = outer_gateway(runtime_factory, inner, endpoint, name="a-system-store")
        assert tokens_of(untrusting).fetches == 0
        assert "could not be reached: ConnectError: [SSL: CERTIFICATE_VERIFY_FAILED]" in caplog.text


def test_kgov_gateway_command_exits_with_the_error_when_the_secret_is_wrong(
    inner: RunningGateway, token_endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from gateway.cli import run_until_signal
    from gateway.runtime import build_runtime
    from kgov.settings import Settings

    settings = Settings(db=f"sqlite:///{tmp_path / 'cli.db'}", data_dir=tmp_path / "cli",
                        gateway=outer_gateway_section(token_endpoint, WRONG_SECRET))
    runtime = build_runtime(settings, listen="127.0.0.1:0", upstream=inner.bootstrap)
    assert run_until_signal(runtime) == 2
    err = capsys.readouterr().err
    assert f"error: the upstream OAuth token endpoint {token_endpoint} refused client '{CLIENT_ID}'" in err
    assert not secrets_in(err)


def test_a_deleted_client_keeps_its_token_which_the_issuer_refuses_then_clients_are_dropped_with_a_clear_log(
    runtime_factory: Callable[..., RunningGateway], inner: RunningGateway, token_endpoint: str, kafka_broker: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A keeps its current token while the endpoint refuses a new one; B issued that token itself, so it
    refuses it once the client is deleted (`CredentialService._revoked_own_token`), though it has not
    expired: A's clients are dropped, never forwarded anonymously."""
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    outer = outer_gateway(runtime_factory, inner, token_endpoint, clock=clock)
    topic = f"upoauth-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    inner.runtime.credentials.delete_client(CLIENT_ID, actor=ADMIN)
    lifetime_s = inner.settings.oauth.token_lifetime_s  # type: ignore[attr-defined]
    # due for refresh, the endpoint refuses, the current token is still valid: it keeps being used
    clock.offset = timedelta(seconds=lifetime_s * 0.9)
    wait_until(lambda: "using the current token until it expires" in caplog.text)  # the refresher's attempt
    assert "refused client 'gw-upstream': invalid_client (HTTP 401)" in caplog.text
    raw = RawClient(outer.bootstrap)
    raw.send(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False))
    assert raw.closed_by_peer(timeout=10)
    raw.close()
    refused = [e["result"]["reason"] for e in oauth_logins(inner) if not e["result"]["success"]]
    assert f"OAuth client {CLIENT_ID} was deleted: the tokens issued to it are revoked" in refused
    # expired in A's eyes: nothing to log in with, so clients are dropped (never forwarded anonymously)
    clock.offset = timedelta(seconds=lifetime_s + 60)
    raw = RawClient(outer.bootstrap)
    raw.send(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False))
    assert raw.closed_by_peer(timeout=10)
    raw.close()
    assert (f"upstream {inner.bootstrap} unavailable: the upstream OAuth token endpoint {token_endpoint} refused "
            "client 'gw-upstream': invalid_client (HTTP 401)") in caplog.text
    assert not secrets_in(caplog.text)


def test_a_token_the_upstream_refuses_gives_its_status_and_drops_the_client(
    runtime_factory: Callable[..., RunningGateway], inner: RunningGateway, caplog: pytest.LogCaptureFixture,
) -> None:
    """A's token comes from another issuer (another kgov, other keys): B answers the RFC 7628 JSON error."""
    caplog.set_level(logging.DEBUG)
    other = runtime_factory(name="other-issuer")
    other.runtime.credentials.set_client(CLIENT_ID, SECRET, actor=ADMIN)
    with serve_control_plane(other.settings) as url:  # type: ignore[attr-defined]
        outer = outer_gateway(runtime_factory, inner, f"{url}/oauth/token")
        raw = RawClient(outer.bootstrap)
        raw.send(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False))
        assert raw.closed_by_peer(timeout=10)
        raw.close()
    # logged before the client is dropped
    assert "the upstream refused the gateway's OAUTHBEARER token: invalid_token (error 58)" in caplog.text
    token = tokens_of(outer)._token.value
    assert token not in caplog.text and not secrets_in(caplog.text)
    failures = [e for e in oauth_logins(inner) if not e["result"]["success"]]
    assert failures, "B should have audited the refused token"
