"""Text forms of a parsed Avro schema: Confluent's canonical string and its normalised string.

* `canonical_string` is Apache Avro Java's `Schema.toString(referencedSchemas, false)`, which is
  what Confluent stores and returns: `{"type":"string"}` becomes `"string"`, keys come in Avro's
  fixed order (type, name, namespace, doc, fields/symbols/items/values/size, then the other
  properties in source order, then aliases), a named type's namespace is written only where it
  differs from the enclosing one, and a named type is spelled out once and named afterwards.
  Types defined by referenced schemas are named, not repeated.
* `normalized_string` is Confluent's `AvroSchemaUtils.toNormalizedString` (adapted from Avro's
  parsing canonical form, but keeping doc, defaults, order, aliases and properties): full names,
  sorted properties and aliases, logical types first. The registry parses that text again and
  stores its canonical string.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from registry.schemas.avro import PRIMITIVES, AvroModel, AvroType, dumps


def java_double(value: float) -> str:
    """A double as Java's `Double.toString` (which Jackson uses) writes it: `1.0`, `1.0E10`."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    magnitude = abs(value)
    if magnitude == 0:
        return sign + "0.0"
    exact = Decimal(repr(magnitude))  # the shortest digits that round-trip, as Java picks
    _, digit_tuple, exponent = exact.as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    point = len("".join(map(str, digit_tuple))) + exponent  # digits before the decimal point
    leading_zeros = len(digit_tuple) - len(digits)
    point -= leading_zeros
    digits = digits.rstrip("0") or "0"
    if 1e-3 <= magnitude < 1e7:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        whole = digits[:point].ljust(point, "0")
        fraction = digits[point:] or "0"
        return f"{sign}{whole}.{fraction}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{point - 1}"


def json_text(value: Any) -> str:
    """Compact JSON with Jackson's number spelling."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return dumps(value)
    if isinstance(value, float):
        return java_double(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{dumps(str(k))}:{json_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(json_text(v) for v in value) + "]"
    return dumps(value)


def _qualified(t: AvroType, default_space: str | None) -> str:
    """Java's `Name.getQualified`: the short name when the namespace is the default one and the
    short name is not also a type name."""
    assert t.name is not None
    if t.namespace is not None and t.namespace == default_space:
        return t.full_name if t.name in _TYPE_NAMES else t.name
    return t.full_name


_TYPE_NAMES = PRIMITIVES | {"record", "error", "enum", "fixed", "array", "map", "union"}


class _CanonicalWriter:
    def __init__(self, known: tuple[AvroType, ...]) -> None:
        self.defined: dict[str, AvroType] = {t.full_name: t for t in known if t.is_named}
        self.space: str | None = None

    def write(self, t: AvroType) -> str:
        if t.is_named:
            if self.defined.get(t.full_name) is t:
                return dumps(_qualified(t, self.space))
            self.defined[t.full_name] = t
            return self._named(t)
        if t.type == "union":
            return "[" + ",".join(self.write(b) for b in t.branches) + "]"
        if t.type == "array" and t.items is not None:
            return '{"type":"array","items":' + self.write(t.items) + self._props(t.props) + "}"
        if t.type == "map" and t.values is not None:
            return '{"type":"map","values":' + self.write(t.values) + self._props(t.props) + "}"
        if not t.props:
            return dumps(t.type)
        return '{"type":' + dumps(t.type) + self._props(t.props) + "}"

    @staticmethod
    def _props(props: dict[str, Any]) -> str:
        return "".join(f",{dumps(k)}:{json_text(v)}" for k, v in props.items())

    def _name(self, t: AvroType) -> str:
        out = ',"name":' + dumps(t.name)
        if t.namespace is not None:
            if t.namespace != self.space:
                out += ',"namespace":' + dumps(t.namespace)
        elif self.space is not None:
            out += ',"namespace":""'
        return out

    def _aliases(self, t: AvroType) -> str:
        if not t.aliases:
            return ""
        written = []
        for alias in t.aliases:
            space, _, simple = alias.rpartition(".")
            # Name.getQualified(this namespace): short unless that would read as a type name
            short = (space or None) == t.namespace and space != "" and simple not in _TYPE_NAMES
            written.append(simple if short else alias)
        return ',"aliases":' + dumps(written)

    def _named(self, t: AvroType) -> str:
        saved = self.space
        out = '{"type":' + dumps(t.type) + self._name(t)
        if t.is_record:
            self.space = t.namespace
        if t.doc is not None:
            out += ',"doc":' + dumps(t.doc)
        if t.is_record:
            out += ',"fields":[' + ",".join(self._field(f) for f in t.fields) + "]"
        elif t.type == "enum":
            out += ',"symbols":' + dumps(t.symbols)
            if t.enum_default is not None:
                out += ',"default":' + dumps(t.enum_default)
        else:
            out += ',"size":' + str(t.size)
        out += self._props(t.props) + self._aliases(t) + "}"
        self.space = saved
        return out

    def _field(self, f: Any) -> str:
        out = '{"name":' + dumps(f.name) + ',"type":' + self.write(f.type)
        if f.doc is not None:
            out += ',"doc":' + dumps(f.doc)
        if f.has_default:
            out += ',"default":' + json_text(f.default)
        if f.order != "ascending":
            out += ',"order":' + dumps(f.order)
        if f.aliases:
            out += ',"aliases":' + dumps(f.aliases)
        return out + self._props(f.props) + "}"


def canonical_string(model: AvroModel) -> str:
    return _CanonicalWriter(model.referenced).write(model.root)


def expanded_string(model: AvroModel) -> str:
    """The self-contained text (referenced types spelled out), Java's `Schema.toString()`."""
    return _CanonicalWriter(()).write(model.root)


# --- Confluent's normalised form -------------------------------------------------------------

_DECIMAL_BASES = ("bytes", "fixed")
_LOGICAL_BASES: dict[str, tuple[str, ...]] = {
    "decimal": _DECIMAL_BASES,
    "uuid": ("string", "fixed"),
    "date": ("int",),
    "time-millis": ("int",),
    "time-micros": ("long",),
    "timestamp-millis": ("long",),
    "timestamp-micros": ("long",),
    "timestamp-nanos": ("long",),
    "local-timestamp-millis": ("long",),
    "local-timestamp-micros": ("long",),
    "local-timestamp-nanos": ("long",),
    "duration": ("fixed",),
}


def _int_prop(props: dict[str, Any], key: str, default: int | None) -> int | None:
    value = props.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def logical_type(t: AvroType) -> tuple[str, int | None, int | None] | None:
    """(name, precision, scale) of a valid logical type, else None (Avro ignores invalid ones)."""
    name = t.props.get("logicalType")
    if not isinstance(name, str) or t.type not in _LOGICAL_BASES.get(name, ()):
        return None
    if name == "uuid" and t.type == "fixed" and t.size != 16:
        return None
    if name == "duration" and t.size != 12:
        return None
    if name != "decimal":
        return name, None, None
    precision = _int_prop(t.props, "precision", None)
    scale = _int_prop(t.props, "scale", 0)
    if precision is None or scale is None or precision <= 0 or scale < 0 or scale > precision:
        return None
    if t.type == "fixed" and precision > math.floor(math.log10(2) * (8 * t.size - 1)):
        return None
    return name, precision, scale


def _sorted_props(props: dict[str, Any]) -> str:
    return "".join(f",{dumps(k)}:{json_text(_sort_keys(props[k]))}" for k in sorted(props))


def _sort_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sort_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sort_keys(v) for v in value]
    return value


def _logical_props(lt: tuple[str, int | None, int | None]) -> str:
    name, precision, scale = lt
    out = ',"logicalType":' + dumps(name)
    if name == "decimal":
        out += ',"precision":' + str(precision)
        if scale:
            out += ',"scale":' + str(scale)
    return out


def _default_datum(t: AvroType, value: Any) -> Any:
    """The default as Avro's `Field.defaultVal()` reads it back: numbers of float/double fields
    become doubles, maps and records sorted by key (Confluent writes them with a sorting node
    factory)."""
    if t.type == "union":
        return _default_datum(t.branches[0], value) if t.branches else value
    if t.type in ("float", "double") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if t.type == "array" and t.items is not None and isinstance(value, list):
        return [_default_datum(t.items, v) for v in value]
    if t.type == "map" and t.values is not None and isinstance(value, dict):
        return {k: _default_datum(t.values, value[k]) for k in sorted(value)}
    if t.is_record and isinstance(value, dict):
        out: dict[str, Any] = {}
        for f in t.fields:
            if f.name in value:
                out[f.name] = _default_datum(f.type, value[f.name])
            elif f.has_default:
                out[f.name] = _default_datum(f.type, f.default)
        return {k: out[k] for k in sorted(out)}
    return _sort_keys(value)


class _NormalizedWriter:
    def __init__(self, known: tuple[AvroType, ...]) -> None:
        self.env: set[str] = {t.full_name for t in known if t.is_named}

    def write(self, t: AvroType) -> str:
        if t.type == "union":
            return "[" + ",".join(self.write(b) for b in t.branches) + "]"
        if t.type == "array" and t.items is not None:
            return '{"type":"array","items":' + self.write(t.items) + _sorted_props(t.props) + "}"
        if t.type == "map" and t.values is not None:
            return '{"type":"map","values":' + self.write(t.values) + _sorted_props(t.props) + "}"
        if t.is_named:
            return self._named(t)
        lt = logical_type(t)
        if lt is not None:
            return '{"type":' + dumps(t.type) + _logical_props(lt) + _sorted_props(t.props) + "}"
        if t.props:
            return '{"type":' + dumps(t.type) + _sorted_props(t.props) + "}"
        return dumps(t.type)

    def _named(self, t: AvroType) -> str:
        name = t.full_name
        if name in self.env:
            return dumps(name)
        self.env.add(name)
        kind = "record" if t.is_record else t.type
        out = '{"name":' + dumps(name) + ',"type":' + dumps(kind)
        if t.type == "enum":
            out += ',"symbols":' + dumps(t.symbols)
        elif t.type == "fixed":
            out += ',"size":' + str(t.size)
            lt = logical_type(t)
            if lt is not None:
                out += _logical_props(lt)
        else:
            out += ',"fields":[' + ",".join(self._field(f) for f in t.fields) + "]"
        if t.doc:
            out += ',"doc":' + dumps(t.doc)
        if t.aliases:
            out += ',"aliases":' + dumps(sorted(t.aliases))
        if t.type == "enum" and t.enum_default is not None:
            out += ',"default":' + dumps(t.enum_default)
        return out + _sorted_props(t.props) + "}"

    def _field(self, f: Any) -> str:
        out = '{"name":' + dumps(f.name) + ',"type":' + self.write(f.type)
        out += ',"order":' + dumps(f.order.upper())
        if f.doc is not None:
            out += ',"doc":' + dumps(f.doc)
        if f.aliases:
            out += ',"aliases":' + dumps(sorted(f.aliases))
        if f.has_default:
            out += ',"default":' + json_text(_default_datum(f.type, f.default))
        return out + _sorted_props(f.props) + "}"


def normalized_string(model: AvroModel) -> str:
    return _NormalizedWriter(model.referenced).write(model.root)


def fastavro_schema(model: AvroModel) -> object:
    """The schema parsed by fastavro (for serdes), from the self-contained text."""
    import json

    import fastavro

    from registry.schemas.errors import InvalidSchemaError

    try:
        return fastavro.parse_schema(_without_invalid_logical_types(json.loads(expanded_string(model))),
                                     _ignore_default_error=True)
    except Exception as exc:  # fastavro raises many exception types for schemas it cannot use
        raise InvalidSchemaError(f"Schema cannot be used for serialization: {exc}") from None


def _without_invalid_logical_types(node: Any) -> Any:
    """Avro Java ignores a known logical type whose parameters are invalid (a decimal whose scale
    exceeds its precision) and uses the underlying type; fastavro refuses such a schema, so the
    copy handed to fastavro drops those annotations."""
    if isinstance(node, list):
        return [_without_invalid_logical_types(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _without_invalid_logical_types(v) if k in ("type", "items", "values", "fields") else v
           for k, v in node.items()}
    name = out.get("logicalType")
    kind = out.get("type")
    if isinstance(name, str) and name in _LOGICAL_BASES and isinstance(kind, str):
        size = out.get("size")
        probe = AvroType(kind, props=dict(out), size=size if isinstance(size, int) else 0)
        if logical_type(probe) is None:
            out.pop("logicalType")
    return out
