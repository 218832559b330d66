"""KIP-848 consumer groups through the gateway, in front of a scripted Kafka 4.x broker.

Tansu 0.6 has neither ConsumerGroupHeartbeat (68) nor ConsumerGroupDescribe (69), so the upstream here is
a small scripted broker on a real socket (as in test_upstream_reauth_order.py) that speaks real frames: it
advertises the two APIs (or not), answers Metadata (with topic ids), FindCoordinator, the heartbeat (a
member id, epoch 1 and every partition of the subscribed topics) and the describe (groups scripted per
test), and records every request it received. Clients speak real frames built from the schemas
(`RawClient`), and librdkafka with `group.protocol=consumer`.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from authz.model import Acl, Operation, PatternType, Permission, ResourceType
from gateway.codec import API_VERSIONS_KEY, SPECS, decode_request, encode_response, parse_request_header
from gateway.proxy import GatewayOptions, Services
from tests.integration.gateway.conftest import AuthzFixture, RawClient, RunningGateway, wait_until
from tests.support.sockets import recv_frame, serve_each_connection

ANON = "User:ANONYMOUS"
METADATA, FIND_COORDINATOR, OFFSET_FETCH, HEARTBEAT_848, DESCRIBE_848 = 3, 10, 9, 68, 69
TOPICS = {"orders": uuid.UUID("0f6b3a52-8d0e-4c55-9a7e-3b1f7f2a0c01"),
          "secret": uuid.UUID("5d2c9e11-7a44-4b0b-8f3e-c6a1d2e3f402")}
HIDDEN_GROUP_MESSAGE = "The group has described topic(s) that the client is not authorized to describe."


class Kafka4Upstream:
    """A one-node Kafka 4.x stand-in. `versions` is what its ApiVersions advertises; `received` lists
    (api key, decoded request) in arrival order; `described` maps a group id to the DescribedGroup
    the broker answers for it."""

    def __init__(self, versions: dict[int, tuple[int, int]]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.versions = versions
        self.received: list[tuple[int, Any]] = []
        self.described: dict[str, Any] = {}
        self._conns: list[socket.socket] = []
        serve_each_connection(self.listener, self._serve, self._conns)

    def keys_received(self, key: int) -> list[Any]:
        return [r for k, r in list(self.received) if k == key]

    def _serve(self, conn: socket.socket) -> None:
        try:
            while True:
                frame = recv_frame(conn)
                h = parse_request_header(frame)
                spec = SPECS[h.api_key]
                request = decode_request(spec, h, frame)
                if h.api_key != API_VERSIONS_KEY:
                    self.received.append((h.api_key, request))
                body = self._answer(h.api_key, h.api_version, request)
                if body is not None:
                    conn.sendall(encode_response(spec, h.api_version, h.correlation_id, body))
        except (ConnectionError, OSError):
            pass
        finally:
            conn.close()

    def _answer(self, key: int, version: int, request: Any) -> Any:
        spec = SPECS[key]
        resp = spec.response
        if key == API_VERSIONS_KEY:
            keys = [resp.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                    for k, (lo, hi) in sorted(self.versions.items())]
            return resp(error_code=0, api_keys=keys, throttle_time_ms=0)
        if key == METADATA:
            broker = resp.MetadataResponseBroker(node_id=0, host="127.0.0.1", port=self.port, rack=None)
            part = resp.MetadataResponseTopic.MetadataResponsePartition
            asked = None if request.topics is None else {t.name or t.topic_id for t in request.topics}
            topics = [resp.MetadataResponseTopic(
                error_code=0, name=name, topic_id=tid, is_internal=False,
                partitions=[part(error_code=0, partition_index=0, leader_id=0, leader_epoch=0, replica_nodes=[0],
                                 isr_nodes=[0], offline_replicas=[])])
                for name, tid in TOPICS.items() if asked is None or name in asked or tid in asked]
            return resp(throttle_time_ms=0, brokers=[broker], cluster_id="scripted", controller_id=0, topics=topics)
        if key == FIND_COORDINATOR:
            return resp(throttle_time_ms=0, coordinators=[
                resp.fields["coordinators"].data_class(key=k, node_id=0, host="127.0.0.1", port=self.port,
                                                       error_code=0, error_message=None)
                for k in request.coordinator_keys])
        if key == HEARTBEAT_848:
            assignment_cls = resp.fields["assignment"].data_class
            tp = assignment_cls.fields["topic_partitions"].data_class
            names = request.subscribed_topic_names or []
            return resp(error_code=0, member_id=request.member_id or "member-1", member_epoch=1,
                        heartbeat_interval_ms=500, assignment=assignment_cls(topic_partitions=[
                            tp(topic_id=TOPICS[n], partitions=[0]) for n in names if n in TOPICS]))
        if key == DESCRIBE_848:
            group_cls = resp.fields["groups"].data_class
            return resp(groups=[self.described.get(g) or group_cls(group_id=g, error_code=69,  # GROUP_ID_NOT_FOUND
                                                                   error_message=f"Group {g} not found.")
                                for g in request.group_ids])
        if key == OFFSET_FETCH:
            return None  # librdkafka's next step after its assignment: not needed here, left unanswered
        raise AssertionError(f"unexpected request {spec.name}")

    def close(self) -> None:
        self.listener.close()
        for c in self._conns:
            c.close()


BASE_VERSIONS = {METADATA: (0, 12), FIND_COORDINATOR: (0, 6), OFFSET_FETCH: (0, 9)}


@pytest.fixture
def upstream() -> Iterator[Kafka4Upstream]:
    server = Kafka4Upstream({**BASE_VERSIONS, HEARTBEAT_848: (0, 1), DESCRIBE_848: (0, 1)})
    yield server
    server.close()


def acl(rtype: ResourceType, name: str, op: Operation) -> Acl:
    return Acl(rtype, name, PatternType.LITERAL, ANON, "*", op, Permission.ALLOW)


def gateway(upstream: Kafka4Upstream, authz: AuthzFixture) -> RunningGateway:
    options = GatewayOptions("127.0.0.1", 0, ("127.0.0.1", upstream.port), address_mode="single")
    return RunningGateway(options, Services(authz.service, audit=authz.audit))


def heartbeat(group: str, names: list[str] | None, regex: str | None = None, version: int = 1) -> Any:
    values: dict[str, Any] = {"group_id": group, "member_id": "m-" + group, "member_epoch": 0,
                              "rebalance_timeout_ms": 30000, "subscribed_topic_names": names, "topic_partitions": []}
    if version >= 1:
        values["subscribed_topic_regex"] = regex
    return SPECS[HEARTBEAT_848].request(**values)


def denials(authz: AuthzFixture) -> list[tuple[str, str, str]]:
    return [(e.data["authorizationInfo"]["resourceType"], e.data["authorizationInfo"]["resourceName"],
             e.data["authorizationInfo"]["operation"])
            for e in list(authz.audit.events) if e.data.get("authorizationInfo", {}).get("granted") is False]


def test_kip848_apis_are_advertised_only_when_the_upstream_has_them_with_the_versions_both_have(
    authz_factory: Callable[..., AuthzFixture],
) -> None:
    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    for advertised, expected in (
        ({HEARTBEAT_848: (0, 1), DESCRIBE_848: (0, 0)}, {HEARTBEAT_848: (0, 1), DESCRIBE_848: (0, 0)}),
        ({HEARTBEAT_848: (0, 7), DESCRIBE_848: (1, 9)}, {HEARTBEAT_848: (0, 1), DESCRIBE_848: (1, 1)}),
        ({}, {}),  # Tansu 0.6: neither
    ):
        server = Kafka4Upstream({**BASE_VERSIONS, **advertised})
        try:
            with gateway(server, authz) as gw:
                raw = RawClient(gw.bootstrap)
                answer = raw.call(API_VERSIONS_KEY, 3, SPECS[API_VERSIONS_KEY].request[3](
                    client_software_name="probe", client_software_version="1"))
                raw.close()
        finally:
            server.close()
        got = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys
               if k.api_key in (HEARTBEAT_848, DESCRIBE_848)}
        assert got == expected


def test_heartbeat_needs_group_read_then_topic_describe_on_every_subscribed_name(
    upstream: Kafka4Upstream, authz_factory: Callable[..., AuthzFixture],
) -> None:
    authz = authz_factory()
    authz.allow(acl(ResourceType.GROUP, "team", Operation.READ), acl(ResourceType.TOPIC, "orders", Operation.DESCRIBE))
    with gateway(upstream, authz) as gw:
        raw = RawClient(gw.bootstrap)
        denied_group = raw.call(HEARTBEAT_848, 1, heartbeat("other", ["orders"]))
        denied_topic = raw.call(HEARTBEAT_848, 1, heartbeat("team", ["orders", "secret"]))
        joined = raw.call(HEARTBEAT_848, 1, heartbeat("team", ["orders"]))
        unchanged = raw.call(HEARTBEAT_848, 0, heartbeat("team", None, version=0))
        raw.close()
    assert (denied_group.error_code, denied_group.assignment) == (30, None)
    assert (denied_topic.error_code, denied_topic.error_message, denied_topic.assignment) == (29, None, None)
    assert joined.error_code == 0 and joined.member_id == "m-team" and joined.member_epoch == 1
    assert [(tp.topic_id, tp.partitions) for tp in joined.assignment.topic_partitions] == [(TOPICS["orders"], [0])]
    assert unchanged.error_code == 0
    # nothing denied reached the broker: only the two allowed heartbeats, as the client sent them
    forwarded = upstream.keys_received(HEARTBEAT_848)
    assert [(r.group_id, r.subscribed_topic_names) for r in forwarded] == [("team", ["orders"]), ("team", None)]
    assert denials(authz) == [("Group", "other", "Read"), ("Topic", "secret", "Describe")]


def test_heartbeat_with_a_regex_subscription_is_refused_and_never_reaches_the_broker(
    upstream: Kafka4Upstream, authz_factory: Callable[..., AuthzFixture],
) -> None:
    authz = authz_factory()
    authz.allow(acl(ResourceType.GROUP, "team", Operation.READ))
    with gateway(upstream, authz) as gw:
        raw = RawClient(gw.bootstrap)
        refused = raw.call(HEARTBEAT_848, 1, heartbeat("team", None, regex="^(orders|secret)$"))
        raw.close()
    assert refused.error_code == 42 and refused.assignment is None
    assert "SubscribedTopicRegex" in refused.error_message
    assert upstream.keys_received(HEARTBEAT_848) == []


def described_group(group: str, *assigned: str) -> Any:
    cls = SPECS[DESCRIBE_848].response.fields["groups"].data_class
    member_cls = cls.fields["members"].data_class
    assignment_cls = member_cls.fields["assignment"].data_class
    tp = assignment_cls.fields["topic_partitions"].data_class
    assignment = assignment_cls(topic_partitions=[tp(topic_id=TOPICS[n], topic_name=n, partitions=[0])
                                                  for n in assigned])
    member = member_cls(member_id="m1", member_epoch=1, client_id="c", client_host="/127.0.0.1",
                        subscribed_topic_names=list(assigned), assignment=assignment,
                        target_assignment=assignment_cls(topic_partitions=[]), member_type=1)
    return cls(group_id=group, group_state="Stable", group_epoch=1, assignment_epoch=1, assignor_name="uniform",
               members=[member], authorized_operations=0x7FFFFFF8)  # the gateway's own (broad) rights


def test_describe_answers_denied_groups_in_place_and_hides_groups_assigned_undescribable_topics(
    upstream: Kafka4Upstream, authz_factory: Callable[..., AuthzFixture],
) -> None:
    authz = authz_factory()
    authz.allow(acl(ResourceType.GROUP, "team", Operation.DESCRIBE), acl(ResourceType.GROUP, "mixed", Operation.DESCRIBE),
                acl(ResourceType.TOPIC, "orders", Operation.DESCRIBE))
    upstream.described = {"team": described_group("team", "orders"), "mixed": described_group("mixed", "orders", "secret"),
                          "theirs": described_group("theirs", "secret")}
    with gateway(upstream, authz) as gw:
        raw = RawClient(gw.bootstrap)
        answer = raw.call(DESCRIBE_848, 1, SPECS[DESCRIBE_848].request(
            group_ids=["theirs", "team", "mixed"], include_authorized_operations=True))
        raw.close()
    rows = [(g.group_id, g.error_code, g.error_message, len(g.members)) for g in answer.groups]
    assert rows == [("theirs", 30, None, 0), ("team", 0, None, 1), ("mixed", 29, HIDDEN_GROUP_MESSAGE, 0)]
    team = answer.groups[1]
    assert [tp.topic_name for tp in team.members[0].assignment.topic_partitions] == ["orders"]
    assert team.authorized_operations == 1 << int(Operation.DESCRIBE)  # the principal's, not the gateway's
    # the denied group was never asked of the broker
    assert [r.group_ids for r in upstream.keys_received(DESCRIBE_848)] == [["team", "mixed"]]
    assert ("Group", "theirs", "Describe") in denials(authz) and ("Topic", "secret", "Describe") in denials(authz)


def test_kip848_requests_are_in_the_request_log(
    upstream: Kafka4Upstream, authz_factory: Callable[..., AuthzFixture],
) -> None:
    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    with gateway(upstream, authz) as gw:
        raw = RawClient(gw.bootstrap)
        raw.call(HEARTBEAT_848, 1, heartbeat("g", ["orders"]))
        raw.call(DESCRIBE_848, 0, SPECS[DESCRIBE_848].request(group_ids=["g"], include_authorized_operations=False))
        raw.close()

        def logged() -> list[str]:
            return [e.data["requestHeader"]["requestApiKeyName"] for e in list(authz.audit.events)
                    if str(e.type) == "io.kgov.request"]

        wait_until(lambda: len(logged()) >= 2)
    assert logged() == ["CONSUMER_GROUP_HEARTBEAT", "CONSUMER_GROUP_DESCRIBE"]


def _librdkafka_consumer(bootstrap: str, group: str, topic: str) -> tuple[Any, list[list[str]], list[Any]]:
    from confluent_kafka import Consumer

    errors: list[Any] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                         "error_cb": errors.append, "enable.auto.commit": False})
    assigned: list[list[str]] = []
    consumer.subscribe([topic], on_assign=lambda _c, parts: assigned.append([p.topic for p in parts]))
    return consumer, assigned, errors


def _poll_until(consumer: Any, done: Callable[[list[Any]], bool], timeout: float = 20) -> list[Any]:
    """Polls until `done(errors so far)`; returns the errors `poll` gave."""
    events: list[Any] = []
    deadline = time.monotonic() + timeout
    while not done(events) and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is not None:
            events.append(message.error())
    return events


def test_librdkafka_consumer_protocol_joins_through_the_gateway_and_is_refused_a_denied_topic(
    upstream: Kafka4Upstream, authz_factory: Callable[..., AuthzFixture],
) -> None:
    from confluent_kafka import KafkaError

    authz = authz_factory()
    authz.allow(acl(ResourceType.GROUP, "team", Operation.READ), acl(ResourceType.TOPIC, "orders", Operation.DESCRIBE))
    with gateway(upstream, authz) as gw:
        consumer, assigned, _errors = _librdkafka_consumer(gw.bootstrap, "team", "orders")
        try:
            _poll_until(consumer, lambda _events: bool(assigned))
        finally:
            consumer.close()
        assert assigned == [["orders"]]
        sent = upstream.keys_received(HEARTBEAT_848)
        assert sent and sent[0].group_id == "team" and sent[0].subscribed_topic_names == ["orders"]
        assert sent[0].subscribed_topic_regex == ""  # librdkafka names no expression this way: forwarded

        count = len(upstream.keys_received(HEARTBEAT_848))
        consumer, assigned, errors = _librdkafka_consumer(gw.bootstrap, "team", "secret")
        try:
            events = _poll_until(consumer, lambda events: bool(errors or events))
        finally:
            consumer.close()
    codes = {e.code() for e in [*errors, *events]}
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in codes, [*errors, *events]
    assert assigned == []
    assert all(r.subscribed_topic_names != ["secret"] for r in upstream.keys_received(HEARTBEAT_848)[count:])


def test_librdkafka_regex_subscription_fails_loudly_through_the_gateway(
    upstream: Kafka4Upstream, authz_factory: Callable[..., AuthzFixture],
) -> None:
    """librdkafka sends a `^` subscription as SubscribedTopicRegex; the gateway's INVALID_REQUEST is fatal
    to it (`_FATAL` naming "Invalid request"), so the application learns at once instead of waiting."""
    from confluent_kafka import KafkaError

    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    with gateway(upstream, authz) as gw:
        consumer, assigned, errors = _librdkafka_consumer(gw.bootstrap, "team", "^ord.*")
        try:
            events = _poll_until(consumer, lambda events: bool(errors or events))
        finally:
            consumer.close()
    fatal = [e for e in [*errors, *events] if e.code() == KafkaError._FATAL]
    assert fatal and "Invalid request" in fatal[0].str(), [*errors, *events]
    assert assigned == [] and upstream.keys_received(HEARTBEAT_848) == []
