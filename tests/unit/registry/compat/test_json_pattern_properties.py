"""JSON Schema checks through `patternProperties`: linear-time matching, matches paid from the work
budget, and a pattern that cannot be evaluated makes the check incompatible with its name, never
compatible by skipping it."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from registry.compat import CompatibilityLevel, TooComplexError, check_compatibility
from registry.schemas import SchemaType, parse_schema

FAST_S = 2.0


def partially_open(pattern: str, *extra: tuple[str, str]) -> dict[str, Any]:
    """Properties matching `pattern` must be strings; any other additional property an integer."""
    return {"type": "object", "properties": {"id": {"type": "string"}, **{n: {"type": t} for n, t in extra}},
            "patternProperties": {pattern: {"type": "string"}}, "additionalProperties": {"type": "integer"}}


def backward(old: dict[str, Any], new: dict[str, Any], **kwargs: Any) -> list[str]:
    return check_compatibility(parse_schema(SchemaType.JSON, json.dumps(new)),
                               [parse_schema(SchemaType.JSON, json.dumps(old))], CompatibilityLevel.BACKWARD,
                               **kwargs)


def test_a_catastrophic_pattern_against_a_long_name_is_checked_promptly() -> None:
    old = partially_open("^(a+)+$")
    started = time.perf_counter()
    # Not matched ("!"): an added integer is covered by additionalProperties.
    assert backward(old, partially_open("^(a+)+$", ("a" * 10_000 + "!", "integer"))) == []
    # Matched: an added integer is not covered by the pattern's string schema.
    refused = backward(old, partially_open("^(a+)+$", ("a" * 10_000, "integer")))
    assert time.perf_counter() - started < FAST_S
    assert any("PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" in m for m in refused)


@pytest.mark.parametrize(("pattern", "name"), [("^(?=x)", "xa"), ("^(x)\\1?", "xa"), ("^x\\Z", "x")])
def test_a_pattern_that_cannot_be_evaluated_makes_the_check_incompatible(pattern: str, name: str) -> None:
    # Java matches the name with the pattern (a string schema), so adding it as an integer is
    # incompatible; taking the pattern as "no match" would fall back to additionalProperties (integer)
    # and call it compatible.
    messages = backward(partially_open(pattern), partially_open(pattern, (name, "integer")))
    assert messages[0].startswith("Unexpected exception during compatibility check: patternProperties pattern "
                                  + json.dumps(pattern) + " cannot be evaluated: ")
    assert messages[-1] == "{validateFields: 'false', compatibility: 'BACKWARD'}"


def test_a_pattern_that_is_never_needed_does_not_stop_a_check() -> None:
    # Only added or removed properties are matched: a schema may keep a lookahead pattern.
    old = partially_open("^(?=x)")
    assert backward(old, {**old, "description": "changed"}) == []


def test_matching_is_paid_from_the_work_budget() -> None:
    # 300 patterns x 300 added properties: 90,000 matches, each linear but none free.
    old = {"type": "object", "additionalProperties": False,
           "patternProperties": {f"^p{i}_": {"type": "string"} for i in range(300)}}
    new = {**old, "properties": {f"q{i}": {"type": "string"} for i in range(300)}}
    with pytest.raises(TooComplexError):
        backward(old, new, max_work=20_000)
    started = time.perf_counter()
    # No pattern covers "q...": each is an optional property added to a closed model, which is compatible.
    assert backward(old, new, max_work=200_000) == []
    assert time.perf_counter() - started < FAST_S
    covered = {**old, "properties": {"p7_x": {"type": "integer"}}}
    assert any("PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" in m and "'#/properties/p7_x'" in m
               for m in backward(old, covered))


def test_a_long_name_against_a_large_pattern_costs_in_proportion() -> None:
    # RE2's worst case is the name's length times the pattern's program: a 500-state pattern against a
    # 200,000-character name is refused as too complex instead of running for seconds.
    pattern = "a[ab]{500}c"
    old = partially_open(pattern)
    new = partially_open(pattern, ("ab" * 100_000, "integer"))
    with pytest.raises(TooComplexError):
        backward(old, new, max_work=10_000)
