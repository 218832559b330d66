"""An OAuth token endpoint that hangs: it accepts connections but never answers.

The one fault kgov's real token endpoint cannot be made to produce.
"""

from __future__ import annotations

import socket
import threading


class HangingEndpoint:
    """Accepts connections but never answers (the request sits unread): an identity provider that hangs."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.02)
        self.accepted: list[socket.socket] = []
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/oauth/token"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()
        for conn in self.accepted:
            conn.close()
