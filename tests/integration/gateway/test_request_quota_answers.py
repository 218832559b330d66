"""The request-time quota (`request_percentage`) on the answers the gateway gives itself: real sockets, the
gateway in front of Tansu.

As Kafka's `RequestHandlerHelper.sendResponseMaybeThrottle` (KIP-219) does for every request version, an
answer over the quota goes out at once with `throttle_time_ms` set to the mute it brings, and the
connection is muted after it. Before the login (ApiVersions, the SASL exchange) nothing is charged: Kafka's
`SaslServerAuthenticator` serves those outside `KafkaApis` and its quotas."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from audit.sinks import MemorySink
from gateway.admin_apis import AclApis
from gateway.codec import SPECS
from gateway.proxy import Services
from gateway.quota_model import PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, EntityPart, QuotaEntity
from gateway.quotas import QuotaEnforcer
from tests.integration.gateway.conftest import AuthzFixture, RawClient, RunningGateway, wait_until
from tests.integration.gateway.test_admin_offload import acl_creation
from tests.integration.gateway.test_proxy import create_topics, produce
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


# -- forwarded answers (KafkaApis: the request quota on every API, the larger throttle on Produce/Fetch) --

def metadata() -> Any:
    return SPECS[3].request[12](topics=[], allow_auto_topic_creation=False)


def seconds_until_answered(raw: RawClient) -> float:
    """Sends a Metadata (through the gateway to the broker) and answers how long its answer took: while
    the connection is muted the gateway does not read it."""
    started = time.monotonic()
    raw.send(3, 12, metadata(), client_id="other")
    raw.receive(3, 12)
    return time.monotonic() - started


def test_a_forwarded_answer_carries_the_request_throttle_and_the_mute_follows_it(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
) -> None:
    audit = MemorySink()
    gw = gateway_factory(Services(authz_factory(allow_everyone_if_no_acl_found=True).service, audit=audit,
                                  quotas=zero_request_quota(QuotaEntity(client_id=EntityPart.of("throttled")))))
    throttled, free = RawClient(gw.bootstrap), RawClient(gw.bootstrap)
    try:
        assert seconds_until_answered(throttled) < 0.5  # "other" has no quota: the upstream answers at once
        cid = throttled.send(3, 12, metadata(), client_id="throttled")
        answer = throttled.receive(3, 12)
        assert answer.brokers and answer.throttle_time_ms == LONGEST_MUTE_MS  # the broker's answer, throttled
        # ... and the connection is not read for that long after it (the mute began when it was forwarded).
        assert 0.8 <= seconds_until_answered(throttled) < 2.0
        free.send(3, 12, metadata(), client_id="free")
        assert free.receive(3, 12).throttle_time_ms == 0
    finally:
        throttled.close()
        free.close()
    wait_until(lambda: any(e.data["requestHeader"]["correlationId"] == cid
                           and e.data["requestHeader"]["clientId"] == "throttled" for e in audit.events))
    (logged,) = [e.data for e in audit.events if e.data["requestHeader"]["clientId"] == "throttled"]
    assert logged["throttleTimeMs"] == LONGEST_MUTE_MS


def produce_request(topic: str, value: bytes) -> Any:
    from tests.integration.gateway.test_proxy import _one_record_batch

    produce = SPECS[0].request[9]
    data = produce.TopicProduceData
    return produce(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        data(name=topic, partition_data=[data.PartitionProduceData(index=0, records=_one_record_batch(value))])])


@pytest.mark.parametrize("bandwidth_ms", [2500, 700], ids=["bandwidth-larger", "request-larger"])
def test_a_produce_answer_carries_the_larger_throttle_and_the_mute_is_that_one_not_the_sum(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway], kafka_broker: str,
    bandwidth_ms: int,
) -> None:
    topic = f"rq-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    request = produce_request(topic, b"p" * 2000)
    request.with_header(correlation_id=1, client_id="throttled")
    size = len(bytes(request.encode(version=9, header=True, framed=True))) - 4
    # Kafka's byte-rate throttle for one request of `size` bytes in a fresh sensor (11 windows of 1 s, padded
    # to 10 s): (size / 10 - bound) / bound * 10,000 ms; the bound that gives `bandwidth_ms`:
    bound = size / 10 / (1 + bandwidth_ms / 10_000)
    quotas = zero_request_quota(QuotaEntity(client_id=EntityPart.of("throttled")))  # request throttle: 1000 ms
    entity = QuotaEntity(client_id=EntityPart.of("throttled"))
    quotas.set_configs({entity: {**quotas.configs[entity], PRODUCER_BYTE_RATE: bound}})
    gw = gateway_factory(Services(authz_factory(allow_everyone_if_no_acl_found=True).service, quotas=quotas))
    raw = RawClient(gw.bootstrap)
    try:
        assert seconds_until_answered(raw) < 0.5
        raw.send(0, 9, request, client_id="throttled")
        answer = raw.receive(0, 9)
        assert [p.error_code for t in answer.responses for p in t.partition_responses] == [0]  # produced
        expected = max(bandwidth_ms, LONGEST_MUTE_MS)
        assert abs(answer.throttle_time_ms - expected) <= 50, answer.throttle_time_ms
        # One mute of the larger throttle: the two never add up (that would be `expected + 700` or more; the
        # margin above is for a loaded machine's round trip through the gateway and the broker).
        muted = seconds_until_answered(raw)
        assert expected / 1000 - 0.25 <= muted < expected / 1000 + 0.6, muted
    finally:
        raw.close()


def fetch_from_start(topic: str, max_bytes: int = 1_000_000) -> Any:
    """A sessionless Fetch v12 of partition 0 of `topic` from offset 0."""
    fetch = SPECS[1].request[12]
    t = fetch.FetchTopic
    return fetch(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
                 session_id=0, session_epoch=-1,
                 topics=[t(topic=topic, partitions=[t.FetchPartition(partition=0, fetch_offset=0,
                                                                       partition_max_bytes=max_bytes)])])


def test_a_fetch_over_the_request_quota_is_answered_empty_with_its_throttle(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway], kafka_broker: str,
) -> None:
    """Kafka's handleFetchRequest answers a fetch over either quota with no data (`getThrottledResponse`)."""
    topic = f"rqf-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    produce(kafka_broker, topic, b"a" * 100, b"b" * 100)
    gw = gateway_factory(Services(authz_factory(allow_everyone_if_no_acl_found=True).service,
                                  quotas=zero_request_quota(QuotaEntity(client_id=EntityPart.of("throttled")))))
    request = fetch_from_start(topic)
    raw = RawClient(gw.bootstrap)
    try:
        raw.send(1, 12, request, client_id="unthrottled")
        fetched = raw.receive(1, 12)
        assert fetched.throttle_time_ms == 0 and len(fetched.responses[0].partitions[0].records) > 200
        raw.send(1, 12, request, client_id="throttled")
        throttled = raw.receive(1, 12)
        assert throttled.throttle_time_ms == LONGEST_MUTE_MS and throttled.responses == []
        assert 0.8 <= seconds_until_answered(raw) < 2.0
    finally:
        raw.close()


def test_a_real_producer_hears_the_request_throttle_and_is_held_by_the_mute(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway], kafka_broker: str,
) -> None:
    """librdkafka reports each answer's throttle time (`throttle_cb`) but does not wait itself (no KIP-219
    client-side throttling): the gateway's mute is what spaces its produce requests."""
    topic = f"rqp-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    gw = gateway_factory(Services(authz_factory(allow_everyone_if_no_acl_found=True).service,
                                  quotas=zero_request_quota(QuotaEntity(client_id=EntityPart.of("rq-producer")))))
    throttles: list[int] = []
    delivered: list[float] = []
    producer = Producer({"bootstrap.servers": gw.bootstrap, "client.id": "rq-producer", "linger.ms": 0,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time),
                         "on_delivery": lambda err, msg: delivered.append(time.monotonic()) if err is None else None})
    for i in range(3):
        producer.produce(topic, f"m{i}".encode(), partition=0)
        assert producer.flush(20) == 0
    producer.poll(0)
    assert len(delivered) == 3
    assert throttles and set(throttles) == {LONGEST_MUTE_MS / 1000}  # throttle_cb says seconds
    # Each produce request waits for the mute the previous answer announced.
    gaps = [b - a for a, b in itertools.pairwise(delivered)]
    assert all(gap >= 0.8 for gap in gaps), gaps


@pytest.mark.parametrize(("acks", "byte_rate"), [(0, None), (1, None), (0, 10.0)],
                         ids=["acks0", "acks1", "acks0-over-byte-rate"])
def test_a_produce_with_acks_0_is_exempt_from_the_request_quota_but_not_from_the_byte_rate(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway], kafka_broker: str,
    acks: int, byte_rate: float | None,
) -> None:
    """KafkaApis.handleProduceRequest: "the request quota is not enforced if acks == 0" (its request
    throttle is 0 and `sendNoOpResponseExemptThrottle` records the time as exempt), while the produce byte
    rate is recorded and mutes as for any produce request. With a request quota of 0, an acks=0 produce
    leaves the connection unmuted (acks=1, the contrast, mutes it); over its byte rate it is muted."""
    topic = f"rq0-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    entity = QuotaEntity(client_id=EntityPart.of("throttled"))
    quotas = zero_request_quota(entity)
    if byte_rate is not None:
        quotas.set_configs({entity: {**quotas.configs[entity], PRODUCER_BYTE_RATE: byte_rate}})
    gw = gateway_factory(Services(authz_factory(allow_everyone_if_no_acl_found=True).service, quotas=quotas))
    raw = RawClient(gw.bootstrap)
    try:
        assert seconds_until_answered(raw) < 0.5
        request = produce_request(topic, b"z")
        request.acks = acks
        raw.send(0, 9, request, client_id="throttled")
        if acks:
            assert raw.receive(0, 9).throttle_time_ms == LONGEST_MUTE_MS
        if acks == 0 and byte_rate is None:
            assert seconds_until_answered(raw) < 0.5  # read and forwarded at once: nothing muted
            assert muted_until(gw) == 0.0
        else:
            assert muted_until(gw) > 0.0
            assert seconds_until_answered(raw) >= 0.8
    finally:
        raw.close()
    wait_until(lambda: produced(kafka_broker, topic) == 1)


def produced(bootstrap: str, topic: str) -> int:
    """Partition 0's end offset, read straight from the broker."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()
