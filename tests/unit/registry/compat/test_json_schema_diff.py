"""Confluent's JSON Schema diff examples: the same differences and the same verdict."""

from __future__ import annotations

import json
from typing import Any

import pytest

from registry.compat import CompatibilityLevel, check_compatibility
from registry.compat.json_schema import COMPATIBLE_CHANGES, diff
from registry.schemas import SchemaType, parse_schema
from registry.schemas.json_schema import JsonSchemaDocument

from .json_diff_cases import CASES as DIFF_CASES
from .json_diff_cases import COMBINED_CASES, MODERN_CASES, RECENT_CASES

CASES = DIFF_CASES + COMBINED_CASES + MODERN_CASES + RECENT_CASES


@pytest.mark.parametrize(("description", "original", "update", "changes", "compatible"), CASES,
                         ids=[c[0] for c in CASES])
def test_confluent_diff_example(description: str, original: Any, update: Any, changes: list[str],
                                compatible: bool) -> None:
    found = diff(JsonSchemaDocument(original), JsonSchemaDocument(update))
    assert sorted(f"{d.type.value} {d.path}" for d in found) == sorted(changes)
    assert all(d.type in COMPATIBLE_CHANGES for d in found) is compatible


@pytest.mark.parametrize(("description", "original", "update", "changes", "compatible"), CASES,
                         ids=[c[0] for c in CASES])
def test_confluent_diff_example_through_backward_check(description: str, original: Any, update: Any,
                                                       changes: list[str], compatible: bool) -> None:
    old = parse_schema(SchemaType.JSON, json.dumps(original))
    new = parse_schema(SchemaType.JSON, json.dumps(update))
    messages = check_compatibility(new, [old], CompatibilityLevel.BACKWARD)
    assert (messages == []) is compatible
    if not compatible:
        assert any(m.startswith("{errorType:") for m in messages)


def test_fractional_multiple_of_is_compared_as_confluent_truncates_it() -> None:
    from registry.compat.json_schema import DiffError

    found = diff(JsonSchemaDocument({"type": "number", "multipleOf": 1.5}),
                 JsonSchemaDocument({"type": "number", "multipleOf": 0.5}))
    assert [(d.type.value, d.path) for d in found] == [("MULTIPLE_OF_EXPANDED", "#/multipleOf")]
    with pytest.raises(DiffError, match="/ by zero"):
        diff(JsonSchemaDocument({"type": "number", "multipleOf": 0.5}),
             JsonSchemaDocument({"type": "number", "multipleOf": 10}))
    old = parse_schema(SchemaType.JSON, '{"type": "number", "multipleOf": 0.5}')
    new = parse_schema(SchemaType.JSON, '{"type": "number", "multipleOf": 10}')
    messages = check_compatibility(new, [old], CompatibilityLevel.BACKWARD)
    assert messages[0] == "Unexpected exception during compatibility check: / by zero"
