"""KMS unwraps of data keys not in the cache are limited per KEK (token bucket), so hostile records
carrying fresh wrapped-key bytes under a real KEK cannot make a consumer call the KMS once per record."""

from __future__ import annotations

import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from encryption import (
    DataKeyCache,
    DecryptingDeserializer,
    DecryptionError,
    EncryptingSerializer,
    FieldDecryptingDeserializer,
    FieldPolicy,
    LocalKms,
    RecordKeyDeserializer,
    UnwrapLimit,
    UnwrapRateLimitedError,
)
from encryption.envelope import HEADER
from encryption.reencrypt import Reencryptor
from tests.unit.encryption.forgery import CountingKms, forged_header


def forged(kek: bytes, blob: bytes, version: int = 1) -> SerializationContext:
    return SerializationContext("orders", MessageField.VALUE, [(HEADER, forged_header(kek, version, blob))])


def honest(kms: LocalKms) -> tuple[bytes, SerializationContext]:
    """A record from a fresh producer: a data key the consumer has not seen."""
    headers: list[tuple[str, bytes]] = []
    ctx = SerializationContext("orders", MessageField.VALUE, headers)
    value = EncryptingSerializer(kms, "orders", bind_key=False)(b"honest", ctx)
    assert value is not None
    return value, ctx


def test_fresh_wrapped_keys_under_a_real_kek_reach_the_kms_at_the_limit_only(kms: LocalKms) -> None:
    clock = [0.0]
    spy = CountingKms(kms)
    cache = DataKeyCache(spy, now=lambda: clock[0], unwrap_limit=UnwrapLimit(per_second=2, burst=5))  # type: ignore[arg-type]
    consumer = DecryptingDeserializer(spy, cache=cache)  # type: ignore[arg-type]
    good_value, good_ctx = honest(kms)
    assert consumer(good_value, good_ctx) == b"honest"
    assert spy.unwraps == 1
    refusals = []
    for i in range(50):
        with pytest.raises(DecryptionError) as info:
            consumer(b"x" * 32, forged(b"orders", i.to_bytes(4, "big") * 15))
        refusals.append(str(info.value))
    assert spy.unwraps == 1 + 5  # the burst; the other 45 were refused without asking the KMS
    assert all("does not open" in r for r in refusals[:5])
    assert refusals[5] == refusals[-1]
    assert "KEK 'orders'" in refusals[-1] and "2 a second after a burst of 5" in refusals[-1]
    assert isinstance(refusals[-1], str) and "UnwrapLimit" in refusals[-1]
    # A data key already cached keeps working while the KEK is throttled (no KMS call).
    assert consumer(good_value, good_ctx) == b"honest" and spy.unwraps == 6
    # An honest new data key is refused for now, but not remembered as refused: it reads once a token is back.
    second_value, second_ctx = honest(kms)
    with pytest.raises(DecryptionError, match="too many data keys to unwrap"):
        consumer(second_value, second_ctx)
    assert spy.unwraps == 6 and len(cache.refusals) == 5  # the five hostile keys the KMS refused
    clock[0] = 0.5  # one token at 2 a second
    assert consumer(second_value, second_ctx) == b"honest" and spy.unwraps == 7
    with pytest.raises(DecryptionError, match="too many data keys"):
        consumer(b"x" * 32, forged(b"orders", b"\xee" * 60))
    clock[0] = 100.0  # refilled, but never beyond the burst
    for i in range(5):
        with pytest.raises(DecryptionError, match="does not open"):
            consumer(b"x" * 32, forged(b"orders", bytes([i]) * 61))
    with pytest.raises(DecryptionError, match="too many data keys"):
        consumer(b"x" * 32, forged(b"orders", b"\xef" * 60))
    assert spy.unwraps == 12


def test_ever_new_kek_names_and_versions_share_a_limit(kms: LocalKms) -> None:
    """The KEK name comes from the record too: names that never unwrapped a data key here share one
    bucket, and every version of a KEK counts against its name."""
    spy = CountingKms(kms)
    cache = DataKeyCache(spy, now=lambda: 0.0, unwrap_limit=UnwrapLimit(per_second=1, burst=3))  # type: ignore[arg-type]
    consumer = DecryptingDeserializer(spy, cache=cache)  # type: ignore[arg-type]
    for i in range(20):
        with pytest.raises(DecryptionError):
            consumer(b"x" * 32, forged(b"ghost-%d" % i, b"\0" * 60))
    assert spy.unwraps == 3
    with pytest.raises(DecryptionError, match=r"KEK 'ghost-20' \(KEKs not yet used here\)"):
        consumer(b"x" * 32, forged(b"ghost-20", b"\0" * 60))
    # "orders" also has not unwrapped anything here yet: its first data key waits for the shared bucket.
    value, ctx = honest(kms)
    with pytest.raises(DecryptionError, match="KEKs not yet used here"):
        consumer(value, ctx)
    fresh = CountingKms(kms)
    cache = DataKeyCache(fresh, now=lambda: 0.0, unwrap_limit=UnwrapLimit(per_second=1, burst=3))  # type: ignore[arg-type]
    consumer = DecryptingDeserializer(fresh, cache=cache)  # type: ignore[arg-type]
    assert consumer(value, ctx) == b"honest"
    for version in range(2, 30):  # versions the KMS does not have: one bucket, the name's
        with pytest.raises(DecryptionError):
            consumer(b"x" * 32, forged(b"orders", b"\0" * 60, version=version))
    assert fresh.unwraps == 1 + 3


def test_the_default_lets_a_consumer_read_a_cache_full_of_data_keys_at_once(kms: LocalKms) -> None:
    clock = [0.0]
    spy = CountingKms(kms)
    cache = DataKeyCache(spy, now=lambda: clock[0])  # type: ignore[arg-type]
    wrapped = [kms.wrap("orders", i.to_bytes(32, "big")) for i in range(1003)]
    # 1001 producer instances, each with its own data key: the first one is charged to the bucket of KEKs
    # not yet used here, the next 1000 to the burst of "orders".
    for i, w in enumerate(wrapped[:1001]):
        cache.load(b"id-%d" % i, w)
    assert spy.unwraps == 1001
    with pytest.raises(UnwrapRateLimitedError, match="100 a second after a burst of 1000"):
        cache.load(b"id-1001", wrapped[1001])
    clock[0] = 0.01  # 100 a second from then on
    cache.load(b"id-1001", wrapped[1001])
    assert spy.unwraps == 1002
    unlimited = DataKeyCache(kms, unwrap_limit=None)
    for i, w in enumerate(wrapped):
        unlimited.load(b"id-%d" % i, w)
    assert len(unlimited) == 1000 and unlimited.kms_calls == 1003


def test_every_consumer_passes_its_limit_to_the_cache_it_builds(kms: LocalKms) -> None:
    limit = UnwrapLimit(per_second=7, burst=9)
    policy = FieldPolicy.from_json_schema(
        {"type": "object", "properties": {"ssn": {"type": "string", "confluent:tags": ["PII"]}}}
    )
    for consumer in (
        DecryptingDeserializer(kms, unwrap_limit=limit),
        RecordKeyDeserializer(kms, unwrap_limit=limit),
        FieldDecryptingDeserializer(kms, policy, unwrap_limit=limit),
        Reencryptor(kms, "orders", unwrap_limit=limit)._value_in,
    ):
        assert consumer.cache.unwrap_buckets is not None and consumer.cache.unwrap_buckets.limit is limit
    assert DecryptingDeserializer(kms, unwrap_limit=None).cache.unwrap_buckets is None
    with pytest.raises(ValueError, match="positive per_second"):
        UnwrapLimit(per_second=0)
    with pytest.raises(ValueError, match="burst"):
        UnwrapLimit(burst=0)
