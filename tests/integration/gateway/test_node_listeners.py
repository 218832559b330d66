"""A per-node listener opened just before the gateway closes is closed with it.

`Gateway._open_node_listener` binds the node's port at once and serves it from a task. A close that
cancelled that task before it ran, or while `create_server` was in its own `await`, left the port
listening after the gateway had closed: accepting (or holding in the backlog) connections nobody
would serve, and a socket nobody closed. Driven step by step on one event loop: no broker, no sleep."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import pytest

from gateway.proxy import Gateway, GatewayOptions, Services
from tests.integration.gateway.conftest import AuthzFixture
from tests.support.ports import free_port

NODE = 1


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.mark.parametrize("steps_before_close", [0, 1], ids=["task-not-yet-run", "task-inside-create-server"])
def test_a_node_listener_opened_just_before_close_does_not_outlive_the_gateway(
    steps_before_close: int, authz_factory: Callable[..., AuthzFixture], refused_port: int,
) -> None:
    dead_upstream = ("127.0.0.1", refused_port)  # the start's version check gives up at once
    port = free_port()
    options = GatewayOptions("127.0.0.1", 0, dead_upstream, address_mode="per-node", node_port_base=port - NODE)
    gateway = Gateway(options, Services(authz_factory(allow_everyone_if_no_acl_found=True).service))

    async def scenario() -> None:
        await gateway.start()
        gateway._open_node_listener(NODE, ("127.0.0.1", 9092))  # what a Metadata answer naming the node does
        assert gateway._node_ports == {NODE: port}  # bound (a port taken meanwhile fails here, not later)
        for _ in range(steps_before_close):
            await asyncio.sleep(0)  # the serving task runs up to its first suspension
        await gateway.close()

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(scenario())
        assert _refused(port)
    finally:
        loop.close()
