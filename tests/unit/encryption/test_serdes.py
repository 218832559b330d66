"""EncryptingSerializer / DecryptingDeserializer: formats, binding, failures, data-key lifecycle."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.serialization import (
    MessageField,
    SerializationContext,
    StringDeserializer,
    StringSerializer,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from encryption import (
    DataKeyPolicy,
    DecryptingDeserializer,
    DecryptionError,
    EncryptingSerializer,
    EncryptionError,
    KeyNotFoundError,
    KmsUnavailableError,
    LocalKms,
    RecordContext,
    RetryPolicy,
    WrappedKey,
)
from encryption.envelope import HEADER, MAGIC, parse_header
from encryption.serdes import MAX_DECOMPRESSED_BYTES

VALUE = MessageField.VALUE


def ctx(topic: str = "orders", headers: object = None) -> SerializationContext:
    return SerializationContext(topic, VALUE, headers)  # type: ignore[arg-type]


def produce(serializer: EncryptingSerializer, obj: object, topic: str = "orders") -> tuple[bytes, list]:
    headers: list[tuple[str, bytes]] = []
    value = serializer(obj, ctx(topic, headers))
    assert value is not None
    return value, headers


def test_round_trip_in_header_form_hides_the_plaintext(kms: LocalKms) -> None:
    serializer = EncryptingSerializer(kms, "orders", StringSerializer(), bind_key=False)
    value, headers = produce(serializer, "card 4111-1111-1111-1111")
    assert b"4111" not in value and all(b"4111" not in h for _, h in headers)
    assert [name for name, _ in headers] == [HEADER]
    assert len(value) == len("card 4111-1111-1111-1111") + 16
    parsed, end = parse_header(headers[0][1])
    assert end == len(headers[0][1])
    assert (parsed.wrapped.key_name, parsed.wrapped.version) == ("orders", 1)
    deserializer = DecryptingDeserializer(kms, StringDeserializer())
    assert deserializer(value, ctx("orders", headers)) == "card 4111-1111-1111-1111"


def test_envelope_form_without_headers_and_with_dict_headers(kms: LocalKms) -> None:
    serializer = EncryptingSerializer(kms, "orders", bind_key=False)
    deserializer = DecryptingDeserializer(kms)
    value = serializer(b"secret", ctx("orders", None))
    assert value is not None and value.startswith(MAGIC) and b"secret" not in value
    assert deserializer(value, ctx("orders", None)) == b"secret"
    forced = EncryptingSerializer(kms, "orders", envelope=True, bind_key=False)
    headers: list[tuple[str, bytes]] = []
    value = forced(b"secret", ctx("orders", headers))
    assert headers == [] and value is not None and value.startswith(MAGIC)
    assert deserializer(value, ctx("orders", [])) == b"secret"
    as_dict: dict[str, bytes] = {}
    value = serializer(b"secret", ctx("orders", as_dict))
    assert HEADER in as_dict
    assert deserializer(value, ctx("orders", as_dict)) == b"secret"


def test_tombstones_stay_null(kms: LocalKms) -> None:
    serializer = EncryptingSerializer(kms, "orders", StringSerializer(), bind_key=False)
    headers: list[tuple[str, bytes]] = []
    assert serializer(None, ctx("orders", headers)) is None
    assert headers == []
    assert DecryptingDeserializer(kms, StringDeserializer())(None, ctx("orders", [])) is None
    assert serializer.issuer.kms_calls == 0


def test_replay_into_another_topic_fails(kms: LocalKms) -> None:
    value, headers = produce(EncryptingSerializer(kms, "orders", bind_key=False), b"payload", topic="orders")
    with pytest.raises(DecryptionError, match="topic=payments") as info:
        DecryptingDeserializer(kms)(value, ctx("payments", headers))
    assert "authentication failed" in info.value.reason


def test_one_serializer_across_topics_binds_each_record_to_its_own(kms: LocalKms) -> None:
    """A topic's first record takes the general path, later ones the inlined one; both bind the topic."""
    serializer = EncryptingSerializer(kms, "orders", bind_key=False)
    deserializer = DecryptingDeserializer(kms)
    for i in range(3):
        for topic in ("orders", "payments", "refunds"):
            value, headers = produce(serializer, b"%s %d" % (topic.encode(), i), topic=topic)
            assert deserializer(value, ctx(topic, headers)) == b"%s %d" % (topic.encode(), i)
            other = "orders" if topic != "orders" else "payments"
            with pytest.raises(DecryptionError, match="authentication failed"):
                deserializer(value, ctx(other, headers))
    assert serializer.issuer.kms_calls == 1


@pytest.mark.parametrize("where", ["value", "nonce", "wrapped-key", "flags", "kek-version"])
def test_tampering_anywhere_fails_with_decryption_error(kms: LocalKms, where: str) -> None:
    value, headers = produce(EncryptingSerializer(kms, "orders", bind_key=False), b"payload")
    header = bytearray(headers[0][1])
    body = bytearray(value)
    if where == "value":
        body[0] ^= 1
    elif where == "nonce":
        header[-1] ^= 1
    elif where == "wrapped-key":
        header[-20] ^= 1
    elif where == "flags":
        header[1] = 0x01  # claims compression
    elif where == "kek-version":
        header[3 + len("orders") + 3] = 2
    with pytest.raises(DecryptionError):
        DecryptingDeserializer(kms)(bytes(body), ctx("orders", [(HEADER, bytes(header))]))


def test_unknown_version_unencrypted_and_malformed_records_are_refused(kms: LocalKms) -> None:
    value, headers = produce(EncryptingSerializer(kms, "orders", bind_key=False), b"payload")
    deserializer = DecryptingDeserializer(kms)
    future = b"\x02" + headers[0][1][1:]
    with pytest.raises(DecryptionError, match="unknown encryption format version 2"):
        deserializer(value, ctx("orders", [(HEADER, future)]))
    with pytest.raises(DecryptionError, match="not encrypted"):
        deserializer(b"plain text", ctx("orders", []))
    with pytest.raises(DecryptionError, match=r"truncated|malformed"):
        deserializer(value, ctx("orders", [(HEADER, headers[0][1][:20])]))
    with pytest.raises(DecryptionError, match="more than one"):
        deserializer(value, ctx("orders", headers + headers))
    with pytest.raises(DecryptionError):
        deserializer(MAGIC + b"\x01", ctx("orders", None))


def test_wrong_or_missing_key_encryption_key(kms: LocalKms, tmp_path: Path) -> None:
    value, headers = produce(EncryptingSerializer(kms, "orders", bind_key=False), b"payload")
    stranger = LocalKms(tmp_path / "other.json")
    with pytest.raises(DecryptionError, match="cannot be unwrapped") as info:
        DecryptingDeserializer(stranger)(value, ctx("orders", headers))
    assert isinstance(info.value.__cause__, KeyNotFoundError)
    stranger.create_key("orders")  # same name, different material: the wrapped key does not open
    with pytest.raises(DecryptionError, match="cannot be unwrapped"):
        DecryptingDeserializer(stranger)(value, ctx("orders", headers))
    with pytest.raises(KeyNotFoundError):
        EncryptingSerializer(kms, "missing", bind_key=False)(b"x", ctx("orders", []))


def test_errors_name_partition_and_offset_when_known(kms: LocalKms) -> None:
    value, headers = produce(EncryptingSerializer(kms, "orders", bind_key=False), b"payload")
    record = RecordContext("orders", VALUE, headers, partition=3, offset=1234)
    with pytest.raises(DecryptionError) as info:
        DecryptingDeserializer(kms)(value[:-1] + bytes([value[-1] ^ 1]), record)
    assert (info.value.topic, info.value.partition, info.value.offset) == ("orders", 3, 1234)
    assert "topic=orders partition=3 offset=1234" in str(info.value)


def test_compress_then_encrypt(kms: LocalKms) -> None:
    text = b"the same words again " * 200
    serializer = EncryptingSerializer(kms, "orders", compress=True, bind_key=False)
    value, headers = produce(serializer, text)
    assert len(value) < len(text) // 4
    assert DecryptingDeserializer(kms)(value, ctx("orders", headers)) == text
    plain_value, _ = produce(EncryptingSerializer(kms, "orders", bind_key=False), text)
    assert len(plain_value) == len(text) + 16


def test_decompression_bomb_is_refused(kms: LocalKms) -> None:
    serializer = EncryptingSerializer(kms, "orders", compress=True, bind_key=False)
    value, headers = produce(serializer, b"\0" * 100_001)
    with pytest.raises(DecryptionError, match="inflates beyond 100000 bytes"):
        DecryptingDeserializer(kms, max_inflated_bytes=100_000)(value, ctx("orders", headers))
    assert DecryptingDeserializer(kms)(value, ctx("orders", headers)) == b"\0" * 100_001
    assert MAX_DECOMPRESSED_BYTES >= 16 * 1024 * 1024


def test_non_bytes_without_inner_and_key_field_are_refused(kms: LocalKms) -> None:
    serializer = EncryptingSerializer(kms, "orders", bind_key=False)
    with pytest.raises(EncryptionError, match="pass inner="):
        serializer("text", ctx("orders", []))
    with pytest.raises(EncryptionError, match="RecordKeySerializer"):
        serializer(b"x", SerializationContext("orders", MessageField.KEY, []))
    assert serializer(b"x", SerializationContext("orders", "value", [])) is not None  # type: ignore[arg-type]
    with pytest.raises(EncryptionError, match="SerializationContext"):
        serializer(b"x", None)


def test_reused_headers_list_is_refused(kms: LocalKms) -> None:
    serializer = EncryptingSerializer(kms, "orders", bind_key=False)
    headers: list[tuple[str, bytes]] = []
    serializer(b"one", ctx("orders", headers))
    with pytest.raises(EncryptionError, match="fresh headers"):
        serializer(b"two", ctx("orders", headers))


def test_data_key_replaced_after_max_records_with_unique_nonces(kms: LocalKms) -> None:
    serializer = EncryptingSerializer(kms, "orders", policy=DataKeyPolicy(max_records=10), bind_key=False)
    deserializer = DecryptingDeserializer(kms)
    seen: set[tuple[bytes, bytes]] = set()
    wrapped_keys: set[bytes] = set()
    for i in range(35):
        value, headers = produce(serializer, b"record %d" % i)
        parsed, _ = parse_header(headers[0][1])
        seen.add((parsed.wrapped.blob, parsed.nonce))
        wrapped_keys.add(parsed.wrapped.blob)
        assert deserializer(value, ctx("orders", headers)) == b"record %d" % i
    assert len(seen) == 35
    assert len(wrapped_keys) == 4
    assert serializer.issuer.kms_calls == 4
    assert deserializer.cache.kms_calls == 4


def test_data_key_replaced_after_max_age(kms: LocalKms) -> None:
    clock = [100.0]
    from encryption import DataKeyIssuer

    issuer = DataKeyIssuer(kms, DataKeyPolicy(max_age_seconds=60), now=lambda: clock[0])
    serializer = EncryptingSerializer(kms, "orders", issuer=issuer, bind_key=False)
    first = {parse_header(produce(serializer, b"x")[1][0][1])[0].wrapped.blob for _ in range(3)}
    clock[0] += 59
    assert {parse_header(produce(serializer, b"x")[1][0][1])[0].wrapped.blob} == first
    clock[0] += 1
    later = parse_header(produce(serializer, b"x")[1][0][1])[0].wrapped.blob
    assert later not in first
    assert issuer.kms_calls == 2


def test_consumer_calls_kms_once_per_data_key(kms: LocalKms) -> None:
    serializer = EncryptingSerializer(kms, "orders", bind_key=False)
    deserializer = DecryptingDeserializer(kms)
    for i in range(500):
        value, headers = produce(serializer, b"r%d" % i)
        assert deserializer(value, ctx("orders", headers)) == b"r%d" % i
    assert serializer.issuer.kms_calls == 1
    assert deserializer.cache.kms_calls == 1


class FlakyKms:
    """A real LocalKms behind a switch that makes it fail like an unreachable server."""

    def __init__(self, inner: LocalKms, failures: int) -> None:
        self.inner = inner
        self.failures = failures
        self.calls = 0

    def _maybe_fail(self) -> None:
        self.calls += 1
        if self.failures:
            self.failures -= 1
            raise KmsUnavailableError("connection refused")

    def wrap(self, key_name: str, data_key: bytes) -> WrappedKey:
        self._maybe_fail()
        return self.inner.wrap(key_name, data_key)

    def unwrap(self, wrapped: WrappedKey) -> bytes:
        self._maybe_fail()
        return self.inner.unwrap(wrapped)

    def derived_secret(self, key_name: str, label: bytes) -> bytes:
        self._maybe_fail()
        return self.inner.derived_secret(key_name, label)

    def create_key(self, name: str) -> int:
        return self.inner.create_key(name)

    def rotate_key(self, name: str) -> int:
        return self.inner.rotate_key(name)


def test_kms_outage_is_retried_then_reported(kms: LocalKms) -> None:
    waits: list[float] = []
    retry = RetryPolicy(attempts=3, sleep=waits.append)
    flaky = FlakyKms(kms, failures=2)
    value, headers = produce(EncryptingSerializer(flaky, "orders", retry=retry, bind_key=False), b"payload")
    assert flaky.calls == 3 and len(waits) == 2

    down = FlakyKms(kms, failures=100)
    with pytest.raises(DecryptionError, match="after 3 attempts") as info:
        DecryptingDeserializer(down, retry=retry)(value, ctx("orders", headers))
    assert isinstance(info.value.__cause__, KmsUnavailableError)
    with pytest.raises(KmsUnavailableError, match="after 3 attempts"):
        EncryptingSerializer(down, "orders", retry=retry, bind_key=False)(b"x", ctx("orders", []))

    recovering = FlakyKms(kms, failures=1)
    assert DecryptingDeserializer(recovering, retry=retry)(value, ctx("orders", headers)) == b"payload"


@settings(max_examples=60, deadline=None)
@given(
    payload=st.binary(max_size=2048),
    topic=st.text(min_size=1, max_size=40),
    compress=st.booleans(),
    use_headers=st.booleans(),
)
def test_round_trip_property(tmp_path_factory: pytest.TempPathFactory, payload: bytes, topic: str,
                             compress: bool, use_headers: bool) -> None:
    kms = _shared_kms(tmp_path_factory)
    serializer = EncryptingSerializer(kms, "orders", compress=compress, bind_key=False)
    headers: list[tuple[str, bytes]] | None = [] if use_headers else None
    value = serializer(payload, ctx(topic, headers))
    assert value is not None
    assert DecryptingDeserializer(kms)(value, ctx(topic, headers)) == payload


_KMS: dict[str, LocalKms] = {}


def _shared_kms(factory: pytest.TempPathFactory) -> LocalKms:
    if "kms" not in _KMS:
        _KMS["kms"] = LocalKms(factory.mktemp("prop") / "ring.json")
        _KMS["kms"].create_key("orders")
    return _KMS["kms"]


def test_data_keys_are_random_per_serializer(kms: LocalKms) -> None:
    a, ha = produce(EncryptingSerializer(kms, "orders", bind_key=False), b"same")
    b, hb = produce(EncryptingSerializer(kms, "orders", bind_key=False), b"same")
    assert a != b and ha != hb


@pytest.mark.parametrize("key", [b"alice", None, "unbound"])
def test_inlined_hot_paths_agree_with_the_general_paths(kms: LocalKms, key: bytes | str | None) -> None:
    """The first record of a serializer takes the general path, later ones the inlined one; every
    record must read back through both the general path (fresh deserializer, cache miss) and the
    inlined one (warm cache), and a tampered or re-keyed record must fail on both."""
    serializer = EncryptingSerializer(kms, "orders", bind_key=key != "unbound")

    def context(headers: list) -> SerializationContext:
        if key == "unbound":
            return ctx("orders", headers)
        return RecordContext("orders", VALUE, headers, key=key)

    records = []
    for i in range(4):
        headers: list[tuple[str, bytes]] = []
        value = serializer(b"payload %d" % i, context(headers))
        records.append((value, headers))
    assert len({parse_header(h[0][1])[0].flags for _, h in records}) == 1
    warm = DecryptingDeserializer(kms)
    for i, (value, headers) in enumerate(records):
        assert DecryptingDeserializer(kms)(value, context(headers)) == b"payload %d" % i
        assert warm(value, context(headers)) == b"payload %d" % i
    value, headers = records[-1]
    with pytest.raises(DecryptionError, match="authentication failed"):
        warm(value[:-1] + bytes([value[-1] ^ 1]), context(headers))
    if key != "unbound":
        with pytest.raises(DecryptionError, match="authentication failed"):
            warm(value, RecordContext("orders", VALUE, headers, key=b"mallory"))
        with pytest.raises(DecryptionError, match="RecordKeyDeserializer"):
            warm(value, ctx("orders", headers))
