"""Reading exact byte counts and size-prefixed Kafka frames from a blocking socket (raw test clients
and scripted test servers)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable


def recv_exactly(sock: socket.socket, n: int, closed: str = "closed by the peer") -> bytes:
    """Exactly `n` bytes; ConnectionError(`closed`) when the peer closes first."""
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(closed)
        buf += chunk
    return buf


def recv_frame(sock: socket.socket) -> bytes:
    """One `Size int32` + payload frame: its payload."""
    return recv_exactly(sock, int.from_bytes(recv_exactly(sock, 4), "big"))


def serve_each_connection(listener: socket.socket, serve: Callable[[socket.socket], None],
                          accepted: list[socket.socket]) -> None:
    """Accepts on `listener` (on a thread of its own) until it is closed, adding each connection to
    `accepted` and running `serve(connection)` on a thread of its own (scripted test servers)."""

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn)
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
