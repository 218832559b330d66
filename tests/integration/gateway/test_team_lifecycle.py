"""An application team's long-lived clients across gateway events: the gateway restarts under them, and
a user's credential is removed while its sessions are open (KIP-368)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from tests.integration.gateway.conftest import RunningGateway
from tests.integration.gateway.team_journey import ADMIN, GROUP_TIMINGS, Team, make_team, take
from tests.integration.gateway.test_proxy import create_topics
from tests.support.ports import free_port

pytestmark = [pytest.mark.broker]

def deliver(p: Producer, topic: str, value: bytes, timeout: float = 8) -> Any:
    """The delivery error of one record (None: written)."""
    outcome: list[Any] = []
    p.produce(topic, value, on_delivery=lambda err, msg: outcome.append(err))
    p.flush(timeout)
    assert outcome, "not delivered in time"
    return outcome[0]


def test_clients_reconnect_after_the_gateway_restarts(
    runtime_factory: Callable[..., RunningGateway], kafka_broker: str
) -> None:
    # the same listener and node ports, the same database: what a restarted `kgov gateway` has
    where = {"listen": f"127.0.0.1:{free_port()}", "name": "restarted",
             "gateway": {"node_port_base": free_port() - 111}}
    team = make_team(runtime_factory, **where)
    topic, group = team.name("orders"), team.name("orders-app")
    create_topics(kafka_broker, topic)
    team.acls("--producer", "--topic", topic)
    team.acls("--consumer", "--topic", topic, "--group", group)
    p = Producer({**team.conf(), "enable.idempotence": True, "reconnect.backoff.max.ms": 200})
    c = Consumer({**team.conf(), "group.id": group, **GROUP_TIMINGS, "reconnect.backoff.max.ms": 200})
    try:
        c.subscribe([topic])
        assert deliver(p, topic, b"before") is None
        assert take(c, 1) == [b"before"]
        team.gw.__exit__(None, None, None)
        again = make_team(runtime_factory, prefix=team.prefix, **where)
        assert again.gw.bootstrap == team.gw.bootstrap
        # both clients come back by themselves: same producer (its idempotent session too), same member
        assert deliver(p, topic, b"after", timeout=15) is None
        assert take(c, 1, timeout=15) == [b"after"]
        logins = [e for e in again.gw.memory.events  # type: ignore[attr-defined]
                  if str(e.type) == "io.kgov.authentication" and e.data["result"]["success"]]
        assert logins, "the clients logged in again on the new gateway"
    finally:
        c.close()


def test_removing_a_credential_keeps_open_sessions_and_refuses_new_logins(team: Team, kafka_broker: str) -> None:
    topic = team.name("orders")
    create_topics(kafka_broker, topic)
    team.acls("--producer", "--topic", topic)
    connected = Producer(team.conf())
    assert deliver(connected, topic, b"while allowed") is None
    team.gw.runtime.credentials.delete_scram_credential("orders-app", "SCRAM-SHA-512", actor=ADMIN)
    # Kafka authenticates a connection once; with connections.max.reauth.ms = 0 (the default) nothing
    # asks it to log in again (KIP-368), so the open session goes on
    assert deliver(connected, topic, b"after the credential went") is None
    errors: list[KafkaError] = []
    newcomer = Producer({**team.conf(), "error_cb": errors.append})
    deadline = time.monotonic() + 8
    while not errors and time.monotonic() < deadline:
        newcomer.poll(0.1)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION
    failures = [e for e in team.gw.memory.events  # type: ignore[attr-defined]
                if str(e.type) == "io.kgov.authentication" and not e.data["result"]["success"]]
    # the same answer as a wrong password or an unknown user: nothing says the user existed
    assert failures and failures[-1].data["result"]["reason"] == "Authentication failed: Invalid user credentials"
