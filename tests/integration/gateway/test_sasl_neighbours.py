"""The failed-login limits (`sasl.limiter`) through the real gateway in front of Tansu: clients that share
one address (here all on 127.0.0.1, as behind a NAT or on one Kubernetes node) do not lock each other out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from authz.model import Principal
from gateway.codec import SPECS
from sasl.limiter import NAME_REFUSAL
from sasl.scram import MECHANISMS, ScramClient
from tests.integration.gateway.conftest import RawClient, RunningGateway

pytestmark = [pytest.mark.broker]

ADMIN = Principal("User", "admin")
AUTH = SPECS[36].request[1]


def login(gw: RunningGateway, user: str, password: str) -> Any:
    """One SCRAM-SHA-256 login on a new connection: the last SaslAuthenticate answer."""
    raw = RawClient(gw.bootstrap)
    try:
        assert raw.call(17, 1, SPECS[17].request[1](mechanism="SCRAM-SHA-256")).error_code == 0
        client = ScramClient(MECHANISMS["SCRAM-SHA-256"], user, password)
        first = raw.call(36, 1, AUTH(auth_bytes=client.first_message()))
        if first.error_code != 0:
            return first
        final = raw.call(36, 1, AUTH(auth_bytes=client.final_message(bytes(first.auth_bytes))))
        if final.error_code == 0:
            client.verify_server_final(bytes(final.auth_bytes))
            metadata = raw.call(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False))
            assert metadata.brokers  # served by Tansu through the gateway, as this principal
        return final
    finally:
        raw.close()


def test_a_client_with_a_stale_password_does_not_lock_out_another_at_its_address(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    gw = runtime_factory(sasl={"failed_authentication_delay_ms": 0, "max_failed_attempts_per_source": 3,
                               "max_failed_attempts_per_address": 8})
    creds = gw.runtime.credentials
    creds.set_scram_credential("stale-app", "SCRAM-SHA-256", "new-password", actor=ADMIN)
    creds.set_scram_credential("other-app", "SCRAM-SHA-256", "other-password", actor=ADMIN)
    # librdkafka retries its login on every reconnect: far past both limits, refused unchecked from the 4th
    answers = [login(gw, "stale-app", "old-password") for _ in range(12)]
    assert [a.error_code for a in answers] == [58] * 12
    assert login(gw, "stale-app", "new-password").error_code == 58  # that name is over its limit here
    assert login(gw, "other-app", "other-password").error_code == 0  # the neighbour logs in and is served
    reasons = [e.data["result"]["reason"] for e in gw.memory.events  # type: ignore[attr-defined]
               if str(e.type) == "io.kgov.authentication" and e.data["result"]["success"] is False]
    # the client is told Kafka's one message; the audit trail says why (the refusals were not checked)
    assert reasons[3:] == [NAME_REFUSAL] * 10 and len(reasons) == 13
