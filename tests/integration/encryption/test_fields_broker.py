"""Field-level encryption through a real broker: readers without keys see every field but the tagged ones."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka import Producer
from confluent_kafka.serialization import MessageField, SerializationContext, StringSerializer
from confluent_kafka.serializing_producer import SerializingProducer

from encryption import DecryptionError, LocalKms
from encryption.fields import FieldDecryptingDeserializer, FieldEncryptingSerializer, FieldPolicy
from encryption.reencrypt import FieldReencryptor, ReencryptionReport, reencrypt_topic
from tests.integration.encryption.test_broker import new_topic, read_raw
from tests.unit.encryption.field_format_1 import V1_SCHEMA, sealed_in_format_1

pytestmark = pytest.mark.broker

SCHEMA = {
    "type": "record", "name": "Patient", "namespace": "org.clinic",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "ward", "type": "string"},
        {"name": "diagnosis", "type": "string", "confluent:tags": ["PII"]},
        {"name": "insurance_no", "type": "string", "confluent:tags": ["PII"]},
    ],
}
PARSED = fastavro.parse_schema(SCHEMA)


def write_avro(obj: Any, _ctx: SerializationContext | None) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, PARSED, obj)
    return out.getvalue()


def read_avro(data: bytes, _ctx: SerializationContext | None) -> Any:
    return fastavro.schemaless_reader(io.BytesIO(data), PARSED)


def test_sensitive_field_encrypted_others_readable_without_keys(kafka_broker: str, tmp_path: Path) -> None:
    kms = LocalKms(tmp_path / "ring.json")
    kms.create_key("clinic")
    topic = new_topic(kafka_broker)

    policy = FieldPolicy.from_avro(SCHEMA)
    records = [
        {"id": "p1", "ward": "cardiology", "diagnosis": "atrial fibrillation", "insurance_no": "INS-0001"},
        {"id": "p2", "ward": "oncology", "diagnosis": "melanoma stage II", "insurance_no": "INS-0002"},
    ]
    producer = SerializingProducer({
        "bootstrap.servers": kafka_broker,
        "key.serializer": StringSerializer(),
        "value.serializer": FieldEncryptingSerializer(kms, "clinic", policy, write_avro),
    })
    for record in records:
        producer.produce(topic, key=record["id"], value=record, headers=[])  # the record identifier goes there
    assert producer.flush(30) == 0

    messages = read_raw(kafka_broker, topic, len(records))

    for msg, record in zip(messages, records, strict=True):
        assert record["diagnosis"].encode() not in msg.value()
        assert record["insurance_no"].encode() not in msg.value()
        keyless = read_avro(msg.value(), None)  # a consumer with the schema and no keys
        assert keyless["id"] == record["id"] and keyless["ward"] == record["ward"]
        assert keyless["diagnosis"] != record["diagnosis"] and keyless["insurance_no"] != record["insurance_no"]

        ctx = SerializationContext(topic, MessageField.VALUE, msg.headers())
        assert FieldDecryptingDeserializer(kms, policy, read_avro, kek_names=["clinic"])(msg.value(), ctx) == record


def test_a_topic_of_format_1_field_records_is_migrated_to_format_2(kafka_broker: str, tmp_path: Path) -> None:
    """Records written before field format version 2 (fields not bound to their record) are refused by
    default; `reencrypt_topic` with a `FieldReencryptor` rewrites the latest record of each key."""
    kms = LocalKms(tmp_path / "ring.json")
    kms.create_key("orders")
    topic = new_topic(kafka_broker)
    producer = Producer({"bootstrap.servers": kafka_broker})
    alice = {"ssn": "alice-ssn", "name": "Alice", "phones": ["555-0100"]}
    mallory = {"ssn": "mallory-ssn", "name": "Mallory", "phones": []}
    for key, record in ((b"alice", alice), (b"mallory", mallory)):
        producer.produce(topic, key=key, value=json.dumps(sealed_in_format_1(kms, "orders", topic, record)).encode())
    assert producer.flush(30) == 0

    policy = FieldPolicy.from_json_schema(V1_SCHEMA)
    reader = FieldDecryptingDeserializer(kms, policy, lambda data, _: json.loads(data), kek_names=["orders"])
    old = read_raw(kafka_broker, topic, 2)
    with pytest.raises(DecryptionError, match="field format version 1"):
        reader(old[0].value(), SerializationContext(topic, MessageField.VALUE, old[0].headers()))

    migrate = FieldReencryptor(kms, "orders", policy, deserializer=lambda data, _: json.loads(data),
                               serializer=lambda obj, _: json.dumps(obj).encode())
    report = reencrypt_topic({"bootstrap.servers": kafka_broker}, topic, migrate)
    assert report == ReencryptionReport(read=2, rewritten=2, already_current=0, tombstones=0)
    new = read_raw(kafka_broker, topic, 4)[2:]
    assert {msg.key(): reader(msg.value(), SerializationContext(topic, MessageField.VALUE, msg.headers()))
            for msg in new} == {b"alice": alice, b"mallory": mallory}
    again = reencrypt_topic({"bootstrap.servers": kafka_broker}, topic, migrate)
    assert again == ReencryptionReport(read=4, rewritten=0, already_current=2, tombstones=0)
