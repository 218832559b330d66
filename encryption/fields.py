"""Field-level encryption for Avro and JSON records, driven by schema tags.

Fields tagged sensitive in the schema are encrypted one by one; the rest of the record stays readable
by consumers without keys, and the record still matches its schema (an encrypted `string` field holds
base64 text, an encrypted `bytes` field holds bytes). Where tags come from, as in Confluent's
client-side field-level encryption:

- inline: `"confluent:tags": ["PII"]` on an Avro field or on a JSON Schema property;
- the schema's metadata: `{"tags": {"com.acme.Customer.ssn": ["PII"], "**.email": ["PII"]}}`, path
  patterns matched against the field's path from the root (`address.street`) and its qualified path
  (`com.acme.Customer.ssn`, Avro record full names); `*` stays within one name, `**` crosses dots;
- a rule set: the tags of `ENCRYPT` domain rules select the fields (`encrypt.dek.algorithm:
  AES256_SIV` makes them deterministic, `encrypt.kek.name` picks their KEK), when no tag set is
  given explicitly.

Two modes per field:
- randomized (default): AES-256-GCM under the producer's data key, a self-contained envelope
  (`MAGIC + header + ciphertext`, see `encryption.envelope`) whose associated data binds topic and field;
- deterministic, for fields that must stay joinable: AES-SIV (RFC 5297) under a key derived from the KEK
  (stable across rotations), bound to the field path but not the topic, so equal values give equal
  ciphertexts across topics that share the KEK. It reveals equality, by design; use it only where a
  join needs it. Encoding: `b"KGD\\x01" + len(kek) + kek + siv`.

Only string and bytes fields (and their nullable unions) can be encrypted, as with Confluent; a tag on
another type is refused when the policy is built.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from confluent_kafka.serialization import SerializationContext
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESSIV
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

from encryption.datakeys import (
    DEFAULT_UNWRAP_LIMIT,
    DataKeyCache,
    DataKeyIssuer,
    DataKeyPolicy,
    Refusals,
    UnwrapLimit,
)
from encryption.envelope import MAGIC
from encryption.errors import DecryptionError, EncryptionError, KmsError
from encryption.kms import Kms, check_key_name
from encryption.retry import RetryPolicy, call_with_retry
from encryption.serdes import Inner, PayloadOpener, PayloadSealer, record_location, split_envelope

DETERMINISTIC_MAGIC = b"KGD\x01"
DEFAULT_TAGS = frozenset({"PII"})
_SIV_LABEL = b"field-siv"
_FIELD_AAD = b"kgov-field-v1:"

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
    path: Path
    qualified: str
    kind: Kind | None  # None: not a string/bytes field
    inline_tags: frozenset[str]


class FieldPolicy:
    """Which fields of a schema to encrypt, and how. Build it with `from_avro` or `from_json_schema`."""

    def __init__(
        self, rules: Iterable[FieldRule], cutoffs: Iterable[Path] = (), exclusions: Exclusions | None = None
    ) -> None:
        self.rules = tuple(rules)
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
            _walk_avro(json.loads(reference) if isinstance(reference, str) else reference, (), None, [], (),
                       named, [])
        document = json.loads(schema) if isinstance(schema, str) else schema
        candidates: list[_Candidate] = []
        cutoffs: list[Path] = []
        _walk_avro(document, (), None, candidates, (), named, cutoffs)
        return cls._select(candidates, tags, deterministic_tags, metadata, rule_set, cutoffs)

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
        candidates: list[_Candidate] = []
        cutoffs: list[Path] = []
        exclusions: dict[Path, frozenset[str]] = {}
        _walk_json(document, (), candidates, document, (), cutoffs, exclusions)
        return cls._select(candidates, tags, deterministic_tags, metadata, rule_set, cutoffs, exclusions)

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
        rules = []
        for candidate in candidates:
            dotted = ".".join(p for p in candidate.path if p not in ("[]", "{}"))
            field_tags = set(candidate.inline_tags)
            for regex, pattern_tags in patterns:
                if regex.match(dotted) or regex.match(candidate.qualified):
                    field_tags |= pattern_tags
            chosen = field_tags & sensitive
            if not chosen:
                continue
            if candidate.kind is None:
                raise EncryptionError(
                    f"field {dotted!r} is tagged {sorted(chosen)} but only string and bytes fields can be "
                    "encrypted (the record must still match its schema)"
                )
            field_keks = {keks[tag] for tag in chosen if tag in keks}
            if len(field_keks) > 1:
                raise EncryptionError(
                    f"field {dotted!r} is selected by ENCRYPT rules naming different KEKs {sorted(field_keks)}"
                )
            rules.append(FieldRule(candidate.path, candidate.kind, bool(chosen & deterministic),
                                   field_keks.pop() if field_keks else None))
        return cls(rules, cutoffs, exclusions)


def _avro_kind(avro_type: Any) -> Kind | None:
    if isinstance(avro_type, str) and avro_type in ("string", "bytes"):
        return avro_type  # type: ignore[return-value]
    if isinstance(avro_type, Mapping) and avro_type.get("type") in ("string", "bytes") and "logicalType" not in avro_type:
        return avro_type["type"]  # type: ignore[no-any-return]
    if isinstance(avro_type, list):
        kinds = {_avro_kind(branch) for branch in avro_type if branch != "null"}
        if len(kinds) == 1:
            return kinds.pop()
    return None


_AVRO_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
# A recursive record is unrolled this many times along one path; deeper data is refused, not leaked.
MAX_RECURSION = 4


def _walk_avro(
    avro_type: Any,
    path: Path,
    namespace: str | None,
    out: list[_Candidate],
    seen: tuple[str, ...],
    named: dict[str, Mapping[str, Any]],
    cutoffs: list[Path],
) -> None:
    """Lists the fields under `avro_type`. `seen` (records on the current path) bounds recursion,
    `cutoffs` collects where it stopped; `named` (records defined so far) resolves references."""
    if isinstance(avro_type, list):
        for branch in avro_type:
            _walk_avro(branch, path, namespace, out, seen, named, cutoffs)
        return
    if isinstance(avro_type, str) and avro_type not in _AVRO_PRIMITIVES:
        reference = avro_type if "." in avro_type or not namespace else f"{namespace}.{avro_type}"
        definition = named.get(reference) or named.get(avro_type)
        if definition is None:
            raise EncryptionError(
                f"schema refers to {avro_type!r}, defined elsewhere: pass the referenced schemas as references="
            )
        if definition.get("type") == "record":
            _walk_avro(definition, path, namespace, out, seen, named, cutoffs)
        return
    if not isinstance(avro_type, Mapping):
        return
    kind = avro_type.get("type")
    if kind == "record":
        name = str(avro_type.get("name", ""))
        space = avro_type.get("namespace", namespace)
        full = name if "." in name or not space else f"{space}.{name}"
        named.setdefault(full, avro_type)
        if seen.count(full) >= MAX_RECURSION:
            cutoffs.append(path)
            return
        for field in avro_type.get("fields", []):
            field_path = (*path, field["name"])
            out.append(_Candidate(field_path, f"{full}.{field['name']}", _avro_kind(field["type"]),
                                  frozenset(field.get("confluent:tags") or [])))
            _walk_avro(field["type"], field_path, space, out, (*seen, full), named, cutoffs)
    elif kind in ("enum", "fixed"):
        name = str(avro_type.get("name", ""))
        space = avro_type.get("namespace", namespace)
        named.setdefault(name if "." in name or not space else f"{space}.{name}", avro_type)
    elif kind == "array":
        _walk_avro(avro_type.get("items"), (*path, "[]"), namespace, out, seen, named, cutoffs)
    elif kind == "map":
        _walk_avro(avro_type.get("values"), (*path, "{}"), namespace, out, seen, named, cutoffs)
    elif isinstance(kind, Mapping | list | str):
        _walk_avro(kind, path, namespace, out, seen, named, cutoffs)


def _json_kind(schema: Mapping[str, Any]) -> Kind | None:
    kind = schema.get("type")
    if kind == "string" or (isinstance(kind, list) and set(kind) - {"null"} == {"string"}):
        return "string"
    return None


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


def _peek(schema: Any, root: Mapping[str, Any]) -> Any:
    """The schema a property stands for (one `$ref` followed), to read its type and tags."""
    if isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str):
        return _json_pointer(schema["$ref"], root)
    return schema


def _walk_json(
    schema: Any, path: Path, out: list[_Candidate], root: Mapping[str, Any], refs: tuple[str, ...],
    cutoffs: list[Path], exclusions: dict[Path, frozenset[str]],
) -> None:
    """Lists the properties under `schema`; a `$ref` met `MAX_RECURSION` times on one path stops
    the walk there (a cutoff) so recursive schemas stay finite."""
    if isinstance(schema, Mapping) and "$ref" in schema:
        ref = schema["$ref"]
        if not isinstance(ref, str):
            raise EncryptionError("schema has a non-string $ref")
        if refs.count(ref) >= MAX_RECURSION:
            cutoffs.append(path)
            return
        schema, refs = _json_pointer(ref, root), (*refs, ref)
    if not isinstance(schema, Mapping):
        return
    for name, sub in (schema.get("properties") or {}).items():
        target = _peek(sub, root)
        if not isinstance(target, Mapping):
            continue
        field_path = (*path, name)
        inline = set(target.get("confluent:tags") or []) | set(
            (sub.get("confluent:tags") or []) if isinstance(sub, Mapping) else [])
        out.append(_Candidate(field_path, ".".join(field_path), _json_kind(target), frozenset(inline)))
        _walk_json(sub, field_path, out, root, refs, cutoffs, exclusions)
    items = schema.get("items")
    if isinstance(items, Mapping):
        _walk_json(items, (*path, "[]"), out, root, refs, cutoffs, exclusions)
    additional = schema.get("additionalProperties")
    if isinstance(additional, Mapping):
        declared = frozenset(schema.get("properties") or {})
        if declared:
            exclusions[(*path, "{}")] = declared | exclusions.get((*path, "{}"), frozenset())
        _walk_json(additional, (*path, "{}"), out, root, refs, cutoffs, exclusions)
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key) or []:
            _walk_json(sub, path, out, root, refs, cutoffs, exclusions)


Exclusions = Mapping[Path, frozenset[str]]


def _transform(
    obj: Any, path: Path, change: Callable[[Any], Any], exclusions: Exclusions, prefix: Path = ()
) -> Any:
    """A copy of `obj` with the values at `path` replaced by `change(value)`; other parts are shared.
    Under a "{}" segment, keys in `exclusions[prefix + "{}"]` (declared JSON properties) are skipped."""
    if obj is None:
        return None
    if not path:
        return change(obj)
    head, rest = path[0], path[1:]
    where = (*prefix, head)
    if head == "[]":
        return [_transform(item, rest, change, exclusions, where) for item in obj] if isinstance(obj, list) else obj
    if head == "{}":
        if not isinstance(obj, dict):
            return obj
        skip = exclusions.get(where, frozenset())
        return {k: v if k in skip else _transform(v, rest, change, exclusions, where) for k, v in obj.items()}
    if isinstance(obj, dict) and head in obj:
        copy = dict(obj)
        copy[head] = _transform(obj[head], rest, change, exclusions, where)
        return copy
    return obj


def _values_at(obj: Any, path: Path, exclusions: Exclusions, prefix: Path = ()) -> Iterable[Any]:
    if obj is None:
        return
    if not path:
        yield obj
        return
    head, rest = path[0], path[1:]
    where = (*prefix, head)
    if head == "[]":
        children: Iterable[Any] = obj if isinstance(obj, list) else ()
    elif head == "{}":
        skip = exclusions.get(where, frozenset())
        children = [v for k, v in obj.items() if k not in skip] if isinstance(obj, dict) else ()
    else:
        children = (obj[head],) if isinstance(obj, dict) and head in obj else ()
    for child in children:
        yield from _values_at(child, rest, exclusions, where)


class _DeterministicKeys:
    def __init__(self, kms: Kms, retry: RetryPolicy, now: Callable[[], float] = time.monotonic) -> None:
        self.kms = kms
        self.retry = retry
        self._ciphers: dict[str, AESSIV] = {}  # only KEKs the KMS knows: bounded by them
        self.refusals = Refusals(60.0, 1000, now)

    def cipher(self, key_name: str) -> AESSIV:
        cipher = self._ciphers.get(key_name)
        if cipher is None:
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
            cipher = self._ciphers[key_name] = AESSIV(key)
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
    ) -> None:
        self.policy = policy
        self.inner = inner
        self.key_name = key_name
        self.issuer = DataKeyIssuer(kms, data_keys, retry)
        # One sealer per KEK: a rule's `encrypt.kek.name`, else `key_name`.
        self._sealers = {
            kek: PayloadSealer(self.issuer, kek) for kek in {rule.kek or key_name for rule in policy.rules}
        }
        self._siv = _DeterministicKeys(kms, self.issuer.retry)
        self._tags = {rule.path: b"F" + rule.name.encode("utf-8") + b"\0" for rule in policy.rules}

    def __repr__(self) -> str:
        return f"FieldEncryptingSerializer(key_name={self.key_name!r}, policy={self.policy!r})"

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> Any:
        if ctx is None:
            raise EncryptionError("FieldEncryptingSerializer needs the SerializationContext")
        if obj is not None:
            for cutoff in self.policy.cutoffs:
                if any(value is not None for value in _values_at(obj, cutoff, self.policy.exclusions)):
                    raise EncryptionError(
                        f"record nests deeper than {MAX_RECURSION} levels of a recursive type at "
                        f"{'.'.join(cutoff)!r}: its tagged fields there would not be encrypted"
                    )
            for rule in self.policy.rules:
                obj = _transform(obj, rule.path, partial(self._encrypt, rule=rule, topic=ctx.topic),
                                 self.policy.exclusions)
        return self.inner(obj, ctx) if self.inner is not None else obj

    def _encrypt(self, value: Any, rule: FieldRule, topic: str) -> Any:
        plaintext = _field_bytes(value, rule)
        kek = rule.kek or self.key_name
        if rule.deterministic:
            name = kek.encode("utf-8")
            sealed = DETERMINISTIC_MAGIC + bytes((len(name),)) + name + self._siv.cipher(kek).encrypt(
                plaintext, [_FIELD_AAD + rule.name.encode("utf-8")]
            )
        else:
            header, ciphertext = self._sealers[kek].seal(0, self._tags[rule.path], topic, None, plaintext)
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
    ) -> None:
        self.policy = policy
        self.inner = inner
        self.cache = cache if cache is not None else DataKeyCache(kms, retry=retry, unwrap_limit=unwrap_limit)
        self._opener = PayloadOpener(self.cache)
        self._siv = _DeterministicKeys(kms, self.cache.retry, self.cache.now)
        self._tags = {rule.path: b"F" + rule.name.encode("utf-8") + b"\0" for rule in policy.rules}

    def __repr__(self) -> str:
        return f"FieldDecryptingDeserializer(policy={self.policy!r})"

    def __call__(self, data: Any, ctx: SerializationContext | None = None) -> Any:
        if ctx is None:
            raise DecryptionError("FieldDecryptingDeserializer needs the SerializationContext")
        obj = self.inner(data, ctx) if self.inner is not None else data
        try:
            for rule in self.policy.rules:
                obj = _transform(obj, rule.path, partial(self._decrypt, rule=rule, topic=ctx.topic),
                                 self.policy.exclusions)
        except DecryptionError as exc:
            raise exc.located(**record_location(ctx)) from exc.__cause__
        return obj

    def _decrypt(self, value: Any, rule: FieldRule, topic: str) -> Any:
        try:
            if rule.kind == "string":
                sealed = base64.b64decode(value, validate=True)
            elif isinstance(value, bytes | bytearray | memoryview):
                sealed = bytes(value)
            else:  # not bytes(value): bytes(10**10) allocates ten gigabytes of zeros
                raise TypeError(type(value).__name__)
        except (binascii.Error, TypeError, ValueError) as exc:
            raise DecryptionError(f"field {rule.name!r} is not encrypted") from exc
        if sealed[: len(DETERMINISTIC_MAGIC)] == DETERMINISTIC_MAGIC:
            plaintext = self._open_deterministic(sealed, rule)
        else:
            try:
                header, ciphertext = split_envelope(sealed)
            except DecryptionError as exc:
                raise DecryptionError(f"field {rule.name!r} is not encrypted") from exc
            plaintext = self._opener.open(header, ciphertext, self._tags[rule.path], topic, None)
        if rule.kind == "string":
            try:
                return plaintext.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DecryptionError(f"field {rule.name!r} does not decrypt to text") from exc
        return plaintext

    def _open_deterministic(self, sealed: bytes, rule: FieldRule) -> bytes:
        start = len(DETERMINISTIC_MAGIC)
        if len(sealed) < start + 2:
            raise DecryptionError(f"field {rule.name!r}: truncated deterministic ciphertext")
        name_len = sealed[start]
        name = sealed[start + 1 : start + 1 + name_len].decode("utf-8", errors="replace")
        try:
            cipher = self._siv.cipher(name)
        except KmsError as exc:
            raise DecryptionError(f"field {rule.name!r}: key {name!r} is not available: {exc}") from exc
        try:
            return cipher.decrypt(sealed[start + 1 + name_len :], [_FIELD_AAD + rule.name.encode("utf-8")])
        except (InvalidTag, ValueError) as exc:
            raise DecryptionError(f"field {rule.name!r}: authentication failed") from exc
