"""SASL termination at the gateway with the real credential service, real clients, real Tansu."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

from authz.model import Acl, Operation, PatternType, Permission, Principal, ResourceType
from gateway.codec import SPECS
from sasl.scram import MECHANISMS, ScramClient
from tests.integration.gateway.conftest import RawClient, RunningGateway, serve_control_plane
from tests.integration.gateway.test_proxy import consume, create_topics

pytestmark = [pytest.mark.broker]

ADMIN = Principal("User", "admin")
PASSWORD = "alice-secret-password"


def auth_events(gw: RunningGateway) -> list[dict[str, Any]]:
    """The authentication audit events of a `runtime_factory` gateway, oldest first."""
    return [e.data for e in gw.memory.events if str(e.type) == "io.kgov.authentication"]  # type: ignore[attr-defined]


def sasl_conf(gw: RunningGateway, mechanism: str, user: str = "alice", password: str = PASSWORD) -> dict[str, Any]:
    return {"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}


def grant_prefix(gw: RunningGateway, principal: str, prefix: str) -> None:
    acls = [Acl(ResourceType.TOPIC, prefix, PatternType.PREFIXED, principal, "*", Operation.ALL, Permission.ALLOW),
            Acl(ResourceType.GROUP, "*", PatternType.LITERAL, principal, "*", Operation.ALL, Permission.ALLOW)]
    assert gw.runtime.authorizer.create_acls(acls, actor=ADMIN) == [None, None]


@pytest.fixture
def sasl_gateway(runtime_factory: Callable[..., RunningGateway]) -> RunningGateway:
    gw = runtime_factory(sasl={"failed_authentication_delay_ms": 50,
                               "delegation_token_secret_key": "a-test-delegation-token-secret"})
    creds = gw.runtime.credentials
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        creds.set_scram_credential("alice", mech, PASSWORD, actor=ADMIN)
    return gw


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_login_produce_and_consume(sasl_gateway: RunningGateway, kafka_broker: str, mechanism: str) -> None:
    gw = sasl_gateway
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    grant_prefix(gw, "User:alice", "sasl-")
    p = Producer({**sasl_conf(gw, mechanism), "linger.ms": 5})
    for i in range(5):
        p.produce(topic, f"{mechanism}-{i}".encode())
    assert p.flush(20) == 0
    got = consume(gw.bootstrap, topic, 5, **{k: v for k, v in sasl_conf(gw, mechanism).items()
                                               if k != "bootstrap.servers"})
    assert sorted(got) == [f"{mechanism}-{i}".encode() for i in range(5)]
    logins = [e for e in gw.memory.events if str(e.type) == "io.kgov.authentication"
              and e.data.get("result", {}).get("success")]
    assert logins and logins[-1].data["authenticationInfo"] == {"principal": "User:alice", "mechanism": mechanism}
    requests = [e.data for e in gw.memory.events if str(e.type) == "io.kgov.request"]
    assert {r["principal"] for r in requests if r["requestHeader"]["requestApiKey"] == 0} == {"User:alice"}
    assert all(r["securityProtocol"] == "SASL_PLAINTEXT" for r in requests)


def test_wrong_password_fails_with_an_audited_authentication_failure(sasl_gateway: RunningGateway) -> None:
    gw = sasl_gateway
    errors: list[KafkaError] = []
    p = Producer({**sasl_conf(gw, "SCRAM-SHA-512", password="wrong-password"), "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in errors[0].str()
    del p
    failures = [e for e in gw.memory.events if str(e.type) == "io.kgov.authentication"
                and e.data["result"]["success"] is False]
    assert failures and failures[0].data["requestMetadata"]["clientAddress"] == "127.0.0.1"
    assert "wrong-password" not in str([e.to_json() for e in gw.memory.events])


def test_only_sasl_and_api_versions_before_authentication(sasl_gateway: RunningGateway) -> None:
    raw = RawClient(sasl_gateway.bootstrap)
    versions = raw.call(18, 3, SPECS[18].request[3](client_software_name="t", client_software_version="1"))
    keys = {k.api_key for k in versions.api_keys}
    assert {17, 36, 29, 30, 31, 50, 51} <= keys
    raw.send(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False))
    assert raw.closed_by_peer()
    raw.close()
    raw = RawClient(sasl_gateway.bootstrap)
    handshake = raw.call(17, 1, SPECS[17].request[1](mechanism="GSSAPI"))
    assert handshake.error_code == 33 and "SCRAM-SHA-512" in handshake.mechanisms
    assert raw.closed_by_peer()
    raw.close()


def scram_login(raw: RawClient, mechanism: str, user: str, password: str, *, token: bool = False) -> Any:
    assert raw.call(17, 1, SPECS[17].request[1](mechanism=mechanism)).error_code == 0
    client = ScramClient(MECHANISMS[mechanism], user, password, token_auth=token)
    auth = SPECS[36].request[1]
    first = raw.call(36, 1, auth(auth_bytes=client.first_message()))
    assert first.error_code == 0, first
    final = raw.call(36, 1, auth(auth_bytes=client.final_message(bytes(first.auth_bytes))))
    if final.error_code == 0:
        client.verify_server_final(bytes(final.auth_bytes))
    return final


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_delegation_token_login_is_the_owner_and_token_authenticated(
    sasl_gateway: RunningGateway, mechanism: str
) -> None:
    gw = sasl_gateway
    created = gw.runtime.credentials.create_token(Principal("User", "alice"), max_lifetime_ms=3_600_000)
    hmac_b64 = base64.b64encode(created.hmac).decode()
    raw = RawClient(gw.bootstrap)
    wrong = scram_login(raw, mechanism, created.info.token_id, base64.b64encode(bytes(64)).decode(), token=True)
    assert wrong.error_code == 58  # SASL_AUTHENTICATION_FAILED, as for an unknown id
    assert raw.closed_by_peer()
    raw.close()
    raw = RawClient(gw.bootstrap)
    final = scram_login(raw, mechanism, created.info.token_id, hmac_b64, token=True)
    assert final.error_code == 0
    assert 0 < final.session_lifetime_ms <= 3_600_000  # KIP-368: the token's remaining life
    metadata = raw.call(3, 12, SPECS[3].request[12](topics=None, allow_auto_topic_creation=False))
    assert metadata.brokers
    raw.close()
    logins = [e.data for e in gw.memory.events if str(e.type) == "io.kgov.authentication"]
    assert logins[-1]["authenticationInfo"]["principal"] == "User:alice"


def test_session_expiry_closes_a_connection_that_did_not_reauthenticate(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    gw = runtime_factory(sasl={"connections_max_reauth_ms": 1500, "failed_authentication_delay_ms": 0})
    gw.runtime.credentials.set_scram_credential("alice", "SCRAM-SHA-512", PASSWORD, actor=ADMIN)
    raw = RawClient(gw.bootstrap)
    assert scram_login(raw, "SCRAM-SHA-512", "alice", PASSWORD).session_lifetime_ms == 1500
    raw.call(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False))
    time.sleep(1.6)
    raw.send(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False))
    assert raw.closed_by_peer()
    raw.close()
    assert gw.gateway.expired_connections_killed == 1
    # librdkafka re-authenticates on its own (KIP-368) and keeps working past the lifetime. It renews at
    # about 90% of a session: of 3 s, 300 ms before its end (of 1.5 s, 150 ms: a pause of a loaded machine
    # could make it late, and the gateway would rightly close the connection).
    gw = runtime_factory(name="librdkafka",
                         sasl={"connections_max_reauth_ms": 3000, "failed_authentication_delay_ms": 0})
    gw.runtime.credentials.set_scram_credential("alice", "SCRAM-SHA-512", PASSWORD, actor=ADMIN)
    grant_prefix(gw, "User:alice", "reauth-")
    p = Producer({**sasl_conf(gw, "SCRAM-SHA-512"), "linger.ms": 0})
    deadline = time.monotonic() + 7  # well past the 3 s session lifetime: two renewals
    attempts = delivered = 0
    while time.monotonic() < deadline:
        attempts += 1
        p.produce("reauth-" + uuid.uuid4().hex[:4], b"x", on_delivery=lambda e, m: None)
        delivered += p.flush(10) == 0
        time.sleep(0.3)
    assert attempts >= 3 and delivered == attempts
    reauths = [e for e in gw.memory.events if str(e.type) == "io.kgov.authentication"
               and e.data["result"]["reauthentication"]]
    assert reauths, "librdkafka should have re-authenticated"
    # ... without a request during its re-authentications (the gateway would fail them) and without
    # letting a session expire: only the raw connection above was closed for expiry.
    assert all(e.data["result"]["success"] for e in reauths)
    assert gw.gateway.expired_connections_killed == 0


@pytest.fixture
def control_plane(sasl_gateway: RunningGateway) -> Iterator[str]:
    """`kgov serve` on the gateway's database: the OAuth token endpoint librdkafka fetches from."""
    with serve_control_plane(sasl_gateway.settings) as url:
        yield url


def test_oauthbearer_with_librdkafkas_oidc_client_and_kgovs_token_endpoint(
    sasl_gateway: RunningGateway, control_plane: str, kafka_broker: str,
) -> None:
    gw = sasl_gateway
    gw.runtime.credentials.set_client("svc-orders", "svc-orders-secret-0123", actor=ADMIN)
    topic = f"oidc-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    grant_prefix(gw, "User:svc-orders", "oidc-")
    p = Producer({
        "bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "svc-orders",
        "sasl.oauthbearer.client.secret": "svc-orders-secret-0123",
        "sasl.oauthbearer.token.endpoint.url": f"{control_plane}/oauth/token",
    })
    errors: list[Any] = []
    p.produce(topic, b"via-oidc", on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(30) == 0 and errors == [None]
    logins = [e.data for e in gw.memory.events if str(e.type) == "io.kgov.authentication"]
    assert logins[-1]["authenticationInfo"] == {"principal": "User:svc-orders", "mechanism": "OAUTHBEARER"}


def test_gateway_logs_in_upstream_with_its_own_service_credential(
    runtime_factory: Callable[..., RunningGateway], authz_factory: Any, kafka_broker: str,
) -> None:
    """Gateway A (PLAINTEXT for clients) in front of gateway B (SASL): A authenticates as `svc`."""
    from dataclasses import replace

    from gateway.proxy import GatewayOptions, Services

    inner = runtime_factory(gateway={"address_mode": "single"}, sasl={"failed_authentication_delay_ms": 0})
    inner.runtime.credentials.set_scram_credential("svc", "SCRAM-SHA-512", "svc-password-0123", actor=ADMIN)
    topic = f"chain-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    grant_prefix(inner, "User:svc", "chain-")
    outer_authz = authz_factory(allow_everyone_if_no_acl_found=True)
    options = GatewayOptions("127.0.0.1", 0, ("127.0.0.1", inner.gateway.port), address_mode="single",
                             upstream_sasl=("SCRAM-SHA-512", "svc", "svc-password-0123"))
    with RunningGateway(options, Services(outer_authz.service)) as outer:
        p = Producer({"bootstrap.servers": outer.bootstrap})
        results: list[Any] = []
        p.produce(topic, b"chained", on_delivery=lambda err, msg: results.append(err))
        assert p.flush(20) == 0
        assert results == [None], [str(r) for r in results]
    def produce_principals() -> set[str]:
        return {e.data["principal"] for e in inner.memory.events if str(e.type) == "io.kgov.request"
                and e.data["requestHeader"]["requestApiKey"] == 0}

    deadline = time.monotonic() + 30  # the inner gateway logs right after it answered, on its own thread
    while not produce_principals() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert produce_principals() == {"User:svc"}
    # with a wrong service password the outer gateway drops clients instead of forwarding anonymously
    bad = replace(options, upstream_sasl=("SCRAM-SHA-512", "svc", "wrong-password-999"))
    with RunningGateway(bad, Services(outer_authz.service)) as outer:
        raw = RawClient(outer.bootstrap)
        raw.send(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False))
        assert raw.closed_by_peer(timeout=10)
        raw.close()


def test_unauthenticated_clients_may_not_send_large_frames(sasl_gateway: RunningGateway) -> None:
    raw = RawClient(sasl_gateway.bootstrap)
    raw.sock.sendall((600_000).to_bytes(4, "big"))  # above sasl.server.max.receive.size (512 KiB)
    assert raw.closed_by_peer()
    raw.close()


def test_sasl_handshake_v0_with_raw_tokens(sasl_gateway: RunningGateway) -> None:
    raw = RawClient(sasl_gateway.bootstrap)
    assert raw.call(17, 0, SPECS[17].request[0](mechanism="PLAIN")).error_code == 0
    token = b"\x00alice\x00" + PASSWORD.encode()
    raw.sock.sendall(len(token).to_bytes(4, "big") + token)  # v0: the SASL bytes, size-prefixed, no header
    assert raw._exactly(4) == b"\x00\x00\x00\x00"  # PLAIN's (empty) final server message
    assert raw.call(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False)).brokers
    raw.close()
