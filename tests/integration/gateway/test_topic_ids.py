"""Fetch v13-v15 (topics named by id, KIP-516) through the gateway to a real Tansu broker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError

from authz.model import Operation, ResourceType
from gateway.codec import SPECS
from gateway.proxy import Services
from gateway.topic_ids import ListingGate
from tests.integration.gateway.conftest import AuthzFixture, RawClient, RunningGateway
from tests.integration.gateway.test_proxy import FAST_GROUP, acl, create_topics, produce

pytestmark = [pytest.mark.broker]


def topic_ids(bootstrap: str) -> dict[str, uuid.UUID]:
    raw = RawClient(bootstrap)
    md = raw.call(3, 12, SPECS[3].request[12](topics=None, allow_auto_topic_creation=False))
    raw.close()
    return {t.name: t.topic_id for t in md.topics}


def fetch_by_id(version: int, *ids: uuid.UUID) -> Any:
    cls = SPECS[1].request[version]
    t = cls.FetchTopic
    extra = {"replica_state": cls.ReplicaState(replica_id=-1, replica_epoch=-1)} if version >= 15 else {}
    return cls(max_wait_ms=50, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
               topics=[t(topic_id=i, partitions=[t.FetchPartition(partition=0, fetch_offset=0,
                                                                 partition_max_bytes=1 << 20)]) for i in ids],
               forgotten_topics_data=[], rack_id="", **extra)


def outcome(response: Any) -> dict[uuid.UUID, tuple[int, bool]]:
    """topic id -> (error code, records returned) of partition 0."""
    return {t.topic_id: (t.partitions[0].error_code, bool(t.partitions[0].records)) for t in response.responses}


def denied_names(authz: AuthzFixture) -> list[str]:
    return [e.data["authorizationInfo"]["resourceName"] for e in authz.audit.events
            if e.data.get("authorizationInfo", {}).get("granted") is False]


def fetch_versions(authz: AuthzFixture) -> set[int]:
    return {e.data["requestHeader"]["requestApiVersion"] for e in authz.audit.events
            if str(e.type) == "io.kgov.request" and e.data["requestHeader"]["requestApiKey"] == 1}


def test_fetch_by_id_is_advertised_up_to_v15_when_the_upstream_has_it(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
) -> None:
    gw = gateway_factory(Services(authz_factory(allow_everyone_if_no_acl_found=True).service))
    upstream = gw.gateway.upstream_versions
    assert upstream is not None and upstream[1][1] >= 15 and upstream[3][1] >= 10  # Tansu 0.6: Fetch 17, Metadata 12
    assert dict((k, hi) for k, _lo, hi in gw.gateway.api_versions())[1] == 15
    # An upstream that cannot answer topic ids in Metadata gets no Fetch or Produce by id.
    gw.gateway.upstream_versions = {**upstream, 0: (0, 13), 3: (0, 9)}
    advertised = dict((k, hi) for k, _lo, hi in gw.gateway.api_versions())
    assert (advertised[0], advertised[1]) == (12, 12)
    # A Kafka 4.1-like upstream (Produce v13, Metadata v13) gets Produce v13; Fetch stays at v15.
    gw.gateway.upstream_versions = {**upstream, 0: (0, 13), 1: (4, 18), 3: (0, 13)}
    advertised = dict((k, hi) for k, _lo, hi in gw.gateway.api_versions())
    assert (advertised[0], advertised[1], advertised[3]) == (13, 15, 13)
    gw.gateway.upstream_versions = upstream


def test_librdkafka_consumes_by_topic_id_through_the_gateway_and_a_denied_topic_is_29(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway], kafka_broker: str,
) -> None:
    authz = authz_factory()
    ok, bad = f"ok-{uuid.uuid4().hex[:8]}", f"no-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, ok, bad)
    produce(kafka_broker, ok, b"a", b"b")
    produce(kafka_broker, bad, b"secret")
    group = f"g-{uuid.uuid4().hex[:8]}"
    authz.allow(acl(ResourceType.TOPIC, ok, Operation.READ), acl(ResourceType.TOPIC, bad, Operation.DESCRIBE),
                acl(ResourceType.GROUP, group, Operation.READ))
    gw = gateway_factory(Services(authz.service, audit=authz.audit))
    c = Consumer({"bootstrap.servers": gw.bootstrap, "group.id": group, **FAST_GROUP})
    c.subscribe([ok, bad])
    values: list[bytes] = []
    errors: list[int] = []
    deadline = time.monotonic() + 30
    try:
        while (len(values) < 2 or not errors) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                errors.append(m.error().code())
            else:
                values.append(m.value())
    finally:
        c.close()
    assert sorted(values) == [b"a", b"b"]
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in errors
    versions = fetch_versions(authz)
    assert versions and min(versions) >= 13  # librdkafka 2.16 asks Fetch v16; the gateway offers 15
    assert bad in denied_names(authz) and ok not in denied_names(authz)


def test_raw_fetch_by_id_answers_allowed_denied_and_unknown_ids_as_kafka_does(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway], kafka_broker: str,
) -> None:
    authz = authz_factory()
    ok, bad = f"ok-{uuid.uuid4().hex[:8]}", f"no-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, ok, bad)
    produce(kafka_broker, ok, b"a")
    produce(kafka_broker, bad, b"secret")
    authz.allow(acl(ResourceType.TOPIC, ok, Operation.ALL))
    gw = gateway_factory(Services(authz.service, audit=authz.audit))
    raw = RawClient(gw.bootstrap)
    # The gateway learns the ids from this Metadata answer (bad is filtered out of what the client sees).
    md = raw.call(3, 12, SPECS[3].request[12](topics=None, allow_auto_topic_creation=False))
    assert [t.name for t in md.topics] == [ok]
    ids = topic_ids(kafka_broker)  # the client could not see bad's id; an attacker might have it
    stranger = uuid.uuid4()
    for version in (13, 14, 15):
        got = outcome(raw.call(1, version, fetch_by_id(version, ids[ok], ids[bad], stranger)))
        assert got == {ids[ok]: (0, True), ids[bad]: (29, False), stranger: (100, False)}, version
    raw.close()
    # Only the known, denied name was an authorization failure; the stranger was never checked.
    assert set(denied_names(authz)) == {bad}
    assert gw.gateway.topic_ids.name(stranger) is None


def test_an_id_the_gateway_never_saw_is_resolved_by_asking_the_upstream(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway], kafka_broker: str,
) -> None:
    topic = f"late-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    produce(kafka_broker, topic, b"late")
    gw = gateway_factory(Services(authz_factory(allow_everyone_if_no_acl_found=True).service))
    lengthen_listing_interval(gw)
    # Learned through another gateway node, or before a restart: this gateway never answered it.
    topic_id = topic_ids(kafka_broker)[topic]
    assert gw.gateway.topic_ids.name(topic_id) is None
    raw = RawClient(gw.bootstrap)
    # Pipelined behind the Fetch that waits for the listing: answered after it, in order.
    first = raw.send(1, 13, fetch_by_id(13, topic_id))
    second = raw.send(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False))
    assert outcome(raw.receive(1, 13)) == {topic_id: (0, True)}
    assert raw.receive(3, 12).brokers and second == first + 1
    assert gw.gateway.topic_ids.name(topic_id) == topic
    # An unknown id right after a listing is answered at once (one listing per interval for the whole
    # gateway), not after the interval.
    stranger = uuid.uuid4()
    started = time.monotonic()
    assert outcome(raw.call(1, 13, fetch_by_id(13, stranger))) == {stranger: (100, False)}
    assert time.monotonic() - started < LISTING_INTERVAL_S / 2
    raw.close()


def test_produce_v13_by_id_is_authorized_by_name_and_refused_parts_never_reach_the_upstream(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway], kafka_broker: str,
) -> None:
    # Tansu 0.6 has no Produce v13, so the gateway does not advertise it in front of Tansu; a request
    # naming only refused topics is answered by the gateway alone, which this exercises for real.
    authz = authz_factory()
    bad = f"no-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, bad)
    gw = gateway_factory(Services(authz.service, audit=authz.audit))
    assert dict((k, hi) for k, _lo, hi in gw.gateway.api_versions())[0] == 11
    bad_id, stranger = topic_ids(kafka_broker)[bad], uuid.uuid4()
    cls = SPECS[0].request[13]
    t = cls.TopicProduceData
    request = cls(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        t(topic_id=i, partition_data=[t.PartitionProduceData(index=0, records=b"")]) for i in (bad_id, stranger)])
    raw = RawClient(gw.bootstrap)
    response = raw.call(0, 13, request)  # bad_id was never seen: learned by asking the upstream
    raw.close()
    assert {r.topic_id: [p.error_code for p in r.partition_responses] for r in response.responses} == {
        bad_id: [29], stranger: [100]}
    assert denied_names(authz) == [bad]
    forwarded = [e.data["forwardedUpstream"] for e in authz.audit.events
                 if str(e.type) == "io.kgov.request" and e.data["requestHeader"]["requestApiKey"] == 0]
    assert forwarded == [False]


def test_metadata_v12_by_id_describes_allowed_ids_and_answers_denied_and_unknown_ones_by_id(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway], kafka_broker: str,
) -> None:
    authz = authz_factory()
    ok, bad = f"ok-{uuid.uuid4().hex[:8]}", f"no-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, ok, bad)
    authz.allow(acl(ResourceType.TOPIC, ok, Operation.DESCRIBE))
    gw = gateway_factory(Services(authz.service, audit=authz.audit))
    ids, stranger = topic_ids(kafka_broker), uuid.uuid4()  # none crossed the gateway: it asks the upstream
    cls = SPECS[3].request[12]
    request = cls(topics=[cls.MetadataRequestTopic(name=None, topic_id=i) for i in (ids[ok], ids[bad], stranger)],
                  allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    raw = RawClient(gw.bootstrap)
    response = raw.call(3, 12, request)
    raw.close()
    assert sorted(((t.name or "", t.topic_id, t.error_code, len(t.partitions)) for t in response.topics),
                  key=lambda x: x[2]) == [(ok, ids[ok], 0, 1), ("", ids[bad], 29, 0), ("", stranger, 100, 0)]
    assert denied_names(authz) == [bad]


# The gateway lists at most once per REFRESH_INTERVAL_S (1 s). Tests that tell "within the interval" from
# "after it" give its gate a longer one, so that a loaded machine's pauses stay well inside it.
LISTING_INTERVAL_S = 2.5


def lengthen_listing_interval(gw: RunningGateway) -> None:
    gw.gateway.topic_listing = ListingGate(interval_s=LISTING_INTERVAL_S)


def count_listings(gw: RunningGateway) -> list[int]:
    """Counts the gateway's listings of the upstream's topics as their answers arrive (each listing's
    answer replaces the id map once)."""
    ids = gw.gateway.topic_ids
    answered: list[int] = []
    replace = ids.replace

    def counting(pairs: Any) -> None:
        answered.append(1)
        replace(pairs)

    ids.replace = counting  # type: ignore[method-assign]
    return answered


def test_one_listing_per_second_for_the_whole_gateway_not_per_connection(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
) -> None:
    gw = gateway_factory(Services(authz_factory(allow_everyone_if_no_acl_found=True).service))
    lengthen_listing_interval(gw)
    listings = count_listings(gw)
    first, second = RawClient(gw.bootstrap), RawClient(gw.bootstrap)
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    assert outcome(first.call(1, 13, fetch_by_id(13, a))) == {a: (100, False)}
    assert len(listings) == 1
    # Another connection's unknown id within the interval is answered at once, without a listing: a
    # principal with many connections cannot list the cluster once per connection per interval.
    started = time.monotonic()
    assert outcome(second.call(1, 13, fetch_by_id(13, b))) == {b: (100, False)}
    assert time.monotonic() - started < LISTING_INTERVAL_S / 2 and len(listings) == 1
    time.sleep(LISTING_INTERVAL_S + 0.05)
    assert outcome(second.call(1, 13, fetch_by_id(13, c))) == {c: (100, False)}
    assert len(listings) == 2
    first.close()
    second.close()


def test_misses_on_many_connections_at_once_share_one_listing_and_all_learn_the_id(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway], kafka_broker: str,
) -> None:
    topic = f"flight-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    produce(kafka_broker, topic, b"v")
    gw = gateway_factory(Services(authz_factory(allow_everyone_if_no_acl_found=True).service))
    topic_id = topic_ids(kafka_broker)[topic]  # never seen by this gateway
    listings = count_listings(gw)
    clients = [RawClient(gw.bootstrap) for _ in range(8)]
    for client in clients:  # all sent before any answer is read
        client.send(1, 13, fetch_by_id(13, topic_id))
    # Every request waited for the one listing (or came after it): none is answered UNKNOWN_TOPIC_ID.
    assert [outcome(client.receive(1, 13)) for client in clients] == [{topic_id: (0, True)}] * 8
    assert len(listings) == 1 and gw.gateway.topic_listing.listings == 1
    for client in clients:
        client.close()
