"""Real clients through the gateway to a real Tansu broker (PLAINTEXT listener, User:ANONYMOUS)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from authz.model import Acl, Operation, PatternType, Permission, ResourceType
from gateway.codec import SPECS
from gateway.proxy import Services
from tests.integration.gateway.conftest import AuthzFixture, RawClient, RunningGateway

pytestmark = [pytest.mark.broker]

ANON = "User:ANONYMOUS"
FAST_GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest"}


def create_topics(bootstrap: str, *names: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).values():
        f.result(20)


def produce(bootstrap: str, topic: str, *values: bytes) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(20) == 0


def consume(bootstrap: str, topic: str, count: int, timeout: float = 30, **conf: Any) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}", **FAST_GROUP, **conf})
    c.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append(m.value())
    finally:
        c.close()
    return out


def acl(rtype: ResourceType, name: str, op: Operation, *, principal: str = ANON,
        pattern: PatternType = PatternType.LITERAL) -> Acl:
    return Acl(rtype, name, pattern, principal, "*", op, Permission.ALLOW)


@pytest.fixture
def open_gateway(authz_factory: Callable[..., AuthzFixture],
                 gateway_factory: Callable[..., RunningGateway]) -> tuple[RunningGateway, AuthzFixture]:
    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    return gateway_factory(Services(authz.service, audit=authz.audit)), authz


def test_confluent_kafka_producer_and_consumer_work_through_the_gateway(
    open_gateway: tuple[RunningGateway, AuthzFixture],
) -> None:
    gw, _ = open_gateway
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topics(gw.bootstrap, topic, partitions=3)
    p = Producer({"bootstrap.servers": gw.bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(50):
        p.produce(topic, key=str(i).encode(), value=f"v{i}".encode())
    assert p.flush(20) == 0
    values = consume(gw.bootstrap, topic, 50)
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(50))


def test_kafka_python_producer_and_consumer_work_through_the_gateway(
    open_gateway: tuple[RunningGateway, AuthzFixture],
) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    gw, _ = open_gateway
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    create_topics(gw.bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=gw.bootstrap, acks=1)
    for i in range(10):
        producer.send(topic, f"m{i}".encode()).get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=gw.bootstrap, group_id=f"g-{uuid.uuid4().hex[:6]}",
                             auto_offset_reset="earliest", consumer_timeout_ms=8000,
                             session_timeout_ms=6000, heartbeat_interval_ms=500)
    got = [m.value for m in consumer]
    consumer.close()
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(10))


def test_clients_only_ever_see_gateway_addresses(
    open_gateway: tuple[RunningGateway, AuthzFixture], kafka_broker: str,
) -> None:
    gw, _ = open_gateway
    metadata = AdminClient({"bootstrap.servers": gw.bootstrap}).list_topics(timeout=10)
    upstream_port = int(kafka_broker.rsplit(":", 1)[1])
    ports = {b.port for b in metadata.brokers.values()}
    assert upstream_port not in ports
    assert ports == {gw.gateway.brokers.plan.advertised_port(b) for b in metadata.brokers}
    raw = RawClient(gw.bootstrap)
    fc = SPECS[10].request
    v3 = raw.call(10, 3, fc[3](key="some-group", key_type=0))
    assert v3.error_code == 0 and v3.port in ports
    v4 = raw.call(10, 4, fc[4](key_type=0, coordinator_keys=["g1", "g2"]))
    assert {c.port for c in v4.coordinators} <= ports and len(v4.coordinators) == 2
    cluster = raw.call(60, 0, SPECS[60].request[0]())
    assert {b.port for b in cluster.brokers} == ports
    raw.close()


def test_api_versions_are_the_intersection_with_what_the_gateway_parses(
    open_gateway: tuple[RunningGateway, AuthzFixture],
) -> None:
    gw, _ = open_gateway
    raw = RawClient(gw.bootstrap)
    resp = raw.call(18, 3, SPECS[18].request[3](client_software_name="t", client_software_version="1"))
    versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    upstream = gw.gateway.upstream_versions
    assert upstream is not None
    assert versions[0][1] == min(upstream[0][1], 13)  # Tansu 0.6 stops at Produce v11
    assert versions[1][1] == min(upstream[1][1], 15)  # Fetch v16+ answers node endpoints (KIP-951)
    for key, (lo, hi) in versions.items():
        assert lo <= hi
        if key in upstream and key != 18:
            assert upstream[key][0] <= lo and hi <= upstream[key][1]
    assert 17 not in versions and 36 not in versions  # no SASL on a PLAINTEXT listener
    # KIP-511: a too-new ApiVersions gets UNSUPPORTED_VERSION and our range, in a v0 response.
    api_versions = SPECS[18].request
    raw.send(18, 3, api_versions[3](client_software_name="t", client_software_version="1"))
    raw.close()
    raw = RawClient(gw.bootstrap)
    frame = bytearray(api_versions[3](client_software_name="t", client_software_version="1").encode(version=3))
    header = (18).to_bytes(2, "big") + (99).to_bytes(2, "big") + (5).to_bytes(4, "big") + b"\xff\xff\x00"
    raw.sock.sendall((len(header) + len(frame)).to_bytes(4, "big") + header + bytes(frame))
    size = int.from_bytes(raw._exactly(4), "big")
    body = raw._exactly(size)
    from gateway.codec import decode_response

    old = decode_response(SPECS[18], 0, body)
    assert old.error_code == 35 and [(k.api_key, k.max_version) for k in old.api_keys] == [(18, 4)]
    raw.close()


def test_partial_denial_answers_denied_topics_with_29_and_forwards_the_rest(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway], kafka_broker: str,
) -> None:
    authz = authz_factory()
    ok, bad = f"ok-{uuid.uuid4().hex[:8]}", f"no-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, ok, bad)
    authz.allow(acl(ResourceType.TOPIC, ok, Operation.WRITE))
    gw = gateway_factory(Services(authz.service, audit=authz.audit))
    produce = SPECS[0].request[9]
    topic = produce.TopicProduceData
    from confluent_kafka import Producer as _P  # noqa: F401  (only to make sure librdkafka is importable)

    records = _one_record_batch(b"hello")
    request = produce(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        topic(name=ok, partition_data=[topic.PartitionProduceData(index=0, records=records)]),
        topic(name=bad, partition_data=[topic.PartitionProduceData(index=0, records=records)]),
    ])
    raw = RawClient(gw.bootstrap)
    response = raw.call(0, 9, request)
    raw.close()
    codes = {t.name: [p.error_code for p in t.partition_responses] for t in response.responses}
    assert codes == {ok: [0], bad: [29]}
    denied = [e for e in authz.audit.events if e.data.get("authorizationInfo", {}).get("granted") is False]
    assert [e.data["authorizationInfo"]["resourceName"] for e in denied] == [bad]
    # the allowed record really reached the broker
    assert consume(kafka_broker, ok, 1) == [b"hello"]


def _one_record_batch(value: bytes) -> bytes:
    """A v2 record batch with one record, built the way librdkafka/kafka-python do."""
    from kafka.record.memory_records import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1024)
    builder.append(timestamp=None, key=None, value=value, headers=[])
    builder.close()
    return bytes(builder.buffer())


def test_denied_produce_fails_with_topic_authorization_failed_while_allowed_succeeds(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway], kafka_broker: str,
) -> None:
    authz = authz_factory()
    ok, bad = f"ok-{uuid.uuid4().hex[:8]}", f"no-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, ok, bad)
    authz.allow(
        acl(ResourceType.TOPIC, ok, Operation.WRITE),
        acl(ResourceType.CLUSTER, "kafka-cluster", Operation.IDEMPOTENT_WRITE),
    )
    gw = gateway_factory(Services(authz.service, audit=authz.audit))
    results: dict[str, KafkaError | None] = {}
    p = Producer({"bootstrap.servers": gw.bootstrap, "message.timeout.ms": 10000})
    p.produce(ok, b"yes", on_delivery=lambda err, msg: results.__setitem__("ok", err))
    p.produce(bad, b"no", on_delivery=lambda err, msg: results.__setitem__("bad", err))
    p.flush(20)
    assert results["ok"] is None
    assert results["bad"] is not None and results["bad"].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_metadata_lists_only_topics_the_principal_may_describe(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway], kafka_broker: str,
) -> None:
    authz = authz_factory()
    prefix = f"vis-{uuid.uuid4().hex[:6]}-"
    create_topics(kafka_broker, prefix + "a", f"hidden-{uuid.uuid4().hex[:6]}")
    authz.allow(acl(ResourceType.TOPIC, prefix, Operation.DESCRIBE, pattern=PatternType.PREFIXED))
    gw = gateway_factory(Services(authz.service, audit=authz.audit))
    topics = set(AdminClient({"bootstrap.servers": gw.bootstrap}).list_topics(timeout=10).topics)
    assert topics == {prefix + "a"}
    # filtering is not a denial: nothing was logged as denied
    assert not [e for e in authz.audit.events if e.data.get("authorizationInfo", {}).get("granted") is False]


def test_one_request_log_event_per_request(open_gateway: tuple[RunningGateway, AuthzFixture]) -> None:
    gw, authz = open_gateway
    raw = RawClient(gw.bootstrap)
    raw.call(18, 3, SPECS[18].request[3](client_software_name="probe-client", client_software_version="9.9"))
    raw.call(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False))
    raw.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        logs = [e for e in authz.audit.events if str(e.type) == "io.kgov.request"]
        if len(logs) >= 2:
            break
        time.sleep(0.05)
    api_versions, metadata = logs[-2].data, logs[-1].data
    assert api_versions["requestHeader"]["requestApiKeyName"] == "API_VERSIONS"
    assert api_versions["forwardedUpstream"] is False
    assert metadata["requestHeader"] == {"requestApiKey": 3, "requestApiVersion": 12, "correlationId": 2,
                                         "clientId": "raw", "requestApiKeyName": "METADATA"}
    assert metadata["principal"] == ANON and metadata["securityProtocol"] == "PLAINTEXT"
    assert metadata["clientInformation"] == {"softwareName": "probe-client", "softwareVersion": "9.9"}
    assert metadata["responseBytes"] > 0 and metadata["requestBytes"] > 0 and metadata["forwardedUpstream"]


def test_malformed_input_closes_only_that_connection(open_gateway: tuple[RunningGateway, AuthzFixture]) -> None:
    gw, _ = open_gateway
    healthy = RawClient(gw.bootstrap)
    healthy.call(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False))
    for garbage in (
        b"\xff\xff\xff\xff",  # negative size
        (200 * 1024 * 1024).to_bytes(4, "big"),  # above max_request_bytes
        (10).to_bytes(4, "big") + b"\x03\xe7\x00\x00\x00\x00\x00\x01\xff\xff",  # unknown api key 999
        (10).to_bytes(4, "big") + b"\x00\x04\x00\x00\x00\x00\x00\x01\xff\xff",  # LeaderAndIsr: not for clients
        (12).to_bytes(4, "big") + b"\x00\x03\x00\x0c\x00\x00\x00\x01\xff\xff\x05\x07",  # truncated Metadata
    ):
        bad = RawClient(gw.bootstrap)
        bad.sock.sendall(garbage)
        assert bad.closed_by_peer(), garbage
        bad.close()
    resp = healthy.call(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False))
    assert resp.brokers
    healthy.close()


def test_per_node_listeners_open_at_start_for_clients_with_cached_metadata(
    open_gateway: tuple[RunningGateway, AuthzFixture],
) -> None:
    gw, _ = open_gateway
    ports = dict(gw.gateway._node_ports)
    assert ports, "the gateway learns the brokers from the upstream at start"
    [(node, port)] = ports.items()
    assert port == gw.gateway.brokers.plan.advertised_port(node)
    raw = RawClient(f"127.0.0.1:{port}")  # straight to the node's port, no bootstrap first
    resp = raw.call(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False))
    assert [b.port for b in resp.brokers] == [port]
    raw.close()


def test_idle_connections_are_closed(authz_factory: Callable[..., AuthzFixture],
                                     gateway_factory: Callable[..., RunningGateway]) -> None:
    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    idle_timeout_s = 2.0  # against a request every ~0.15 s from `busy`: a stall of a loaded machine is no idle
    gw = gateway_factory(Services(authz.service), idle_timeout_s=idle_timeout_s)
    busy, idle = RawClient(gw.bootstrap), RawClient(gw.bootstrap)
    started = time.monotonic()
    while True:  # `busy` talks until `idle` is closed
        busy.call(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False))
        try:
            assert idle.closed_by_peer(timeout=0.15), "the idle connection was sent something"
            break
        except TimeoutError:  # still open
            assert time.monotonic() - started < 3 * idle_timeout_s, "the idle connection was not closed"
    assert 0.9 * idle_timeout_s <= time.monotonic() - started
    busy.call(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False))  # still served
    busy.close()
    idle.close()


def test_admin_client_sees_the_principals_authorized_operations(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway], kafka_broker: str,
) -> None:
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation

    authz = authz_factory()
    topic = f"ops-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    authz.allow(acl(ResourceType.TOPIC, topic, Operation.DESCRIBE), acl(ResourceType.TOPIC, topic, Operation.READ))
    gw = gateway_factory(Services(authz.service, audit=authz.audit))
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    [future] = admin.describe_topics(TopicCollection([topic]), request_timeout=10,
                                     include_authorized_operations=True).values()
    described = future.result(10)
    assert set(described.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}


def test_a_client_that_never_reads_cannot_grow_the_gateways_buffers(
    open_gateway: tuple[RunningGateway, AuthzFixture],
) -> None:
    gw, _ = open_gateway
    raw = RawClient(gw.bootstrap)
    raw.sock.setblocking(False)
    request = SPECS[18].request[3](client_software_name="x", client_software_version="1")
    request.with_header(correlation_id=1, client_id="flood")
    frame = bytes(request.encode(version=3, header=True, framed=True))
    burst = frame * 2000
    sent = 0
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and sent < 200 * len(burst):
        try:
            sent += raw.sock.send(burst)
        except BlockingIOError:
            time.sleep(0.01)  # the gateway stopped reading us: TCP pushes back
    assert sent < 200 * len(burst), "the gateway kept reading a client that never reads"

    async def buffered() -> list[int]:
        return [c.transport.get_write_buffer_size() for c in gw.gateway._connections if c.transport]

    assert max(gw.call(buffered())) <= 2 * 1024 * 1024
    raw.close()
