"""Confluent wire-format serdes: Avro and JSON Schema serializer/deserializer pairs.

Wire format (Confluent's `PrefixSchemaIdSerializer`): byte 0 is the magic byte 0, bytes 1-4 the
schema id as a big-endian signed int, then the payload (Avro binary without container header, or
UTF-8 JSON text). Serializers and deserializers are callables `(value, ctx) -> bytes` and
`(bytes, ctx) -> value`, where `ctx` has `.topic` and `.field` ("key" or "value"): the shape of
confluent-kafka's `SerializationContext`, so they plug into its `SerializingProducer` and
`DeserializingConsumer` (or are called around `Producer.produce` / `Consumer.poll`) unchanged.

References are fetched as the registry resolves them (`registry.model.reference_subject`): in the
context of the subject that holds them. A serializer's references belong to the subject it frames
with, so a serializer whose subjects fall in several contexts parses its schema once per context.
"""

from __future__ import annotations

import io
import itertools
import json
import struct
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, Generic, Protocol, TypeVar

import attrs
import fastavro
import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import referencing
import referencing.exceptions
import referencing.jsonschema

from registry.client import FetchedSchema, RegistryClient, RegistryClientError
from registry.json_validation import (
    DEFAULT_WORK_BUDGET,
    SCHEMA_CHECK_BUDGET,
    CircularValueError,
    UnevaluablePatternError,
    WorkBudget,
    WorkBudgetExceededError,
    check_patterns,
    check_schema,
    validator_class_for,
    validator_with,
    within_budget,
)
from registry.model import Reference, reference_context, reference_subject

MAGIC_BYTE: Final = 0
HEADER_SIZE: Final = 5
_HEADER = struct.Struct(">bi")


class SerializationError(ValueError):
    """A value that cannot be framed, encoded or decoded; the message says why."""


class _TooDeepHere(SerializationError):
    """A schema refused as nested too deeply for the stack this call had: a deeper caller hits Python's
    recursion limit sooner, so the refusal depends on the call, not only on the schema, and is not
    remembered for its id."""


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


MAX_REFERENCE_DEPTH: Final = 32
_Found = dict[tuple[str, int], FetchedSchema]


def referenced_schemas(client: RegistryClient, references: Sequence[Reference], referrer: str
                       ) -> list[tuple[str, FetchedSchema]]:
    """(reference name, schema) of every schema `references` reach, dependencies first, each subject
    version once per name.

    `referrer` is the registry's name of the subject holding `references` (`RegistryClient.qualified`).
    Each reference is looked up where the registry stores it, `reference_subject(referrer, subject)`,
    and the references of what it finds in the context of that subject, as Confluent's
    `AbstractSchemaProvider.resolveReferences` does."""
    out: list[tuple[str, FetchedSchema]] = []
    _collect(client, references, referrer, (), {}, out)
    return list(dict.fromkeys(out))


def _collect(client: RegistryClient, references: Sequence[Reference], referrer: str,
             chain: tuple[tuple[str, int], ...], found: _Found, out: list[tuple[str, FetchedSchema]]) -> None:
    if len(chain) > MAX_REFERENCE_DEPTH:
        raise SerializationError(f"schema references nested more than {MAX_REFERENCE_DEPTH} deep")
    for ref in references:
        key = (reference_subject(referrer, ref.subject), ref.version)
        # A version cannot reach itself when it is registered, but schemas an older kgov stored can close a
        # loop: a reference read in another context than it was written for, or one to version -1 (latest).
        if key in chain:
            raise SerializationError(f"schema references form a cycle through subject '{key[0]}' version {key[1]}")
        schema = found.get(key)
        if schema is None:
            schema = found[key] = client.version(key[0], key[1], qualified=True).schema
            _collect(client, schema.references, key[0], (*chain, key), found, out)
        out.append((ref.name, schema))


def id_referrer(client: RegistryClient, schema_id: int, fetched: FetchedSchema) -> str:
    """The subject in whose context the references of schema `schema_id` (`fetched`) resolve.

    The registry's answer when it gives one (`fetched.subject`); else, as kgov numbers ids across
    contexts, a subject that uses the id (`id_usages`), one of the client's own context if there is
    one; else the client's context itself, which is how Confluent's Python and Go clients read them
    (as written, through the client's URL). Subjects of several contexts reading the references
    differently (an id stored before kgov resolved references by context) make the answer ambiguous:
    refused rather than guessed. The answer is asked once per id per client (`RegistryClient.remember_referrer`),
    as Confluent's clients cache an id's schema per subject."""
    bound = client.qualified("")
    if not fetched.references:
        return bound
    if fetched.subject is not None:
        return fetched.subject
    known = client.known_referrer(schema_id)
    if known is not None:
        return known
    found = _usages_referrer(client, schema_id, fetched, bound)
    client.remember_referrer(schema_id, found)
    return found


def _usages_referrer(client: RegistryClient, schema_id: int, fetched: FetchedSchema, bound: str) -> str:
    try:
        usages = client.id_usages(schema_id)
    except RegistryClientError as exc:
        if exc.status != 404:
            raise
        usages = []
    subjects = list(dict.fromkeys(subject for subject, _ in usages))
    candidates = [s for s in subjects if reference_context(s) == client.context] or subjects
    readings = {tuple(reference_subject(s, r.subject) for r in fetched.references): s for s in candidates}
    if len(readings) > 1:
        raise SerializationError(
            f"schema {schema_id} is used in several contexts that resolve its references differently "
            f"({', '.join(sorted(readings.values()))}): read it through a client bound to one of them")
    return next(iter(readings.values()), bound)


def _avro_named(referenced: Sequence[tuple[str, FetchedSchema]]) -> dict[str, Any]:
    named: dict[str, Any] = {}
    for _, schema in referenced:
        fastavro.parse_schema(json.loads(schema.schema), named_schemas=named)
    return named


def _parse_avro(schema: str, referenced: Sequence[tuple[str, FetchedSchema]]) -> Any:
    try:
        return fastavro.parse_schema(json.loads(schema), named_schemas=_avro_named(referenced))
    except (ValueError, fastavro.schema.SchemaParseException) as exc:
        raise SerializationError(f"invalid Avro schema: {exc}") from exc


_T = TypeVar("_T")


class _PerContext(Generic[_T]):
    """What a serializer builds from its schema and the schemas its references reach: once for all
    subjects when it has no references, else once per context they resolve in."""

    def __init__(self, client: RegistryClient, references: Sequence[Reference],
                 build: Callable[[list[tuple[str, FetchedSchema]]], _T]) -> None:
        self._client = client
        self._references = tuple(references)
        self._build = build
        self._built: dict[str, _T] = {}
        self._by_subject: dict[str, _T] = {}

    def for_subject(self, subject: str) -> _T:
        if subject in self._by_subject:
            return self._by_subject[subject]
        referrer = self._client.qualified(subject)
        key = reference_context(referrer) if self._references else ""
        if key not in self._built:
            self._built[key] = self._build(referenced_schemas(self._client, self._references, referrer))
        found = self._by_subject[subject] = self._built[key]
        return found


def _avro_record_name(schema: Any) -> str | None:
    """The full name of a named schema, as fastavro gives it (`namespace.name`), for the subject strategies."""
    if not isinstance(schema, Mapping) or not isinstance(schema.get("name"), str):
        return None
    name, namespace = schema["name"], schema.get("namespace")
    return f"{namespace}.{name}" if "." not in name and isinstance(namespace, str) and namespace else name


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
            self._record_name = _avro_record_name(json.loads(schema_str))
        except ValueError as exc:
            raise SerializationError(f"invalid Avro schema: {exc}") from exc
        self._parsed = _PerContext(client, references, lambda referenced: _parse_avro(schema_str, referenced))
        if not references:
            self._parsed.for_subject("")  # a bad schema fails here, not at the first value
        self._strategy = subject_name_strategy
        self._ids = _SchemaIds(client, schema_str, "AVRO", auto_register=auto_register_schemas,
                               use_latest_version=use_latest_version, normalize=normalize, references=references)
        self._to_dict = to_dict

    def __call__(self, value: Any, ctx: SerializationContextLike) -> bytes | None:
        if value is None:
            return None
        subject = self._strategy(ctx, self._record_name)
        schema_id = self._ids.id_for(subject)
        parsed = self._parsed.for_subject(subject)
        record = self._to_dict(value, ctx) if self._to_dict else value
        out = io.BytesIO()
        try:
            fastavro.schemaless_writer(out, parsed, record)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SerializationError(f"value does not match the Avro schema: {_avro_mismatch(exc)}") from None
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
            referrer = id_referrer(self._client, schema_id, fetched)
            parsed = _parse_avro(fetched.schema, referenced_schemas(self._client, fetched.references, referrer))
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


def _unevaluable(exc: UnevaluablePatternError, reference: str | None = None) -> SerializationError:
    where = "" if reference is None else f" in the referenced schema {_reference_name(reference)}"
    return SerializationError(f"{exc}{where}; the serdes match patterns in linear time only (validate=False "
                              "turns validation off)")


def _reference_name(name: str) -> str:
    """A reference's name as a refusal quotes it: in JSON's quotes, cut past `_QUOTED` characters."""
    return json.dumps(name if len(name) <= _QUOTED else name[:_QUOTED] + "...", ensure_ascii=False)


def _invalid(reference: str | None) -> str:
    """How a refusal names the schema it found invalid: the one validated against, or a referenced one."""
    return "invalid JSON Schema" if reference is None else f"invalid referenced JSON Schema {_reference_name(reference)}"


def _validator(schema: Any, referenced: Sequence[tuple[str, FetchedSchema]] = ()) -> Any:
    """A validator for `schema` whose `$ref`s to the referenced schemas resolve by reference name; it
    takes linear time (`registry.json_validation`: regexes on RE2, `uniqueItems` by hashing), and a
    pattern that cannot be matched so is refused here, naming it.

    The checks of the schemas (against the meta-schema, and of their patterns) are counted like a value
    within `SCHEMA_CHECK_BUDGET`, over the JSON nodes of the schema and the referenced ones: a schema
    comes from the registry, and one that takes more is refused. A referenced schema is checked as the
    schema is, against the meta-schema of its own `$schema`, else of the schema's draft, a refusal naming
    the reference. These checks do not reach everything a `$ref` can lead to (a keyword no meta-schema
    knows, a schema without `$schema` reached from one of another draft, which `_evolve` evaluates in
    that draft): a malformed keyword there refuses the value when it is evaluated (`_validate`)."""
    checked: list[Any] = [schema]  # what the budget counts, the referenced schemas added once parsed
    reference: str | None = None  # the referenced schema being read or checked, for a refusal to name
    try:
        with within_budget(checked, SCHEMA_CHECK_BUDGET, documents=True):
            # all read before any check: the budget counts their nodes when its base runs out
            documents = []
            for reference, doc in referenced:
                documents.append((reference, json.loads(doc.schema)))
            checked.extend(contents for _, contents in documents)
            reference = None
            cls = validator_class_for(schema)
            check_patterns(schema, referencing.jsonschema.DRAFT202012)
            check_schema(cls, schema)
            for name, contents in documents:
                reference = name
                check_patterns(contents, referencing.jsonschema.DRAFT7)
                check_schema(validator_class_for(contents, cls), contents)
            reference = None
            # made once checked: `referencing` reads `$schema`, and raised `AttributeError` on one not a string
            resources = [(name, referencing.Resource.from_contents(
                contents, default_specification=referencing.jsonschema.DRAFT7)) for name, contents in documents]
    except UnevaluablePatternError as exc:
        raise _unevaluable(exc, reference) from None
    except jsonschema.exceptions.SchemaError as exc:
        raise SerializationError(f"{_invalid(reference)}: {_shortened_middle(exc.message)}") from exc
    except WorkBudgetExceededError as exc:
        raise SerializationError(
            f"JSON Schema not checked: checking it took more than its work budget of {exc.steps} steps "
            f"({exc.budget.base} plus {exc.budget.per_node} per JSON node, the schema and the schemas it "
            f"references having {exc.nodes}); values are refused (validate=False turns validation off)") from None
    except RecursionError:
        raise _TooDeepHere(f"{_invalid(reference)}: nested too deeply to check") from None
    except ValueError as exc:  # a referenced schema that is not JSON
        raise SerializationError(f"{_invalid(reference)}: {exc}") from exc
    return validator_with(cls, schema, resources)


def _shortened_middle(text: str) -> str:
    """`text`, its middle left out when long: jsonschema's meta-schema errors quote the part of the
    schema that fails (`{...} is not valid under any of the given schemas`), which can be all of it."""
    return text if len(text) <= 2 * _QUOTED else f"{text[:_QUOTED]} ... {text[-_QUOTED:]}"


def _validate(validator: Any, value: Any, budget: WorkBudget = DEFAULT_WORK_BUDGET) -> None:
    """Refuses `value` unless it matches, and when it takes more steps than `budget` allows (a schema
    whose `$ref`s fan out): the whole answer or no value."""
    try:
        with within_budget(value, budget):
            error = jsonschema.exceptions.best_match(validator.iter_errors(value), key=_relevance)
    except WorkBudgetExceededError as exc:
        raise SerializationError(f"{exc}; the value is refused (work_budget= raises the budget, validate=False "
                                 "turns validation off)") from None
    except CircularValueError as exc:
        raise SerializationError(f"value is not JSON: {exc}") from None
    except referencing.exceptions.Unresolvable as exc:
        raise SerializationError(f"JSON Schema reference cannot be resolved: {_unresolvable(exc)}") from None
    except UnevaluablePatternError as exc:
        raise _unevaluable(exc) from None
    except RecursionError:
        raise SerializationError("value is nested too deeply to validate; the value is refused") from None
    except _MALFORMED_KEYWORD as exc:
        # A keyword holding what its draft does not allow, where no meta-schema check looked: a `$ref` into
        # a keyword no meta-schema knows (`#/x`, a draft 3 schema's `definitions`), or into a schema checked
        # in one draft and evaluated in the referrer's. Refused, never raised through: and its message is
        # not quoted, nor chained (`UnknownType`'s quotes the value). The same for a value that is not JSON
        # in a way `json_nodes` does not see (an integer of more digits than `repr` writes: `ValueError`).
        raise SerializationError(f"JSON Schema cannot be evaluated on the value: {type(exc).__name__} (a "
                                 "keyword it reached holds what its draft does not allow, or the value is not "
                                 "JSON); the value is refused") from None
    if error is not None:
        raise SerializationError(f"value does not match the JSON Schema: {_mismatch(error)}")


# What jsonschema's keywords raise on a malformed keyword (iterating `5`, `len(True)`, `5.items()`, an
# unknown type), which the meta-schema checks cannot all exclude (`_validator`).
_MALFORMED_KEYWORD: Final = (TypeError, AttributeError, LookupError, ValueError, ArithmeticError,
                             jsonschema.exceptions.UnknownType)


def _unresolvable(exc: referencing.exceptions.Unresolvable) -> str:
    """What cannot be resolved, by its kind and its reference shortened (`_reference_name`): `referencing`'s
    own message quotes the whole document a pointer was looked up in (`PointerToNowhere`), which a refusal
    of each value wrote again, as large as the schema."""
    cause = getattr(exc, "_wrapped", exc)  # jsonschema's `_WrappedReferencingError`
    anchor = getattr(cause, "anchor", None)  # `NoSuchAnchor`, `InvalidAnchor`: `ref` is the URI before it
    return f"{type(cause).__name__}: {_reference_name(str(cause.ref if anchor is None else f'#{anchor}'))}"


def _relevance(error: jsonschema.exceptions.ValidationError) -> Any:
    """jsonschema's `relevance` of an error (which one a refusal names), where a draft 3 `type` listing
    schemas counts as a type the value does not have: jsonschema looks each type up by hashing it, and its
    `TypeError` went through the deserializer."""
    try:
        return jsonschema.exceptions.relevance(error)
    except TypeError:
        return (-len(error.path), error.path, error.validator not in jsonschema.exceptions.WEAK_MATCHES,
                error.validator in jsonschema.exceptions.STRONG_MATCHES, True)


def _mismatch(error: jsonschema.exceptions.ValidationError) -> str:
    """Where the value fails and the schema's constraint there, never the value itself: jsonschema's own
    message quotes the instance (`'123-45-6789' does not match ...`), and a refused record's content
    (personal data, secrets) would go wherever the application logs the exception."""
    def shortened(text: str) -> str:
        return text if len(text) <= _QUOTED else text[:_QUOTED] + "..."

    constraint = "".join(itertools.islice(_json_text(error.validator_value), _QUOTED + 1))
    return f"at {shortened(error.json_path)}, {error.validator} {shortened(constraint)} is not met"


def _json_text(value: Any) -> Iterator[str]:
    """`json.dumps(value, default=str, ensure_ascii=False)`, a character at a time, made as it is read:
    `_mismatch` quotes the first `_QUOTED` characters of a constraint, which can be as large as the
    schema (an `enum` of 100,000 members), and dumping it whole cost every refused value as much.
    Strings are cut past `_QUOTED` characters, which leaves the characters read unchanged."""
    if isinstance(value, str):
        yield from json.dumps(value[:_QUOTED + 1], ensure_ascii=False)
    elif isinstance(value, Mapping):
        yield "{"
        for index, (key, item) in enumerate(value.items()):
            if index:
                yield from ", "
            yield from _json_text(key if isinstance(key, str) else json.dumps(key, default=str))
            yield from ": "
            yield from _json_text(item)
        yield "}"
    elif isinstance(value, (list, tuple)):
        yield "["
        for index, item in enumerate(value):
            if index:
                yield from ", "
            yield from _json_text(item)
        yield "]"
    else:
        yield from json.dumps(value, default=str, ensure_ascii=False)


_QUOTED: Final = 200  # characters of a path or a constraint quoted in an error


def _avro_mismatch(exc: Exception) -> str:
    """fastavro's reason without the value: its union and enum refusals quote the value (`'123-45-6789'
    (type <class 'str'>) do not match ...`), its other ones do not (`an integer is required on field ssn`)."""
    text = _first_line(exc)
    if not any(q in text for q in "'\"") and text:
        return text
    _, on_field, name = text.rpartition(" on field ")
    where = f" on field {shortened_name}" if on_field and (shortened_name := name[:_QUOTED]) else ""
    return f"{type(exc).__name__}{where} (the value is not quoted)"


def _first_line(exc: Exception) -> str:
    """An exception's text without the value it may quote (`Object of type X is not JSON serializable`)."""
    return str(exc).splitlines()[0][:_QUOTED] if str(exc) else ""


class JSONSerializer:
    """`references` name registered subject versions that `schema_str` reaches with `$ref`."""

    def __init__(self, client: RegistryClient, schema_str: str, *,
                 subject_name_strategy: SubjectNameStrategy = topic_subject_name_strategy,
                 auto_register_schemas: bool = True, use_latest_version: bool = False, normalize: bool = False,
                 validate: bool = True, references: Sequence[Reference] = (),
                 to_dict: Callable[[Any, SerializationContextLike], Any] | None = None,
                 work_budget: WorkBudget = DEFAULT_WORK_BUDGET) -> None:
        try:
            schema = json.loads(schema_str)
        except ValueError as exc:
            raise SerializationError(f"invalid JSON Schema: {exc}") from exc
        self._validators = _PerContext(client, references, lambda referenced: _validator(schema, referenced))
        if validate and not references:
            self._validators.for_subject("")  # a bad schema fails here, not at the first value
        self._validating = validate
        self._budget = work_budget
        self._record_name = schema.get("title") if isinstance(schema, Mapping) else None
        self._strategy = subject_name_strategy
        self._ids = _SchemaIds(client, schema_str, "JSON", auto_register=auto_register_schemas,
                               use_latest_version=use_latest_version, normalize=normalize, references=references)
        self._to_dict = to_dict

    def __call__(self, value: Any, ctx: SerializationContextLike) -> bytes | None:
        if value is None:
            return None
        subject = self._strategy(ctx, self._record_name)
        schema_id = self._ids.id_for(subject)
        document = self._to_dict(value, ctx) if self._to_dict else value
        if self._validating:
            _validate(self._validators.for_subject(subject), document, self._budget)
        try:
            text = json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise SerializationError(f"value is not JSON: {type(exc).__name__}: {_first_line(exc)}") from None
        return frame(schema_id, text.encode())


@attrs.frozen
class _Refused:
    """A fetched schema the deserializer refused: the message it refuses its values with."""

    message: str


def _schema_document(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise SerializationError(f"invalid JSON Schema: {exc}") from None
    except RecursionError:
        raise _TooDeepHere("invalid JSON Schema: nested too deeply to read") from None


class JSONDeserializer:
    """Validates against `schema_str` when given, else against the writer's schema fetched by id,
    within `work_budget` steps per value."""

    def __init__(self, client: RegistryClient | None, schema_str: str | None = None, *, validate: bool = True,
                 from_dict: Callable[[Any, SerializationContextLike | None], Any] | None = None,
                 work_budget: WorkBudget = DEFAULT_WORK_BUDGET) -> None:
        if client is None and schema_str is None and validate:
            raise SerializationError("JSONDeserializer needs a registry client or a schema to validate against")
        self._client = client
        self._fixed = _validator(_schema_document(schema_str)) if schema_str and validate else None
        self._validate = validate
        self._budget = work_budget
        self._validators: dict[int, Any] = {}  # a validator, or the refusal of the schema (`_Refused`)
        self._from_dict = from_dict

    def _validator_for(self, schema_id: int) -> Any:
        if self._fixed is not None or not self._validate or self._client is None:
            return self._fixed
        found = self._validators.get(schema_id)
        if isinstance(found, _Refused):
            raise SerializationError(found.message)
        if found is None:
            fetched = self._client.schema_by_id(schema_id)
            if fetched.schema_type != "JSON":
                raise SerializationError(f"schema {schema_id} is {fetched.schema_type}, not JSON")
            referrer = id_referrer(self._client, schema_id, fetched)
            referenced = referenced_schemas(self._client, fetched.references, referrer)
            # A schema id names one schema for good, so a schema refused (invalid, or past the budget) is
            # refused again without checking it at each value.
            try:
                found = _validator(_schema_document(fetched.schema), referenced)
            except _TooDeepHere:
                raise  # checked again at the next value, which may come from a shallower stack
            except SerializationError as exc:
                self._validators[schema_id] = _Refused(str(exc))
                raise
            self._validators[schema_id] = found
        return found

    def __call__(self, data: bytes | None, ctx: SerializationContextLike | None = None) -> Any:
        if data is None:
            return None
        schema_id, payload = unframe(data)
        try:
            value = json.loads(payload)
        except (ValueError, UnicodeDecodeError) as exc:
            raise SerializationError(f"payload is not JSON: {exc}") from exc
        except RecursionError:
            raise SerializationError("payload is not JSON this process can read: nested too deeply") from None
        validator = self._validator_for(schema_id)
        if validator is not None:
            _validate(validator, value, self._budget)
        return self._from_dict(value, ctx) if self._from_dict else value
