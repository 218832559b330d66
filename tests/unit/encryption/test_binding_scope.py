"""What a field-level ciphertext is bound to, as docs/encryption.md states it. Field format version 2:
the topic, the rule path, the record (its `kgov.enc.rec` identifier) and the concrete position (array
index, map key); not the Kafka key. Format version 1 (records written before it) is refused unless the
consumer opts in for a migration, and then binds neither record nor position."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from encryption import DecryptionError, EncryptionError, LocalKms
from encryption.envelope import RECORD_HEADER, RECORD_ID_SIZE
from encryption.fields import FieldDecryptingDeserializer, FieldEncryptingSerializer, FieldPolicy
from encryption.serdes import RecordContext
from tests.unit.encryption.field_format_1 import V1_ALICE, V1_MALLORY, V1_SCHEMA, sealed_in_format_1

PII = {"type": "string", "confluent:tags": ["PII"]}
SCHEMA = {
    "type": "object",
    "properties": {
        "ssn": PII,
        "tax_id": PII,
        "notes": {"type": "array", "items": {"type": "object", "properties": {"text": PII}}},
        "labels": {"type": "object", "additionalProperties": PII},
    },
}
Sealed = tuple[FieldPolicy, tuple[dict[str, Any], SerializationContext], tuple[dict[str, Any], SerializationContext]]


def ctx(topic: str = "customers", key: bytes | None = None) -> SerializationContext:
    return RecordContext(topic, MessageField.VALUE, [], key=key)


def with_headers(sent: SerializationContext, topic: str = "customers") -> SerializationContext:
    """A consumer's context for a record produced with `sent`: the same headers (a copy)."""
    return SerializationContext(topic, MessageField.VALUE, list(sent.headers or []))


@pytest.fixture
def sealed(kms: LocalKms) -> Sealed:
    policy = FieldPolicy.from_json_schema(SCHEMA)
    serializer = FieldEncryptingSerializer(kms, "orders", policy)
    alice_ctx, mallory_ctx = ctx(key=b"alice"), ctx(key=b"mallory")
    alice = serializer({"ssn": "alice-ssn", "tax_id": "alice-tax", "notes": [{"text": "first"}, {"text": "second"}],
                        "labels": {"home": "Oslo", "work": "Bergen"}}, alice_ctx)
    mallory = serializer({"ssn": "mallory-ssn", "tax_id": "m-tax", "notes": [{"text": "x"}], "labels": {}},
                         mallory_ctx)
    assert {rule.name for rule in policy.rules} == {"ssn", "tax_id", "notes.[].text", "labels.{}"}
    assert alice["notes"][0]["text"] != "first"
    return policy, (alice, alice_ctx), (mallory, mallory_ctx)


def test_each_record_carries_one_fresh_identifier(sealed: Sealed) -> None:
    _, (_, alice_ctx), (_, mallory_ctx) = sealed
    ids = []
    for sent in (alice_ctx, mallory_ctx):
        assert sent.headers is not None
        found = [value for name, value in sent.headers if name == RECORD_HEADER]
        assert len(found) == 1 and len(found[0]) == RECORD_ID_SIZE
        ids.append(found[0])
    assert ids[0] != ids[1]


def test_a_field_does_not_move_to_another_record_of_the_same_topic(kms: LocalKms, sealed: Sealed) -> None:
    policy, (alice, _), (mallory, mallory_ctx) = sealed
    reader = FieldDecryptingDeserializer(kms, policy)
    assert reader(mallory, with_headers(mallory_ctx))["ssn"] == "mallory-ssn"
    forged = copy.deepcopy(mallory)
    forged["ssn"] = alice["ssn"]  # Alice's ssn pasted into Mallory's record: format version 1 decrypted it
    with pytest.raises(DecryptionError, match="authentication failed"):
        reader(forged, with_headers(mallory_ctx))


def test_items_and_map_values_do_not_move_within_a_record(kms: LocalKms, sealed: Sealed) -> None:
    policy, (alice, alice_ctx), _ = sealed
    reader = FieldDecryptingDeserializer(kms, policy)
    assert reader(alice, with_headers(alice_ctx))["labels"] == {"home": "Oslo", "work": "Bergen"}
    swapped = copy.deepcopy(alice)
    swapped["notes"] = [alice["notes"][1], alice["notes"][0]]
    with pytest.raises(DecryptionError, match="authentication failed"):
        reader(swapped, with_headers(alice_ctx))
    relabelled = copy.deepcopy(alice)
    relabelled["labels"] = {"home": alice["labels"]["work"], "work": alice["labels"]["home"]}
    with pytest.raises(DecryptionError, match="authentication failed"):
        reader(relabelled, with_headers(alice_ctx))
    truncated = copy.deepcopy(alice)
    truncated["notes"] = [alice["notes"][1]]  # the second item moved to index 0
    with pytest.raises(DecryptionError, match="authentication failed"):
        reader(truncated, with_headers(alice_ctx))


def test_the_record_identifier_must_be_there_once_and_be_the_records_own(kms: LocalKms, sealed: Sealed) -> None:
    policy, (alice, alice_ctx), (_, mallory_ctx) = sealed
    reader = FieldDecryptingDeserializer(kms, policy)
    headers = list(alice_ctx.headers or [])
    stripped = [(n, v) for n, v in headers if n != RECORD_HEADER]
    with pytest.raises(DecryptionError, match=r"no 'kgov\.enc\.rec' header"):
        reader(alice, SerializationContext("customers", MessageField.VALUE, stripped))
    with pytest.raises(DecryptionError, match=r"more than one 'kgov\.enc\.rec' header"):
        reader(alice, SerializationContext("customers", MessageField.VALUE, headers + headers))
    with pytest.raises(DecryptionError, match="malformed"):
        reader(alice, SerializationContext("customers", MessageField.VALUE, [(RECORD_HEADER, b"short")]))
    # Alice's fields under Mallory's identifier: the identifier is in every field's associated data.
    with pytest.raises(DecryptionError, match="authentication failed"):
        reader(alice, with_headers(mallory_ctx))


def test_a_whole_record_still_moves_with_its_identifier_to_another_key(kms: LocalKms, sealed: Sealed) -> None:
    # Not bound: the Kafka key. The record (value and its kgov.enc.rec header) produced again under
    # another key decrypts, as a whole value with bind_key=False does.
    policy, (alice, alice_ctx), _ = sealed
    moved = RecordContext("customers", MessageField.VALUE, list(alice_ctx.headers or []), key=b"mallory")
    assert FieldDecryptingDeserializer(kms, policy)(alice, moved)["ssn"] == "alice-ssn"


def test_unencrypted_fields_and_missing_fields_are_not_bound(kms: LocalKms, sealed: Sealed) -> None:
    # The identifier binds the encrypted fields to each other, not to the record's plaintext fields or
    # to which encrypted fields are there (docs/encryption.md).
    policy, (alice, alice_ctx), _ = sealed
    reader = FieldDecryptingDeserializer(kms, policy)
    edited = {**alice, "notes": alice["notes"][:1], "extra": "chosen by the writer"}
    del edited["tax_id"]
    assert reader(edited, with_headers(alice_ctx)) == {
        "ssn": "alice-ssn", "notes": [{"text": "first"}], "labels": {"home": "Oslo", "work": "Bergen"},
        "extra": "chosen by the writer"}


def test_bind_key_also_binds_the_record_to_its_kafka_key(kms: LocalKms) -> None:
    policy = FieldPolicy.from_json_schema(SCHEMA)
    serializer = FieldEncryptingSerializer(kms, "orders", policy, bind_key=True)
    sent = ctx(key=b"alice")
    alice = serializer({"ssn": "alice-ssn", "notes": [{"text": "first"}]}, sent)
    reader = FieldDecryptingDeserializer(kms, policy)
    headers = list(sent.headers or [])
    assert reader(alice, RecordContext("customers", MessageField.VALUE, headers, key=b"alice"))["ssn"] == "alice-ssn"
    with pytest.raises(DecryptionError, match="authentication failed"):  # the whole record moved to another key
        reader(alice, RecordContext("customers", MessageField.VALUE, headers, key=b"mallory"))
    with pytest.raises(DecryptionError, match="bound to its Kafka key, which this deserializer was not given"):
        reader(alice, SerializationContext("customers", MessageField.VALUE, headers))
    with pytest.raises(EncryptionError, match="Kafka key is not known"):
        serializer({"ssn": "x"}, SerializationContext("customers", MessageField.VALUE, []))
    null_key = ctx(key=None)
    keyless = serializer({"ssn": "k"}, null_key)
    assert reader(keyless, RecordContext("customers", MessageField.VALUE, list(null_key.headers or []), key=None)) == {
        "ssn": "k"}


def test_a_field_does_not_move_to_another_topic_or_rule_path(kms: LocalKms, sealed: Sealed) -> None:
    policy, (alice, alice_ctx), _ = sealed
    reader = FieldDecryptingDeserializer(kms, policy)
    with pytest.raises(DecryptionError, match="authentication failed"):
        reader(alice, with_headers(alice_ctx, "other-topic"))
    other_path = copy.deepcopy(alice)
    other_path["tax_id"] = alice["ssn"]
    with pytest.raises(DecryptionError, match="authentication failed"):
        reader(other_path, with_headers(alice_ctx))
    into_array = copy.deepcopy(alice)
    into_array["notes"] = [{"text": alice["ssn"]}]
    with pytest.raises(DecryptionError, match="authentication failed"):
        reader(into_array, with_headers(alice_ctx))


def test_a_record_without_headers_is_refused_not_written_unbound(kms: LocalKms) -> None:
    serializer = FieldEncryptingSerializer(kms, "orders", FieldPolicy.from_json_schema(SCHEMA))
    with pytest.raises(EncryptionError, match="produce with headers=\\[\\]"):
        serializer({"ssn": "alice-ssn"}, SerializationContext("customers", MessageField.VALUE, None))
    used: list[tuple[str, bytes]] = [(RECORD_HEADER, b"x" * RECORD_ID_SIZE)]
    with pytest.raises(EncryptionError, match="fresh headers list"):
        serializer({"ssn": "alice-ssn"}, SerializationContext("customers", MessageField.VALUE, used))
    assert used == [(RECORD_HEADER, b"x" * RECORD_ID_SIZE)]


def test_deterministic_fields_stay_unbound_and_need_no_header(kms: LocalKms) -> None:
    policy = FieldPolicy.from_json_schema(SCHEMA, deterministic_tags=["PII"])
    serializer = FieldEncryptingSerializer(kms, "orders", policy)
    alice = serializer({"ssn": "alice-ssn", "notes": [{"text": "a"}, {"text": "b"}]},
                       SerializationContext("customers", MessageField.VALUE, None))
    reader = FieldDecryptingDeserializer(kms, policy)
    swapped = {"ssn": alice["ssn"], "notes": [alice["notes"][1], alice["notes"][0]]}
    assert reader(swapped, SerializationContext("customers", MessageField.VALUE, None)) == {
        "ssn": "alice-ssn", "notes": [{"text": "b"}, {"text": "a"}]}


def test_format_version_1_fields_are_refused_by_default(fixed_kms: LocalKms) -> None:
    reader = FieldDecryptingDeserializer(fixed_kms, FieldPolicy.from_json_schema(V1_SCHEMA))
    with pytest.raises(DecryptionError, match=r"field 'phones\.\[\]' is in field format version 1.*accept_unbound_fields"):
        reader(V1_ALICE, SerializationContext("customers", MessageField.VALUE, []))


def test_format_version_1_fields_read_on_request_with_their_old_binding(fixed_kms: LocalKms) -> None:
    reader = FieldDecryptingDeserializer(fixed_kms, FieldPolicy.from_json_schema(V1_SCHEMA), accept_unbound_fields=True)
    plain = SerializationContext("customers", MessageField.VALUE, [])
    assert reader(V1_ALICE, plain) == {"ssn": "alice-ssn", "name": "Alice", "phones": ["555-0100", "555-0101"]}
    # What version 1 allows, and why it is refused by default: Alice's ssn pasted into Mallory's record.
    assert reader({**V1_MALLORY, "ssn": V1_ALICE["ssn"]}, plain)["ssn"] == "alice-ssn"
    # Still bound to the topic, and a version 1 field cannot be relabelled version 2 (the header is
    # in the associated data).
    with pytest.raises(DecryptionError, match="authentication failed"):
        reader(V1_ALICE, SerializationContext("other", MessageField.VALUE, []))
    relabelled = bytearray(base64.b64decode(V1_ALICE["ssn"]))
    relabelled[4] = 2  # the header's version byte, after the 4-byte magic
    with pytest.raises(DecryptionError, match="authentication failed"):
        reader({**V1_ALICE, "ssn": base64.b64encode(bytes(relabelled)).decode()},
               SerializationContext("customers", MessageField.VALUE, [(RECORD_HEADER, bytes(RECORD_ID_SIZE))]))


def test_the_format_1_helper_writes_what_the_old_serializer_wrote(fixed_kms: LocalKms) -> None:
    # sealed_in_format_1 (used where records must be written on another topic) against the old vectors.
    reader = FieldDecryptingDeserializer(fixed_kms, FieldPolicy.from_json_schema(V1_SCHEMA), accept_unbound_fields=True)
    plain = {"ssn": "alice-ssn", "name": "Alice", "phones": ["555-0100", "555-0101"]}
    written = sealed_in_format_1(fixed_kms, "orders", "customers", plain)
    assert [len(written["ssn"]), len(written["phones"][0])] == [len(V1_ALICE["ssn"]), len(V1_ALICE["phones"][0])]
    assert written["ssn"][:24] == V1_ALICE["ssn"][:24]  # magic, version 1, flags 0, KEK name and version
    assert reader(written, SerializationContext("customers", MessageField.VALUE, [])) == plain
