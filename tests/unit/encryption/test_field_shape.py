"""`FieldDecryptingDeserializer` without `inner=`: the record it is handed must be a dict matching the
schema the policy was read from, as the inner deserializer would have checked. Before, a record shaped
otherwise passed through with its tagged values neither decrypted nor checked."""

from __future__ import annotations

import traceback
from typing import Any

import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from encryption import DecryptionError, LocalKms
from encryption.fields import FieldDecryptingDeserializer, FieldEncryptingSerializer, FieldPolicy, FieldRule

PII = {"type": "string", "confluent:tags": ["PII"]}
JSON_SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "ssn": PII, "emails": {"type": "array", "items": PII}}}
AVRO_SCHEMA = {"type": "record", "name": "Person", "fields": [
    {"name": "name", "type": "string"},
    {"name": "ssn", "type": ["null", "string"], "default": None, "confluent:tags": ["PII"]},
    {"name": "emails", "type": {"type": "array", "items": "string"}, "confluent:tags": ["PII"]},
]}


def ctx() -> SerializationContext:
    return SerializationContext("people", MessageField.VALUE, [])


def refusal(reader: FieldDecryptingDeserializer, record: Any) -> DecryptionError:
    with pytest.raises(DecryptionError) as caught:
        reader(record, ctx())
    return caught.value


@pytest.mark.parametrize("schema_type", ["JSON", "AVRO"])
def test_records_shaped_otherwise_than_the_schema_are_refused(kms: LocalKms, schema_type: str) -> None:
    policy = (FieldPolicy.from_json_schema(JSON_SCHEMA) if schema_type == "JSON"
              else FieldPolicy.from_avro(AVRO_SCHEMA))
    reader = FieldDecryptingDeserializer(kms, policy)
    sent = ctx()
    written = FieldEncryptingSerializer(kms, "orders", policy)(
        {"name": "Alice", "ssn": "078-05-1120", "emails": ["a@example.com"]}, sent)
    assert reader(written, sent) == {"name": "Alice", "ssn": "078-05-1120", "emails": ["a@example.com"]}
    # A writer to the topic puts plaintext where the schema has an array of encrypted strings: the walk
    # looks for a list there, found none, and used to hand the value on as it was.
    for forged in ({**written, "emails": {"0": "mallory@example.com"}}, {**written, "emails": "mallory@example.com"}):
        error = refusal(reader, forged)
        assert f"does not match the policy's {'JSON Schema at $.emails' if schema_type == 'JSON' else 'Avro schema'}" \
            in str(error)
        shown = "".join(traceback.format_exception(error))
        assert "mallory" not in shown and "078-05" not in shown  # no value of the record is quoted
    assert "does not match" in str(refusal(reader, {**written, "name": 12}))


def test_bytes_handed_to_a_deserializer_without_inner_are_refused(kms: LocalKms) -> None:
    # As a consumer's value.deserializer with inner=None, it is handed the record's bytes: they used to
    # come back as they were, nothing decrypted.
    reader = FieldDecryptingDeserializer(kms, FieldPolicy.from_json_schema(JSON_SCHEMA))
    assert "reads records as dicts, got bytes: pass inner=" in str(refusal(reader, b'{"ssn": "x"}'))


def test_a_policy_built_from_rules_checks_that_the_record_is_a_dict(kms: LocalKms) -> None:
    reader = FieldDecryptingDeserializer(kms, FieldPolicy([FieldRule(("ssn",), "string", False)]))
    assert "got list" in str(refusal(reader, [{"ssn": "x"}]))


def test_with_inner_the_inner_deserializer_decides_the_shape(kms: LocalKms) -> None:
    # The inner deserializer (Avro, JSON with its schema) is the check there; none is added on top.
    policy = FieldPolicy.from_json_schema(JSON_SCHEMA)
    reader = FieldDecryptingDeserializer(kms, policy, lambda data, _: data)
    assert reader({"name": 12}, ctx()) == {"name": 12}


def test_a_schema_the_validator_cannot_load_refuses_records_never_skips_the_check(kms: LocalKms) -> None:
    # The policy's walk reads tags, not every detail fastavro needs (a fixed type's size): refused, not skipped.
    policy = FieldPolicy.from_avro({"type": "record", "name": "R", "fields": [
        {"name": "ssn", "type": "string", "confluent:tags": ["PII"]}, {"name": "x", "type": {"type": "fixed", "name": "F"}}]})
    reader = FieldDecryptingDeserializer(kms, policy)
    assert "cannot be checked against the policy's AVRO schema (KeyError): pass inner=" in str(
        refusal(reader, {"ssn": "x"}))


def test_the_json_check_runs_patterns_in_linear_time(kms: LocalKms) -> None:
    # A pattern Python's `re` backtracks on for ever (`^(a+)+$` against "aaaa...!"): with RE2 the record
    # is refused at once (a backtracking validator would hold the consumer here past the test timeout).
    schema = {"type": "object", "properties": {"name": {"type": "string", "pattern": "^(a+)+$"}, "ssn": PII}}
    reader = FieldDecryptingDeserializer(kms, FieldPolicy.from_json_schema(schema))
    assert "does not match the policy's JSON Schema at $.name" in str(refusal(reader, {"name": "a" * 5000 + "!"}))
