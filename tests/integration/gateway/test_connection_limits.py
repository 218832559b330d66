"""max_connections_per_ip / max_connections (Kafka's max.connections.per.ip, max.connections): real
sockets from several loopback addresses to the gateway in front of Tansu."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

import pytest

from gateway.codec import SPECS
from gateway.proxy import ClientConnection, Services
from tests.integration.gateway.conftest import (
    AuthzFixture,
    RawClient,
    RunningGateway,
    upstream_of,
    wait_until,
)

pytestmark = [pytest.mark.broker]


class From(RawClient):
    """A RawClient whose connection comes from `source` (any 127.x.y.z is the loopback on Linux)."""

    def __init__(self, bootstrap: str, source: str) -> None:
        self.sock = socket.create_connection(upstream_of(bootstrap), timeout=10, source_address=(source, 0))
        self.correlation = 0


def served(client: RawClient) -> bool:
    """Whether the gateway answers an ApiVersions on this connection (False: it closed it)."""
    try:
        response = client.call(18, 3, SPECS[18].request[3](client_software_name="t", client_software_version="1"))
    except OSError:
        return False
    return bool(response.error_code == 0)


@pytest.fixture
def upstream_starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The client addresses of the connections that started an upstream connection."""
    started: list[str] = []
    original = ClientConnection._start_upstream

    def counting(self: ClientConnection) -> None:
        if not self.upstream_started:
            started.append(self.client_host)
        original(self)

    monkeypatch.setattr(ClientConnection, "_start_upstream", counting)
    return started


def test_connections_over_the_per_ip_limit_are_closed_at_once_without_an_upstream_connection(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
    upstream_starts: list[str], caplog: pytest.LogCaptureFixture,
) -> None:
    gw = gateway_factory(Services(authz_factory(allow_everyone_if_no_acl_found=True).service),
                         max_connections_per_ip=2, max_connections_per_ip_overrides={"127.0.0.3": 3})
    limits = gw.gateway.connection_limits
    with caplog.at_level(logging.INFO, logger="kgov.gateway"):
        first = [From(gw.bootstrap, "127.0.0.1") for _ in range(2)]
        assert all(served(c) for c in first)
        extra = From(gw.bootstrap, "127.0.0.1")
        assert extra.closed_by_peer()
        # Another address has its own count, and an override its own limit.
        other = [From(gw.bootstrap, "127.0.0.2") for _ in range(2)]
        overridden = [From(gw.bootstrap, "127.0.0.3") for _ in range(4)]
        assert [served(c) for c in other + overridden] == [True, True, True, True, True, False]
    assert "Rejected connection from 127.0.0.1, address already has the configured maximum of 2 connections." in (
        caplog.messages)
    assert "Rejected connection from 127.0.0.3, address already has the configured maximum of 3 connections." in (
        caplog.messages)
    # Refused connections opened nothing upstream (a PLAINTEXT listener connects upstream at accept).
    assert sorted(upstream_starts) == ["127.0.0.1"] * 2 + ["127.0.0.2"] * 2 + ["127.0.0.3"] * 3
    assert (limits.count("127.0.0.1"), limits.total, limits.refused) == (2, 7, 2)
    # A connection counts until it closes: once one is gone, the address may connect again.
    first[0].close()
    wait_until(lambda: limits.count("127.0.0.1") == 1)
    again = From(gw.bootstrap, "127.0.0.1")
    assert served(again)
    for c in [*first[1:], extra, *other, *overridden, again]:
        c.close()
    wait_until(lambda: limits.total == 0)


def test_connections_over_the_gateway_wide_limit_are_closed_at_once(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
    upstream_starts: list[str], caplog: pytest.LogCaptureFixture,
) -> None:
    gw = gateway_factory(Services(authz_factory(allow_everyone_if_no_acl_found=True).service),
                         max_connections=3, max_connections_per_ip=2)
    limits = gw.gateway.connection_limits
    with caplog.at_level(logging.INFO, logger="kgov.gateway"):
        open_ = [From(gw.bootstrap, "127.0.0.1"), From(gw.bootstrap, "127.0.0.1"), From(gw.bootstrap, "127.0.0.2")]
        assert all(served(c) for c in open_)
        # Under its address's limit, over the gateway's.
        refused = [From(gw.bootstrap, "127.0.0.2"), From(gw.bootstrap, "127.0.0.4")]
        assert not any(served(c) for c in refused)
    assert caplog.messages.count("Rejected connection from 127.0.0.2, the gateway already has the configured maximum "
                                 "of 3 connections (gateway.max_connections).") == 1
    # The operator hears of it once (not once per refusal): every new client is affected.
    assert [m for m in caplog.messages if m.startswith("refusing new connections")] == [
        "refusing new connections: 3 are open (gateway.max_connections = 3); 1 refused so far"]
    assert len(upstream_starts) == 3
    open_[2].close()
    wait_until(lambda: limits.total == 2)
    late = From(gw.bootstrap, "127.0.0.4")
    assert served(late)
    for c in [*open_, *refused, late]:
        c.close()
