"""Parsing stays linear in the schema's size for shapes that used to be quadratic or exponential, and
still refuses what it refused before (duplicates, invalid defaults)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from registry import schemas
from registry.schemas import InvalidSchemaError, SchemaType, parse_schema
from registry.schemas.avro import AvroModel

# Before the fixes each case took from 8 seconds to hours of CPU; now well under a second. Generous
# because the test machines are shared.
WITHIN_S = 5.0
DRAFT_04 = "http://json-schema.org/draft-04/schema#"


def cpu_seconds_to_parse(schema_type: SchemaType, schema: Any) -> float:
    started = time.process_time()
    parse_schema(schema_type, json.dumps(schema))
    return time.process_time() - started


def test_a_draft_04_enum_of_many_objects_is_checked_for_uniqueness_in_linear_time() -> None:
    # jsonschema compares every pair of unsortable items: 8,000 objects took 56 s.
    schema = {"$schema": DRAFT_04, "enum": [{"a": i} for i in range(8000)]}
    assert cpu_seconds_to_parse(SchemaType.JSON, schema) < WITHIN_S


@pytest.mark.parametrize("values", [
    [{"a": 1, "b": 2}, {"b": 2, "a": 1}],  # key order does not matter
    [1, 1.0],  # nor does the spelling of a number
    [[1, {"x": None}], [1, {"x": None}]],
])
def test_duplicate_enum_values_are_still_refused(values: list[Any]) -> None:
    with pytest.raises(InvalidSchemaError, match="non-unique elements"):
        parse_schema(SchemaType.JSON, json.dumps({"$schema": DRAFT_04, "enum": values}))


def test_values_json_schema_calls_different_stay_different() -> None:
    parse_schema(SchemaType.JSON, json.dumps({"$schema": DRAFT_04, "enum": [1, True, "1", [1], {"1": 1}, None, 0, False]}))


def test_an_avro_enum_of_many_symbols_parses_in_linear_time() -> None:
    # A list scan per symbol: 40,000 symbols took 8 s.
    schema = {"type": "enum", "name": "E", "symbols": [f"S{i}" for i in range(60_000)], "default": "S59999"}
    assert cpu_seconds_to_parse(SchemaType.AVRO, schema) < WITHIN_S


def test_duplicate_avro_symbols_and_a_foreign_enum_default_are_still_refused() -> None:
    with pytest.raises(InvalidSchemaError, match="Duplicate enum symbol: B"):
        parse_schema(SchemaType.AVRO, json.dumps({"type": "enum", "name": "E", "symbols": ["A", "B", "B"]}))
    with pytest.raises(InvalidSchemaError, match="is not in the enum symbol set"):
        parse_schema(SchemaType.AVRO, json.dumps({"type": "enum", "name": "E", "symbols": ["A"], "default": "Z"}))


def test_duplicate_aliases_are_kept_once_in_order() -> None:
    parsed = parse_schema(SchemaType.AVRO, json.dumps(
        {"type": "record", "name": "R", "namespace": "n", "aliases": ["b", "a", "b", "x.c", "a"], "fields": []}))
    assert isinstance(parsed.model, AvroModel)
    assert parsed.model.root.aliases == ["n.b", "n.a", "x.c"]
    assert json.loads(parsed.canonical)["aliases"] == ["b", "a", "x.c"]


def defaults_chain(depth: int, *, leaf_has_default: bool = True) -> dict[str, Any]:
    """Each record has two fields of the next record, both defaulting to `{}`: 2**depth default walks."""
    leaf: dict[str, Any] = {"name": "x", "type": "int", **({"default": 0} if leaf_has_default else {})}
    inner: dict[str, Any] = {"type": "record", "name": f"R{depth}", "fields": [leaf]}
    for d in range(depth - 1, -1, -1):
        inner = {"type": "record", "name": f"R{d}", "fields": [{"name": "a", "type": inner, "default": {}},
                                                              {"name": "b", "type": f"R{d + 1}", "default": {}}]}
    return inner


def test_record_defaults_that_refer_to_records_twice_are_validated_in_linear_time() -> None:
    # 17 levels took 0.5 s, each level doubling it: 30 levels would have taken over an hour.
    assert cpu_seconds_to_parse(SchemaType.AVRO, defaults_chain(30)) < WITHIN_S


def test_an_invalid_default_deep_in_such_a_chain_is_still_refused() -> None:
    # `{}` does not fit the innermost record: its field has no default.
    with pytest.raises(InvalidSchemaError, match="Invalid default for field a"):
        parse_schema(SchemaType.AVRO, json.dumps(defaults_chain(30, leaf_has_default=False)))


def sized_avro_record(tag: int, size: int) -> str:
    """A distinct Avro record whose text is a little under `size` bytes (at least 1,000)."""
    fields = [{"name": f"f{i}", "type": "int", "doc": "x" * 100} for i in range(size // 150)]
    return json.dumps({"type": "record", "name": f"R{tag}", "fields": fields})


def test_a_text_larger_than_the_cache_bound_is_kept_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # A parsed schema takes up to about 90 times its text in memory: a cache of 1,024 large ones
    # could hold tens of gigabytes. The newest stays (a registration parses twice), nothing else.
    monkeypatch.setattr(schemas, "_MAX_CACHED_TEXTS", 50 * 1024)
    small = sized_avro_record(0, 1000)
    kept = parse_schema(SchemaType.AVRO, small)
    assert parse_schema(SchemaType.AVRO, small) is kept
    large = sized_avro_record(1, 60 * 1024)
    large_kept = parse_schema(SchemaType.AVRO, large)
    assert parse_schema(SchemaType.AVRO, large) is large_kept
    assert parse_schema(SchemaType.AVRO, small) is not kept  # evicted by the large one
    assert parse_schema(SchemaType.AVRO, large) is not large_kept  # and it by the small one


def test_the_parse_cache_is_bounded_by_the_size_of_its_texts() -> None:
    first = sized_avro_record(100, 60 * 1024)
    kept = parse_schema(SchemaType.AVRO, first)
    assert parse_schema(SchemaType.AVRO, first) is kept
    for tag in range(101, 180):  # 79 more of 60 KiB: past 4 MiB of text, far below 1,024 entries
        parse_schema(SchemaType.AVRO, sized_avro_record(tag, 60 * 1024))
    assert parse_schema(SchemaType.AVRO, first) is not kept  # evicted, oldest first
