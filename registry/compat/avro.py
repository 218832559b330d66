"""Avro reader/writer compatibility, with the verdicts of Apache Avro's `SchemaCompatibility`.

Confluent's registry asks Avro Java's `checkReaderWriterCompatibility(reader, writer)` and turns
each incompatibility into a message (`io.confluent...avro.Difference`). This is an independent
implementation of the same rules; the details that decide edge cases are kept:

* named types match on their unqualified name, or when a reader alias is the writer's full name;
* a reader field is matched by name and by its aliases; a reader field missing from the writer
  needs a default, except that a field of an enum type with an enum default is checked (and
  fails) as the enum against the writer record, exactly as Avro does;
* a writer union needs every branch readable; a reader union needs one branch that reads the
  writer; inside unions the branches are checked in a fresh location, as Avro does;
* results are memoised per (reader node, writer node); a pair met again while being checked
  counts as compatible (recursive types);
* logical types, docs, defaults' values, order and custom properties are not compared;
* a reader union is tried branch by branch against each writer branch, so unions cost the product
  of their sizes: the check spends from a `WorkBudget` and raises `TooComplexError` when it is spent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from registry.compat.work_budget import WorkBudget
from registry.schemas import ParsedSchema
from registry.schemas.avro import AvroModel, AvroType


class IncompatibilityType(StrEnum):
    NAME_MISMATCH = "NAME_MISMATCH"
    FIXED_SIZE_MISMATCH = "FIXED_SIZE_MISMATCH"
    MISSING_ENUM_SYMBOLS = "MISSING_ENUM_SYMBOLS"
    READER_FIELD_MISSING_DEFAULT_VALUE = "READER_FIELD_MISSING_DEFAULT_VALUE"
    TYPE_MISMATCH = "TYPE_MISMATCH"
    MISSING_UNION_BRANCH = "MISSING_UNION_BRANCH"


@dataclass(frozen=True, slots=True)
class Incompatibility:
    type: IncompatibilityType
    message: str
    location: tuple[str, ...]  # JSON-pointer tokens from the root

    @property
    def path(self) -> str:
        return "/" + "/".join(t.replace("~", "~0").replace("/", "~1") for t in self.location)

    def describe(self) -> str:
        """Confluent's verbose message; `%s` stand for the reader's then the writer's role."""
        path = self.path
        kind = self.type
        if kind is IncompatibilityType.FIXED_SIZE_MISMATCH:
            description = (f"The size of FIXED type field at path '{path}' in the %s schema does not "
                           "match with the %s schema")
        elif kind is IncompatibilityType.TYPE_MISMATCH:
            description = f"The type (path '{path}') of a field in the %s schema does not match with the %s schema"
        elif kind is IncompatibilityType.NAME_MISMATCH:
            description = f"The name of the schema has changed (path '{path}')"
        elif kind is IncompatibilityType.MISSING_ENUM_SYMBOLS:
            description = f"The %s schema is missing enum symbols '{self.message}' at path '{path}' in the %s schema"
        elif kind is IncompatibilityType.MISSING_UNION_BRANCH:
            description = f"The %s schema is missing a type inside a union field at path '{path}' in the %s schema"
        else:
            description = (f"The field '{self.message}' at path '{path}' in the %s schema has no default value "
                           "and is missing in the %s schema")
        return f"{{errorType:'{kind.value}', description:'{description}', additionalInfo:'{self.message}'}}"


@dataclass(slots=True)
class Result:
    compatible: bool = True
    incompatibilities: list[Incompatibility] = field(default_factory=list)

    def merge(self, other: Result) -> None:
        self.compatible = self.compatible and other.compatible
        self.incompatibilities.extend(other.incompatibilities)


_COMPATIBLE = Result()
_IN_PROGRESS = object()
_PROMOTIONS = {
    "long": frozenset({"int"}),
    "float": frozenset({"int", "long"}),
    "double": frozenset({"int", "long", "float"}),
    "bytes": frozenset({"string"}),
    "string": frozenset({"bytes"}),
}
_PRIMITIVE_TYPES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


class AmbiguousFieldError(Exception):
    """A reader field matches several writer fields through its aliases (Avro throws)."""


def java_type(t: AvroType) -> str:
    """The type as Avro Java's `Schema.Type` prints it (RECORD, INT, ...)."""
    return "RECORD" if t.type == "error" else t.type.upper()


def _kind(t: AvroType) -> str:
    return "record" if t.type == "error" else t.type


def names_match(reader: AvroType, writer: AvroType) -> bool:
    return reader.name == writer.name or writer.full_name in reader.aliases


class ReaderWriterChecker:
    """One check: memoises per (reader, writer) node pair, as Avro's checker instance does."""

    def __init__(self, budget: WorkBudget | None = None) -> None:
        self._budget = budget if budget is not None else WorkBudget()
        self._memo: dict[tuple[int, int], Result | object] = {}
        self._keep: list[AvroType] = []  # keeps ids stable for the duration of the check

    def check(self, reader: AvroType, writer: AvroType) -> Result:
        return self._get(reader, writer, [])

    def _get(self, reader: AvroType, writer: AvroType, location: list[str]) -> Result:
        self._budget.spend()
        key = (id(reader), id(writer))
        found = self._memo.get(key)
        if found is _IN_PROGRESS:
            return _COMPATIBLE
        if isinstance(found, Result):
            return found
        self._keep.extend((reader, writer))
        self._memo[key] = _IN_PROGRESS
        result = self._calculate(reader, writer, location)
        self._memo[key] = result
        return result

    def _at(self, token: str, reader: AvroType, writer: AvroType, location: list[str]) -> Result:
        location.append(token)
        try:
            return self._get(reader, writer, location)
        finally:
            location.pop()

    @staticmethod
    def _incompatible(kind: IncompatibilityType, message: str, location: list[str]) -> Result:
        return Result(False, [Incompatibility(kind, message, tuple(location))])

    def _type_mismatch(self, reader: AvroType, writer: AvroType, location: list[str]) -> Result:
        return self._incompatible(
            IncompatibilityType.TYPE_MISMATCH,
            f"reader type: {java_type(reader)} not compatible with writer type: {java_type(writer)}",
            location,
        )

    def _calculate(self, reader: AvroType, writer: AvroType, location: list[str]) -> Result:
        rkind, wkind = _kind(reader), _kind(writer)
        if rkind == wkind and rkind in _PRIMITIVE_TYPES:
            return _COMPATIBLE  # shared and never mutated: callers only merge it into their own
        result = Result()
        if rkind == wkind:
            if rkind == "array":
                assert reader.items is not None and writer.items is not None
                result.merge(self._at("items", reader.items, writer.items, location))
            elif rkind == "map":
                assert reader.values is not None and writer.values is not None
                result.merge(self._at("values", reader.values, writer.values, location))
            elif rkind == "fixed":
                result.merge(self._names(reader, writer, location))
                if reader.size != writer.size:
                    location.append("size")
                    result.merge(self._incompatible(IncompatibilityType.FIXED_SIZE_MISMATCH,
                                                    f"expected: {writer.size}, found: {reader.size}", location))
                    location.pop()
            elif rkind == "enum":
                self._budget.spend(len(reader.symbols) + len(writer.symbols))
                result.merge(self._names(reader, writer, location))
                missing = sorted(set(writer.symbols) - set(reader.symbols))
                if missing and reader.enum_default is None:
                    location.append("symbols")
                    result.merge(self._incompatible(IncompatibilityType.MISSING_ENUM_SYMBOLS,
                                                    "[" + ", ".join(missing) + "]", location))
                    location.pop()
            elif rkind == "record":
                result.merge(self._names(reader, writer, location))
                result.merge(self._fields(reader, writer, location))
            else:  # both unions: every writer branch must be readable
                for index, branch in enumerate(writer.branches):
                    location.append(str(index))
                    if not self._get(reader, branch, []).compatible:
                        result.merge(self._incompatible(IncompatibilityType.MISSING_UNION_BRANCH,
                                                        f"reader union lacking writer type: {java_type(branch)}",
                                                        location))
                    location.pop()
            return result
        if wkind == "union":
            for index, branch in enumerate(writer.branches):
                result.merge(self._at(str(index), reader, branch, location))
            return result
        if rkind == "union":
            for branch in reader.branches:
                if self._get(branch, writer, []).compatible:
                    return result
            result.merge(self._incompatible(IncompatibilityType.MISSING_UNION_BRANCH,
                                            f"reader union lacking writer type: {java_type(writer)}", location))
            return result
        if wkind in _PROMOTIONS.get(rkind, frozenset()):
            return _COMPATIBLE
        result.merge(self._type_mismatch(reader, writer, location))
        return result

    def _names(self, reader: AvroType, writer: AvroType, location: list[str]) -> Result:
        if names_match(reader, writer):
            return _COMPATIBLE
        location.append("name")
        try:
            return self._incompatible(IncompatibilityType.NAME_MISMATCH, f"expected: {writer.full_name}", location)
        finally:
            location.pop()

    def _fields(self, reader: AvroType, writer: AvroType, location: list[str]) -> Result:
        self._budget.spend(len(reader.fields))
        result = Result()
        location.append("fields")
        for reader_field in reader.fields:
            location.append(str(reader_field.position))
            matches = []
            direct = writer.field_named(reader_field.name)
            if direct is not None:
                matches.append(direct)
            for alias in reader_field.aliases:
                aliased = writer.field_named(alias)
                if aliased is not None:
                    matches.append(aliased)
            if len(matches) > 1:
                raise AmbiguousFieldError(
                    f"Reader record field {reader_field.name} matches multiple fields in writer record "
                    f"schema {writer.full_name}"
                )
            if matches:
                result.merge(self._at("type", reader_field.type, matches[0].type, location))
            elif not reader_field.has_default:
                if reader_field.type.type == "enum" and reader_field.type.enum_default is not None:
                    result.merge(self._at("type", reader_field.type, writer, location))
                else:
                    result.merge(self._incompatible(IncompatibilityType.READER_FIELD_MISSING_DEFAULT_VALUE,
                                                    reader_field.name, location))
            location.pop()
        location.pop()
        return result


def reader_writer_incompatibilities(reader: AvroType, writer: AvroType) -> list[Incompatibility]:
    """Avro's verdict: [] when `reader` can read everything `writer` writes."""
    return ReaderWriterChecker().check(reader, writer).incompatibilities


def avro_incompatibilities(reader: ParsedSchema, writer: ParsedSchema, *,
                           budget: WorkBudget | None = None) -> list[str]:
    """Confluent's `AvroSchema.isBackwardCompatible(reader, writer)` messages (with `%s` roles),
    spending from `budget` (a default one if None). `TooComplexError` is not caught: the caller must
    refuse the schema."""
    reader_model, writer_model = reader.model, writer.model
    if not isinstance(reader_model, AvroModel) or not isinstance(writer_model, AvroModel):
        return ["Unexpected exception during compatibility check: schema was not parsed as AVRO"]
    try:
        found = ReaderWriterChecker(budget).check(reader_model.root, writer_model.root)
    except AmbiguousFieldError as exc:
        return [f"Unexpected exception during compatibility check: {exc}"]
    return [i.describe() for i in found.incompatibilities]
