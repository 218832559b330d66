"""Property test: our Avro verdicts agree with Apache Avro's own Python port of the reader/writer
checker (`avro.compatibility`, installed with confluent-kafka[avro]) on generated schema pairs."""

from __future__ import annotations

import json
from typing import Any

import avro.compatibility
import avro.schema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.compat.avro import reader_writer_incompatibilities
from registry.schemas.avro import AvroModel

from .avro_fixtures import parsed

PRIMITIVES = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"]
FIELD_NAMES = ["a", "b", "c"]


def _named(draw: st.DrawFn, kind: str, counter: list[int]) -> dict[str, Any]:
    counter[0] += 1
    name = draw(st.sampled_from(["N1", "N2"]))
    if kind == "enum":
        symbols = draw(st.lists(st.sampled_from(["A", "B", "C"]), min_size=1, max_size=3, unique=True))
        out: dict[str, Any] = {"type": "enum", "name": f"{name}_{counter[0]}", "symbols": symbols}
        if draw(st.booleans()):
            out["default"] = symbols[0]
        out["name"] = name if draw(st.booleans()) else out["name"]
        return out
    return {"type": "fixed", "name": name, "size": draw(st.sampled_from([4, 8]))}


@st.composite
def schemas(draw: st.DrawFn, depth: int = 0, counter: list[int] | None = None) -> Any:
    counter = counter if counter is not None else [0]
    options = ["primitive", "primitive", "union", "array", "map", "record", "enum", "fixed"]
    kind = draw(st.sampled_from(options if depth < 2 else ["primitive"]))
    if kind == "primitive":
        return draw(st.sampled_from(PRIMITIVES))
    if kind == "union":
        return draw(st.lists(st.sampled_from(PRIMITIVES), min_size=0, max_size=3, unique=True))
    if kind == "array":
        return {"type": "array", "items": draw(schemas(depth + 1, counter))}
    if kind == "map":
        return {"type": "map", "values": draw(schemas(depth + 1, counter))}
    if kind in ("enum", "fixed"):
        return _named(draw, kind, counter)
    fields = []
    for name in draw(st.lists(st.sampled_from(FIELD_NAMES), max_size=3, unique=True)):
        field_type = draw(st.sampled_from(PRIMITIVES))
        entry: dict[str, Any] = {"name": name, "type": field_type}
        if draw(st.booleans()) and field_type in ("int", "long", "string", "null"):
            entry["default"] = {"int": 0, "long": 0, "string": "", "null": None}[field_type]
        fields.append(entry)
    counter[0] += 1
    return {"type": "record", "name": draw(st.sampled_from(["R1", "R2"])), "fields": fields}


def _ours(reader: Any, writer: Any) -> bool:
    r, w = parsed(reader).model, parsed(writer).model
    assert isinstance(r, AvroModel) and isinstance(w, AvroModel)
    return reader_writer_incompatibilities(r.root, w.root) == []


def _reference(reader: Any, writer: Any) -> bool:
    result = avro.compatibility.ReaderWriterCompatibilityChecker().get_compatibility(
        avro.schema.parse(json.dumps(reader)), avro.schema.parse(json.dumps(writer))
    )
    return result.compatibility is avro.compatibility.SchemaCompatibilityType.compatible


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas(), schemas())
def test_verdict_matches_apache_avro(reader: Any, writer: Any) -> None:
    assert _ours(reader, writer) is _reference(reader, writer)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas())
def test_a_schema_reads_its_own_data(schema: Any) -> None:
    assert _ours(schema, schema)
