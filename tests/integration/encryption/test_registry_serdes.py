"""Encryption around the registry's Confluent wire-format serdes, against a real `kgov serve` and Tansu.

The schema is registered with Confluent-style metadata tags and an ENCRYPT rule; the field policy is
built from what the registry returns, and a consumer without keys still decodes every other field.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.serialization import MessageField, SerializationContext, StringSerializer
from confluent_kafka.serializing_producer import SerializingProducer

from encryption import DecryptingDeserializer, EncryptingSerializer, EncryptionError, LocalKms
from encryption.fields import FieldDecryptingDeserializer, FieldEncryptingSerializer, FieldPolicy
from registry.client import RegistryClient
from registry.serdes import AvroDeserializer, AvroSerializer, JSONDeserializer, JSONSerializer
from tests.e2e.registry.kgov_process import PASSWORD, kgov_serve

pytestmark = pytest.mark.broker

SCHEMA = json.dumps({
    "type": "record", "name": "Payment", "namespace": "com.bank",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "iban", "type": "string"},
        {"name": "holder", "type": "string"},
    ],
})
METADATA = {"tags": {"com.bank.Payment.iban": ["PII"], "**.holder": ["PII", "JOIN"]}}
RULE_SET = {"domainRules": [
    {"name": "encrypt-pii", "kind": "TRANSFORM", "type": "ENCRYPT", "mode": "WRITEREAD", "tags": ["PII"],
     "params": {"encrypt.kek.name": "payments"}},
    {"name": "joinable", "kind": "TRANSFORM", "type": "ENCRYPT", "mode": "WRITEREAD", "tags": ["JOIN"],
     "params": {"encrypt.kek.name": "payments", "encrypt.dek.algorithm": "AES256_SIV"}},
]}
PAYMENT = {"id": "tx-1", "amount": 99.5, "iban": "DE89370400440532013000", "holder": "Erika Mustermann"}


@pytest.fixture(scope="module")
def registry_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with kgov_serve(tmp_path_factory.mktemp("kgov-serve")) as url:
        yield url


def consume(bootstrap: str, topic: str, count: int) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    messages = []
    try:
        while len(messages) < count:
            msg = consumer.poll(10)
            assert msg is not None and msg.error() is None
            messages.append(msg)
    finally:
        consumer.close()
    return messages


def test_field_and_payload_encryption_around_registry_serdes(
    registry_url: str, kafka_broker: str, tmp_path: Path
) -> None:
    topic = f"payments-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_broker})
    for future in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        future.result(timeout=30)
    auth = ("admin", PASSWORD)
    subject = f"{topic}-value"
    registered = httpx.post(f"{registry_url}/subjects/{subject}/versions", auth=auth, timeout=10,
                            json={"schema": SCHEMA, "schemaType": "AVRO", "metadata": METADATA, "ruleSet": RULE_SET})
    assert registered.status_code == 200, registered.text
    latest = httpx.get(f"{registry_url}/subjects/{subject}/versions/latest", auth=auth, timeout=10).json()
    policy = FieldPolicy.from_registered_schema(latest)
    assert {(rule.name, rule.deterministic) for rule in policy.rules} == {("iban", False), ("holder", True)}

    kms = LocalKms(tmp_path / "ring.json")
    kms.create_key("payments")
    client = RegistryClient(registry_url, basic_auth=auth)
    try:
        field_level = FieldEncryptingSerializer(
            kms, "payments", policy, AvroSerializer(client, SCHEMA, use_latest_version=True))
        whole = EncryptingSerializer(kms, "payments", AvroSerializer(client, SCHEMA, use_latest_version=True), bind_key=False)
        producer = SerializingProducer({"bootstrap.servers": kafka_broker, "key.serializer": StringSerializer()})
        field_headers: list[tuple[str, bytes]] = []
        producer.produce(topic, key="tx-1", value=field_level(PAYMENT, SerializationContext(
            topic, MessageField.VALUE, field_headers)), headers=field_headers)
        headers: list[tuple[str, bytes]] = []
        producer.produce(topic, key="tx-1", value=whole(PAYMENT, SerializationContext(
            topic, MessageField.VALUE, headers)), headers=headers)
        assert producer.flush(30) == 0

        field_msg, whole_msg = consume(kafka_broker, topic, 2)
        for msg in (field_msg, whole_msg):
            assert b"DE89" not in msg.value() and b"Erika" not in msg.value()

        keyless = AvroDeserializer(client)(field_msg.value(), None)  # registry schema, no keys
        assert keyless["id"] == "tx-1" and keyless["amount"] == 99.5
        assert keyless["iban"] != PAYMENT["iban"] and keyless["holder"] != PAYMENT["holder"]

        ctx = SerializationContext(topic, MessageField.VALUE, field_msg.headers())
        assert FieldDecryptingDeserializer(kms, policy, AvroDeserializer(client))(field_msg.value(), ctx) == PAYMENT
        ctx = SerializationContext(topic, MessageField.VALUE, whole_msg.headers())
        assert DecryptingDeserializer(kms, AvroDeserializer(client))(whole_msg.value(), ctx) == PAYMENT
    finally:
        client.close()


PERSON_JSON = {
    "type": "object", "title": "Person",
    "properties": {
        "name": {"type": "string"},
        "phone": {"type": "string", "confluent:tags": ["PII"]},
        "ssn": {"oneOf": [{"type": "null"}, {"type": "string", "confluent:tags": ["PII"]}]},
        "emails": {"type": "array", "items": {"type": "string", "confluent:tags": ["PII"]}},
        "attributes": {"type": "object", "properties": {"kind": {"type": "string"}},
                       "additionalProperties": {"type": "string", "confluent:tags": ["PII"]}},
    },
    "required": ["name"],
}
PERSON_AVRO = {
    "type": "record", "name": "Person", "namespace": "com.acme",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "phone", "type": "string", "confluent:tags": ["PII"]},
        {"name": "ssn", "type": ["null", {"type": "string", "confluent:tags": ["PII"]}], "default": None},
        {"name": "emails", "type": {"type": "array", "items": "string"}, "confluent:tags": ["PII"]},
        {"name": "documents", "type": {"type": "map", "values": {"type": "bytes", "confluent:tags": ["PII"]}}},
    ],
}
PII_RULES = {"domainRules": [{"name": "encrypt-pii", "kind": "TRANSFORM", "type": "ENCRYPT", "mode": "WRITEREAD",
                              "tags": ["PII"], "params": {"encrypt.kek.name": "people"}}]}


def register(registry_url: str, subject: str, schema: dict, schema_type: str) -> dict:
    auth = ("admin", PASSWORD)
    registered = httpx.post(f"{registry_url}/subjects/{subject}/versions", auth=auth, timeout=10,
                            json={"schema": json.dumps(schema), "schemaType": schema_type, "ruleSet": PII_RULES})
    assert registered.status_code == 200, registered.text
    latest: dict = httpx.get(f"{registry_url}/subjects/{subject}/versions/latest", auth=auth, timeout=10).json()
    return latest


def test_tags_in_branches_items_and_additional_properties_through_the_registry_serdes(
    registry_url: str, kafka_broker: str, tmp_path: Path
) -> None:
    """Tags Confluent's transform would skip (a nullable oneOf branch, `items`, `additionalProperties`,
    an Avro union branch's type, map values) are encrypted by the real serdes, validate against the
    registered schema, travel through the broker and decrypt back."""
    topic = f"people-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_broker})
    for future in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        future.result(timeout=30)
    json_policy = FieldPolicy.from_registered_schema(register(registry_url, f"{topic}-json", PERSON_JSON, "JSON"))
    assert {rule.name for rule in json_policy.rules} == {"phone", "ssn", "emails.[]", "attributes.{}"}
    avro_policy = FieldPolicy.from_registered_schema(register(registry_url, f"{topic}-avro", PERSON_AVRO, "AVRO"))
    assert {rule.name for rule in avro_policy.rules} == {"phone", "ssn", "emails.[]", "documents.{}"}

    kms = LocalKms(tmp_path / "ring.json")
    kms.create_key("people")
    client = RegistryClient(registry_url, basic_auth=("admin", PASSWORD))
    person_json = {"name": "Alice", "phone": "+33 6 12 34 56 78", "ssn": "078-05-1120", "emails": ["alice@example.com"],
                   "attributes": {"kind": "person", "passport": "X1234567"}}
    person_avro = {"name": "Alice", "phone": "+33 6 12 34 56 78", "ssn": "078-05-1120", "emails": ["alice@example.com"],
                   "documents": {"passport": b"X1234567"}}

    def subject(name: str) -> Any:
        return lambda ctx, record_name: f"{ctx.topic}-{name}"

    try:
        serializers = [
            FieldEncryptingSerializer(kms, "people", json_policy, JSONSerializer(
                client, json.dumps(PERSON_JSON), use_latest_version=True, subject_name_strategy=subject("json"))),
            FieldEncryptingSerializer(kms, "people", avro_policy, AvroSerializer(
                client, json.dumps(PERSON_AVRO), use_latest_version=True, subject_name_strategy=subject("avro"))),
        ]
        producer = SerializingProducer({"bootstrap.servers": kafka_broker})
        for serializer, person in zip(serializers, (person_json, person_avro), strict=True):
            headers: list[tuple[str, bytes]] = []
            producer.produce(topic, value=serializer(person, SerializationContext(topic, MessageField.VALUE, headers)),
                             headers=headers)
        assert producer.flush(30) == 0

        json_msg, avro_msg = consume(kafka_broker, topic, 2)
        for msg in (json_msg, avro_msg):
            for secret in (b"12 34 56", b"078-05-1120", b"alice@example.com", b"X1234567"):
                assert secret not in msg.value()
        keyless = JSONDeserializer(client)(json_msg.value(), None)  # validated against the registered schema
        assert keyless["name"] == "Alice" and keyless["attributes"]["kind"] == "person"
        assert keyless["ssn"] != person_json["ssn"] and keyless["emails"] != person_json["emails"]

        ctx = SerializationContext(topic, MessageField.VALUE, json_msg.headers())
        assert FieldDecryptingDeserializer(kms, json_policy, JSONDeserializer(client))(json_msg.value(), ctx) == person_json
        ctx = SerializationContext(topic, MessageField.VALUE, avro_msg.headers())
        assert FieldDecryptingDeserializer(kms, avro_policy, AvroDeserializer(client))(avro_msg.value(), ctx) == person_avro
    finally:
        client.close()


def test_a_registered_tag_kgov_cannot_honour_refuses_the_policy(registry_url: str) -> None:
    schema = {"type": "object", "properties": {
        "name": {"type": "string", "confluent:tags": ["PII"]},
        "notes": {"type": "object", "patternProperties": {"^n": {"type": "string", "confluent:tags": ["PII"]}}}}}
    latest = register(registry_url, f"notes-{uuid.uuid4().hex[:8]}-value", schema, "JSON")
    with pytest.raises(EncryptionError, match="#/properties/notes/patternProperties/\\^n, which cannot be honoured"):
        FieldPolicy.from_registered_schema(latest)
