"""The registry's vocabulary: subjects, versions, stored schemas, modes, and Confluent's error codes.

Everything here is immutable and free of I/O. `RegistryError` carries Confluent's numeric code and
its message wording; `registry.api` maps it to HTTP in one place.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NewType

Subject = NewType("Subject", str)
SchemaId = NewType("SchemaId", int)

# Keys of the global rows in the config and mode tables (Confluent reserves both names: 42208).
GLOBAL_KEY: Final = "__GLOBAL"
RESERVED_SUBJECTS: Final = frozenset({"__GLOBAL", "__EMPTY"})
DEFAULT_CONTEXT: Final = "."
CONTEXT_PREFIX: Final = ":."
MAX_ID: Final = 2**31 - 1


class Mode(enum.StrEnum):
    READWRITE = "READWRITE"
    READONLY = "READONLY"
    READONLY_OVERRIDE = "READONLY_OVERRIDE"
    IMPORT = "IMPORT"
    FORWARD = "FORWARD"

    @classmethod
    def parse(cls, text: object) -> Mode:
        if isinstance(text, str) and text.strip().upper() in cls.__members__:
            return cls[text.strip().upper()]
        raise RegistryError(42204, "Invalid mode. Valid values are READWRITE, READONLY, IMPORT and FORWARD.")


COMPATIBILITY_LEVELS: Final = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)
DEFAULT_COMPATIBILITY: Final = "BACKWARD"


def parse_compatibility_level(text: object) -> str:
    """Confluent's `CompatibilityLevel.forName`: case-insensitive; anything else is 42203."""
    if isinstance(text, str) and text.strip().upper() in COMPATIBILITY_LEVELS:
        return text.strip().upper()
    raise RegistryError(
        42203,
        "Invalid compatibility level. Valid values are none, backward, forward, full, backward_transitive, "
        "forward_transitive, and full_transitive",
    )


class RegistryError(Exception):
    """A refusal with Confluent's error code; the HTTP status is the code's first three digits."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def status(self) -> int:
        return self.code if self.code < 1000 else self.code // 100


class IncompatibleSchemaError(RegistryError):
    """409: the schema may not follow the subject's versions under its compatibility level.

    `details` are Confluent's verbose messages: the incompatibilities, then `{oldSchemaVersion: N}`,
    `{oldSchema: '...'}` and `{validateFields: 'false', compatibility: '...'}`. All but the last are
    made from the subject's stored schemas, so a caller who may WRITE the subject but not READ it
    gets `without_details()` (see `registry.api.register`)."""

    def __init__(self, subject: str, details: Sequence[str]) -> None:
        self.subject = subject
        self.details = tuple(details)
        super().__init__(409, _incompatible_message(subject, self.details))

    def without_details(self) -> RegistryError:
        """The same refusal with nothing taken from the subject's schemas, versions or level."""
        return RegistryError(409, _incompatible_message(self.subject, (DETAILS_NEED_READ,)))


DETAILS_NEED_READ: Final = "{details: 'omitted: they quote the schemas of the subject, and need READ on it'}"


def _incompatible_message(subject: str, details: Sequence[str]) -> str:
    # Confluent's IncompatibleSchemaException wording (error_code 409 up to 8.1.0, as Karapace).
    return (f'Schema being registered is incompatible with an earlier schema for subject "{subject}", '
            f"details: [{', '.join(details)}]")


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(40401, f"Subject '{subject}' not found.")


def version_not_found(version: int | str) -> RegistryError:
    return RegistryError(40402, f"Version {version} not found.")


def schema_not_found(schema_id: int | None = None) -> RegistryError:
    return RegistryError(40403, "Schema not found" if schema_id is None else f"Schema {schema_id} not found")


def invalid_schema(message: str) -> RegistryError:
    return RegistryError(42201, message)


def operation_not_permitted(message: str) -> RegistryError:
    return RegistryError(42205, message)


@dataclass(frozen=True, slots=True, order=True)
class Reference:
    """`{"name", "subject", "version"}`: an imported name resolved to one subject version."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True, slots=True)
class StoredSchema:
    """One global schema id: immutable once written, so it can be cached forever by id."""

    id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...] = ()
    metadata: Mapping[str, Any] | None = None
    rule_set: Mapping[str, Any] | None = None

    def body(self) -> dict[str, Any]:
        """The fields every schema response shares. AVRO is implied by omission, as Confluent 7.x does."""
        out: dict[str, Any] = {}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = [r.to_json() for r in self.references]
        if self.metadata is not None:
            out["metadata"] = self.metadata
        if self.rule_set is not None:
            out["ruleSet"] = self.rule_set
        out["schema"] = self.schema
        return out


@dataclass(frozen=True, slots=True)
class SubjectVersion:
    subject: str
    version: int
    schema: StoredSchema
    deleted: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"subject": self.subject, "version": self.version, "id": self.schema.id}
        out.update(self.schema.body())
        if self.deleted:
            out["deleted"] = True
        return out


@dataclass(frozen=True, slots=True)
class RegisterRequest:
    """`RegisterSchemaRequest` after syntactic validation (types checked, defaults applied)."""

    schema: str
    schema_type: str = "AVRO"
    references: tuple[Reference, ...] = ()
    metadata: Mapping[str, Any] | None = None
    rule_set: Mapping[str, Any] | None = None
    id: int | None = None
    version: int | None = None


def content_fingerprint(schema_type: str, canonical: str, references: Sequence[Reference]) -> str:
    """What makes two registrations 'the same schema' for lookups."""
    doc = [schema_type, canonical, [r.to_json() for r in references]]
    return hashlib.sha256(json.dumps(doc, separators=(",", ":")).encode()).hexdigest()


def full_fingerprint(
    schema_type: str,
    canonical: str,
    references: Sequence[Reference],
    metadata: Mapping[str, Any] | None,
    rule_set: Mapping[str, Any] | None,
    resolved: Sequence[Reference] | None = None,
) -> str:
    """What makes two registrations share one global id: content plus metadata and rule set, and the
    subjects the references resolve to (`resolved`) where they differ from `references` as written:
    ids are global, so `x` written in two contexts (`:.a:x`, `:.b:x`) must not share one. Where
    nothing differs the value is the one stored before references were resolved by context."""
    doc: list[object] = [content_fingerprint(schema_type, canonical, references), metadata, rule_set]
    if resolved is not None and tuple(resolved) != tuple(references):
        doc.append([r.to_json() for r in resolved])
    return hashlib.sha256(json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()).hexdigest()


MAX_SUBJECT_LENGTH = 1024  # registry.store's subject columns; Confluent sets no limit


def validate_subject(subject: str) -> str:
    """`QualifiedSubject.isValidSubject`: no control characters, not a reserved name; and at most
    `MAX_SUBJECT_LENGTH` characters (PostgreSQL would refuse a longer one with a database error)."""
    if subject in RESERVED_SUBJECTS or any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in subject):
        raise RegistryError(42208, f"The specified subject '{subject}' is not a valid.")
    if len(subject) > MAX_SUBJECT_LENGTH:
        raise RegistryError(42208, f"The specified subject is not valid: longer than {MAX_SUBJECT_LENGTH} characters")
    return subject


def context_of(subject: str) -> str:
    """The context a stored subject lives in: `:.ctx:name` (and `:.ctx:`) in `.ctx`, anything else in
    the default context `.`: the config and mode rows it follows, the context `/contexts` lists it under
    and `DELETE /contexts/...` counts it in.

    This is Confluent's parse (`_split_qualified`, used for references) except for two subject names a
    caller may register: `:.ctx` without a closing `:` and `:*:x`. Confluent reads them as the context
    `.ctx` (the empty name) and the wildcard `*`; kgov has always stored them as names of the default
    context, with that context's level and mode. Reading them Confluent's way would move such stored
    subjects into another context's config and mode, and list `*` as a context, so stored subjects keep
    this reading; references keep Confluent's (a reference can never reach such a subject, as in
    Confluent, where they do not exist)."""
    context, name = _split_qualified(subject)
    if context == "*" or (not name and not subject.endswith(":")):
        return DEFAULT_CONTEXT
    return context


def _split_qualified(subject: str) -> tuple[str, str]:
    """(context, name) as Confluent's `QualifiedSubject` parses a subject without tenant: `:.ctx:name`
    -> (`.ctx`, `name`), the name running to the end (it may hold `:`); `:.ctx` -> (`.ctx`, ``);
    `:*:name` -> (`*`, `name`); anything else, `:.:name` included, is in the default context."""
    if subject.startswith(CONTEXT_PREFIX):
        end = subject.find(":", len(CONTEXT_PREFIX))
        if end < 0:
            return subject[1:], ""
        return subject[1:end], subject[end + 1:]
    if subject.startswith(":*:"):
        return "*", subject[3:]
    return DEFAULT_CONTEXT, subject


def reference_subject(referrer: str, subject: str) -> str:
    """The subject a reference to `subject` in a version of `referrer` is looked up under: Confluent's
    `QualifiedSubject.qualifySubjectWithParent(tenant, referrer, subject).toQualifiedSubject()`.

    A reference naming a context other than the default one (`:.other:x`) stays as written. Any other
    (`x`, and also `:.:x`) takes the referrer's context, written as it stands: `x` from `:.ctx:orders`
    is `:.ctx:x`, and `:.:x` is `:.ctx::.:x` (so a schema in a context cannot reach the default
    context's subjects through a reference, in Confluent as here); from the default context `x` is
    `x` and `:.:x` is `x`."""
    context, name = _split_qualified(subject)
    if context != DEFAULT_CONTEXT:
        return f":{context}:{name}"
    parent, _ = _split_qualified(referrer)
    if parent != DEFAULT_CONTEXT:
        return f":{parent}:{subject}"
    return name


def reference_context(referrer: str) -> str:
    """What `reference_subject(referrer, ...)` depends on: the referrer's context (`.` for the default)."""
    return _split_qualified(referrer)[0]


def written_forms(target: str) -> tuple[str, ...]:
    """Every reference subject, as written, that `reference_subject` may map onto `target` from some
    referrer (which ones do depends on the referrer's context: filter with `reference_subject`)."""
    context, name = _split_qualified(target)
    forms = [target, CONTEXT_PREFIX + ":" + target]  # `x` (or `:.ctx:x`) itself; `:.:x` from the default context
    if context != DEFAULT_CONTEXT:
        forms.append(name)  # `x` from a referrer in `.ctx`
    if not name:
        forms.append(f":{context}")  # `:.ctx` (or `:.`), which Confluent reads as `:.ctx:` (or ``)
    return tuple(dict.fromkeys(forms))


def contexts_of(subjects: Iterable[str]) -> list[str]:
    """The contexts `subjects` live in, sorted; the default context `.` always among them."""
    return sorted({DEFAULT_CONTEXT} | {context_of(s) for s in subjects})


def parse_version(text: str) -> int:
    """`VersionId`: `latest` (any case) or -1 mean the latest (returned as -1); else 1 .. 2^31-1."""
    value = text.strip()
    if value.lower() == "latest":
        return -1
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number == -1 or 1 <= number <= MAX_ID:
        return number
    raise RegistryError(
        42202,
        f"The specified version '{text}' is not a valid version id. Allowed values are between "
        '[1, 2^31-1] and the string "latest"',
    )
