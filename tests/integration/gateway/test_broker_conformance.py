"""Where the gateway's client side follows Kafka's broker on edge cases reviews found: a second
ApiVersions before the SaslHandshake, ACL requests naming UNKNOWN elements, oversized frames during an
exchange, a failure answer behind requests still with the upstream, IPv6 addresses in Java's form.
Raw frames through the production assembly, in front of Tansu."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from gateway.codec import SPECS
from tests.integration.gateway.conftest import RawClient, RunningGateway
from tests.integration.gateway.test_proxy import create_topics
from tests.integration.gateway.test_sasl import PASSWORD, grant_prefix, scram_login
from tests.integration.gateway.test_sasl_reauth import DELAY_MS, auth_events, gateway, handshake, logged_in

pytestmark = [pytest.mark.broker]


def api_versions() -> Any:
    return SPECS[18].request[3](client_software_name="raw", client_software_version="1")


# -- 1. a second ApiVersions before the SaslHandshake ---------------------------------------------


def test_a_second_api_versions_before_the_handshake_closes_at_once_unanswered(
    runtime_factory: Callable[..., RunningGateway], caplog: pytest.LogCaptureFixture,
) -> None:
    # A failure delay that a prompt close cannot be mistaken for, even on a loaded machine.
    delay_s = 3.0
    gw = gateway(runtime_factory, delay_ms=int(delay_s * 1000))
    caplog.set_level(logging.WARNING, logger="kgov.gateway")
    raw = RawClient(gw.bootstrap)
    # KIP-511: a too-new ApiVersions (v99, header v2) is answered UNSUPPORTED_VERSION in a v0 response
    # and does not count (Kafka stays in HANDSHAKE_OR_VERSIONS_REQUEST): the client's retry is answered.
    raw.sock.sendall(b"".join([(14).to_bytes(4, "big"), (18).to_bytes(2, "big"), (99).to_bytes(2, "big"),
                               (7).to_bytes(4, "big"), (3).to_bytes(2, "big"), b"raw", b"\x00"]))
    assert raw.receive(18, 0).error_code == 35
    assert raw.call(18, 3, api_versions()).error_code == 0
    events_before = len(auth_events(gw))
    started = time.monotonic()
    raw.send(18, 3, api_versions())
    # Kafka: IllegalStateException in handleApiVersionsRequest, closed by the Selector at once.
    assert raw.closed_by_peer(timeout=10)
    assert time.monotonic() - started < delay_s / 2  # not an authentication failure: no delay
    raw.close()
    assert len(auth_events(gw)) == events_before
    assert "Unexpected ApiVersions request received during SASL authentication state HANDSHAKE_REQUEST" in caplog.text
    # One ApiVersions, then the login, then as many as the client likes (KafkaApis answers them).
    raw = RawClient(gw.bootstrap)
    assert raw.call(18, 3, api_versions()).error_code == 0
    assert scram_login(raw, "SCRAM-SHA-512", "alice", PASSWORD).error_code == 0
    assert [raw.call(18, 3, api_versions()).error_code for _ in range(2)] == [0, 0]
    raw.close()


# -- 2. ACL requests naming UNKNOWN elements ------------------------------------------------------


def _creation(**codes: int) -> Any:
    cls = SPECS[30].request[3].AclCreation
    fields = {"resource_type": 2, "resource_pattern_type": 3, "operation": 3, "permission_type": 3, **codes}
    return cls(resource_name="unknown-acl", principal="User:carol", host="*", **fields)


@pytest.mark.parametrize("field", ["resource_type", "resource_pattern_type", "operation", "permission_type"])
def test_create_acls_naming_an_unknown_element_closes_the_connection_and_creates_nothing(
    runtime_factory: Callable[..., RunningGateway], field: str,
) -> None:
    gw = gateway(runtime_factory)
    grant_admin(gw)
    raw = logged_in(gw)
    # Kafka's CreateAclsRequest.validate refuses the whole request while parsing: no answer at all,
    # not even for the valid creation sent with it.
    raw.send(30, 3, SPECS[30].request[3](creations=[_creation(), _creation(**{field: 0})]))
    assert raw.closed_by_peer()
    raw.close()
    assert not [a for a in gw.runtime.authorizer.describe_acls(everything()) if a.principal == "User:carol"]


def _describe(**codes: int) -> Any:
    fields = {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1, "permission_type": 1, **codes}
    return SPECS[29].request[3](resource_name_filter=None, principal_filter=None, host_filter=None, **fields)


def test_describe_acls_naming_an_unknown_element_closes_the_connection_an_unassigned_code_does_not(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    gw = gateway(runtime_factory)
    grant_admin(gw)
    raw = logged_in(gw)
    # Kafka's CreateAclsRequest compares the wire code with UNKNOWN's (0) only: 99 reaches the
    # authorizer, which refuses that ACL alone.
    answer = raw.call(30, 3, SPECS[30].request[3](creations=[_creation(operation=99)]))
    assert [r.error_code for r in answer.results] == [42]
    # An unassigned code is no parse error in Kafka: its filter (fromCode: UNKNOWN) matches nothing.
    unassigned = raw.call(29, 3, _describe(operation=99))
    assert (unassigned.error_code, unassigned.resources) == (0, [])
    assert raw.call(29, 3, _describe()).resources  # the admin's own ACL
    raw.send(29, 3, _describe(pattern_type_filter=0))
    assert raw.closed_by_peer()
    raw.close()


def test_delete_acls_with_a_filter_naming_an_unknown_or_unassigned_code_closes_and_deletes_nothing(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    gw = gateway(runtime_factory)
    grant_admin(gw)
    before = gw.runtime.authorizer.describe_acls(everything())
    flt = SPECS[31].request[3].DeleteAclsFilter
    match_all = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                 "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
    for bad in ({"permission_type": 0}, {"resource_type_filter": 99}):
        raw = logged_in(gw)
        # DeleteAclsRequest checks after fromCode: 99 is UNKNOWN there too. The match-all filter sent
        # with it is not applied either.
        raw.send(31, 3, SPECS[31].request[3](filters=[flt(**match_all), flt(**{**match_all, **bad})]))
        assert raw.closed_by_peer()
        raw.close()
    assert gw.runtime.authorizer.describe_acls(everything()) == before


def grant_admin(gw: RunningGateway) -> None:
    from authz.model import Acl, Operation, PatternType, Permission, ResourceType
    from tests.integration.gateway.test_sasl_reauth import ADMIN

    acl = Acl(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:alice", "*", Operation.ALL,
              Permission.ALLOW)
    assert gw.runtime.authorizer.create_acls([acl], actor=ADMIN) == [None]


def everything() -> Any:
    from authz.model import AclFilter, Operation, PatternType, Permission, ResourceType

    return AclFilter(ResourceType.ANY, None, PatternType.ANY, None, None, Operation.ANY, Permission.ANY)


# -- 3. an oversized frame during an exchange -----------------------------------------------------


def test_an_oversized_frame_during_a_reauthentication_is_an_audited_failure_closed_after_the_delay(
    runtime_factory: Callable[..., RunningGateway], caplog: pytest.LogCaptureFixture,
) -> None:
    gw = gateway(runtime_factory)
    caplog.set_level(logging.INFO, logger="kgov.gateway")
    raw = logged_in(gw)
    assert handshake(raw) == 0
    started = time.monotonic()
    raw.sock.sendall((600_000).to_bytes(4, "big"))  # over sasl.server.max.receive.size (512 KiB)
    assert raw.closed_by_peer(timeout=5)
    assert time.monotonic() - started >= DELAY_MS / 1000 * 0.9  # Kafka's delayed close
    raw.close()
    failure = auth_events(gw)[-1]
    assert failure["result"] == {
        "success": False, "reauthentication": True,
        "reason": "Failing SASL authentication due to invalid receive size: "
                  "frame of 600000 bytes exceeds the maximum of 524288"}
    assert failure["authenticationInfo"] == {"principal": "User:alice", "mechanism": "SCRAM-SHA-512"}
    assert "Failed re-authentication with" in caplog.text
    assert "(Failing SASL authentication due to invalid receive size)" in caplog.text


def test_an_oversized_or_negative_frame_before_the_first_login_is_a_failed_authentication(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    gw = gateway(runtime_factory)
    for size in (600_000, -1):
        raw = RawClient(gw.bootstrap)
        started = time.monotonic()
        raw.sock.sendall(size.to_bytes(4, "big", signed=True))
        assert raw.closed_by_peer(timeout=5)
        assert time.monotonic() - started >= DELAY_MS / 1000 * 0.9
        raw.close()
        failure = auth_events(gw)[-1]
        assert failure["result"]["success"] is False and failure["result"]["reauthentication"] is False
        assert failure["result"]["reason"].startswith("Failing SASL authentication due to invalid receive size")
        assert failure["authenticationInfo"]["principal"] is None


# -- 4. a failure answer behind requests still with the upstream ----------------------------------


def test_the_failure_answer_follows_earlier_answers_still_with_the_upstream_then_the_connection_closes(
    runtime_factory: Callable[..., RunningGateway], kafka_broker: str,
) -> None:
    gw = gateway(runtime_factory)
    topic = f"reauth-wait-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    grant_prefix(gw, "User:alice", "reauth-")
    raw = logged_in(gw)
    fetch = SPECS[1].request[12]
    partition = fetch.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                last_fetched_epoch=-1, log_start_offset=-1,
                                                partition_max_bytes=1 << 20)
    # An empty topic and min_bytes it cannot reach: the upstream holds the Fetch for max_wait_ms,
    # longer than the failure delay of the re-authentication pipelined behind it.
    wait_ms = DELAY_MS * 4
    started = time.monotonic()
    fetch_id = raw.send(1, 12, fetch(replica_id=-1, max_wait_ms=wait_ms, min_bytes=1 << 20, max_bytes=1 << 20,
                                     isolation_level=0, session_id=0, session_epoch=-1,
                                     topics=[fetch.FetchTopic(topic=topic, partitions=[partition])],
                                     forgotten_topics_data=[], rack_id=""))
    handshake_id = raw.send(17, 1, SPECS[17].request[1](mechanism="GSSAPI"))  # not enabled: 33, delayed
    fetched = raw.receive(1, 12)
    assert time.monotonic() - started >= wait_ms / 1000 * 0.9  # it really waited on the upstream
    assert [(t.topic, [p.error_code for p in t.partitions]) for t in fetched.responses] == [(topic, [0])]
    refused = raw.receive(17, 1)
    assert refused.error_code == 33
    assert (fetch_id, handshake_id) == (raw.correlation - 1, raw.correlation)
    assert raw.closed_by_peer()
    raw.close()
    assert auth_events(gw)[-1]["result"]["reauthentication"] is True


# -- 5. IPv6 client addresses in Java's form ------------------------------------------------------


def test_ipv6_addresses_in_connection_ids_and_audit_events_are_javas(
    runtime_factory: Callable[..., RunningGateway], caplog: pytest.LogCaptureFixture,
) -> None:
    gw = gateway(runtime_factory, listen="[::1]:0")
    caplog.set_level(logging.INFO, logger="kgov.gateway")
    raw = RawClient(f"::1:{gw.gateway.port}")
    assert scram_login(raw, "SCRAM-SHA-512", "alice", PASSWORD).error_code == 0
    assert raw.call(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False)).brokers
    raw.close()
    bad = RawClient(f"::1:{gw.gateway.port}")
    assert scram_login(bad, "SCRAM-SHA-512", "alice", "wrong").error_code == 58
    bad.close()
    # InetAddress.getHostAddress(): eight groups, no `::`; Python's sockets say `::1`.
    addresses = {e["requestMetadata"]["clientAddress"] for e in auth_events(gw)}
    assert addresses == {"0:0:0:0:0:0:0:1"}
    connections = {e.data["connection"] for e in gw.memory.events if str(e.type) == "io.kgov.request"}
    assert connections and all(c.startswith(f"0:0:0:0:0:0:0:1:{gw.gateway.port}-0:0:0:0:0:0:0:1:")
                               for c in connections)
    failed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Failed authentication with")]
    assert len(failed) == 1 and "-0:0:0:0:0:0:0:1:" in failed[0] and "::1" not in failed[0]
