"""The control plane's per-address connection cap (`http_max_connections_per_ip`), through the real server
as `kgov up` and `kgov serve` run it: past the cap a connection gets 503 and is closed before anything of
it is read, and a closed connection frees its place."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest
from fastapi import FastAPI

from kgov.up import control_plane
from tests.support.ports import free_port

CAP = 3


@pytest.fixture(scope="module")
def capped() -> Iterator[tuple[str, int]]:
    app = FastAPI()

    @app.get("/ping")
    def ping() -> dict[str, str]:
        return {"pong": "yes"}

    port = free_port()
    with control_plane(app, "127.0.0.1", port, max_connections_per_ip=CAP):
        yield "127.0.0.1", port


def _ping(sock: socket.socket) -> bytes:
    sock.sendall(b"GET /ping HTTP/1.1\r\nHost: kgov\r\n\r\n")
    return sock.recv(65536)


def _read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_connections_past_the_cap_get_503_and_are_closed_and_a_closed_one_frees_its_place(
        capped: tuple[str, int], caplog: pytest.LogCaptureFixture) -> None:
    with ExitStack() as stack:
        held = [stack.enter_context(socket.create_connection(capped, timeout=10)) for _ in range(CAP)]
        for sock in held:  # each admitted and served (kept alive)
            assert _ping(sock).startswith(b"HTTP/1.1 200")
        with caplog.at_level(logging.WARNING, logger="kgov"):
            refused = [stack.enter_context(socket.create_connection(capped, timeout=10)) for _ in range(5)]
            answers = [_read_until_closed(sock) for sock in refused]  # the server closes them unasked
        for answer in answers:
            assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
            assert answer.endswith(b"\r\n\r\nToo many connections from your address")
        # An HTTP client that sends its request at once reads the same answer (not a reset connection).
        for _ in range(3):
            refused_request = httpx.get(f"http://{capped[0]}:{capped[1]}/ping", timeout=10)
            assert refused_request.status_code == 503 and refused_request.headers["retry-after"] == "10"
        # One line for the burst, naming the address and the setting, not one per attempt.
        lines = [r.getMessage() for r in caplog.records if "http_max_connections_per_ip" in r.getMessage()]
        assert len(lines) == 1 and "127.0.0.1" in lines[0] and f"maximum of {CAP}" in lines[0]
        # The held connections still work; closing one lets a new one in.
        assert _ping(held[0]).startswith(b"HTTP/1.1 200")
        held[0].close()
        deadline = time.monotonic() + 10
        while True:
            with socket.create_connection(capped, timeout=10) as sock:
                answer = _ping(sock)
            if answer.startswith(b"HTTP/1.1 200") or time.monotonic() > deadline:
                break
            time.sleep(0.05)  # the server may not have seen the close yet
        assert answer.startswith(b"HTTP/1.1 200")
