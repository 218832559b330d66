"""`kgov up`'s embedded broker, for real: Tansu killed with SIGKILL is noticed, logged and restarted behind
the same address (sandboxed and plain); a broker that dies at once every time is given up on."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

import kgov.up
from kgov.broker_supervisor import RestartPolicy
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.broker, pytest.mark.slow]

FAST = RestartPolicy(first_delay_s=0.05, max_delay_s=0.2, quick_s=5, give_up_after=3)


def _namespaces_allowed() -> bool:
    import subprocess

    from kgov import broker_sandbox

    probe = subprocess.run([sys.executable, "-I", broker_sandbox.__file__, "/nonexistent/s", "1", "--", "/bin/true"],
                           capture_output=True, text=True, timeout=30, check=False)
    return not probe.stdout.startswith("unavailable")


@contextlib.contextmanager
def _broker(kind: str, data_dir: Path, policy: RestartPolicy = FAST) -> Iterator[kgov.up.SupervisedBroker]:
    data_dir.mkdir(mode=0o700, exist_ok=True)
    if kind == "sandboxed":
        if not _namespaces_allowed():
            pytest.skip("this host refuses user namespaces: no sandbox to restart")
        with kgov.up.isolated_broker(data_dir, policy) as broker:
            yield broker
    else:
        with kgov.up.embedded_broker(data_dir, policy) as broker:
            yield broker


def _tansu_pid(broker: kgov.up.SupervisedBroker) -> int:
    """The Tansu process itself: the child for the plain broker, the sandbox script's child otherwise."""
    pid: int = broker.supervisor.broker.proc.pid  # type: ignore[attr-defined]
    for _ in range(2):
        if "tansu" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[0]:
            return pid
        pid = next(int(stat.parent.name) for stat in Path("/proc").glob("[0-9]*/stat")
                   if _parent(stat) == pid)
    raise AssertionError("no tansu process found")


def _parent(stat: Path) -> int | None:
    try:
        return int(stat.read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _produce(address: str, topic: str, value: bytes) -> None:
    producer = Producer({"bootstrap.servers": address, "message.timeout.ms": 20000})
    producer.produce(topic, value)
    assert producer.flush(25) == 0


def _read(address: str, topic: str, seconds: float) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": address, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 500, "allow.auto.create.topics": False})
    consumer.subscribe([topic])
    got: list[bytes] = []
    end = time.monotonic() + seconds
    try:
        while not got and time.monotonic() < end:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("kind", ["sandboxed", "plain"])
def test_a_killed_broker_is_logged_and_restarted_behind_the_same_address(
        kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kgov.broker")
    with _broker(kind, tmp_path / "data") as broker:
        before = f"before-{uuid.uuid4().hex[:6]}"
        _produce(broker.address, before, b"written before the kill")
        assert _read(broker.address, before, 20) == [b"written before the kill"]
        first = _tansu_pid(broker)
        first_sockets = getattr(broker.supervisor.broker, "sockets", None)  # the sandbox's private directory
        os.kill(first, signal.SIGKILL)
        assert wait_for(lambda: broker.supervisor.restarts == 1, 30)
        assert broker.supervisor.problem() is None
        assert _tansu_pid(broker) != first
        sockets = getattr(broker.supervisor.broker, "sockets", None)
        assert (sockets is None) == (kind == "plain")
        if sockets is not None and first_sockets is not None:  # a new directory each start, the old one gone
            assert sockets != first_sockets and sockets.is_dir() and not first_sockets.exists()
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and "was killed by SIGKILL" in errors[0] and "tansu.log" in errors[0], errors
        after = f"after-{uuid.uuid4().hex[:6]}"
        _produce(broker.address, after, b"written after the restart")
        assert _read(broker.address, after, 20) == [b"written after the restart"]
        # Tansu's storage is memory:// (the only local one it has): what it held died with it. When this
        # fails, a newer Tansu keeps records across restarts: say so in README (kgov up) and the log line.
        assert _read(broker.address, before, 5) == []
    if sockets is not None:
        assert not sockets.exists()
    with pytest.raises(OSError):  # stopped with the context
        import socket

        host, port = broker.address.rsplit(":", 1)
        socket.create_connection((host, int(port)), timeout=1).close()


def _dies_soon(listener_url: str, advertised_url: str) -> list[str]:
    """A broker that listens (so it starts) and then exits with code 7 after 0.2 s, every time."""
    port = int(listener_url.rsplit(":", 1)[1])
    return [sys.executable, "-c", "import socket, sys, time; "
            f"s = socket.create_server(('127.0.0.1', {port})); time.sleep(0.2); sys.exit(7)"]


@pytest.mark.parametrize("kind", ["sandboxed", "plain"])
def test_a_broker_that_dies_at_once_every_time_is_given_up_on(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(kgov.up, "_tansu_broker_command", _dies_soon)
    gave_up: list[str] = []
    monkeypatch.setattr(kgov.up, "_give_up", gave_up.append)
    with _broker(kind, tmp_path / "data") as broker:
        assert wait_for(lambda: broker.supervisor.problem() is not None, 10)
        assert "restarting" in (broker.supervisor.problem() or "")
        assert wait_for(lambda: gave_up, 20)
        assert broker.supervisor.restarts == 2  # started, then restarted twice: three quick failures
        assert "gave up" in (broker.supervisor.problem() or "")
    message = gave_up[0]
    assert message == broker.supervisor.gave_up
    assert "failed 3 times in a row within 5 s of starting (last: exited with code 7)" in message
    assert "tansu.log" in message
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert sum("exited with code 7" in e for e in errors) >= 3
