"""Avro schema parsing with the rules and messages of Apache Avro's Java `Schema.Parser`.

Confluent's registry accepts exactly what the Java parser accepts, so this parser follows it:
simple names (not namespaces) are validated with Java's letter/digit classes, a named type may be
defined once, a field's default must match the field's type (any branch of a union, as Avro 1.12
checks it), unions may not nest or repeat a type, invalid logical types are kept but ignored, and
every property that is not reserved is kept, in source order, for the canonical text.

The result is a graph of `AvroType` nodes; a named type referenced again (recursion, or reuse) is
the same node, so the compatibility checker can memoise on node identity.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from registry.schemas.errors import InvalidDefaultError, InvalidSchemaError
from registry.schemas.jackson_text import string as jackson_string

if TYPE_CHECKING:
    from registry.schemas import ParsedSchema, SchemaReference

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "error", "enum", "fixed"})
_SCHEMA_RESERVED = frozenset(
    {"doc", "fields", "items", "name", "namespace", "size", "symbols", "values", "type", "aliases"}
)
_ENUM_RESERVED = _SCHEMA_RESERVED | {"default"}
_FIELD_RESERVED = frozenset({"default", "doc", "name", "order", "type", "aliases"})
_ORDERS = ("ascending", "descending", "ignore")
_INT_RANGE = (-(2**31), 2**31 - 1)
_LONG_RANGE = (-(2**63), 2**63 - 1)
# Deeply nested input must fail with a message, not a RecursionError.
_MAX_DEPTH = 200


class NoDefault:
    """Marker for a field without a default (a JSON `null` default is a real default)."""

    _instance: NoDefault | None = None

    def __new__(cls) -> NoDefault:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT = NoDefault()


@dataclass(eq=False)
class AvroType:
    """One node of a parsed Avro schema. `type` is the Avro type name ("record", "int", ...)."""

    type: str
    props: dict[str, Any] = field(default_factory=dict)
    # named types
    name: str | None = None
    namespace: str | None = None
    doc: str | None = None
    aliases: list[str] = field(default_factory=list)  # full names
    # record
    fields: list[AvroField] = field(default_factory=list)
    # enum
    symbols: list[str] = field(default_factory=list)
    enum_default: str | None = None
    # fixed
    size: int = 0
    # array / map
    items: AvroType | None = None
    values: AvroType | None = None
    # union
    branches: list[AvroType] = field(default_factory=list)

    @property
    def full_name(self) -> str:
        """The full name of a named type, else the type name (as Java's `getFullName`)."""
        if self.name is None:
            return self.type
        return f"{self.namespace}.{self.name}" if self.namespace else self.name

    @property
    def is_named(self) -> bool:
        return self.type in NAMED

    @property
    def is_error(self) -> bool:
        return self.type == "error"

    @property
    def is_record(self) -> bool:
        return self.type in ("record", "error")

    def field_named(self, name: str) -> AvroField | None:
        # An index, built at first use (after parsing): the checker looks up every reader field in
        # the writer, so a scan per lookup made comparing two 40,000-field records take a minute.
        index = self.__dict__.get("_fields_by_name")
        if index is None or len(index) != len(self.fields):
            index = {}
            for f in self.fields:
                index.setdefault(f.name, f)
            self.__dict__["_fields_by_name"] = index
        return index.get(name)


@dataclass(eq=False)
class AvroField:
    name: str
    type: AvroType
    position: int
    doc: str | None = None
    default: Any = NO_DEFAULT
    order: str = "ascending"
    aliases: list[str] = field(default_factory=list)
    props: dict[str, Any] = field(default_factory=dict)

    @property
    def has_default(self) -> bool:
        return self.default is not NO_DEFAULT


@dataclass(frozen=True, slots=True)
class AvroModel:
    """A parsed schema and the top-level types of the schemas it references (transitively),
    which the canonical text names instead of repeating."""

    root: AvroType
    referenced: tuple[AvroType, ...] = ()


def dumps(value: Any) -> str:
    """Compact JSON as Jackson writes it (no spaces, non-ASCII kept, Jackson's string escapes)."""
    if isinstance(value, str):
        return jackson_string(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{jackson_string(str(k))}:{dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    return json.dumps(value, allow_nan=True)


def _is_name_start(c: str) -> bool:
    return c.isalpha() or c == "_"


def _is_name_part(c: str) -> bool:
    return c.isalpha() or c.isdecimal() or c == "_"  # Java: isLetterOrDigit (digits are Nd)


def validate_name(name: str) -> str:
    if len(name) == 0:
        raise InvalidSchemaError("Empty name")
    if not _is_name_start(name[0]):
        raise InvalidSchemaError(f"Illegal initial character: {name}")
    for c in name[1:]:
        if not _is_name_part(c):
            raise InvalidSchemaError(f"Illegal character in: {name}")
    return name


def split_name(name: str, space: str | None) -> tuple[str, str | None]:
    """(simple name, namespace) of `name` read in namespace `space`, validated as Java's `Name`."""
    last_dot = name.rfind(".")
    if last_dot >= 0:
        # Avro Java validates the simple name only, not the namespace.
        space = name[:last_dot]
        simple = name[last_dot + 1 :]
    else:
        simple = name
    validate_name(simple)
    return simple, (space or None)


def full_name(name: str, space: str | None) -> str:
    simple, ns = split_name(name, space)
    return f"{ns}.{simple}" if ns else simple


class _Names:
    """Defined named types by full name, with the current default namespace."""

    def __init__(self, predefined: Sequence[AvroType] = ()) -> None:
        self.types: dict[str, AvroType] = {}
        self.space: str | None = None
        for t in predefined:
            self.types.setdefault(t.full_name, t)

    def add(self, t: AvroType) -> None:
        key = t.full_name
        if key in self.types:
            raise InvalidSchemaError(f"Can't redefine: {key}")
        self.types[key] = t

    def get(self, name: str) -> AvroType | None:
        """Java's `Names.get`: primitives first, then the name in the current namespace, then
        in the null namespace."""
        if name in PRIMITIVES:
            return AvroType(name)
        try:
            qualified = full_name(name, self.space)
        except InvalidSchemaError:
            return None
        found = self.types.get(qualified)
        if found is None and "." not in name:
            found = self.types.get(name)
        return found


def _text(node: Mapping[str, Any], key: str) -> str | None:
    value = node.get(key)
    return value if isinstance(value, str) else None


def _aliases(node: Mapping[str, Any]) -> list[str]:
    raw = node.get("aliases")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidSchemaError(f"aliases not an array: {dumps(node)}")
    out: dict[str, None] = {}  # ordered and duplicate-free in linear time
    for alias in raw:
        if not isinstance(alias, str):
            raise InvalidSchemaError(f"alias not a string: {dumps(alias)}")
        out[alias] = None
    return list(out)


class _Parser:
    def __init__(self, names: _Names, validate_defaults: bool) -> None:
        self.names = names
        self.validate_defaults = validate_defaults

    def parse(self, node: Any, depth: int = 0) -> AvroType:
        if depth > _MAX_DEPTH:
            raise InvalidSchemaError("Schema is nested too deeply")
        if isinstance(node, str):
            found = self.names.get(node)
            if found is None:
                raise InvalidSchemaError(f"Undefined name: {dumps(node)}")
            return found
        if isinstance(node, dict):
            return self._parse_object(node, depth)
        if isinstance(node, list):
            return self._parse_union(node, depth)
        raise InvalidSchemaError(f"Schema not yet supported: {dumps(node)}")

    def _parse_union(self, node: list[Any], depth: int) -> AvroType:
        branches = [self.parse(branch, depth + 1) for branch in node]
        seen: set[str] = set()
        for b in branches:
            if b.type == "union":
                raise InvalidSchemaError(f"Nested union: {dumps([t.full_name for t in branches])}")
            key = b.full_name
            if key in seen:
                raise InvalidSchemaError(f"Duplicate in union:{key}")
            seen.add(key)
        return AvroType("union", branches=branches)

    def _parse_object(self, node: dict[str, Any], depth: int) -> AvroType:
        type_name = _text(node, "type")
        if type_name is None:
            raise InvalidSchemaError(f"No type: {dumps(node)}")
        saved_space = self.names.space
        result: AvroType
        if type_name in NAMED:
            space = node.get("namespace")
            if space is not None and not isinstance(space, str):
                raise InvalidSchemaError(f"Invalid namespace: {dumps(node)}")
            if space is None:
                space = saved_space
            raw_name = node.get("name")
            if not isinstance(raw_name, str):
                raise InvalidSchemaError(f"No name in schema: {dumps(node)}")
            simple, namespace = split_name(raw_name, space)
            doc = node.get("doc")
            result = AvroType(type_name, name=simple, namespace=namespace,
                              doc=doc if isinstance(doc, str) else None)
            self.names.space = namespace
        if type_name in PRIMITIVES:
            result = AvroType(type_name)
        elif type_name in ("record", "error"):
            self.names.add(result)
            raw_fields = node.get("fields")
            if not isinstance(raw_fields, list):
                raise InvalidSchemaError(f"Record has no fields: {dumps(node)}")
            seen: set[str] = set()
            for position, raw_field in enumerate(raw_fields):
                f = self._parse_field(raw_field, position, depth)
                if f.name in seen:
                    raise InvalidSchemaError(
                        f"Duplicate field {f.name} in record {result.full_name}: {dumps(raw_field)}"
                    )
                seen.add(f.name)
                result.fields.append(f)
        elif type_name == "enum":
            raw_symbols = node.get("symbols")
            if not isinstance(raw_symbols, list):
                raise InvalidSchemaError(f"Enum has no symbols: {dumps(node)}")
            symbols: set[str] = set()  # a list scan per symbol was quadratic: 40,000 symbols took 8 s
            for symbol in raw_symbols:
                if not isinstance(symbol, str):
                    raise InvalidSchemaError(f"Enum symbol is not a string: {dumps(symbol)}")
                validate_name(symbol)
                if symbol in symbols:
                    raise InvalidSchemaError(f"Duplicate enum symbol: {symbol}")
                symbols.add(symbol)
                result.symbols.append(symbol)
            if "default" in node:
                default = node["default"]
                if not isinstance(default, str) or default not in symbols:
                    raise InvalidSchemaError(
                        f"The Enum Default: {default if isinstance(default, str) else dumps(default)} "
                        f"is not in the enum symbol set: [{', '.join(result.symbols)}]"
                    )
                result.enum_default = default
            self.names.add(result)
        elif type_name == "array":
            if "items" not in node:
                raise InvalidSchemaError(f"Array has no items type: {dumps(node)}")
            result = AvroType("array", items=self.parse(node["items"], depth + 1))
        elif type_name == "map":
            if "values" not in node:
                raise InvalidSchemaError(f"Map has no values type: {dumps(node)}")
            result = AvroType("map", values=self.parse(node["values"], depth + 1))
        elif type_name == "fixed":
            size = node.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= _INT_RANGE[1]:
                raise InvalidSchemaError(f"Invalid or no size: {dumps(node)}")
            result.size = size
            self.names.add(result)
        else:
            # `{"type": "SomeDefinedName"}` refers to a defined type, as the Java parser allows.
            found = self.names.get(type_name)
            self.names.space = saved_space
            if found is None or found.type in PRIMITIVES:
                raise InvalidSchemaError(f"Type not supported: {type_name}")
            return found
        reserved = _ENUM_RESERVED if type_name == "enum" else _SCHEMA_RESERVED
        for key, value in node.items():
            if key not in reserved:
                result.props[key] = value
        self.names.space = saved_space
        if result.is_named:
            qualified_aliases = dict.fromkeys(result.aliases)
            for alias in _aliases(node):
                qualified_aliases[full_name(alias, result.namespace)] = None
            result.aliases = list(qualified_aliases)
        return result

    def _parse_field(self, raw: Any, position: int, depth: int) -> AvroField:
        if not isinstance(raw, dict):
            raise InvalidSchemaError(f"Field is not an object: {dumps(raw)}")
        name = raw.get("name")
        if not isinstance(name, str):
            raise InvalidSchemaError(f"No field name: {dumps(raw)}")
        validate_name(name)
        if "type" not in raw:
            raise InvalidSchemaError(f"No field type: {dumps(raw)}")
        type_node = raw["type"]
        if isinstance(type_node, str) and self.names.get(type_node) is None:
            raise InvalidSchemaError(
                f"{dumps(type_node)} is not a defined name. The type of the \"{name}\" field must be "
                'a defined name or a {"type": ...} expression.'
            )
        field_type = self.parse(type_node, depth + 1)
        order = "ascending"
        if "order" in raw:
            raw_order = raw["order"]
            if not isinstance(raw_order, str) or raw_order.lower() not in _ORDERS:
                raise InvalidSchemaError(f"Invalid order {dumps(raw_order)} for field {name}")
            order = raw_order.lower()
        default: Any = NO_DEFAULT
        if "default" in raw:
            default = raw["default"]
            if field_type.type in ("float", "double") and isinstance(default, str):
                # The Java parser reads "NaN", "Infinity" and numeric strings as doubles.
                with contextlib.suppress(ValueError):
                    default = float(default)
            if self.validate_defaults and not is_valid_default(field_type, default):
                raise InvalidDefaultError(
                    f"Invalid default for field {name}: {dumps(raw['default'])} not a "
                    f"{type_summary(field_type)}"
                )
        doc = raw.get("doc")
        f = AvroField(name, field_type, position, doc=doc if isinstance(doc, str) else None,
                      default=default, order=order, aliases=_aliases(raw))
        for key, value in raw.items():
            if key not in _FIELD_RESERVED:
                f.props[key] = value
        return f


def type_summary(t: AvroType) -> str:
    """A short JSON rendering of a type for messages (named types by full name)."""
    if t.is_named:
        return dumps({"type": t.type, "name": t.full_name})
    if t.type == "array" and t.items is not None:
        return f'{{"type":"array","items":{type_summary(t.items)}}}'
    if t.type == "map" and t.values is not None:
        return f'{{"type":"map","values":{type_summary(t.values)}}}'
    if t.type == "union":
        return "[" + ",".join(type_summary(b) for b in t.branches) + "]"
    return dumps(t.type)


def is_valid_default(t: AvroType, value: Any, depth: int = 0,
                     _memo: dict[tuple[int, int, int], bool] | None = None) -> bool:
    """Avro Java's `Schema.isValidDefault` (1.12): the JSON value fits the type."""
    if depth > _MAX_DEPTH:
        return False
    kind = t.type
    if value is NO_DEFAULT:
        return False
    if kind in ("string", "bytes", "enum", "fixed"):
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool) and \
            _INT_RANGE[0] <= value <= _INT_RANGE[1]
    if kind == "long":
        return isinstance(value, int) and not isinstance(value, bool) and \
            _LONG_RANGE[0] <= value <= _LONG_RANGE[1]
    if kind in ("float", "double"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    # A record's missing fields are checked against their own defaults, which may be records again:
    # records whose fields default to `{}` and refer twice to the next record make 2**depth walks
    # of a few-KB schema (25 levels took minutes). Each (type, value object, depth) is judged once.
    memo = {} if _memo is None else _memo
    key = (id(t), id(value), depth)
    found = memo.get(key)
    if found is not None:
        return found
    verdict = False
    if kind == "array":
        verdict = isinstance(value, list) and t.items is not None and \
            all(is_valid_default(t.items, v, depth + 1, memo) for v in value)
    elif kind == "map":
        verdict = isinstance(value, dict) and t.values is not None and \
            all(is_valid_default(t.values, v, depth + 1, memo) for v in value.values())
    elif kind == "union":
        # Avro 1.12 (Confluent 8): a default may match any branch; Avro 1.11 only took the first.
        verdict = any(is_valid_default(b, value, depth + 1, memo) for b in t.branches)
    elif t.is_record:
        verdict = isinstance(value, dict) and all(
            is_valid_default(f.type, value.get(f.name, f.default), depth + 1, memo)
            for f in t.fields
        )
    memo[key] = verdict
    return verdict


def iter_named(root: AvroType) -> Iterator[AvroType]:
    """Every named type reachable from `root`, each once, in definition order."""
    seen: set[int] = set()
    stack: list[AvroType] = [root]
    order: list[AvroType] = []
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        if t.is_named:
            order.append(t)
        children: list[AvroType] = []
        if t.is_record:
            children = [f.type for f in t.fields]
        elif t.items is not None:
            children = [t.items]
        elif t.values is not None:
            children = [t.values]
        elif t.type == "union":
            children = list(t.branches)
        stack.extend(reversed(children))
    yield from order


def _json_equal(a: Any, b: Any) -> bool:
    """Jackson `JsonNode.equals`: objects as maps (key order aside), 1 and 1.0 apart."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def same_schema(a: AvroType, b: AvroType) -> bool:
    """Avro Java's `Schema.equals` (Confluent's `AvroSchema.deepEquals`, references resolved): types,
    full names, fields (name, type, default, order, properties), symbols, sizes, branches and
    properties (logical types included) are compared; docs, aliases and enum defaults are not. A pair
    met again while being compared counts as equal (recursive types), as Java's SEEN_EQUALS does."""
    seen: set[tuple[int, int]] = set()

    def equal(x: AvroType, y: AvroType) -> bool:
        if x is y:
            return True
        if x.type != y.type or not _json_equal(x.props, y.props):
            return False
        if x.is_named:
            if x.full_name != y.full_name:
                return False
            pair = (id(x), id(y))
            if pair in seen:
                return True
            seen.add(pair)
        if x.is_record:
            return len(x.fields) == len(y.fields) and all(
                f.name == g.name and f.order == g.order and f.has_default == g.has_default
                and (not f.has_default or _json_equal(f.default, g.default))
                and _json_equal(f.props, g.props) and equal(f.type, g.type)
                for f, g in zip(x.fields, y.fields, strict=True)
            )
        if x.type == "enum":
            return x.symbols == y.symbols  # Java's EnumSchema.equals leaves the enum default out
        if x.type == "fixed":
            return x.size == y.size
        if x.type == "array":
            assert x.items is not None and y.items is not None
            return equal(x.items, y.items)
        if x.type == "map":
            assert x.values is not None and y.values is not None
            return equal(x.values, y.values)
        if x.type == "union":
            return len(x.branches) == len(y.branches) and all(
                equal(p, q) for p, q in zip(x.branches, y.branches, strict=True))
        return True

    return equal(a, b)


def _load_json(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except InvalidSchemaError:
        raise
    except (ValueError, RecursionError) as exc:
        raise InvalidSchemaError(f"Invalid schema JSON: {exc}") from None


def _reject_constant(name: str) -> Any:
    raise InvalidSchemaError(f"Invalid schema JSON: unexpected token {name}")


def parse_avro_model(
    text: str,
    references: Sequence[SchemaReference],
    resolved: Mapping[str, ParsedSchema],
    *,
    validate_defaults: bool = True,
) -> AvroModel:
    """Parses `text` with the named types of the referenced schemas already defined."""
    referenced: list[AvroType] = []
    predefined: list[AvroType] = []
    for ref in references:
        model = resolved[ref.name].model
        if not isinstance(model, AvroModel):
            raise InvalidSchemaError(f"Reference '{ref.name}' is not an AVRO schema")
        for t in (*model.referenced, model.root):
            if all(t is not r for r in referenced):
                referenced.append(t)
                predefined.extend(iter_named(t))
    node = _load_json(text)
    parser = _Parser(_Names(predefined), validate_defaults)
    try:
        root = parser.parse(node)
    except RecursionError:
        raise InvalidSchemaError("Schema is nested too deeply") from None
    return AvroModel(root, tuple(referenced))


def parse_avro(
    text: str,
    references: Sequence[SchemaReference],
    resolved: Mapping[str, ParsedSchema],
    *,
    normalize: bool,
    validate_defaults: bool = True,
) -> tuple[str, object, AvroModel]:
    """(canonical text, fastavro-parsed schema, model) of an Avro schema."""
    from registry.schemas.avro_text import canonical_string, fastavro_schema, normalized_string

    model = parse_avro_model(text, references, resolved, validate_defaults=validate_defaults)
    if normalize:
        # Confluent normalises by rewriting the text, then parses the result again.
        model = parse_avro_model(normalized_string(model), references, resolved, validate_defaults=validate_defaults)
    canonical = canonical_string(model)
    return canonical, fastavro_schema(model), model
