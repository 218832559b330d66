"""Compatibility levels as Confluent applies them (AvroCompatibilityTest), with verbose messages."""

from __future__ import annotations

import json

import pytest

from registry.compat import DIFFERENT_SCHEMA_TYPE, CompatibilityLevel, check_compatibility
from registry.schemas import ParsedSchema, SchemaType, parse_schema


def avro(text: str) -> ParsedSchema:
    return parse_schema(SchemaType.AVRO, text)


# Confluent's AvroCompatibilityTest schemas
S1 = avro('{"type":"record","name":"myrecord","fields":[{"type":"string","name":"f1"}]}')
S2 = avro('{"type":"record","name":"myrecord","fields":[{"type":"string","name":"f1"},'
          '{"type":"string","name":"f2","default":"foo"}]}')
S3 = avro('{"type":"record","name":"myrecord","fields":[{"type":"string","name":"f1"},'
          '{"type":"string","name":"f2"}]}')
S4 = avro('{"type":"record","name":"myrecord","fields":[{"type":"string","name":"f1_new","aliases":["f1"]}]}')
S6 = avro('{"type":"record","name":"myrecord","fields":[{"type":["null","string"],"name":"f1","doc":"doc of f1"}]}')
S7 = avro('{"type":"record","name":"myrecord","fields":[{"type":["null","string","int"],"name":"f1",'
          '"doc":"doc of f1"}]}')
S8 = avro('{"type":"record","name":"myrecord","fields":[{"type":"string","name":"f1"},'
          '{"type":"string","name":"f2","default":"foo"},{"type":"string","name":"f3","default":"bar"}]}')

L = CompatibilityLevel
CASES: list[tuple[str, L, ParsedSchema, list[ParsedSchema], bool]] = [
    ("adding a field with default is backward compatible", L.BACKWARD, S2, [S1], True),
    ("adding a field without default is not backward compatible", L.BACKWARD, S3, [S1], False),
    ("renaming a field with an alias is backward compatible", L.BACKWARD, S4, [S1], True),
    ("evolving a field type to a union is backward compatible", L.BACKWARD, S6, [S1], True),
    ("removing a type from a union is not backward compatible", L.BACKWARD, S1, [S6], False),
    ("adding a type to a union is backward compatible", L.BACKWARD, S7, [S6], True),
    ("removing a type from a union is not backward compatible (2)", L.BACKWARD, S6, [S7], False),
    ("backward checks only the latest", L.BACKWARD, S3, [S1, S2], True),
    ("iteratively adding fields with defaults", L.BACKWARD_TRANSITIVE, S8, [S1, S2], True),
    ("transitive: adding a field with default", L.BACKWARD_TRANSITIVE, S2, [S1], True),
    ("transitive: removing a default is compatible with the latest", L.BACKWARD_TRANSITIVE, S3, [S2], True),
    ("transitive: removing a default is not transitively compatible", L.BACKWARD_TRANSITIVE, S3, [S1, S2], False),
    ("forward: adding a field (with default)", L.FORWARD, S2, [S1], True),
    ("forward: adding a field", L.FORWARD, S3, [S1], True),
    ("forward: adding a field (3 after 2)", L.FORWARD, S3, [S2], True),
    ("forward: adding a field (2 after 3)", L.FORWARD, S2, [S3], True),
    ("forward checks only the latest", L.FORWARD, S1, [S3, S2], True),
    ("forward transitive: removing fields with defaults", L.FORWARD_TRANSITIVE, S1, [S8, S2], True),
    ("forward transitive: adding default", L.FORWARD_TRANSITIVE, S2, [S3], True),
    ("forward transitive: removing a field with default", L.FORWARD_TRANSITIVE, S1, [S2], True),
    ("forward transitive: removing a default is not transitive", L.FORWARD_TRANSITIVE, S1, [S3, S2], False),
    ("full: adding a field with default", L.FULL, S2, [S1], True),
    ("full checks only the latest (adding)", L.FULL, S3, [S1, S2], True),
    ("full checks only the latest (removing)", L.FULL, S1, [S3, S2], True),
    ("full transitive: adding fields with defaults", L.FULL_TRANSITIVE, S8, [S1, S2], True),
    ("full transitive: removing fields with defaults", L.FULL_TRANSITIVE, S1, [S8, S2], True),
    ("full transitive: adding default", L.FULL_TRANSITIVE, S2, [S3], True),
    ("full transitive: removing a field with default", L.FULL_TRANSITIVE, S1, [S2], True),
    ("full transitive: adding a field with default (2)", L.FULL_TRANSITIVE, S2, [S1], True),
    ("full transitive: removing a default", L.FULL_TRANSITIVE, S3, [S2], True),
    ("full transitive: adding a field without default", L.FULL_TRANSITIVE, S3, [S1, S2], False),
    ("full transitive: removing a field without default", L.FULL_TRANSITIVE, S1, [S3, S2], False),
    ("none allows anything", L.NONE, S3, [S1], True),
]


@pytest.mark.parametrize(("what", "level", "new", "previous", "compatible"), CASES, ids=[c[0] for c in CASES])
def test_confluent_avro_compatibility_levels(what: str, level: L, new: ParsedSchema,
                                             previous: list[ParsedSchema], compatible: bool) -> None:
    assert (check_compatibility(new, previous, level) == []) is compatible


def test_verbose_message_names_the_path_in_confluents_wording() -> None:
    messages = check_compatibility(S3, [S1], L.BACKWARD)
    assert messages == [
        "{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'f2' at path '/fields/1' "
        "in the new schema has no default value and is missing in the old schema', additionalInfo:'f2'}",
        "{oldSchema: '" + S1.canonical + "'}",
        "{validateFields: 'false', compatibility: 'BACKWARD'}",
    ]


def test_forward_messages_swap_the_roles() -> None:
    messages = check_compatibility(S1, [S3], L.FORWARD)
    assert messages[0] == (
        "{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'f2' at path '/fields/1' "
        "in the old schema has no default value and is missing in the new schema', additionalInfo:'f2'}"
    )
    assert messages[-1] == "{validateFields: 'false', compatibility: 'FORWARD'}"


def test_type_change_is_incompatible_except_under_none() -> None:
    json_schema = parse_schema(SchemaType.JSON, '{"type":"string"}')
    string = avro('"string"')
    for level in L:
        messages = check_compatibility(json_schema, [string], level)
        if level is L.NONE:
            assert messages == []
        else:
            assert messages[0] == DIFFERENT_SCHEMA_TYPE


def test_no_previous_version_is_compatible() -> None:
    assert check_compatibility(S3, [], L.FULL_TRANSITIVE) == []


def test_json_schema_messages_use_new_and_old_roles() -> None:
    old = parse_schema(SchemaType.JSON, json.dumps({"type": "object", "properties": {"a": {"type": "string"}}}))
    new = parse_schema(SchemaType.JSON, json.dumps({"type": "object", "properties": {"a": {"type": "string"},
                                                                                      "b": {"type": "number"}}}))
    messages = check_compatibility(new, [old], L.BACKWARD)
    assert messages[0] == (
        '{errorType:"PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", description:"The new schema has an open content '
        "model and has a property or item at path '#/properties/b' which is missing in the old schema'}"
    )
    assert check_compatibility(new, [old], L.FORWARD) == []


def test_level_names_are_case_insensitive() -> None:
    assert check_compatibility(S3, [S1], "backward") == check_compatibility(S3, [S1], L.BACKWARD)  # type: ignore[arg-type]
    assert check_compatibility(S3, [S1], "none") == []  # type: ignore[arg-type]


def test_messages_name_the_failing_version_when_given() -> None:
    messages = check_compatibility(S3, [S1, S2], L.BACKWARD_TRANSITIVE, versions=[1, 2])
    assert messages[1:] == ["{oldSchemaVersion: 1}", "{oldSchema: '" + S1.canonical + "'}",
                            "{validateFields: 'false', compatibility: 'BACKWARD_TRANSITIVE'}"]


def test_long_old_schemas_are_truncated_in_messages() -> None:
    fields = ",".join(f'{{"name":"f{i}","type":"string"}}' for i in range(600))
    big = avro('{"type":"record","name":"myrecord","fields":[' + fields + "]}")
    bigger = avro('{"type":"record","name":"myrecord","fields":[' + fields + ',{"name":"x","type":"int"}]}')
    messages = check_compatibility(bigger, [big], L.BACKWARD, versions=[3])
    # Confluent's SchemaValidatorBuilder.formatErrorMessages: the first 10240 characters, then "...".
    assert messages[1:3] == ["{oldSchemaVersion: 3}",
                             "{oldSchema: <truncated> '" + big.canonical[:10240] + "...'}"]
    assert len(big.canonical) > 10240


def test_truncation_counts_utf16_units_as_java_does() -> None:
    # 5200 characters outside the BMP are 10400 UTF-16 units: past Confluent's 10240, in 5300 characters.
    doc = "\U0001f600" * 5200
    big = avro(json.dumps({"type": "record", "name": "r", "doc": doc, "fields": [{"name": "a", "type": "int"}]},
                          ensure_ascii=False))
    bigger = avro(json.dumps({"type": "record", "name": "r", "doc": doc, "fields": [
        {"name": "a", "type": "int"}, {"name": "b", "type": "int"}]}, ensure_ascii=False))
    assert len(big.canonical) <= 10240 < len(big.canonical.encode("utf-16-le")) // 2
    note = check_compatibility(bigger, [big], L.BACKWARD)[1]
    assert note.startswith("{oldSchema: <truncated> '") and note.endswith("...'}")
    head = note.removeprefix("{oldSchema: <truncated> '").removesuffix("...'}")
    assert big.canonical.startswith(head)
    assert len(head.encode("utf-16-le")) // 2 in (10239, 10240)  # a surrogate pair cut at 10240 loses its half
