"""Data keys: issuing them on the producer side, caching unwrapped ones on the consumer side.

Producer: one active data key per KEK name, used for at most `max_records` encryptions and
`max_age_seconds`, then replaced by a fresh random key wrapped by the KMS (one KMS call). Its GCM nonces
are a counter from 0, so they never repeat under that key (NIST SP 800-38D §8.2.1 deterministic
construction); the bound keeps far below GCM's 2^32-invocation guidance for random nonces too.

Consumer: unwrapped data keys are cached by their wrapped form (bounded, oldest out first, with a
time-to-live), so reading a million records costs one KMS call per data key, not per record. What is
not cached costs a KMS unwrap, and the wrapped keys come from the records, so from whoever can write
to the topic: `UnwrapLimit` caps those unwraps per KEK with a token bucket (see `DataKeyCache`).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from itertools import repeat

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from authz.clock import elapsed_clock
from encryption.envelope import FIELD_FORMAT_VERSION, NONCE_SIZE, header_prefix, key_part
from encryption.errors import (
    EncryptionError,
    KeyNotFoundError,
    KmsError,
    KmsUnavailableError,
    UnwrapRateLimitedError,
)
from encryption.kms import Kms, WrappedKey, check_key_name
from encryption.retry import RetryPolicy, call_with_retry

_MAX_GCM_INVOCATIONS = 1 << 32

# A forked child inherits its parent's active data keys and nonce counters: encrypting with both would
# repeat nonces under one key. Everything holding an active key registers here and forgets it in the child.
_HOLDERS: weakref.WeakSet[ForgetsKeysOnFork] = weakref.WeakSet()


class ForgetsKeysOnFork:
    """Base of objects that hold active data keys; `forget_keys()` runs in a forked child."""

    def __init__(self) -> None:
        _HOLDERS.add(self)

    def forget_keys(self) -> None:
        """Drops every active data key (the next record gets a fresh one)."""


def _forget_all_keys_after_fork() -> None:
    for holder in list(_HOLDERS):
        holder.forget_keys()


os.register_at_fork(after_in_child=_forget_all_keys_after_fork)


@dataclass(frozen=True, slots=True)
class DataKeyPolicy:
    """How long one data key is used (defaults follow Kroxylicious: 5M records, 1 hour)."""

    max_records: int = 5_000_000
    max_age_seconds: float = 3600.0

    def __post_init__(self) -> None:
        if not 0 < self.max_records <= _MAX_GCM_INVOCATIONS:
            raise ValueError(f"max_records must be in 1..{_MAX_GCM_INVOCATIONS}")
        if self.max_age_seconds <= 0:
            raise ValueError("max_age_seconds must be positive")


class ActiveDataKey:
    """One data key in use by a producer. `next_nonce()` returns None once the key is spent."""

    __slots__ = ("aead", "expires", "field_prefixes", "nonces", "now", "prefixes", "wrapped")

    def __init__(
        self, data_key: bytes, wrapped: WrappedKey, policy: DataKeyPolicy, now: Callable[[], float]
    ) -> None:
        self.aead = AESGCM(data_key)
        self.wrapped = wrapped
        part = key_part(wrapped)
        self.prefixes = tuple(header_prefix(flags, part) for flags in range(4))
        self.field_prefixes = tuple(header_prefix(flags, part, FIELD_FORMAT_VERSION) for flags in range(4))
        # Public for the serializer's inlined hot path (`EncryptingSerializer.__call__`). The nonces
        # 0, 1, ... max_records - 1 as 12-byte big-endian counters; exhausted = the key is spent. One
        # `next()` draws a nonce entirely in C, atomically under the GIL: concurrent producers get
        # distinct nonces.
        self.nonces = map(int.to_bytes, range(policy.max_records), repeat(NONCE_SIZE))  # big-endian (default)
        self.now = now
        self.expires = now() + policy.max_age_seconds

    def __repr__(self) -> str:
        return f"ActiveDataKey(kek={self.wrapped.key_name!r}, version={self.wrapped.version})"

    def next_nonce(self) -> bytes | None:
        nonce = next(self.nonces, None)
        if nonce is None or self.now() >= self.expires:
            return None
        return nonce


class DataKeyIssuer(ForgetsKeysOnFork):
    """Hands out the active data key for a KEK name, replacing it when spent."""

    def __init__(
        self,
        kms: Kms,
        policy: DataKeyPolicy | None = None,
        retry: RetryPolicy | None = None,
        now: Callable[[], float] = elapsed_clock,
    ) -> None:
        super().__init__()
        self.kms = kms
        self.policy = policy or DataKeyPolicy()
        self.retry = retry or RetryPolicy()
        self.now = now
        self._lock = threading.Lock()
        self._active: dict[str, ActiveDataKey] = {}
        self.kms_calls = 0

    def forget_keys(self) -> None:
        self._lock = threading.Lock()  # the parent's lock may have been held at fork time
        self._active = {}

    def active(self, key_name: str) -> ActiveDataKey:
        key = self._active.get(key_name)
        return key if key is not None else self.replace(key_name, None)

    def replace(self, key_name: str, spent: ActiveDataKey | None) -> ActiveDataKey:
        """A fresh data key (unless another thread already replaced `spent`)."""
        with self._lock:
            current = self._active.get(key_name)
            if current is not None and current is not spent:
                return current
            check_key_name(key_name)
            data_key = os.urandom(32)
            self.kms_calls += 1
            wrapped = call_with_retry(self.retry, "wrap", lambda: self.kms.wrap(key_name, data_key))
            if wrapped.key_name != key_name:
                raise EncryptionError("KMS wrapped the data key under another key name")
            fresh = ActiveDataKey(data_key, wrapped, self.policy, self.now)
            self._active[key_name] = fresh
            return fresh


class Refusals:
    """KMS refusals (not transient failures) remembered for `ttl_seconds`, at most `max_entries` of them.

    What a consumer asks the KMS for comes from the records, so from whoever can write to the topic: a
    hostile record replayed many times must cost one KMS call per `ttl_seconds`, not one per copy."""

    def __init__(self, ttl_seconds: float, max_entries: int, now: Callable[[], float]) -> None:
        self._ttl = ttl_seconds
        self._max = max_entries
        self.now = now
        self._entries: OrderedDict[Hashable, tuple[str, float]] = OrderedDict()  # the message, not the
        # exception: its traceback frames would keep the KMS's locals alive

    def check(self, ident: Hashable) -> None:
        """Raises KmsError when `ident` was refused less than `ttl_seconds` ago."""
        refused = self._entries.get(ident)
        if refused is not None:
            if refused[1] > self.now():
                raise KmsError(f"{refused[0]} (refused again without asking the KMS)")
            self._entries.pop(ident, None)

    def remember(self, ident: Hashable, exc: KmsError) -> None:
        if self._ttl > 0 and not isinstance(exc, KmsUnavailableError):
            self._entries[ident] = (str(exc), self.now() + self._ttl)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(frozen=True, slots=True)
class UnwrapLimit:
    """At most `burst` KMS unwraps at once, refilled at `per_second`, per KEK name (all its versions).

    Honest demand is small: a producer replaces its data key at most every `DataKeyPolicy.max_records`
    records or `max_age_seconds` (1 hour by default), so a consumer in step with the topic needs about
    (producer instances) / 3600 unwraps a second per KEK, and the cache (1000 keys by default) holds
    what it has unwrapped for an hour. The default allows a cache-full of keys at once and 100 a second
    after that: 360,000 producer instances rotating hourly, or a consumer catching up through 100 data
    keys a second. Producers that write a few records per data key (short-lived processes) need more:
    raise `per_second`. Hostile records (fresh wrapped-key bytes under a real KEK, or replayed old
    wrapped keys that fell out of the cache) then cost at most `per_second` KMS calls a second per KEK.
    """

    per_second: float = 100.0
    burst: int = 1000

    def __post_init__(self) -> None:
        if not self.per_second > 0 or self.burst < 1:
            raise ValueError("UnwrapLimit needs a positive per_second and a burst of at least 1")


DEFAULT_UNWRAP_LIMIT = UnwrapLimit()
# KEK names that never unwrapped a data key here share one bucket: the name comes from the record, so
# a bucket per name would let records naming ever-new (nonexistent) KEKs reach the KMS without limit.
_NEW_KEKS = object()


class UnwrapBuckets:
    """Token buckets of `UnwrapLimit` by KEK name; the caller serialises calls (`DataKeyCache` holds its lock)."""

    def __init__(self, limit: UnwrapLimit, max_keks: int, now: Callable[[], float]) -> None:
        self.limit = limit
        self.now = now
        self._max = max_keks
        # KEK name (or _NEW_KEKS) -> (tokens, when they were counted); oldest-used first.
        self._buckets: OrderedDict[object, tuple[float, float]] = OrderedDict()
        self._proven: OrderedDict[str, None] = OrderedDict()  # names that unwrapped a data key here

    def take(self, key_name: str) -> None:
        """Spends one unwrap of `key_name`; raises UnwrapRateLimitedError when none is left."""
        bucket = key_name if key_name in self._proven else _NEW_KEKS
        now = self.now()
        tokens, then = self._buckets.get(bucket, (float(self.limit.burst), now))
        tokens = min(float(self.limit.burst), tokens + max(0.0, now - then) * self.limit.per_second)
        if tokens < 1.0:
            self._buckets[bucket] = (tokens, now)
            which = f"KEK {key_name!r}" if bucket is not _NEW_KEKS else f"KEK {key_name!r} (KEKs not yet used here)"
            raise UnwrapRateLimitedError(
                f"too many data keys to unwrap for {which}: the limit is {self.limit.per_second:g} a second "
                f"after a burst of {self.limit.burst} (UnwrapLimit); not asked, retry later"
            )
        self._buckets[bucket] = (tokens - 1.0, now)
        self._buckets.move_to_end(bucket)
        while len(self._buckets) > self._max + 1:  # the proven names and _NEW_KEKS
            self._buckets.popitem(last=False)

    def unwrapped(self, key_name: str) -> None:
        """`key_name` unwrapped a data key: it gets a bucket of its own from now on."""
        if key_name not in self._proven:
            self._proven[key_name] = None
            while len(self._proven) > self._max:
                self._proven.popitem(last=False)
        else:
            self._proven.move_to_end(key_name)


class DataKeyCache:
    """Unwrapped data keys (as ready AESGCM objects) by wrapped key (`ParsedHeader.cache_key`); bounded, with a TTL."""

    def __init__(
        self,
        kms: Kms,
        max_entries: int = 1000,
        ttl_seconds: float = 3600.0,
        retry: RetryPolicy | None = None,
        now: Callable[[], float] = elapsed_clock,
        failure_ttl_seconds: float = 60.0,
        unwrap_limit: UnwrapLimit | None = DEFAULT_UNWRAP_LIMIT,
    ) -> None:
        """`unwrap_limit`: KMS unwraps per KEK (`UnwrapLimit`); None turns the limit off."""
        if max_entries < 1 or ttl_seconds <= 0 or failure_ttl_seconds < 0:
            raise ValueError("DataKeyCache needs max_entries >= 1, a positive ttl_seconds, failure_ttl_seconds >= 0")
        self.kms = kms
        self.retry = retry or RetryPolicy()
        self._max = max_entries
        self._ttl = ttl_seconds
        self.now = now
        self.entries: OrderedDict[bytes, tuple[AESGCM, float]] = OrderedDict()
        self.refusals = Refusals(failure_ttl_seconds, max_entries, now)  # wrapped keys the KMS refused
        self.unwrap_buckets = UnwrapBuckets(unwrap_limit, max_entries, now) if unwrap_limit is not None else None
        self._lock = threading.Lock()
        self.kms_calls = 0

    @property
    def ttl_seconds(self) -> float:
        """How long an unwrapped data key is used before the KMS is asked again."""
        return self._ttl

    def get(self, prefix: bytes) -> AESGCM | None:
        entry = self.entries.get(prefix)
        if entry is None or entry[1] <= self.now():
            return None
        return entry[0]

    def load(self, prefix: bytes, wrapped: WrappedKey) -> AESGCM:
        """Unwraps through the KMS (with retries) and caches; raises the KMS's errors.

        The KEK name comes from the record, so from whoever wrote to the topic: it is checked against
        the key-name syntax before any KMS sees it (a KMS may put it into a URL path)."""
        with self._lock:
            cached = self.get(prefix)
            if cached is not None:
                return cached
            self.refusals.check(prefix)
            check_key_name(wrapped.key_name)
            kek = (wrapped.key_name, wrapped.version)
            self.refusals.check(kek)  # a KEK (version) the KMS does not have, whatever the wrapped bytes
            if self.unwrap_buckets is not None:
                # After the refusal checks, so what is refused anyway costs no token; its own refusal is
                # not remembered, so a good key refused for rate is unwrapped on the next try.
                self.unwrap_buckets.take(wrapped.key_name)
            self.kms_calls += 1
            try:
                data_key = call_with_retry(self.retry, "unwrap", lambda: self.kms.unwrap(wrapped))
            except KmsError as exc:
                self.refusals.remember(kek if isinstance(exc, KeyNotFoundError) else prefix, exc)
                raise
            if len(data_key) != 32:
                raise KmsError("KMS returned a data key of the wrong size")
            if self.unwrap_buckets is not None:
                self.unwrap_buckets.unwrapped(wrapped.key_name)
            aead = AESGCM(data_key)
            now = self.now()
            self._drop_expired(now)
            self.entries[prefix] = (aead, now + self._ttl)
            self.entries.move_to_end(prefix)
            while len(self.entries) > self._max:
                self.entries.popitem(last=False)
            return aead

    def _drop_expired(self, now: float) -> None:
        """Forgets expired data keys (insertion order is expiry order: all share one TTL)."""
        while self.entries:
            oldest = next(iter(self.entries.values()))
            if oldest[1] > now:
                break
            self.entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self.entries)
