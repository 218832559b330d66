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
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from kgov.exposure import forwarded_header_options

MAX_REQUEST_HEAD_BYTES = 64 * 1024
# From the connection's start (first request) or the first byte of a request head to its end (nginx's
# client_header_timeout is 60 s). uvicorn's keep-alive timeout stops at the first byte and is not armed
# before the first request, so a client trickling a byte at a time, or sending nothing, held the
# connection for ever, and enough such clients take every file descriptor.
REQUEST_HEAD_TIMEOUT_S = 60.0

_REFUSAL = b"Request header fields too large"
_ANSWER_408 = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
_ANSWER_431 = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
               b"content-length: " + str(len(_REFUSAL)).encode() + b"\r\nconnection: close\r\n\r\n" + _REFUSAL)


def _bounded_httptools_protocol() -> type[Any] | None:
    try:
        import httptools  # noqa: F401
    except ImportError:  # no httptools: h11, bounded by its own option
        return None
    # uvicorn internals (>=0.29 has them; pyproject sets no upper bound): a release that moves them must
    # stop the start here (ImportError), not quietly serve with h11 and no head timer.
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class BoundedHeadHttpToolsProtocol(HttpToolsProtocol):
        """Counts the bytes of a request that are not its body (the head, a chunked body's framing and
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

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
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
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_head_timer()
            super().connection_lost(exc)

        def on_body(self, body: bytes) -> None:
            self._body_in_read = True
            super().on_body(body)

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._reading_head = True
            self._boundary_in_read = True
            self._head_bytes = 0

    return BoundedHeadHttpToolsProtocol


def server_options(forwarded_allow_ips: Sequence[str]) -> dict[str, Any]:
    """uvicorn.Config / uvicorn.run keyword arguments shared by `kgov serve` and `kgov up`."""
    protocol = _bounded_httptools_protocol()
    return {
        "http": protocol if protocol is not None else "h11",
        "h11_max_incomplete_event_size": MAX_REQUEST_HEAD_BYTES,
        # No `server: uvicorn` header: the version of what answers is nobody's business.
        "server_header": False,
        "access_log": False,
        **forwarded_header_options(forwarded_allow_ips),
    }
