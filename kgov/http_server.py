"""How uvicorn runs the control plane (`kgov serve`, `kgov up`): what a connection may cost before any
route, and so any authentication, sees it.

uvicorn's default HTTP parser when httptools is installed (it is, with `uvicorn[standard]`) sets no limit
on a request head: a client sending a header that never ends makes the server buffer every byte, and a
few such connections take all memory. h11 has a limit (`h11_max_incomplete_event_size`) but is slower on
every request, so httptools stays, with the head counted here (and a chunked body's trailers, parsed and
buffered as header fields are): past `MAX_REQUEST_HEAD_BYTES` the client gets 431 and the connection is
closed; a head not complete `REQUEST_HEAD_TIMEOUT_S` after the connection opened (first request) or after
its first byte (later ones; uvicorn's keep-alive timeout covers the wait before it) gets 408 (h11's
fallback has no such timer). Confluent's and Karapace's servers (Jetty, aiohttp) refuse heads of
8 KiB; this allows more because a bearer token alone may take 16 KiB (sasl.jwt_validation.MAX_TOKEN_LENGTH).

A body, read before any authentication too, must then arrive within `request_body_deadline_s` of reading
time (408 and the connection closed; after an answer the route already wrote, only the close), as the
gateway's large frames must (`gateway.frame_memory.large_frame_deadline_s`). h11's fallback has no such
timer either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from kgov.exposure import forwarded_header_options

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


def _bounded_httptools_protocol(max_body_bytes: int) -> type[Any] | None:
    try:
        import httptools  # noqa: F401
    except ImportError:  # no httptools: h11, bounded by its own option
        return None
    # uvicorn internals (>=0.29 has them; pyproject sets no upper bound): a release that moves them must
    # stop the start here (ImportError), not quietly serve with h11 and no head timer.
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

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        """Bounds what a request costs before a route answers it: its head's size and time, its body's
        time (`request_body_deadline_s`).

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

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.flow = ObservedFlowControl(transport, self._run_body_clock)
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
            self._stop_head_timer()
            self._stop_body_clock()
            super().connection_lost(exc)

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


def server_options(forwarded_allow_ips: Sequence[str], *, max_body_bytes: int) -> dict[str, Any]:
    """uvicorn.Config / uvicorn.run keyword arguments shared by `kgov serve` and `kgov up`;
    `max_body_bytes` is the app's body cap (`http_request_max_bytes`), which bounds a body's time."""
    protocol = _bounded_httptools_protocol(max_body_bytes)
    return {
        "http": protocol if protocol is not None else "h11",
        "h11_max_incomplete_event_size": MAX_REQUEST_HEAD_BYTES,
        # No `server: uvicorn` header: the version of what answers is nobody's business.
        "server_header": False,
        "access_log": False,
        **forwarded_header_options(forwarded_allow_ips),
    }
