"""Delegation tokens from librdkafka (confluent-kafka) and kafka-python: OAUTHBEARER with kgov's bearer
form (`sasl.delegation.format_bearer`), through the gateway, in front of the session's Tansu."""

from __future__ import annotations

import base64
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from kafka import KafkaConsumer, KafkaProducer
from kafka.net.sasl.oauth import AbstractTokenProvider

from authz.model import Principal
from gateway.codec import SPECS
from sasl.delegation import format_bearer
from sasl.oauthbearer import build_client_initial_response
from tests.integration.gateway.conftest import RawClient, RunningGateway
from tests.integration.gateway.test_proxy import consume, create_topics
from tests.integration.gateway.test_sasl import auth_events, grant_prefix, scram_login

# The fixture: a gateway with user alice, a delegation-token secret and a 50 ms failure delay.
from tests.integration.gateway.test_sasl import sasl_gateway as sasl_gateway

pytestmark = [pytest.mark.broker]

ALICE = Principal("User", "alice")
CREATE_TOKEN = SPECS[38].request[3]


def bearer_for(gw: RunningGateway, **kw: Any) -> tuple[str, Any]:
    created = gw.runtime.credentials.create_token(ALICE, **kw)
    return format_bearer(created.info.token_id, created.hmac), created


def librdkafka_conf(gw: RunningGateway, bearer: str, expiry_ms: int) -> dict[str, Any]:
    """What a confluent-kafka worker sets: OAUTHBEARER, and an `oauth_cb` that returns the bearer and
    the token's expiry in seconds since the epoch (librdkafka refreshes at 80 % of it)."""
    return {"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": lambda _config: (bearer, expiry_ms / 1000)}


class TokenProvider(AbstractTokenProvider):
    """What a kafka-python worker passes as `sasl_oauth_token_provider`."""

    def __init__(self, bearer: str) -> None:
        super().__init__()
        self.bearer = bearer

    def token(self) -> str:
        return self.bearer


def test_confluent_kafka_produces_and_consumes_as_the_tokens_owner(
    sasl_gateway: RunningGateway, kafka_broker: str,
) -> None:
    gw = sasl_gateway
    topic = f"dtok-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    grant_prefix(gw, "User:alice", "dtok-")
    bearer, created = bearer_for(gw, max_lifetime_ms=3_600_000)
    token_id = created.info.token_id
    conf = librdkafka_conf(gw, bearer, created.info.expiry_ms)
    p = Producer({**conf, "linger.ms": 5})
    for i in range(5):
        p.produce(topic, f"rd-{i}".encode())
    assert p.flush(20) == 0
    got = consume(gw.bootstrap, topic, 5, **{k: v for k, v in conf.items() if k != "bootstrap.servers"})
    assert sorted(got) == [f"rd-{i}".encode() for i in range(5)]
    logins = [e for e in auth_events(gw) if e["result"]["success"]]
    assert logins and {tuple(e["authenticationInfo"].values()) for e in logins} == {
        ("User:alice", "OAUTHBEARER", token_id)}
    requests = [e.data for e in gw.memory.events if str(e.type) == "io.kgov.request"]
    assert {r["principal"] for r in requests if r["requestHeader"]["requestApiKey"] in (0, 1)} == {"User:alice"}
    hmac_b64 = base64.b64encode(created.hmac).decode()
    assert all(hmac_b64 not in e.to_json() and bearer not in e.to_json() for e in gw.memory.events)


def test_kafka_python_produces_and_consumes_as_the_tokens_owner(
    sasl_gateway: RunningGateway, kafka_broker: str,
) -> None:
    gw = sasl_gateway
    topic = f"dtok-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    grant_prefix(gw, "User:alice", "dtok-")
    bearer, created = bearer_for(gw)
    token_id = created.info.token_id
    sasl = {"bootstrap_servers": gw.bootstrap, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": TokenProvider(bearer)}
    producer = KafkaProducer(acks=1, **sasl)
    for i in range(5):
        producer.send(topic, f"kp-{i}".encode()).get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(topic, group_id=f"g-{uuid.uuid4().hex[:6]}", auto_offset_reset="earliest",
                             consumer_timeout_ms=8000, session_timeout_ms=6000, heartbeat_interval_ms=500, **sasl)
    got = [m.value for m in consumer]
    consumer.close()
    assert sorted(got) == [f"kp-{i}".encode() for i in range(5)]
    logins = [e for e in auth_events(gw) if e["result"]["success"]]
    assert logins and {tuple(e["authenticationInfo"].values()) for e in logins} == {
        ("User:alice", "OAUTHBEARER", token_id)}


def test_without_an_acl_the_owner_is_denied(sasl_gateway: RunningGateway, kafka_broker: str) -> None:
    """The token carries no rights of its own: what the owner may do, and no more."""
    gw = sasl_gateway
    topic = f"noacl-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    bearer, created = bearer_for(gw)
    errors: list[Any] = []
    p = Producer(librdkafka_conf(gw, bearer, created.info.expiry_ms))
    p.produce(topic, b"x", on_delivery=lambda err, _m: errors.append(err))
    p.flush(20)
    assert len(errors) == 1 and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def oauth_login(raw: RawClient, bearer: str) -> Any:
    """SaslHandshake + SaslAuthenticate v2; on an error challenge, the client's %x01, as clients do."""
    assert raw.call(17, 1, SPECS[17].request[1](mechanism="OAUTHBEARER")).error_code == 0
    auth = SPECS[36].request[2]
    first = raw.call(36, 2, auth(auth_bytes=build_client_initial_response(bearer)))
    if first.error_code == 0 and first.auth_bytes:
        return first, raw.call(36, 2, auth(auth_bytes=b"\x01"))
    return first, None


def test_expired_removed_and_wrong_hmac_tokens_are_refused_alike(sasl_gateway: RunningGateway) -> None:
    gw = sasl_gateway
    creds = gw.runtime.credentials
    live_bearer, live = bearer_for(gw)
    expired_bearer, expired = bearer_for(gw)
    removed_bearer, removed = bearer_for(gw)
    assert creds.expire_token(ALICE, base64.b64encode(expired.hmac).decode(), 0) > 0
    assert creds.expire_token(ALICE, base64.b64encode(removed.hmac).decode(), -1) == -1
    time.sleep(0.01)  # past the expired token's expiry millisecond
    answers = []
    for bearer in (format_bearer(live.info.token_id, bytes(64)), expired_bearer, removed_bearer,
                   format_bearer(str(uuid.uuid4()), live.hmac)):
        raw = RawClient(gw.bootstrap)
        first, final = oauth_login(raw, bearer)
        assert final is not None and raw.closed_by_peer()
        raw.close()
        answers.append((first.error_code, bytes(first.auth_bytes), final.error_code, final.error_message))
    assert answers == [(0, b'{"status":"invalid_token"}', 58,
                        "Authentication failed during authentication due to invalid credentials with SASL "
                        "mechanism OAUTHBEARER")] * 4
    reasons = [e["result"]["reason"] for e in auth_events(gw) if not e["result"]["success"]]
    assert reasons == [f"delegation token {live.info.token_id}: the HMAC does not match",
                       f"delegation token {expired.info.token_id} has expired",
                       f"unknown delegation token {removed.info.token_id} (never issued, or removed)",
                       reasons[3]]
    assert reasons[3].startswith("unknown delegation token ")
    # ... and the real one still logs in
    raw = RawClient(gw.bootstrap)
    first, final = oauth_login(raw, live_bearer)
    assert final is None and first.error_code == 0
    raw.close()
    assert all(base64.b64encode(t.hmac).decode() not in e.to_json()
               for t in (live, expired, removed) for e in gw.memory.events)


def test_librdkafka_reports_a_refused_token_as_an_authentication_error(sasl_gateway: RunningGateway) -> None:
    gw = sasl_gateway
    _, created = bearer_for(gw)
    errors: list[KafkaError] = []
    wrong = format_bearer(created.info.token_id, bytes(64))
    p = Producer({**librdkafka_conf(gw, wrong, created.info.expiry_ms), "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION
    assert "invalid credentials with SASL mechanism OAUTHBEARER" in errors[0].str()


def test_a_token_session_may_not_create_tokens_and_a_jwt_session_may(sasl_gateway: RunningGateway) -> None:
    gw = sasl_gateway
    bearer, created = bearer_for(gw, max_lifetime_ms=600_000)
    raw = RawClient(gw.bootstrap)
    first, final = oauth_login(raw, bearer)
    assert final is None and first.error_code == 0
    # KIP-368: the session ends with the token, never later
    assert 0 < first.session_lifetime_ms <= 600_001
    assert created.info.expiry_ms + 1 - first.session_lifetime_ms - int(time.time() * 1000) < 5_000
    refused = raw.call(38, 3, CREATE_TOKEN(owner_principal_type=None, owner_principal_name=None,
                                           max_lifetime_ms=-1, renewers=[]))
    assert refused.error_code == 64  # DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, as for a SCRAM tokenauth session
    describe = raw.call(41, 3, SPECS[41].request[3](owners=None))
    assert (describe.error_code, describe.tokens) == (64, [])
    # ... nor renew or expire its own token (a leaked bearer could otherwise keep itself alive)
    renew = raw.call(39, 2, SPECS[39].request[2](hmac=created.hmac, renew_period_ms=60_000))
    expire = raw.call(40, 2, SPECS[40].request[2](hmac=created.hmac, expiry_time_period_ms=-1))
    assert (renew.error_code, expire.error_code) == (64, 64)
    assert raw.call(3, 12, SPECS[3].request[12](topics=None, allow_auto_topic_creation=False)).brokers
    raw.close()
    # The owner's own SCRAM login, and a JWT login, are not token-authenticated: both may create tokens.
    creds = gw.runtime.credentials
    creds.set_client("svc-orders", "svc-orders-secret-0123", actor=ALICE)
    account = creds.authenticate_client("svc-orders", "svc-orders-secret-0123")
    assert account is not None
    jwt = creds.issue_token(account, None).access_token
    raw = RawClient(gw.bootstrap)
    first, final = oauth_login(raw, jwt)
    assert final is None and first.error_code == 0
    made = raw.call(38, 3, CREATE_TOKEN(owner_principal_type=None, owner_principal_name=None,
                                        max_lifetime_ms=-1, renewers=[]))
    assert made.error_code == 0 and made.principal_name == "svc-orders"
    raw.close()
    raw = RawClient(gw.bootstrap)
    assert scram_login(raw, "SCRAM-SHA-512", "alice", "alice-secret-password").error_code == 0
    made = raw.call(38, 3, CREATE_TOKEN(owner_principal_type=None, owner_principal_name=None,
                                        max_lifetime_ms=-1, renewers=[]))
    assert made.error_code == 0 and made.principal_name == "alice"
    raw.close()


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_workers_reauthenticate_with_a_short_lived_token_that_their_service_renews(
    runtime_factory: Callable[..., RunningGateway], client: str,
) -> None:
    """The mission's case: a service keeps its workers' token alive a few seconds at a time. Each
    session ends with the token (KIP-368), and the worker re-authenticates with the same bearer, which
    the renewal lets log in again; the connection is never closed for an expired session."""
    gw = runtime_factory(name=client, sasl={"failed_authentication_delay_ms": 0,
                                            "delegation_token_secret_key": "a-test-delegation-token-secret"})
    creds = gw.runtime.credentials
    grant_prefix(gw, "User:alice", "renewed-")
    created = creds.create_token(ALICE)
    hmac_b64 = base64.b64encode(created.hmac).decode()
    expiry = [creds.expire_token(ALICE, hmac_b64, 3_000)]  # the token now lives 3 s at a time
    bearer = format_bearer(created.info.token_id, created.hmac)
    stop = threading.Event()

    def renew() -> None:  # the service, renewing its worker's token every half second
        while not stop.wait(0.5):
            expiry[0] = creds.renew_token(ALICE, hmac_b64, 3_000).expiry_ms

    renewer = threading.Thread(target=renew)
    renewer.start()
    try:
        topic = "renewed-" + uuid.uuid4().hex[:6]
        if client == "confluent-kafka":
            p = Producer({"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                          "sasl.mechanism": "OAUTHBEARER", "linger.ms": 0,
                          "oauth_cb": lambda _config: (bearer, expiry[0] / 1000)})

            def send() -> bool:
                p.produce(topic, b"x")
                return p.flush(10) == 0
        else:
            kp = KafkaProducer(bootstrap_servers=gw.bootstrap, security_protocol="SASL_PLAINTEXT",
                               sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=TokenProvider(bearer), acks=1)

            def send() -> bool:
                kp.send(topic, b"x").get(timeout=10)
                return True
        deadline = time.monotonic() + 7  # past two 3-second sessions
        attempts = delivered = 0
        while time.monotonic() < deadline:
            attempts += 1
            delivered += send()
            time.sleep(0.3)
        if client == "kafka-python":
            kp.close()
    finally:
        stop.set()
        renewer.join()
    assert attempts >= 3 and delivered == attempts
    events = auth_events(gw)
    reauths = [e for e in events if e["result"]["reauthentication"]]
    assert reauths, f"{client} should have re-authenticated"
    assert all(e["result"]["success"] for e in events)
    assert {tuple(e["authenticationInfo"].values()) for e in events} == {
        ("User:alice", "OAUTHBEARER", created.info.token_id)}
    assert gw.gateway.expired_connections_killed == 0


@pytest.mark.parametrize("form", ["SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
def test_the_audit_trail_names_the_token_a_login_used_never_its_hmac(
    sasl_gateway: RunningGateway, form: str,
) -> None:
    """SOX / SOC 2 access reviews: "User:alice logged in with delegation token <id>", for a success and
    a refusal alike, through SCRAM `tokenauth` and the OAUTHBEARER form; a password login names none."""
    gw = sasl_gateway
    bearer, created = bearer_for(gw)
    token_id, hmac_b64 = created.info.token_id, base64.b64encode(created.hmac).decode()
    wrong_b64 = base64.b64encode(bytes(64)).decode()
    for secret in (wrong_b64, hmac_b64):
        raw = RawClient(gw.bootstrap)
        if form == "OAUTHBEARER":
            oauth_login(raw, bearer if secret == hmac_b64 else format_bearer(token_id, bytes(64)))
        else:
            scram_login(raw, form, token_id, secret, token=True)
        raw.close()
    raw = RawClient(gw.bootstrap)
    assert scram_login(raw, "SCRAM-SHA-512", "alice", "alice-secret-password").error_code == 0
    raw.close()
    events = auth_events(gw)
    failed, logged_in, password_login = events[-3:]
    assert not failed["result"]["success"] and failed["authenticationInfo"]["delegationTokenId"] == token_id
    assert logged_in["result"]["success"]
    assert logged_in["authenticationInfo"] == {"principal": "User:alice", "mechanism": form,
                                               "delegationTokenId": token_id}
    assert password_login["authenticationInfo"] == {"principal": "User:alice", "mechanism": "SCRAM-SHA-512"}
    assert all(hmac_b64 not in e.to_json() and bearer not in e.to_json() for e in gw.memory.events)
