"""The request-time quota (`request_percentage`) on the answers the gateway gives itself: real sockets, the
gateway in front of Tansu.

As Kafka's `RequestHandlerHelper.sendResponseMaybeThrottle` (KIP-219) does for every request version, an
answer over the quota goes out at once with `throttle_time_ms` set to the mute it brings, and the
connection is muted after it. Before the login (ApiVersions, the SASL exchange) nothing is charged: Kafka's
`SaslServerAuthenticator` serves those outside `KafkaApis` and its quotas."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from audit.sinks import MemorySink
from gateway.admin_apis import AclApis
from gateway.codec import SPECS
from gateway.proxy import Services
from gateway.quota_model import REQUEST_PERCENTAGE, EntityPart, QuotaEntity
from gateway.quotas import QuotaEnforcer
from tests.integration.gateway.conftest import AuthzFixture, RawClient, RunningGateway, wait_until
from tests.integration.gateway.test_admin_offload import acl_creation
from tests.integration.gateway.test_sasl_offload import AUTH, GatedPlain, plain_handshake, plain_token

pytestmark = [pytest.mark.broker]

# The longest mute of the request quota: one quota window (QuotaEnforcer's default window, 1 s), as Kafka's
# ClientRequestQuotaManager bounds it.
LONGEST_MUTE_MS = 1000


def zero_request_quota(entity: QuotaEntity) -> QuotaEnforcer:
    """A request-time quota of 0 for `entity`: any time the gateway spends on its requests is over it, so
    each of them brings the longest mute."""
    quotas = QuotaEnforcer()
    quotas.set_configs({entity: {REQUEST_PERCENTAGE: 0.0}})
    return quotas


def api_versions() -> Any:
    return SPECS[18].request[3](client_software_name="kgov-test", client_software_version="1")


def test_an_admin_answer_carries_the_throttle_time_of_the_mute_it_brings(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
) -> None:
    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    audit = MemorySink()
    gw = gateway_factory(Services(authz.service, audit=audit, local_handlers={30: AclApis(authz.service).create},
                                  quotas=zero_request_quota(QuotaEntity(client_id=EntityPart.of("throttled")))))
    throttled, free = RawClient(gw.bootstrap), RawClient(gw.bootstrap)
    try:
        cid = throttled.send(30, 3, acl_creation("quota-topic"), client_id="throttled")
        created = throttled.receive(30, 3)
        assert [r.error_code for r in created.results] == [0]  # done, and answered at once ...
        assert created.throttle_time_ms == LONGEST_MUTE_MS  # ... telling the client the mute that follows
        # ApiVersions after the login (no SASL here) is charged too, its answer (v1+) carrying its mute.
        throttled.send(18, 3, api_versions(), client_id="throttled")
        assert throttled.receive(18, 3).throttle_time_ms == LONGEST_MUTE_MS
        # Another client id has no quota: neither charged nor muted.
        free.send(30, 3, acl_creation("free-topic"), client_id="free")
        assert free.receive(30, 3).throttle_time_ms == 0
    finally:
        throttled.close()
        free.close()
    wait_until(lambda: len([e for e in audit.events if e.data["requestHeader"]["requestApiKey"] == 30]) == 2)
    logged = {(e.data["requestHeader"]["clientId"], e.data["requestHeader"]["correlationId"]): e.data["throttleTimeMs"]
              for e in audit.events if e.data["requestHeader"]["requestApiKey"] == 30}
    assert logged[("throttled", cid)] == LONGEST_MUTE_MS  # the request log says what the answer said
    assert logged[("free", 1)] == 0


def plain_gateway(authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
                  quotas: QuotaEnforcer) -> RunningGateway:
    """A SASL_PLAINTEXT gateway with `quotas` whose PLAIN logins all succeed at once."""
    gate = threading.Event()
    gate.set()  # no step waits
    return gateway_factory(
        Services(authz_factory(allow_everyone_if_no_acl_found=True).service, quotas=quotas),
        security_protocol="SASL_PLAINTEXT", sasl_mechanisms=("PLAIN",),
        mechanism_factory=lambda name, address, *, reauthenticating=None: GatedPlain(gate),
    )


def muted_until(gw: RunningGateway) -> float:
    """When the quota mute of the gateway's one connection ends (0.0: never muted), read on its loop."""
    (conn,) = gw.gateway._connections

    async def read() -> float:
        return conn.muted_until

    result: float = gw.call(read())
    return result


def test_nothing_before_the_login_is_charged_and_api_versions_after_it_is(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
) -> None:
    # Both the unauthenticated principal and the user logging in have a request quota of 0.
    quotas = zero_request_quota(QuotaEntity(user=EntityPart.of("ANONYMOUS")))
    quotas.set_configs({**quotas.configs, QuotaEntity(user=EntityPart.of("fast")): {REQUEST_PERCENTAGE: 0.0}})
    gw = plain_gateway(authz_factory, gateway_factory, quotas)
    raw = RawClient(gw.bootstrap)
    try:
        assert raw.call(18, 3, api_versions()).throttle_time_ms == 0
        plain_handshake(raw)
        assert raw.call(36, 1, AUTH(auth_bytes=plain_token("fast", "pw"))).error_code == 0
        # Kafka's authenticator serves these outside the request quota: none of them muted the connection.
        assert muted_until(gw) == 0.0
        # After the login ApiVersions goes through KafkaApis: charged, and its answer carries its mute.
        assert raw.call(18, 3, api_versions()).throttle_time_ms == LONGEST_MUTE_MS
        assert muted_until(gw) > 0.0
    finally:
        raw.close()


@pytest.mark.parametrize("api_key", [17, 36], ids=["SaslHandshake", "SaslAuthenticate"])
def test_a_sasl_request_after_the_login_that_begins_no_exchange_is_charged(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway], api_key: int,
) -> None:
    """Kafka's SocketServer hands a SaslHandshake that cannot begin a re-authentication (the session does not
    expire here) and any SaslAuthenticate on an authenticated connection to KafkaApis
    (`handleSaslHandshakeRequest`, `handleSaslAuthenticateRequest`): answered ILLEGAL_SASL_STATE through
    `sendResponseMaybeThrottle`, so charged to the request quota. Not charged, a client could send them in a
    loop beyond its quota."""
    gw = plain_gateway(authz_factory, gateway_factory, zero_request_quota(QuotaEntity(user=EntityPart.of("fast"))))
    raw = RawClient(gw.bootstrap)
    try:
        plain_handshake(raw)
        assert raw.call(36, 1, AUTH(auth_bytes=plain_token("fast", "pw"))).error_code == 0
        assert muted_until(gw) == 0.0  # the login was not charged
        if api_key == 17:
            answer = raw.call(17, 1, SPECS[17].request[1](mechanism="PLAIN"))
        else:
            answer = raw.call(36, 1, AUTH(auth_bytes=plain_token("fast", "pw")))
        assert answer.error_code == 34  # ILLEGAL_SASL_STATE, KafkaApis' answer: the session goes on
        assert muted_until(gw) > 0.0  # charged, and over the quota: muted
        assert raw.call(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False)).brokers
    finally:
        raw.close()
