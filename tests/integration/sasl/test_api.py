"""The credential REST API in the assembled control plane (`kgov.app.build_app`), over SQLite."""

from __future__ import annotations

import base64
import json
import logging
import socket
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient

from authz.model import Acl, Operation, PatternType, Permission, Principal, ResourceType
from kgov.app import build_app
from kgov.settings import Settings
from sasl.http_auth import CredentialAuthenticator
from sasl.scram import SCRAM_SHA_512, ScramClient
from tests.support.raw_http import read_to_end
from tests.support.server import serve_app

ADMIN_PW = "admin-password-for-tests"
DT_KEY = "delegation-secret-key-for-tests"


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


ADMIN = basic("admin", ADMIN_PW)


@pytest.fixture
def app_env(tmp_path: Path):
    settings = Settings(
        data_dir=tmp_path,
        admin={"password": ADMIN_PW},
        sasl={
            "delegation_token_secret_key": DT_KEY,
            "failed_authentication_delay_ms": 20,
            "scram_iterations": 4096,
        },
    )
    clock = Clock()
    app = build_app(settings, clock=clock)
    with TestClient(app) as client:
        yield client, app, clock, tmp_path


def grant(app, principal: str, rtype: ResourceType, name: str, op: Operation) -> None:
    app.state.authorizer.create_acls(
        [Acl(rtype, name, PatternType.LITERAL, principal, "*", op, Permission.ALLOW)],
        actor=Principal("User", "admin"),
    )


def test_scram_user_endpoints(app_env) -> None:
    client, app, _, _ = app_env
    r = client.put(
        "/v1/scram/users/alice", json={"mechanism": "SCRAM-SHA-256", "password": "alice-pw-1"}, headers=ADMIN
    )
    assert r.status_code == 201, r.text
    assert r.json() == {"name": "alice", "mechanisms": [{"mechanism": "SCRAM-SHA-256", "iterations": 4096}]}
    r = client.put(
        "/v1/scram/users/alice",
        json={"mechanism": "SCRAM-SHA-512", "password": "alice-pw-1", "iterations": 8192},
        headers=ADMIN,
    )
    assert r.status_code == 201
    r = client.put(
        "/v1/scram/users/alice", json={"mechanism": "SCRAM-SHA-512", "password": "alice-pw-2"}, headers=ADMIN
    )
    assert r.status_code == 200
    listed = client.get("/v1/scram/users", headers=ADMIN).json()
    assert {
        "name": "alice",
        "mechanisms": [
            {"mechanism": "SCRAM-SHA-256", "iterations": 4096},
            {"mechanism": "SCRAM-SHA-512", "iterations": 4096},
        ],
    } in listed
    assert [u["name"] for u in listed] == ["admin", "alice"]
    assert "salt" not in str(listed) and "key" not in str(listed)
    # alice can log in with Basic, but may not manage credentials or list them
    alice = basic("alice", "alice-pw-2")
    r = client.get("/v1/scram/users", headers=alice)
    assert r.status_code == 403 and r.json()["error_code"] == 40301
    r = client.put("/v1/scram/users/bob", json={"password": "x"}, headers=alice)
    assert r.status_code == 403
    grant(app, "User:alice", ResourceType.CLUSTER, "kafka-cluster", Operation.DESCRIBE)
    assert client.get("/v1/scram/users", headers=alice).status_code == 200
    # validation errors with Kafka's wording
    r = client.put("/v1/scram/users/bob", json={"mechanism": "SCRAM-SHA-1", "password": "x"}, headers=ADMIN)
    assert (r.status_code, r.json()["error_code"]) == (400, 40033)
    r = client.put("/v1/scram/users/bob", json={"password": "x", "iterations": 1000}, headers=ADMIN)
    assert r.status_code == 400 and "Too few iterations" in r.json()["message"]
    r = client.put("/v1/scram/users/bob", json={"password": "", "iterations": 1000}, headers=ADMIN)
    assert r.status_code == 400 and "password" in r.json()["message"]
    r = client.delete("/v1/scram/users/alice", params={"mechanism": "SCRAM-SHA-256"}, headers=ADMIN)
    assert r.status_code == 204
    r = client.delete("/v1/scram/users/alice", params={"mechanism": "SCRAM-SHA-256"}, headers=ADMIN)
    assert (r.status_code, r.json()["error_code"]) == (404, 40491)
    assert client.get("/v1/scram/users/alice", headers=ADMIN).json()["mechanisms"] == [
        {"mechanism": "SCRAM-SHA-512", "iterations": 4096}
    ]
    # the same credential serves the gateway's SCRAM
    svc = app.state.credentials
    server = svc.server_mechanism("SCRAM-SHA-512", "127.0.0.1")
    scram = ScramClient(SCRAM_SHA_512, "alice", "alice-pw-2")
    first = server.step(scram.first_message())
    assert server.step(scram.final_message(first.data)).principal == Principal("User", "alice")


def test_unauthenticated_requests(app_env) -> None:
    client, *_ = app_env
    for headers in (
        {},
        basic("admin", "wrong"),
        basic("ghost", ADMIN_PW),
        {"Authorization": "Bearer a.b.c"},
        {"Authorization": "Digest x"},
    ):
        r = client.get("/v1/scram/users", headers=headers)
        assert r.status_code == 401
        assert r.headers["WWW-Authenticate"].startswith("Basic")
        assert r.json()["error_code"] == 40101


def test_failed_attempts_are_limited_per_source(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path,
        admin={"password": ADMIN_PW},
        sasl={"failed_authentication_delay_ms": 0, "max_failed_attempts_per_source": 3},
    )
    with TestClient(build_app(settings)) as client:
        for _ in range(3):
            assert client.get("/v1/scram/users", headers=basic("admin", "guess")).status_code == 401
        # even the right password is refused while the source is over its limit
        assert client.get("/v1/scram/users", headers=ADMIN).status_code == 401


def test_a_stale_password_behind_a_shared_address_does_not_lock_out_the_admin(tmp_path: Path) -> None:
    """Every client behind one proxy or NAT has its address: one application retrying a stale password
    (and being refused on every retry) leaves the others there, the admin included, able to log in;
    the same goes for `POST /oauth/token`, counted per client id."""
    settings = Settings(data_dir=tmp_path, admin={"password": ADMIN_PW},
                        sasl={"delegation_token_secret_key": DT_KEY, "failed_authentication_delay_ms": 0,
                              "max_failed_attempts_per_source": 3, "scram_iterations": 4096})
    app = build_app(settings)
    with TestClient(app, client=("10.30.0.1", 50000)) as client:
        app.state.credentials.set_scram_credential("ci-bot", "SCRAM-SHA-256", "ci-new-password", actor="admin")
        for _ in range(120):  # past both limits (3, and 100 for the address): refused unchecked from the 4th on
            assert client.get("/v1/scram/users", headers=basic("ci-bot", "ci-old-password")).status_code == 401
        assert client.get("/v1/scram/users", headers=basic("ci-bot", "ci-new-password")).status_code == 401
        assert client.get("/v1/scram/users", headers=ADMIN).status_code == 200
        for client_id in ("spark-job", "etl-job"):
            created = client.post("/v1/oauth/clients", headers=ADMIN,
                                  json={"client_id": client_id, "client_secret": f"{client_id}-secret-0123456789"})
            assert created.status_code == 201, created.text

        def token(client_id: str, secret: str) -> int:
            form = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
            return client.post("/oauth/token", data=form).status_code

        for _ in range(5):
            assert token("spark-job", "stale-secret-0123456789") == 401
        assert token("spark-job", "spark-job-secret-0123456789") == 401  # that client id is over its limit
        assert token("etl-job", "etl-job-secret-0123456789") == 200
    events = (tmp_path / "audit" / "events.jsonl").read_text()
    refusals = [json.loads(line) for line in events.splitlines()
                if "too many failed authentication attempts for this name from this address" in line]
    assert [e["data"]["methodName"] for e in refusals] == ["http.Authenticate"] * (117 + 1) + ["oauth.Token"] * 3
    assert events.count("invalid client credentials") == 3  # checked failures; the 3 refusals after are not checked


def test_an_address_spraying_names_over_http_is_refused_past_the_address_cap(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, admin={"password": ADMIN_PW},
                        sasl={"failed_authentication_delay_ms": 0, "max_failed_attempts_per_address": 10})
    app = build_app(settings)
    with TestClient(app, client=("10.30.0.2", 50000)) as client:
        statuses = [client.get("/v1/scram/users", headers=basic(f"user-{n}", "Winter2026!")).status_code
                    for n in range(15)]
        assert statuses == [401] * 15
        assert client.get("/v1/scram/users", headers=ADMIN).status_code == 401
    assert TestClient(app, client=("10.30.0.3", 50000)).get("/v1/scram/users", headers=ADMIN).status_code == 200
    events = (tmp_path / "audit" / "events.jsonl").read_text()
    assert events.count("too many failed authentication attempts from this address") == 5 + 1


def test_a_failure_is_answered_the_failure_delay_after_the_request_arrived(app_env) -> None:
    """A SHA-256-only user's PBKDF2 costs about half an unknown name's SHA-512 one: waiting the failure
    delay after the check would let the answer's time name the user. The wait is counted from the
    request's arrival instead (time injected: each reading of the clock advances it by `step`)."""
    client, app, _, _ = app_env
    app.state.credentials.set_scram_credential("bob", "SCRAM-SHA-256", "bob-password-1", actor="admin")
    readings = iter(x * 0.03 for x in range(1000))
    slept: list[float] = []

    async def record(seconds: float) -> None:
        slept.append(round(seconds, 6))

    app.state.authenticator = CredentialAuthenticator(
        app.state.credentials, monotonic=lambda: next(readings), sleep=record)
    for headers in (basic("bob", "wrong"), basic("nobody", "wrong"), {"Authorization": "Bearer a.b.c"}, {}):
        assert client.get("/v1/scram/users", headers=headers).status_code == 401
    delay = app.state.credentials.failure_delay_s  # 20 ms here, less than the 30 ms a check "took"
    assert slept == [0.0] * 4
    app.state.credentials.sasl = app.state.credentials.sasl.model_copy(update={"failed_authentication_delay_ms": 100})
    slept.clear()
    for headers in (basic("bob", "wrong"), basic("nobody", "wrong")):
        assert client.get("/v1/scram/users", headers=headers).status_code == 401
    assert slept == [0.07, 0.07] and delay == 0.02


def test_failed_attempts_from_one_ipv6_network_share_a_limit(tmp_path: Path) -> None:
    """An IPv6 client usually holds a whole /64: counted per address, it could guess without end by
    changing the last 64 bits. Its /64 is one source; other networks and IPv4 are unaffected."""
    settings = Settings(
        data_dir=tmp_path,
        admin={"password": ADMIN_PW},
        sasl={"failed_authentication_delay_ms": 0, "max_failed_attempts_per_source": 3},
    )
    app = build_app(settings)

    def status(address: str, headers: dict[str, str]) -> int:
        # Not entered: one app, several client addresses (the lifespan would close the audit sinks).
        return TestClient(app, client=(address, 50000)).get("/v1/scram/users", headers=headers).status_code

    for suffix in ("1", "2", "ffff:ffff:ffff:fffe"):
        assert status(f"2001:db8:0:1:{suffix}" if ":" in suffix else f"2001:db8:0:1::{suffix}",
                      basic("admin", "guess")) == 401
    assert status("2001:db8:0:1:1234::9", ADMIN) == 401  # the network is over its limit
    assert status("2001:db8:0:2::1", ADMIN) == 200
    assert status("192.0.2.1", ADMIN) == 200


def test_a_bearer_token_nested_too_deeply_is_a_counted_audited_failure(tmp_path: Path) -> None:
    """A JWT header Python's json cannot parse for depth (a RecursionError, within the 16 KiB a token may
    have) is a malformed token like any other: 401, audited, counted against the source; not a 500
    that escapes the failed-attempt limit and the audit trail."""
    settings = Settings(
        data_dir=tmp_path,
        admin={"password": ADMIN_PW},
        sasl={"failed_authentication_delay_ms": 0, "max_failed_attempts_per_source": 2},
    )
    header = base64.urlsafe_b64encode(b"[" * 5000 + b"]" * 5000).rstrip(b"=").decode()
    nested = {"Authorization": f"Bearer {header}.e30.c2ln"}
    with TestClient(build_app(settings)) as client:
        for _ in range(2):
            r = client.get("/v1/scram/users", headers=nested)
            assert r.status_code == 401, r.text
        # bearers from this address are over their limit; a Basic user there is not (`sasl.limiter`)
        assert client.get("/v1/scram/users", headers=nested).status_code == 401
        assert client.get("/v1/scram/users", headers=ADMIN).status_code == 200
    events = (tmp_path / "audit" / "events.jsonl").read_text()
    assert events.count("malformed JWT header") == 2
    assert events.count("too many failed authentication attempts for this name from this address") == 1


def test_client_credentials_and_bearer(app_env) -> None:
    client, app, clock, _ = app_env
    r = client.post(
        "/v1/oauth/clients",
        json={
            "client_id": "spark-job",
            "client_secret": "spark-secret-0123456789",
            "scopes": ["kafka", "admin"],
        },
        headers=ADMIN,
    )
    assert r.status_code == 201 and r.json()["scopes"] == ["admin", "kafka"]
    assert client.get("/v1/oauth/clients", headers=ADMIN).json()[0]["client_id"] == "spark-job"
    # discovery
    conf = client.get("/.well-known/openid-configuration").json()
    assert conf["token_endpoint"].endswith("/oauth/token") and conf["issuer"] == "kgov"
    # token by HTTP Basic (as librdkafka sends it) ...
    r = client.post(
        "/oauth/token",
        data={"grant_type": "client_credentials", "scope": "kafka"},
        headers=basic("spark-job", "spark-secret-0123456789"),
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["token_type"] == "Bearer" and body["expires_in"] == 900 and body["scope"] == "kafka"
    assert r.headers["cache-control"] == "no-store"
    # ... and by form fields
    r2 = client.post(
        "/oauth/token",
        data={
            "grant_type": "client_credentials",
            "client_id": "spark-job",
            "client_secret": "spark-secret-0123456789",
        },
    )
    assert r2.status_code == 200 and r2.json()["scope"] == "admin kafka"
    jwks = client.get("/.well-known/jwks.json").json()
    assert jwks["keys"][0]["kty"] == "RSA" and "d" not in jwks["keys"][0]
    # the token authenticates to the control plane; authz decides for User:spark-job
    bearer = {"Authorization": f"Bearer {body['access_token']}"}
    assert client.get("/v1/scram/users", headers=bearer).status_code == 403
    grant(app, "User:spark-job", ResourceType.CLUSTER, "kafka-cluster", Operation.DESCRIBE)
    assert client.get("/v1/scram/users", headers=bearer).status_code == 200
    # rejected once expired (beyond the 30 s skew)
    clock.now += timedelta(seconds=900 + 31)
    assert client.get("/v1/scram/users", headers=bearer).status_code == 401
    # RFC 6749 errors
    for data, headers, status, error in [
        ({"grant_type": "client_credentials"}, basic("spark-job", "wrong-secret"), 401, "invalid_client"),
        (
            {"grant_type": "client_credentials"},
            basic("nobody", "spark-secret-0123456789"),
            401,
            "invalid_client",
        ),
        ({"grant_type": "client_credentials"}, {}, 401, "invalid_client"),
        (
            {"grant_type": "password"},
            basic("spark-job", "spark-secret-0123456789"),
            400,
            "unsupported_grant_type",
        ),
        (
            {"grant_type": "client_credentials", "scope": "root"},
            basic("spark-job", "spark-secret-0123456789"),
            400,
            "invalid_scope",
        ),
    ]:
        r = client.post("/oauth/token", data=data, headers=headers)
        assert (r.status_code, r.json()["error"]) == (status, error), r.text
    r = client.post("/oauth/token", json={"grant_type": "client_credentials"})
    assert r.json()["error"] == "invalid_request"
    assert client.delete("/v1/oauth/clients/spark-job", headers=ADMIN).status_code == 204
    assert client.delete("/v1/oauth/clients/spark-job", headers=ADMIN).status_code == 404


def test_bearer_token_whose_exp_is_not_after_its_iat_or_nbf_is_refused(app_env) -> None:
    """HTTP Bearer authentication goes through the same validator as OAUTHBEARER: a token signed by
    the issuer's key, inside the clock skew, is refused when its `exp` is not after `iat` or `nbf`."""
    from jose import jwt

    client, app, clock, _ = app_env
    grant(app, "User:worker", ResourceType.CLUSTER, "kafka-cluster", Operation.DESCRIBE)
    # kgov's own tokens are refused once their client is gone (`CredentialService._revoked_own_token`).
    app.state.credentials.set_client("worker", "worker-secret-0123456789", [], actor=Principal("User", "admin"))
    key = app.state.credentials._signing_key()
    now = int(clock().timestamp())

    def bearer(**times: int) -> dict[str, str]:
        claims = {"iss": "kgov", "aud": "kgov", "sub": "worker", **times}
        token = jwt.encode(claims, key.private_pem, algorithm=key.alg, headers={"kid": key.kid})
        return {"Authorization": f"Bearer {token}"}

    assert client.get("/v1/scram/users", headers=bearer(iat=now - 60, exp=now + 60)).status_code == 200
    for times in ({"iat": now, "exp": now - 5}, {"iat": now - 60, "nbf": now + 10, "exp": now + 5}):
        r = client.get("/v1/scram/users", headers=bearer(**times))
        assert r.status_code == 401, times


def test_token_endpoint_rfc6749_edges(app_env) -> None:
    """RFC 6749 §5.2: a missing grant_type is invalid_request; a client that tried the Authorization
    header gets 401 with WWW-Authenticate whatever it sent there; an oversized form is refused
    before it is read whole."""
    client, _app, _clock, _ = app_env
    client.post(
        "/v1/oauth/clients",
        json={"client_id": "job", "client_secret": "job-secret-0123456789", "scopes": []},
        headers=ADMIN,
    )
    r = client.post("/oauth/token", data={"scope": "kafka"}, headers=basic("job", "job-secret-0123456789"))
    assert (r.status_code, r.json()["error"]) == (400, "invalid_request")
    for header in ("Digest abc", "Basic !!!not-base64", "Bearer x.y.z"):
        r = client.post("/oauth/token", data={"grant_type": "client_credentials"}, headers={"Authorization": header})
        assert (r.status_code, r.json()["error"]) == (401, "invalid_client")
        assert r.headers["WWW-Authenticate"].startswith("Basic"), header
    r = client.post(
        "/oauth/token",
        content=b"grant_type=client_credentials&pad=" + b"x" * 20_000,
        headers={"Content-Type": "application/x-www-form-urlencoded", **basic("job", "job-secret-0123456789")},
    )
    assert (r.status_code, r.json()["error"]) == (400, "invalid_request")
    assert "too large" in r.json()["error_description"]


def test_an_overlong_client_secret_is_a_clear_refusal_not_a_server_error(app_env) -> None:
    """passlib refuses secrets over 4096 characters with PasswordSizeError; a 5000-character
    client_secret (well within the 16 KiB form) made `POST /oauth/token` answer 500, uncounted,
    unaudited and undelayed, and `POST /v1/oauth/clients` answer 500 too."""
    client, _app, _clock, _ = app_env
    long_secret = "s" * 5000
    r = client.post(
        "/v1/oauth/clients", json={"client_id": "job", "client_secret": long_secret, "scopes": []}, headers=ADMIN
    )
    assert r.status_code == 400 and "client_secret" in r.json()["message"]
    client.post(
        "/v1/oauth/clients",
        json={"client_id": "job", "client_secret": "job-secret-0123456789", "scopes": []},
        headers=ADMIN,
    )
    for form, headers in (
        ({"grant_type": "client_credentials", "client_id": "job", "client_secret": long_secret}, {}),
        ({"grant_type": "client_credentials"}, basic("job", long_secret)),
        ({"grant_type": "client_credentials"}, basic("job", "job-secret-0123456789" + "x" * 5000)),
    ):
        r = client.post("/oauth/token", data=form, headers=headers)
        assert (r.status_code, r.json()["error"]) == (401, "invalid_client")
    r = client.post("/oauth/token", data={"grant_type": "client_credentials"},
                    headers=basic("job", "job-secret-0123456789"))
    assert r.status_code == 200


def test_delegation_token_endpoints(app_env) -> None:
    client, app, clock, _ = app_env
    for user in ("alice", "bob", "eve"):
        client.put(f"/v1/scram/users/{user}", json={"password": f"{user}-password"}, headers=ADMIN)
    alice, bob, eve = (basic(u, f"{u}-password") for u in ("alice", "bob", "eve"))
    r = client.post(
        "/v1/delegation-tokens", json={"renewers": ["User:bob"], "max_lifetime_ms": 3_600_000}, headers=alice
    )
    assert r.status_code == 201, r.text
    tok = r.json()
    assert tok["owner"] == "User:alice" and tok["renewers"] == ["User:bob"]
    assert tok["max_timestamp_ms"] - tok["issue_timestamp_ms"] == 3_600_000
    # the token authenticates through SCRAM with tokenauth=true as alice
    svc = app.state.credentials
    server = svc.server_mechanism("SCRAM-SHA-512", "127.0.0.1")
    scram = ScramClient(SCRAM_SHA_512, tok["token_id"], tok["hmac"], token_auth=True)
    result = server.step(scram.final_message(server.step(scram.first_message()).data))
    assert result.principal == Principal("User", "alice") and result.token_authenticated
    # describe
    assert [t["token_id"] for t in client.get("/v1/delegation-tokens", headers=bob).json()] == [
        tok["token_id"]
    ]
    assert "hmac" not in client.get("/v1/delegation-tokens", headers=alice).json()[0]
    assert client.get("/v1/delegation-tokens", headers=eve).json() == []
    grant(app, "User:eve", ResourceType.USER, "User:alice", Operation.DESCRIBE_TOKENS)
    assert len(client.get("/v1/delegation-tokens", params={"owner": "User:alice"}, headers=eve).json()) == 1
    assert client.get("/v1/delegation-tokens", params={"owner": "User:bob2"}, headers=eve).json() == []
    client.put("/v1/scram/users/frank", json={"password": "frank-password"}, headers=ADMIN)
    frank = basic("frank", "frank-password")
    assert client.get("/v1/delegation-tokens", headers=frank).json() == []
    grant(app, "User:frank", ResourceType.DELEGATION_TOKEN, tok["token_id"], Operation.DESCRIBE)
    assert [t["token_id"] for t in client.get("/v1/delegation-tokens", headers=frank).json()] == [
        tok["token_id"]
    ]
    # renew: renewer yes, eve no
    r = client.post(
        "/v1/delegation-tokens/renew", json={"hmac": tok["hmac"], "renew_period_ms": 60_000}, headers=bob
    )
    assert r.status_code == 200 and r.json()["expiry_timestamp_ms"] > tok["issue_timestamp_ms"]
    r = client.post("/v1/delegation-tokens/renew", json={"hmac": tok["hmac"]}, headers=eve)
    assert (r.status_code, r.json()["error_code"]) == (403, 40363)
    # creating for another owner needs CREATE_TOKENS on that user
    r = client.post("/v1/delegation-tokens", json={"owner": "User:alice"}, headers=eve)
    assert r.status_code == 403
    r = client.post("/v1/delegation-tokens", json={"renewers": ["Group:x"]}, headers=alice)
    assert (r.status_code, r.json()["error_code"]) == (400, 40067)
    # expire now: authentication fails once the expiry millisecond has passed
    r = client.post(
        "/v1/delegation-tokens/expire", json={"hmac": tok["hmac"], "expiry_period_ms": 0}, headers=alice
    )
    assert r.status_code == 200
    clock.now += timedelta(milliseconds=1)
    server = svc.server_mechanism("SCRAM-SHA-512", "127.0.0.1")
    scram = ScramClient(SCRAM_SHA_512, tok["token_id"], tok["hmac"], token_auth=True)
    assert (
        server.step(scram.final_message(server.step(scram.first_message()).data)).__class__.__name__
        == "Failure"
    )
    r = client.post("/v1/delegation-tokens/renew", json={"hmac": tok["hmac"]}, headers=alice)
    assert (r.status_code, r.json()["error_code"]) == (400, 40066)
    r = client.post("/v1/delegation-tokens/renew", json={"hmac": "bm90LWEtdG9rZW4="}, headers=alice)
    assert (r.status_code, r.json()["error_code"]) == (404, 40462)


def test_no_secret_in_logs_audit_or_database(
    app_env, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """A full run of every credential operation; none of the secrets it used appears anywhere."""
    caplog.set_level(logging.DEBUG)
    client, app, _, data_dir = app_env
    secrets = ["user-password-xyz", "client-secret-0123456789xyz", ADMIN_PW, DT_KEY]
    client.put("/v1/scram/users/carol", json={"password": secrets[0]}, headers=ADMIN)
    client.get("/v1/scram/users", headers=basic("carol", secrets[0]))
    client.get("/v1/scram/users", headers=basic("carol", "wrong-" + secrets[0]))
    client.post("/v1/oauth/clients", json={"client_id": "w", "client_secret": secrets[1]}, headers=ADMIN)
    access = client.post(
        "/oauth/token", data={"grant_type": "client_credentials"}, headers=basic("w", secrets[1])
    )
    secrets.append(access.json()["access_token"])
    client.get("/v1/scram/users", headers={"Authorization": f"Bearer {secrets[-1]}"})
    tok = client.post("/v1/delegation-tokens", json={}, headers=basic("carol", secrets[0])).json()
    secrets.append(tok["hmac"])
    client.post("/v1/delegation-tokens/renew", json={"hmac": tok["hmac"]}, headers=basic("carol", secrets[0]))
    client.post(
        "/v1/delegation-tokens/expire", json={"hmac": tok["hmac"]}, headers=basic("carol", secrets[0])
    )
    client.put("/v1/scram/users/dave", json={"password": "short-secret-pw", "iterations": 1}, headers=ADMIN)
    secrets.append("short-secret-pw")
    out, err = capfd.readouterr()
    haystacks = {
        "log": caplog.text,
        "stdout": out,
        "stderr": err,
        "repr": repr(app.state.credentials) + repr(app.state.authenticator),
    }
    for path in data_dir.rglob("*"):
        if path.is_file():
            haystacks[str(path)] = path.read_bytes().decode("latin-1")
    assert any("audit" in name for name in haystacks)
    audit_text = "".join(v for k, v in haystacks.items() if "audit" in k)
    assert "io.kgov.credential_change" in audit_text and "io.kgov.authentication" in audit_text
    for secret in secrets:
        for where, text in haystacks.items():
            assert secret not in text, f"a secret leaked into {where}"


def test_discovery_document_ignores_a_forged_host_header(tmp_path: Path) -> None:
    """Behind a caching proxy, a document built from the Host header lets one forged request point
    every client at the forger's token endpoint and keys. Unset `public_base_url` and a non-URL issuer:
    the document names the address the (real, uvicorn) server is bound to, whatever Host says."""
    import httpx

    from tests.support.server import serve_app

    settings = Settings(data_dir=tmp_path, admin={"password": ADMIN_PW})
    with serve_app(build_app(settings)) as url, httpx.Client(base_url=url, timeout=10) as http:
        for headers in ({}, {"Host": "evil.example"}, {"Host": "evil.example:443", "X-Forwarded-Host": "evil.example"}):
            conf = http.get("/.well-known/openid-configuration", headers=headers).json()
            assert conf["token_endpoint"] == f"{url}/oauth/token", headers
            assert conf["jwks_uri"] == f"{url}/.well-known/jwks.json"


@pytest.mark.parametrize(
    ("oauth", "base"),
    [
        ({"public_base_url": "https://kgov.example.com/"}, "https://kgov.example.com"),
        ({"public_base_url": "https://kgov.example.com/cp", "token_issuer": "https://x.example"},
         "https://kgov.example.com/cp"),
        ({"token_issuer": "https://issuer.example.com/kgov"}, "https://issuer.example.com/kgov"),
        ({"token_issuer": "kgov"}, "http://testserver"),  # TestClient's own server address
    ],
)
def test_discovery_document_uses_the_configured_base(tmp_path: Path, oauth: dict[str, str], base: str) -> None:
    settings = Settings(data_dir=tmp_path, admin={"password": ADMIN_PW}, oauth=oauth)
    with TestClient(build_app(settings)) as client:
        conf = client.get("/.well-known/openid-configuration", headers={"Host": "evil.example"}).json()
    assert conf["token_endpoint"] == f"{base}/oauth/token" and conf["jwks_uri"] == f"{base}/.well-known/jwks.json"
    assert conf["issuer"] == settings.oauth.token_issuer


def test_a_token_refusal_waits_the_failure_delay_after_the_body_however_slowly_it_came(tmp_path: Path) -> None:
    """The client's credentials end with the body (client_secret_post, or grant_type beside a Basic header):
    counted from the request's start, a body sent over longer than the delay used it up, and the answer's
    time showed the check's own (a known client id's PBKDF2 against an unknown one's). Counted from the
    body's last byte, every refusal (a wrong secret, an unknown client, a blocked source) takes the delay."""
    delay_s = 0.4
    settings = Settings(data_dir=tmp_path, admin={"password": ADMIN_PW},
                        sasl={"delegation_token_secret_key": DT_KEY, "failed_authentication_delay_ms": int(delay_s * 1000),
                              "max_failed_attempts_per_source": 2, "max_failed_attempts_per_address": 2})
    with serve_app(build_app(settings)) as base:
        created = httpx.post(f"{base}/v1/oauth/clients", auth=("admin", ADMIN_PW), timeout=10,
                             json={"client_id": "spark-job", "client_secret": "spark-secret-0123456789"})
        assert created.status_code == 201, created.text
        url = urlsplit(base)
        for client_id in ("spark-job", "no-such-client", "spark-job"):  # the third: the source is blocked
            body = f"grant_type=client_credentials&client_id={client_id}&client_secret=wrong-secret".encode()
            with socket.create_connection((url.hostname or "", url.port or 80), timeout=10) as sock:
                sock.sendall(b"POST /oauth/token HTTP/1.1\r\nHost: kgov\r\nConnection: close\r\n"
                             b"Content-Type: application/x-www-form-urlencoded\r\n"
                             b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:10])
                time.sleep(delay_s + 0.2)  # a slow body: longer than the whole delay
                sock.sendall(body[10:])
                last_byte = time.monotonic()
                answer = read_to_end(sock)
                waited = time.monotonic() - last_byte
            assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
            assert b'"invalid_client"' in answer
            assert waited >= delay_s - 0.05, (client_id, waited)


def test_created_token_answers_its_bearer_uncached(app_env) -> None:
    """The REST create answers the OAUTHBEARER form `kgov tokens create` prints, which logs in as the
    owner; the answer is never cached (it carries the token's secret twice)."""
    from sasl.delegation import parse_bearer
    from sasl.oauthbearer import build_client_initial_response

    client, app, _, _ = app_env
    client.put("/v1/scram/users/alice", json={"password": "alice-password"}, headers=ADMIN)
    r = client.post("/v1/delegation-tokens", json={}, headers=basic("alice", "alice-password"))
    assert r.status_code == 201, r.text
    assert r.headers["cache-control"] == "no-store"
    tok = r.json()
    parsed = parse_bearer(tok["bearer"])
    assert parsed.token_id == tok["token_id"] and base64.b64encode(parsed.hmac).decode() == tok["hmac"]
    server = app.state.credentials.server_mechanism("OAUTHBEARER", "127.0.0.1")
    result = server.step(build_client_initial_response(tok["bearer"]))
    assert result.principal == Principal("User", "alice") and result.token_authenticated


def test_token_endpoint_reads_basic_credentials_as_sent_one_guess_per_failure(app_env) -> None:
    """HTTP Basic is read as sent (Kafka's default and librdkafka): the form-decoded spelling of the
    secret is no second guess. Client ids and secrets are limited to characters form-urlencoding leaves
    alone, so clients that encode first (RFC 6749 §2.3.1) send the same value."""
    client, _app, _clock, _ = app_env
    r = client.post("/v1/oauth/clients",
                    json={"client_id": "job", "client_secret": "job-secret_0123.456789", "scopes": []}, headers=ADMIN)
    assert r.status_code in (200, 201)
    token = {"grant_type": "client_credentials"}
    assert client.post("/oauth/token", data=token, headers=basic("job", "job-secret_0123.456789")).status_code == 200
    # The same secret percent-encoded where encoding changes nothing: taken literally, so wrong.
    r = client.post("/oauth/token", data=token, headers=basic("job", "job%2Dsecret_0123.456789"))
    assert (r.status_code, r.json()["error"]) == (401, "invalid_client")
    r = client.post("/oauth/token", data=token, headers=basic("j%6Fb", "job-secret_0123.456789"))
    assert (r.status_code, r.json()["error"]) == (401, "invalid_client")
    for cid, secret in (("svc@team", "job-secret-0123456789"), ("svc", "secret+with/base64=="),
                        ("svc", "secret with spaces 0123")):
        r = client.post("/v1/oauth/clients", json={"client_id": cid, "client_secret": secret, "scopes": []},
                        headers=ADMIN)
        assert r.status_code == 400 and "letters, digits" in r.json()["message"], (cid, r.json())
