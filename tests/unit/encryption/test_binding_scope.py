"""What a field-level ciphertext is bound to, as docs/encryption.md states it (format version 1):
the topic and the rule path, not the record, its key or the array index."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from encryption import DecryptionError, LocalKms
from encryption.fields import FieldDecryptingDeserializer, FieldEncryptingSerializer, FieldPolicy
from encryption.serdes import RecordContext

PII = {"type": "string", "confluent:tags": ["PII"]}
SCHEMA = {
    "type": "object",
    "properties": {
        "ssn": PII,
        "tax_id": PII,
        "notes": {"type": "array", "items": {"type": "object", "properties": {"text": PII}}},
    },
}


def ctx(topic: str = "customers", key: bytes | None = None) -> SerializationContext:
    return RecordContext(topic, MessageField.VALUE, [], key=key)


@pytest.fixture
def sealed(kms: LocalKms) -> tuple[FieldPolicy, dict[str, Any], dict[str, Any]]:
    policy = FieldPolicy.from_json_schema(SCHEMA)
    serializer = FieldEncryptingSerializer(kms, "orders", policy)
    alice = serializer({"ssn": "alice-ssn", "tax_id": "alice-tax", "notes": [{"text": "first"}, {"text": "second"}]},
                       ctx(key=b"alice"))
    mallory = serializer({"ssn": "mallory-ssn", "tax_id": "m-tax", "notes": [{"text": "x"}]}, ctx(key=b"mallory"))
    assert {rule.name for rule in policy.rules} == {"ssn", "tax_id", "notes.[].text"}
    assert alice["notes"][0]["text"] != "first"
    return policy, alice, mallory


def test_a_field_moves_to_another_record_and_array_item_of_the_same_topic(
    kms: LocalKms, sealed: tuple[FieldPolicy, dict[str, Any], dict[str, Any]]
) -> None:
    policy, alice, mallory = sealed
    reader = FieldDecryptingDeserializer(kms, policy)
    forged = copy.deepcopy(mallory)
    forged["ssn"] = alice["ssn"]  # another record, another Kafka key: still decrypts (not bound)
    forged["notes"] = [alice["notes"][1], alice["notes"][0]]  # items swapped: the index is not bound
    assert reader(forged, ctx(key=b"mallory")) == {
        "ssn": "alice-ssn", "tax_id": "m-tax", "notes": [{"text": "second"}, {"text": "first"}]
    }


def test_a_field_does_not_move_to_another_topic_or_rule_path(
    kms: LocalKms, sealed: tuple[FieldPolicy, dict[str, Any], dict[str, Any]]
) -> None:
    policy, alice, _ = sealed
    reader = FieldDecryptingDeserializer(kms, policy)
    with pytest.raises(DecryptionError, match="authentication failed"):
        reader(alice, ctx("other-topic"))
    other_path = copy.deepcopy(alice)
    other_path["tax_id"] = alice["ssn"]
    with pytest.raises(DecryptionError, match="authentication failed"):
        reader(other_path, ctx())
    into_array = copy.deepcopy(alice)
    into_array["notes"] = [{"text": alice["ssn"]}]
    with pytest.raises(DecryptionError, match="authentication failed"):
        reader(into_array, ctx())
