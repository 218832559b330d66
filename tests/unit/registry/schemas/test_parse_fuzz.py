"""parse_schema never crashes: any input is either a schema or an InvalidSchemaError."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.schemas import InvalidSchemaError, ParsedSchema, SchemaType, parse_schema

KEYS = ["type", "name", "namespace", "fields", "items", "values", "symbols", "size", "default", "aliases",
        "doc", "order", "logicalType", "precision", "scale", "properties", "required", "additionalProperties",
        "$ref", "enum", "oneOf", "anyOf", "allOf", "not", "minimum", "pattern", "$schema", "definitions"]
WORDS = ["record", "enum", "fixed", "array", "map", "string", "int", "long", "null", "object", "number",
         "integer", "boolean", "A", "a.b", "", "1x", "#/definitions/x", "^a", "[", "decimal", "http://x"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)
    | st.sampled_from(WORDS) | st.text(max_size=5) | st.sampled_from(["\ud800", "a\x1fb", "é\u2028"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=3),
                                                                 inner, max_size=5),
    max_leaves=25,
)


def _parse_or_reject(kind: SchemaType, text: str) -> None:
    try:
        result = parse_schema(kind, text)
    except InvalidSchemaError as exc:
        assert str(exc)
        return
    assert isinstance(result, ParsedSchema)
    result.canonical.encode("utf-8")  # storable and returnable
    assert len(result.fingerprint()) == 64
    # what we store parses again to the same canonical text
    assert parse_schema(kind, result.canonical).canonical == result.canonical


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([SchemaType.AVRO, SchemaType.JSON]), json_values)
def test_structured_input_is_parsed_or_rejected(kind: SchemaType, value: Any) -> None:
    _parse_or_reject(kind, json.dumps(value))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([SchemaType.AVRO, SchemaType.JSON]), st.text(max_size=60))
def test_arbitrary_text_is_parsed_or_rejected(kind: SchemaType, text: str) -> None:
    _parse_or_reject(kind, text)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_normalised_avro_is_stable(value: Any) -> None:
    try:
        once = parse_schema(SchemaType.AVRO, json.dumps(value), normalize=True)
    except InvalidSchemaError:
        return
    assert parse_schema(SchemaType.AVRO, once.canonical, normalize=True).canonical == once.canonical


def test_deep_nesting_is_rejected_with_a_message() -> None:
    deep = '{"type":"array","items":' * 5000 + '"int"' + "}" * 5000
    for kind in (SchemaType.AVRO, SchemaType.JSON):
        with pytest.raises(InvalidSchemaError, match=r"deep|JSON"):
            parse_schema(kind, deep)
