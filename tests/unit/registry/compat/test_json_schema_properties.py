"""Properties of the JSON Schema checker on generated schemas."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.compat.json_schema import COMPATIBLE_CHANGES, DiffError, _cheapest_maximum_matching, diff
from registry.compat.work_budget import WorkBudget
from registry.schemas import InvalidSchemaError, SchemaType, parse_schema
from registry.schemas.json_schema import JsonSchemaDocument

TYPES = ["string", "number", "integer", "boolean", "null", "object", "array"]


@st.composite
def json_schemas(draw: st.DrawFn, depth: int = 0) -> Any:
    if depth >= 3 or draw(st.integers(0, 5)) == 0:
        return draw(st.sampled_from([True, False, {}, {"type": "string"}, {"type": "integer"}]))
    out: dict[str, Any] = {}
    kind = draw(st.sampled_from(["typed", "combined", "enum", "not", "multi"]))
    if kind == "combined":
        out[draw(st.sampled_from(["allOf", "anyOf", "oneOf"]))] = draw(
            st.lists(json_schemas(depth + 1), min_size=1, max_size=3))
    elif kind == "enum":
        out["enum"] = draw(st.lists(st.sampled_from(["a", "b", 1, None]), min_size=1, max_size=3, unique=True))
    elif kind == "not":
        out["not"] = draw(json_schemas(depth + 1))
    elif kind == "multi":
        out["type"] = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True))
    else:
        t = draw(st.sampled_from(TYPES))
        if draw(st.booleans()):
            out["type"] = t
        if t == "string":
            out.update(draw(st.fixed_dictionaries({}, optional={"maxLength": st.integers(0, 9),
                                                                 "pattern": st.sampled_from(["^a", "b$"])})))
        elif t in ("number", "integer"):
            out.update(draw(st.fixed_dictionaries({}, optional={"minimum": st.integers(-5, 5),
                                                                 "multipleOf": st.sampled_from([1, 2, 0.5])})))
        elif t == "object":
            names = draw(st.lists(st.sampled_from(["a", "b", "c"]), max_size=3, unique=True))
            out["properties"] = {n: draw(json_schemas(depth + 1)) for n in names}
            if names and draw(st.booleans()):
                out["required"] = names[:1]
            extra = draw(st.sampled_from([None, True, False, {"type": "string"}]))
            if extra is not None:
                out["additionalProperties"] = extra
        elif t == "array":
            if draw(st.booleans()):
                out["items"] = draw(json_schemas(depth + 1))
            else:
                out["items"] = draw(st.lists(json_schemas(depth + 1), max_size=2))
                out["additionalItems"] = draw(st.sampled_from([True, False, {"type": "number"}]))
    if draw(st.booleans()):
        out["title"] = draw(st.sampled_from(["t1", "t2"]))
    return out


def _document(schema: Any, indent: int) -> JsonSchemaDocument:
    model = parse_schema(SchemaType.JSON, json.dumps(schema, indent=indent)).model
    assert isinstance(model, JsonSchemaDocument)
    return model


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_schemas())
def test_a_schema_is_compatible_with_a_separate_parse_of_itself(schema: Any) -> None:
    try:
        first, second = _document(schema, 0), _document(schema, 2)
    except InvalidSchemaError:
        return
    try:
        found = diff(first, second)
    except DiffError as exc:
        # Confluent's checker throws here too: each member of a combined schema is compared with
        # every member of the other, and a multipleOf that truncates to 0 divides by zero.
        assert str(exc) == "/ by zero"
        return
    # Confluent reports NOT_TYPE_NARROWED even for identical `not` schemas; never anything incompatible
    assert all(d.type in COMPATIBLE_CHANGES for d in found)
    assert [d for d in found if d.type.value != "NOT_TYPE_NARROWED"] == []


# Anything may become `true`, so a combined member could be paired with the copy's `true` (no
# difference) and the `true` with the copy of the member (SUM_TYPE_EXTENDED), where pairing each
# subschema with its own copy reports only NOT_TYPE_NARROWED. The `false` variants never did that
# (`false` may only replace `false`) and are here so that it stays so.
SELF_DIFF_REGRESSIONS = [
    {"allOf": [{"anyOf": [True, {"not": True}]}, True]},
    {"allOf": [True, {"anyOf": [True, {"not": True}]}]},
    {"allOf": [{"oneOf": [True, {"not": True}]}, True]},
    {"allOf": [{"anyOf": [True, {"not": True}, {"not": False}]}, True]},
    {"anyOf": [{"anyOf": [{}, {"not": {"type": "string"}}]}, {}]},
    {"oneOf": [{"allOf": [{"anyOf": [True, {"not": True}]}, True]}, {"type": "string"}]},
    {"allOf": [{"anyOf": [False, {"not": False}]}, False]},
    {"anyOf": [{"anyOf": [False, {"type": "string"}]}, False, {"not": True}]},
]


@pytest.mark.parametrize("schema", SELF_DIFF_REGRESSIONS, ids=json.dumps)
def test_a_schema_with_combined_booleans_does_not_differ_from_itself(schema: Any) -> None:
    first, second = _document(schema, 0), _document(schema, 2)
    assert {d.type.value for d in diff(first, second)} <= {"NOT_TYPE_NARROWED"}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_schemas(), json_schemas())
def test_diff_reports_paths_or_fails_only_where_confluent_does(original: Any, update: Any) -> None:
    try:
        a, b = _document(original, 0), _document(update, 0)
    except InvalidSchemaError:
        return
    try:
        found = diff(a, b)
    except DiffError as exc:  # where Confluent's checker throws (a multipleOf that truncates to 0)
        assert str(exc) == "/ by zero"
        return
    for difference in found:
        assert difference.path.startswith("#/")
        assert difference.describe().startswith('{errorType:"')


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_schemas())
def test_anything_may_become_the_empty_schema(schema: Any) -> None:
    try:
        original = _document(schema, 0)
    except InvalidSchemaError:
        return
    assert all(d.type in COMPATIBLE_CHANGES for d in diff(original, _document({}, 0)))


def _matchings(edges: dict[int, dict[int, int]], left: int, start: int = 0,
               used: frozenset[int] = frozenset()) -> Iterator[dict[int, int]]:
    """Every matching of the left indices from `start` on (right index -> left index)."""
    if start == left:
        yield {}
        return
    yield from _matchings(edges, left, start + 1, used)
    for right in edges.get(start, {}):
        if right not in used:
            for rest in _matchings(edges, left, start + 1, used | {right}):
                yield {right: start, **rest}


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 4).flatmap(lambda left: st.tuples(
    st.just(left),
    st.dictionaries(st.integers(0, left - 1) if left else st.nothing(),
                    st.dictionaries(st.integers(0, 3), st.integers(0, 6), max_size=4), max_size=left))))
def test_subschemas_are_matched_maximally_then_cheaply(graph: tuple[int, dict[int, dict[int, int]]]) -> None:
    left, costs = graph
    found = _cheapest_maximum_matching(costs, left, WorkBudget())
    assert all(right in costs[u] for right, u in found.items())
    assert len(set(found.values())) == len(found)
    best = min(_matchings(costs, left), key=lambda m: (-len(m), sum(costs[u][v] for v, u in m.items())))
    assert len(found) == len(best)
    assert sum(costs[u][v] for v, u in found.items()) == sum(costs[u][v] for v, u in best.items())
