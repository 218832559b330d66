"""Raw sockets for HTTP-level tests of what the server does with requests no client library would send."""

from __future__ import annotations

import socket


def read_to_end(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection (a reset after its answer included); a server
    that holds the connection: the socket's timeout (socket.timeout), so a failure."""
    answer = b""
    try:
        while chunk := sock.recv(65536):
            answer += chunk
    except ConnectionResetError:
        pass
    return answer
