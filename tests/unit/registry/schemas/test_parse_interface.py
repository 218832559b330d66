"""The contract the registry API codes against: parse_schema, ParsedSchema, errors."""

from __future__ import annotations

import pytest

from registry.schemas import (
    InvalidDefaultError,
    InvalidSchemaError,
    ParsedSchema,
    SchemaReference,
    SchemaType,
    parse_schema,
)


def test_avro_primitive_object_form_is_stored_as_its_canonical_string() -> None:
    # confluentinc/schema-registry#2308: {"type": "string"} comes back as "string"
    parsed = parse_schema(SchemaType.AVRO, '{"type": "string"}')
    assert parsed.canonical == '"string"'
    assert parsed.schema_type is SchemaType.AVRO
    assert parsed.references == ()


def test_same_schema_spelled_differently_has_the_same_fingerprint() -> None:
    a = parse_schema(SchemaType.AVRO, '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}')
    b = parse_schema(SchemaType.AVRO, '{"fields": [{"type": "int", "name": "a"}], "name": "R", "type": "record"}')
    c = parse_schema(SchemaType.AVRO, '{"type": "record", "name": "R", "fields": [{"name": "b", "type": "int"}]}')
    assert a.canonical == b.canonical
    assert a.fingerprint() == b.fingerprint()
    assert a == b
    assert a.fingerprint() != c.fingerprint()


def test_fingerprint_covers_references() -> None:
    ref = parse_schema(SchemaType.AVRO, '{"type":"fixed","name":"ns.F","size":4}')
    text = '{"type":"record","name":"R","fields":[{"name":"f","type":"ns.F"}]}'
    one = parse_schema(SchemaType.AVRO, text, references=[SchemaReference("ns.F", "f", 1)], resolved={"ns.F": ref})
    two = parse_schema(SchemaType.AVRO, text, references=[SchemaReference("ns.F", "f", 2)], resolved={"ns.F": ref})
    assert one.canonical == two.canonical == text
    assert one.fingerprint() != two.fingerprint()


def test_protobuf_is_refused_with_a_message() -> None:
    with pytest.raises(InvalidSchemaError, match="PROTOBUF"):
        parse_schema(SchemaType.PROTOBUF, 'syntax = "proto3";')


def test_unresolved_reference_is_invalid() -> None:
    with pytest.raises(InvalidSchemaError, match="not resolved"):
        parse_schema(SchemaType.AVRO, '"ns.F"', references=[SchemaReference("ns.F", "f", 1)])


def test_json_schema_is_parsed_and_compact() -> None:
    parsed = parse_schema(SchemaType.JSON, '{ "type": "object", "properties": { "a": { "type": "string" } } }')
    assert parsed.canonical == '{"type":"object","properties":{"a":{"type":"string"}}}'
    assert isinstance(parsed, ParsedSchema)
    assert parsed.parsed == {"type": "object", "properties": {"a": {"type": "string"}}}


def test_parse_results_are_cached_per_text_and_references() -> None:
    text = '{"type":"record","name":"Cached","fields":[{"name":"f","type":"ns.F"}]}'
    four = parse_schema(SchemaType.AVRO, '{"type":"fixed","name":"ns.F","size":4}')
    eight = parse_schema(SchemaType.AVRO, '{"type":"fixed","name":"ns.F","size":8}')
    ref = [SchemaReference("ns.F", "f", 1)]
    first = parse_schema(SchemaType.AVRO, text, references=ref, resolved={"ns.F": four})
    assert parse_schema(SchemaType.AVRO, text, references=ref, resolved={"ns.F": four}) is first
    # a different referenced schema is a different parse (its fixed size differs)
    other = parse_schema(SchemaType.AVRO, text, references=ref, resolved={"ns.F": eight})
    assert other is not first
    assert parse_schema(SchemaType.AVRO, text, references=ref, resolved={"ns.F": four}, normalize=True) is not first


def test_defaults_are_checked_only_when_asked_and_a_checked_parse_serves_both() -> None:
    bad = '{"type":"record","name":"LegacyDefault","fields":[{"name":"f","type":"string","default":null}]}'
    with pytest.raises(InvalidDefaultError, match="Invalid default for field f"):
        parse_schema(SchemaType.AVRO, bad)
    assert parse_schema(SchemaType.AVRO, bad, validate_defaults=False).canonical == bad
    good = '{"type":"record","name":"CheckedOnce","fields":[{"name":"f","type":"string","default":""}]}'
    checked = parse_schema(SchemaType.AVRO, good)
    assert parse_schema(SchemaType.AVRO, good, validate_defaults=False) is checked
