"""A revoked READ stops a consumer at once, KIP-227 fetch sessions or not (gateway/fetch_session.py).

Tansu creates no fetch sessions, so the gateway's upstream here is a relay in front of Tansu that
serves them as a Kafka broker does (tests/support/fetch_session_relay.py, real sockets).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from authz.model import AclFilter, Operation, Principal, ResourceType
from gateway.codec import SPECS
from gateway.proxy import Services
from tests.integration.gateway.conftest import AuthzFixture, RawClient, RunningGateway, upstream_of
from tests.integration.gateway.test_proxy import acl, create_topics, produce
from tests.support.fetch_session_relay import FetchSessionRelay

pytestmark = [pytest.mark.broker]


@pytest.fixture
def relay(kafka_broker: str) -> Iterator[FetchSessionRelay]:
    r = FetchSessionRelay(upstream_of(kafka_broker))
    yield r
    r.close()


def gateway_before(relay: FetchSessionRelay, authz: AuthzFixture,
                   gateway_factory: Callable[..., RunningGateway]) -> RunningGateway:
    # "single": every client connection goes upstream to the relay, whatever node it asked for.
    return gateway_factory(Services(authz.service, audit=authz.audit), upstream=relay.address, address_mode="single")


def fetch(version: int, topics: dict[str, int], *, session_id: int, epoch: int) -> Any:
    cls = SPECS[1].request[version]
    t = cls.FetchTopic
    return cls(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
               session_id=session_id, session_epoch=epoch, forgotten_topics_data=[], rack_id="", topics=[
                   t(topic=name, partitions=[t.FetchPartition(partition=0, fetch_offset=offset,
                                                             partition_max_bytes=1 << 20)])
                   for name, offset in topics.items()])


def records_of(response: Any) -> dict[str, bool]:
    return {t.topic: any(bool(p.records) for p in t.partitions) for t in response.responses}


def test_kafka_python_stops_reading_when_its_read_acl_is_revoked_mid_session(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
    relay: FetchSessionRelay, kafka_broker: str,
) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import TopicAuthorizationFailedError

    topic = f"fs-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    produce(kafka_broker, topic, b"before-0", b"before-1")
    authz = authz_factory()
    authz.allow(acl(ResourceType.TOPIC, topic, Operation.READ))
    gw = gateway_before(relay, authz, gateway_factory)
    # kafka-python 3 asks for incremental fetch sessions by default (enable_incremental_fetch_sessions).
    consumer = KafkaConsumer(bootstrap_servers=gw.bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100)
    assert consumer.config["enable_incremental_fetch_sessions"]
    consumer.assign([TopicPartition(topic, 0)])
    got: list[bytes] = []
    errors: list[Exception] = []

    def poll_for(seconds: float, until: Callable[[], bool] = lambda: False) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not until():
            try:
                for batch in consumer.poll(timeout_ms=100).values():
                    got.extend(r.value for r in batch)
            except TopicAuthorizationFailedError as exc:
                errors.append(exc)

    try:
        poll_for(20, lambda: len(got) >= 2)
        poll_for(1.0)  # idle fetches: against a broker with sessions these would be incremental and empty
        assert got == [b"before-0", b"before-1"] and not errors
        authz.service.delete_acls([AclFilter(resource_type=ResourceType.TOPIC, resource_name=topic)],
                                  actor=Principal("User", "admin"))
        # A fetch authorized before the revocation may still be waiting upstream (max_wait_ms) and
        # would return records produced now, as on a broker: produce once a fetch has been refused.
        poll_for(5, lambda: bool(errors))
        produce(kafka_broker, topic, b"after-0", b"after-1")
        poll_for(2.0)
    finally:
        consumer.close()
    assert got == [b"before-0", b"before-1"]  # nothing produced after the revocation came through
    assert errors and all(topic in str(e) for e in errors)  # TOPIC_AUTHORIZATION_FAILED on every poll after it
    # The client asked for a session (epoch 0, INITIAL); the gateway forwarded only sessionless fetches,
    # so no session exists upstream, and the client kept sending full fetches without any error.
    fetches = [(sid, epoch) for _v, sid, epoch in relay.seen]
    assert len(fetches) > 5 and set(fetches) == {(0, -1)}
    assert relay.sessions == {}


def test_an_incremental_fetch_naming_nothing_reads_nothing_through_the_gateway(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
    relay: FetchSessionRelay, kafka_broker: str,
) -> None:
    mine, theirs = f"mine-{uuid.uuid4().hex[:8]}", f"theirs-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, mine, theirs)
    produce(kafka_broker, mine, b"m")
    produce(kafka_broker, theirs, b"secret")
    authz = authz_factory()
    authz.allow(acl(ResourceType.TOPIC, mine, Operation.READ))
    gw = gateway_before(relay, authz, gateway_factory)

    # Someone else's session, made on the broker directly (as the gateway's upstream identity): the
    # relay serves it to an incremental fetch that names nothing.
    direct = RawClient(f"{relay.address[0]}:{relay.address[1]}")
    opened = direct.call(1, 12, fetch(12, {theirs: 0}, session_id=0, epoch=0))
    their_session = opened.session_id
    assert their_session != 0 and records_of(opened) == {theirs: True}
    assert records_of(direct.call(1, 12, fetch(12, {}, session_id=their_session, epoch=1))) == {theirs: True}

    raw = RawClient(gw.bootstrap)
    # A full fetch asking for a session (INITIAL) gets the data it may read, and no session.
    first = raw.call(1, 12, fetch(12, {mine: 0}, session_id=0, epoch=0))
    assert records_of(first) == {mine: True}
    # The session id the relay would have given it (they count up), then the one of the other client's.
    for guessed, epoch in ((their_session + 1, 1), (their_session, 2)):
        answer = raw.call(1, 12, fetch(12, {}, session_id=guessed, epoch=epoch))
        assert (answer.error_code, answer.session_id, answer.responses) == (0, 0, []), guessed
    assert first.session_id == 0
    # Listing only what it may read, in the other client's session, reads only that.
    answer = raw.call(1, 12, fetch(12, {mine: 0}, session_id=their_session, epoch=2))
    assert records_of(answer) == {mine: True}
    raw.close()
    direct.close()
    gateway_fetches = relay.seen[2:]
    assert len(gateway_fetches) == 4 and {(sid, epoch) for _v, sid, epoch in gateway_fetches} == {(0, -1)}
    assert set(relay.sessions) == {their_session}  # the gateway neither made nor closed a session


def test_an_upstream_that_makes_a_session_anyway_cannot_turn_the_client_incremental(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway], kafka_broker: str,
) -> None:
    topic = f"odd-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    produce(kafka_broker, topic, b"x")
    authz = authz_factory()
    authz.allow(acl(ResourceType.TOPIC, topic, Operation.READ))
    odd = FetchSessionRelay(upstream_of(kafka_broker), sessions_on_final_epoch=True)
    try:
        gw = gateway_before(odd, authz, gateway_factory)
        raw = RawClient(gw.bootstrap)
        answer = raw.call(1, 12, fetch(12, {topic: 0}, session_id=0, epoch=0))
        raw.close()
    finally:
        odd.close()
    assert records_of(answer) == {topic: True}
    assert odd.sessions and answer.session_id == 0  # the upstream answered a session id; the client got 0
