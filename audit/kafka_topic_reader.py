"""Reads an audit topic from its start to its end as it is now, for `kgov audit verify --kafka-bootstrap`
(audit.kafka_seal.verify_records). It connects and logs in as the sink does (`[audit] kafka_*`, through
audit.kafka_sink's connection settings), with either client (`resolve_client`).

The principal needs READ and DESCRIBE on the topic, nothing on any group. The end of a partition is where the consumer has caught up: at or past the offset ListOffsets gave before
consuming, and at the high watermark its last fetch answer gave (librdkafka's partition EOF, kafka-python's
`highwater`). Both, because Tansu (0.x) answers ListOffsets with a count of batches, not of records (see
tests/integration/gateway/test_team_admin.py), which alone would stop the read after the first batch of
each partition. Records written while it reads may be included: a writer still shipping whose records go
to several partitions (several sources) can show a gap among its newest records, those of one attempt
still on their way to another partition; verify again. (kgov's writers have one source each: one
partition, read in order, so a read stopped anywhere only cuts the tail.) No consumer group is joined and no offset is committed (partitions are assigned), and the
topic is never created by the metadata request (`allow.auto.create.topics` off): verifying a topic name
with a typo must not make an empty topic of it.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

from audit.kafka_seal import TopicRecord
from audit.kafka_sink import (
    KafkaAuditSettings,
    KafkaClientChoice,
    import_kafka_python,
    kafka_python_connection,
    librdkafka_connection,
    parse_bootstrap_servers,
    resolve_client,
    tls_context,
)


class TopicReadError(Exception):
    """The topic could not be read to its end. The message never holds the SASL password."""


def read_topic(settings: KafkaAuditSettings, topic: str, *, timeout_s: float = 60.0,
               client: KafkaClientChoice | None = None,
               monotonic: Callable[[], float] = time.monotonic) -> Iterator[TopicRecord]:
    """Every record of `topic` from each partition's start to its current end, in offset order within a
    partition. TopicReadError when the cluster, the topic or its end cannot be reached within `timeout_s`."""
    if settings.kafka_bootstrap_servers is None:
        raise TopicReadError("no bootstrap servers")
    servers = parse_bootstrap_servers(settings.kafka_bootstrap_servers)
    chosen = resolve_client(client or settings.kafka_client)
    sasl = settings.kafka_security_protocol.startswith("SASL_")
    password = settings.kafka_sasl_password.get_secret_value() if sasl and settings.kafka_sasl_password else None
    login = (settings.kafka_security_protocol, settings.kafka_sasl_mechanism if sasl else None,
             settings.kafka_sasl_username if sasl else None, password)
    deadline = monotonic() + timeout_s
    try:
        if chosen == "librdkafka":
            config = {"bootstrap.servers": ",".join(servers), "client.id": "kgov-audit-verify",
                      "group.id": f"kgov-audit-verify-{secrets.token_hex(6)}", "enable.auto.commit": False,
                      "allow.auto.create.topics": False, "enable.partition.eof": True,
                      **librdkafka_connection(*login, (settings.kafka_ssl_ca_file, settings.kafka_ssl_cert_file,
                                                       settings.kafka_ssl_key_file))}
            yield from _read_librdkafka(config, topic, deadline, monotonic)
        else:
            import_kafka_python()
            config = {"bootstrap_servers": list(servers), "client_id": "kgov-audit-verify", "group_id": None,
                      "enable_auto_commit": False, "allow_auto_create_topics": False,
                      # Connecting and logging in (30 s by default) within the read's own bound.
                      "bootstrap_timeout_ms": max(1000, int(timeout_s * 1000)),
                      **kafka_python_connection(*login, tls_context(settings))}
            yield from _read_kafka_python(config, topic, deadline, monotonic)
    except TopicReadError:
        raise
    except Exception as exc:  # connection, login, authorization: one clear line, the password masked
        text = f"{type(exc).__name__}: {exc}"
        raise TopicReadError(text.replace(password, "***") if password else text) from None


def _read_librdkafka(config: dict[str, Any], topic: str, deadline: float,
                     monotonic: Callable[[], float]) -> Iterator[TopicRecord]:
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    errors: list[str] = []
    config["error_cb"] = lambda error: errors.append(str(error))
    consumer = Consumer(config)
    try:
        left = max(0.1, deadline - monotonic())
        try:
            metadata = consumer.list_topics(topic, timeout=left)
        except KafkaException as exc:
            raise TopicReadError(f"no metadata from the cluster within the timeout ({exc}"
                                 f"{'; ' + errors[-1] if errors else ''})") from None
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            raise TopicReadError(f"topic {topic} does not exist or may not be described by this principal"
                                 f"{f' ({found.error})' if found is not None and found.error else ''}")
        ends: dict[int, int] = {}
        starts: list[Any] = []
        for partition in sorted(found.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                       timeout=max(0.1, deadline - monotonic()))
            if high > low:
                ends[partition] = high
                starts.append(TopicPartition(topic, partition, low))
        consumer.assign(starts)
        while ends:
            if monotonic() >= deadline:
                raise TopicReadError(f"timed out reading topic {topic}: partition(s) {sorted(ends)} not read to "
                                     f"their end{'; ' + errors[-1] if errors else ''}")
            caught_up: set[int] = set()
            for message in consumer.consume(500, timeout=0.5):
                error, partition, offset = message.error(), message.partition(), message.offset()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF and partition is not None:
                        caught_up.add(partition)
                    elif error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                        # librdkafka wants a group.id and looks its coordinator up, though assigned
                        # partitions at given offsets need none: a reader with READ on the topic only
                        # (no group ACL) still reads.
                        continue
                    elif error.fatal() or not error.retriable():
                        raise TopicReadError(f"reading topic {topic}: {error}")
                    continue
                headers: Any = message.headers() or ()  # a list of (str, bytes | None) from a consumer
                if partition in ends and offset is not None:
                    yield TopicRecord(partition, offset, message.value(), tuple(headers))
            if caught_up:
                for position in consumer.position([TopicPartition(topic, p) for p in caught_up if p in ends]):
                    if position.offset >= ends[position.partition]:
                        del ends[position.partition]
    finally:
        consumer.close()


def _read_kafka_python(config: dict[str, Any], topic: str, deadline: float,
                       monotonic: Callable[[], float]) -> Iterator[TopicRecord]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**config)
    try:
        partitions: set[int] = set()
        while not partitions:
            partitions = consumer.partitions_for_topic(topic)
            if not partitions:
                if monotonic() >= deadline:
                    raise TopicReadError(f"topic {topic} does not exist or may not be described by this principal")
                time.sleep(0.2)
        assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(assigned)
        begins = consumer.beginning_offsets(assigned)
        ends = {tp: end for tp, end in consumer.end_offsets(assigned).items() if end > begins[tp]}
        for tp in assigned:
            consumer.seek(tp, begins[tp])
        while ends:
            if monotonic() >= deadline:
                raise TopicReadError(f"timed out reading topic {topic}: partition(s) "
                                     f"{sorted(tp.partition for tp in ends)} not read to their end")
            for tp, batch in consumer.poll(timeout_ms=500).items():
                if tp in ends:
                    yield from (TopicRecord(r.partition, r.offset, r.value, tuple(r.headers or ())) for r in batch)
            for tp in list(ends):
                highwater = consumer.highwater(tp)  # None until a fetch answer came
                if highwater is not None and consumer.position(tp) >= max(ends[tp], highwater):
                    del ends[tp]
    finally:
        consumer.close()
