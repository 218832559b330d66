"""The work bound of one compatibility check: pathological schemas stop quickly with a clear error,
realistic ones are checked as before, and "too complex" is never a verdict of compatible."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from pydantic import ValidationError

from registry.compat import DEFAULT_MAX_WORK, CompatibilityLevel, TooComplexError, check_compatibility
from registry.compat.json_schema import diff
from registry.compat.work_budget import WorkBudget
from registry.config import RegistryConfig
from registry.schemas import ParsedSchema, SchemaType, parse_schema
from registry.schemas.json_schema import JsonSchemaDocument

# Generous: the bound stops these in about a second; unbounded, they take a minute or more.
STOPS_WITHIN_S = 10.0


def json_union(members: int, *, changed: bool) -> dict[str, Any]:
    """anyOf of objects with one distinct property each; the changed copy adds one to each."""
    out = []
    for i in range(members):
        properties: dict[str, Any] = {f"p{i}": {"type": "string"}}
        if changed:
            properties[f"q{i}"] = {"type": "integer"}
        out.append({"type": "object", "properties": properties})
    return {"anyOf": out}


def avro_union(members: int, *, changed: bool) -> str:
    branches = []
    for i in range(members):
        fields: list[dict[str, Any]] = [{"name": f"p{i}", "type": "string"}]
        if changed:
            fields.append({"name": f"q{i}", "type": "int", "default": 0})
        branches.append({"type": "record", "name": f"R{i}", "fields": fields})
    return json.dumps({"type": "record", "name": "Top", "fields": [{"name": "u", "type": branches}]})


def ref_chain(depth: int, leaf: str) -> dict[str, Any]:
    """Each definition refers twice to the next: 2**depth paths through a schema of `depth` nodes."""
    definitions: dict[str, Any] = {
        f"d{i}": {"type": "object", "properties": {"a": {"$ref": f"#/definitions/d{i + 1}"},
                                                   "b": {"$ref": f"#/definitions/d{i + 1}"}}}
        for i in range(depth)
    }
    definitions[f"d{depth}"] = {"type": leaf}
    return {"$ref": "#/definitions/d0", "definitions": definitions}


def json_parsed(schema: dict[str, Any]) -> ParsedSchema:
    return parse_schema(SchemaType.JSON, json.dumps(schema))


def test_a_huge_json_union_stops_quickly_with_a_clear_error() -> None:
    original = JsonSchemaDocument(json_union(2000, changed=False))
    update = JsonSchemaDocument(json_union(2000, changed=True))
    started = time.monotonic()
    with pytest.raises(TooComplexError, match=f"more than {DEFAULT_MAX_WORK} subschema comparisons"):
        diff(original, update)
    assert time.monotonic() - started < STOPS_WITHIN_S


def test_many_compatible_members_stop_in_the_matching() -> None:
    # Every pair compatible and none identical: the matching, not the comparisons, is the work.
    old = {"anyOf": [{"type": "string", "description": f"old {i}"} for i in range(400)]}
    new = {"anyOf": [{"type": "string", "description": f"new {i}"} for i in range(400)]}
    started = time.monotonic()
    with pytest.raises(TooComplexError):
        diff(JsonSchemaDocument(old), JsonSchemaDocument(new))
    assert time.monotonic() - started < STOPS_WITHIN_S


def test_a_subschema_reached_through_many_paths_stops_quickly() -> None:
    started = time.monotonic()
    with pytest.raises(TooComplexError):
        diff(JsonSchemaDocument(ref_chain(40, "integer")), JsonSchemaDocument(ref_chain(40, "number")))
    assert time.monotonic() - started < STOPS_WITHIN_S


def test_a_huge_avro_union_stops_quickly() -> None:
    old = parse_schema(SchemaType.AVRO, avro_union(3000, changed=False))
    new = parse_schema(SchemaType.AVRO, avro_union(3000, changed=True))
    started = time.monotonic()
    with pytest.raises(TooComplexError):
        check_compatibility(new, [old], CompatibilityLevel.BACKWARD)
    assert time.monotonic() - started < STOPS_WITHIN_S


@pytest.mark.parametrize("members", [100, 200])
def test_large_but_realistic_json_unions_are_checked_as_before(members: int) -> None:
    old = json_parsed(json_union(members, changed=False))
    new = json_parsed(json_union(members, changed=True))
    # A property added to an open object is incompatible: no member of the update matches.
    messages = check_compatibility(new, [old], CompatibilityLevel.BACKWARD)
    assert any("COMBINED_TYPE_SUBSCHEMAS_CHANGED" in m for m in messages)
    grown = json_parsed({"anyOf": [*json_union(members, changed=False)["anyOf"], {"type": "null"}]})
    assert check_compatibility(grown, [old], CompatibilityLevel.FULL) != []  # FULL: a member cannot be added
    assert check_compatibility(grown, [old], CompatibilityLevel.BACKWARD) == []


def test_a_realistic_avro_union_is_checked_as_before() -> None:
    old = parse_schema(SchemaType.AVRO, avro_union(100, changed=False))
    new = parse_schema(SchemaType.AVRO, avro_union(100, changed=True))
    assert check_compatibility(new, [old], CompatibilityLevel.FULL) == []


@pytest.mark.parametrize("level", list(CompatibilityLevel))
def test_too_complex_is_never_compatible(level: CompatibilityLevel) -> None:
    old = json_parsed(json_union(20, changed=False))
    new = json_parsed(json_union(20, changed=True))
    if level is CompatibilityLevel.NONE:
        assert check_compatibility(new, [old], level, max_work=1) == []  # NONE compares nothing
        return
    with pytest.raises(TooComplexError, match="more than 50 subschema comparisons"):
        check_compatibility(new, [old], level, max_work=50)


def test_the_bound_is_configurable() -> None:
    old = json_parsed(json_union(20, changed=False))
    new = json_parsed(json_union(20, changed=True))
    with pytest.raises(TooComplexError):
        check_compatibility(new, [old], CompatibilityLevel.BACKWARD, max_work=400)
    check_compatibility(new, [old], CompatibilityLevel.BACKWARD, max_work=1000)


def grown_union() -> ParsedSchema:
    """json_union(20) with a null member added: compatible BACKWARD, so every version is compared."""
    return json_parsed({"anyOf": [*json_union(20, changed=False)["anyOf"], {"type": "null"}]})


def test_the_bound_covers_every_version_and_direction_of_one_check() -> None:
    # One comparison of these costs 842 units. The bound was once per comparison: a transitive check
    # against k versions, both ways under FULL_TRANSITIVE, could spend 2k times the bound.
    old, new = json_parsed(json_union(20, changed=False)), grown_union()
    assert check_compatibility(new, [old], CompatibilityLevel.BACKWARD_TRANSITIVE, max_work=1000) == []
    with pytest.raises(TooComplexError, match="more than 1000 subschema comparisons"):
        check_compatibility(new, [old, old], CompatibilityLevel.BACKWARD_TRANSITIVE, max_work=1000)
    assert check_compatibility(new, [old, old, old], CompatibilityLevel.BACKWARD_TRANSITIVE, max_work=2600) == []
    with pytest.raises(TooComplexError):  # FULL compares both ways: twice the work of BACKWARD
        check_compatibility(old, [old, new], CompatibilityLevel.FULL, max_work=1000)


def test_a_caller_may_share_one_budget_between_checks() -> None:
    old, new = json_parsed(json_union(20, changed=False)), grown_union()
    budget = WorkBudget(1000)
    check_compatibility(new, [old], CompatibilityLevel.BACKWARD, budget=budget)
    assert 0 < budget.spent <= 1000
    with pytest.raises(TooComplexError):  # what the first check spent is gone
        check_compatibility(new, [old], CompatibilityLevel.BACKWARD, budget=budget)


def test_a_budget_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        WorkBudget(0)
    with pytest.raises(ValidationError):
        RegistryConfig(max_diff_work=0)
    assert RegistryConfig().max_diff_work == DEFAULT_MAX_WORK
