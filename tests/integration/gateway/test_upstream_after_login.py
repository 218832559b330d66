"""On a SASL listener the gateway opens a client's upstream connection only once the client has logged
in: before that it answers ApiVersions and the exchange itself, so a client that never logs in cannot
make it open upstream connections or log in upstream. Raw frames through the production assembly, in
front of Tansu."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from gateway.codec import SPECS
from tests.integration.gateway.conftest import RawClient, RunningGateway
from tests.integration.gateway.test_sasl import PASSWORD, scram_login
from tests.integration.gateway.test_sasl_reauth import gateway, metadata

pytestmark = [pytest.mark.broker]


def _connection(gw: RunningGateway, raw: RawClient) -> Any:
    port = raw.sock.getsockname()[1]
    deadline = time.monotonic() + 30
    while not (found := [c for c in list(gw.gateway._connections) if c.peer[1] == port]):
        assert time.monotonic() < deadline, "the gateway did not accept the connection"
        time.sleep(0.01)
    return found[0]


def test_no_upstream_connection_before_the_login_nor_after_a_failed_one(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    gw = gateway(runtime_factory)
    raw = RawClient(gw.bootstrap)
    conn = _connection(gw, raw)
    versions = raw.call(18, 3, SPECS[18].request[3](client_software_name="raw", client_software_version="1"))
    assert versions.error_code == 0 and len(versions.api_keys) > 5
    time.sleep(0.3)
    assert conn.upstream is None
    assert scram_login(raw, "SCRAM-SHA-512", "alice", "wrong-password").error_code == 58
    time.sleep(0.3)
    assert conn.upstream is None
    raw.close()


def test_the_upstream_opens_after_the_login_and_requests_flow(runtime_factory: Callable[..., RunningGateway]) -> None:
    gw = gateway(runtime_factory)
    raw = RawClient(gw.bootstrap)
    conn = _connection(gw, raw)
    assert scram_login(raw, "SCRAM-SHA-512", "alice", PASSWORD).error_code == 0
    answer = raw.call(3, 12, metadata())  # sent at once: it waits for the upstream connection, then flows
    assert len(answer.brokers) >= 1
    assert conn.upstream is not None
    raw.close()
