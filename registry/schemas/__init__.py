"""Schema parsing, canonical forms and normalisation for the registry (Avro and JSON Schema).

`parse_schema` is the one entry point: it validates the text, resolves references against the
already-parsed referenced schemas, and returns a `ParsedSchema` whose `canonical` text is what the
registry stores and returns (Confluent's canonical string). Every failure, whatever the input, is an
`InvalidSchemaError` whose message is meant for the user (answered as 42201).
"""

from __future__ import annotations

import enum
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from registry.schemas.errors import InvalidDefaultError, InvalidSchemaError


class SchemaType(enum.StrEnum):
    AVRO = "AVRO"
    JSON = "JSON"
    PROTOBUF = "PROTOBUF"


@dataclass(frozen=True, slots=True)
class SchemaReference:
    """A reference from one schema to a registered subject version (`name` is the Avro full name
    or the JSON Schema `$ref` URL the referring schema uses)."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True, slots=True, eq=False)
class ParsedSchema:
    """A validated schema.

    Instances are shared (parse results are cached): treat `parsed` and `model` as read-only.
    `parsed` is what serdes use: for AVRO a fastavro-parsed schema (referenced named types
    included), for JSON the JSON document. `model` is the internal form the compatibility checker
    walks (an `registry.schemas.avro.AvroType` graph, or a `registry.schemas.json_schema.JsonSchemaDocument`).
    """

    schema_type: SchemaType
    canonical: str
    references: tuple[SchemaReference, ...]
    parsed: object
    model: object = field(default=None, repr=False)

    def fingerprint(self) -> str:
        """A stable hash of the canonical text and the references, for "same schema" lookups."""
        payload = json.dumps(
            [
                self.schema_type.value,
                self.canonical,
                [[r.name, r.subject, r.version] for r in self.references],
            ],
            separators=(",", ":"),
            ensure_ascii=False,
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def resolved(self) -> str:
        """The self-contained text, referenced types spelled out (Confluent's `format=resolved`;
        also what a client sends when it resolved the references itself). For JSON Schema the
        canonical text (references stay `$ref`s)."""
        if self.schema_type is SchemaType.AVRO:
            from registry.schemas.avro import AvroModel
            from registry.schemas.avro_text import expanded_string

            if isinstance(self.model, AvroModel):
                return expanded_string(self.model)
        return self.canonical

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ParsedSchema):
            return NotImplemented
        return (
            self.schema_type is other.schema_type
            and self.canonical == other.canonical
            and self.references == other.references
        )

    def __hash__(self) -> int:
        return hash((self.schema_type, self.canonical, self.references))


_NO_RESOLVED: Mapping[str, ParsedSchema] = MappingProxyType({})


def parse_schema(
    schema_type: SchemaType,
    text: str,
    *,
    references: Sequence[SchemaReference] = (),
    resolved: Mapping[str, ParsedSchema] = _NO_RESOLVED,
    normalize: bool = False,
    validate_defaults: bool = True,
) -> ParsedSchema:
    """Parses and validates `text` as a schema of `schema_type`.

    `resolved` maps each reference name to the already-parsed referenced schema (the caller loads
    the referenced subject versions, transitively). With `normalize`, the canonical text is
    Confluent's normalised form, so that equivalent spellings compare equal. Without
    `validate_defaults`, Avro field defaults are not checked against their types (Confluent parses
    only new schemas with `setValidateDefaults(true)`: stored, imported and looked-up ones without).
    """
    if not isinstance(text, str):
        raise InvalidSchemaError("Schema must be a string")
    refs = tuple(references)
    for ref in refs:
        if ref.name not in resolved:
            raise InvalidSchemaError(f"Reference '{ref.name}' (subject '{ref.subject}', version {ref.version}) "
                                     "was not resolved")
    try:
        kind = SchemaType(schema_type)
    except ValueError:
        raise InvalidSchemaError(f"Unsupported schema type {schema_type!r}") from None
    # Producers register and look up the same few schemas over and over: parse each text once.
    prints = tuple(resolved[r.name].fingerprint() for r in refs)
    key = (kind, text, normalize, validate_defaults, refs, prints)
    with _CACHE_LOCK:
        # A parse that checked defaults stands for one that does not (the result is the same).
        for candidate in (key,) if validate_defaults else ((kind, text, normalize, True, refs, prints), key):
            cached = _CACHE.get(candidate)
            if cached is not None:
                _CACHE.move_to_end(candidate)
                return cached[0]
    parsed = _parse(kind, text, refs, resolved, normalize, validate_defaults)
    _remember(key, parsed, len(text))
    return parsed


def _remember(key: tuple[object, ...], parsed: ParsedSchema, size: int) -> None:
    global _cached_text
    with _CACHE_LOCK:
        previous = _CACHE.pop(key, None)
        if previous is not None:
            _cached_text -= previous[1]
        _CACHE[key] = (parsed, size)
        _cached_text += size
        # The newest entry stays even when larger than the bound: a registration parses its schema
        # twice (before and under the writers' lock), and large ones are those worth keeping.
        while len(_CACHE) > 1 and (len(_CACHE) > _CACHE_SIZE or _cached_text > _MAX_CACHED_TEXTS):
            _, (_, evicted_size) = _CACHE.popitem(last=False)
            _cached_text -= evicted_size


# A parsed schema takes up to about 90 times its text in memory (a 1.6 MB JSON schema: 140 MiB), so
# the cache is bounded by the total size of its texts too (about 360 MiB at worst).
_CACHE_SIZE = 1024
_MAX_CACHED_TEXTS = 4 * 1024 * 1024
_CACHE: OrderedDict[tuple[object, ...], tuple[ParsedSchema, int]] = OrderedDict()  # -> (parsed, len(text))
_CACHE_LOCK = threading.Lock()
_cached_text = 0


def _parse(
    kind: SchemaType,
    text: str,
    refs: tuple[SchemaReference, ...],
    resolved: Mapping[str, ParsedSchema],
    normalize: bool,
    validate_defaults: bool = True,
) -> ParsedSchema:
    if normalize:
        refs = tuple(sorted(set(refs), key=lambda r: (r.name, r.subject, r.version)))
    canonical: str
    parsed: object
    model: object
    if kind is SchemaType.AVRO:
        from registry.schemas.avro import parse_avro

        canonical, parsed, model = parse_avro(text, refs, resolved, normalize=normalize,
                                              validate_defaults=validate_defaults)
    elif kind is SchemaType.JSON:
        from registry.schemas.json_schema import parse_json_schema

        canonical, parsed, model = parse_json_schema(text, refs, resolved, normalize=normalize)
    else:
        raise InvalidSchemaError("PROTOBUF schemas are not supported by this registry yet")
    try:
        canonical.encode("utf-8")
    except UnicodeEncodeError:
        # json.loads lets lone surrogates (\ud800) through; they cannot be stored or returned
        raise InvalidSchemaError("Schema contains invalid Unicode (an unpaired surrogate)") from None
    return ParsedSchema(kind, canonical, refs, parsed, model)


__all__ = [
    "InvalidDefaultError",
    "InvalidSchemaError",
    "ParsedSchema",
    "SchemaReference",
    "SchemaType",
    "parse_schema",
]
