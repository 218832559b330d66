"""Schemas of Apache Avro's TestSchemas (lang/java/avro/src/test/java/org/apache/avro/TestSchemas.java),
written as JSON so that they go through our parser."""

from __future__ import annotations

import json
from typing import Any

from registry.schemas import ParsedSchema, SchemaType, parse_schema


def rec(name: str, *fields: tuple[str, Any] | tuple[str, Any, Any], namespace: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "record", "name": name, "fields": []}
    if namespace is not None:
        out["namespace"] = namespace
    for f in fields:
        entry: dict[str, Any] = {"name": f[0], "type": f[1]}
        if len(f) == 3:
            entry["default"] = f[2]
        out["fields"].append(entry)
    return out


def enum(name: str, symbols: list[str], default: str | None = None, namespace: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "enum", "name": name, "symbols": symbols}
    if default is not None:
        out["default"] = default
    if namespace is not None:
        out["namespace"] = namespace
    return out


def fixed(name: str, size: int) -> dict[str, Any]:
    return {"type": "fixed", "name": name, "size": size}


NULL, BOOLEAN, INT, LONG, FLOAT, DOUBLE, STRING, BYTES = (
    "null", "boolean", "int", "long", "float", "double", "string", "bytes")
INT_ARRAY = {"type": "array", "items": INT}
LONG_ARRAY = {"type": "array", "items": LONG}
STRING_ARRAY = {"type": "array", "items": STRING}
INT_MAP = {"type": "map", "values": INT}
LONG_MAP = {"type": "map", "values": LONG}
ENUM1_AB = enum("Enum1", ["A", "B"])
ENUM1_AB_NS1 = enum("Enum1", ["A", "B"], namespace="namespace1")
ENUM1_AB_NS2 = enum("Enum1", ["A", "B"], namespace="namespace2")
ENUM1_ABC = enum("Enum1", ["A", "B", "C"])
ENUM1_BC = enum("Enum1", ["B", "C"])
ENUM2_AB = enum("Enum2", ["A", "B"])
ENUM_ABC_DEFAULT_A = enum("Enum", ["A", "B", "C"], "A")
ENUM_AB_DEFAULT_A = enum("Enum", ["A", "B"], "A")
ENUM_ABC_DEFAULT_A_RECORD = rec("Record", ("Field", enum("Schema", ["A", "B", "C"], "A")))
ENUM_AB_DEFAULT_A_RECORD = rec("Record", ("Field", enum("Schema", ["A", "B"], "A")))
ENUM_ABC_FIELD_DEFAULT_B_ENUM_DEFAULT_A_RECORD = rec("Record", ("Field", enum("Schema", ["A", "B", "C"], "A"), "B"))
ENUM_AB_FIELD_DEFAULT_A_ENUM_DEFAULT_B_RECORD = rec("Record", ("Field", enum("Schema", ["A", "B"], "B"), "A"))
EMPTY_UNION: list[Any] = []
NULL_UNION = [NULL]
INT_UNION = [INT]
LONG_UNION = [LONG]
FLOAT_UNION = [FLOAT]
DOUBLE_UNION = [DOUBLE]
STRING_UNION = [STRING]
BYTES_UNION = [BYTES]
INT_STRING_UNION = [INT, STRING]
STRING_INT_UNION = [STRING, INT]
INT_FLOAT_UNION = [INT, FLOAT]
INT_LONG_UNION = [INT, LONG]
INT_LONG_FLOAT_DOUBLE_UNION = [INT, LONG, FLOAT, DOUBLE]
EMPTY_RECORD1 = rec("Record1")
EMPTY_RECORD2 = rec("Record2")
A_INT_RECORD1 = rec("Record1", ("a", INT))
A_LONG_RECORD1 = rec("Record1", ("a", LONG))
A_INT_B_INT_RECORD1 = rec("Record1", ("a", INT), ("b", INT))
A_DINT_RECORD1 = rec("Record1", ("a", INT, 0))
A_INT_B_DINT_RECORD1 = rec("Record1", ("a", INT), ("b", INT, 0))
A_DINT_B_DINT_RECORD1 = rec("Record1", ("a", INT, 0), ("b", INT, 0))
FIXED_4 = fixed("Fixed", 4)
FIXED_8 = fixed("Fixed", 8)
FIXED_4_ANOTHER_NAME = fixed("AnotherName", 4)
A_DINT_B_DFIXED_4_RECORD1 = rec("Record1", ("a", INT, 0), ("b", FIXED_4))
A_DINT_B_DFIXED_8_RECORD1 = rec("Record1", ("a", INT, 0), ("b", FIXED_8))
A_DINT_B_DENUM_1_RECORD1 = rec("Record1", ("a", INT, 0), ("b", ENUM1_AB))
A_DINT_B_DENUM_2_RECORD1 = rec("Record1", ("a", INT, 0), ("b", ENUM2_AB))
NS_RECORD1 = rec("Record1", ("f1", [NULL, {"type": "array", "items": rec("InnerRecord1", ("a", INT), namespace="ns1")}]))
NS_RECORD2 = rec("Record1", ("f1", [NULL, {"type": "array", "items": rec("InnerRecord1", ("a", INT), namespace="ns2")}]))
WITHOUT_NS = rec("Record", ("f1", INT))
WITH_NS = rec("ns.Record", ("f1", INT))
INT_LIST_RECORD = rec("List", ("head", INT), ("tail", "List"))
LONG_LIST_RECORD = rec("List", ("head", LONG), ("tail", "List"))
RECORD1_WITH_ENUM_AB = rec("Record1", ("field1", ENUM1_AB))
RECORD1_WITH_ENUM_ABC = rec("Record1", ("field1", ENUM1_ABC))


def parsed(schema: Any) -> ParsedSchema:
    return parse_schema(SchemaType.AVRO, json.dumps(schema))
