"""kgov.http_server's choice of uvicorn protocol: the bounded httptools protocol subclasses uvicorn's
internals, so when they move, or httptools is missing, the server must not quietly run without its head
limits and timers; and the body and answer deadlines' arithmetic."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kgov.http_server import (
    HttpParserMissing,
    answer_write_deadline_s,
    declared_body,
    request_body_deadline_s,
    server_options,
)


def test_the_bounded_httptools_protocol_is_used_when_httptools_is_installed() -> None:
    protocol = server_options([], max_body_bytes=1024)["http"]
    assert isinstance(protocol, type) and protocol.__name__ == "BoundedHttpToolsProtocol"


def test_without_httptools_the_server_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    # uvicorn would fall back to h11, which has none of the head, body and answer timers: a documented
    # refusal (kgov/http_server.py's docstring, README), not a quietly unbounded server.
    monkeypatch.setitem(sys.modules, "httptools", None)  # `import httptools` raises ImportError
    with pytest.raises(HttpParserMissing, match="httptools is not installed"):
        server_options([], max_body_bytes=1024)


def test_kgov_serve_without_httptools_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import uvicorn

    from kgov.cli import main

    started: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: started.append(kw))
    monkeypatch.setitem(sys.modules, "httptools", None)
    old_umask = os.umask(0o022)
    try:
        assert main(["serve", "--db", f"sqlite:///{tmp_path}/k.db"]) == 2
    finally:
        os.umask(old_umask)
    assert started == []
    assert not (tmp_path / "k.db").exists()  # refused before anything was opened
    err = capsys.readouterr().err
    assert err.startswith("kgov: httptools is not installed") and "Traceback" not in err


def test_uvicorn_internals_that_moved_fail_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    # httptools is there but uvicorn's protocol module is not where kgov subclasses it (a uvicorn
    # release that reorganised it): the start fails, rather than serving without head timers.
    monkeypatch.setitem(sys.modules, "uvicorn.protocols.http.httptools_impl", None)
    with pytest.raises(ImportError):
        server_options([], max_body_bytes=1024)


def test_a_body_gets_a_grace_plus_its_declared_length_at_the_minimum_rate() -> None:
    cap = 8 * 1024 * 1024
    assert request_body_deadline_s(0, cap) == 30.0
    assert request_body_deadline_s(2 * 1024 * 1024, cap) == 38.0  # registry.max_body_bytes
    # Chunked (no declared length), or declared past the cap (answered 413): the cap's time.
    assert request_body_deadline_s(None, cap) == request_body_deadline_s(10**12, cap) == 62.0


def test_answers_waiting_in_a_full_buffer_get_a_grace_plus_their_length_at_the_minimum_rate() -> None:
    assert answer_write_deadline_s(0) == 30.0
    assert answer_write_deadline_s(8 * 1024 * 1024) == 62.0


@pytest.mark.parametrize(("headers", "expected"), [
    ([], (False, 0)),
    ([(b"content-length", b"0")], (False, 0)),
    ([(b"host", b"kgov"), (b"content-length", b"1234")], (True, 1234)),
    ([(b"transfer-encoding", b"chunked")], (True, None)),
])
def test_the_declared_body_is_read_from_the_head(headers: list[tuple[bytes, bytes]],
                                                  expected: tuple[bool, int | None]) -> None:
    assert declared_body(headers) == expected


class FakeLoop:
    """The loop's clock and timers, moved by hand: the write deadline's arithmetic without sleeping."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[FakeTimer] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> FakeTimer:
        timer = FakeTimer(self.now + delay, callback, args)
        self.timers.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for timer in [t for t in self.timers if not t.cancelled and t.when <= self.now]:
            timer.cancelled = True
            timer.callback(*timer.args)


class FakeTimer:
    def __init__(self, when: float, callback: Callable[..., None], args: tuple[Any, ...]) -> None:
        self.when, self.callback, self.args, self.cancelled = when, callback, args, False

    def cancel(self) -> None:
        self.cancelled = True


class FakeTransport:
    """A socket transport whose write buffer holds `waiting` bytes the client has not taken."""

    def __init__(self) -> None:
        self.waiting = 0
        self.closing = self.aborted = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("192.0.2.7", 5555), "sockname": ("127.0.0.1", 8080)}.get(name, default)

    def write(self, data: bytes) -> None:
        self.waiting += len(data)

    def get_write_buffer_size(self) -> int:
        return self.waiting

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.aborted = self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


@pytest.fixture
def connection() -> tuple[Any, FakeTransport, FakeLoop]:
    """A connection of the bounded protocol, past its first request's head timer (not under test here)."""
    import uvicorn
    from uvicorn.server import ServerState

    async def app(scope: Any, receive: Any, send: Any) -> None:
        pass

    protocol_class = server_options([], max_body_bytes=1024)["http"]
    loop, transport = FakeLoop(), FakeTransport()
    protocol = protocol_class(config=uvicorn.Config(app, log_config=None), server_state=ServerState(),
                              app_state={}, _loop=loop)
    protocol.connection_made(transport)
    protocol._stop_head_timer()
    return protocol, transport, loop


MIB = 1024 * 1024


def test_answers_left_in_a_full_buffer_are_dropped_at_their_deadline(
        connection: tuple[Any, FakeTransport, FakeLoop], caplog: pytest.LogCaptureFixture) -> None:
    protocol, transport, loop = connection
    transport.waiting = MIB
    protocol.pause_writing()  # 30 s + 1 MiB at 256 KiB/s = 34 s
    loop.advance(33.9)
    assert not transport.aborted
    loop.advance(0.2)
    assert transport.aborted  # abort: close() would wait for the buffer to be sent
    assert [r.getMessage() for r in caplog.records if r.name == "kgov"] == [
        "dropped the HTTP connection from 192.0.2.7:5555: it did not take 1048576 bytes of answers in time"]


def test_the_deadline_counts_only_while_the_buffer_is_full_until_the_client_took_everything(
        connection: tuple[Any, FakeTransport, FakeLoop]) -> None:
    protocol, transport, loop = connection
    transport.waiting = MIB
    protocol.pause_writing()
    loop.advance(20.0)
    transport.waiting = 10_000  # the client took most of it: writing resumes, the clock stops
    protocol.resume_writing()
    loop.advance(100.0)
    assert not transport.aborted
    protocol.transport.write(b"x" * (256 * 1024))  # owed too: 1 s more
    transport.waiting = MIB
    protocol.pause_writing()  # the same backlog: 34 + 1 - 20 = 15 s left
    loop.advance(14.9)
    assert not transport.aborted
    loop.advance(0.2)
    assert transport.aborted


def test_a_client_that_took_everything_starts_afresh(connection: tuple[Any, FakeTransport, FakeLoop]) -> None:
    protocol, transport, loop = connection
    transport.waiting = MIB
    protocol.pause_writing()
    loop.advance(33.0)
    transport.waiting = 0
    protocol.resume_writing()
    transport.waiting = MIB
    protocol.pause_writing()  # a new backlog: 34 s again
    loop.advance(33.9)
    assert not transport.aborted
    loop.advance(0.2)
    assert transport.aborted


def test_bytes_left_when_the_server_closes_have_their_deadline_too(
        connection: tuple[Any, FakeTransport, FakeLoop]) -> None:
    """Below the high-water mark writing is not paused, but asyncio keeps a closing connection until its
    buffer is sent: a client that stopped reading held it for ever."""
    protocol, transport, loop = connection
    transport.waiting = 16 * 1024
    protocol.transport.close()  # uvicorn's keep-alive timeout, or an answer with Connection: close
    loop.advance(30.0)
    assert not transport.aborted
    loop.advance(0.1)  # 30 s + 16 KiB at 256 KiB/s = 30.0625 s
    assert transport.aborted


def test_nothing_is_owed_while_the_client_keeps_up(connection: tuple[Any, FakeTransport, FakeLoop]) -> None:
    protocol, transport, loop = connection
    protocol.transport.write(b"x" * 1000)  # taken at once by the kernel: nothing waits, no clock
    transport.waiting = 0
    loop.advance(3600.0)
    assert not transport.aborted and [t for t in loop.timers if not t.cancelled] == []


def test_a_client_that_took_everything_after_writing_resumed_starts_afresh_at_the_next_answer(
        connection: tuple[Any, FakeTransport, FakeLoop]) -> None:
    """asyncio calls resume_writing once, when the buffer falls below its low-water mark (16 KiB), rarely
    at 0 with a slow reader; it says nothing when the rest is taken. The next answer, on the same kept-alive
    connection, was owed only what was left of the first one's time (here 1 s) plus its own bytes' share:
    a client that had taken everything was dropped after 5 s instead of 34."""
    protocol, transport, loop = connection
    transport.waiting = MIB
    protocol.pause_writing()
    loop.advance(33.0)
    transport.waiting = 10_000  # below the low-water mark: writing resumes
    protocol.resume_writing()
    transport.waiting = 0  # the client takes the rest (asyncio tells the protocol nothing)
    loop.advance(60.0)
    protocol.transport.write(b"x" * MIB)  # the next answer
    protocol.pause_writing()  # a new backlog: 30 s + 1 MiB at 256 KiB/s = 34 s
    loop.advance(33.9)
    assert not transport.aborted
    loop.advance(0.2)
    assert transport.aborted


def test_the_connection_cap_counts_per_address_and_frees_on_release() -> None:
    from kgov.http_server import ConnectionCap

    cap = ConnectionCap(2, {}, [])
    assert cap.admit("192.0.2.7", 0.0) and cap.admit("192.0.2.7", 0.0)
    assert not cap.admit("192.0.2.7", 0.0)
    assert cap.admit("::ffff:192.0.2.8", 0.0)  # another address; an IPv4-mapped one counts as the IPv4 one
    assert cap.count("192.0.2.8") == 1
    cap.release("192.0.2.7")
    assert cap.admit("192.0.2.7", 0.0)
    assert cap.refused == 1


def test_a_listed_proxy_is_not_capped_unless_an_override_names_it() -> None:
    from kgov.http_server import ConnectionCap

    cap = ConnectionCap(1, {"10.0.0.9": 2}, ["10.0.0.0/24"])
    # 10.0.0.5 is a believed proxy: everyone behind it arrives from its address, so no cap on it.
    assert all(cap.admit("10.0.0.5", 0.0) for _ in range(50)) and cap.count("10.0.0.5") == 0
    # 10.0.0.9 is a proxy too, and an override gives it its own figure.
    assert cap.admit("10.0.0.9", 0.0) and cap.admit("10.0.0.9", 0.0) and not cap.admit("10.0.0.9", 0.0)
    # An unlisted peer, one that sends X-Forwarded-For included, has the default.
    assert cap.admit("192.0.2.1", 0.0) and not cap.admit("192.0.2.1", 0.0)


def test_refusals_are_logged_at_most_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    from kgov.http_server import REFUSAL_LOG_INTERVAL_S, ConnectionCap

    cap = ConnectionCap(1, {"192.0.2.9": 0}, [])
    with caplog.at_level("WARNING", logger="kgov"):
        for i in range(100):
            assert not cap.admit("192.0.2.9", i * REFUSAL_LOG_INTERVAL_S / 50)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "Rejected connection from 192.0.2.9" in lines[0] and "maximum of 0" in lines[0]
    assert "(49 more refused since the last such line)" in lines[1]


def test_a_refused_connection_is_answered_and_closed_before_uvicorn_sees_it() -> None:
    import uvicorn
    from uvicorn.server import ServerState

    async def app(scope: Any, receive: Any, send: Any) -> None:
        pass

    protocol_class = server_options([], max_body_bytes=1024, max_connections_per_ip=1)["http"]
    state = ServerState()
    loop = FakeLoop()

    def connect() -> tuple[Any, FakeTransport]:
        protocol = protocol_class(config=uvicorn.Config(app, log_config=None), server_state=state,
                                  app_state={}, _loop=loop)
        transport = FakeTransport()
        protocol.connection_made(transport)
        return protocol, transport

    first, first_transport = connect()
    second, second_transport = connect()
    assert not first_transport.closing and first in state.connections
    assert second_transport.closing and second not in state.connections
    assert second_transport.waiting > 0 and not loop.timers[1:]  # the 503; no head timer for it
    second.connection_lost(None)
    first.connection_lost(None)  # frees the place
    third, third_transport = connect()
    assert not third_transport.closing and third in state.connections
