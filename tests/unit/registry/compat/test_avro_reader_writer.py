"""Apache Avro's TestSchemaCompatibility* reader/writer pairs: same verdicts, same incompatibility
types, messages and locations (Avro's JSON pointers)."""

from __future__ import annotations

from typing import Any

import pytest

from registry.compat.avro import IncompatibilityType as T
from registry.compat.avro import reader_writer_incompatibilities
from registry.schemas.avro import AvroModel

from .avro_fixtures import (
    A_DINT_B_DENUM_1_RECORD1,
    A_DINT_B_DENUM_2_RECORD1,
    A_DINT_B_DFIXED_4_RECORD1,
    A_DINT_B_DFIXED_8_RECORD1,
    A_DINT_B_DINT_RECORD1,
    A_DINT_RECORD1,
    A_INT_B_DINT_RECORD1,
    A_INT_B_INT_RECORD1,
    A_INT_RECORD1,
    A_LONG_RECORD1,
    BOOLEAN,
    BYTES,
    BYTES_UNION,
    DOUBLE,
    DOUBLE_UNION,
    EMPTY_RECORD1,
    EMPTY_RECORD2,
    EMPTY_UNION,
    ENUM1_AB,
    ENUM1_AB_NS1,
    ENUM1_AB_NS2,
    ENUM1_ABC,
    ENUM1_BC,
    ENUM2_AB,
    ENUM_AB_DEFAULT_A,
    ENUM_AB_DEFAULT_A_RECORD,
    ENUM_AB_FIELD_DEFAULT_A_ENUM_DEFAULT_B_RECORD,
    ENUM_ABC_DEFAULT_A,
    ENUM_ABC_DEFAULT_A_RECORD,
    ENUM_ABC_FIELD_DEFAULT_B_ENUM_DEFAULT_A_RECORD,
    FIXED_4,
    FIXED_4_ANOTHER_NAME,
    FIXED_8,
    FLOAT,
    FLOAT_UNION,
    INT,
    INT_ARRAY,
    INT_FLOAT_UNION,
    INT_LIST_RECORD,
    INT_LONG_FLOAT_DOUBLE_UNION,
    INT_LONG_UNION,
    INT_MAP,
    INT_STRING_UNION,
    INT_UNION,
    LONG,
    LONG_ARRAY,
    LONG_LIST_RECORD,
    LONG_MAP,
    LONG_UNION,
    NS_RECORD1,
    NS_RECORD2,
    NULL,
    RECORD1_WITH_ENUM_AB,
    RECORD1_WITH_ENUM_ABC,
    STRING,
    STRING_INT_UNION,
    STRING_UNION,
    WITH_NS,
    WITHOUT_NS,
    parsed,
)

COMPATIBLE: list[tuple[Any, Any]] = [
    (BOOLEAN, BOOLEAN), (INT, INT), (LONG, INT), (LONG, LONG), (FLOAT, INT), (FLOAT, LONG), (DOUBLE, LONG),
    (DOUBLE, INT), (DOUBLE, FLOAT), (STRING, STRING), (BYTES, BYTES), (INT_ARRAY, INT_ARRAY),
    (LONG_ARRAY, INT_ARRAY), (INT_MAP, INT_MAP), (LONG_MAP, INT_MAP), (ENUM1_AB, ENUM1_AB), (ENUM1_ABC, ENUM1_AB),
    (STRING, BYTES), (BYTES, STRING),
    (EMPTY_UNION, EMPTY_UNION), (FLOAT_UNION, EMPTY_UNION), (FLOAT_UNION, INT_UNION), (FLOAT_UNION, LONG_UNION),
    (FLOAT_UNION, INT_LONG_UNION), (INT_UNION, INT_UNION), (INT_STRING_UNION, STRING_INT_UNION),
    (INT_UNION, EMPTY_UNION), (LONG_UNION, EMPTY_UNION), (LONG_UNION, INT_UNION), (DOUBLE_UNION, INT_UNION),
    (DOUBLE_UNION, LONG_UNION), (DOUBLE_UNION, FLOAT_UNION), (STRING_UNION, EMPTY_UNION),
    (STRING_UNION, BYTES_UNION), (BYTES_UNION, EMPTY_UNION), (BYTES_UNION, STRING_UNION),
    (DOUBLE_UNION, INT_FLOAT_UNION),
    (FLOAT, INT_FLOAT_UNION), (LONG, INT_LONG_UNION), (DOUBLE, INT_FLOAT_UNION), (DOUBLE, INT_LONG_FLOAT_DOUBLE_UNION),
    (FLOAT, FLOAT_UNION), (INT_UNION, INT), (INT, INT_UNION),
    (FIXED_4, FIXED_4),
    (EMPTY_RECORD1, EMPTY_RECORD1), (EMPTY_RECORD1, A_INT_RECORD1), (A_INT_RECORD1, A_INT_RECORD1),
    (A_DINT_RECORD1, A_INT_RECORD1), (A_DINT_RECORD1, A_DINT_RECORD1), (A_INT_RECORD1, A_DINT_RECORD1),
    (A_LONG_RECORD1, A_INT_RECORD1), (A_INT_RECORD1, A_INT_B_INT_RECORD1), (A_DINT_RECORD1, A_INT_B_INT_RECORD1),
    (A_INT_B_DINT_RECORD1, A_INT_RECORD1), (A_DINT_B_DINT_RECORD1, EMPTY_RECORD1),
    (A_DINT_B_DINT_RECORD1, A_INT_RECORD1), (A_INT_B_INT_RECORD1, A_DINT_B_DINT_RECORD1),
    (INT_LIST_RECORD, INT_LIST_RECORD), (LONG_LIST_RECORD, LONG_LIST_RECORD), (LONG_LIST_RECORD, INT_LIST_RECORD),
    (NULL, NULL),
    (ENUM_AB_DEFAULT_A_RECORD, ENUM_ABC_DEFAULT_A_RECORD),
    (ENUM_AB_FIELD_DEFAULT_A_ENUM_DEFAULT_B_RECORD, ENUM_ABC_FIELD_DEFAULT_B_ENUM_DEFAULT_A_RECORD),
    (NS_RECORD1, NS_RECORD2),
    # TestSchemaCompatibilityEnumDefaults: a reader enum default covers unknown writer symbols
    (ENUM_AB_DEFAULT_A, ENUM_ABC_DEFAULT_A),
    # names are compared without namespace (Confluent, Karapace)
    (ENUM1_AB_NS1, ENUM1_AB_NS2), (WITHOUT_NS, WITH_NS), (WITH_NS, WITHOUT_NS),
]

INCOMPATIBLE: list[tuple[Any, Any, T, str, str]] = [
    # TestSchemaCompatibilityTypeMismatch
    (NULL, INT, T.TYPE_MISMATCH, "reader type: NULL not compatible with writer type: INT", "/"),
    (NULL, LONG, T.TYPE_MISMATCH, "reader type: NULL not compatible with writer type: LONG", "/"),
    (BOOLEAN, INT, T.TYPE_MISMATCH, "reader type: BOOLEAN not compatible with writer type: INT", "/"),
    (INT, NULL, T.TYPE_MISMATCH, "reader type: INT not compatible with writer type: NULL", "/"),
    (INT, BOOLEAN, T.TYPE_MISMATCH, "reader type: INT not compatible with writer type: BOOLEAN", "/"),
    (INT, LONG, T.TYPE_MISMATCH, "reader type: INT not compatible with writer type: LONG", "/"),
    (INT, FLOAT, T.TYPE_MISMATCH, "reader type: INT not compatible with writer type: FLOAT", "/"),
    (INT, DOUBLE, T.TYPE_MISMATCH, "reader type: INT not compatible with writer type: DOUBLE", "/"),
    (LONG, FLOAT, T.TYPE_MISMATCH, "reader type: LONG not compatible with writer type: FLOAT", "/"),
    (LONG, DOUBLE, T.TYPE_MISMATCH, "reader type: LONG not compatible with writer type: DOUBLE", "/"),
    (FLOAT, DOUBLE, T.TYPE_MISMATCH, "reader type: FLOAT not compatible with writer type: DOUBLE", "/"),
    (DOUBLE, STRING, T.TYPE_MISMATCH, "reader type: DOUBLE not compatible with writer type: STRING", "/"),
    (FIXED_4, STRING, T.TYPE_MISMATCH, "reader type: FIXED not compatible with writer type: STRING", "/"),
    (STRING, BOOLEAN, T.TYPE_MISMATCH, "reader type: STRING not compatible with writer type: BOOLEAN", "/"),
    (STRING, INT, T.TYPE_MISMATCH, "reader type: STRING not compatible with writer type: INT", "/"),
    (BYTES, NULL, T.TYPE_MISMATCH, "reader type: BYTES not compatible with writer type: NULL", "/"),
    (BYTES, INT, T.TYPE_MISMATCH, "reader type: BYTES not compatible with writer type: INT", "/"),
    (A_INT_RECORD1, INT, T.TYPE_MISMATCH, "reader type: RECORD not compatible with writer type: INT", "/"),
    (INT_ARRAY, LONG_ARRAY, T.TYPE_MISMATCH, "reader type: INT not compatible with writer type: LONG", "/items"),
    (INT_MAP, INT_ARRAY, T.TYPE_MISMATCH, "reader type: MAP not compatible with writer type: ARRAY", "/"),
    (INT_ARRAY, INT_MAP, T.TYPE_MISMATCH, "reader type: ARRAY not compatible with writer type: MAP", "/"),
    (INT_MAP, LONG_MAP, T.TYPE_MISMATCH, "reader type: INT not compatible with writer type: LONG", "/values"),
    (INT, ENUM2_AB, T.TYPE_MISMATCH, "reader type: INT not compatible with writer type: ENUM", "/"),
    (ENUM2_AB, INT, T.TYPE_MISMATCH, "reader type: ENUM not compatible with writer type: INT", "/"),
    (FLOAT, INT_LONG_FLOAT_DOUBLE_UNION, T.TYPE_MISMATCH,
     "reader type: FLOAT not compatible with writer type: DOUBLE", "/3"),
    (LONG, INT_FLOAT_UNION, T.TYPE_MISMATCH, "reader type: LONG not compatible with writer type: FLOAT", "/1"),
    (INT, INT_FLOAT_UNION, T.TYPE_MISMATCH, "reader type: INT not compatible with writer type: FLOAT", "/1"),
    (INT_LIST_RECORD, LONG_LIST_RECORD, T.TYPE_MISMATCH,
     "reader type: INT not compatible with writer type: LONG", "/fields/0/type"),
    (NULL, INT, T.TYPE_MISMATCH, "reader type: NULL not compatible with writer type: INT", "/"),
    # TestSchemaCompatibilityMissingUnionBranch
    (INT_UNION, INT_STRING_UNION, T.MISSING_UNION_BRANCH, "reader union lacking writer type: STRING", "/1"),
    (STRING_UNION, INT_STRING_UNION, T.MISSING_UNION_BRANCH, "reader union lacking writer type: INT", "/0"),
    (INT_UNION, STRING, T.MISSING_UNION_BRANCH, "reader union lacking writer type: STRING", "/"),
    (EMPTY_UNION, INT_UNION, T.MISSING_UNION_BRANCH, "reader union lacking writer type: INT", "/0"),
    (EMPTY_UNION, INT, T.MISSING_UNION_BRANCH, "reader union lacking writer type: INT", "/"),
    (FLOAT_UNION, DOUBLE_UNION, T.MISSING_UNION_BRANCH, "reader union lacking writer type: DOUBLE", "/0"),
    # TestSchemaCompatibilityNameMismatch
    (ENUM1_AB, ENUM2_AB, T.NAME_MISMATCH, "expected: Enum2", "/name"),
    (EMPTY_RECORD2, EMPTY_RECORD1, T.NAME_MISMATCH, "expected: Record1", "/name"),
    (FIXED_4, FIXED_4_ANOTHER_NAME, T.NAME_MISMATCH, "expected: AnotherName", "/name"),
    (A_DINT_B_DENUM_1_RECORD1, A_DINT_B_DENUM_2_RECORD1, T.NAME_MISMATCH, "expected: Enum2", "/fields/1/type/name"),
    # TestSchemaCompatibilityFixedSizeMismatch
    (FIXED_4, FIXED_8, T.FIXED_SIZE_MISMATCH, "expected: 8, found: 4", "/size"),
    (FIXED_8, FIXED_4, T.FIXED_SIZE_MISMATCH, "expected: 4, found: 8", "/size"),
    (A_DINT_B_DFIXED_8_RECORD1, A_DINT_B_DFIXED_4_RECORD1, T.FIXED_SIZE_MISMATCH, "expected: 4, found: 8",
     "/fields/1/type/size"),
    (A_DINT_B_DFIXED_4_RECORD1, A_DINT_B_DFIXED_8_RECORD1, T.FIXED_SIZE_MISMATCH, "expected: 8, found: 4",
     "/fields/1/type/size"),
    # TestSchemaCompatibilityMissingEnumSymbols
    (ENUM1_AB, ENUM1_ABC, T.MISSING_ENUM_SYMBOLS, "[C]", "/symbols"),
    (ENUM1_BC, ENUM1_ABC, T.MISSING_ENUM_SYMBOLS, "[A]", "/symbols"),
    (RECORD1_WITH_ENUM_AB, RECORD1_WITH_ENUM_ABC, T.MISSING_ENUM_SYMBOLS, "[C]", "/fields/0/type/symbols"),
    # TestSchemaCompatibilityReaderFieldMissingDefaultValue
    (A_INT_RECORD1, EMPTY_RECORD1, T.READER_FIELD_MISSING_DEFAULT_VALUE, "a", "/fields/0"),
    (A_INT_B_DINT_RECORD1, EMPTY_RECORD1, T.READER_FIELD_MISSING_DEFAULT_VALUE, "a", "/fields/0"),
]


def _root(schema: Any) -> Any:
    model = parsed(schema).model
    assert isinstance(model, AvroModel)
    return model.root


@pytest.mark.parametrize(("reader", "writer"), COMPATIBLE)
def test_compatible_pairs(reader: Any, writer: Any) -> None:
    assert reader_writer_incompatibilities(_root(reader), _root(writer)) == []


@pytest.mark.parametrize(("reader", "writer", "kind", "message", "location"), INCOMPATIBLE)
def test_incompatible_pairs(reader: Any, writer: Any, kind: T, message: str, location: str) -> None:
    found = reader_writer_incompatibilities(_root(reader), _root(writer))
    assert [(i.type, i.message, i.path) for i in found] == [(kind, message, location)]


def test_every_incompatibility_of_a_record_is_listed() -> None:
    # TestSchemaCompatibilityMultiple-style: several problems in one record, each with its path
    reader = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "int"}, {"name": "b", "type": "string"}, {"name": "c", "type": FIXED_4}]}
    writer = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "long"}, {"name": "c", "type": FIXED_8}]}
    found = reader_writer_incompatibilities(_root(reader), _root(writer))
    assert [(i.type, i.path) for i in found] == [
        (T.TYPE_MISMATCH, "/fields/0/type"),
        (T.READER_FIELD_MISSING_DEFAULT_VALUE, "/fields/1"),
        (T.FIXED_SIZE_MISMATCH, "/fields/2/type/size"),
    ]


def test_field_alias_matches_writer_field() -> None:
    reader = {"type": "record", "name": "R", "fields": [{"name": "new", "type": "int", "aliases": ["old"]}]}
    writer = {"type": "record", "name": "R", "fields": [{"name": "old", "type": "int"}]}
    assert reader_writer_incompatibilities(_root(reader), _root(writer)) == []


def test_record_alias_matches_writer_full_name_only() -> None:
    reader = {"type": "record", "name": "New", "namespace": "a", "aliases": ["b.Old"], "fields": []}
    assert reader_writer_incompatibilities(_root(reader), _root({"type": "record", "name": "b.Old", "fields": []})) == []
    found = reader_writer_incompatibilities(_root(reader), _root({"type": "record", "name": "c.Old", "fields": []}))
    assert [(i.type, i.message) for i in found] == [(T.NAME_MISMATCH, "expected: c.Old")]


def test_enum_field_with_enum_default_missing_in_writer_is_checked_against_the_record() -> None:
    # Avro's special case: the enum (with an enum default) is compared with the writer record.
    reader = {"type": "record", "name": "R", "fields": [{"name": "e", "type": ENUM_AB_DEFAULT_A}]}
    writer = {"type": "record", "name": "R", "fields": []}
    found = reader_writer_incompatibilities(_root(reader), _root(writer))
    assert [(i.type, i.path) for i in found] == [(T.TYPE_MISMATCH, "/fields/0/type")]


def test_schema_compatibility_multiple() -> None:
    # Apache Avro's TestSchemaCompatibilityMultiple (current version: record names compared
    # without namespace, so nsA.recordA reads not_nsA.recordA)
    def sub_record(fields: list[dict[str, Any]]) -> dict[str, Any]:
        return {"type": "record", "name": "sub_record_type", "fields": fields}

    reader = {"type": "record", "name": "base", "fields": [
        {"name": "check_enum_symbols_field",
         "type": {"type": "enum", "name": "check_enum_symbols_type", "symbols": ["A", "C"]}},
        {"name": "check_enum_name_field",
         "type": {"type": "enum", "name": "check_enum_name_type", "symbols": ["A", "B", "C", "D"]}},
        {"name": "type_mismatch_field", "type": "string"},
        {"name": "sub_record", "type": sub_record([
            {"name": "identical_1_field", "type": "long", "default": 42},
            {"name": "extra_no_default_field", "type": "long"},
            {"name": "fixed_length_mismatch_field",
             "type": {"type": "fixed", "name": "fixed_length_mismatch_type", "size": 4}},
            {"name": "union_missing_branches_field", "type": ["boolean"]},
            {"name": "reader_union_does_not_support_type_field", "type": ["boolean"]},
            {"name": "record_fqn_mismatch_field", "type": {
                "type": "record", "name": "recordA", "namespace": "not_nsA", "fields": [
                    {"name": "A_field_0", "type": "boolean", "default": True},
                    {"name": "array_type_mismatch_field", "type": {"type": "array", "items": "string"}}]}},
        ])},
    ]}
    writer = {"type": "record", "name": "base", "fields": [
        {"name": "check_enum_symbols_field",
         "type": {"type": "enum", "name": "check_enum_symbols_type", "symbols": ["A", "B", "C", "D"]}},
        {"name": "check_enum_name_field",
         "type": {"type": "enum", "name": "check_enum_name_type_ERR", "symbols": ["A", "B", "C", "D"]}},
        {"name": "type_mismatch_field", "type": "long"},
        {"name": "sub_record", "type": sub_record([
            {"name": "identical_1_field", "type": "long", "default": 42},
            {"name": "fixed_length_mismatch_field",
             "type": {"type": "fixed", "name": "fixed_length_mismatch_type", "size": 8}},
            {"name": "union_missing_branches_field", "type": ["boolean", "double", "string"]},
            {"name": "reader_union_does_not_support_type_field", "type": "long"},
            {"name": "record_fqn_mismatch_field", "type": {
                "type": "record", "name": "recordA", "namespace": "nsA", "fields": [
                    {"name": "A_field_0", "type": "boolean", "default": True},
                    {"name": "array_type_mismatch_field", "type": {"type": "array", "items": "boolean"}}]}},
        ])},
    ]}
    found = reader_writer_incompatibilities(_root(reader), _root(writer))
    assert [(i.type, i.message, i.path) for i in found] == [
        (T.MISSING_ENUM_SYMBOLS, "[B, D]", "/fields/0/type/symbols"),
        (T.NAME_MISMATCH, "expected: check_enum_name_type_ERR", "/fields/1/type/name"),
        (T.TYPE_MISMATCH, "reader type: STRING not compatible with writer type: LONG", "/fields/2/type"),
        (T.READER_FIELD_MISSING_DEFAULT_VALUE, "extra_no_default_field", "/fields/3/type/fields/1"),
        (T.FIXED_SIZE_MISMATCH, "expected: 8, found: 4", "/fields/3/type/fields/2/type/size"),
        (T.MISSING_UNION_BRANCH, "reader union lacking writer type: DOUBLE", "/fields/3/type/fields/3/type/1"),
        (T.MISSING_UNION_BRANCH, "reader union lacking writer type: STRING", "/fields/3/type/fields/3/type/2"),
        (T.MISSING_UNION_BRANCH, "reader union lacking writer type: LONG", "/fields/3/type/fields/4/type"),
        (T.TYPE_MISMATCH, "reader type: STRING not compatible with writer type: BOOLEAN",
         "/fields/3/type/fields/5/type/fields/1/type/items"),
    ]
