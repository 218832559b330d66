"""Free loopback ports and waiting for a listener."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager


def free_port() -> int:
    """A loopback port free now, for a server that binds it later. Another process may take it in
    between: where a test only needs a port that refuses connections, `refused_port` holds one."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port that refuses every connection for as long as the context lasts: bound (so no other
    process can take it meanwhile) and never listening (so a connect is answered with a reset at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


def wait_for_port(host: str, port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s")
