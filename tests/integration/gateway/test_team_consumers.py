"""An application team's consumer groups through the gateway with only the README's `--consumer` ACLs
(READ on the group, READ and DESCRIBE on the topic): cooperative-sticky assignment, static membership,
offset commit/fetch, and the group listings Kafka filters by DESCRIBE."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from tests.integration.gateway.team_journey import GROUP_TIMINGS, Team, take
from tests.integration.gateway.test_proxy import create_topics

pytestmark = [pytest.mark.broker]

def fill(team: Team, topic: str, partitions: int) -> None:
    """One record per partition, written by the super user."""
    p = Producer(team.ops_conf())
    for i in range(partitions):
        p.produce(topic, f"r{i}".encode(), partition=i)
    assert p.flush(8) == 0


def poll_until(consumers: list[Consumer], check: Callable[[], bool], timeout: float = 9) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        for c in consumers:
            m = c.poll(0.05)
            assert m is None or m.error() is None, m.error()


def test_cooperative_sticky_rebalance_keeps_the_first_members_partitions(team: Team, kafka_broker: str) -> None:
    topic, group = team.name("orders"), team.name("orders-app")
    create_topics(kafka_broker, topic, partitions=4)
    team.acls("--consumer", "--topic", topic, "--group", group)
    conf = {**team.conf(), "group.id": group, "partition.assignment.strategy": "cooperative-sticky",
            **GROUP_TIMINGS}
    owned: dict[str, set[int]] = {"a": set(), "b": set()}
    revoked: list[tuple[str, set[int]]] = []

    def callbacks(name: str) -> dict[str, Any]:
        def on_assign(consumer: Consumer, parts: list[TopicPartition]) -> None:
            owned[name] |= {p.partition for p in parts}

        def on_revoke(consumer: Consumer, parts: list[TopicPartition]) -> None:
            revoked.append((name, {p.partition for p in parts}))
            owned[name] -= {p.partition for p in parts}

        return {"on_assign": on_assign, "on_revoke": on_revoke}

    a = Consumer(conf)
    b = Consumer(conf)
    try:
        a.subscribe([topic], **callbacks("a"))
        poll_until([a], lambda: owned["a"] == {0, 1, 2, 3})
        b.subscribe([topic], **callbacks("b"))
        # Tansu holds each join round about 3 s and a cooperative rebalance takes two: up to ~12 s
        poll_until([a, b], lambda: len(owned["a"]) == 2 and len(owned["b"]) == 2, timeout=20)
        # incremental: `a` gave up only the two partitions `b` took, and kept consuming the others
        assert revoked == [("a", owned["b"])] and owned["a"] | owned["b"] == {0, 1, 2, 3}
    finally:
        a.close()
        b.close()


def test_static_member_rejoins_under_its_instance_id(team: Team, kafka_broker: str) -> None:
    topic, group = team.name("orders"), team.name("orders-app")
    create_topics(kafka_broker, topic, partitions=2)
    fill(team, topic, 2)
    team.acls("--consumer", "--topic", topic, "--group", group)
    conf = {**team.conf(), "group.id": group, "group.instance.id": "orders-app-0", **GROUP_TIMINGS,
            "enable.auto.commit": False}
    c = Consumer(conf)
    try:
        c.subscribe([topic])
        got = take(c, 2)
        c.commit(asynchronous=False)
        # (Tansu does not report members' group instance ids in DescribeGroups: nothing to check there)
        assert describe_group(team, group).group_id == group
    finally:
        c.close()
    assert sorted(got) == [b"r0", b"r1"]
    # the same instance comes back: it resumes from the group's committed offsets
    c = Consumer(conf)
    try:
        c.subscribe([topic])
        poll_until([c], lambda: len(c.assignment()) == 2)
        committed = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=8)
        assert [(tp.partition, tp.offset) for tp in committed] == [(0, 1), (1, 1)]
    finally:
        c.close()


def describe_group(team: Team, group: str) -> Any:
    admin = AdminClient(team.conf())
    return admin.describe_consumer_groups([group])[group].result(8)


def test_kafka_python_consumer_commits_and_fetches_offsets_with_group_and_topic_read(
    team: Team, kafka_broker: str
) -> None:
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KTopicPartition

    topic, group = team.name("orders"), team.name("orders-app")
    create_topics(kafka_broker, topic)
    fill(team, topic, 1)
    # only READ on the group and READ on the topic (DESCRIBE is implied by READ, as in Kafka)
    team.acls("--operation", "Read", "--topic", topic)
    team.acls("--operation", "Read", "--group", group)
    c = KafkaConsumer(topic, **team.python_conf(), group_id=group, group_instance_id="py-0",
                      auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000,
                      heartbeat_interval_ms=300, consumer_timeout_ms=8000)
    try:
        [record] = [next(c)]
        assert record.value == b"r0"
        c.commit()
        assert c.committed(KTopicPartition(topic, 0)) == 1
    finally:
        c.close()
    admin = AdminClient(team.conf())
    offsets = admin.list_consumer_group_offsets([_group_request(group, topic)])[group].result(8)
    assert [(tp.topic, tp.partition, tp.offset) for tp in offsets.topic_partitions] == [(topic, 0, 1)]


def _group_request(group: str, topic: str) -> Any:
    """Partition 0 of `topic`, named: Tansu (0.x) answers an OffsetFetch for all of a group's topics
    (topics null) without its topics array, which no client or gateway can parse."""
    return ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])


def test_group_listing_and_description_are_filtered_by_describe(team: Team, kafka_broker: str) -> None:
    topic, mine, theirs = team.name("orders"), team.name("orders-app"), team.name("billing")
    create_topics(kafka_broker, topic)
    fill(team, topic, 1)
    team.acls("--consumer", "--topic", topic, "--group", mine)
    for group, conf in ((mine, team.conf()), (theirs, team.ops_conf())):
        c = Consumer({**conf, "group.id": group, **GROUP_TIMINGS})
        c.subscribe([topic])
        take(c, 1)
        c.commit(asynchronous=False)
        c.close()
    admin = AdminClient(team.conf())
    listed = {g.group_id for g in admin.list_consumer_groups().result(8).valid}
    ops = AdminClient(team.ops_conf())
    everyone = {g.group_id for g in ops.list_consumer_groups().result(8).valid}
    assert mine in listed and theirs not in listed and theirs in everyone
    assert admin.describe_consumer_groups([mine])[mine].result(8).group_id == mine
    with pytest.raises(KafkaException) as err:
        admin.describe_consumer_groups([theirs])[theirs].result(8)
    assert err.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    for request in (_group_request(theirs, topic), ConsumerGroupTopicPartitions(theirs)):  # named, and all
        with pytest.raises(KafkaException) as err:
            admin.list_consumer_group_offsets([request])[theirs].result(8)
        assert err.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_a_pattern_subscription_gets_only_the_topics_the_principal_may_describe(
    team: Team, kafka_broker: str
) -> None:
    mine, theirs, group = team.name("orders"), team.name("payroll"), team.name("orders-app")
    create_topics(kafka_broker, mine, theirs)
    p = Producer(team.ops_conf())
    p.produce(mine, b"mine")
    p.produce(theirs, b"theirs")
    assert p.flush(8) == 0
    team.acls("--consumer", "--topic", mine, "--group", group)
    c = Consumer({**team.conf(), "group.id": group, **GROUP_TIMINGS})
    try:
        c.subscribe([f"^{team.prefix}.*"])  # Metadata for all topics: filtered by DESCRIBE, as Kafka does
        assert take(c, 1) == [b"mine"]
        assert {tp.topic for tp in c.assignment()} == {mine}
        assert c.poll(0.5) is None
    finally:
        c.close()
