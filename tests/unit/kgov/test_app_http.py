"""The assembled control plane's HTTP surface: body size cap, errors, what is open without credentials."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from pydantic import ValidationError

from kgov.app import build_app
from kgov.settings import Settings, load_settings

LIMIT = 64 * 1024


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("KGOV_SASL__FAILED_AUTHENTICATION_DELAY_MS", "0")  # many refused requests below
    settings = load_settings(data_dir=tmp_path / "data", dev_mode=True, http_request_max_bytes=LIMIT)
    with TestClient(build_app(settings)) as c:
        yield c


@pytest.mark.parametrize("path", ["/subjects/s/versions", "/oauth/token", "/v1/data/kafka/authz/allow"])
def test_declared_oversized_body_is_refused_before_authentication(client: TestClient, path: str) -> None:
    r = client.post(path, content=b"x" * (LIMIT + 1), headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert r.json() == {"error_code": 413, "message": f"Request body larger than {LIMIT} bytes (http_request_max_bytes)"}


def test_streamed_oversized_body_is_refused(client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(LIMIT // 1024 + 2):
            yield b"x" * 1024

    # the token endpoint reads its (form) body with no credentials at all
    r = client.post("/oauth/token", content=chunks(),
                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 413
    assert r.json()["error_code"] == 413


def test_body_under_the_cap_reaches_the_route(client: TestClient) -> None:
    r = client.post("/subjects/s/versions", content=b"{}", headers={"Content-Type": "application/json"})
    assert r.status_code == 401


def test_swagger_ui_only_in_dev_mode(tmp_path: Path, client: TestClient) -> None:
    docs = client.get("/docs")
    assert docs.status_code == 200
    # Its scripts come from a CDN: the API's "load nothing" policy would leave the page blank.
    assert "content-security-policy" not in docs.headers
    assert docs.headers["x-content-type-options"] == "nosniff"
    assert "frame-ancestors 'none'" in client.get("/openapi.json").headers["content-security-policy"]
    settings = load_settings(data_dir=tmp_path / "prod", dev_mode=False)
    with TestClient(build_app(settings)) as prod:
        assert prod.get("/docs").status_code == 404
        assert prod.get("/openapi.json").status_code == 200


def test_unauthenticated_surface_is_only_operations_and_token_discovery(client: TestClient) -> None:
    """Every documented route answers 401/403/400 without credentials, except these few."""
    import re

    open_routes = set()
    for path, ops in client.get("/openapi.json").json()["paths"].items():
        for method in ops:
            r = client.request(method.upper(), re.sub(r"\{[^}]+\}", "x", path), json={})
            if r.status_code < 400:
                open_routes.add(f"{method.upper()} {path}")
    assert open_routes == {"GET /health", "GET /.well-known/openid-configuration",
                           "GET /.well-known/jwks.json"}
    health = client.get("/health")
    assert health.json() == {"status": "UP"}


# Routes with a body that answer callers without credentials: the token endpoint (client credentials in
# the form) and the decision API (listed networks).
_OPEN_BODY_ROUTES = {"/oauth/token", "/v1/data/kafka/authz/allow", "/v1/data/kafka/authz/batch"}


def _body_routes(client: TestClient) -> list[tuple[str, str]]:
    import re

    return [(method.upper(), re.sub(r"\{[^}]+\}", "x", path))
            for path, ops in client.get("/openapi.json").json()["paths"].items() if path not in _OPEN_BODY_ROUTES
            for method, op in ops.items() if method in ("post", "put", "delete") and "requestBody" in op]


def test_a_body_is_not_read_before_its_caller_is_authenticated(client: TestClient) -> None:
    """FastAPI parses a declared body before the dependencies that authenticate: without credentials,
    a malformed body would be parsed (on the event loop, up to http_request_max_bytes) and answered 400."""
    routes = _body_routes(client)
    assert ("POST", "/v3/clusters/x/acls:batch") in routes and ("PUT", "/v1/quotas") in routes
    for method, path in routes:
        r = client.request(method, path, content=b'{"data": [' * 50, headers={"Content-Type": "application/json"})
        assert (r.status_code, r.json()) == (401, {"error_code": 40101, "message": "Unauthorized"}), (method, path)


class _CountingAuthenticator:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    async def authenticate(self, authorization: str | None, client_address: str) -> Any:
        self.calls += 1
        return await self.inner.authenticate(authorization, client_address)


def test_credentials_are_checked_once_per_request(tmp_path: Path) -> None:
    """Checked before the body and asked for again by the route: a second check would count and audit one
    failure twice (locking a source out at half the attempts) and pay a password's PBKDF2 twice."""
    settings = load_settings(data_dir=tmp_path / "data", dev_mode=True, admin={"password": "admin-password-1"},
                             sasl={"failed_authentication_delay_ms": 0})
    with TestClient(build_app(settings)) as c:
        counting = c.app.state.authenticator = _CountingAuthenticator(c.app.state.authenticator)  # type: ignore[attr-defined]
        admin = ("admin", "admin-password-1")
        ok = c.put("/v1/quotas", json={"entity": {"user": "alice"}, "set": {"producer_byte_rate": 1024}}, auth=admin)
        assert ok.status_code == 200 and counting.calls == 1
        assert c.post("/v3/clusters/x/acls", json={}, auth=("admin", "wrong")).status_code == 401
        assert counting.calls == 2
        assert c.get("/v1/quotas", auth=admin).status_code == 200 and counting.calls == 3


def test_unexpected_errors_say_nothing_to_the_client(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    """Only an incident id, which names the log line that holds the detail; the path is logged quoted, so
    a percent-encoded control character in it (a line break, a terminal escape) cannot forge a line."""
    import re

    @client.app.get("/boom/{name}")  # type: ignore[attr-defined, untyped-decorator]
    def boom(name: str) -> None:
        raise RuntimeError("SELECT secret FROM sasl_scram_credentials")

    with TestClient(client.app, raise_server_exceptions=False) as c:  # type: ignore[arg-type]
        answers = [c.get("/boom/x%1B[2KERROR forged") for _ in range(2)]
    incidents = []
    for r in answers:
        assert r.status_code == 500
        assert r.json()["error_code"] == 50001 and "SELECT" not in r.text and "sasl" not in r.text
        found = re.fullmatch(r"Internal server error \(incident ([0-9a-f]{16})\)", r.json()["message"])
        assert found is not None, r.json()
        incidents.append(found.group(1))
    assert incidents[0] != incidents[1]
    logged = [rec for rec in caplog.records if rec.levelname == "ERROR"]
    assert [rec.getMessage() for rec in logged] == [
        f"unhandled error on GET '/boom/x\\x1b[2KERROR forged' (incident {i})" for i in incidents]
    assert all(rec.exc_info and "sasl_scram_credentials" in str(rec.exc_info[1]) for rec in logged)


def test_unexpected_errors_carry_the_security_headers(client: TestClient) -> None:
    # Starlette answers them from ServerErrorMiddleware, outside every middleware the app adds
    # (SecurityHeaders included): the handler must add the headers itself.
    @client.app.get("/boom")  # type: ignore[attr-defined, untyped-decorator]
    def boom() -> None:
        raise RuntimeError("boom")

    with TestClient(client.app, raise_server_exceptions=False, base_url="https://kgov") as c:  # type: ignore[arg-type]
        r = c.get("/boom")
    assert r.status_code == 500
    assert r.headers.get("cache-control") == "no-store", r.headers
    assert r.headers.get("x-content-type-options") == "nosniff"
    assert r.headers.get("content-security-policy") == "default-src 'none'; frame-ancestors 'none'"
    assert r.headers.get("strict-transport-security") == "max-age=31536000"


def test_unsealed_signing_keys_are_warned_about_outside_dev_mode(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    build_app(load_settings(data_dir=tmp_path / "a", dev_mode=False)).state.authorizer.close()
    assert "KGOV_OAUTH__SIGNING_KEY_SECRET" in caplog.text
    caplog.clear()
    sealed = load_settings(data_dir=tmp_path / "b", dev_mode=False,
                           oauth={"signing_key_secret": "0123456789abcdef-long"})
    build_app(sealed).state.authorizer.close()
    assert "SIGNING_KEY_SECRET" not in caplog.text and "0123456789abcdef-long" not in caplog.text


def test_served_responses_do_not_name_the_server(tmp_path: Path) -> None:
    import httpx

    from tests.support.server import serve_app

    app = build_app(load_settings(data_dir=tmp_path / "d", dev_mode=True))
    with serve_app(app) as url:
        r = httpx.get(f"{url}/health", timeout=10)
    assert r.status_code == 200 and "server" not in r.headers


def _seen_by_app(**options: Any) -> dict[str, str]:
    import httpx

    from kgov.up import control_plane
    from tests.support.ports import free_port

    app = FastAPI()

    @app.get("/who")
    def who(request: Request) -> dict[str, str]:
        return {"client": request.client.host if request.client else "", "scheme": request.url.scheme}

    port = free_port()
    with control_plane(app, "127.0.0.1", port, **options):
        seen: dict[str, str] = httpx.get(f"http://127.0.0.1:{port}/who", timeout=10,
                                         headers={"X-Forwarded-For": "10.0.0.5", "X-Forwarded-Proto": "https"}).json()
    return seen


def test_forwarded_headers_are_not_believed_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Otherwise any local process picks the address ACL host rules, login limits and the audit see."""
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "*")  # uvicorn's own variable is not a way in either
    assert _seen_by_app() == {"client": "127.0.0.1", "scheme": "http"}


def test_forwarded_headers_from_a_listed_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORWARDED_ALLOW_IPS", raising=False)
    assert _seen_by_app(forwarded_allow_ips=["127.0.0.0/8"]) == {"client": "10.0.0.5", "scheme": "https"}


@pytest.mark.parametrize("value", [["*"], ["not-an-address"], ["10.0.0.0/8", " * "]])
def test_forwarded_allow_ips_are_addresses(value: list[str]) -> None:
    with pytest.raises(ValidationError, match="http_forwarded_allow_ips"):
        Settings(http_forwarded_allow_ips=value)


def test_a_control_plane_no_one_can_log_in_to_says_how_to_get_a_first_user(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("KGOV_ADMIN__PASSWORD", raising=False)
    with TestClient(build_app(load_settings(data_dir=tmp_path / "empty"))):  # closes what it opened
        pass
    warnings = [r.getMessage() for r in caplog.records if "no one can log in" in r.getMessage()]
    assert warnings and "KGOV_ADMIN__PASSWORD" in warnings[0] and "kgov users add" in warnings[0]
    caplog.clear()
    monkeypatch.setenv("KGOV_ADMIN__PASSWORD", "a-long-admin-password-1")
    with TestClient(build_app(load_settings(data_dir=tmp_path / "with-admin"))):
        pass
    assert not [r for r in caplog.records if "no one can log in" in r.getMessage()]


def test_a_proxy_network_with_host_bits_is_kept_as_its_network() -> None:
    # uvicorn reads "10.0.0.7/24" strictly: not a network, so a name that no peer matches.
    assert Settings(http_forwarded_allow_ips=["10.0.0.7/24", " 192.0.2.9 "]).http_forwarded_allow_ips == [
        "10.0.0.0/24", "192.0.2.9"]


@pytest.mark.parametrize(("value", "normalised"), [
    ([], []),
    (["https://Kafka.Example.com", "https://kafka.example.com:443/", "http://10.0.0.7:8080"],
     ["https://kafka.example.com", "https://kafka.example.com", "http://10.0.0.7:8080"]),
    (["https://[2001:DB8::1]:8443"], ["https://[2001:db8::1]:8443"]),
])
def test_public_origins_are_origins_as_browsers_send_them(value: list[str], normalised: list[str]) -> None:
    assert Settings(http_public_origins=value).http_public_origins == normalised


@pytest.mark.parametrize("value", ["*", "null", "https://*.example.com", "kafka.example.com", "ftp://kafka.example.com",
                                   "https://kafka.example.com/ui", "https://user@kafka.example.com", "https://a:99999"])
def test_public_origins_refuse_what_is_no_origin(value: str) -> None:
    with pytest.raises(ValidationError, match="http_public_origins"):
        Settings(http_public_origins=[value])


def _bind_role(tmp_path: Path, headers: dict[str, str], **settings: Any) -> int:
    """A role binding (a POST without a body: no CORS preflight) sent as a browser page would, to a server
    that sees Host `kgov-internal:8080` (a proxy that rewrites Host in front of it)."""
    app = build_app(load_settings(data_dir=tmp_path / "data", admin={"password": "correct-horse-battery"},
                                  sasl={"failed_authentication_delay_ms": 0}, **settings))
    with TestClient(app, base_url="http://kgov-internal:8080") as c:
        r = c.post("/security/1.0/principals/User:mallory/roles/Operator", auth=("admin", "correct-horse-battery"),
                   headers=headers)
    return r.status_code


PUBLIC_PAGE = {"Origin": "https://kgov.example.com", "Sec-Fetch-Site": "same-origin"}


def test_a_page_of_the_public_address_behind_a_host_rewriting_proxy_is_refused_by_default(tmp_path: Path) -> None:
    assert _bind_role(tmp_path, PUBLIC_PAGE) == 403  # strict: only the Host this server sees is this site
    assert _bind_role(tmp_path, {"Origin": "http://kgov-internal:8080"}) == 204


@pytest.mark.parametrize(("headers", "status"), [
    (PUBLIC_PAGE, 204),
    ({"Origin": "https://KGOV.example.com:443"}, 204),  # as a browser would never write it, but the same origin
    ({"Origin": "http://kgov.example.com"}, 403),  # another scheme: another origin
    ({"Origin": "https://kgov.example.com:8443"}, 403),  # another port
    ({"Origin": "https://evil.example"}, 403),
    ({"Origin": "null"}, 403),
    ({"Origin": "https://kgov.example.com", "Sec-Fetch-Site": "cross-site"}, 403),  # the browser's own word
    ({}, 204),  # an API client
])
def test_listed_public_origins_are_this_site(tmp_path: Path, headers: dict[str, str], status: int) -> None:
    assert _bind_role(tmp_path, headers, http_public_origins=["https://kgov.example.com"]) == status


def test_a_forwarded_request_from_an_unlisted_peer_is_warned_about_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Behind a proxy missing from http_forwarded_allow_ips every client has the proxy's address, and a
    few bad passwords from any of them refuse every login through it, the admin's included."""
    settings = load_settings(data_dir=tmp_path / "data", dev_mode=True, http_forwarded_allow_ips=["10.0.1.0/24"])
    app = build_app(settings)

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if "X-Forwarded-For" in r.getMessage()]

    with TestClient(app, client=("10.0.1.9", 4000)) as listed, TestClient(app, client=("10.0.0.2", 4000)) as other:
        assert listed.get("/health", headers={"X-Forwarded-For": "192.0.2.1"}).status_code == 200
        assert other.get("/health").status_code == 200
        assert warnings() == []
        for _ in range(2):
            assert other.get("/health", headers={"X-Forwarded-For": "192.0.2.1"}).status_code == 200
    assert len(warnings()) == 1
    assert warnings()[0].startswith("a request from 10.0.0.2 carried X-Forwarded-For, and 10.0.0.2 is not in "
                                    "http_forwarded_allow_ips")
