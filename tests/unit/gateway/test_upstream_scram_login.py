"""The gateway's own SCRAM login upstream, against a hostile upstream speaking real Kafka frames on a
real socket: whatever the upstream answers, the login ends in `UpstreamLoginError` (which the
connection's owner turns into closing the client), never in another exception that would leave the
client's connection paused for ever."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.codec import SPECS, encode_response, parse_request_header
from gateway.proxy import UpstreamConnection, UpstreamLoginError
from sasl.scram import SaltedPasswordCache

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


class _Gateway:
    def upstream_salted_cache(self, username: str, password: str) -> SaltedPasswordCache:
        return SaltedPasswordCache()


class _Client:
    """What an UpstreamConnection calls on its client connection."""

    def __init__(self) -> None:
        self.aborted: list[str] = []
        self.gateway = _Gateway()

    def on_upstream_frame(self, frame: Any) -> None:
        raise AssertionError("no frame is forwarded during the login")

    def abort(self, reason: str) -> None:
        self.aborted.append(reason)

    def drops_acks_0_answer(self, correlation: int) -> bool:
        return False  # no produce request was forwarded

    def on_upstream_lost(self, exc: Exception | None) -> None:
        pass


async def _serve(server_first: bytes) -> tuple[asyncio.Server, int]:
    """An upstream that accepts the SCRAM mechanism and answers the client-first with `server_first`."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                frame = await reader.readexactly(size)
                header = parse_request_header(frame)
                if header.api_key == SASL_HANDSHAKE:
                    answer = SPECS[SASL_HANDSHAKE].response[1](error_code=0, mechanisms=["SCRAM-SHA-512"])
                else:
                    answer = SPECS[SASL_AUTHENTICATE].response[1](error_code=0, error_message=None,
                                                                  auth_bytes=server_first, session_lifetime_ms=0)
                writer.write(encode_response(SPECS[header.api_key], 1, header.correlation_id, answer))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@pytest.mark.parametrize("server_first", [
    b"r=not-the-clients-nonce,s=QSXCR+Q6sek8bf92,i=4096",  # a nonce that does not extend the client's
    b"garbage",
    b"r=x,s=!!!,i=" + b"9" * 5000,  # an iteration count of 5,000 digits
])
def test_a_malformed_server_first_message_ends_in_an_upstream_login_error(server_first: bytes) -> None:
    async def run() -> None:
        server, port = await _serve(server_first)
        try:
            loop = asyncio.get_running_loop()
            client = _Client()
            _, upstream = await loop.create_connection(lambda: UpstreamConnection(client), "127.0.0.1", port)
            with pytest.raises(UpstreamLoginError, match="SCRAM"):
                await upstream.login("SCRAM-SHA-512", "svc", "svc-password-0123")
            assert upstream.transport is not None
            upstream.transport.close()
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(run())
