"""An application team's producers through the gateway: idempotent (KIP-679) and transactional, with
librdkafka and kafka-python, SASL/SCRAM-SHA-512 and the least-privilege ACLs Kafka asks for."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from gateway.codec import SPECS
from tests.integration.gateway.conftest import RawClient
from tests.integration.gateway.team_journey import Team
from tests.integration.gateway.test_proxy import FAST_GROUP, create_topics

pytestmark = [pytest.mark.broker]


def init_producer_id(team: Team, transactional_id: str | None) -> Any:
    request = SPECS[22].request[4](transactional_id=transactional_id, transaction_timeout_ms=60000,
                                    producer_id=-1, producer_epoch=-1)
    return team.call(22, 4, request)


def read(team: Team, topic: str, count: int, timeout: float = 8, **conf: Any) -> list[bytes]:
    c = Consumer({**team.conf(), "group.id": team.name("reader"), **FAST_GROUP, **conf})
    c.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(m.value())
            elif m is not None:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
    finally:
        c.close()
    return out


def test_idempotent_producer_needs_write_on_a_topic_or_idempotent_write(team: Team, kafka_broker: str) -> None:
    topic = team.name("orders")
    create_topics(kafka_broker, topic)
    # Kafka (KafkaApis.handleInitProducerIdRequest): no IDEMPOTENT_WRITE on the cluster and no WRITE on
    # any topic is CLUSTER_AUTHORIZATION_FAILED.
    team.acls("--operation", "Describe", "--topic", topic)
    assert init_producer_id(team, None).error_code == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    p = Producer({**team.conf(), "enable.idempotence": True})
    p.produce(topic, b"refused")
    with pytest.raises(KafkaException) as err:  # librdkafka: a fatal error, raised by flush
        p.flush(8)
    assert err.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED and err.value.args[0].fatal()
    # KIP-679: WRITE on a topic is enough (the README's `--producer`), no cluster ACL
    team.acls("--producer", "--topic", topic)
    assert init_producer_id(team, None).error_code == 0
    delivered: list[Any] = []
    p = Producer({**team.conf(), "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    for i in range(5):
        p.produce(topic, f"order-{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
    assert p.flush(8) == 0 and delivered == [None] * 5
    team.acls("--consumer", "--topic", topic, "--group", team.name("reader"))
    assert read(team, topic, 5) == [f"order-{i}".encode() for i in range(5)]


def test_kafka_python_idempotent_producer_with_topic_write(team: Team, kafka_broker: str) -> None:
    from kafka import KafkaProducer

    topic = team.name("orders")
    create_topics(kafka_broker, topic)
    team.acls("--producer", "--topic", topic)
    p = KafkaProducer(**team.python_conf(), enable_idempotence=True, acks="all")
    try:
        metas = [p.send(topic, f"kp-{i}".encode()).get(timeout=8) for i in range(3)]
    finally:
        p.close(timeout=5)
    assert [m.offset for m in metas] == [0, 1, 2]


def test_transactional_producer_is_refused_without_the_transactional_id_acl(team: Team, kafka_broker: str) -> None:
    topic = team.name("payments")
    create_topics(kafka_broker, topic)
    team.acls("--producer", "--topic", topic)  # topic WRITE, but nothing on the transactional id
    txn = team.name("payments-tx")
    reply = init_producer_id(team, txn)
    assert (reply.error_code, reply.producer_id) == (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)
    p = Producer({**team.conf(), "transactional.id": txn})
    with pytest.raises(KafkaException) as err:
        p.init_transactions(8)
    assert err.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_transactional_producer_commits_and_aborts_for_read_committed_consumers(
    team: Team, kafka_broker: str
) -> None:
    topic, txn, group = team.name("payments"), team.name("payments-tx"), team.name("reader")
    create_topics(kafka_broker, topic)
    team.acls("--producer", "--topic", topic, "--transactional-id", txn)
    team.acls("--consumer", "--topic", topic, "--group", group)
    p = Producer({**team.conf(), "transactional.id": txn})
    p.init_transactions(8)
    p.begin_transaction()
    p.produce(topic, b"committed-1")
    p.produce(topic, b"committed-2")
    p.commit_transaction(8)
    p.begin_transaction()
    p.produce(topic, b"aborted")
    p.flush(8)
    p.abort_transaction(8)
    p.begin_transaction()
    p.produce(topic, b"committed-3")
    p.commit_transaction(8)
    committed = {"isolation.level": "read_committed"}
    got = read_partition({**team.conf(), "group.id": group}, topic, 3, **committed)
    assert [v for v in got if v.startswith(b"committed")] == [b"committed-1", b"committed-2", b"committed-3"]
    # Tansu (0.x) does not return aborted transactions in Fetch, so its read_committed readers see the
    # aborted record too: the gateway must answer exactly what the broker does, no more, no less.
    assert got == read_partition({"bootstrap.servers": kafka_broker}, topic, 3, **committed)


def read_partition(conf: dict[str, Any], topic: str, count: int, **extra: Any) -> list[bytes]:
    """Every record of partition 0 (assigned, no group), read until `count` records and the end."""
    c = Consumer({"group.id": "unused", **conf, "enable.partition.eof": True, **extra})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + 8
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                if len(out) >= count:
                    break
                continue
            out.append(m.value())
    finally:
        c.close()
    return out


def test_send_offsets_to_transaction_needs_read_on_the_group(team: Team, kafka_broker: str) -> None:
    source, sink = team.name("in"), team.name("out")
    txn, group = team.name("copier-tx"), team.name("copier")
    create_topics(kafka_broker, source, sink)
    team.acls("--producer", "--topic", sink, "--transactional-id", txn)
    team.acls("--operation", "Read", "--operation", "Describe", "--topic", source)
    p = Producer({**team.conf(), "transactional.id": txn})
    p.init_transactions(8)
    p.begin_transaction()
    p.produce(sink, b"copied")
    offsets = [TopicPartition(source, 0, 1)]
    metadata = Consumer({**team.conf(), "group.id": group}).consumer_group_metadata()
    # Kafka (handleAddOffsetsToTxnRequest): READ on the group, else GROUP_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as err:
        p.send_offsets_to_transaction(offsets, metadata, 8)
    assert err.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    # an abortable error (librdkafka): the application aborts, is granted the group, and retries
    p.abort_transaction(8)
    team.acls("--operation", "Read", "--group", group)
    p.begin_transaction()
    p.produce(sink, b"copied")
    p.send_offsets_to_transaction(offsets, metadata, 8)
    p.commit_transaction(8)
    c = Consumer({**team.conf(), "group.id": group})
    try:
        [committed] = c.committed([TopicPartition(source, 0)], timeout=8)
    finally:
        c.close()
    assert committed.offset == 1 and committed.error is None


def test_kafka_python_transactional_producer(team: Team, kafka_broker: str) -> None:
    from kafka import KafkaProducer
    from kafka.errors import TransactionalIdAuthorizationFailedError

    topic, txn = team.name("payments"), team.name("payments-tx")
    create_topics(kafka_broker, topic)
    team.acls("--producer", "--topic", topic)
    refused = KafkaProducer(**team.python_conf(), transactional_id=txn)
    try:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            refused.init_transactions()
    finally:
        refused.close(timeout=5)
    team.acls("--producer", "--topic", topic, "--transactional-id", txn)
    p = KafkaProducer(**team.python_conf(), transactional_id=txn)
    try:
        p.init_transactions()
        p.begin_transaction()
        sent = p.send(topic, b"kp-committed")
        p.commit_transaction()
        assert sent.get(timeout=8).offset == 0
        p.begin_transaction()
        p.send(topic, b"kp-aborted")
        p.abort_transaction()
    finally:
        p.close(timeout=5)
    assert read_partition(team.ops_conf(), topic, 1)[:1] == [b"kp-committed"]


def test_adding_a_denied_topic_to_a_transaction_adds_none_of_the_request(team: Team, kafka_broker: str) -> None:
    """KafkaApis.handleAddPartitionsToTxnRequest (v3 and below, what clients send): any partition that
    fails its check fails the whole request; the others are answered OPERATION_NOT_ATTEMPTED (55) and
    are not added to the transaction."""
    allowed, denied, txn = team.name("payments"), team.name("payroll"), team.name("payments-tx")
    create_topics(kafka_broker, allowed, denied)
    team.acls("--producer", "--topic", allowed, "--transactional-id", txn)
    producer = init_producer_id(team, txn)
    assert producer.error_code == 0
    cls = SPECS[24].request[3]
    topic = cls.fields["v3_and_below_topics"].data_class
    request = cls(v3_and_below_transactional_id=txn, v3_and_below_producer_id=producer.producer_id,
                  v3_and_below_producer_epoch=producer.producer_epoch,
                  v3_and_below_topics=[topic(name=allowed, partitions=[0]), topic(name=denied, partitions=[0])])
    answer = team.call(24, 3, request)
    codes = {(t.name, p.partition_index): p.partition_error_code
             for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition}
    assert codes == {(allowed, 0): 55, (denied, 0): KafkaError.TOPIC_AUTHORIZATION_FAILED}


def acks0_produce(raw: RawClient, *topics: str, client_id: str = "raw") -> None:
    """Produce v9 with acks=0 (no answer) of one record to partition 0 of each topic."""
    from tests.integration.gateway.test_proxy import _one_record_batch

    cls = SPECS[0].request[9]
    topic = cls.TopicProduceData
    raw.send(0, 9, cls(transactional_id=None, acks=0, timeout_ms=5000, topic_data=[
        topic(name=t, partition_data=[topic.PartitionProduceData(index=0, records=_one_record_batch(t.encode()))])
        for t in topics]), client_id=client_id)


def test_an_acks_0_producer_works_though_tansu_answers_what_kafka_would_not(team: Team, kafka_broker: str) -> None:
    """Tansu answers produce requests with acks=0, which Kafka brokers never do; the gateway drops those
    answers instead of closing the connection on an unexpected one, so acks=0 producers work in front of
    it (and `kgov up`'s embedded broker). Answers to other requests still reach the client in order."""
    topic = team.name("metrics")
    create_topics(kafka_broker, topic)
    team.acls("--producer", "--topic", topic)
    p = Producer({**team.conf(), "acks": 0, "linger.ms": 5})
    for i in range(20):
        p.produce(topic, f"m{i}".encode(), partition=0)
    assert p.flush(10) == 0
    raw = team.login()
    try:
        acks0_produce(raw, topic)
        acks0_produce(raw, topic)
        metadata = SPECS[3].request[12]
        answer = raw.call(3, 12, metadata(topics=[metadata.MetadataRequestTopic(name=topic)],
                                          allow_auto_topic_creation=False))
        assert [t.error_code for t in answer.topics] == [0]  # the metadata answer, not Tansu's produce answer
    finally:
        raw.close()
    assert sorted(read_partition(team.ops_conf(), topic, 22)) == sorted(
        [f"m{i}".encode() for i in range(20)] + [topic.encode()] * 2)


def test_an_acks_0_produce_to_a_denied_topic_closes_the_connection(team: Team, kafka_broker: str) -> None:
    """KafkaApis.handleProduceRequest: an acks=0 request has no answer, so when any of it fails (a denied
    topic too) the broker closes the connection, which tells the producer something went wrong; the
    allowed part is forwarded first."""
    denied = team.name("payroll")
    create_topics(kafka_broker, denied)
    team.acls("--operation", "Describe", "--topic", denied)
    raw = team.login()
    try:
        acks0_produce(raw, denied)
        assert raw.closed_by_peer()
    finally:
        raw.close()
    assert read_partition(team.ops_conf(), denied, 0) == []


def test_the_close_after_a_failed_acks_0_produce_logs_the_client_id_as_one_printable_line(
    team: Team, kafka_broker: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """Kafka's INFO line names the client id, which the client chooses (up to 32,767 characters, any of
    them): written as it is, a line break in it would forge log lines."""
    caplog.set_level(logging.INFO, logger="kgov.gateway")
    denied = team.name("ledger")
    create_topics(kafka_broker, denied)
    raw = team.login()
    try:
        acks0_produce(raw, denied, client_id="app\n2026-11-22 INFO forged line " + "x" * 5000)
        assert raw.closed_by_peer()
    finally:
        raw.close()
    (line,) = [r.getMessage() for r in caplog.records if "with ack=0" in r.getMessage()]
    assert line.isprintable() and "app?2026-11-22 INFO forged line" in line and len(line) < 500, line
