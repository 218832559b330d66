"""The registry's operations: Confluent Schema Registry semantics over `registry.store`.

Stateless over the database, so any number of API nodes can serve one PostgreSQL. Every write runs
in one transaction that first bumps the `registry` change counter: that row lock serialises
registry writers across processes (SQLite's BEGIN IMMEDIATE does the same), so the next global id
(`max + 1`), version numbers and the "same schema -> same id" rule hold under concurrent
registration. Id lookups are served from memory after first use: a schema row never changes once
written. The subjects that use an id (needed to authorize id lookups) change, so that map is
cached per change-counter value, polled at most once a second.

The references a caller sends are authorized here, because only here is it known which subjects
they reach: every operation that resolves them takes `may_read`, which must pass for each subject
the caller's references name before any of them is looked up, and for each subject reached through
their stored references before that one is looked up (`_ReferenceWalk`). A reference names the
subject `registry.model.reference_subject` gives in the context of the subject holding it (Confluent's
rule): everything here that looks a reference up, checks it or compares it goes through that function.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy.engine import Connection, Engine

from authz.clock import elapsed_clock
from authz.database import bump_version, read_version, transaction
from registry import store
from registry.check_slots import CheckSlots
from registry.compat import (
    DEFAULT_MAX_WORK,
    CompatibilityLevel,
    TooComplexError,
    WorkBudget,
    check_compatibility,
)
from registry.contracts import (
    check_metadata,
    check_rule_set,
    compatibility_group_value,
    confluent_version,
    merge_with_config,
    validate_rule_set,
    with_confluent_version,
    without_confluent_version,
)
from registry.model import (
    DEFAULT_COMPATIBILITY,
    DEFAULT_CONTEXT,
    GLOBAL_KEY,
    MAX_ID,
    IncompatibleSchemaError,
    Mode,
    Reference,
    RegisterRequest,
    RegistryError,
    StoredSchema,
    SubjectVersion,
    content_fingerprint,
    context_of,
    full_fingerprint,
    invalid_schema,
    operation_not_permitted,
    parse_compatibility_level,
    reference_context,
    reference_subject,
    schema_not_found,
    subject_not_found,
    validate_subject,
    version_not_found,
    written_forms,
)
from registry.schemas import (
    InvalidDefaultError,
    InvalidSchemaError,
    ParsedSchema,
    SchemaReference,
    SchemaType,
    parse_schema,
)
from registry.schemas.avro import AvroModel, same_schema

SUPPORTED_TYPES = ("AVRO", "JSON")
# Keys of Confluent's Config object that the registry stores and echoes (besides the level).
CONFIG_KEYS = (
    "normalize",
    "alias",
    "validateFields",
    "validateNewSchemas",
    "validateRules",
    "compatibilityPolicy",
    "compatibilityGroup",
    "defaultMetadata",
    "overrideMetadata",
    "defaultRuleSet",
    "overrideRuleSet",
)
_MAX_REFERENCE_DEPTH = 32
_MAX_CACHED_LOOKUPS = 10_000

# Refuses (raises) when the caller may not read the subject; returns when it may.
ReadCheck = Callable[[str], None]


def anyone_may_read(subject: str) -> None:
    """The `may_read` of trusted callers (tools, tests) and of anonymous reads when they are switched on."""


@dataclass(slots=True)
class _ReferenceWalk:
    """The read checks of one request's references, sent for a schema of `referrer` (the subject of
    the request, whose context unqualified references take). A subject is checked once per request
    (so one decision is audited once), in the order the walk reaches it; `checked` lets a cached
    lookup answer repeat the same checks without the walk."""

    referrer: str
    may_read: ReadCheck
    checked: dict[str, None] = field(default_factory=dict)  # an ordered set

    def check(self, subjects: Sequence[str]) -> None:
        for subject in subjects:
            if subject not in self.checked:
                self.may_read(subject)
                self.checked[subject] = None


@dataclass(frozen=True, slots=True)
class CompatibilityVerdict:
    is_compatible: bool
    messages: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Prepared:
    importing: bool
    config: Mapping[str, Any]
    parsed: ParsedSchema
    refs: tuple[Reference, ...]
    fingerprint: str
    rows: list[SubjectVersion]
    existing_id: int | None
    registered: SubjectVersion | None
    request: RegisterRequest  # with references pinned and metadata and rule set merged


@dataclass(frozen=True, slots=True)
class Change:
    """What a write did, for the audit trail (names and numbers only)."""

    method: str
    target: str
    details: Mapping[str, Any]


class SchemaRegistry:
    def __init__(self, engine: Engine, *, poll_interval_s: float = 1.0,
                 monotonic: Callable[[], float] = elapsed_clock, max_diff_work: int = DEFAULT_MAX_WORK,
                 checks: CheckSlots | None = None) -> None:
        self.engine = engine
        self._max_diff_work = max_diff_work
        self._checks = checks  # None: no bound on concurrent checks (callers outside the HTTP layer)
        self._by_id: dict[int, StoredSchema] = {}
        # By (id, context of the referring subject): a stored reference's subject depends on that context.
        self._parsed: dict[tuple[int, str], ParsedSchema] = {}
        # Derived from rows that change: valid for one value of the change counter (see `_poll_changes`).
        self._usages: dict[int, tuple[str, ...]] = {}
        # Lookup answers, with the subjects their references reached (each caller must pass their checks).
        self._lookups: dict[tuple[Any, ...], tuple[SubjectVersion, tuple[str, ...]]] = {}
        self._usages_version = -1
        self._usages_checked = float("-inf")
        self._poll_interval_s = poll_interval_s
        self._monotonic = monotonic
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ ids

    def schema_by_id(self, schema_id: int) -> StoredSchema:
        cached = self._by_id.get(schema_id)
        if cached is not None:
            return cached
        with self.engine.connect() as conn:
            found = store.schema_by_id(conn, schema_id)
        if found is None:
            raise schema_not_found(schema_id)
        self._by_id[schema_id] = found
        return found

    def cached_schema(self, schema_id: int) -> StoredSchema | None:
        """The schema if this node has already served it; never touches the database."""
        return self._by_id.get(schema_id)

    def subjects_using(self, schema_id: int) -> tuple[str, ...]:
        """Subjects with a stored version (soft-deleted included) of `schema_id`, for authorization."""
        self._poll_changes()
        cached = self._usages.get(schema_id)
        if cached is not None:
            return cached
        with self.engine.connect() as conn:
            usages = tuple(dict.fromkeys(subject for subject, _, _ in store.usages_of_id(conn, schema_id)))
        self._usages[schema_id] = usages
        return usages

    def cached_usages(self, schema_id: int) -> tuple[str, ...] | None:
        """`subjects_using` from memory only; None when not cached or due for the change-counter poll."""
        if self._monotonic() - self._usages_checked >= self._poll_interval_s:
            return None
        return self._usages.get(schema_id)

    def _poll_changes(self) -> None:
        """At most once per interval: drop the derived caches if any node changed the registry."""
        now = self._monotonic()
        if now - self._usages_checked < self._poll_interval_s:
            return
        with self.engine.connect() as conn:
            current = read_version(conn, store.COMPONENT)
        with self._lock:
            if current != self._usages_version:
                self._usages = {}
                self._lookups = {}
                self._usages_version = current
            self._usages_checked = now

    def _forget_usages(self) -> None:
        """After a local write: the derived caches go at once (other nodes see it at their next poll)."""
        with self._lock:
            self._usages = {}
            self._lookups = {}
            self._usages_checked = float("-inf")

    def id_usages(self, schema_id: int, *, deleted: bool) -> list[tuple[str, int]]:
        with self.engine.connect() as conn:
            usages = store.usages_of_id(conn, schema_id)
        found = [(s, v) for s, v, is_deleted in usages if deleted or not is_deleted]
        if not usages:
            raise schema_not_found(schema_id)
        return found

    def max_id(self) -> int:
        with self.engine.connect() as conn:
            return store.max_schema_id(conn)

    # ------------------------------------------------------------------ listing

    def list_subjects(self, *, prefix: str = "", deleted: bool = False, deleted_only: bool = False) -> list[str]:
        with self.engine.connect() as conn:
            states = store.subject_states(conn)
        out = []
        for state in states:
            if prefix and not state.subject.startswith(prefix):
                continue
            has_deleted = state.total > state.live
            if deleted_only:
                if has_deleted:
                    out.append(state.subject)
            elif state.live or (deleted and has_deleted):
                out.append(state.subject)
        return out

    def list_schemas(self, *, prefix: str = "", deleted: bool = False, latest_only: bool = False
                     ) -> list[SubjectVersion]:
        with self.engine.connect() as conn:
            rows = store.all_versions(conn, prefix)
        rows = [r for r in rows if deleted or not r.deleted]
        if latest_only:
            latest: dict[str, SubjectVersion] = {}
            for r in rows:
                latest[r.subject] = r
            rows = list(latest.values())
        return rows

    def delete_context(self, context: str) -> None:
        with self.engine.connect() as conn:
            states = store.subject_states(conn)
        subjects = [s for s in states if context_of(s.subject) == context]
        if any(s.live for s in subjects):
            raise RegistryError(42211, f"The specified context '{context}' is not empty.")
        if not subjects and context != DEFAULT_CONTEXT:
            raise RegistryError(40401, f"Subject '{context}' not found.")

    # ------------------------------------------------------------------ versions

    def _versions(self, conn: Connection, subject: str) -> list[SubjectVersion]:
        return store.subject_versions(conn, subject)

    def versions(self, subject: str, *, deleted: bool = False, deleted_only: bool = False) -> list[int]:
        with self.engine.connect() as conn:
            rows = self._versions(conn, subject)
        if deleted_only:
            found = [r.version for r in rows if r.deleted]
        else:
            found = [r.version for r in rows if deleted or not r.deleted]
        if not found and not (deleted_only and rows):
            raise subject_not_found(subject)
        return found

    def get_version(self, subject: str, version: int, *, deleted: bool = False) -> SubjectVersion:
        with self.engine.connect() as conn:
            rows = self._versions(conn, subject)
        return _pick_version(subject, rows, version, deleted=deleted)

    def latest_with_metadata(self, subject: str, properties: Mapping[str, str], *, deleted: bool = False
                             ) -> SubjectVersion:
        """The newest version whose `metadata.properties` hold every given key/value (Confluent's
        `GET /subjects/{s}/metadata`, used by serializers with `use.latest.with.metadata`)."""
        with self.engine.connect() as conn:
            rows = [r for r in self._versions(conn, subject) if deleted or not r.deleted]
        if not rows:
            raise subject_not_found(subject)
        for row in reversed(rows):
            found = (row.schema.metadata or {}).get("properties") or {}
            if all(found.get(k) == v for k, v in properties.items()):
                return row
        raise schema_not_found()

    def referenced_by(self, subject: str, version: int, *, deleted: bool = False) -> list[int]:
        with self.engine.connect() as conn:
            target = _pick_version(subject, self._versions(conn, subject), version, deleted=True)
            return _referrers(conn, subject, target.version, include_deleted=deleted)

    # ------------------------------------------------------------------ parsing

    def _parsed_of(self, conn: Connection, schema: StoredSchema, depth: int = 0, *, subject: str) -> ParsedSchema:
        """`schema` as a version of `subject`, whose context its references are resolved in."""
        key = (schema.id, reference_context(subject))
        cached = self._parsed.get(key)
        if cached is not None:
            return cached
        resolved = self._resolve(conn, schema.references, depth + 1, referrer=subject)
        try:
            parsed = parse_schema(
                SchemaType(schema.schema_type),
                schema.schema,
                references=_schema_references(subject, schema.references),
                resolved=resolved,
                validate_defaults=False,  # stored: validated when new, or imported as it was
            )
        except InvalidSchemaError as exc:  # a stored schema that no longer parses: a bug, not user input
            raise RegistryError(50001, f"Stored schema {schema.id} cannot be parsed: {exc}") from exc
        self._parsed[key] = parsed
        return parsed

    def _resolve(self, conn: Connection, refs: Sequence[Reference], depth: int,
                 walk: _ReferenceWalk | None = None, *, referrer: str) -> dict[str, ParsedSchema]:
        """The referenced schemas by reference name; `refs` are those of a version of `referrer` (or of
        a schema sent for it), looked up under `reference_subject(referrer, ...)`. With `walk` (the
        caller's own references): every subject they resolve to must pass its read check before any is
        looked up, and so must the subjects the found versions reference in turn, however deep, before
        those are looked up."""
        if depth > _MAX_REFERENCE_DEPTH:
            raise invalid_schema(f"Schema references are nested deeper than {_MAX_REFERENCE_DEPTH} levels")
        targets = _resolved(referrer, refs)
        if walk is not None:
            walk.check([r.subject for r in targets])
        seen: set[tuple[str, int]] = set()
        resolved: dict[str, ParsedSchema] = {}
        for ref in targets:
            found = _referenced_row(self._versions(conn, ref.subject), ref.version)
            if found is None:
                raise invalid_schema(
                    f"Invalid schema: reference '{ref.name}' to subject '{ref.subject}' version {ref.version} "
                    "does not exist"
                )
            if walk is not None:
                # Walked whether or not the parsed schema is cached: that cache is shared by all callers.
                self._walk_stored(conn, found.schema.references, depth + 1, walk, seen, referrer=found.subject)
            resolved[ref.name] = self._parsed_of(conn, found.schema, depth, subject=found.subject)
        return resolved

    def _walk_stored(self, conn: Connection, refs: Sequence[Reference], depth: int, walk: _ReferenceWalk,
                     seen: set[tuple[str, int]], *, referrer: str) -> None:
        """Read checks for the references of the stored versions a caller's references reach (`refs`:
        those of a version of `referrer`, resolved in its context). Their types are in scope for the
        caller's schema (Avro's named types, JSON Schema's documents), so parse errors and
        compatibility verdicts would otherwise tell their content to a caller who may not read them.
        Each level is checked before any of its subjects is looked up."""
        fresh = [r for r in _resolved(referrer, refs) if (r.subject, r.version) not in seen]
        if not fresh:
            return
        if depth > _MAX_REFERENCE_DEPTH:
            raise invalid_schema(f"Schema references are nested deeper than {_MAX_REFERENCE_DEPTH} levels")
        walk.check([r.subject for r in fresh])
        for ref in fresh:
            seen.add((ref.subject, ref.version))
            found = _referenced_row(self._versions(conn, ref.subject), ref.version)
            if found is not None:  # a missing one is reported when the stored schema is parsed
                self._walk_stored(conn, found.schema.references, depth + 1, walk, seen, referrer=found.subject)

    def _pinned(self, conn: Connection, referrer: str, request: RegisterRequest) -> RegisterRequest:
        """`request` with each reference to "latest" (version -1) naming the version that is the latest
        now, as Confluent does before it stores or looks up a schema: a stored schema then keeps its
        meaning when the referenced subject moves on. (Called after the request's READ checks.)"""
        if all(r.version != -1 for r in request.references):
            return request
        pinned = []
        for ref in request.references:
            latest = _referenced_row(self._versions(conn, reference_subject(referrer, ref.subject)), ref.version)
            pinned.append(ref if ref.version != -1 or latest is None else replace(ref, version=latest.version))
        return replace(request, references=tuple(pinned))

    def _parse_request(self, conn: Connection, request: RegisterRequest, *, normalize: bool,
                       walk: _ReferenceWalk, validate_defaults: bool = True,
                       refused_defaults: list[str] | None = None) -> tuple[RegisterRequest, ParsedSchema]:
        """The request with its references to "latest" pinned (`_pinned`, for `walk.referrer`), and its
        parse (Avro defaults checked only with `validate_defaults`, as Confluent checks new schemas).
        With `refused_defaults`, a default that would be refused is appended there (as the 42201
        message) and the schema parsed without checking defaults: one parse when they are valid."""
        request = self._pinned(conn, walk.referrer, request)
        if request.schema_type not in SUPPORTED_TYPES:
            if request.schema_type == "PROTOBUF":
                raise invalid_schema("Invalid schema: PROTOBUF schemas are not supported by this registry")
            raise RegistryError(42201, f"Invalid schema type {request.schema_type}")
        if not request.schema.strip():
            raise invalid_schema("Empty schema")
        resolved = self._resolve(conn, request.references, 1, walk, referrer=walk.referrer)
        references = _schema_references(walk.referrer, request.references)
        try:
            try:
                return request, parse_schema(SchemaType(request.schema_type), request.schema, references=references,
                                             resolved=resolved, normalize=normalize,
                                             validate_defaults=validate_defaults)
            except InvalidDefaultError as exc:
                if refused_defaults is None:
                    raise
                refused_defaults.append(f"Invalid schema {request.schema_type}: {exc}")
                return request, parse_schema(SchemaType(request.schema_type), request.schema, references=references,
                                             resolved=resolved, normalize=normalize, validate_defaults=False)
        except InvalidSchemaError as exc:
            raise invalid_schema(f"Invalid schema {request.schema_type}: {exc}") from exc

    # ------------------------------------------------------------------ config and mode

    def _global_config(self, conn: Connection) -> dict[str, Any]:
        return {"compatibilityLevel": DEFAULT_COMPATIBILITY, **(store.get_config(conn, GLOBAL_KEY) or {})}

    def _subject_config(self, conn: Connection, subject: str) -> dict[str, Any] | None:
        found = store.get_configs(conn, [subject, GLOBAL_KEY])
        if subject not in found:
            return None
        level = found.get(GLOBAL_KEY, {}).get("compatibilityLevel", DEFAULT_COMPATIBILITY)
        return {"compatibilityLevel": level, **found[subject]}

    def _config(self, conn: Connection, subject: str | None) -> dict[str, Any]:
        """The effective config: the subject's, else its context's, else the global one, else the default.
        A level missing from the subject's or context's config comes from the global one."""
        keys = [*(_config_keys(subject) if subject is not None else ()), GLOBAL_KEY]
        found = store.get_configs(conn, keys)  # one query: this runs inside every registration
        effective = {"compatibilityLevel": DEFAULT_COMPATIBILITY, **found.get(GLOBAL_KEY, {})}
        for key in keys[:-1]:
            if key in found:
                return {"compatibilityLevel": effective["compatibilityLevel"], **found[key]}
        return effective

    def _mode(self, conn: Connection, subject: str | None) -> Mode:
        keys = [*(_config_keys(subject) if subject is not None else ()), GLOBAL_KEY]
        found = store.get_modes(conn, keys)
        for key in keys:
            if key in found:
                return Mode(found[key])
        return Mode.READWRITE

    def get_config(self, subject: str | None, *, default_to_global: bool = False) -> dict[str, Any]:
        with self.engine.connect() as conn:
            if subject is None:
                return self._config(conn, None)
            found = self._subject_config(conn, subject)
            if found is not None:
                return found
            if default_to_global:
                return self._config(conn, subject)  # its context's level, else the global one
        raise RegistryError(40408, f"Subject '{subject}' does not have subject-level compatibility configured")

    def set_config(self, subject: str | None, body: Mapping[str, Any]) -> tuple[dict[str, Any], Change]:
        level = body.get("compatibility", body.get("compatibilityLevel"))
        echo: dict[str, Any] = {}
        stored: dict[str, Any] = {}
        if level is not None:
            echo["compatibility"] = stored["compatibilityLevel"] = parse_compatibility_level(level)
        for key in CONFIG_KEYS:
            if key in body and body[key] is not None:
                echo[key] = stored[key] = body[key]
        if "normalize" in stored and not isinstance(stored["normalize"], bool):
            raise RegistryError(422, "normalize must be a boolean")
        for name in ("defaultMetadata", "overrideMetadata"):
            check_metadata(stored.get(name), name)
        if "compatibilityGroup" in stored and not isinstance(stored["compatibilityGroup"], str):
            raise RegistryError(422, "compatibilityGroup must be a string")
        for name in ("defaultRuleSet", "overrideRuleSet"):
            check_rule_set(stored.get(name), name)
        # Confluent's ConfigResource order: the level (42203), then the rule sets (42210), then the subject.
        for name in ("defaultRuleSet", "overrideRuleSet"):
            validate_rule_set(stored.get(name))
        if subject is not None:
            validate_subject(subject)
        key = GLOBAL_KEY if subject is None else subject
        with transaction(self.engine) as conn:
            bump_version(conn, store.COMPONENT)
            previous = store.get_config(conn, key) or {}
            merged = {**previous, **stored}
            store.put_config(conn, key, merged)
        self._forget_usages()
        return echo, Change("config.update", key, {"config": echo})

    def delete_config(self, subject: str | None) -> tuple[dict[str, Any], Change]:
        if subject is not None:
            # As set_config: `__GLOBAL` names the global row, which the subject route (authorized on the
            # subject) must not reach; only `DELETE /config` (CLUSTER ALTER) may reset it.
            validate_subject(subject)
        key = GLOBAL_KEY if subject is None else subject
        with transaction(self.engine) as conn:
            bump_version(conn, store.COMPONENT)
            previous = store.get_config(conn, key)
            if subject is not None and previous is None:
                if not store.has_any_version(conn, subject):
                    raise subject_not_found(subject)
                raise RegistryError(
                    40408, f"Subject '{subject}' does not have subject-level compatibility configured"
                )
            store.delete_config(conn, key)
        self._forget_usages()
        return previous or {"compatibilityLevel": DEFAULT_COMPATIBILITY}, Change(
            "config.delete", key, {}
        )

    def get_mode(self, subject: str | None, *, default_to_global: bool = False) -> Mode:
        with self.engine.connect() as conn:
            if subject is None:
                return self._mode(conn, None)
            found = store.get_mode(conn, subject)
            if found is not None:
                return Mode(found)
            if default_to_global:
                return self._mode(conn, subject)
        raise RegistryError(40409, f"Subject '{subject}' does not have subject-level mode configured")

    def set_mode(self, subject: str | None, mode_text: object, *, force: bool = False) -> tuple[Mode, Change]:
        if subject is not None:
            validate_subject(subject)
        mode = Mode.parse(mode_text)
        # The subject "" (`/mode/`) is a subject like any other, not the global level (nor is it in the audit).
        key = GLOBAL_KEY if subject is None else subject
        if subject is not None and mode is Mode.FORWARD:
            raise RegistryError(42204, "Invalid mode. FORWARD is only supported on the global level.")
        with transaction(self.engine) as conn:
            bump_version(conn, store.COMPONENT)
            # Redpanda and Confluent: IMPORT only on an empty registry (soft deletes are not enough).
            if mode is Mode.IMPORT and not force and store.has_any_version(conn, subject):
                raise operation_not_permitted("Cannot import since found existing subjects")
            store.put_mode(conn, key, mode.value)
        self._forget_usages()
        return mode, Change("mode.update", key, {"mode": mode.value, "force": force})

    def delete_mode(self, subject: str | None) -> tuple[Mode, Change]:
        if subject is not None:
            validate_subject(subject)  # as delete_config
        key = GLOBAL_KEY if subject is None else subject
        with transaction(self.engine) as conn:
            bump_version(conn, store.COMPONENT)
            previous = store.get_mode(conn, key)
            if subject is not None and previous is None:
                if not store.has_any_version(conn, subject):
                    raise subject_not_found(subject)
                raise RegistryError(40409, f"Subject '{subject}' does not have subject-level mode configured")
            store.delete_mode(conn, key)
        self._forget_usages()
        return Mode(previous or Mode.READWRITE.value), Change("mode.delete", key, {})

    # ------------------------------------------------------------------ compatibility

    def _incompatibilities(self, conn: Connection, parsed: ParsedSchema, previous: Sequence[SubjectVersion],
                           level: str, budget: WorkBudget, *, judged: Collection[tuple[int, int]] = (),
                           take_slot: bool = True) -> list[str]:
        """Spends from `budget`, which covers every comparison of one request; skips the versions
        (version, id) in `judged`, found compatible at this level earlier in the same request. Takes a
        check slot (`registry.check_slots`) before comparing anything, unless `take_slot` is false;
        raises `ChecksBusy` when none is free."""
        if level == "NONE" or not previous:
            return []
        compat = CompatibilityLevel(level)
        relevant = previous if compat.transitive else previous[-1:]
        relevant = [p for p in relevant if (p.version, p.schema.id) not in judged]
        if not relevant:
            return []
        olds = [self._parsed_of(conn, p.schema, subject=p.subject) for p in relevant]
        try:
            with self._checks.held() if self._checks is not None and take_slot else nullcontext():
                messages = check_compatibility(parsed, olds, compat, versions=[p.version for p in relevant],
                                               budget=budget)
        except TooComplexError as exc:
            # Refused, never taken as compatible; the setting is named so that an operator can raise it.
            raise invalid_schema(
                f"Schema is too complex to check for compatibility: {exc} (registry.max_diff_work)"
            ) from None
        return messages

    def test_compatibility(self, subject: str, version: int | None, request: RegisterRequest, *,
                           normalize: bool, verbose: bool, may_read: ReadCheck) -> CompatibilityVerdict:
        """`version` None: against the versions the level selects; -1: the latest; else that version."""
        walk = _walk_references(subject, request, may_read)
        with self.engine.connect() as conn:
            config = self._config(conn, subject)
            try:
                return self._test_compatibility(conn, config, subject, version, request, normalize=normalize,
                                                verbose=verbose, walk=walk)
            except RegistryError as exc:  # an invalid or too complex schema, answered as Confluent does
                if verbose and exc.code == 42201:
                    return CompatibilityVerdict(False, (exc.message,))
                raise

    def _test_compatibility(self, conn: Connection, config: Mapping[str, Any], subject: str, version: int | None,
                            request: RegisterRequest, *, normalize: bool, verbose: bool, walk: _ReferenceWalk
                            ) -> CompatibilityVerdict:
        _, parsed = self._parse_request(conn, request, normalize=normalize or bool(config.get("normalize")), walk=walk)
        live = [r for r in self._versions(conn, subject) if not r.deleted]
        level = str(config.get("compatibilityLevel", DEFAULT_COMPATIBILITY))
        if version is None:
            previous = live
        elif version == -1:
            previous = live[-1:]
        else:
            previous = [r for r in live if r.version == version]
            if not previous:
                raise version_not_found(version)
            # Confluent compares only the named version, whatever the level's transitivity.
            level = level.removesuffix("_TRANSITIVE")
        # Confluent's isCompatible takes the request's metadata as sent (no config defaults merged in,
        # unlike a registration) to pick the versions of the same compatibility group.
        previous = _same_group(config, request.metadata, previous)
        messages = self._incompatibilities(conn, parsed, previous, level, WorkBudget(self._max_diff_work))
        return CompatibilityVerdict(not messages, tuple(messages) if verbose else ())

    # ------------------------------------------------------------------ lookup and register

    def lookup(self, subject: str, request: RegisterRequest, *, normalize: bool, deleted: bool,
               may_read: ReadCheck) -> SubjectVersion:
        walk = _walk_references(subject, request, may_read)
        self._poll_changes()
        key = (subject, request.schema_type, request.schema, request.references, normalize, deleted,
               json.dumps(request.metadata, sort_keys=True), json.dumps(request.rule_set, sort_keys=True))
        cached = self._lookups.get(key)
        if cached is not None:
            found, reached = cached
            walk.check(reached)  # the answer is shared by all callers; the checks are each caller's own
            return found
        found = self._lookup(subject, request, normalize=normalize, deleted=deleted, walk=walk)
        with self._lock:
            if len(self._lookups) >= _MAX_CACHED_LOOKUPS:
                self._lookups = {}
            self._lookups[key] = found, tuple(walk.checked)
        return found

    def _lookup(self, subject: str, request: RegisterRequest, *, normalize: bool, deleted: bool,
                walk: _ReferenceWalk) -> SubjectVersion:
        with self.engine.connect() as conn:
            stored = self._versions(conn, subject)
            rows = [r for r in stored if deleted or not r.deleted]
            if not rows:
                raise subject_not_found(subject)
            config = self._config(conn, subject)
            # Confluent's lookUpSchemaUnderSubject parses as not new: an imported schema whose defaults
            # Avro would refuse today is found.
            request, parsed = self._parse_request(conn, request, normalize=normalize or bool(config.get("normalize")),
                                                  walk=walk, validate_defaults=False)
            found = self._matching_version(conn, subject, parsed, request, rows)
            live = [r for r in stored if not r.deleted]
            if found is None and live:
                # Confluent's lookUpSchemaUnderSubject, on a miss, merges what a registration of the
                # request would (the config's defaults and overrides around the request's metadata and
                # rule set, or the latest live version's where the request gives none) and looks up
                # once more, unless that changes nothing: a version registered under the config's
                # defaults is found by a client that sends only its own annotations.
                metadata, rule_set = merge_with_config(config, request.metadata, request.rule_set,
                                                       (live[-1].schema.metadata, live[-1].schema.rule_set))
                if (metadata, rule_set) != (request.metadata, request.rule_set):
                    retry = replace(request, metadata=metadata, rule_set=rule_set)
                    found = self._matching_version(conn, subject, parsed, retry, rows)
        if found is not None:
            return found
        raise schema_not_found()

    def _matching_version(self, conn: Connection, subject: str, parsed: ParsedSchema, request: RegisterRequest,
                          rows: Sequence[SubjectVersion]) -> SubjectVersion | None:
        """The newest of `rows` holding `parsed` with the request's metadata and rule set (either
        matching any when the request gives none), else an Avro version it equals once references are
        resolved (`_inlined_version`)."""
        # As written: the subject's versions all resolve their references in its context.
        refs = _as_written(parsed, request.references, subject)
        wanted = content_fingerprint(parsed.schema_type.value, parsed.canonical, refs)
        prints = store.fingerprints_of(conn, (r.schema.id for r in rows))
        for row in reversed(rows):
            if prints[row.schema.id][0] != wanted:
                continue
            if request.metadata is not None and request.metadata != row.schema.metadata:
                continue
            if request.rule_set is not None and request.rule_set != row.schema.rule_set:
                continue
            return row
        return self._inlined_version(conn, parsed, request, rows, None, any_annotations=True)

    def _inlined_version(self, conn: Connection, parsed: ParsedSchema, request: RegisterRequest,
                         rows: Sequence[SubjectVersion], existing_id: int | None, *,
                         any_annotations: bool = False) -> SubjectVersion | None:
        """The newest of `rows` that has references and equals `parsed`, an Avro schema sent without
        references, once its references are resolved: Confluent's register and lookUpSchemaUnderSubject
        take a schema "sent with all references resolved" for that version (`ParsedSchema.deepEquals`:
        the Avro `Schema`s, the metadata and the rule set equal). As there, an
        id the text itself already has elsewhere (`existing_id`) must be the version's. JSON Schema
        versions are not compared so (Confluent's JSON `deepEquals` was not verified). With
        `any_annotations` (lookups), metadata or a rule set the request does not give match any, as
        in the lookup's main path."""
        if parsed.references or not isinstance(parsed.model, AvroModel):
            return None
        for row in reversed(rows):
            if not row.schema.references or row.schema.schema_type != parsed.schema_type.value:
                continue
            if existing_id is not None and row.schema.id != existing_id:
                continue
            if not (request.metadata == row.schema.metadata or (any_annotations and request.metadata is None)):
                continue
            if not (request.rule_set == row.schema.rule_set or (any_annotations and request.rule_set is None)):
                continue
            old = self._parsed_of(conn, row.schema, subject=row.subject)
            if isinstance(old.model, AvroModel) and same_schema(parsed.model.root, old.model.root):
                return row
        return None

    def _prepare(self, conn: Connection, subject: str, request: RegisterRequest, *, normalize: bool,
                 walk: _ReferenceWalk) -> _Prepared:
        """Mode gate, parsing and the "already registered here" answer, shared by both phases of `register`."""
        context = context_of(subject)
        mode = self._mode(conn, subject)
        if mode in (Mode.READONLY, Mode.READONLY_OVERRIDE):
            raise operation_not_permitted(f"Subject {subject} in context {context} is in read-only mode")
        importing = request.id is not None and request.id >= 0
        if importing and mode not in (Mode.IMPORT, Mode.FORWARD):
            raise operation_not_permitted(f"Subject {subject} in context {context} is not in import mode")
        if not importing and mode is not Mode.READWRITE:
            raise operation_not_permitted(f"Subject {subject} in context {context} is not in read-write mode")
        config = self._config(conn, subject)
        rows = self._versions(conn, subject)
        live = [r for r in rows if not r.deleted]
        if not importing:
            # Confluent's newVersion: one more than any version the subject had (kgov never reuses one);
            # read only when `confluent:version` needs it (not on a producer's plain re-registration).
            request = _populate_from_previous(
                request, live, config,
                lambda: max([store.high_water(conn, subject), *(r.version for r in rows)]) + 1)
        # Parsed as not new first (Confluent's canonicalizeSchema with isNew false for imports, and its
        # registerOrForward looking the schema up first): a stored schema with defaults Avro refuses
        # today (registered before Avro checked them, or imported) is found and answered.
        refused_defaults: list[str] = []
        request, parsed = self._parse_request(conn, request, normalize=normalize or bool(config.get("normalize")),
                                              walk=walk, refused_defaults=refused_defaults)
        refs = _as_written(parsed, request.references, subject)
        fingerprint = full_fingerprint(parsed.schema_type.value, parsed.canonical, refs, request.metadata,
                                       request.rule_set, resolved=_references(parsed))
        existing_id = store.schema_id_by_fingerprint(conn, fingerprint)
        same = {existing_id}
        legacy = full_fingerprint(parsed.schema_type.value, parsed.canonical, refs, request.metadata, request.rule_set)
        if legacy != fingerprint:
            # Stored before references took the context of their subject: the same schema if this
            # subject has it (its versions resolve references as this request does), not elsewhere.
            same.add(store.schema_id_by_fingerprint(conn, legacy))
        same.discard(None)
        registered = None
        # An explicit version (Confluent's `schema.getVersion() != 0`) asks for a new version: only -1
        # ("latest") answers an existing one, the latest live version if it is the same (below).
        explicit = not importing and request.version not in (None, 0)
        if not explicit:
            for row in reversed(rows):
                if not row.deleted and row.schema.id in same and (not importing or request.id == row.schema.id):
                    registered = row
                    break
        if registered is None and not importing and (not explicit or request.version == -1):
            registered = self._same_but_confluent_version(conn, parsed, refs, request,
                                                          live[-1:] if explicit else live)
        if registered is None and not explicit and not importing:
            registered = self._inlined_version(conn, parsed, request, live, existing_id)
        if registered is None and not importing and refused_defaults:  # a new schema: defaults checked
            raise invalid_schema(refused_defaults[0])
        return _Prepared(importing, config, parsed, refs, fingerprint, rows, existing_id, registered, request)

    def _same_but_confluent_version(self, conn: Connection, parsed: ParsedSchema, refs: Sequence[Reference],
                                    request: RegisterRequest, candidates: Sequence[SubjectVersion]
                                    ) -> SubjectVersion | None:
        """The newest of `candidates` (live versions) holding the schema of `request` with its metadata
        and rule set, `confluent:version` set aside: once a subject's metadata carries that property,
        a re-registration carries the version it would create, and its stored twin the one it did
        (Confluent's lookup ignores it likewise: `ParsedSchema.canLookup`, "without confluent:version").
        With -1 Confluent compares the latest version only (schema-registry#3361)."""
        if confluent_version(request.metadata) is None or not candidates:
            return None
        wanted = content_fingerprint(parsed.schema_type.value, parsed.canonical, refs)
        prints = store.fingerprints_of(conn, (r.schema.id for r in candidates))
        for row in reversed(candidates):
            if (prints[row.schema.id][0] == wanted and row.schema.rule_set == request.rule_set
                    and _same_metadata(row.schema.metadata, request.metadata)):
                return row
        return None

    def register(self, subject: str, request: RegisterRequest, *, normalize: bool, may_read: ReadCheck
                 ) -> tuple[SubjectVersion, Change]:
        # Confluent's SubjectVersionsResource.register: the request's own rule set (not the one merged
        # with the config's and the latest version's) is validated first, then the subject.
        validate_rule_set(request.rule_set)
        validate_subject(subject)
        walk = _walk_references(subject, request, may_read)
        # Producers re-register their schema at every start: answer that from a read, without the
        # writers' lock and without bumping the change counter (which would flush every node's caches).
        with self.engine.connect() as conn:
            prepared = self._prepare(conn, subject, request, normalize=normalize, walk=walk)
            if prepared.registered is not None:
                return prepared.registered, _unchanged(subject, prepared.registered)
            # The compatibility check (up to `max_diff_work` of CPU) runs here, before the writers' lock,
            # so that one slow check does not hold up every writer on every node. Under the lock it is
            # re-run only if what it judged (the level, the live versions) changed meanwhile, and then
            # only against what changed. Both spend from one budget: a request never does more than
            # `max_diff_work` in all, however the versions move under it.
            budget = WorkBudget(self._max_diff_work)
            checked, checked_schema = self._check_compatible(conn, subject, prepared, budget), prepared.parsed
        with transaction(self.engine) as conn:
            bump_version(conn, store.COMPONENT)  # serialises writers: see the module docstring
            prepared = self._prepare(conn, subject, request, normalize=normalize, walk=walk)
            if prepared.registered is not None:  # registered meanwhile by another writer
                return prepared.registered, _unchanged(subject, prepared.registered)
            basis = _compatibility_basis(prepared)
            # Also when the schema itself parsed differently: a reference to "latest" resolves again here
            # and may name a version committed since the check.
            if basis != checked or prepared.parsed is not checked_schema:
                # Without a check slot: re-checks are rare, run one at a time (under the writers' lock)
                # and spend only what this request's budget has left.
                # The versions judged before count only for the same level and the same parse (the
                # parse cache returns the same object only if the references resolved alike).
                same = (basis is not None and checked is not None and basis[0] == checked[0]
                        and prepared.parsed is checked_schema)
                self._check_compatible(conn, subject, prepared, budget,
                                       judged=_judged(checked) if same else (), take_slot=False)
            importing, parsed, refs = prepared.importing, prepared.parsed, prepared.refs
            rows, existing_id, fingerprint = prepared.rows, prepared.existing_id, prepared.fingerprint
            schema_type = parsed.schema_type.value
            content_fp = content_fingerprint(schema_type, parsed.canonical, refs)
            if importing:
                assert request.id is not None
                schema_id = self._import_id(conn, request.id, existing_id, fingerprint)
            else:
                schema_id = existing_id if existing_id is not None else store.max_schema_id(conn) + 1
                if schema_id > MAX_ID:
                    raise RegistryError(50001, "The registry has run out of schema ids")
            annotated = prepared.request
            stored = StoredSchema(schema_id, schema_type, parsed.canonical, refs, annotated.metadata,
                                  annotated.rule_set)
            if existing_id is None or existing_id != schema_id:
                store.insert_schema(conn, stored, content_fp, fingerprint)
            version = self._next_version(conn, subject, rows, request.version if importing else None)
            if not importing and request.version is not None and request.version > 0 and request.version != version:
                # Confluent's KafkaSchemaRegistry.register, outside IMPORT mode (checked after compatibility).
                raise invalid_schema("Version is not one more than previous version")
            store.insert_version(conn, subject, version, schema_id)
            # Confluent's KafkaSchemaRegistry.register tombstones the subject's earlier soft-deleted
            # versions of the same id, so that an id has one version per subject. kgov keeps one that
            # a stored schema still references (Confluent does not check), so the referrer resolves.
            replaced = [r.version for r in rows if r.deleted and r.schema.id == schema_id and r.version < version
                        and not _referrers(conn, subject, r.version, include_deleted=True)]
            if replaced:
                store.remove_versions(conn, subject, replaced)
        self._by_id.setdefault(schema_id, stored)
        self._parsed.setdefault((schema_id, reference_context(subject)), parsed)
        self._forget_usages()
        return SubjectVersion(subject, version, stored), Change(
            "schema.register", subject, {"id": schema_id, "version": version, "new": True,
                                          "schemaType": schema_type}
        )

    def _check_compatible(self, conn: Connection, subject: str, prepared: _Prepared, budget: WorkBudget, *,
                          judged: Collection[tuple[int, int]] = (), take_slot: bool = True
                          ) -> tuple[str, tuple[tuple[int, int], ...]] | None:
        """409 unless `prepared` may be registered under the subject's level; returns what the verdict
        rested on (`_compatibility_basis`). Imports are not checked (Confluent's IMPORT mode)."""
        basis = _compatibility_basis(prepared)
        if basis is None:
            return None
        level, _ = basis
        messages = self._incompatibilities(conn, prepared.parsed, _compared_versions(prepared), level,
                                           budget, judged=judged, take_slot=take_slot)
        if messages:
            raise IncompatibleSchemaError(subject, messages)
        return basis

    def _import_id(self, conn: Connection, wanted: int, existing_id: int | None, fingerprint: str) -> int:
        if wanted < 1 or wanted > MAX_ID:
            raise invalid_schema(f"Invalid schema id {wanted}")
        taken = store.schema_by_id(conn, wanted)
        if taken is not None:
            prints = store.fingerprints_of(conn, [wanted])
            if prints[wanted][1] != fingerprint:
                raise operation_not_permitted(f"Overwrite new schema with id {wanted} is not permitted.")
            return wanted
        if existing_id is not None:
            raise RegistryError(42207, "The ID of an imported schema does not match the existing ID")
        return wanted

    def _next_version(self, conn: Connection, subject: str, rows: Sequence[SubjectVersion],
                      wanted: int | None) -> int:
        high = max([store.high_water(conn, subject), *(r.version for r in rows)])
        if wanted is not None and wanted > 0:
            if any(r.version == wanted for r in rows):
                raise operation_not_permitted(f"Overwrite new schema in subject {subject} version {wanted} "
                                              "is not permitted.")
            version = wanted
        else:
            version = high + 1
        if version > MAX_ID:
            raise RegistryError(50001, f"Subject {subject} has run out of version numbers")
        store.set_high_water(conn, subject, max(high, version))
        return version

    # ------------------------------------------------------------------ deletes

    def _deletable_versions(self, conn: Connection, subject: str) -> list[SubjectVersion]:
        """Takes the writers' lock, refuses read-only subjects, returns the stored versions (40401 if none)."""
        bump_version(conn, store.COMPONENT)
        if self._mode(conn, subject) in (Mode.READONLY, Mode.READONLY_OVERRIDE):
            raise operation_not_permitted(f"Subject {subject} in context {context_of(subject)} is in read-only mode")
        rows = self._versions(conn, subject)
        if not rows:
            raise subject_not_found(subject)
        return rows

    def delete_version(self, subject: str, version: int, *, permanent: bool) -> tuple[int, Change]:
        with transaction(self.engine) as conn:
            rows = self._deletable_versions(conn, subject)
            if version == -1:
                # `latest` is the latest live version for permanent deletes too (Confluent's
                # SubjectVersionsResource.deleteSchemaVersion resolves it with getLatestVersion, which
                # skips soft-deleted versions): a permanent delete of it answers 40407, never removing
                # the newest soft-deleted version; with no live version it is 40402 "Version -1".
                live = [r for r in rows if not r.deleted]
                if not live:
                    raise version_not_found(version)
                target = live[-1]
            else:
                found = [r for r in rows if r.version == version]
                if not found:
                    raise version_not_found(version)
                target = found[0]
            if not permanent:
                if target.deleted:
                    raise RegistryError(
                        40406,
                        f"Subject '{subject}' Version {target.version} was soft deleted.Set permanent=true to "
                        "delete permanently",
                    )
                if _referrers(conn, subject, target.version, include_deleted=False):
                    raise _reference_exists(subject, target.version)
                store.mark_deleted(conn, subject, [target.version])
            else:
                if not target.deleted:
                    raise RegistryError(
                        40407,
                        f"Subject '{subject}' Version {target.version} was not deleted first before being "
                        "permanently deleted",
                    )
                if _referrers(conn, subject, target.version, include_deleted=True):
                    raise _reference_exists(subject, target.version)
                store.remove_versions(conn, subject, [target.version])
                if len(rows) == 1:
                    store.forget_subject(conn, subject)
        self._forget_usages()
        return target.version, Change(
            "version.delete", subject, {"version": target.version, "permanent": permanent, "id": target.schema.id}
        )

    def delete_subject(self, subject: str, *, permanent: bool) -> tuple[list[int], Change]:
        with transaction(self.engine) as conn:
            rows = self._deletable_versions(conn, subject)
            live = [r.version for r in rows if not r.deleted]
            if not permanent:
                if not live:
                    raise RegistryError(
                        40404, f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently"
                    )
                for number in live:
                    if _referrers(conn, subject, number, include_deleted=False):
                        raise _reference_exists(subject, number)
                store.mark_deleted(conn, subject, live)
                deleted = live
            else:
                if live:
                    raise RegistryError(
                        40405, f"Subject '{subject}' was not deleted first before being permanently deleted"
                    )
                deleted = [r.version for r in rows]
                for number in deleted:
                    if _referrers(conn, subject, number, include_deleted=True):
                        raise _reference_exists(subject, number)
                store.remove_versions(conn, subject, deleted)
                store.forget_subject(conn, subject)
        self._forget_usages()
        return deleted, Change("subject.delete", subject, {"versions": deleted, "permanent": permanent})


def _populate_from_previous(request: RegisterRequest, live: Sequence[SubjectVersion], config: Mapping[str, Any],
                            new_version: Callable[[], int]) -> RegisterRequest:
    """Confluent's `maybePopulateFromPrevious` (outside IMPORT mode), over the subject's live versions:

    - an empty schema takes the latest version's schema, type and references (a registration that
      changes only the metadata or rule set); with no live version it is 42201 `Empty schema`;
    - metadata and rule set are the config's default, then the request's (when it gives none, the
      latest version's), then the config's override, merged (`registry.contracts`);
    - `confluent:version` is set to the version the registration would create when the request gives
      a version (any but 0), or when the merged metadata already carries it."""
    latest = live[-1].schema if live else None
    if not request.schema.strip():
        if latest is None:
            raise invalid_schema("Empty schema")
        request = replace(request, schema=latest.schema, schema_type=latest.schema_type,
                          references=latest.references)
    metadata, rule_set = merge_with_config(config, request.metadata, request.rule_set,
                                           (latest.metadata, latest.rule_set) if latest else None)
    if request.version not in (None, 0) or confluent_version(metadata) is not None:
        metadata = with_confluent_version(metadata, new_version())
    return replace(request, metadata=metadata, rule_set=rule_set)


def _same_metadata(stored: Mapping[str, Any] | None, sent: Mapping[str, Any] | None) -> bool:
    return (without_confluent_version(stored) or None) == (without_confluent_version(sent) or None)


def _walk_references(subject: str, request: RegisterRequest, may_read: ReadCheck) -> _ReferenceWalk:
    """The checks of the subjects a request for `subject` references, made before anything is looked
    up: a refusal is then the same whether or not the referenced versions exist."""
    walk = _ReferenceWalk(subject, may_read)
    walk.check([r.subject for r in _resolved(subject, request.references)])
    return walk


def _resolved(referrer: str, refs: Sequence[Reference]) -> tuple[Reference, ...]:
    """`refs` (of a version of `referrer`, or sent for it) naming the subjects they are looked up under."""
    return tuple(Reference(r.name, reference_subject(referrer, r.subject), r.version) for r in refs)


def _schema_references(referrer: str, refs: Sequence[Reference]) -> list[SchemaReference]:
    """What the parser records: the subjects looked up, so that a parse (and the parser's cache, keyed by
    the fingerprints of referenced parses) tells `x` in one context from `x` in another."""
    return [SchemaReference(r.name, r.subject, r.version) for r in _resolved(referrer, refs)]


def _as_written(parsed: ParsedSchema, refs: Sequence[Reference], referrer: str) -> tuple[Reference, ...]:
    """The references of `parsed` (parsed from `refs`, resolved for `referrer`) as the caller wrote them,
    in the parser's order: what is stored and what fingerprints of content are computed over."""
    written: dict[Reference, Reference] = {}
    for ref, target in zip(refs, _resolved(referrer, refs), strict=True):
        written.setdefault(target, ref)
    return tuple(written[Reference(r.name, r.subject, r.version)] for r in parsed.references)


def _referrers(conn: Connection, subject: str, version: int, *, include_deleted: bool) -> list[int]:
    """Ids of schemas with a (live, unless `include_deleted`) version whose references resolve to
    `subject` `version`, whatever the context of that version's subject."""
    rows = store.references_to(conn, written_forms(subject), version, include_deleted=include_deleted)
    return sorted({schema_id for schema_id, written, referrer in rows if reference_subject(referrer, written) == subject})


def _referenced_row(rows: Sequence[SubjectVersion], version: int) -> SubjectVersion | None:
    """The version a reference names (-1: the latest), soft-deleted ones included; None if there is none."""
    if version == -1:
        return rows[-1] if rows else None
    return next((r for r in rows if r.version == version), None)


def _compatibility_basis(prepared: _Prepared) -> tuple[str, tuple[tuple[int, int], ...]] | None:
    """What a compatibility verdict depends on besides the new schema: the level and the live versions
    it is compared with (`_compared_versions`; schemas are immutable per id). None when importing,
    which is not checked."""
    if prepared.importing:
        return None
    level = str(prepared.config.get("compatibilityLevel", DEFAULT_COMPATIBILITY))
    return level, tuple((r.version, r.schema.id) for r in _compared_versions(prepared))


def _compared_versions(prepared: _Prepared) -> list[SubjectVersion]:
    """The live versions a registration is checked against: those of its compatibility group, its
    metadata being the merged one (config defaults and overrides included), as Confluent's register
    builds the schema before `isCompatibleWithPrevious`."""
    live = [r for r in prepared.rows if not r.deleted]
    return _same_group(prepared.config, prepared.request.metadata, live)


def _same_group(config: Mapping[str, Any], metadata: Mapping[str, Any] | None,
                versions: Sequence[SubjectVersion]) -> list[SubjectVersion]:
    """Confluent's `isCompatibleWithPrevious` with a `compatibilityGroup`: only the versions whose
    metadata gives the property it names the new schema's value, absent matching absent (a new
    schema without the property is compared with the versions without it). The level's
    transitivity then applies to these (the latest of the group, or all of them)."""
    group = config.get("compatibilityGroup")
    if not isinstance(group, str):
        return list(versions)
    value = compatibility_group_value(metadata, group)
    return [v for v in versions if compatibility_group_value(v.schema.metadata, group) == value]


def _judged(basis: tuple[str, tuple[tuple[int, int], ...]] | None) -> tuple[tuple[int, int], ...]:
    """The versions a check that passed on `basis` compared with: all live ones for the transitive
    levels, else the latest only."""
    if basis is None:
        return ()
    level, live = basis
    return live if CompatibilityLevel(level).transitive else live[-1:]


def _unchanged(subject: str, row: SubjectVersion) -> Change:
    return Change("schema.register", subject, {"id": row.schema.id, "version": row.version, "new": False})


def _config_keys(subject: str) -> tuple[str, ...]:
    """Where a subject's config and mode are looked up: itself, then its context (`:.ctx:`), if any."""
    context = context_of(subject)
    context_key = f":{context}:"
    if context == DEFAULT_CONTEXT or subject == context_key:
        return (subject,)
    return (subject, context_key)


def _reference_exists(subject: str, version: int) -> RegistryError:
    return RegistryError(42206, f"One or more references exist to the schema {{subject={subject},version={version}}}.")


def _references(parsed: ParsedSchema) -> tuple[Reference, ...]:
    return tuple(Reference(r.name, r.subject, r.version) for r in parsed.references)


def _pick_version(subject: str, rows: Sequence[SubjectVersion], version: int, *, deleted: bool) -> SubjectVersion:
    visible = [r for r in rows if deleted or not r.deleted]
    if not visible:
        raise subject_not_found(subject)
    if version == -1:
        # Confluent's KafkaSchemaRegistry.get reads `latest` with getLatestVersion, which skips
        # soft-deleted versions whatever `deleted` asks: with none live it is "Version -1 not found."
        live = [r for r in visible if not r.deleted]
        if not live:
            raise version_not_found(version)
        return live[-1]
    for r in visible:
        if r.version == version:
            return r
    raise version_not_found(version)
