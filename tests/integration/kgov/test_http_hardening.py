"""The control plane's HTTP surface as a whole, through the real server (uvicorn as `kgov up` and `kgov serve`
run it) and the assembled app over SQLite: what every answer carries, and what a request may cost before it
is authenticated (with routes of a small app for the time a route takes around reading a body)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import FastAPI, Request, Response

from authz.http import PEER_SCOPE_KEY
from kgov import http_server
from kgov.app import SecurityHeaders, build_app
from kgov.http_server import MAX_REQUEST_HEAD_BYTES
from kgov.settings import Settings
from tests.support.ports import free_port, wait_for_port
from tests.support.raw_http import read_to_end
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
        return read_to_end(sock)


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
        try:
            for _ in range(40):  # 4 s of a header byte every 0.1 s
                sock.sendall(b"X")
                time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = read_to_end(sock)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    # An ordinary request right after, on a new connection, is answered.
    assert httpx.get(f"{base}/health").status_code == 200


def test_a_connection_that_never_sends_a_byte_is_cut_off(base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """uvicorn arms no timer before a connection's first byte: connections opened and left silent were
    held for ever, as the trickled ones were."""
    monkeypatch.setattr(http_server, "REQUEST_HEAD_TIMEOUT_S", 0.5)
    url = urlsplit(base)
    with socket.create_connection((url.hostname or "", url.port or 80), timeout=10) as sock:
        answer = read_to_end(sock)
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


# A request body's reading time (http_server.request_body_deadline_s): bodies are read before any
# authentication, so a client trickling one, or sending none after its head, held its connection (and a
# file descriptor) for ever.
SLOW_ROUTE_S = 2.0  # a route's own time, past the shortened deadlines below


@pytest.fixture(scope="module")
def slow_routes() -> Iterator[str]:
    """Routes that take their time around reading the body, which must not count against it."""
    app = FastAPI()

    @app.post("/read-then-work")
    async def read_then_work(request: Request) -> int:
        body = await request.body()
        await asyncio.sleep(SLOW_ROUTE_S)
        return len(body)

    @app.post("/work-then-read")
    async def work_then_read(request: Request) -> int:
        await asyncio.sleep(SLOW_ROUTE_S)  # uvicorn pauses reading once 64 KiB wait for the route
        return len(await request.body())

    with serve_app(app) as url:
        yield url


@pytest.fixture
def short_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Half a second for any body of a few KB."""
    monkeypatch.setattr(http_server, "REQUEST_BODY_GRACE_S", 0.5)
    monkeypatch.setattr(http_server, "REQUEST_BODY_MIN_BYTES_PER_S", 10**7)


def _connect(base: str) -> socket.socket:
    url = urlsplit(base)
    return socket.create_connection((url.hostname or "", url.port or 80), timeout=10)


def _post_head(path: str, framing: bytes, content_type: bytes = b"application/json") -> bytes:
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: kgov\r\nContent-Type: " + content_type + b"\r\n"
            + framing + b"\r\n")


FORM = b"application/x-www-form-urlencoded"
BASIC = b"Authorization: Basic " + base64.b64encode(":".join(ADMIN).encode()) + b"\r\n"


def test_a_body_sent_a_byte_at_a_time_is_cut_off(base: str, short_deadline: None,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    with _connect(base) as sock:
        sock.sendall(_post_head("/oauth/token", b"Content-Length: 1000\r\n", FORM))
        try:
            for _ in range(40):  # 4 s of a body byte every 0.1 s
                sock.sendall(b"x")
                time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            pass  # cut off midway: the answer was sent first
        answer = read_to_end(sock)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b"connection: close" in answer.lower()
    # The next request is answered after the cut-off route ran on (its body read failed): a client gone
    # is no server error (a 500 with a traceback in the log, from the app and uvicorn, for each one).
    assert httpx.get(f"{base}/health").status_code == 200
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


@pytest.mark.parametrize("framing", [b"Content-Length: 100\r\n", b"Transfer-Encoding: chunked\r\n"])
@pytest.mark.parametrize(("path", "content_type", "credentials"), [
    ("/oauth/token", FORM, b""),  # the client's credentials are in the body
    ("/subjects/s-value/versions", b"application/json", BASIC),
])
def test_a_body_that_never_comes_is_cut_off(base: str, short_deadline: None, framing: bytes, path: str,
                                            content_type: bytes, credentials: bytes) -> None:
    with _connect(base) as sock:
        sock.sendall(_post_head(path, framing + credentials, content_type))
        answer = read_to_end(sock)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]


def test_after_an_answer_given_before_the_body_the_connection_is_closed_without_another(
        base: str, short_deadline: None) -> None:
    """Without credentials the registry answers 401 before reading the body; the rest of the body is
    still read (to find the next request), and every byte of it restarted uvicorn's keep-alive timer:
    trickled, it held the connection for ever."""
    with _connect(base) as sock:
        sock.sendall(_post_head("/subjects/s-value/versions", b"Content-Length: 1000\r\n") + b"{")
        answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 401 "), answer[:300]
        cut_off = False
        try:
            for _ in range(40):  # 8 s of a body byte every 0.2 s (uvicorn's keep-alive timeout: 5 s)
                sock.sendall(b" ")
                time.sleep(0.2)
        except (BrokenPipeError, ConnectionResetError):
            cut_off = True
        assert cut_off
        assert b"HTTP/1.1" not in read_to_end(sock)


def test_a_large_schema_at_a_rate_above_the_minimum_gets_time_for_its_length(
        base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Close to registry.max_body_bytes (2 MiB), sent over about 2.5 s at some 800 KiB/s: past the grace
    alone (1 s), within the grace plus its length at the minimum rate (1 + 4 s)."""
    monkeypatch.setattr(http_server, "REQUEST_BODY_GRACE_S", 1.0)
    monkeypatch.setattr(http_server, "REQUEST_BODY_MIN_BYTES_PER_S", 512 * 1024)
    schema = json.dumps({"type": "record", "name": "large", "doc": "x" * (2 * 1024 * 1024 - 4096),
                         "fields": [{"name": "a", "type": "int"}]})
    body = json.dumps({"schema": schema}).encode()
    piece = 64 * 1024

    def paced() -> Iterator[bytes]:
        for start in range(0, len(body), piece):
            yield body[start:start + piece]
            time.sleep(0.08)

    with httpx.Client(base_url=base, auth=ADMIN, timeout=30) as admin:
        r = admin.post("/subjects/large-value/versions", content=paced(),
                       headers={"Content-Type": "application/json", "Content-Length": str(len(body))})
    assert r.status_code == 200, r.text[:300]


def test_the_time_a_route_takes_after_the_body_is_not_counted(slow_routes: str, short_deadline: None) -> None:
    r = httpx.post(f"{slow_routes}/read-then-work", content=b"x" * 1000, timeout=10)
    assert (r.status_code, r.json()) == (200, 1000)


def test_the_time_a_route_leaves_the_body_unread_is_not_counted(slow_routes: str, short_deadline: None) -> None:
    # 1 MiB: uvicorn buffers 64 KiB and stops reading until the route asks for the body, 2 s later.
    r = httpx.post(f"{slow_routes}/work-then-read", content=b"x" * (1024 * 1024), timeout=10)
    assert (r.status_code, r.json()) == (200, 1024 * 1024)


def test_the_wait_for_a_100_continue_is_not_counted(slow_routes: str, short_deadline: None) -> None:
    # The client sends its body only once told to, when the route first asks for it (2 s later).
    with _connect(slow_routes) as sock:
        sock.sendall(_post_head("/work-then-read",
                                b"Content-Length: 5\r\nExpect: 100-continue\r\nConnection: close\r\n"))
        interim = sock.recv(65536)
        assert interim.startswith(b"HTTP/1.1 100 "), interim[:200]
        sock.sendall(b"hello")
        answer = read_to_end(sock)
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"\r\n\r\n5"), answer[:300]


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


# Answers a client does not take (http_server.answer_write_deadline_s): they wait in the server's write
# buffer, memory and connection held for as long as the client pleases.
LARGE_ANSWER = 16 * 1024 * 1024  # past what the kernel's socket buffers hold on loopback (tcp_wmem: 4 MiB)


@pytest.fixture(scope="module")
def large_answers() -> Iterator[str]:
    app = FastAPI()

    @app.get("/large")
    def large(mib: int = 16) -> Response:
        return Response(b"x" * (mib * 1024 * 1024), media_type="application/octet-stream")

    @app.get("/small")
    def small() -> int:
        return 1

    with serve_app(app) as url:
        yield url


@pytest.fixture
def short_write_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """2.5 s plus a 16 MiB answer at 64 MiB/s: 2.75 s."""
    monkeypatch.setattr(http_server, "ANSWER_WRITE_GRACE_S", 2.5)
    monkeypatch.setattr(http_server, "ANSWER_MIN_BYTES_PER_S", 64 * 1024 * 1024)


def _non_reader(base: str) -> socket.socket:
    """A client with a tiny receive buffer, which will not read until told to."""
    url = urlsplit(base)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect((url.hostname or "", url.port or 80))
    return sock


@pytest.mark.parametrize(("requests", "answer_bytes"), [
    (b"GET /large HTTP/1.1\r\nHost: kgov\r\n\r\n", LARGE_ANSWER),
    (b"GET /large?mib=1 HTTP/1.1\r\nHost: kgov\r\n\r\n" * 24, 24 * 1024 * 1024),  # pipelined
])
def test_a_client_that_does_not_read_its_answers_is_dropped(
        large_answers: str, short_write_deadline: None, requests: bytes, answer_bytes: int,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="kgov")
    with _non_reader(large_answers) as sock:
        sock.sendall(requests)
        time.sleep(0.3)
        # Meanwhile others are served, while the connection is still held.
        assert httpx.get(f"{large_answers}/small", timeout=5).json() == 1
        assert not [r for r in caplog.records if "dropped the HTTP connection" in r.getMessage()]
        # Until the server has dropped it (2.75 s after it stopped writing): a fixed sleep left 1.25 s to a
        # loaded machine, after which the client's reading would have taken the answer before any drop.
        waited_until = time.monotonic() + 30.0
        while (not any("dropped the HTTP connection" in r.getMessage() for r in caplog.records)
               and time.monotonic() < waited_until):
            time.sleep(0.05)
        received = read_to_end(sock)  # the server's abort: an end (or a reset), not the socket's timeout
    assert answer_bytes > 0 and len(received) < answer_bytes
    dropped = [r.getMessage() for r in caplog.records if "dropped the HTTP connection" in r.getMessage()]
    assert len(dropped) == 1, dropped
    assert "127.0.0.1:" in dropped[0]


def test_a_client_that_reads_its_large_answer_gets_all_of_it(large_answers: str, short_write_deadline: None) -> None:
    # Its buffer fills too (the answer is handed over at once), but it takes the bytes in time.
    r = httpx.get(f"{large_answers}/large", timeout=10)
    assert r.status_code == 200 and len(r.content) == LARGE_ANSWER


def test_the_bounded_protocol_serves_tls_and_knows_it(tmp_path: Path) -> None:
    """The protocol wraps uvicorn's transport (to see each write); uvicorn reads from it whether the
    connection is TLS, which sets the scheme, and so HSTS (kgov.app.SecurityHeaders)."""
    import uvicorn

    from tests.integration.gateway.test_tls import self_signed

    cert, key = self_signed(tmp_path)
    app = FastAPI()

    @app.get("/who")
    def who(request: Request) -> dict[str, Any]:
        return {"scheme": request.url.scheme, "peer": request.scope.get(PEER_SCOPE_KEY)}

    app.add_middleware(SecurityHeaders)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           ssl_certfile=str(cert), ssl_keyfile=str(key),
                                           **http_server.server_options([], max_body_bytes=1024)))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for_port("127.0.0.1", port)
        with httpx.Client(verify=ssl.create_default_context(cafile=str(cert)), timeout=10) as client:
            r = client.get(f"https://localhost:{port}/who")
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    assert r.json()["scheme"] == "https" and r.json()["peer"][0] == "127.0.0.1"
    assert r.headers["strict-transport-security"] == "max-age=31536000"


@pytest.mark.parametrize("path", ["/subjects/", "/v3/clusters/", "/schemas/types/", "/health/"])
def test_a_trailing_slash_is_answered_in_place_never_redirected(base: str, admin: httpx.Client, path: str) -> None:
    # Starlette redirected (307) to a Location built from the Host header, which the client chooses, and
    # the server's own scheme (http:// behind a TLS proxy). Confluent's Jersey answers both spellings.
    plain = admin.get(path.rstrip("/"), follow_redirects=False)
    slashed = admin.get(path, headers={"Host": "evil.example"}, follow_redirects=False)
    assert slashed.status_code == plain.status_code == 200 and "location" not in slashed.headers
    if path != "/v3/clusters/":  # its `self` links name the request's own URL
        assert slashed.json() == plain.json()


def test_an_encoded_trailing_slash_is_part_of_a_name(base: str, admin: httpx.Client) -> None:
    subject = "ends-with-slash/"
    created = admin.post("/subjects/ends-with-slash%2F/versions", json={"schema": AVRO})
    assert created.status_code == 200, created.text
    assert admin.get("/subjects/ends-with-slash%2F/versions").json() == [1]
    assert subject in admin.get("/subjects/").json()
    # Without its encoded slash it is another subject, which does not exist.
    assert admin.get("/subjects/ends-with-slash/versions").json()["error_code"] == 40401
