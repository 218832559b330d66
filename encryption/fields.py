"""Field-level encryption for Avro and JSON records, driven by schema tags.

Fields tagged sensitive in the schema are encrypted one by one; the rest of the record stays readable
by consumers without keys, and the record still matches its schema (an encrypted `string` field holds
base64 text, an encrypted `bytes` field holds bytes). Where tags come from, as in Confluent's
client-side field-level encryption:

- inline: `"confluent:tags": ["PII"]` on an Avro field or on a JSON Schema property, or on a schema
  that describes its value: a union or allOf/anyOf/oneOf branch, a `$ref` target, array `items`, Avro
  map `values`, JSON `additionalProperties` (see docs/encryption.md, "Where a tag may be written");
- the schema's metadata: `{"tags": {"com.acme.Customer.ssn": ["PII"], "**.email": ["PII"]}}`, path
  patterns matched against the field's path from the root (`address.street`) and its qualified path
  (`com.acme.Customer.ssn`, Avro record full names); `*` stays within one name, `**` crosses dots;
- a rule set: the tags of `ENCRYPT` domain rules select the fields (`encrypt.dek.algorithm:
  AES256_SIV` makes them deterministic, `encrypt.kek.name` picks their KEK), when no tag set is
  given explicitly.

Two modes per field:
- randomized (default): AES-256-GCM under the producer's data key, a self-contained envelope
  (`MAGIC + header + ciphertext`, see `encryption.envelope`) whose associated data binds topic, field,
  the record (its `kgov.enc.rec` identifier, so produce with `headers=[]`) and the array index or map
  key: field format version 2. Version 1 fields (bound to topic and field only) are refused unless the
  consumer passes `accept_unbound_fields=True` during a migration (`encryption.reencrypt.FieldReencryptor`);
- deterministic, for fields that must stay joinable: AES-SIV (RFC 5297) under a key derived from the KEK
  (stable across rotations), bound to the field path but not the topic, so equal values give equal
  ciphertexts across topics that share the KEK. It reveals equality, by design; use it only where a
  join needs it. Encoding: `b"KGD\\x01" + len(kek) + kek + siv`.

Only string and bytes fields (and their nullable unions, and arrays or maps of them) can be encrypted,
as with Confluent; a tag on another type is refused when the policy is built. So is a selected tag that
kgov cannot honour where it is written (patternProperties, if/then/else, positional items, a record's
own tags): Confluent's executor silently skips those, which writes the values in plaintext.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import decimal
import json
import os
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from functools import partial
from typing import Any, Literal

import fastavro
import fastavro.validation
from confluent_kafka.serialization import SerializationContext
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESSIV
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

from authz.clock import elapsed_clock
from encryption.datakeys import (
    DEFAULT_UNWRAP_LIMIT,
    DataKeyCache,
    DataKeyIssuer,
    DataKeyPolicy,
    Refusals,
    UnwrapLimit,
)
from encryption.envelope import (
    FIELD_FORMAT_VERSION,
    FLAG_KEY_BOUND,
    FORMAT_VERSION,
    MAGIC,
    RECORD_HEADER,
    RECORD_ID_SIZE,
    parse_header,
)
from encryption.errors import DecryptionError, EncryptionError, KmsError
from encryption.kms import Kms, check_key_name
from encryption.retry import RetryPolicy, call_with_retry
from encryption.serdes import (
    UNKNOWN_KEY,
    UNKNOWN_KEY_MESSAGE,
    Inner,
    KekNames,
    PayloadOpener,
    PayloadSealer,
    accepted_keks,
    add_header,
    check_kek_accepted,
    find_header,
    record_location,
    split_envelope,
    wire_key,
)

DETERMINISTIC_MAGIC = b"KGD\x01"
DEFAULT_TAGS = frozenset({"PII"})
_SIV_LABEL = b"field-siv"
_FIELD_AAD = b"kgov-field-v1:"
# Randomized field ciphertexts: version 2 (bound to the record) is written; version 1 only read on request.
_FIELD_VERSIONS = (FORMAT_VERSION, FIELD_FORMAT_VERSION)

Kind = Literal["string", "bytes"]
# A path through the record: field names, "[]" for array items, "{}" for map values.
Path = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FieldRule:
    path: Path
    kind: Kind
    deterministic: bool
    kek: str | None = None  # the rule's `encrypt.kek.name`; None: the serializer's key_name

    @property
    def name(self) -> str:
        return ".".join(self.path)


def _glob(pattern: str) -> re.Pattern[str]:
    regex = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            regex += ".*"
            i += 2
        elif pattern[i] == "*":
            regex += "[^.]*"
            i += 1
        else:
            regex += re.escape(pattern[i])
            i += 1
    return re.compile(regex + r"\Z")


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A value position of the schema that tags may select."""

    path: Path
    qualified: str
    kind: Kind | None  # None: not a string/bytes field
    inline_tags: frozenset[str]
    where: str = ""  # where its first inline tag is written (JSON pointer, Avro field + pointer), else the field
    # Why kgov cannot encrypt a value there (a subschema it does not walk), or None. A selected tag on such
    # a position is refused unless a walked field at the same path is encrypted anyway.
    unsupported: str | None = None


class FieldPolicy:
    """Which fields of a schema to encrypt, and how. Build it with `from_avro` or `from_json_schema`."""

    def __init__(
        self, rules: Iterable[FieldRule], cutoffs: Iterable[Path] = (), exclusions: Exclusions | None = None,
        schema: SchemaSource | None = None,
    ) -> None:
        self.rules = tuple(rules)
        # The schema the policy was read from (None: built from rules by hand), for `check_shape`.
        self.schema = schema
        self._shape: Callable[[Mapping[str, Any]], None] | None = None
        # Paths where a recursive schema was no longer unrolled: a record with data there is refused.
        self.cutoffs = tuple(cutoffs)
        # Map-like JSON objects: the declared property names that their "{}" paths do not cover.
        self.exclusions: Exclusions = dict(exclusions or {})
        if not self.rules:
            raise EncryptionError("no field of the schema carries a sensitive tag: nothing would be encrypted")
        # A field's ciphertext is bound to its dotted name: two fields with one name (JSON properties
        # may contain dots: "a.b" and a.b) could take each other's ciphertexts; NUL ends the name.
        paths: dict[str, Path] = {}
        for rule in self.rules:
            name = rule.name
            if paths.setdefault(name, rule.path) != rule.path or "\0" in name:
                raise EncryptionError(f"encrypted fields must have distinct names without NUL: {name!r} is ambiguous")

    def check_shape(self, record: Any) -> None:
        """Refuses (`DecryptionError`) a record that is not a dict matching the policy's schema: what the
        consumer's inner deserializer would have refused. Without one (`FieldDecryptingDeserializer(inner=
        None)`), a record shaped otherwise (a list where the schema has an array of tagged strings, a
        bytes value from Kafka) would pass its tagged values through undecrypted and unchecked."""
        if not isinstance(record, Mapping):
            raise DecryptionError(
                f"FieldDecryptingDeserializer without inner= reads records as dicts, got {type(record).__name__}: "
                "pass inner= (the topic's Avro or JSON deserializer)")
        if self.schema is None:  # a policy built from rules by hand: no schema to check against
            return
        if self._shape is None:
            try:
                self._shape = self.schema.checker()
            except Exception as exc:  # whatever fastavro or jsonschema raise on a schema they cannot load
                # Refused, never skipped: the schema's text is not quoted (it may be long), only the cause's type.
                raise DecryptionError(
                    f"records cannot be checked against the policy's {self.schema.schema_type} schema "
                    f"({type(exc).__name__}): pass inner= (the topic's deserializer)") from None
        self._shape(record)

    def __repr__(self) -> str:
        return f"FieldPolicy({[(r.name, 'deterministic' if r.deterministic else 'randomized') for r in self.rules]})"

    @classmethod
    def from_avro(
        cls,
        schema: str | Mapping[str, Any],
        *,
        tags: Iterable[str] | None = None,
        deterministic_tags: Iterable[str] = (),
        metadata: Mapping[str, Any] | None = None,
        rule_set: Mapping[str, Any] | None = None,
        references: Iterable[str | Mapping[str, Any]] = (),
    ) -> FieldPolicy:
        """`references`: the schemas this one refers to by name (registry schema references), in
        dependency order; their named types are known, their own fields are not candidates here."""
        named: dict[str, Mapping[str, Any]] = {}
        for reference in references:
            _AvroWalker(named, [], []).value(json.loads(reference) if isinstance(reference, str) else reference,
                                             (), None, (), qualified="", where="", inherited=frozenset(), sites=(),
                                             field=False)
        document = json.loads(schema) if isinstance(schema, str) else schema
        walker = _AvroWalker(named, [], [])
        walker.value(document, (), None, (), qualified="", where=str(_avro_name(document)), inherited=frozenset(),
                     sites=(), field=False)
        return cls._select(walker.out, tags, deterministic_tags, metadata, rule_set, walker.cutoffs,
                           schema=SchemaSource("AVRO", document, tuple(
                               json.loads(r) if isinstance(r, str) else r for r in references)))

    @classmethod
    def from_json_schema(
        cls,
        schema: str | Mapping[str, Any],
        *,
        tags: Iterable[str] | None = None,
        deterministic_tags: Iterable[str] = (),
        metadata: Mapping[str, Any] | None = None,
        rule_set: Mapping[str, Any] | None = None,
    ) -> FieldPolicy:
        document = json.loads(schema) if isinstance(schema, str) else schema
        if not isinstance(document, Mapping):
            raise EncryptionError("field-level encryption needs a JSON Schema object")
        walker = _JsonWalker(document)
        walker.position(document, (), "#", (), qualified="")
        return cls._select(walker.out, tags, deterministic_tags, metadata, rule_set, walker.cutoffs,
                           {path: keys for path, keys in walker.exclusions.items() if keys},
                           schema=SchemaSource("JSON", document))

    @classmethod
    def from_registered_schema(
        cls,
        document: Mapping[str, Any],
        *,
        tags: Iterable[str] | None = None,
        deterministic_tags: Iterable[str] = (),
        references: Iterable[str | Mapping[str, Any]] = (),
    ) -> FieldPolicy:
        """From a schema registry's answer (`GET /subjects/{subject}/versions/{version}` or
        `/schemas/ids/{id}`): its `schema`, `schemaType` (AVRO when absent), `metadata` and `ruleSet`.
        `references`: the texts of the schemas its `references` name (Avro), fetched by the caller."""
        schema_type = str(document.get("schemaType") or "AVRO").upper()
        metadata, rule_set = document.get("metadata"), document.get("ruleSet")
        if schema_type == "AVRO":
            return cls.from_avro(document["schema"], tags=tags, deterministic_tags=deterministic_tags,
                                 metadata=metadata, rule_set=rule_set, references=references)
        if schema_type == "JSON":
            return cls.from_json_schema(document["schema"], tags=tags, deterministic_tags=deterministic_tags,
                                        metadata=metadata, rule_set=rule_set)
        raise EncryptionError(f"field-level encryption supports AVRO and JSON schemas, not {schema_type}")

    @classmethod
    def _select(
        cls,
        candidates: list[_Candidate],
        tags: Iterable[str] | None,
        deterministic_tags: Iterable[str],
        metadata: Mapping[str, Any] | None,
        rule_set: Mapping[str, Any] | None,
        cutoffs: Iterable[Path] = (),
        exclusions: Exclusions | None = None,
        *,
        schema: SchemaSource,
    ) -> FieldPolicy:
        sensitive = set(tags) if tags is not None else set()
        deterministic = set(deterministic_tags)
        keks: dict[str, str] = {}  # tag -> KEK named by the ENCRYPT rule that selects it
        for rule in (rule_set or {}).get("domainRules", []) or []:
            if rule.get("type") == "ENCRYPT" and rule.get("kind", "TRANSFORM") == "TRANSFORM":
                rule_tags = set(rule.get("tags") or [])
                params = rule.get("params") or {}
                if tags is None:
                    sensitive |= rule_tags
                if params.get("encrypt.dek.algorithm") == "AES256_SIV":
                    deterministic |= rule_tags
                if params.get("encrypt.kek.name"):
                    for tag in rule_tags:
                        rule_kek = str(params["encrypt.kek.name"])
                        if keks.setdefault(tag, rule_kek) != rule_kek:
                            raise EncryptionError(f"ENCRYPT rules name different KEKs for tag {tag!r}")
        if tags is None and not sensitive:
            sensitive = set(DEFAULT_TAGS)
        sensitive |= deterministic
        patterns = [
            (_glob(pattern), frozenset(pattern_tags))
            for pattern, pattern_tags in ((metadata or {}).get("tags") or {}).items()
        ]
        # One entry per data path: several positions can describe the same values (union branches,
        # subschemas of if/then/else next to the property they refine).
        positions: dict[Path, list[tuple[_Candidate, str, frozenset[str]]]] = {}
        for candidate in candidates:
            dotted = ".".join(p for p in candidate.path if p not in ("[]", "{}"))
            field_tags = set(candidate.inline_tags)
            for regex, pattern_tags in patterns:
                if regex.match(dotted) or regex.match(candidate.qualified):
                    field_tags |= pattern_tags
            positions.setdefault(candidate.path, []).append((candidate, dotted, frozenset(field_tags & sensitive)))
        rules = []
        # Rules that honour a tag of patternProperties or of a conditional subschema: where it is.
        by_pattern: dict[Path, str] = {}
        for path, group in positions.items():
            walked = [(c, chosen) for c, _, chosen in group if c.unsupported is None]
            encryptable = [c for c, _ in walked if c.kind is not None]
            for candidate, dotted, chosen in group:
                if not chosen:
                    continue
                tagged = (f"field {dotted!r}" if dotted else "the record") + f" is tagged {sorted(chosen)}" + (
                    f" at {candidate.where}" if chosen & candidate.inline_tags else " by the schema's metadata")
                if candidate.unsupported is not None and (not encryptable or candidate.unsupported == _MARKER_NAME_REASON):
                    raise EncryptionError(
                        f"{tagged}, which cannot be honoured: {candidate.unsupported} "
                        "(nothing is written in plaintext: the policy is refused)")
                if candidate.unsupported is None and candidate.kind is None:
                    raise EncryptionError(
                        f"{tagged} but only string and bytes values (or arrays and maps of them) can be "
                        "encrypted and still match the schema: for a record or object tag its string or bytes "
                        "fields (for a JSON map, its additionalProperties); a number, boolean or enum cannot be "
                        "encrypted in place (EncryptingSerializer encrypts whole values)")
            # Tags kgov cannot honour where they are written, on values a walked field encrypts anyway.
            stray = frozenset().union(*(chosen for c, _, chosen in group if c.unsupported is not None))
            selected = [(c, chosen | stray) for c, chosen in walked if chosen]
            if not selected and stray:
                selected = [(encryptable[0], stray)]
            for candidate, _, chosen in group:
                if chosen and candidate.unsupported in (_PATTERN_PROPERTIES_REASON, _CONDITIONAL_REASON):
                    by_pattern.setdefault(path, candidate.where)
            if not selected:
                continue
            # Several positions describing the values at one path (an Avro union of two records with the
            # same tagged field, one property tagged in two allOf parts) make ONE rule, under the union of
            # their tags: each value is encrypted once, whichever position describes it.
            dotted = ".".join(p for p in path if p not in ("[]", "{}"))
            kinds = {candidate.kind for candidate, _ in selected}
            if len(kinds) > 1:
                raise EncryptionError(
                    f"field {dotted!r} is a string in one part of the schema and bytes in another: its "
                    "encrypted form would differ by branch; tag it where it has one type"
                )
            chosen = frozenset().union(*(tags for _, tags in selected))
            field_keks = {keks[tag] for tag in chosen if tag in keks}
            if len(field_keks) > 1:
                raise EncryptionError(
                    f"field {dotted!r} is selected by ENCRYPT rules naming different KEKs {sorted(field_keks)}"
                )
            kind = kinds.pop()
            assert kind is not None  # checked above
            rules.append(FieldRule(path, kind, bool(chosen & deterministic), field_keks.pop() if field_keks else None))
        _check_patterns_cover_declared(by_pattern, {rule.path for rule in rules}, exclusions or {})
        return cls(rules, cutoffs, exclusions, schema)


@dataclass(frozen=True, slots=True)
class SchemaSource:
    """The schema a `FieldPolicy` was read from: its type, document and (Avro) referenced schemas."""

    schema_type: Literal["AVRO", "JSON"]
    document: Any = dataclass_field(repr=False)
    references: tuple[Any, ...] = dataclass_field(default=(), repr=False)

    def checker(self) -> Callable[[Mapping[str, Any]], None]:
        """A function refusing a record that does not match the schema. The error names where (JSON: the
        path) but quotes no value: the record's other fields are not encrypted, and may still be private."""
        if self.schema_type == "AVRO":
            named: dict[str, Any] = {}
            for reference in self.references:
                fastavro.parse_schema(reference, named_schemas=named)
            parsed = fastavro.parse_schema(self.document, named_schemas=named)

            def check_avro(record: Mapping[str, Any]) -> None:
                try:
                    valid = fastavro.validation.validate(record, parsed, raise_errors=False)
                except Exception:  # whatever a hostile record makes the validator raise: refused, never passed
                    valid = False
                if not valid:
                    raise DecryptionError("record does not match the policy's Avro schema")
            return check_avro
        # registry's linear-time validator: the schema's regexes run on RE2 and the work per value is bounded.
        from registry.json_validation import validator_class_for, validator_with, within_budget

        validator = validator_with(validator_class_for(self.document), self.document, [])

        def check_json(record: Mapping[str, Any]) -> None:
            try:
                with within_budget(record):
                    error = next(iter(validator.iter_errors(record)), None)
                    where = None if error is None else error.json_path
            except Exception as exc:  # the work budget, a circular value, a pattern RE2 cannot run, ...: refused
                raise DecryptionError(
                    f"record could not be checked against the policy's JSON Schema ({type(exc).__name__})"
                ) from None
            if where is not None:
                shown = where if len(where) <= 200 else where[:200] + "..."
                raise DecryptionError(f"record does not match the policy's JSON Schema at {shown}")
        return check_json


def _check_patterns_cover_declared(by_pattern: Mapping[Path, str], rule_paths: set[Path],
                                   exclusions: Exclusions) -> None:
    """A tagged patternProperties (or additionalProperties inside if/then/else, dependentSchemas ...) is
    honoured by the "{}" rule of the additionalProperties beside it, which skips the declared properties;
    a pattern (or the conditional's own additionalProperties) may describe those too, so each declared
    property skipped there must be encrypted by a rule of its own, or the policy is refused."""
    for path, where in by_pattern.items():
        for index, segment in enumerate(path):
            if segment != "{}":
                continue
            for name in sorted(exclusions.get(path[:index + 1], ())):
                if (*path[:index], name, *path[index + 1:]) not in rule_paths:
                    declared = ".".join(p for p in (*path[:index], name, *path[index + 1:]) if p not in ("[]", "{}"))
                    raise EncryptionError(
                        f"the tag at {where} may also describe the declared property "
                        f"{declared!r}, which is not encrypted (the additionalProperties rule skips declared "
                        "properties): tag that property too")


def _avro_kind(avro_type: Any) -> Kind | None:
    if isinstance(avro_type, str) and avro_type in ("string", "bytes"):
        return avro_type  # type: ignore[return-value]
    if isinstance(avro_type, Mapping) and avro_type.get("type") in ("string", "bytes") and "logicalType" not in avro_type:
        return avro_type["type"]  # type: ignore[no-any-return]
    return None


def _avro_name(schema: Any) -> str:
    """The root type's name, to say where a tag on it is."""
    if isinstance(schema, Mapping) and schema.get("name"):
        name, space = str(schema["name"]), schema.get("namespace")
        return name if "." in name or not space else f"{space}.{name}"
    return "the root type"


_AVRO_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_AVRO_COMPLEX = frozenset({"record", "enum", "fixed", "array", "map"})
# A recursive record is unrolled this many times along one path; deeper data is refused, not leaked.
MAX_RECURSION = 4


def _inline_tags(schema: Any, where: str) -> frozenset[str]:
    tags = schema.get("confluent:tags") if isinstance(schema, Mapping) else None
    if tags is None:
        return frozenset()
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise EncryptionError(f"confluent:tags at {where} must be a list of strings")
    return frozenset(tags)


def _gather_tags(schema: Any, where: str, tags: set[str], sites: list[str]) -> None:
    """Adds the tags written on `schema` to `tags`, and `where` to `sites` when there are any."""
    found = _inline_tags(schema, where)
    if found:
        tags |= found
        sites.append(where)


# Value positions a schema may unroll into: recursive types unrolled MAX_RECURSION times can multiply.
MAX_POSITIONS = 100_000


class _PositionBudget:
    def __init__(self) -> None:
        self.left = MAX_POSITIONS

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise EncryptionError(
                f"schema unrolls into more than {MAX_POSITIONS} fields (recursive types referring to each "
                "other): too complex for field-level encryption"
            )


@dataclass(frozen=True, slots=True)
class _AvroBranch:
    schema: Any  # a primitive name or a mapping (named references resolved)
    where: str
    namespace: str | None


class _AvroWalker:
    """Lists the value positions of an Avro schema. As in Confluent's `AvroSchema` transform, a field's
    tags reach its value through unions, array items and map values, but not into a record's fields;
    kgov also reads tags written on the types themselves (a union branch, `items`, `values`, a named
    type) as tags of the value at that position. `seen` (records on the current path) bounds recursion,
    `cutoffs` collects where it stopped; `named` (named types defined so far) resolves references."""

    def __init__(self, named: dict[str, Mapping[str, Any]], out: list[_Candidate], cutoffs: list[Path]) -> None:
        self.named = named
        self.out = out
        self.cutoffs = cutoffs
        self.budget = _PositionBudget()

    def record(self, record: Mapping[str, Any], path: Path, namespace: str | None, seen: tuple[str, ...]) -> None:
        name = str(record.get("name", ""))
        space = record.get("namespace", namespace)
        full = name if "." in name or not space else f"{space}.{name}"
        self.named.setdefault(full, record)
        if seen.count(full) >= MAX_RECURSION:
            self.cutoffs.append(path)
            return
        for field in record.get("fields", []):
            field_path = (*path, field["name"])
            qualified = f"{full}.{field['name']}"
            tags = _inline_tags(field, qualified)
            self.value(field["type"], field_path, space, (*seen, full), qualified=qualified,
                       where=f"{qualified}/type", inherited=tags, sites=(qualified,) if tags else (), field=True)

    def value(
        self, avro_type: Any, path: Path, namespace: str | None, seen: tuple[str, ...], *, qualified: str,
        where: str, inherited: frozenset[str], sites: tuple[str, ...], field: bool,
    ) -> None:
        """The value at `path` (a field's, or an item or map value reached from one), of `avro_type`."""
        self.budget.spend()
        branches: list[_AvroBranch] = []
        tags, tag_sites = set(inherited), list(sites)
        self._branches(avro_type, namespace, where, branches, tags, tag_sites)
        present = [b for b in branches if b.schema != "null" and not (
            isinstance(b.schema, Mapping) and b.schema.get("type") == "null")]
        containers = [isinstance(b.schema, Mapping) and b.schema.get("type") in ("array", "map") for b in present]
        # Only arrays and maps here: their items or values carry the tags, as in Confluent. Else a candidate.
        if (not present or not all(containers)) and (field or tags):
            kinds = {_avro_kind(b.schema) for b in present}
            kind = kinds.pop() if len(kinds) == 1 else None
            self.out.append(_Candidate(path, qualified, kind, frozenset(tags), tag_sites[0] if tag_sites else where,
                                       _ROOT_REASON if not path and tags else None))
        for branch in present:
            schema = branch.schema
            if not isinstance(schema, Mapping):
                continue
            if schema.get("type") == "array":
                self.value(schema.get("items"), (*path, "[]"), branch.namespace, seen, qualified=qualified,
                           where=f"{branch.where}/items", inherited=frozenset(tags), sites=tuple(tag_sites), field=True)
            elif schema.get("type") == "map":
                self.value(schema.get("values"), (*path, "{}"), branch.namespace, seen, qualified=qualified,
                           where=f"{branch.where}/values", inherited=frozenset(tags), sites=tuple(tag_sites), field=True)
            elif schema.get("type") == "record":
                self.record(schema, path, branch.namespace, seen)

    def _branches(
        self, avro_type: Any, namespace: str | None, where: str, out: list[_AvroBranch], tags: set[str],
        sites: list[str],
    ) -> None:
        """The alternatives of `avro_type` (a union's branches), named references resolved; the tags
        written on them are added to `tags`."""
        if isinstance(avro_type, list):
            for index, branch in enumerate(avro_type):
                self._branches(branch, namespace, f"{where}/{index}", out, tags, sites)
            return
        if isinstance(avro_type, str) and avro_type not in _AVRO_PRIMITIVES:
            reference = avro_type if "." in avro_type or not namespace else f"{namespace}.{avro_type}"
            definition = self.named.get(reference) or self.named.get(avro_type)
            if definition is None:
                raise EncryptionError(
                    f"schema refers to {avro_type!r}, defined elsewhere: pass the referenced schemas as references="
                )
            found = reference if reference in self.named else avro_type
            site = f"{where} (the named type {found})"
            _gather_tags(definition, site, tags, sites)
            out.append(_AvroBranch(definition, where, namespace))
            return
        if not isinstance(avro_type, Mapping):
            out.append(_AvroBranch(avro_type, where, namespace))
            return
        _gather_tags(avro_type, where, tags, sites)
        kind = avro_type.get("type")
        if kind in _AVRO_COMPLEX:
            if kind in ("record", "enum", "fixed"):
                name = str(avro_type.get("name", ""))
                space = avro_type.get("namespace", namespace)
                if kind != "record":  # records register themselves when walked
                    self.named.setdefault(name if "." in name or not space else f"{space}.{name}", avro_type)
            out.append(_AvroBranch(avro_type, where, namespace))
        elif isinstance(kind, str) and kind in _AVRO_PRIMITIVES:
            out.append(_AvroBranch(avro_type, where, namespace))
        else:  # {"type": "com.acme.Name"}, {"type": {...}} or {"type": [...]}: a wrapped type
            self._branches(kind, namespace, f"{where}/type", out, tags, sites)


_JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})


def _json_types(schema: Any, root: Mapping[str, Any], refs: dict[str, frozenset[str] | None]) -> frozenset[str]:
    """The JSON types a value valid against `schema` can have ($ref, allOf, anyOf, oneOf followed).
    `refs` remembers each `$ref` target's answer (None while it is being worked out: a cycle counts as
    any type, so a tag there is refused rather than trusted)."""
    if not isinstance(schema, Mapping):
        return frozenset() if schema is False else _JSON_TYPES
    declared = schema.get("type")
    if declared is None:
        types = _JSON_TYPES
    else:
        types = frozenset([declared] if isinstance(declared, str) else declared if isinstance(declared, list) else [])
    if "number" in types:
        types |= {"integer"}
    ref = schema.get("$ref")
    if isinstance(ref, str):
        if ref not in refs:
            refs[ref] = None
            refs[ref] = _json_types(_json_pointer(ref, root), root, refs)
        found = refs[ref]
        types &= _JSON_TYPES if found is None else found
    for branch in schema.get("allOf") or []:
        types &= _json_types(branch, root, refs)
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            types &= frozenset().union(*(_json_types(branch, root, refs) for branch in schema[key]))
    return types


def _pointer_token(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


_ROOT_REASON = (
    "it applies to the whole record, and field-level encryption encrypts fields: tag the string fields "
    "instead, or encrypt whole values with EncryptingSerializer"
)
_PATTERN_REASON = (
    "values matched by patternProperties or unevaluatedProperties are not walked: declare the property "
    "under properties, or tag additionalProperties (which covers every undeclared property)"
)
# The same, for patternProperties: unlike additionalProperties and unevaluatedProperties, they also
# describe the declared properties they match, which the additionalProperties rule skips.
_PATTERN_PROPERTIES_REASON = (
    "values matched by patternProperties are not walked: declare the property under properties, or tag "
    "additionalProperties (which covers every undeclared property)"
)
_TUPLE_REASON = (
    "positional array items (prefixItems, items given as a list, additionalItems, contains, "
    "unevaluatedItems) are not walked: describe the items with one items schema and tag it"
)
_CONDITIONAL_REASON = (
    "subschemas of if/then/else, not, dependentSchemas and dependencies are not walked: tag the property "
    "where it is declared under properties (a tag there is honoured whatever the conditions)"
)
_NAMES_REASON = "property names (object keys) are never encrypted: move the sensitive data into a value"
# A field path marks array items with "[]" and map values with "{}": a property of that name would be
# read as one (its value left as it is), so a tag on it, or inside it, is refused whatever else is there.
_MARKER_NAME_REASON = (
    "a property named '[]' or '{}' cannot be told apart from array items or map values in a field path: "
    "rename the property"
)
# Keywords whose subschemas kgov does not walk, the data path they describe, and why.
_UNWALKED_SCHEMA = (
    ("additionalItems", "[]", _TUPLE_REASON), ("contains", "[]", _TUPLE_REASON),
    ("unevaluatedItems", "[]", _TUPLE_REASON), ("unevaluatedProperties", "{}", _PATTERN_REASON),
    ("propertyNames", "{names}", _NAMES_REASON), ("if", "", _CONDITIONAL_REASON),
    ("then", "", _CONDITIONAL_REASON), ("else", "", _CONDITIONAL_REASON), ("not", "", _CONDITIONAL_REASON),
)
_UNWALKED_MAPS = (
    ("patternProperties", "{}", _PATTERN_PROPERTIES_REASON), ("dependentSchemas", "", _CONDITIONAL_REASON),
    ("dependencies", "", _CONDITIONAL_REASON),
)


class _JsonWalker:
    """Lists the value positions of a JSON Schema: properties, array items and additionalProperties
    values, each with the tags of every subschema that describes it (the property's own, its `$ref`
    targets, its allOf/anyOf/oneOf branches). As in Confluent's `JsonSchema` transform, an array
    property's tags reach its items. Subschemas kgov does not walk (patternProperties, if/then/else, ...)
    are still listed, marked `unsupported`, so that a tag there is refused instead of ignored. A `$ref`
    met `MAX_RECURSION` times on one path stops the walk there (a cutoff)."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.out: list[_Candidate] = []
        self.cutoffs: list[Path] = []
        self.exclusions: dict[Path, frozenset[str]] = {}
        self.ref_types: dict[str, frozenset[str] | None] = {}
        self.budget = _PositionBudget()
        # The keywords that set a subschema's base URI: draft-04 and earlier spell it `id`.
        dialect = root.get("$schema")
        self.id_keywords = ("$id", "id") if isinstance(dialect, str) and re.search(r"draft-0[34]/", dialect) \
            else ("$id",)

    def _parts(
        self, schema: Any, pointer: str, refs: tuple[str, ...], path: Path, unsupported: str | None,
        out: list[tuple[Mapping[str, Any], str, tuple[str, ...]]],
    ) -> None:
        """The subschemas that all describe the value at `path`, each with its JSON pointer and the
        `$ref`s followed to reach it."""
        if not isinstance(schema, Mapping):
            return
        for keyword in ("$dynamicRef", "$recursiveRef"):
            if keyword in schema:
                raise EncryptionError(
                    f"schema uses {keyword} at {pointer}: field-level encryption follows $ref only, so the "
                    "tags of what it refers to would be skipped: write $ref")
        for keyword in self.id_keywords:
            embedded = schema.get(keyword)
            if schema is not self.root and isinstance(embedded, str) and not embedded.startswith("#"):
                raise EncryptionError(
                    f"schema has an embedded {keyword} at {pointer}: field-level encryption resolves $ref against "
                    f"the root schema only, and a $ref under it would mean another subschema: remove the {keyword}")
        out.append((schema, pointer, refs))
        if "$ref" in schema:
            ref = schema["$ref"]
            if not isinstance(ref, str):
                raise EncryptionError("schema has a non-string $ref")
            if refs.count(ref) >= MAX_RECURSION:
                if unsupported is None:
                    self.cutoffs.append(path)
            else:
                self._parts(_json_pointer(ref, self.root), ref, (*refs, ref), path, unsupported, out)
        for key in ("allOf", "anyOf", "oneOf"):
            branches = schema.get(key)
            if isinstance(branches, list):
                for index, branch in enumerate(branches):
                    self._parts(branch, f"{pointer}/{key}/{index}", refs, path, unsupported, out)

    def position(
        self, schema: Any, path: Path, pointer: str, refs: tuple[str, ...], *, qualified: str,
        inherited: frozenset[str] = frozenset(), sites: tuple[str, ...] = (), unsupported: str | None = None,
        field: bool = False,
    ) -> None:
        self.budget.spend()
        parts: list[tuple[Mapping[str, Any], str, tuple[str, ...]]] = []
        self._parts(schema, pointer, refs, path, unsupported, parts)
        tags, tag_sites = set(inherited), list(sites)
        for part, part_pointer, _ in parts:
            _gather_tags(part, part_pointer, tags, tag_sites)
        types = _json_types(schema, self.root, self.ref_types)
        array = "array" in types and types <= {"array", "null"} and any(
            isinstance(part.get("items"), Mapping) for part, _, _ in parts)
        if not array and (field or tags):
            kind: Kind | None = "string" if "string" in types and types <= {"string", "null"} else None
            reason = unsupported or (_ROOT_REASON if not path and tags else None)
            self.out.append(_Candidate(path, qualified, kind, frozenset(tags), tag_sites[0] if tag_sites else pointer,
                                       reason))
        # else: an array: its items carry the tags, as in Confluent.
        for part, part_pointer, part_refs in parts:
            items = part.get("items")
            inherit = array and isinstance(items, Mapping)
            if inherit:
                self.position(items, (*path, "[]"), f"{part_pointer}/items", part_refs, qualified=qualified,
                              inherited=frozenset(tags), sites=tuple(tag_sites), unsupported=unsupported, field=True)
            # The part's other keywords too (prefixItems, contains, if/then/else ...): a tag there is
            # honoured or refused, never skipped.
            self._children(part, part_pointer, part_refs, path, unsupported, items_walked=inherit)

    def _children(
        self, part: Mapping[str, Any], pointer: str, refs: tuple[str, ...], path: Path, unsupported: str | None,
        *, items_walked: bool = False,
    ) -> None:
        """Walks what `part` says about the values inside the one at `path` (its `items` schema unless
        `items_walked`)."""
        def walk(sub: Any, sub_path: Path, sub_pointer: str, reason: str | None = unsupported,
                 field: bool = False) -> None:
            self.position(sub, sub_path, sub_pointer, refs, qualified=".".join(sub_path), unsupported=reason,
                          field=field)

        if isinstance(part.get("items"), Mapping) and not items_walked:
            walk(part["items"], (*path, "[]"), f"{pointer}/items")
        for key in ("items", "prefixItems"):
            if isinstance(part.get(key), list):
                for index, sub in enumerate(part[key]):
                    walk(sub, (*path, "[]"), f"{pointer}/{key}/{index}", unsupported or _TUPLE_REASON)
        properties = part.get("properties")
        for name, sub in (properties.items() if isinstance(properties, Mapping) else ()):
            walk(sub, (*path, name), f"{pointer}/properties/{_pointer_token(name)}",
                 _MARKER_NAME_REASON if name in ("[]", "{}") else unsupported, field=True)
        additional = part.get("additionalProperties")
        if isinstance(additional, Mapping):
            # A key is additional for each subschema that does not declare it (allOf parts all apply):
            # "{}" rules skip only the keys every such subschema declares, so none is left in plaintext.
            declared = frozenset(properties if isinstance(properties, Mapping) else ())
            known = self.exclusions.get((*path, "{}"))
            if unsupported is None:
                self.exclusions[(*path, "{}")] = declared if known is None else known & declared
            walk(additional, (*path, "{}"), f"{pointer}/additionalProperties")
        for key, segment, reason in _UNWALKED_SCHEMA:
            if key in part:
                walk(part[key], (*path, segment) if segment else path, f"{pointer}/{key}", unsupported or reason)
        for key, segment, reason in _UNWALKED_MAPS:
            subschemas = part.get(key)
            for name, sub in (subschemas.items() if isinstance(subschemas, Mapping) else ()):
                walk(sub, (*path, segment) if segment else path, f"{pointer}/{key}/{_pointer_token(name)}",
                     unsupported or reason)


def _json_pointer(ref: str, root: Mapping[str, Any]) -> Any:
    if not (ref == "#" or ref.startswith("#/")):
        raise EncryptionError(
            f"schema refers to {ref!r} outside itself: field-level encryption needs the referenced schema inlined"
        )
    target: Any = root
    for part in ref[2:].split("/") if ref != "#" else ():
        if not isinstance(target, Mapping):
            raise EncryptionError(f"schema reference {ref!r} does not resolve")
        target = target.get(part.replace("~1", "/").replace("~0", "~"))
    if not isinstance(target, Mapping):
        raise EncryptionError(f"schema reference {ref!r} does not resolve")
    return target


Exclusions = Mapping[Path, frozenset[str]]


# What a record may hold where a rule's path goes on (a union's other branch): values with nothing
# inside them. Anything else there (an object a `to_dict` hook would convert later, a tuple, which
# fastavro also reads as a union branch chosen by name) could hide a tagged field from the walk.
_LEAVES = (str, bytes, bytearray, memoryview, bool, int, float, decimal.Decimal, datetime.date, datetime.time,
           uuid.UUID)


def _transform(
    obj: Any, path: Path, change: Callable[[Any, bytes], Any], exclusions: Exclusions, prefix: Path = (), *,
    strict: bool = False, position: bytes = b"",
) -> Any:
    """A copy of `obj` with the values at `path` replaced by `change(value, position)`; other parts are
    shared. `position` is the value's concrete place along `path` (`_item_position`, `_entry_position`).
    Under a "{}" segment, keys in `exclusions[prefix + "{}"]` (declared JSON properties) are skipped.
    `strict` (encrypting): any mapping is looked into (the Avro and JSON writers accept any), and a
    container it cannot look into on the way (a tuple, an object) is refused, never passed on unencrypted."""
    if obj is None:
        return None
    if not path:
        return change(obj, position)
    if strict:
        if isinstance(obj, Mapping) and not isinstance(obj, dict):
            obj = dict(obj)
        elif not isinstance(obj, (dict, list, *_LEAVES)):
            name = ".".join(p for p in prefix if p not in ("[]", "{}")) or "the record"
            raise EncryptionError(
                f"{name} is a {type(obj).__name__}, which field-level encryption cannot look into: pass dicts "
                "and lists (a tuple would be read as an array or an Avro union branch chosen by name; convert "
                "objects with to_dict before this serializer, not in the inner one)")
    head, rest = path[0], path[1:]
    where = (*prefix, head)
    if head == "[]":
        if not isinstance(obj, list):
            return obj
        return [_transform(item, rest, change, exclusions, where, strict=strict,
                           position=position + _item_position(index))
                for index, item in enumerate(obj)]
    if head == "{}":
        if not isinstance(obj, dict):
            return obj
        skip = exclusions.get(where, frozenset())
        return {k: v if k in skip else _transform(v, rest, change, exclusions, where, strict=strict,
                                                  position=position + _entry_position(k, where, strict))
                for k, v in obj.items()}
    if isinstance(obj, dict) and head in obj:
        copy = dict(obj)
        copy[head] = _transform(obj[head], rest, change, exclusions, where, strict=strict, position=position)
        return copy
    return obj


# A randomized field of format version 2 is bound to its concrete position: each array index and map key
# on its rule path, in order, after the record identifier (see encryption.envelope). Their number and
# kinds are fixed by the rule path, and each is fixed-size or length-prefixed, so two positions never
# encode alike: items of one array cannot be swapped, nor map values moved to another key.
def _item_position(index: int) -> bytes:
    return index.to_bytes(4, "big")


def _entry_position(key: object, where: Path, strict: bool) -> bytes:
    if not isinstance(key, str):
        name = ".".join(p for p in where if p not in ("[]", "{}")) or "the record"
        message = f"{name} has a map key that is a {type(key).__name__}, not a string"
        raise EncryptionError(message) if strict else DecryptionError(message)
    raw = key.encode("utf-8", "surrogatepass")
    return len(raw).to_bytes(4, "big") + raw


def values_at(obj: Any, path: Path, exclusions: Exclusions, prefix: Path = ()) -> Iterable[Any]:
    """The values at `path`, looking into any mapping, list or tuple (as the writers would)."""
    if obj is None:
        return
    if not path:
        yield obj
        return
    head, rest = path[0], path[1:]
    where = (*prefix, head)
    if head == "[]":
        children: Iterable[Any] = obj if isinstance(obj, list | tuple) else ()
    elif head == "{}":
        skip = exclusions.get(where, frozenset())
        children = [v for k, v in obj.items() if k not in skip] if isinstance(obj, Mapping) else ()
    else:
        children = (obj[head],) if isinstance(obj, Mapping) and head in obj else ()
    for child in children:
        yield from values_at(child, rest, exclusions, where)


class _DeterministicKeys:
    """AES-SIV keys derived from KEKs, each kept for `ttl_seconds` (as `DataKeyCache` keeps data keys): a
    consumer whose access to a KEK is revoked stops reading its deterministic fields within that time."""

    def __init__(
        self, kms: Kms, retry: RetryPolicy, now: Callable[[], float] = elapsed_clock, ttl_seconds: float = 3600.0
    ) -> None:
        self.kms = kms
        self.retry = retry
        self.now = now
        self._ttl = ttl_seconds
        self._ciphers: dict[str, tuple[AESSIV, float]] = {}  # only KEKs the KMS knows: bounded by them
        self.refusals = Refusals(60.0, 1000, now)

    def cipher(self, key_name: str) -> AESSIV:
        entry = self._ciphers.get(key_name)
        if entry is not None and entry[1] > self.now():
            return entry[0]
        self._ciphers.pop(key_name, None)
        # On the consumer side the name comes from the record: checked before any KMS sees it.
        check_key_name(key_name)
        self.refusals.check(key_name)
        try:
            secret = call_with_retry(self.retry, "derived_secret",
                                     lambda: self.kms.derived_secret(key_name, _SIV_LABEL))
        except KmsError as exc:
            self.refusals.remember(key_name, exc)
            raise
        key = HKDFExpand(hashes.SHA256(), 64, b"kgov aes-256-siv").derive(secret)
        cipher = AESSIV(key)
        self._ciphers[key_name] = (cipher, self.now() + self._ttl)
        return cipher


def _field_bytes(value: Any, rule: FieldRule) -> bytes:
    if rule.kind == "string":
        if not isinstance(value, str):
            raise EncryptionError(f"field {rule.name!r} should be a string, got {type(value).__name__}")
        return value.encode("utf-8")
    if not isinstance(value, bytes | bytearray):
        raise EncryptionError(f"field {rule.name!r} should be bytes, got {type(value).__name__}")
    return bytes(value)


class FieldEncryptingSerializer:
    """Encrypts the tagged fields of a record (dict), then applies `inner` (e.g. an Avro serializer)."""

    def __init__(
        self,
        kms: Kms,
        key_name: str,
        policy: FieldPolicy,
        inner: Inner | None = None,
        *,
        data_keys: DataKeyPolicy | None = None,
        retry: RetryPolicy | None = None,
        bind_key: bool = False,
    ) -> None:
        """`bind_key=True` also binds every randomized field to the record's Kafka key, so the record
        (fields and identifier together) cannot be moved to another key: the key must be known, as for
        `EncryptingSerializer(bind_key=True)` (`RecordKeySerializer` as key serializer, or a
        `RecordContext(key=...)`), and consumers need `RecordKeyDeserializer` or such a context too."""
        self.policy = policy
        self.inner = inner
        self.key_name = key_name
        self.bind_key = bind_key
        self.issuer = DataKeyIssuer(kms, data_keys, retry)
        # One sealer per KEK: a rule's `encrypt.kek.name`, else `key_name`.
        self._sealers = {
            kek: PayloadSealer(self.issuer, kek) for kek in {rule.kek or key_name for rule in policy.rules}
        }
        self._siv = _DeterministicKeys(kms, self.issuer.retry)
        self._tags = {rule.path: b"F" + rule.name.encode("utf-8") + b"\0" for rule in policy.rules}
        # Randomized fields are bound to their record through an identifier carried in RECORD_HEADER.
        self._binds_records = any(not rule.deterministic for rule in policy.rules)
        self._record_ids: Callable[[int], bytes] = os.urandom

    def __repr__(self) -> str:
        return f"FieldEncryptingSerializer(key_name={self.key_name!r}, policy={self.policy!r})"

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> Any:
        if ctx is None:
            raise EncryptionError("FieldEncryptingSerializer needs the SerializationContext")
        if obj is not None:
            for cutoff in self.policy.cutoffs:
                if any(value is not None for value in values_at(obj, cutoff, self.policy.exclusions)):
                    raise EncryptionError(
                        f"record nests deeper than {MAX_RECURSION} levels of a recursive type at "
                        f"{'.'.join(cutoff)!r}: its tagged fields there would not be encrypted"
                    )
            record_id = b""
            key = None
            if self._binds_records:
                if ctx.headers is None:
                    raise EncryptionError(
                        f"field-level encryption binds fields to their record through the {RECORD_HEADER!r} "
                        "header: produce with headers=[] (a fresh list per record)")
                if self.bind_key and (key := wire_key(ctx)) is UNKNOWN_KEY:
                    raise EncryptionError(UNKNOWN_KEY_MESSAGE)
                record_id = self._record_ids(RECORD_ID_SIZE)
            flags = FLAG_KEY_BOUND if self.bind_key else 0
            for rule in self.policy.rules:
                obj = _transform(obj, rule.path, partial(self._encrypt, rule=rule, topic=ctx.topic, flags=flags,
                                                         key=key, record_id=record_id),
                                 self.policy.exclusions, strict=True)
            if record_id:  # once every field is sealed: a refused record leaves the headers as they were
                add_header(ctx.headers, RECORD_HEADER, record_id)
        return self.inner(obj, ctx) if self.inner is not None else obj

    def _encrypt(
        self, value: Any, position: bytes, rule: FieldRule, topic: str, flags: int, key: Any, record_id: bytes
    ) -> Any:
        plaintext = _field_bytes(value, rule)
        kek = rule.kek or self.key_name
        if rule.deterministic:
            # Not bound to the record or position: equal values must give equal ciphertexts.
            name = kek.encode("utf-8")
            sealed = DETERMINISTIC_MAGIC + bytes((len(name),)) + name + self._siv.cipher(kek).encrypt(
                plaintext, [_FIELD_AAD + rule.name.encode("utf-8")]
            )
        else:
            header, ciphertext = self._sealers[kek].seal(
                flags, self._tags[rule.path], topic, key, plaintext, record=record_id + position)
            sealed = MAGIC + header + ciphertext
        return base64.b64encode(sealed).decode("ascii") if rule.kind == "string" else sealed


class FieldDecryptingDeserializer:
    """Applies `inner` (e.g. an Avro deserializer), then decrypts the tagged fields of the record."""

    def __init__(
        self,
        kms: Kms,
        policy: FieldPolicy,
        inner: Inner | None = None,
        *,
        retry: RetryPolicy | None = None,
        cache: DataKeyCache | None = None,
        unwrap_limit: UnwrapLimit | None = DEFAULT_UNWRAP_LIMIT,
        kek_names: KekNames = None,
        accept_unbound_fields: bool = False,
    ) -> None:
        """`kek_names`: the KEKs fields may be encrypted under (as for `DecryptingDeserializer`); a rule
        naming its KEK (`encrypt.kek.name`) accepts that one only, whatever this says.

        `accept_unbound_fields=True` also reads randomized fields of format version 1, which are not
        bound to their record (a field cut from one record and pasted into another decrypts): only while
        migrating a topic's records to version 2 (`encryption.reencrypt.FieldReencryptor`). Refused by
        default. With `inner=None` the record must be a dict matching the policy's schema."""
        self.policy = policy
        self.inner = inner
        self.accept_unbound_fields = accept_unbound_fields
        self.cache = cache if cache is not None else DataKeyCache(kms, retry=retry, unwrap_limit=unwrap_limit)
        # No warning when every rule names its KEK: each field is then held to its rule's KEK anyway.
        self.kek_names = accepted_keks(kek_names, "FieldDecryptingDeserializer",
                                       warn=any(rule.kek is None for rule in policy.rules))
        self._opener = PayloadOpener(self.cache, kek_names=self.kek_names)
        self._siv = _DeterministicKeys(kms, self.cache.retry, self.cache.now, self.cache.ttl_seconds)
        self._tags = {rule.path: b"F" + rule.name.encode("utf-8") + b"\0" for rule in policy.rules}

    def __repr__(self) -> str:
        return f"FieldDecryptingDeserializer(policy={self.policy!r})"

    def __call__(self, data: Any, ctx: SerializationContext | None = None) -> Any:
        if ctx is None:
            raise DecryptionError("FieldDecryptingDeserializer needs the SerializationContext")
        obj = self.inner(data, ctx) if self.inner is not None else data
        try:
            if self.inner is None and obj is not None:
                self.policy.check_shape(obj)
            record_id = find_header(ctx.headers, RECORD_HEADER)
            if record_id is not None and len(record_id) != RECORD_ID_SIZE:
                raise DecryptionError(f"record's {RECORD_HEADER!r} header is malformed")
            # In the reverse order of encryption: a value two rules reach (a declared JSON property that
            # another allOf part's tagged additionalProperties also covers) was sealed by each in turn.
            for rule in reversed(self.policy.rules):
                obj = _transform(obj, rule.path, partial(self._decrypt, rule=rule, topic=ctx.topic,
                                                         key=wire_key(ctx), record_id=record_id),
                                 self.policy.exclusions)
        except DecryptionError as exc:
            raise exc.located(**record_location(ctx)) from exc.__cause__
        return obj

    def _decrypt(
        self, value: Any, position: bytes, rule: FieldRule, topic: str, key: Any, record_id: bytes | None
    ) -> Any:
        try:
            if rule.kind == "string":
                sealed = base64.b64decode(value, validate=True)
            elif isinstance(value, bytes | bytearray | memoryview):
                sealed = bytes(value)
            else:  # not bytes(value): bytes(10**10) allocates ten gigabytes of zeros
                raise TypeError(type(value).__name__)
        except (binascii.Error, TypeError, ValueError) as exc:
            raise DecryptionError(f"field {rule.name!r} is not encrypted") from exc
        # The rule says how the field is encrypted, never the ciphertext (as Confluent's executor takes
        # `encrypt.dek.algorithm` and `encrypt.kek.name` from the rule): a deterministic ciphertext is not
        # bound to its topic, so accepting one where the rule is randomized would let any topic's
        # ciphertext of this field in; and a ciphertext naming another KEK may come from whoever holds that one.
        deterministic = sealed[: len(DETERMINISTIC_MAGIC)] == DETERMINISTIC_MAGIC
        if deterministic != rule.deterministic:
            raise DecryptionError(
                f"field {rule.name!r} is encrypted {'deterministically' if deterministic else 'randomized'} "
                f"but its rule says {'deterministic' if rule.deterministic else 'randomized'}"
            )
        if deterministic:
            plaintext = self._open_deterministic(sealed, rule)
        else:
            try:
                header, ciphertext = split_envelope(sealed, _FIELD_VERSIONS)
            except DecryptionError as exc:
                raise DecryptionError(f"field {rule.name!r} is not encrypted") from exc
            if rule.kek is not None:
                _check_rule_kek(rule, parse_header(header, versions=_FIELD_VERSIONS)[0].wrapped.key_name)
            if header[0] == FIELD_FORMAT_VERSION:
                if record_id is None:
                    raise DecryptionError(
                        f"field {rule.name!r} is bound to its record but the record has no {RECORD_HEADER!r} header")
                bound: bytes | None = record_id + position
            elif self.accept_unbound_fields:
                bound = None
            else:
                raise DecryptionError(
                    f"field {rule.name!r} is in field format version 1, which is not bound to its record (it could "
                    "have been copied from another record): refused; accept_unbound_fields=True reads it while "
                    "the topic's records are rewritten (FieldReencryptor)")
            # The key matters only where the header's flag says the field is bound to it (version 2 only:
            # version 1 fields were never written key-bound).
            plaintext = self._opener.open(header, ciphertext, self._tags[rule.path], topic,
                                          key if bound is not None else None, bound)
        if rule.kind != "string":
            return plaintext
        try:
            return plaintext.decode("utf-8")
        except UnicodeDecodeError:
            pass
        # Raised outside the except block: a UnicodeDecodeError keeps the whole plaintext (`.object`) and
        # quotes a byte of it, so it must be neither the cause nor the context of the error.
        raise DecryptionError(f"field {rule.name!r} does not decrypt to text")

    def _open_deterministic(self, sealed: bytes, rule: FieldRule) -> bytes:
        start = len(DETERMINISTIC_MAGIC)
        if len(sealed) < start + 2:
            raise DecryptionError(f"field {rule.name!r}: truncated deterministic ciphertext")
        name_len = sealed[start]
        raw_name = sealed[start + 1 : start + 1 + name_len]
        name = raw_name.decode("utf-8", errors="replace")
        if rule.kek is not None:
            _check_rule_kek(rule, name)
        check_kek_accepted(self.kek_names, raw_name)
        try:
            cipher = self._siv.cipher(name)
        except KmsError as exc:
            raise DecryptionError(f"field {rule.name!r}: key {name!r} is not available: {exc}") from exc
        try:
            return cipher.decrypt(sealed[start + 1 + name_len :], [_FIELD_AAD + rule.name.encode("utf-8")])
        except (InvalidTag, ValueError) as exc:
            raise DecryptionError(f"field {rule.name!r}: authentication failed") from exc


def _check_rule_kek(rule: FieldRule, kek: str) -> None:
    """Refuses a field whose ciphertext names another KEK than its rule's `encrypt.kek.name`."""
    if kek != rule.kek:
        raise DecryptionError(f"field {rule.name!r} is encrypted under KEK {kek!r}, not its rule's {rule.kek!r}")
