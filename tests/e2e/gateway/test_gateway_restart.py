"""An application's long-lived producer across a restart of the `kgov gateway` process, as an operator
restarts it (SIGTERM, then the same command): the producer reconnects and logs in by itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.e2e.gateway.test_kgov_gateway_cli import seed_producer
from tests.support.ports import free_port, wait_for_port

pytestmark = [pytest.mark.broker]


@contextmanager
def kgov_gateway(tmp_path: Path, port: int, upstream: str, db: str) -> Iterator[None]:
    env = {**os.environ, "KGOV_DATA_DIR": str(tmp_path), "KGOV_GATEWAY__ADDRESS_MODE": "single"}
    proc = subprocess.Popen([sys.executable, "-m", "kgov", "gateway", "--listen", f"127.0.0.1:{port}",
                             "--upstream", upstream, "--db", db], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        wait_for_port("127.0.0.1", port, timeout=30)
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err


def test_a_producer_carries_on_across_a_gateway_restart(kafka_broker: str, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'kgov.db'}"
    topic = f"restart-{uuid.uuid4().hex[:8]}"
    seed_producer(tmp_path, db, "orders-app", "SCRAM-SHA-512", "orders-password-1", topic)
    port = free_port()
    delivered: list[Any] = []
    p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "orders-app",
                  "sasl.password": "orders-password-1", "enable.idempotence": True,
                  "reconnect.backoff.max.ms": 200, "on_delivery": lambda err, msg: delivered.append(err)})
    with kgov_gateway(tmp_path, port, kafka_broker, db):
        p.produce(topic, b"before the restart")
        assert p.flush(15) == 0
    with kgov_gateway(tmp_path, port, kafka_broker, db):
        p.produce(topic, b"after the restart")
        assert p.flush(15) == 0
    assert delivered == [None, None]
