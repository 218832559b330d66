"""How uvicorn runs the control plane (`kgov serve`, `kgov up`): what a connection may cost before any
route, and so any authentication, sees it, and what a client that does not read its answers may cost.

uvicorn's default HTTP parser when httptools is installed (it is, with `uvicorn[standard]`) sets no limit
on a request head: a client sending a header that never ends makes the server buffer every byte, and a
few such connections take all memory. httptools stays (h11 is slower on every request), with the head
counted here (and a chunked body's trailers, parsed and buffered as header fields are): past
`MAX_REQUEST_HEAD_BYTES` the client gets 431 and the connection is closed; a head not complete
`REQUEST_HEAD_TIMEOUT_S` after the connection opened (first request) or after its first byte (later
ones; uvicorn's keep-alive timeout covers the wait before it) gets 408. Confluent's and Karapace's servers
(Jetty, aiohttp) refuse heads of 8 KiB; this allows more because a bearer token alone may take 16 KiB
(sasl.jwt_validation.MAX_TOKEN_LENGTH).

A body, read before any authentication too, must then arrive within `request_body_deadline_s` of reading
time (408 and the connection closed; after an answer the route already wrote, only the close), as the
gateway's large frames must (`gateway.frame_memory.large_frame_deadline_s`).

Answers must be taken by the client: bytes it leaves unread pile up in the server's write buffer (an
answer is handed over whole), so a client that asks for large answers and never reads holds their memory
and its connection for ever. Once the buffer is full (uvicorn stops writing: asyncio's high-water mark),
the client has `ANSWER_WRITE_GRACE_S` plus what is waiting at `ANSWER_MIN_BYTES_PER_S` to take all of it
(`answer_write_deadline_s`); otherwise the connection is dropped and one line logged. The same holds for
what is left in the buffer when the server closes a connection (asyncio keeps a closing connection until
its buffer is sent).

Connections are counted per client address from accept to close (Kafka's `max.connections.per.ip`, as
`gateway.connection_limits` counts the gateway's): past `http_max_connections_per_ip` (or the address's
entry in `http_max_connections_per_ip_overrides`) a new connection gets a fixed 503 and is closed before
anything of it is read, with at most one log line per `REFUSAL_LOG_INTERVAL_S`. Without it one address
could hold every file descriptor for `REQUEST_HEAD_TIMEOUT_S` at a time and starve everyone. The count is
taken on the TCP peer: a connection is counted at accept, before any X-Forwarded-For could be read, and a
header anyone may send must not decide it. A peer listed in `http_forwarded_allow_ips` (a reverse proxy
kgov believes) is therefore not capped unless an override names its address: a cap on it would cap
everyone behind it together; the proxy is where its clients are limited (nginx's `limit_conn`).
Served with TLS here (`--tls-cert`), a connection reaches the protocol, and so the count, only once its
handshake is done: until then asyncio's handshake timeout (60 s) bounds it, uncounted (asyncio gives no
hook before; a TLS proxy in front is counted as above). An HTTP/1.1 connection carries one request at a
time, so the cap bounds an address's requests in progress too.

Without httptools there is no bounded protocol: uvicorn's h11 one has none of these timers (h11 bounds
only a head's size), so `server_options` refuses to start rather than serve unbounded
(`HttpParserMissing`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from authz.http import PEER_SCOPE_KEY, listed_proxy
from gateway.connection_limits import ConnectionLimits, ip_key, parse_overrides
from kgov.exposure import forwarded_header_options

log = logging.getLogger("kgov")

MAX_REQUEST_HEAD_BYTES = 64 * 1024
# From the connection's start (first request) or the first byte of a request head to its end (nginx's
# client_header_timeout is 60 s). uvicorn's keep-alive timeout stops at the first byte and is not armed
# before the first request, so a client trickling a byte at a time, or sending nothing, held the
# connection for ever, and enough such clients take every file descriptor.
REQUEST_HEAD_TIMEOUT_S = 60.0
# A body's reading time: this grace plus its declared length (a chunked body: the cap,
# `http_request_max_bytes`) at this rate, counted from the end of its head while the server reads (not
# while uvicorn has paused reading because the route has not taken what it buffered, nor before a 100
# Continue the client waits for), stopping at its last byte: what the route does next is not counted.
# The gateway's large-frame numbers (`gateway.frame_memory`: 30 s, 256 KiB/s = 2 Mbit/s): a registry
# schema of `registry.max_body_bytes` (2 MiB) gets 38 s, an 8 MiB body 62 s: a link under about
# 55 KiB/s (440 kbit/s) cannot send the 2 MiB one. A departure from Confluent's servers (rest-utils'
# `RestConfig` `idle.timeout.ms`: Jetty's 30 s of silence between reads, no total) and nginx
# (`client_body_timeout`, 60 s between reads): with them a byte every few seconds keeps a connection, and
# its file descriptor, for ever.
REQUEST_BODY_GRACE_S = 30.0
REQUEST_BODY_MIN_BYTES_PER_S = 256 * 1024
# The time a client gets to take what waits in the write buffer once it is full: this grace plus the
# waiting bytes at this rate, the body's numbers (an 8 MiB answer: 62 s). Counted while the buffer is
# full (or the connection is closing), from the first such moment until the client has taken everything.
# Jetty (Confluent's servers) bounds a blocked write by its idle timeout (30 s without progress), nginx by
# `send_timeout` (60 s between writes): a client taking a few bytes now and then holds them for ever.
ANSWER_WRITE_GRACE_S = 30.0
ANSWER_MIN_BYTES_PER_S = 256 * 1024

# `http_max_connections_per_ip`: a browser opens about 6 connections to a host, a Java client's pool 5 by
# default (`http.maxConnections`), so 100 leaves room for a few dozen processes on one host; a NAT or a
# busier host gets its own figure in `http_max_connections_per_ip_overrides`.
DEFAULT_MAX_CONNECTIONS_PER_IP: Final = 100
# At most one log line per this many seconds for connections refused by the per-address cap (a flood would
# otherwise write a line per attempt); the next line says how many were refused in between.
REFUSAL_LOG_INTERVAL_S: Final = 10.0

_TOO_MANY = b"Too many connections from your address"
_ANSWER_503 = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
               b"content-length: " + str(len(_TOO_MANY)).encode() + b"\r\nretry-after: 10\r\n"
               b"connection: close\r\n\r\n" + _TOO_MANY)

_REFUSAL = b"Request header fields too large"
_ANSWER_408 = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
_ANSWER_431 = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
               b"content-length: " + str(len(_REFUSAL)).encode() + b"\r\nconnection: close\r\n\r\n" + _REFUSAL)


def request_body_deadline_s(declared_length: int | None, max_body_bytes: int) -> float:
    """The reading time a request body gets: `REQUEST_BODY_GRACE_S` plus its declared length (None: a
    chunked body, whose length is known only at its end), at most `max_body_bytes` (larger ones are
    refused with 413 anyway), at `REQUEST_BODY_MIN_BYTES_PER_S`."""
    size = max_body_bytes if declared_length is None else min(declared_length, max_body_bytes)
    return REQUEST_BODY_GRACE_S + size / REQUEST_BODY_MIN_BYTES_PER_S


def answer_write_deadline_s(waiting_bytes: int) -> float:
    """The time a client gets to take `waiting_bytes` of answers left in the server's write buffer."""
    return ANSWER_WRITE_GRACE_S + waiting_bytes / ANSWER_MIN_BYTES_PER_S


class ConnectionCap:
    """The per-address connection count of one server (touched only from its event loop: no locks).
    `admit` answers whether a new connection from `address` may stay; `release` is called for each
    admitted one when it closes. Refusals are logged through `log_refusal`, at most one line per
    `REFUSAL_LOG_INTERVAL_S` of `now` (seconds, the loop's clock)."""

    def __init__(self, max_per_ip: int, overrides: Mapping[str, int], proxies: Sequence[str]) -> None:
        # No total: uvicorn's `limit_concurrency` and the file descriptor limit bound that.
        self._limits = ConnectionLimits(max_connections=2**62, max_connections_per_ip=max_per_ip,
                                        overrides=overrides)
        self._named = frozenset(parse_overrides(overrides))
        self._proxies = tuple(proxies)
        self._last_logged: float | None = None
        self._unlogged = 0

    def counted(self, address: str) -> bool:
        """Whether connections from `address` are counted: not a listed proxy's unless an override names it."""
        return ip_key(address) in self._named or not listed_proxy(address, self._proxies)

    def admit(self, address: str, now: float) -> bool:
        if not self.counted(address):
            return True
        refusal = self._limits.admit(address)
        if refusal is None:
            return True
        self._log_refusal(refusal, now)
        return False

    def release(self, address: str) -> None:
        self._limits.release(address)

    def count(self, address: str) -> int:
        return self._limits.count(address)

    @property
    def refused(self) -> int:
        return self._limits.refused

    def _log_refusal(self, line: str, now: float) -> None:
        if self._last_logged is not None and now - self._last_logged < REFUSAL_LOG_INTERVAL_S:
            self._unlogged += 1
            return
        more = f" ({self._unlogged} more refused since the last such line)" if self._unlogged else ""
        log.warning("%s (http_max_connections_per_ip)%s", line, more)
        self._last_logged, self._unlogged = now, 0


class HttpParserMissing(ValueError):
    """httptools is not installed. A ValueError: `kgov` prints it as a problem to fix, not a traceback."""


def declared_body(headers: Sequence[tuple[bytes, bytes]]) -> tuple[bool, int | None]:
    """(whether the request has a body, its declared length: None when chunked). httptools has already
    refused a malformed or conflicting Content-Length."""
    length: int | None = 0
    for name, value in headers:
        if name == b"transfer-encoding":
            return True, None
        if name == b"content-length" and value.strip().isdigit():
            length = int(value)
    return bool(length), length


def _bounded_httptools_protocol(max_body_bytes: int, cap: ConnectionCap) -> type[Any]:
    try:
        import httptools  # noqa: F401
    except ImportError:
        # uvicorn would fall back to h11, which has none of the timers below: a slow client, or one
        # that never reads, would hold its connection for ever. Refused rather than served unbounded.
        raise HttpParserMissing(
            "httptools is not installed, and without it the control plane would run without its request "
            "and answer time limits: install kgov with its dependencies (uvicorn[standard] brings httptools), "
            "e.g. `pip install httptools`") from None
    # uvicorn internals (>=0.29 has them; pyproject sets no upper bound): a release that moves them must
    # stop the start here (ImportError), not quietly serve without the bounds.
    from uvicorn.protocols.http.flow_control import FlowControl
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class ObservedFlowControl(FlowControl):
        """uvicorn's reading switch, telling the protocol each time it is used (and each time a route
        asks for more of the body: `RequestResponseCycle.receive` resumes reading then, after its 100
        Continue), so that a body's clock runs only while the server reads."""

        def __init__(self, transport: asyncio.Transport, changed: Callable[[], None]) -> None:
            super().__init__(transport)
            self._changed = changed

        def pause_reading(self) -> None:
            super().pause_reading()
            self._changed()

        def resume_reading(self) -> None:
            super().resume_reading()
            self._changed()

    class ObservedTransport:
        """The connection's transport as uvicorn's protocol and its request cycles use it, telling the
        protocol of each write (before it is made) and of the server's close."""

        def __init__(self, transport: asyncio.Transport, writing: Callable[[int], None],
                     closed: Callable[[], None]) -> None:
            self._transport = transport
            self._writing = writing
            self._closed = closed
            # What uvicorn calls on every request, bound here: through __getattr__ a call costs ~0.8 µs.
            self.is_closing = transport.is_closing
            self.get_write_buffer_size = transport.get_write_buffer_size

        def write(self, data: bytes | bytearray | memoryview) -> None:
            self._writing(len(data))
            self._transport.write(data)

        def close(self) -> None:
            self._transport.close()
            self._closed()

        def __getattr__(self, name: str) -> Any:
            return getattr(self._transport, name)

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        """Bounds what a request costs before a route answers it: its head's size and time, its body's
        time (`request_body_deadline_s`); and what answers the client does not take cost: their time in
        a full write buffer (`answer_write_deadline_s`).

        Counts the bytes of a request that are not its body (the head, a chunked body's framing and
        trailers), from the connection's start or the end of the previous request to the end of this one.
        A read in which a head or a request ended, or that carried body bytes, is not counted (part of it
        was the finished head or body), so a pipelining client, or one sending trailers, may send up to
        one read (256 KiB) more; the usual one-request-at-a-time client's head is counted exactly, and a
        body of many small chunks is never taken for a long head."""

        _reading_head = True
        _head_bytes = 0
        _boundary_in_read = False
        _body_in_read = False
        _head_timer: asyncio.TimerHandle | None = None
        # Reading time left for the body being read (None: no body is being read), and the timer for
        # it, armed at `_body_clock_since` while the clock runs.
        _body_left_s: float | None = None
        _body_timer: asyncio.TimerHandle | None = None
        _body_clock_since = 0.0
        # Time left for the client to take what waits in the write buffer (None: nothing is owed; the
        # buffer has not been full since it was last seen empty), and the timer for it, armed at
        # `_write_clock_since` while the clock runs: writing paused (the buffer is full) or the server
        # closing the connection with bytes unsent.
        _write_left_s: float | None = None
        _write_timer: asyncio.TimerHandle | None = None
        _write_clock_since = 0.0
        _server_closing = False
        _lost = False
        _refused = False
        # The address `cap` counted this connection under (None: not counted; a Unix socket has none).
        _counted_as: str | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            peer = transport.get_extra_info("peername")
            address = str(peer[0]) if isinstance(peer, (tuple, list)) and peer else None
            if address is not None:
                if not cap.admit(address, self.loop.time()):
                    # Before uvicorn knows of it: nothing is read, no timer armed; one fixed answer, then close.
                    self._refused = True
                    transport.write(_ANSWER_503)
                    transport.close()
                    return
                if cap.counted(address):
                    self._counted_as = address
            observed: Any = ObservedTransport(transport, self._writing, self._closed_by_server)
            super().connection_made(observed)
            self.flow = ObservedFlowControl(observed, self._run_body_clock)
            # The first head's time runs from here: a connection that never sends a byte is cut off too.
            self._head_timer = self.loop.call_later(REQUEST_HEAD_TIMEOUT_S, self._refuse, _ANSWER_408)

        def data_received(self, data: bytes) -> None:
            self._boundary_in_read = self._body_in_read = False
            if self._reading_head and self._head_timer is None:
                # Bytes of a head (new or continued): it must be complete within REQUEST_HEAD_TIMEOUT_S.
                self._head_timer = self.loop.call_later(REQUEST_HEAD_TIMEOUT_S, self._refuse, _ANSWER_408)
            super().data_received(data)
            if self._boundary_in_read or self._body_in_read or self.transport.is_closing():
                return
            self._head_bytes += len(data)
            if self._head_bytes > MAX_REQUEST_HEAD_BYTES:
                self._refuse(_ANSWER_431)

        def _refuse(self, answer: bytes) -> None:
            self._stop_head_timer()
            if not self.transport.is_closing():
                self.transport.write(answer)
                self.transport.close()

        def _stop_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def on_headers_complete(self) -> None:
            self._reading_head = False
            self._boundary_in_read = True
            self._stop_head_timer()
            previous = self.cycle
            super().on_headers_complete()
            has_body, length = declared_body(self.headers)
            if self.cycle is not previous and has_body:  # not an upgrade: a request with its cycle
                self._body_left_s = request_body_deadline_s(length, max_body_bytes)
                self._run_body_clock()

        def _run_body_clock(self) -> None:
            """Starts or stops the body's clock: it runs while a body is read, reading is not paused
            (by uvicorn, for a route that has not taken what it buffered, or for a pipelined request),
            and no 100 Continue the client waits for is due."""
            running = (self._body_left_s is not None and not self.flow.read_paused
                       and not self.cycle.waiting_for_100_continue)
            if running and self._body_timer is None:
                self._body_clock_since = self.loop.time()
                self._body_timer = self.loop.call_later(max(self._body_left_s or 0.0, 0.0), self._body_overdue)
            elif not running and self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None
                if self._body_left_s is not None:
                    self._body_left_s -= self.loop.time() - self._body_clock_since

        def _stop_body_clock(self) -> None:
            self._body_left_s = None
            self._run_body_clock()

        def _body_overdue(self) -> None:
            self._body_timer = None
            self._body_left_s = None
            if self.cycle.response_started:  # a route answered without the whole body: no second answer
                self.transport.close()
            else:
                self._refuse(_ANSWER_408)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._refused:  # uvicorn never saw it
                return
            if self._counted_as is not None:
                cap.release(self._counted_as)
                self._counted_as = None
            self._lost = True
            self._stop_head_timer()
            self._stop_body_clock()
            self._write_left_s = None
            self._run_write_clock()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            # The peer, which the proxy-header middleware may replace in `client` (authz.http.PEER_SCOPE_KEY).
            self.scope[PEER_SCOPE_KEY] = self.client  # type: ignore[literal-required]

        def pause_writing(self) -> None:
            super().pause_writing()
            if self._write_left_s is None:  # the buffer is full: all that waits in it is owed from now on
                self._write_left_s = answer_write_deadline_s(self.transport.get_write_buffer_size())
            self._run_write_clock()

        def resume_writing(self) -> None:
            super().resume_writing()
            self._run_write_clock()
            if self.transport.get_write_buffer_size() == 0:  # the client took everything
                self._write_left_s = None
                self._run_write_clock()

        def _writing(self, size: int) -> None:
            """Before a write: while something is owed, these bytes are owed too."""
            if (self._write_left_s is not None and not self.flow.write_paused and not self._server_closing
                    and self.transport.get_write_buffer_size() == 0):
                # The client took everything since writing resumed: asyncio's resume_writing comes once, below
                # the low-water mark, rarely at 0, and nothing tells of the rest. This answer starts afresh.
                self._write_left_s = None
            if self._write_left_s is not None:
                self._pause_write_clock()
                self._write_left_s += size / ANSWER_MIN_BYTES_PER_S
                self._run_write_clock()

        def _closed_by_server(self) -> None:
            # asyncio keeps a closing connection until its buffer is sent: what waits in it is owed now.
            self._server_closing = True
            waiting = 0 if self._lost else self.transport.get_write_buffer_size()
            if self._write_left_s is None and waiting:
                self._write_left_s = answer_write_deadline_s(waiting)
            self._run_write_clock()

        def _run_write_clock(self) -> None:
            running = (not self._lost and self._write_left_s is not None
                       and (self.flow.write_paused or self._server_closing))
            if running and self._write_timer is None:
                self._write_clock_since = self.loop.time()
                self._write_timer = self.loop.call_later(max(self._write_left_s or 0.0, 0.0), self._write_overdue)
            elif not running:
                self._pause_write_clock()

        def _pause_write_clock(self) -> None:
            if self._write_timer is not None:
                self._write_timer.cancel()
                self._write_timer = None
                if self._write_left_s is not None:
                    self._write_left_s -= self.loop.time() - self._write_clock_since

        def _write_overdue(self) -> None:
            self._write_timer = None
            self._write_left_s = None
            # One line per connection dropped; the peer's address and a byte count, nothing of the request.
            peer = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
            log.warning("dropped the HTTP connection from %s: it did not take %d bytes of answers in time",
                        peer, self.transport.get_write_buffer_size())
            self.transport.abort()  # close() would wait for the buffer to be sent

        def on_body(self, body: bytes) -> None:
            self._body_in_read = True
            super().on_body(body)

        def on_message_complete(self) -> None:
            self._stop_body_clock()
            super().on_message_complete()
            self._reading_head = True
            self._boundary_in_read = True
            self._head_bytes = 0

    return BoundedHttpToolsProtocol


def server_options(forwarded_allow_ips: Sequence[str], *, max_body_bytes: int,
                   max_connections_per_ip: int = DEFAULT_MAX_CONNECTIONS_PER_IP,
                   max_connections_per_ip_overrides: Mapping[str, int] | None = None) -> dict[str, Any]:
    """uvicorn.Config / uvicorn.run keyword arguments shared by `kgov serve` and `kgov up`;
    `max_body_bytes` is the app's body cap (`http_request_max_bytes`), which bounds a body's time; the
    connection cap's figures are `http_max_connections_per_ip` and its overrides. Each call makes a new
    count (one per server)."""
    cap = ConnectionCap(max_connections_per_ip, max_connections_per_ip_overrides or {}, forwarded_allow_ips)
    return {
        "http": _bounded_httptools_protocol(max_body_bytes, cap),
        # No `server: uvicorn` header: the version of what answers is nobody's business.
        "server_header": False,
        "access_log": False,
        **forwarded_header_options(forwarded_allow_ips),
    }
