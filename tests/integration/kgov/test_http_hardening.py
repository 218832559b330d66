"""The control plane's HTTP surface as a whole, through the real server (uvicorn as `kgov up` and `kgov serve`
run it) and the assembled app over SQLite: what every answer carries, and what a request may cost before it
is authenticated."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from kgov import http_server
from kgov.app import build_app
from kgov.http_server import MAX_REQUEST_HEAD_BYTES
from kgov.settings import Settings
from tests.support.server import serve_app

ADMIN = ("admin", "correct-horse-battery")
AVRO = json.dumps({"type": "record", "name": "r", "fields": [{"name": "a", "type": "int"}]})


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("kgov"), admin={"user": ADMIN[0], "password": ADMIN[1]},
                        sasl={"failed_authentication_delay_ms": 0, "delegation_token_secret_key": "k" * 32})
    with serve_app(build_app(settings)) as url:
        yield url


@pytest.fixture
def admin(base: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base, auth=ADMIN, timeout=10) as client:
        yield client


def _raw_exchange(base: str, head_start: bytes, filler: int) -> bytes:
    """Sends a request head that never ends (no blank line) with `filler` bytes in one header; returns what
    the server answers before it closes (a server that keeps reading would answer nothing: timeout)."""
    url = urlsplit(base)
    with socket.create_connection((url.hostname or "", url.port or 80), timeout=10) as sock:
        sock.sendall(head_start + b"X-Filler: ")
        try:
            for _ in range(filler // 65536):
                sock.sendall(b"a" * 65536)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused midway: the answer was sent first
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
        return answer


def test_an_endless_request_head_is_answered_431_and_the_connection_closed(base: str) -> None:
    # Before any authentication: with uvicorn's httptools parser alone, the server buffered every byte of
    # a head that never ended (one connection could take all memory) and never answered.
    answer = _raw_exchange(base, b"GET /health HTTP/1.1\r\nHost: kgov\r\n", 4 * MAX_REQUEST_HEAD_BYTES)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b"connection: close" in answer.lower()


def test_a_head_sent_a_byte_at_a_time_is_cut_off(base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Slowloris: bytes that keep coming, each before any idle timeout, would hold the connection (and
    a file descriptor) for ever; the whole head must arrive within REQUEST_HEAD_TIMEOUT_S."""
    monkeypatch.setattr(http_server, "REQUEST_HEAD_TIMEOUT_S", 0.5)
    url = urlsplit(base)
    with socket.create_connection((url.hostname or "", url.port or 80), timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: kgov\r\n")
        answer = b""
        try:
            for _ in range(40):  # 4 s of a header byte every 0.1 s
                sock.sendall(b"X")
                time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    # An ordinary request right after, on a new connection, is answered.
    assert httpx.get(f"{base}/health").status_code == 200


def test_a_connection_that_never_sends_a_byte_is_cut_off(base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """uvicorn arms no timer before a connection's first byte: connections opened and left silent were
    held for ever, as the trickled ones were."""
    monkeypatch.setattr(http_server, "REQUEST_HEAD_TIMEOUT_S", 0.5)
    url = urlsplit(base)
    with socket.create_connection((url.hostname or "", url.port or 80), timeout=10) as sock:
        answer = b""
        while chunk := sock.recv(65536):  # a server that holds the connection: socket.timeout, a failure
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]


def test_the_trailers_of_a_chunked_body_count_against_the_head_limit(base: str) -> None:
    # Trailer fields are parsed, and buffered, as header fields are, but after the head was complete:
    # an endless one grew the server's memory without limit (200 MiB measured for 200 MiB sent).
    head = b"POST /health HTTP/1.1\r\nHost: kgov\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n"
    answer = _raw_exchange(base, head, 8 * MAX_REQUEST_HEAD_BYTES)
    assert b"HTTP/1.1 431 " in answer, answer[:400]


def test_a_body_of_many_small_chunks_is_not_taken_for_a_long_head(base: str, admin: httpx.Client) -> None:
    # Their framing (size lines, CRLFs) is not body, 100 KB of it here; reads that carry body bytes are
    # not counted.
    body = json.dumps({"schema": json.dumps({"type": "record", "name": "r", "doc": "x" * 40_000,
                                             "fields": [{"name": "a", "type": "int"}]})}).encode()
    r = admin.post("/subjects/chunked-value/versions", content=(body[i:i + 2] for i in range(0, len(body), 2)),
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text


def test_a_long_url_counts_against_the_head_limit_too(base: str) -> None:
    answer = _raw_exchange(base, b"GET /" + b"a" * (2 * MAX_REQUEST_HEAD_BYTES) + b" HTTP/1.1\r\n", 0)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]


def test_large_but_allowed_heads_and_large_bodies_still_pass(base: str, admin: httpx.Client) -> None:
    # A 16 KiB bearer token (the validator's own maximum) fits; it is refused as a token, not as a head.
    token = "a" * (16 * 1024)
    assert httpx.get(f"{base}/subjects", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    # A body far larger than the head limit, sent with a small head, is read whole.
    schema = json.dumps({"type": "record", "name": "big", "doc": "x" * (4 * MAX_REQUEST_HEAD_BYTES),
                         "fields": [{"name": "a", "type": "int"}]})
    r = admin.post("/subjects/big-value/versions", json={"schema": schema})
    assert r.status_code == 200, r.text
    # Keep-alive: a second request on the same connection is counted from its own start.
    assert admin.get("/subjects/big-value/versions").json() == [1]


def _assert_hardened(response: httpx.Response) -> None:
    assert response.headers.get("x-content-type-options") == "nosniff", response.headers
    assert response.headers.get("cache-control") == "no-store", response.headers
    assert "frame-ancestors 'none'" in response.headers.get("content-security-policy", "")


def test_every_kind_of_answer_carries_the_security_headers(base: str, admin: httpx.Client) -> None:
    created = admin.post("/v1/delegation-tokens", json={})
    assert created.status_code == 201 and "hmac" in created.json()
    _assert_hardened(created)  # a secret: no cache may keep it
    _assert_hardened(admin.put("/v1/scram/users/carol", json={"password": "carol-password"}))
    _assert_hardened(httpx.get(f"{base}/v3/clusters"))  # 401
    _assert_hardened(httpx.get(f"{base}/no/such/route"))  # 404
    _assert_hardened(admin.get("/health"))
    too_large = admin.post("/subjects/x/versions", content=b"{" + b" " * (9 * 1024 * 1024) + b"}",
                           headers={"Content-Type": "application/json"})
    assert too_large.status_code == 413
    _assert_hardened(too_large)
    # The registry's fast path (below FastAPI) answers a repeat of a schema-by-id request.
    schema_id = admin.post("/subjects/h-value/versions", json={"schema": AVRO}).json()["id"]
    for _ in range(2):
        _assert_hardened(admin.get(f"/schemas/ids/{schema_id}"))


def test_the_public_key_set_keeps_its_own_caching_and_nothing_opens_cors(base: str) -> None:
    jwks = httpx.get(f"{base}/.well-known/jwks.json")
    assert jwks.headers["cache-control"] == "public, max-age=300"
    assert jwks.headers["x-content-type-options"] == "nosniff"
    preflight = httpx.options(f"{base}/subjects", headers={"Origin": "https://elsewhere.example",
                                                           "Access-Control-Request-Method": "GET"})
    assert "access-control-allow-origin" not in preflight.headers
    basic = "Basic " + base64.b64encode(b"admin:correct-horse-battery").decode()
    answer = httpx.get(f"{base}/subjects", headers={"Origin": "https://elsewhere.example", "Authorization": basic})
    assert answer.status_code == 200
    assert "access-control-allow-origin" not in answer.headers


def test_a_browser_on_another_site_cannot_change_anything_with_cached_credentials(base: str) -> None:
    """Browsers keep Basic credentials typed at the prompt our 401 challenge raises, and attach them to
    requests other sites make: a POST without a body (the role binding), or a body without Content-Type
    (the registry reads it as JSON), needs no CORS preflight. Browsers say where such a request comes
    from (Origin, Sec-Fetch-Site); API clients do not."""
    basic = "Basic " + base64.b64encode(b"admin:correct-horse-battery").decode()
    bind = f"{base}/security/1.0/principals/User:mallory/roles/SystemAdmin"
    acl = {"resource_type": "TOPIC", "resource_name": "*", "pattern_type": "LITERAL", "principal": "User:mallory",
           "host": "*", "operation": "ALL", "permission": "ALLOW"}
    for browser in ({"Origin": "https://evil.example"}, {"Origin": "null"},
                    {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"}):
        r = httpx.post(bind, headers={"Authorization": basic, **browser})
        assert (r.status_code, r.json()["error_code"]) == (403, 40301), (browser, r.text)
        r = httpx.post(f"{base}/v3/clusters/kgov-cluster/acls", content=json.dumps(acl),
                       headers={"Authorization": basic, **browser})
        assert r.status_code == 403, (browser, r.text)
        r = httpx.post(f"{base}/subjects/csrf-value/versions", content=json.dumps({"schema": AVRO}),
                       headers={"Authorization": basic, **browser})
        assert (r.status_code, r.json()["error_code"]) == (403, 40301), (browser, r.text)
    with httpx.Client(base_url=base, auth=ADMIN) as admin:
        assert admin.get("/security/1.0/lookup/principal/User:mallory/resources").json() == {}
        assert admin.get("/v3/clusters/kgov-cluster/acls", params={"principal": "User:mallory"}).json()["data"] == []
        assert admin.get("/subjects").json().count("csrf-value") == 0
        # Reading stays open to any origin (the browser keeps the answer from the other site), and the
        # page served by this host itself (dev-mode Swagger UI) may change things.
        assert admin.get("/subjects", headers={"Origin": "https://evil.example"}).status_code == 200
        own = admin.post("/security/1.0/principals/User:mallory/roles/Operator",
                         headers={"Origin": base, "Sec-Fetch-Site": "same-origin"})
        assert own.status_code == 204, own.text
        assert admin.delete("/security/1.0/principals/User:mallory/roles/Operator").status_code == 204
