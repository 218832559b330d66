"""confluent-kafka serializers and deserializers that encrypt record values (and protect keys).

Producer side::

    producer = SerializingProducer(check_serializer_pairing({
        "bootstrap.servers": ...,
        "key.serializer": RecordKeySerializer(kms, "orders", StringSerializer()),  # bind_key needs it
        "value.serializer": EncryptingSerializer(kms, "orders", StringSerializer()),
    }))
    producer.produce("orders", key="k", value="v", headers=[])   # a fresh list per record

Consumer side: `DecryptingDeserializer(kms, StringDeserializer(), kek_names=["orders"])` as
`value.deserializer` and `RecordKeyDeserializer(kms, StringDeserializer(), kek_names=["orders"])` as
`key.deserializer` (needed when keys are hashed or bound into the ciphertext), or call
`DecryptingDeserializer.decrypt_message(msg)` on raw messages, which also names partition and offset
in errors. `kek_names` refuses records under any other KEK the KMS serves (docs/encryption.md).

What travels where is described in `encryption.envelope`. confluent-kafka passes one
SerializationContext to the key and then the value (de)serializer of a record; the key side leaves
the wire key on it (attribute `kgov_wire_key`) so the value side can bind or sign it.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import logging
import zlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal, cast

from confluent_kafka.serialization import MessageField, SerializationContext
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from encryption.datakeys import (
    DEFAULT_UNWRAP_LIMIT,
    ActiveDataKey,
    DataKeyCache,
    DataKeyIssuer,
    DataKeyPolicy,
    ForgetsKeysOnFork,
    UnwrapLimit,
)
from encryption.envelope import (
    FIELD_FORMAT_VERSION,
    FIELD_KEY,
    FIELD_VALUE,
    FLAG_COMPRESSED,
    FLAG_KEY_BOUND,
    FORMAT_VERSION,
    HEADER,
    KEY_HEADER,
    KNOWN_FLAGS,
    MAGIC,
    NO_KEY,
    NONCE_SIZE,
    SIGNATURE_HEADER,
    aad_suffix,
    key_tail,
    parse_header,
)
from encryption.errors import DecryptionError, EncryptionError, KmsError
from encryption.kms import Kms, check_key_name
from encryption.retry import RetryPolicy, call_with_retry
from encryption.signing import Signer, verify_signature

WIRE_KEY_ATTR: Final = "kgov_wire_key"
_VALUE: Final = MessageField.VALUE
_UNKNOWN: Final = object()  # no key serializer left the record's key on the context
UNKNOWN_KEY: Final = _UNKNOWN  # what `wire_key` answers then
UNKNOWN_KEY_MESSAGE: Final = (
    "bind_key=True but the record's Kafka key is not known, so the record would not be bound to it: "
    "use RecordKeySerializer as key serializer (also for null keys) or pass a RecordContext(key=...); "
    "or pass bind_key=False to write records not bound to their key"
)
# Parts of a header (see encryption.envelope) as ready slices for the inlined decrypting path.
_BEFORE_NONCE: Final = slice(None, -NONCE_SIZE)  # version, flags, KEK name and version, wrapped data key
_NONCE_PART: Final = slice(-NONCE_SIZE, None)
_NOTHING_READ: Final = (None, 0, None)  # DecryptingDeserializer._last before the first record
_READABLE_VERSIONS: Final = (FORMAT_VERSION, FIELD_FORMAT_VERSION)
# A decompression bomb must not take the consumer down: payloads inflate to at most this.
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024

Inner = Callable[[Any, SerializationContext | None], Any]


class RecordContext(SerializationContext):
    """A SerializationContext that also knows the record's key, partition and offset.

    Pass it when calling the serdes by hand; `DecryptingDeserializer.decrypt_message` builds one.
    """

    def __init__(
        self,
        topic: str,
        field: MessageField,
        headers: Any = None,
        *,
        key: object = _UNKNOWN,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        super().__init__(topic, field, headers)
        if key is not _UNKNOWN:
            if key is not None and not isinstance(key, bytes | bytearray | memoryview):
                raise EncryptionError(
                    f"RecordContext(key=...) takes the record's key as written to Kafka (bytes, or None), "
                    f"got {type(key).__name__}: serialize it first"
                )
            setattr(self, WIRE_KEY_ATTR, key)
        self.partition = partition
        self.offset = offset


def _as_bytes(data: Any, what: str) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise EncryptionError(
        f"{what} must be bytes after the inner serializer, got {type(data).__name__}: pass inner= "
        "(e.g. confluent_kafka.serialization.StringSerializer())"
    )


def add_header(headers: Any, name: str, value: bytes) -> None:
    if isinstance(headers, list):
        for existing in headers:
            if existing[0] == name:
                raise EncryptionError(
                    f"record headers already carry {name!r}: pass a fresh headers list for every record"
                )
        headers.append((name, value))
    elif isinstance(headers, dict):
        if name in headers:
            raise EncryptionError(f"record headers already carry {name!r}: pass fresh headers per record")
        headers[name] = value
    else:
        raise EncryptionError("record headers must be a list of (name, value) tuples or a dict")


def find_header(headers: Any, name: str) -> bytes | None:
    if not headers:
        return None
    if isinstance(headers, dict):
        value = headers.get(name)
    else:
        value = None
        found = False
        for item in headers:
            if item[0] == name:
                if found:  # also when the first copy had a null value
                    raise DecryptionError(f"record carries more than one {name!r} header")
                found = True
                value = item[1]
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytearray | memoryview):  # hand-built headers; consumed ones are bytes
        return bytes(value)
    raise DecryptionError(f"record header {name!r} must be bytes, got {type(value).__name__}")


def wire_key(ctx: SerializationContext) -> Any:
    """The record's Kafka key as written (bytes or None) that a key (de)serializer left on `ctx`, else
    `UNKNOWN_KEY`."""
    return getattr(ctx, WIRE_KEY_ATTR, _UNKNOWN)


def record_location(ctx: SerializationContext | None) -> dict[str, Any]:
    return {
        "topic": getattr(ctx, "topic", None),
        "partition": getattr(ctx, "partition", None),
        "offset": getattr(ctx, "offset", None),
    }


class AadSuffixes:
    """Associated-data suffixes (field tag, topic) by topic, computed once per topic."""

    def __init__(self) -> None:
        self._by_field: dict[tuple[bytes, str], bytes] = {}
        self.values: dict[str, bytes] = {}  # topic -> suffix of record values, read by the inlined paths

    def get(self, field_tag: bytes, topic: str) -> bytes:
        suffix = self._by_field.get((field_tag, topic))
        if suffix is None:
            try:
                suffix = aad_suffix(field_tag, topic.encode("utf-8"))
            except ValueError as exc:
                raise EncryptionError(str(exc)) from exc
            self._by_field[(field_tag, topic)] = suffix
            if field_tag == FIELD_VALUE:
                self.values[topic] = suffix
        return suffix


class PayloadSealer(ForgetsKeysOnFork):
    """Encrypts payloads under the active data key of one KEK (the producer's general path)."""

    def __init__(self, issuer: DataKeyIssuer, key_name: str) -> None:
        super().__init__()
        self.issuer = issuer
        self.key_name = key_name
        self.suffixes = AadSuffixes()
        self.active: ActiveDataKey | None = None
        # (nonces, clock, expiry, header prefixes, encrypt, value suffixes) of the active key for
        # the inlined path of EncryptingSerializer.__call__; None until a key is active or when disabled.
        self.hot: tuple[Any, ...] | None = None
        self.hot_enabled = False

    def forget_keys(self) -> None:
        self.hot = None
        self.active = None

    def _fresh(self, spent: ActiveDataKey | None) -> tuple[ActiveDataKey, bytes]:
        while True:
            active = self.active = self.issuer.replace(self.key_name, spent)
            if self.hot_enabled:
                self.hot = (
                    active.nonces, active.now, active.expires, active.prefixes, active.aead.encrypt,
                    self.suffixes.values,
                )
            nonce = active.next_nonce()
            if nonce is not None:
                return active, nonce
            spent = active

    def seal(
        self, flags: int, field_tag: bytes, topic: str, key: Any, plaintext: bytes, record: bytes | None = None
    ) -> tuple[bytes, bytes]:
        """`record`: for a field of format version 2, its record identifier and concrete position
        (`encryption.fields`), appended to the associated data; None: a format version 1 ciphertext."""
        suffix = self.suffixes.get(field_tag, topic)
        active = self.active
        if active is None or (nonce := active.next_nonce()) is None:
            active, nonce = self._fresh(active)
        if record is not None:
            header = active.field_prefixes[flags] + nonce
            tail = key_tail(key) + record if flags & FLAG_KEY_BOUND else record
            return header, active.aead.encrypt(nonce, plaintext, header + suffix + tail)
        header = active.prefixes[flags] + nonce
        aad = header + suffix + key_tail(key) if flags & FLAG_KEY_BOUND else header + suffix
        return header, active.aead.encrypt(nonce, plaintext, aad)


class AnyKek(enum.Enum):
    """`kek_names=ANY_KEK`: a consumer accepts records under any KEK its KMS serves, on purpose."""

    ANY = "any"


ANY_KEK: Final = AnyKek.ANY
KekNames = Iterable[str] | AnyKek | None
_LOG = logging.getLogger("encryption")
_WARNED: set[str] = set()  # what this process has warned of, once each
KeyHashScope = Literal["topic", "kek"]
# One secret per scope (different derivation labels): the two hashes of a key are independent.
_KEY_HASH_LABELS: Final[dict[KeyHashScope, bytes]] = {"kek": b"key-hash", "topic": b"key-hash-topic"}


def accepted_keks(kek_names: KekNames, consumer: str, *, warn: bool = True) -> frozenset[bytes] | None:
    """A consumer's `kek_names` as the UTF-8 names a header carries (None: any KEK).

    Absent (None), any KEK is accepted as before 2026-11-22, and the first `consumer` of its kind in the
    process logs a warning saying how to choose (`warn=False`: it has its KEKs from elsewhere). Refusing
    would break every consumer built without it; `ANY_KEK` says "any" on purpose, without the warning."""
    if kek_names is ANY_KEK:
        return None
    if kek_names is None:
        if warn and consumer not in _WARNED:
            _WARNED.add(consumer)
            _LOG.warning(
                "%s without kek_names accepts records under every KEK its KMS serves, so whoever may wrap data "
                "keys under any of them (another topic's producers) can write records it reads: pass "
                "kek_names=[...] (the KEKs of its topics), or kek_names=ANY_KEK to accept any on purpose "
                "(docs/encryption.md, 'Which KEKs a consumer accepts')", consumer)
        return None
    if isinstance(kek_names, str):
        raise EncryptionError("kek_names takes a collection of KEK names, not one string")
    return frozenset(check_key_name(name).encode("utf-8") for name in kek_names)


def check_kek_accepted(accepted: frozenset[bytes] | None, name: bytes) -> None:
    """Refuses a record naming a KEK outside `accepted`: whoever may wrap under that KEK wrote it."""
    if accepted is not None and name not in accepted:
        shown = name.decode("utf-8", errors="replace")
        raise DecryptionError(f"record is encrypted under KEK {shown!r}, which this consumer does not accept (kek_names)")


class PayloadOpener:
    """Decrypts payloads given their header (the consumer's hot path)."""

    def __init__(
        self,
        cache: DataKeyCache,
        max_inflated_bytes: int = MAX_DECOMPRESSED_BYTES,
        kek_names: frozenset[bytes] | None = None,
    ) -> None:
        self.cache = cache
        self.max_inflated_bytes = max_inflated_bytes
        self.suffixes = AadSuffixes()
        self.kek_names = kek_names

    def open(
        self, header: bytes, ciphertext: bytes, field_tag: bytes, topic: str, key: Any, record: bytes | None = None
    ) -> bytes:
        """`record`: as for `PayloadSealer.seal`; given, the header must be of format version 2, else 1."""
        version = FORMAT_VERSION if record is None else FIELD_FORMAT_VERSION
        if len(header) < 2 + NONCE_SIZE or header[0] != version:
            if header and header[0] != version:
                raise DecryptionError(f"unknown encryption format version {header[0]}")
            raise DecryptionError("truncated encryption header")
        flags = header[1]
        if flags & ~KNOWN_FLAGS:
            raise DecryptionError(f"unknown encryption flags 0x{flags:02x}")
        if self.kek_names is not None:  # before the cache: a shared cache holds other consumers' KEKs too
            check_kek_accepted(self.kek_names, header[3 : 3 + header[2]])
        aead = self.cache.get(header[2:-NONCE_SIZE])
        if aead is None:
            aead = self._load(header)
        suffix = self.suffixes.get(field_tag, topic)
        if flags & FLAG_KEY_BOUND:
            if key is _UNKNOWN:
                raise DecryptionError(
                    "record is bound to its Kafka key, which this deserializer was not given: use "
                    "RecordKeyDeserializer as key deserializer, or DecryptingDeserializer.decrypt_message(msg)"
                )
            aad = header + suffix + key_tail(key)
        else:
            aad = header + suffix
        if record is not None:
            aad += record
        try:
            plaintext: bytes = aead.decrypt(header[-NONCE_SIZE:], ciphertext, aad)
        except (InvalidTag, ValueError) as exc:
            raise DecryptionError(
                "authentication failed: wrong key, tampered record, or record moved to another topic or key"
            ) from exc
        if flags & FLAG_COMPRESSED:
            plaintext = _inflate(plaintext, self.max_inflated_bytes)
        return plaintext

    def _load(self, header: bytes) -> AESGCM:
        parsed, end = parse_header(header, versions=_READABLE_VERSIONS)  # `open` checked which one
        if end != len(header):
            raise DecryptionError("malformed encryption header")
        try:
            return self.cache.load(parsed.cache_key, parsed.wrapped)
        except KmsError as exc:
            raise DecryptionError(
                f"data key of KEK {parsed.wrapped.key_name!r} v{parsed.wrapped.version} cannot be "
                f"unwrapped: {exc}"
            ) from exc


def _inflate(compressed: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj()
    try:
        plaintext = inflater.decompress(compressed, limit)
    except zlib.error as exc:
        raise DecryptionError("compressed payload is corrupt") from exc
    if inflater.unconsumed_tail or not inflater.eof:
        raise DecryptionError(f"payload inflates beyond {limit} bytes or is truncated")
    return plaintext


def split_envelope(data: bytes, versions: tuple[int, ...] = (FORMAT_VERSION,)) -> tuple[bytes, bytes]:
    """(header, ciphertext) of a self-contained envelope of one of the format `versions`."""
    if data[: len(MAGIC)] != MAGIC:
        raise DecryptionError("record is not encrypted (no kgov.enc header and no kgov envelope)")
    _, end = parse_header(data, len(MAGIC), versions)
    return data[len(MAGIC) : end], data[end:]


class EncryptingSerializer:
    """Encrypts record values (envelope encryption, AES-256-GCM) after the `inner` serializer.

    - `key_name`: the KEK in `kms` that wraps the data keys. It must exist (`kms.create_key`): a
      missing key is an error, never a plaintext record.
    - Header form when the record has headers (`produce(..., headers=[])`), else the self-contained
      envelope form; `envelope=True` forces the envelope form.
    - `compress=True`: zlib before encrypting. Off by default: compressed length can leak content
      (CRIME-style) when attacker-chosen and secret data share a record.
    - `bind_key` (default True): bind the Kafka key into the associated data, so a value copied onto
      another key fails to decrypt. The key must be known: `RecordKeySerializer` as key serializer (it
      leaves the wire key on the context; also for null keys) or a `RecordContext(key=...)`. A record
      whose key is not known is refused with `EncryptionError`, never written unbound; check the
      pairing before the first record with `check_serializer_pairing(config)`. `bind_key=False`
      writes records not bound to their key. Consumers of bound records need `RecordKeyDeserializer`
      or `decrypt_message`.
    - `signer`: add an Ed25519 signature over topic, key, value and headers (needs headers and a known key).
    - Tombstones (None) stay None and are never encrypted, so compaction keeps working.
    """

    def __init__(
        self,
        kms: Kms,
        key_name: str,
        inner: Inner | None = None,
        *,
        compress: bool = False,
        bind_key: bool = True,
        envelope: bool = False,
        signer: Signer | None = None,
        policy: DataKeyPolicy | None = None,
        retry: RetryPolicy | None = None,
        issuer: DataKeyIssuer | None = None,
    ) -> None:
        self.issuer = issuer or DataKeyIssuer(kms, policy, retry)
        self._sealer = PayloadSealer(self.issuer, key_name)
        self.key_name = key_name
        self.inner = inner
        self.compress = compress
        self.bind_key = bind_key
        self.envelope = envelope
        self.signer = signer
        self._sealer.hot_enabled = not compress and not envelope and signer is None

    def __repr__(self) -> str:
        return f"EncryptingSerializer(key_name={self.key_name!r}, compress={self.compress})"

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        if ctx is None:
            raise EncryptionError("EncryptingSerializer needs the SerializationContext: the topic is bound in")
        if ctx.field is not _VALUE and str(ctx.field) != "value":  # a plain "value" string is fine too
            raise EncryptionError("EncryptingSerializer encrypts values; use RecordKeySerializer for keys")
        # Callables held in attributes are called through locals: `self.inner(...)` is looked up as a
        # method on every record (CPython 3.11 does not specialise that).
        inner = self.inner
        data = inner(obj, ctx) if inner is not None and obj is not None else obj
        # Hot path, inlined on purpose (each Python call costs ~0.1 us against ~0.7 us of AES at 1 KiB):
        # bytes, header form with no other header yet, no compression or signature. Whatever it does not
        # handle (first record, spent data key, new topic, a key that is not bytes or None) goes through
        # `_encrypt`, the reference path, which also refuses an unknown key. Guard clauses keep every jump
        # short (see DecryptingDeserializer.__call__). The two branches differ only in the flags and the
        # key's tail of the associated data (`envelope.key_tail`, inlined); written out twice so that
        # unbound records pay for no tail. tests/unit/encryption/test_hot_paths.py checks both against
        # `_encrypt` byte for byte.
        hot = self._sealer.hot
        if hot is None or data.__class__ is not bytes:
            return self._encrypt(data, ctx)
        headers = ctx.headers
        if headers.__class__ is not list or headers:
            return self._encrypt(data, ctx)
        if self.bind_key:
            key = getattr(ctx, WIRE_KEY_ATTR, _UNKNOWN)
            if key.__class__ is bytes:
                tail = len(key).to_bytes(4, "big") + key
            elif key is None:
                tail = NO_KEY
            else:
                return self._encrypt(data, ctx)
            nonces, now, expires, prefixes, encrypt, suffixes = hot
            nonce = next(nonces, None)
            if nonce is None or now() >= expires:
                return self._encrypt(data, ctx)
            try:
                suffix = suffixes[ctx.topic]
            except KeyError:  # first record of a topic
                return self._encrypt(data, ctx)
            header = prefixes[FLAG_KEY_BOUND] + nonce
            ciphertext: bytes = encrypt(nonce, data, header + suffix + tail)
        else:
            nonces, now, expires, prefixes, encrypt, suffixes = hot
            nonce = next(nonces, None)
            if nonce is None or now() >= expires:
                return self._encrypt(data, ctx)
            try:
                suffix = suffixes[ctx.topic]
            except KeyError:
                return self._encrypt(data, ctx)
            header = prefixes[0] + nonce
            ciphertext = encrypt(nonce, data, header + suffix)
        headers.append((HEADER, header))
        return ciphertext

    def _encrypt(self, data: Any, ctx: SerializationContext) -> bytes | None:
        key = getattr(ctx, WIRE_KEY_ATTR, _UNKNOWN)
        if data is None:
            if self.signer is not None:
                self._sign(ctx, key, None)
            return None  # a tombstone carries no ciphertext, so nothing to bind
        if self.bind_key and key is _UNKNOWN:
            raise EncryptionError(UNKNOWN_KEY_MESSAGE)
        if data.__class__ is not bytes:
            data = _as_bytes(data, "record value")
        flags = 0
        if self.compress:
            data = zlib.compress(data, 1)
            flags = FLAG_COMPRESSED
        if self.bind_key:
            flags |= FLAG_KEY_BOUND
        header, ciphertext = self._sealer.seal(flags, FIELD_VALUE, ctx.topic, key, data)
        headers = ctx.headers
        if headers is None or self.envelope:
            value = MAGIC + header + ciphertext
        else:
            add_header(headers, HEADER, header)
            value = ciphertext
        if self.signer is not None:
            self._sign(ctx, key, value)
        return value

    def _sign(self, ctx: SerializationContext, key: Any, value: bytes | None) -> None:
        assert self.signer is not None
        if key is _UNKNOWN:
            raise EncryptionError(
                "signatures cover the record key: use RecordKeySerializer as key serializer (or a RecordContext)"
            )
        if ctx.headers is None:
            raise EncryptionError("signatures travel in a header: produce with headers=[]")
        add_header(ctx.headers, SIGNATURE_HEADER, self.signer.signature_header(ctx.topic, key, value, ctx.headers))


class DecryptingDeserializer:
    """Decrypts what `EncryptingSerializer` wrote, then applies the `inner` deserializer.

    Every failure (wrong or missing key, tampering, unknown format, a KMS outage after retries, a
    missing or bad signature when `trusted_signers` is given) raises `DecryptionError`; a record that
    is not encrypted is refused too. Unwrapped data keys are cached (`cache`); KMS unwraps of keys not
    in the cache are limited per KEK (`unwrap_limit`, see `UnwrapLimit`; ignored when `cache` is given). `require_key_bound=True`
    also refuses records not bound to their Kafka key (a value moved onto another key of the topic).
    `kek_names`: the KEKs this consumer accepts records under (e.g. `["orders"]`); a record naming
    another is refused before any KMS call. Without it any KEK the KMS serves is accepted, so whoever
    may wrap under any of them (another topic's producers) can write records this consumer reads; the
    first such consumer logs a warning (`kek_names=ANY_KEK` accepts any on purpose, without it).
    """

    def __init__(
        self,
        kms: Kms,
        inner: Inner | None = None,
        *,
        trusted_signers: Mapping[str, Ed25519PublicKey] | None = None,
        retry: RetryPolicy | None = None,
        cache: DataKeyCache | None = None,
        max_inflated_bytes: int = MAX_DECOMPRESSED_BYTES,
        require_key_bound: bool = False,
        unwrap_limit: UnwrapLimit | None = DEFAULT_UNWRAP_LIMIT,
        kek_names: KekNames = None,
    ) -> None:
        self.cache = cache if cache is not None else DataKeyCache(kms, retry=retry, unwrap_limit=unwrap_limit)
        # A record not bound to its key can be copied onto another key of the same topic and still
        # decrypt; with require_key_bound such records are refused (all producers use RecordKeySerializer).
        self.require_key_bound = require_key_bound
        self.kek_names = accepted_keks(kek_names, "DecryptingDeserializer")
        self._opener = PayloadOpener(self.cache, max_inflated_bytes, self.kek_names)
        self.inner = inner
        self.trusted_signers = dict(trusted_signers) if trusted_signers is not None else None
        self._fast = self.trusted_signers is None
        self._cached_key = self.cache.entries.get  # bound once: a method lookup on an OrderedDict is slow
        self._suffixes = self._opener.suffixes.values
        self._now = self.cache.now
        # (header without its nonce, its flags, the data key's cache entry) of the last record read by
        # the inlined path; forgotten when that data key's time in the cache is up. It may outlive the
        # cache's entry when the cache drops it for room: one data key more in memory, never past its time.
        self._last: tuple[bytes | None, int, Any] = _NOTHING_READ

    def __repr__(self) -> str:
        return f"DecryptingDeserializer(cached_keys={len(self.cache)})"

    def __call__(self, data: bytes | None, ctx: SerializationContext | None = None) -> Any:
        # Hot path, inlined (see EncryptingSerializer.__call__): our header alone, cached data key, no
        # compression, no signatures, a key that is bytes or None when the record is bound to it. Anything
        # else, including a failed tag, takes the general path (`_read`), which raises the documented
        # error. Written as guard clauses: CPython 3.11 specialises a comparison only when the jump after
        # it is short (no EXTENDED_ARG), which nested ifs around the whole path are not.
        if not self._fast or data.__class__ is not bytes or ctx is None:
            return self._read(data, ctx)
        headers = ctx.headers
        if headers.__class__ is not list or len(headers) != 1:
            return self._read(data, ctx)
        name, header = headers[0]
        if name != HEADER or header.__class__ is not bytes:
            return self._read(data, ctx)
        # A producer's records share their header but for the nonce, so the last one read here is
        # remembered (`_last`): comparing with it is cheaper than the cache lookup. Equal to it, or found
        # in the cache, the header is a cache key (8 bytes or more: see `ParsedHeader.cache_key`) after
        # version and flags, and then a 12-byte nonce.
        head = header[_BEFORE_NONCE]
        last = self._last
        if head == last[0]:
            flags, entry = last[1], last[2]
            remember = False
        else:
            entry = self._cached_key(head[2:])  # the cache key: see `ParsedHeader.cache_key`
            if entry is None or header[0] != FORMAT_VERSION:
                return self._read(data, ctx)
            if self.kek_names is not None and head[3 : 3 + head[2]] not in self.kek_names:
                return self._read(data, ctx)  # a KEK this consumer does not accept: refused there
            flags = header[1]
            remember = True
        suffix = self._suffixes.get(ctx.topic)
        if suffix is None:
            return self._read(data, ctx)
        if flags == 0 and not self.require_key_bound:
            aad = header + suffix
        elif flags == FLAG_KEY_BOUND:  # `envelope.key_tail`, inlined
            key: Any = getattr(ctx, WIRE_KEY_ATTR, _UNKNOWN)
            if key.__class__ is bytes:
                aad = header + suffix + len(key).to_bytes(4, "big") + key
            elif key is None:
                aad = header + suffix + NO_KEY
            else:
                return self._read(data, ctx)
        else:
            return self._read(data, ctx)
        now = self._now  # a local: see `inner` in EncryptingSerializer
        if entry[1] <= now():  # the data key's time in the cache is up: the general path reloads it
            self._last = _NOTHING_READ
            return self._read(data, ctx)
        try:
            plaintext: bytes = entry[0].decrypt(header[_NONCE_PART], data, aad)
        except InvalidTag:
            return self._read(data, ctx)
        if remember:  # once a record authenticated under it
            self._last = (head, flags, entry)
        inner = self.inner
        return plaintext if inner is None else inner(plaintext, ctx)

    def _read(self, data: bytes | None, ctx: SerializationContext | None) -> Any:
        """`__call__` by the general path: decrypts (or refuses, naming the record), then `inner`."""
        try:
            plaintext = self._decrypt(data, ctx)
        except DecryptionError as exc:
            raise exc.located(**record_location(ctx)) from exc.__cause__
        if plaintext is None:
            return None
        inner = self.inner
        return inner(plaintext, ctx) if inner is not None else plaintext

    def _decrypt(self, data: bytes | None, ctx: SerializationContext | None) -> bytes | None:
        if ctx is None:
            raise DecryptionError("DecryptingDeserializer needs the SerializationContext (topic, headers)")
        key = getattr(ctx, WIRE_KEY_ATTR, _UNKNOWN)
        headers = ctx.headers
        if self.trusted_signers is not None:
            if key is _UNKNOWN:
                raise DecryptionError(
                    "signature covers the record key, which this deserializer was not given: use "
                    "RecordKeyDeserializer as key deserializer, or decrypt_message(msg)"
                )
            verify_signature(self.trusted_signers, ctx.topic, cast(bytes | None, key), data, headers)
        if data is None:
            return None
        header = find_header(headers, HEADER)
        if header is None:
            header, ciphertext = split_envelope(data)
        else:
            ciphertext = data
        if self.require_key_bound and len(header) > 1 and not header[1] & FLAG_KEY_BOUND:
            raise DecryptionError("record is not bound to its Kafka key but key binding is required")
        return self._opener.open(header, ciphertext, FIELD_VALUE, ctx.topic, key)

    def decrypt_message(self, msg: Any, key_deserializer: RecordKeyDeserializer | None = None) -> Any:
        """Decrypts the value of a raw confluent-kafka `Message`; errors name topic/partition/offset.

        With `key_deserializer`, the key is also decoded (and its protected original restored); the
        result is then `(key, value)`.
        """
        ctx = RecordContext(
            msg.topic(), MessageField.KEY, msg.headers(), partition=msg.partition(), offset=msg.offset()
        )
        key = msg.key()
        decoded_key = key_deserializer(key, ctx) if key_deserializer is not None else key
        setattr(ctx, WIRE_KEY_ATTR, key)
        ctx.field = MessageField.VALUE
        value = self(msg.value(), ctx)
        return (decoded_key, value) if key_deserializer is not None else value


class RecordKeySerializer:
    """Serializes Kafka keys for encrypted topics.

    By default the key stays as the inner serializer made it (partitioning and compaction need a
    stable key) and is left on the context so the value serializer can bind or sign it. With
    `hash_keys` the key becomes a keyed hash (HMAC-SHA256) under a secret derived from the KEK that
    survives rotation (equal keys keep equal hashes: same partition, compaction works), and the
    original key is encrypted into the `kgov.enc.key` header (bound to topic and hashed key):
    - `hash_keys="topic"` (for new topics): the topic is hashed with the key, so one key hashes
      differently on every topic and records cannot be linked across topics by their keys;
    - `hash_keys="kek"`: the hash of builds before 2026-11-22, one per key for all topics under the KEK
      (linkable across them); keep it for topics already written that way, whose compaction needs
      every record of a key to keep its hash;
    - `hash_keys=True`: "kek", so that no existing topic's hashes change, with a warning (logged once)
      asking to choose. Consumers read both alike (the hashed key is opaque to them).
    """

    def __init__(
        self,
        kms: Kms,
        key_name: str,
        inner: Inner | None = None,
        *,
        hash_keys: bool | KeyHashScope = False,
        policy: DataKeyPolicy | None = None,
        retry: RetryPolicy | None = None,
        issuer: DataKeyIssuer | None = None,
    ) -> None:
        self.kms = kms
        self.key_name = key_name
        self.inner = inner
        if hash_keys is True:
            if "hash_keys=True" not in _WARNED:
                _WARNED.add("hash_keys=True")
                _LOG.warning(
                    "RecordKeySerializer(hash_keys=True) hashes keys per KEK: a key has the same hash on every "
                    "topic under that KEK, so records are linkable across topics. Kept so that existing topics "
                    "keep their hashes (compaction): pass hash_keys='kek' for those and hash_keys='topic' for "
                    "new topics (docs/encryption.md, 'Hashed keys')")
            hash_keys = "kek"
        elif hash_keys not in (False, "topic", "kek"):
            raise EncryptionError(f"hash_keys takes 'topic', 'kek' or False, not {hash_keys!r}")
        self.hash_keys: KeyHashScope | None = hash_keys or None
        self.issuer = issuer or DataKeyIssuer(kms, policy, retry)
        self._sealer = PayloadSealer(self.issuer, key_name)
        self._secret: bytes | None = None

    def __repr__(self) -> str:
        return f"RecordKeySerializer(key_name={self.key_name!r}, hash_keys={self.hash_keys!r})"

    def _hash_secret(self) -> bytes:
        if self._secret is None:
            label = _KEY_HASH_LABELS[self.hash_keys or "kek"]
            self._secret = call_with_retry(
                self.issuer.retry, "derived_secret", lambda: self.kms.derived_secret(self.key_name, label)
            )
        return self._secret

    def key_hash(self, topic: str, key: bytes) -> bytes:
        """The hashed form of `key` on `topic` (see `hash_keys`)."""
        if self.hash_keys == "topic":
            name = topic.encode("utf-8")
            # Length-prefixed: ("ab", key) and ("a", "b" + key) hash apart.
            return hmac.new(self._hash_secret(), len(name).to_bytes(2, "big") + name + key, hashlib.sha256).digest()
        return hmac.new(self._hash_secret(), key, hashlib.sha256).digest()

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        if ctx is None:
            raise EncryptionError("RecordKeySerializer needs the SerializationContext")
        serialized = self.inner(obj, ctx) if self.inner is not None else obj
        data = None if serialized is None else _as_bytes(serialized, "record key")
        if self.hash_keys and data is not None:
            if ctx.headers is None:
                raise EncryptionError("hash_keys keeps the original key in a header: produce with headers=[]")
            hashed = self.key_hash(ctx.topic, data)
            header, ciphertext = self._sealer.seal(FLAG_KEY_BOUND, FIELD_KEY, ctx.topic, hashed, data)
            add_header(ctx.headers, KEY_HEADER, header + ciphertext)
            data = hashed
        setattr(ctx, WIRE_KEY_ATTR, data)
        return data


def check_serializer_pairing(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """Returns a `SerializingProducer` config unchanged once its serializers are known to work together.

    An `EncryptingSerializer` with `bind_key=True` needs a `RecordKeySerializer` as key serializer (it
    would refuse every record otherwise); this says so when the producer is built rather than at
    the first record::

        producer = SerializingProducer(check_serializer_pairing({..., "key.serializer": ...,
                                                                  "value.serializer": ...}))
    """
    value_serializer = config.get("value.serializer")
    key_serializer = config.get("key.serializer")
    if (
        isinstance(value_serializer, EncryptingSerializer)
        and value_serializer.bind_key
        and not isinstance(key_serializer, RecordKeySerializer)
    ):
        given = "no key.serializer" if key_serializer is None else f"key.serializer {type(key_serializer).__name__}"
        raise EncryptionError(
            f"value.serializer binds records to their key (bind_key=True) but {given} does not make the key "
            "known: use RecordKeySerializer as key.serializer, or EncryptingSerializer(..., bind_key=False)"
        )
    return config


class RecordKeyDeserializer:
    """Reads keys written by `RecordKeySerializer`: restores hashed keys' originals, records the wire key.

    `hashed_keys=True` (for topics written with `hash_keys=True`): a non-null key without its protected
    original is refused, so nobody can strip the `kgov.enc.key` header and hand the consumer the hash
    (or a plaintext key of their choosing) as the key. Off by default, where plain keys are normal.
    `kek_names`: as for `DecryptingDeserializer`.
    """

    def __init__(
        self,
        kms: Kms,
        inner: Inner | None = None,
        *,
        hashed_keys: bool = False,
        retry: RetryPolicy | None = None,
        cache: DataKeyCache | None = None,
        unwrap_limit: UnwrapLimit | None = DEFAULT_UNWRAP_LIMIT,
        kek_names: KekNames = None,
    ) -> None:
        self.hashed_keys = hashed_keys
        self.cache = cache if cache is not None else DataKeyCache(kms, retry=retry, unwrap_limit=unwrap_limit)
        self._opener = PayloadOpener(self.cache, kek_names=accepted_keks(kek_names, "RecordKeyDeserializer"))
        self.inner = inner

    def __repr__(self) -> str:
        return f"RecordKeyDeserializer(hashed_keys={self.hashed_keys})"

    def __call__(self, data: bytes | None, ctx: SerializationContext | None = None) -> Any:
        if ctx is None:
            raise DecryptionError("RecordKeyDeserializer needs the SerializationContext")
        setattr(ctx, WIRE_KEY_ATTR, data)
        try:
            protected = find_header(ctx.headers, KEY_HEADER)
        except DecryptionError as exc:
            raise exc.located(**record_location(ctx)) from None
        if protected is None and self.hashed_keys and data is not None:
            raise DecryptionError(
                "record key is not protected (no kgov.enc.key header) but hashed keys are required"
            ).located(**record_location(ctx))
        if protected is not None:
            try:
                if data is None:
                    raise DecryptionError("record has a protected-key header but no key")
                if len(protected) < 2:
                    raise DecryptionError("malformed protected-key header")
                _, end = parse_header(protected)
                data = self._opener.open(protected[:end], protected[end:], FIELD_KEY, ctx.topic, data)
            except DecryptionError as exc:
                raise exc.located(**record_location(ctx)) from exc.__cause__
        return self.inner(data, ctx) if self.inner is not None else data
