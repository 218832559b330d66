"""audit.kafka_sink.KafkaSink against a real broker (Tansu), with each client (librdkafka and kafka-python),
read back with a real client (kafka-python)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from audit.kafka_sink import CONTENT_TYPE, KafkaSink
from audit.model import AuditEvent, EventType, change_event
from audit.sinks import JsonLinesSink, MultiSink
from tests.support.audit_topic import create_topic, read_topic
from tests.support.leaks import KAFKA_PYTHON_CONNECT_LEAKS, collect_kafka_python_connect_leaks
from tests.support.tansu import tansu_broker_advertising
from tests.support.tcp_relay import TcpRelay
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.broker, KAFKA_PYTHON_CONNECT_LEAKS, pytest.mark.usefixtures("collect_leaks")]
collect_leaks = collect_kafka_python_connect_leaks

T0 = datetime(2026, 11, 22, 7, 0, tzinfo=UTC)


def make_events(n: int, sources: tuple[str, ...] = ("crn:///kafka=a",), start: int = 0) -> list[AuditEvent]:
    return [
        change_event(type=EventType.ACL_CHANGE, source=sources[i % len(sources)], time=T0, principal="User:admin",
                     method_name="CreateAcls", target=f"topic=t{start + i}", details={"n": start + i})
        for i in range(n)
    ]


@pytest.fixture(params=["librdkafka", "kafka-python"])
def client(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def fast_sink(bootstrap: str, topic: str, client: str, **options: Any) -> KafkaSink:
    return KafkaSink(bootstrap, topic, **{"delivery_timeout_ms": 2000, "max_block_ms": 500,
                                          "retry_backoff_max_s": 0.3, "client": client, **options})


@pytest.fixture
def relayed_broker() -> Iterator[TcpRelay]:
    """A broker that can go away and come back with its topics: Tansu behind a relay it advertises."""
    relay = TcpRelay(("127.0.0.1", 0))
    with tansu_broker_advertising(relay.port) as upstream:
        relay.upstream = upstream
        with relay:
            yield relay


def test_the_topic_holds_exactly_the_events_written_keyed_by_source_in_order(
    kafka_broker: str, client: str,
) -> None:
    topic = create_topic(kafka_broker, partitions=3)
    sources = ("crn:///kafka=a", "crn:///kafka=b", "crn:///kafka=c")
    written = make_events(90, sources)
    sink = fast_sink(kafka_broker, topic, client)
    for event in written:
        sink.write(event)
    sink.close(timeout_s=20)  # returns once everything buffered was shipped
    stats = sink.stats()
    assert (stats.shipped, stats.delivery_failures, stats.unshipped_at_close, stats.buffered_events) == (90, 0, 0, 0)

    records = read_topic(kafka_broker, topic, 90)
    assert sorted(r.value.decode() for r in records) == sorted(e.to_json() for e in written)
    for source in sources:
        mine = [r for r in records if r.key == source.encode()]
        assert len({r.partition for r in mine}) == 1  # one partition per source ...
        assert [r.value.decode() for r in mine] == [e.to_json() for e in written if e.source == source]  # in order
    assert all(r.headers == [CONTENT_TYPE] for r in records)
    assert json.loads(records[0].value)["specversion"] == "1.0"


def test_broker_down_counts_failures_blocks_no_write_keeps_the_file_and_shipping_resumes(
    relayed_broker: TcpRelay, tmp_path: Path, caplog: pytest.LogCaptureFixture, client: str,
) -> None:
    relay = relayed_broker
    topic = create_topic(relay.address)
    file = JsonLinesSink(tmp_path / "events.jsonl")
    # Waits of 3 s for metadata and for an answer: a write waiting on either would take that long.
    kafka = fast_sink(relay.address, topic, client, delivery_timeout_ms=3000, max_block_ms=3000)
    audit = MultiSink([file, kafka])
    try:
        before = make_events(5)
        for event in before:
            audit.write(event)
        assert wait_for(lambda: kafka.stats().shipped == 5, 20)

        relay.stop()
        during = make_events(20, start=5)
        slowest = 0.0
        with caplog.at_level(logging.WARNING, logger="kgov.audit.kafka"):
            for event in during:
                started = time.monotonic()
                audit.write(event)
                slowest = max(slowest, time.monotonic() - started)
            assert slowest < 1.0  # an append to the buffer, with room for a loaded machine
            assert wait_for(lambda: kafka.stats().delivery_failures >= 2, 40)
        stats = kafka.stats()
        assert stats.shipped == 5 and stats.buffered_events == 20
        logged = [r.getMessage() for r in caplog.records]
        assert len([m for m in logged if "failed" in m]) == 1, "delivery failures are logged once a minute"
        lines = (tmp_path / "events.jsonl").read_text().splitlines()
        assert lines == [e.to_json() for e in before + during]  # the record of truth is complete

        relay.start()
        assert wait_for(lambda: kafka.stats().shipped == 25, 30)
        records = read_topic(relay.address, topic, 25)
        assert [r.value.decode() for r in records] == lines  # nothing lost, nothing repeated, in order
    finally:
        kafka.close(timeout_s=5)
        file.close()


def test_a_full_buffer_is_counted_and_logged_once_and_never_raises(
    refused_port: int, caplog: pytest.LogCaptureFixture, client: str,
) -> None:
    events = make_events(30)
    size = len(events[0].source) + len(events[0].to_json())
    sink = fast_sink(f"127.0.0.1:{refused_port}", "t", client, buffer_bytes=10 * size + size // 2)
    try:
        with caplog.at_level(logging.WARNING, logger="kgov.audit.kafka"):
            for event in events:
                sink.write(event)
        stats = sink.stats()
        assert (stats.buffered_events, stats.buffer_full, stats.shipped) == (10, 20, 0)
        full = [r for r in caplog.records if "buffer is full" in r.getMessage()]
        assert len(full) == 1
    finally:
        sink.close(timeout_s=0)
    assert sink.stats().unshipped_at_close == 10


def test_close_waits_a_bounded_time_then_counts_what_is_left(
    refused_port: int, caplog: pytest.LogCaptureFixture, client: str,
) -> None:
    sink = fast_sink(f"127.0.0.1:{refused_port}", "t", client)
    for event in make_events(7):
        sink.write(event)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="kgov.audit.kafka"):
        sink.close(timeout_s=0.5)
    elapsed = time.monotonic() - started
    assert 0.5 <= elapsed < 0.5 + 0.5 + 2.0  # the deadline, plus at most one metadata wait, plus slack
    stats = sink.stats()
    assert (stats.unshipped_at_close, stats.buffered_events, stats.shipped) == (7, 0, 0)
    assert any("7 audit event(s) not shipped" in r.getMessage() for r in caplog.records)
    sink.write(make_events(1)[0])  # after close: counted, not raised
    assert sink.stats().unshipped_at_close == 8


def test_an_event_too_large_for_a_request_is_skipped_and_counted_the_others_go_in_order(
    kafka_broker: str, client: str,
) -> None:
    topic = create_topic(kafka_broker)
    events = make_events(4)
    huge = change_event(type=EventType.CONFIG_CHANGE, source=events[0].source, time=T0, principal="User:admin",
                        method_name="AlterConfigs", target="topic=t", details={"blob": "x" * (2 * 1024 * 1024)})
    written = [*events[:2], huge, *events[2:]]
    sink = fast_sink(kafka_broker, topic, client, buffer_bytes=8 * 1024 * 1024)
    for event in written:
        sink.write(event)
    sink.close(timeout_s=20)
    stats = sink.stats()
    assert (stats.shipped, stats.too_large, stats.delivery_failures) == (4, 1, 0)
    records = read_topic(kafka_broker, topic, 4)
    assert [r.value.decode() for r in records] == [e.to_json() for e in events]


def test_an_unreachable_cluster_is_a_failed_attempt_within_max_block_ms_not_the_delivery_timeout(
    refused_port: int, client: str,
) -> None:
    """kafka-python's send() waits at most max_block_ms for metadata; librdkafka's produce() does not wait, so
    the sink asks for metadata once an attempt has had no answer for max_block_ms. Either way a cluster that
    is down is counted (and logged) after about max_block_ms, not after the 30 s delivery timeout."""
    sink = KafkaSink(f"127.0.0.1:{refused_port}", "t", client=client,  # type: ignore[arg-type]
                     max_block_ms=500, delivery_timeout_ms=30_000)
    try:
        started = time.monotonic()
        sink.write(make_events(1)[0])
        assert wait_for(lambda: sink.stats().delivery_failures >= 1, 10)
        assert time.monotonic() - started < 5
        assert sink.stats().buffered_events == 1  # kept for the next attempt
    finally:
        sink.close(timeout_s=0)


def test_a_broker_that_lost_its_producer_state_takes_the_next_events_at_once(client: str) -> None:
    """Why the sink's producer is not idempotent: a broker restarted without its producer state (Tansu's
    memory storage; a real cluster after the state expired) does not take a producer id it never gave
    out. librdkafka's idempotent producer then had every later record time out (5 of 5, here, with
    Tansu), kafka-python's was refused with UnknownProducerId; with one request in flight instead, the
    next events go to the new broker with no failed attempt."""
    relay = TcpRelay(("127.0.0.1", 0))
    with tansu_broker_advertising(relay.port) as first:
        relay.upstream = first
        relay.start()
        topic = create_topic(relay.address)
        sink = fast_sink(relay.address, topic, client, delivery_timeout_ms=5000, max_block_ms=2000)
        before = make_events(3)
        for event in before:
            sink.write(event)
        assert wait_for(lambda: sink.stats().shipped == 3, 20)
        relay.stop()
    try:
        with tansu_broker_advertising(relay.port) as second:  # the same address, nothing remembered
            relay.upstream = second
            relay.start()
            _create_named_topic(relay.address, topic)  # memory storage: the topic went with the broker
            after = make_events(4, start=3)
            for event in after:
                sink.write(event)
            assert wait_for(lambda: sink.stats().shipped == 7, 20)
            assert sink.stats().delivery_failures == 0
            assert [r.value.decode() for r in read_topic(relay.address, topic, 4)] == [e.to_json() for e in after]
            sink.close(timeout_s=5)
            relay.stop()
    finally:
        sink.close(timeout_s=0)


def _create_named_topic(bootstrap: str, topic: str) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        admin.close()
