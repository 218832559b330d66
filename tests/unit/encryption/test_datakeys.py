"""Data-key policy bounds and the consumer's unwrapped-key cache (TTL, size bound)."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from encryption import DataKeyCache, DataKeyPolicy, LocalKms


def test_policy_bounds_are_validated() -> None:
    with pytest.raises(ValueError, match="max_records"):
        DataKeyPolicy(max_records=0)
    with pytest.raises(ValueError, match="max_records"):
        DataKeyPolicy(max_records=(1 << 32) + 1)
    with pytest.raises(ValueError, match="max_age_seconds"):
        DataKeyPolicy(max_age_seconds=0)
    with pytest.raises(ValueError):
        DataKeyCache(LocalKms.__new__(LocalKms), max_entries=0)


def test_cache_expires_entries_and_stays_bounded(kms: LocalKms) -> None:
    clock = [0.0]
    cache = DataKeyCache(kms, max_entries=2, ttl_seconds=10, now=lambda: clock[0])
    wrapped = [kms.wrap("orders", bytes([i]) * 32) for i in range(3)]
    ids = [b"id-%d" % i for i in range(3)]
    first = cache.load(ids[0], wrapped[0])
    assert cache.get(ids[0]) is first and cache.kms_calls == 1
    assert cache.load(ids[0], wrapped[0]) is first and cache.kms_calls == 1
    clock[0] = 10.0
    assert cache.get(ids[0]) is None  # expired: the next use unwraps again
    cache.load(ids[0], wrapped[0])
    assert cache.kms_calls == 2
    cache.load(ids[1], wrapped[1])
    cache.load(ids[2], wrapped[2])
    assert len(cache) == 2 and cache.get(ids[0]) is None and cache.get(ids[2]) is not None
    sealed = AESGCM(bytes([2]) * 32).encrypt(b"\0" * 12, b"x", None)  # the cache holds the unwrapped key
    aead = cache.get(ids[2])
    assert aead is not None and aead.decrypt(b"\0" * 12, sealed, None) == b"x"
