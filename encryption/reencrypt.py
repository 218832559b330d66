"""Re-encryption after a KEK rotation: rewrite records so they are wrapped by the current KEK version.

Old records stay readable after a rotation anyway (their wrapped data keys name the KEK version); this
is for retiring an old version, e.g. a compacted topic whose records live for ever. `Reencryptor`
rewrites one record (pure apart from KMS calls): it decrypts with the record's own data key and
encrypts the same plaintext under a fresh data key, keeping the form (header or envelope), the
compression flag, key binding, hashed keys (the keyed hash does not change across rotations, and the
rewrite keeps the record's hash scope, per topic or per KEK, so it supersedes the old one under
compaction) and other headers. A signed record is
re-signed only when a signer is given, never stripped silently. A record encrypted under another KEK
is refused, not rewrapped under `key_name` (that would hand it to that KEK's readers). A signer
needs `trusted_signers` too: every record's signature is verified before it is replaced by the
signer's (re-signing an unchecked record would launder a forged one).

`reencrypt_topic` applies it to a whole topic: it reads every partition up to the end offsets seen at
the start, keeps the latest record per key, and produces the rewrites to the same partition. Records
produced concurrently for the same keys may be superseded by a rewrite of an older value: pause the
topic's producers (or run it between their writes) when that matters. It is not atomic: a record
that does not decrypt stops the run, the rewrites before it are delivered and counted in a note on
the error, and a second run skips what is already current. Plaintext exists only in memory, one
record at a time; nothing is written to disk.

Only the latest record of each key is rewritten, so older records (and, per partition, all but the
last record with a null key) keep their old KEK version until compaction removes them: retire a
version only once the topic holds none of its records (compacted, or past its retention).
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.serialization import MessageField
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from encryption.datakeys import DEFAULT_UNWRAP_LIMIT, DataKeyIssuer, DataKeyPolicy, UnwrapLimit
from encryption.envelope import (
    FIELD_FORMAT_VERSION,
    FLAG_COMPRESSED,
    FLAG_KEY_BOUND,
    FORMAT_VERSION,
    HEADER,
    KEY_HEADER,
    MAGIC,
    RECORD_HEADER,
    SIGNATURE_HEADER,
    parse_header,
)
from encryption.errors import DecryptionError, EncryptionError
from encryption.fields import (
    FieldDecryptingDeserializer,
    FieldEncryptingSerializer,
    FieldPolicy,
    FieldRule,
    values_at,
)
from encryption.kms import Kms, WrappedKey
from encryption.retry import RetryPolicy
from encryption.serdes import (
    DecryptingDeserializer,
    EncryptingSerializer,
    Inner,
    KeyHashScope,
    RecordContext,
    RecordKeyDeserializer,
    RecordKeySerializer,
)
from encryption.signing import Signer, header_items

_OURS = frozenset({HEADER, KEY_HEADER, SIGNATURE_HEADER})


def _wrapping_keys(headers: Any, value: bytes | None) -> list[WrappedKey]:
    """The wrapped data keys of the record's encrypted parts (value and protected key)."""
    parts = [val for name, val in header_items(headers) if name in (HEADER, KEY_HEADER) and val]
    if value is not None and value[: len(MAGIC)] == MAGIC:
        parts.append(value[len(MAGIC) :])
    return [parse_header(part)[0].wrapped for part in parts]


@dataclass(frozen=True, slots=True)
class RewrittenRecord:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, str | bytes | None]] = field(repr=False)


class Reencryptor:
    """Rewrites records under the current version of `key_name`.

    Reading old records unwraps their data keys under `unwrap_limit` (`UnwrapLimit`, as consumers do);
    a topic whose latest records hold more distinct data keys than its burst is refused part-way with a
    `DecryptionError` naming the limit: raise it, or pass None, for such a topic you trust."""

    def __init__(
        self,
        kms: Kms,
        key_name: str,
        *,
        signer: Signer | None = None,
        trusted_signers: Mapping[str, Ed25519PublicKey] | None = None,
        policy: DataKeyPolicy | None = None,
        retry: RetryPolicy | None = None,
        unwrap_limit: UnwrapLimit | None = DEFAULT_UNWRAP_LIMIT,
    ) -> None:
        if signer is not None and trusted_signers is None:
            # Re-signing vouches for the record under the operator's key: without checking the old
            # signature first, a record signed by anyone (or with garbage) would come out trusted.
            raise EncryptionError(
                "signer= re-signs signed records, so their signatures must be checked first: pass "
                "trusted_signers= (the producers' public keys) as well"
            )
        self.kms = kms
        self.key_name = key_name
        self.signer = signer
        self._issuer = DataKeyIssuer(kms, policy, retry)
        # Only records under `key_name` are rewritten (`rewrite` refuses the others before reading them).
        self._value_in = DecryptingDeserializer(kms, trusted_signers=trusted_signers, retry=retry,
                                                unwrap_limit=unwrap_limit, kek_names=[key_name])
        self._key_in = RecordKeyDeserializer(kms, retry=retry, cache=self._value_in.cache, kek_names=[key_name])
        self._serializers: dict[tuple[bool, bool, bool, bool], EncryptingSerializer] = {}
        self._key_serializers: dict[KeyHashScope | None, RecordKeySerializer] = {}

    def is_current(self, headers: Any, value: bytes | None) -> bool:
        """True when every encrypted part of the record is wrapped by the current KEK version; False
        also for a value that is not encrypted at all (`rewrite` then refuses it loudly)."""
        current = self.kms.current_version(self.key_name)
        if value is not None and value[: len(MAGIC)] != MAGIC and not any(
            name == HEADER for name, _ in header_items(headers)
        ):
            return False
        return all(
            wrapped.key_name == self.key_name and wrapped.version == current
            for wrapped in _wrapping_keys(headers, value)
        )

    def rewrite(self, topic: str, key: bytes | None, value: bytes | None, headers: Any) -> RewrittenRecord:
        """Decrypts and re-encrypts one record (raises DecryptionError / EncryptionError)."""
        items = header_items(headers)
        for wrapped in _wrapping_keys(items, value):
            if wrapped.key_name != self.key_name:
                # Rewrapping would hand the record to whoever holds `key_name`, not its owner's KEK.
                raise EncryptionError(
                    f"record is encrypted under KEK {wrapped.key_name!r}, not {self.key_name!r}: re-encrypting "
                    "it would change who can read it"
                )
        signed = any(name == SIGNATURE_HEADER for name, _ in items)
        if signed and self.signer is None:
            raise EncryptionError("record is signed: pass signer= to re-sign it after re-encryption")
        ctx = RecordContext(topic, MessageField.KEY, items)
        hashed = any(name == KEY_HEADER for name, _ in items)
        plain_key = self._key_in(key, ctx)
        ctx.field = MessageField.VALUE
        plain_value = self._value_in(value, ctx)

        out_headers: list[tuple[str, str | bytes | None]] = [(n, v) for n, v in items if n not in _OURS]
        out = RecordContext(topic, MessageField.KEY, out_headers)
        # A hashed key keeps its hash (compaction): rewritten in the scope it was hashed in.
        scope = self._hash_scope(topic, key, plain_key) if hashed else None
        new_key = self._key_serializer(scope)(plain_key, out)
        if new_key != key:
            raise EncryptionError("record key changed during re-encryption")
        out.field = MessageField.VALUE
        flags, envelope = self._value_form(value, items)
        serializer = self._serializer(bool(flags & FLAG_COMPRESSED), bool(flags & FLAG_KEY_BOUND), envelope, signed)
        new_value = serializer(plain_value, out)
        return RewrittenRecord(new_key, new_value, out_headers)

    @staticmethod
    def _value_form(value: bytes | None, items: list[tuple[str, bytes | None]]) -> tuple[int, bool]:
        if value is None:
            return 0, False
        header = next((v for n, v in items if n == HEADER and v), None)
        if header is not None:
            return parse_header(header)[0].flags, False
        return parse_header(value, len(MAGIC))[0].flags, True

    def _hash_scope(self, topic: str, key: bytes | None, original: Any) -> KeyHashScope:
        """Which `hash_keys` scope the record's key was hashed in: the one whose hash of its original it is."""
        if isinstance(key, bytes) and isinstance(original, bytes):
            for scope in ("topic", "kek"):
                if hmac.compare_digest(self._key_serializer(scope).key_hash(topic, original), key):
                    return scope
        raise EncryptionError(
            "record's hashed key is not the per-topic or per-KEK hash of its protected original under "
            f"{self.key_name!r}: rewriting it would change the key")

    def _key_serializer(self, scope: KeyHashScope | None) -> RecordKeySerializer:
        serializer = self._key_serializers.get(scope)
        if serializer is None:
            serializer = self._key_serializers[scope] = RecordKeySerializer(
                self.kms, self.key_name, hash_keys=scope or False, issuer=self._issuer
            )
        return serializer

    def _serializer(self, compress: bool, bind: bool, envelope: bool, signed: bool) -> EncryptingSerializer:
        shape = (compress, bind, envelope, signed)
        serializer = self._serializers.get(shape)
        if serializer is None:
            serializer = self._serializers[shape] = EncryptingSerializer(
                self.kms, self.key_name, compress=compress, bind_key=bind, envelope=envelope,
                signer=self.signer if signed else None, issuer=self._issuer,
            )
        return serializer


class FieldReencryptor:
    """Rewrites records of field-level encryption (`encryption.fields`) in field format version 2.

    For the migration from format version 1 (fields not bound to their record) and after a KEK
    rotation: every randomized field is decrypted (version 1 accepted here, and only here) and sealed
    again under the current version of its KEK, bound to a fresh record identifier (`kgov.enc.rec`);
    deterministic fields are sealed again too (the same ciphertext: their key is derived from the KEK
    and survives rotation). `deserializer` and `serializer` are the topic's inner serdes around the
    record dict (for `reencrypt_topic`, which produces bytes: e.g. the Avro ones); None passes the
    record dict itself (callers by hand). The Kafka key, key binding (`bind_key`) and other headers
    are kept. Only records
    under `key_name` and the KEKs the policy's rules name are read; a signed record is refused (its
    signature would not cover the rewrite). As for `Reencryptor`, make it after a rotation: its data
    keys stay wrapped by the KEK version current when they were made."""

    def __init__(
        self,
        kms: Kms,
        key_name: str,
        policy: FieldPolicy,
        *,
        deserializer: Inner | None = None,
        serializer: Inner | None = None,
        data_keys: DataKeyPolicy | None = None,
        retry: RetryPolicy | None = None,
        unwrap_limit: UnwrapLimit | None = DEFAULT_UNWRAP_LIMIT,
    ) -> None:
        self.kms = kms
        self.policy = policy
        keks = {key_name} | {rule.kek for rule in policy.rules if rule.kek is not None}
        # The record is decoded by `deserializer` here, so the reader checks the dict against the schema.
        self._reader = FieldDecryptingDeserializer(
            kms, policy, retry=retry, unwrap_limit=unwrap_limit, kek_names=sorted(keks), accept_unbound_fields=True)
        # Key-bound records (FieldEncryptingSerializer(bind_key=True)) stay key-bound.
        self._writers = {bound: FieldEncryptingSerializer(kms, key_name, policy, serializer, data_keys=data_keys,
                                                          retry=retry, bind_key=bound) for bound in (False, True)}
        self._inner_in = deserializer
        self._key_name = key_name

    def is_current(self, headers: Any, value: Any) -> bool:
        """True when the record carries its identifier and every randomized field is of format version 2
        under the current version of its KEK (read from the fields' headers, nothing decrypted)."""
        if value is None:
            return True
        items = header_items(headers)
        if not any(name == RECORD_HEADER for name, _ in items):
            return not any(not rule.deterministic for rule in self.policy.rules)
        record = self._decoded(value, RecordContext("", MessageField.VALUE, items))
        for rule, raw in self._sealed_fields(record):
            if raw is None:
                return False  # `rewrite` says what is wrong with it
            parsed, _ = parse_header(raw, len(MAGIC), _FIELD_VERSIONS)
            kek = parsed.wrapped.key_name
            if (raw[len(MAGIC)] != FIELD_FORMAT_VERSION or kek != (rule.kek or self._key_name)
                    or parsed.wrapped.version != self.kms.current_version(kek)):
                return False
        return True

    def rewrite(self, topic: str, key: bytes | None, value: Any, headers: Any) -> RewrittenRecord:
        """Decrypts and re-encrypts one record (raises DecryptionError / EncryptionError)."""
        items = header_items(headers)
        if any(name == SIGNATURE_HEADER for name, _ in items):
            raise EncryptionError("record is signed: field-level records are rewritten unsigned, so it is refused")
        ctx = RecordContext(topic, MessageField.VALUE, items, key=key)
        record = self._decoded(value, ctx)
        plain = self._reader(record, ctx)
        bound = any(raw is not None and raw[len(MAGIC) + 1] & FLAG_KEY_BOUND for _, raw in self._sealed_fields(record))
        out_headers: list[tuple[str, str | bytes | None]] = [(n, v) for n, v in items if n != RECORD_HEADER]
        new_value = self._writers[bound](plain, RecordContext(topic, MessageField.VALUE, out_headers, key=key))
        return RewrittenRecord(key, new_value, out_headers)

    def _decoded(self, value: Any, ctx: RecordContext) -> Any:
        return self._inner_in(value, ctx) if self._inner_in is not None and value is not None else value

    def _sealed_fields(self, record: Any) -> Iterator[tuple[FieldRule, bytes | None]]:
        """Each randomized field of `record` as its envelope bytes (None: not a well-formed envelope)."""
        for rule in self.policy.rules:
            if rule.deterministic:
                continue
            for sealed in values_at(record, rule.path, self.policy.exclusions):
                if sealed is None:
                    continue
                try:
                    if rule.kind == "string":
                        raw = base64.b64decode(sealed, validate=True)
                    elif isinstance(sealed, bytes | bytearray | memoryview):
                        raw = bytes(sealed)
                    else:  # not bytes(sealed): bytes(10**10) allocates ten gigabytes
                        raise TypeError(type(sealed).__name__)
                    parse_header(raw, len(MAGIC), _FIELD_VERSIONS)
                except (binascii.Error, TypeError, ValueError, DecryptionError):
                    yield rule, None
                    continue
                yield rule, raw


_FIELD_VERSIONS = (FORMAT_VERSION, FIELD_FORMAT_VERSION)


@dataclass(frozen=True, slots=True)
class ReencryptionReport:
    read: int
    rewritten: int
    already_current: int
    tombstones: int


def reencrypt_topic(
    client_config: Mapping[str, Any],
    topic: str,
    reencryptor: Reencryptor | FieldReencryptor,
    *,
    timeout: float = 30.0,
) -> ReencryptionReport:
    """Rewrites the latest record of every key of `topic` that is not under the current KEK version (with a
    `FieldReencryptor`: not in field format version 2 under the current versions). The reading consumer's
    group (`group.id` in `client_config`, default `kgov-reencrypt-<topic>`) needs READ, as the topic does:
    a read that fails is an `EncryptionError` naming both, before anything is rewritten."""
    # The end of each partition comes from Fetch (partition EOF), not ListOffsets: some Kafka-compatible
    # brokers (Tansu) count ListOffsets' high watermark in batches, not records.
    # librdkafka asks for the group's coordinator even for assigned partitions, so the group needs READ.
    group = str(client_config.get("group.id", f"kgov-reencrypt-{topic}"))
    consumer = Consumer({
        **client_config,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    })
    latest: dict[tuple[int, bytes | None], Any] = {}
    read = 0
    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
        partitions = sorted(metadata.topics[topic].partitions) if topic in metadata.topics else []
        if not partitions or metadata.topics[topic].error is not None:
            raise EncryptionError(f"topic {topic!r} does not exist")
        pending = set(partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        while pending:
            msg = consumer.poll(timeout)
            if msg is None:
                raise EncryptionError(f"timed out reading {topic!r} for re-encryption")
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                    continue
                raise EncryptionError(
                    f"cannot read {topic!r} for re-encryption as consumer group {group!r} ({error.name()}: "
                    f"{error.str()}); the principal needs READ on the topic and on that group"
                ) from KafkaException(error)
            read += 1
            latest[(int(msg.partition() or 0), msg.key())] = msg
    finally:
        consumer.close()

    producer = Producer({k: v for k, v in client_config.items() if k not in ("group.id", "auto.offset.reset")})
    rewritten = current = tombstones = 0
    errors: list[str] = []
    try:
        for (partition, _), msg in latest.items():
            if msg.value() is None:
                tombstones += 1
                continue
            try:
                if reencryptor.is_current(msg.headers(), msg.value()):
                    current += 1
                    continue
                record = reencryptor.rewrite(topic, msg.key(), msg.value(), msg.headers())
            except DecryptionError as exc:
                raise exc.located(topic=topic, partition=partition, offset=msg.offset()) from exc.__cause__
            producer.produce(topic, value=record.value, key=record.key, headers=list(record.headers),
                             partition=partition,
                             on_delivery=lambda err, _msg: errors.append(str(err)) if err else None)
            rewritten += 1
            producer.poll(0)
    except Exception as exc:
        # Stopped part-way (a record that does not decrypt, a KMS outage): deliver what was rewritten
        # before it, so a second run (which skips current records) starts from a known state, and say so.
        undelivered = producer.flush(timeout) + len(errors)
        exc.add_note(
            f"{rewritten} records rewritten before the failure"
            + (f", {undelivered} of them not delivered" if undelivered else ", all delivered")
            + "; records are rewritten one by one, so run it again once the cause is fixed"
        )
        raise
    if producer.flush(timeout) != 0 or errors:
        raise EncryptionError(f"re-encrypted records were not all delivered: {errors[:3]}")
    return ReencryptionReport(read=read, rewritten=rewritten, already_current=current, tombstones=tombstones)
