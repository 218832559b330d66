"""`same_schema`: Avro Java's `Schema.equals`, which Confluent's `deepEquals` uses to take a schema sent
with its references inlined for the version that references them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from registry.schemas import SchemaType, parse_schema
from registry.schemas.avro import AvroModel, same_schema


def root(schema: Any) -> Any:
    model = parse_schema(SchemaType.AVRO, json.dumps(schema)).model
    assert isinstance(model, AvroModel)
    return model.root


def record(*fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": "R", "namespace": "ns", "fields": list(fields), **extra}


LIST = {"type": "record", "name": "L", "fields": [{"name": "v", "type": "int"}, {"name": "next", "type": ["null", "L"]}]}


@pytest.mark.parametrize(("a", "b"), [
    (record({"name": "a", "type": "int"}), record({"name": "a", "type": "int", "doc": "x"}, doc="y")),
    (record({"name": "a", "type": "int"}), record({"name": "a", "type": "int", "aliases": ["b"]}, aliases=["Q"])),
    (record({"name": "a", "type": "int", "default": 1}), record({"type": "int", "default": 1, "name": "a"})),
    (record({"name": "a", "type": {"type": "map", "values": "int"}, "default": {"x": 1, "y": 2}}),
     record({"name": "a", "type": {"type": "map", "values": "int"}, "default": {"y": 2, "x": 1}})),
    ({"type": "record", "name": "ns.R", "fields": []}, {"type": "record", "name": "R", "namespace": "ns", "fields": []}),
    (LIST, LIST),
    # Avro Java's EnumSchema.equals compares names, symbols and properties, not the default
    ({"type": "enum", "name": "E", "symbols": ["A"]}, {"type": "enum", "name": "E", "symbols": ["A"], "default": "A"}),
])
def test_equal(a: Any, b: Any) -> None:
    assert same_schema(root(a), root(b))
    assert same_schema(root(b), root(a))


@pytest.mark.parametrize(("a", "b"), [
    (record({"name": "a", "type": "int"}), record({"name": "a", "type": "long"})),
    (record({"name": "a", "type": "int"}), record({"name": "b", "type": "int"})),
    (record({"name": "a", "type": "int"}), record({"name": "a", "type": "int", "default": 1})),
    (record({"name": "a", "type": "double", "default": 1}), record({"name": "a", "type": "double", "default": 1.0})),
    (record({"name": "a", "type": "int"}), record({"name": "a", "type": "int", "order": "descending"})),
    (record({"name": "a", "type": "int"}), record({"name": "a", "type": "int", "p": 1})),
    (record(), {**record(), "namespace": "other"}),
    (record(), record(p=True)),
    ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, {"type": "enum", "name": "E", "symbols": ["B", "A"]}),
    ({"type": "fixed", "name": "F", "size": 2}, {"type": "fixed", "name": "F", "size": 3}),
    ({"type": "bytes", "logicalType": "decimal", "precision": 4}, "bytes"),
    (["null", "int"], ["int", "null"]),
    ({"type": "array", "items": "int"}, {"type": "map", "values": "int"}),
    (LIST, {**LIST, "fields": [{"name": "v", "type": "long"}, {"name": "next", "type": ["null", "L"]}]}),
])
def test_different(a: Any, b: Any) -> None:
    assert not same_schema(root(a), root(b))
    assert not same_schema(root(b), root(a))
