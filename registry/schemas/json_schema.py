"""JSON Schema parsing: validation against the meta-schema, canonical text, normalisation.

Confluent stores a JSON schema as Jackson writes the parsed document: compact, keys in source
order, numbers as parsed. References (`$ref` to another subject's schema, by the reference name)
are resolved from the referenced parsed schemas.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from registry.schemas.errors import InvalidSchemaError
from registry.schemas.jackson_text import string as jackson_string

if TYPE_CHECKING:
    from registry.schemas import ParsedSchema, SchemaReference

_MAX_DEPTH = 200


@dataclass(frozen=True, slots=True)
class JsonSchemaDocument:
    """A JSON schema and the documents its references name (reference name -> document)."""

    root: Any
    referenced: Mapping[str, Any] = field(default_factory=dict)
    # The loaded typed view (a `registry.schemas.json_model.Node`), built once at parse time.
    node: Any = field(default=None, compare=False, repr=False)


def _reject_constant(name: str) -> Any:
    raise InvalidSchemaError(f"Invalid JSON: unexpected token {name}")


def _depth_ok(value: Any, depth: int = 0) -> bool:
    if depth > _MAX_DEPTH:
        return False
    if isinstance(value, dict):
        return all(_depth_ok(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return all(_depth_ok(v, depth + 1) for v in value)
    return True


def load_json(text: str, *, exact: bool = False) -> Any:
    """The JSON value of `text`; with `exact`, non-integral numbers are kept as `Decimal` with
    their written digits (Confluent reads them as BigDecimal and writes them back as such)."""
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=Decimal if exact else float)
    except InvalidSchemaError:
        raise
    except (ValueError, RecursionError) as exc:
        raise InvalidSchemaError(f"Invalid JSON: {exc}") from None
    if not _depth_ok(value):
        raise InvalidSchemaError("Schema is nested too deeply")
    return value


def compact(value: Any) -> str:
    """Compact JSON as Jackson writes a JsonNode (BigDecimal numbers as `BigDecimal.toString`,
    which is also what Python's `Decimal.__str__` produces)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{_string(k)}:{compact(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(compact(v) for v in value) + "]"
    if isinstance(value, Decimal):
        return str(value.copy_abs() if value.is_zero() else value)  # BigDecimal has no negative zero
    if isinstance(value, str):
        return _string(value)
    return json.dumps(value)


def _string(value: str) -> str:
    return jackson_string(value)


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def _equality_key(value: Any) -> Any:
    """A hashable stand-in equal for exactly the JSON values JSON Schema calls equal (1 == 1.0, true != 1,
    objects whatever their key order)."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, (int, float, Decimal)):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("l", tuple(_equality_key(v) for v in value))
    if isinstance(value, dict):
        return ("o", frozenset((k, _equality_key(v)) for k, v in value.items()))
    return ("z", None)


def unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Any:
    """jsonschema's `uniqueItems` keyword in linear time (for the meta-schemas here, and for the values
    the JSON serdes validate). jsonschema falls back on comparing every pair when the items cannot be
    sorted (objects): a 100 KB draft-04 `enum` of 8,000 objects took a minute."""
    from jsonschema.exceptions import ValidationError

    if unique and validator.is_type(instance, "array") and repeats(instance):
        yield ValidationError(f"{instance!r} has non-unique elements")


def repeats(items: Any) -> bool:
    """Whether two of `items` are equal as JSON Schema compares values (`_equality_key`), in linear time."""
    seen: set[Any] = set()
    for item in items:
        key = _equality_key(item)
        if key in seen:
            return True
        seen.add(key)
    return False


_META_CHECKERS: dict[type, Any] = {}


def _meta_checker(validator: Any) -> Any:
    """`validator`'s own meta-schema check (as `check_schema` does it), with the linear `uniqueItems`."""
    from jsonschema.validators import extend

    checker = _META_CHECKERS.get(validator)
    if checker is None:
        checker = _META_CHECKERS[validator] = extend(validator, {"uniqueItems": unique_items})
    return checker(schema=validator.META_SCHEMA, format_checker=validator.FORMAT_CHECKER)


def _check_against_metaschema(document: Any) -> None:
    import jsonschema
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    if not isinstance(document, (dict, bool)):
        raise InvalidSchemaError("A JSON schema must be an object or a boolean")
    if isinstance(document, dict) and "$schema" in document and not isinstance(document["$schema"], str):
        raise InvalidSchemaError("Invalid JSON schema at '#/$schema': $schema must be a string")
    validator = validator_for(document, default=jsonschema.Draft7Validator) if isinstance(document, dict) \
        else jsonschema.Draft7Validator
    try:
        for error in _meta_checker(validator).iter_errors(document):
            raise SchemaError.create_from(error)
    except SchemaError as exc:
        location = "/".join(str(p) for p in exc.absolute_path)
        where = f" at '#/{location}'" if location else ""
        raise InvalidSchemaError(f"Invalid JSON schema{where}: {exc.message}") from None
    except RecursionError:
        raise InvalidSchemaError("Schema is nested too deeply") from None
    except Exception as exc:  # the meta-schema check must never turn bad input into a crash
        raise InvalidSchemaError(f"Invalid JSON schema: {exc}") from None


def parse_json_schema(
    text: str,
    references: Sequence[SchemaReference],
    resolved: Mapping[str, ParsedSchema],
    *,
    normalize: bool,
) -> tuple[str, object, JsonSchemaDocument]:
    """(canonical text, document, model) of a JSON schema."""
    document = load_json(text)
    _check_against_metaschema(document)
    exact = load_json(text, exact=True)
    referenced: dict[str, Any] = {}
    for ref in references:
        model = resolved[ref.name].model
        if not isinstance(model, JsonSchemaDocument):
            raise InvalidSchemaError(f"Reference '{ref.name}' is not a JSON schema")
        referenced.update(model.referenced)
        referenced[ref.name] = model.root
    if normalize:
        # Confluent's JsonSchema.normalize: the canonical text read back with sorted object keys
        document, exact = _sorted(document), _sorted(exact)
    return compact(exact), document, JsonSchemaDocument(document, referenced, _load_model(document, referenced))


def _load_model(document: Any, referenced: Mapping[str, Any]) -> Any:
    """Loads the schema the way the compatibility checker walks it, once, so that a `$ref` that
    resolves nowhere is reported now (Confluent fails such a schema when it loads it)."""
    from registry.schemas.json_model import Loader, SchemaLoadError

    try:
        return Loader(document, referenced).load()
    except SchemaLoadError as exc:
        raise InvalidSchemaError(f"Invalid JSON schema: {exc}") from None
    except RecursionError:
        raise InvalidSchemaError("Schema is nested too deeply") from None
