"""Confluent wire-format serdes: Avro and JSON Schema serializer/deserializer pairs.

Wire format (Confluent's `PrefixSchemaIdSerializer`): byte 0 is the magic byte 0, bytes 1-4 the
schema id as a big-endian signed int, then the payload (Avro binary without container header, or
UTF-8 JSON text). Serializers and deserializers are callables `(value, ctx) -> bytes` and
`(bytes, ctx) -> value`, where `ctx` has `.topic` and `.field` ("key" or "value"): the shape of
confluent-kafka's `SerializationContext`, so they plug into its `SerializingProducer` and
`DeserializingConsumer` (or are called around `Producer.produce` / `Consumer.poll`) unchanged.
"""

from __future__ import annotations

import io
import json
import struct
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol

import fastavro
import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import referencing
import referencing.exceptions
import referencing.jsonschema

from registry.client import FetchedSchema, RegistryClient
from registry.json_validation import (
    UnevaluablePatternError,
    check_patterns,
    check_schema,
    validator_class_for,
)
from registry.model import Reference

MAGIC_BYTE: Final = 0
HEADER_SIZE: Final = 5
_HEADER = struct.Struct(">bi")


class SerializationError(ValueError):
    """A value that cannot be framed, encoded or decoded; the message says why."""


class SerializationContextLike(Protocol):
    @property
    def topic(self) -> str: ...

    @property
    def field(self) -> str: ...


SubjectNameStrategy = Callable[[SerializationContextLike, str | None], str]


def frame(schema_id: int, payload: bytes) -> bytes:
    if not 0 <= schema_id <= 2**31 - 1:
        raise SerializationError(f"schema id {schema_id} does not fit the wire format")
    return _HEADER.pack(MAGIC_BYTE, schema_id) + payload


def unframe(data: bytes) -> tuple[int, bytes]:
    """(schema id, payload) of a framed message."""
    if len(data) < HEADER_SIZE:
        raise SerializationError(f"Message too small: expected at least {HEADER_SIZE} bytes, got {len(data)}")
    magic, schema_id = _HEADER.unpack_from(data)
    if magic != MAGIC_BYTE:
        raise SerializationError(f"Unknown magic byte {magic}: this is not Confluent wire format")
    if schema_id < 0:
        raise SerializationError(f"Invalid schema id {schema_id} in the message header")
    return schema_id, bytes(data[HEADER_SIZE:])


def _field_name(ctx: SerializationContextLike) -> str:
    return str(getattr(ctx.field, "value", ctx.field)).lower()


def topic_subject_name_strategy(ctx: SerializationContextLike, record_name: str | None) -> str:
    """TopicNameStrategy: `<topic>-key` or `<topic>-value`."""
    return f"{ctx.topic}-{_field_name(ctx)}"


def record_subject_name_strategy(ctx: SerializationContextLike, record_name: str | None) -> str:
    """RecordNameStrategy: the fully-qualified record name."""
    if not record_name:
        raise SerializationError(
            f"RecordNameStrategy needs a named record schema for the message {_field_name(ctx)}")
    return record_name


def topic_record_subject_name_strategy(ctx: SerializationContextLike, record_name: str | None) -> str:
    """TopicRecordNameStrategy: `<topic>-<fully-qualified record name>`."""
    return f"{ctx.topic}-{record_subject_name_strategy(ctx, record_name)}"


def referenced_schemas(client: RegistryClient, references: Sequence[Reference], depth: int = 0
                       ) -> list[tuple[str, FetchedSchema]]:
    """(reference name, schema) of every schema `references` reach, dependencies first."""
    if depth > 32:
        raise SerializationError("schema references nested too deeply")
    out: list[tuple[str, FetchedSchema]] = []
    for ref in references:
        referenced = client.version(ref.subject, ref.version).schema
        out.extend(referenced_schemas(client, referenced.references, depth + 1))
        out.append((ref.name, referenced))
    return out


def _avro_named(client: RegistryClient, references: Sequence[Reference]) -> dict[str, Any]:
    named: dict[str, Any] = {}
    for _, referenced in referenced_schemas(client, references):
        fastavro.parse_schema(json.loads(referenced.schema), named_schemas=named)
    return named


class _SchemaIds:
    """Which id to frame a subject's values with: registered, looked up, or the subject's latest."""

    def __init__(self, client: RegistryClient, schema: str, schema_type: str, *, auto_register: bool,
                 use_latest_version: bool, normalize: bool, references: Sequence[Reference] = ()) -> None:
        self.client = client
        self.schema = schema
        self.schema_type = schema_type
        self.references = tuple(references)
        self.auto_register = auto_register
        self.use_latest_version = use_latest_version
        self.normalize = normalize
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()

    def id_for(self, subject: str) -> int:
        found = self._ids.get(subject)
        if found is not None:
            return found
        if self.use_latest_version:
            found = self.client.version(subject, "latest").id
        elif self.auto_register:
            found = self.client.register(subject, self.schema, self.schema_type, self.references,
                                         normalize=self.normalize)
        else:
            found = self.client.lookup(subject, self.schema, self.schema_type, self.references,
                                       normalize=self.normalize).id
        with self._lock:
            self._ids[subject] = found
        return found


class AvroSerializer:
    """`references` name registered subject versions whose named types `schema_str` uses."""

    def __init__(self, client: RegistryClient, schema_str: str, *,
                 subject_name_strategy: SubjectNameStrategy = topic_subject_name_strategy,
                 auto_register_schemas: bool = True, use_latest_version: bool = False, normalize: bool = False,
                 references: Sequence[Reference] = (),
                 to_dict: Callable[[Any, SerializationContextLike], Any] | None = None) -> None:
        try:
            named = _avro_named(client, references)
            self._parsed = fastavro.parse_schema(json.loads(schema_str), named_schemas=named)
        except (ValueError, fastavro.schema.SchemaParseException) as exc:
            raise SerializationError(f"invalid Avro schema: {exc}") from exc
        self._record_name = self._parsed.get("name") if isinstance(self._parsed, dict) else None
        self._strategy = subject_name_strategy
        self._ids = _SchemaIds(client, schema_str, "AVRO", auto_register=auto_register_schemas,
                               use_latest_version=use_latest_version, normalize=normalize, references=references)
        self._to_dict = to_dict

    def __call__(self, value: Any, ctx: SerializationContextLike) -> bytes | None:
        if value is None:
            return None
        schema_id = self._ids.id_for(self._strategy(ctx, self._record_name))
        record = self._to_dict(value, ctx) if self._to_dict else value
        out = io.BytesIO()
        try:
            fastavro.schemaless_writer(out, self._parsed, record)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SerializationError(f"value does not match the Avro schema: {exc}") from exc
        return frame(schema_id, out.getvalue())


class AvroDeserializer:
    """Decodes with the writer's schema fetched by id; resolves to `reader_schema_str` when given."""

    def __init__(self, client: RegistryClient, reader_schema_str: str | None = None, *,
                 from_dict: Callable[[Any, SerializationContextLike | None], Any] | None = None) -> None:
        self._client = client
        self._reader = fastavro.parse_schema(json.loads(reader_schema_str)) if reader_schema_str else None
        self._writers: dict[int, Any] = {}
        self._from_dict = from_dict

    def _writer(self, schema_id: int) -> Any:
        parsed = self._writers.get(schema_id)
        if parsed is None:
            fetched = self._client.schema_by_id(schema_id)
            if fetched.schema_type != "AVRO":
                raise SerializationError(f"schema {schema_id} is {fetched.schema_type}, not AVRO")
            named = _avro_named(self._client, fetched.references)
            parsed = fastavro.parse_schema(json.loads(fetched.schema), named_schemas=named)
            self._writers[schema_id] = parsed
        return parsed

    def __call__(self, data: bytes | None, ctx: SerializationContextLike | None = None) -> Any:
        if data is None:
            return None
        schema_id, payload = unframe(data)
        try:
            value = fastavro.schemaless_reader(io.BytesIO(payload), self._writer(schema_id), self._reader)
        except (ValueError, EOFError, StopIteration, IndexError, fastavro.read.SchemaResolutionError) as exc:
            raise SerializationError(f"cannot decode Avro payload with schema {schema_id}: {exc}") from exc
        return self._from_dict(value, ctx) if self._from_dict else value


def _unevaluable(exc: UnevaluablePatternError) -> SerializationError:
    return SerializationError(f"{exc}; the serdes match patterns in linear time only (validate=False turns "
                              "validation off)")


def _validator(schema: Any, referenced: Sequence[tuple[str, FetchedSchema]] = ()) -> Any:
    """A validator for `schema` whose `$ref`s to the referenced schemas resolve by reference name; it
    takes linear time (`registry.json_validation`: regexes on RE2, `uniqueItems` by hashing), and a
    pattern that cannot be matched so is refused here, naming it."""
    try:
        cls = validator_class_for(schema)
        check_patterns(schema, referencing.jsonschema.DRAFT202012)
        check_schema(cls, schema)
        resources = [(name, referencing.Resource.from_contents(
            json.loads(doc.schema), default_specification=referencing.jsonschema.DRAFT7)) for name, doc in referenced]
        for _, resource in resources:
            check_patterns(resource.contents, referencing.jsonschema.DRAFT7)
    except UnevaluablePatternError as exc:
        raise _unevaluable(exc) from None
    except jsonschema.exceptions.SchemaError as exc:
        raise SerializationError(f"invalid JSON Schema: {exc.message}") from exc
    except ValueError as exc:
        raise SerializationError(f"invalid referenced JSON Schema: {exc}") from exc
    return cls(schema, registry=referencing.Registry().with_resources(resources))


def _validate(validator: Any, value: Any) -> None:
    try:
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    except referencing.exceptions.Unresolvable as exc:
        raise SerializationError(f"JSON Schema reference cannot be resolved: {exc}") from exc
    except UnevaluablePatternError as exc:
        raise _unevaluable(exc) from None
    if error is not None:
        raise SerializationError(f"value does not match the JSON Schema: {error.message}")


class JSONSerializer:
    """`references` name registered subject versions that `schema_str` reaches with `$ref`."""

    def __init__(self, client: RegistryClient, schema_str: str, *,
                 subject_name_strategy: SubjectNameStrategy = topic_subject_name_strategy,
                 auto_register_schemas: bool = True, use_latest_version: bool = False, normalize: bool = False,
                 validate: bool = True, references: Sequence[Reference] = (),
                 to_dict: Callable[[Any, SerializationContextLike], Any] | None = None) -> None:
        try:
            schema = json.loads(schema_str)
        except ValueError as exc:
            raise SerializationError(f"invalid JSON Schema: {exc}") from exc
        self._validator = _validator(schema, referenced_schemas(client, references)) if validate else None
        self._record_name = schema.get("title") if isinstance(schema, Mapping) else None
        self._strategy = subject_name_strategy
        self._ids = _SchemaIds(client, schema_str, "JSON", auto_register=auto_register_schemas,
                               use_latest_version=use_latest_version, normalize=normalize, references=references)
        self._to_dict = to_dict

    def __call__(self, value: Any, ctx: SerializationContextLike) -> bytes | None:
        if value is None:
            return None
        schema_id = self._ids.id_for(self._strategy(ctx, self._record_name))
        document = self._to_dict(value, ctx) if self._to_dict else value
        if self._validator is not None:
            _validate(self._validator, document)
        return frame(schema_id, json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode())


class JSONDeserializer:
    """Validates against `schema_str` when given, else against the writer's schema fetched by id."""

    def __init__(self, client: RegistryClient | None, schema_str: str | None = None, *, validate: bool = True,
                 from_dict: Callable[[Any, SerializationContextLike | None], Any] | None = None) -> None:
        if client is None and schema_str is None and validate:
            raise SerializationError("JSONDeserializer needs a registry client or a schema to validate against")
        self._client = client
        self._fixed = _validator(json.loads(schema_str)) if schema_str and validate else None
        self._validate = validate
        self._validators: dict[int, Any] = {}
        self._from_dict = from_dict

    def _validator_for(self, schema_id: int) -> Any:
        if self._fixed is not None or not self._validate or self._client is None:
            return self._fixed
        found = self._validators.get(schema_id)
        if found is None:
            fetched = self._client.schema_by_id(schema_id)
            if fetched.schema_type != "JSON":
                raise SerializationError(f"schema {schema_id} is {fetched.schema_type}, not JSON")
            found = self._validators[schema_id] = _validator(
                json.loads(fetched.schema), referenced_schemas(self._client, fetched.references))
        return found

    def __call__(self, data: bytes | None, ctx: SerializationContextLike | None = None) -> Any:
        if data is None:
            return None
        schema_id, payload = unframe(data)
        try:
            value = json.loads(payload)
        except (ValueError, UnicodeDecodeError) as exc:
            raise SerializationError(f"payload is not JSON: {exc}") from exc
        validator = self._validator_for(schema_id)
        if validator is not None:
            _validate(validator, value)
        return self._from_dict(value, ctx) if self._from_dict else value
