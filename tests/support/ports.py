"""Free loopback ports and waiting for a listener."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

from kgov import broker_sandbox
from kgov.up import reserved_loopback_port


def free_port() -> int:
    """A loopback port for a server that binds it later (with SO_REUSEADDR, as uvicorn, asyncio, the
    gateway's node listeners, Tansu, PostgreSQL and Vault all do).

    Looked up free and then released, a port could be handed meanwhile to another process's bind(0) or
    outgoing connection (other test sessions share the machine). `kgov up` has the same need for its
    broker's port, so this is its `reserved_loopback_port`: the port is left in TIME_WAIT for a minute,
    during which the kernel hands it to no bind(0) and no connect(), while a SO_REUSEADDR bind takes it at
    once. Where a test only needs a port that refuses connections, `refused_port` holds one instead."""
    return reserved_loopback_port()


@contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port that refuses every connection for as long as the context lasts: bound (so no other
    process can take it meanwhile) and never listening (so a connect is answered with a reset at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


def wait_for_port(host: str, port: int, timeout: float = 30.0) -> None:
    """Returns once something accepts connections on host:port (RuntimeError after `timeout`): `kgov up`'s
    own wait for its broker."""
    broker_sandbox.wait_for_port(host, port, timeout)
