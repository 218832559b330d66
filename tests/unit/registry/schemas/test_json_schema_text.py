"""JSON Schema parsing: Confluent's canonical text, normalisation, references, clear errors."""

from __future__ import annotations

import json

import pytest

from registry.compat import CompatibilityLevel, check_compatibility
from registry.schemas import InvalidSchemaError, ParsedSchema, SchemaReference, SchemaType, parse_schema


def test_canonical_text_is_compact_in_source_order_with_exact_numbers() -> None:
    text = '{\n  "type": "number",\n  "maximum": 1e20,\n  "minimum": 1.50,\n  "title": "é"\n}'
    # Confluent reads numbers as BigDecimal and writes them back with BigDecimal.toString
    assert parse_schema(SchemaType.JSON, text).canonical == '{"type":"number","maximum":1E+20,"minimum":1.50,"title":"é"}'


def test_parsed_document_is_plain_json_for_the_serdes() -> None:
    parsed = parse_schema(SchemaType.JSON, '{"type":"number","maximum":1.5}')
    assert parsed.parsed == {"type": "number", "maximum": 1.5}
    assert isinstance(parsed.parsed["maximum"], float)  # type: ignore[index]


def test_normalize_sorts_keys_recursively() -> None:
    one = parse_schema(SchemaType.JSON, '{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"int' +
                       'eger"}}}', normalize=True)
    two = parse_schema(SchemaType.JSON, '{"properties":{"a":{"type":"integer"},"b":{"type":"string"}},"type":"obj' +
                       'ect"}', normalize=True)
    assert one.canonical == two.canonical == (
        '{"properties":{"a":{"type":"integer"},"b":{"type":"string"}},"type":"object"}'
    )
    assert one.fingerprint() == two.fingerprint()


@pytest.mark.parametrize(("text", "message"), [
    ("", "Invalid JSON"),
    ("[]", "must be an object or a boolean"),
    ('{"type": 5}', "Invalid JSON schema at '#/type'"),
    ('{"minLength": -1}', "Invalid JSON schema at '#/minLength'"),
    ('{"$ref": "#/definitions/missing"}', "Unresolvable reference"),
    ('{"properties": {"a": {"$ref": "other.json"}}}', "Unresolvable reference: other.json"),
    # an array index in digits str.isdigit() takes and int() refuses (it was a ValueError: a 500)
    ('{"allOf": [{}], "properties": {"a": {"$ref": "#/allOf/\u00b2"}}}', "Unresolvable reference"),
    ('{"$schema": 1}', "must be a string"),
])
def test_invalid_json_schema_is_rejected_with_a_message(text: str, message: str) -> None:
    with pytest.raises(InvalidSchemaError, match=message.replace("$", r"\$").replace("[", r"\[")):
        parse_schema(SchemaType.JSON, text)


def test_boolean_schemas_are_valid() -> None:
    assert parse_schema(SchemaType.JSON, "true").canonical == "true"
    assert parse_schema(SchemaType.JSON, "false").canonical == "false"


def _address(city_type: str) -> ParsedSchema:
    return parse_schema(SchemaType.JSON,
                        json.dumps({"type": "object", "properties": {"city": {"type": city_type}}}))


ORDER = ('{"$id":"https://example.com/order.json","type":"object",'
         '"properties":{"to":{"$ref":"address.json"},"from":{"$ref":"https://example.com/address.json"}}}')


@pytest.mark.parametrize("ref_name", ["address.json", "https://example.com/address.json"])
def test_references_resolve_by_name_and_against_the_id(ref_name: str) -> None:
    parsed = parse_schema(SchemaType.JSON, ORDER, references=[SchemaReference(ref_name, "address", 1)],
                          resolved={ref_name: _address("string")})
    assert parsed.canonical == ORDER


def test_compatibility_follows_references_into_the_referenced_schema() -> None:
    ref = [SchemaReference("address.json", "address", 1)]
    old = parse_schema(SchemaType.JSON, ORDER, references=ref, resolved={"address.json": _address("string")})
    same = parse_schema(SchemaType.JSON, ORDER, references=ref, resolved={"address.json": _address("string")})
    changed = parse_schema(SchemaType.JSON, ORDER, references=[SchemaReference("address.json", "address", 2)],
                           resolved={"address.json": _address("number")})
    assert check_compatibility(same, [old], CompatibilityLevel.BACKWARD) == []
    messages = check_compatibility(changed, [old], CompatibilityLevel.BACKWARD)
    assert any("TYPE_CHANGED" in m and "#/properties/to/properties/city" in m for m in messages)


def test_recursive_json_schema_is_compared_without_looping() -> None:
    def text(value_type: str) -> str:
        node = {"type": "object", "properties": {"value": {"type": value_type},
                                                 "next": {"$ref": "#/definitions/node"}}}
        return json.dumps({"$ref": "#/definitions/node", "definitions": {"node": node}})

    old = parse_schema(SchemaType.JSON, text("integer"))
    new = parse_schema(SchemaType.JSON, text("number"))
    assert check_compatibility(new, [old], CompatibilityLevel.BACKWARD) == []
    assert check_compatibility(old, [new], CompatibilityLevel.BACKWARD) != []


def test_strings_are_escaped_as_jackson_escapes_them() -> None:
    text = '{"description": "tab\\there\\u001f \\u00e9 \\"q\\""}'
    assert parse_schema(SchemaType.JSON, text).canonical == '{"description":"tab\\there\\u001F é \\"q\\""}'


def test_unpaired_surrogates_are_rejected() -> None:
    with pytest.raises(InvalidSchemaError, match="Unicode"):
        parse_schema(SchemaType.JSON, '{"description": "\\ud800"}')
    with pytest.raises(InvalidSchemaError, match="Unicode"):
        parse_schema(SchemaType.AVRO, '{"type": "string", "x": "\\udfff"}')
