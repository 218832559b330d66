"""Creating a topic and reading every record of it back with a real client (kafka-python), for the tests
of the audit trail's Kafka sink (audit.kafka_sink)."""

from __future__ import annotations

import time
import uuid
import warnings
from typing import Any

from tests.support.waiting import wait_for

with warnings.catch_warnings():  # kafka-python's schemas load through a deprecated call (gateway/codec.py)
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
    from kafka.admin import NewTopic


def create_topic(bootstrap: str, partitions: int = 1, prefix: str = "audit-") -> str:
    """A new topic with a unique name starting with `prefix`."""
    topic = f"{prefix}{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()
    return topic


def read_topic(bootstrap: str, topic: str, count: int, timeout: float = 30) -> list[Any]:
    """Every record of `topic` (by partition, then offset) once there are at least `count`, or after `timeout`."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=500)
    try:
        assert wait_for(lambda: consumer.partitions_for_topic(topic), 20), f"no metadata for {topic}"
        consumer.assign([TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))])
        consumer.seek_to_beginning()
        records: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(records) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()
