"""Records written by someone without keys: what reaches the KMS, how often, and what is accepted."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from encryption import DataKeyCache, DecryptingDeserializer, DecryptionError, EncryptingSerializer, LocalKms
from encryption.envelope import HEADER, parse_header
from encryption.errors import KmsError
from encryption.fields import DETERMINISTIC_MAGIC, FieldDecryptingDeserializer, FieldPolicy
from encryption.kms import WrappedKey
from tests.unit.encryption.forgery import CountingKms, forged_header


def ctx(header: bytes) -> SerializationContext:
    return SerializationContext("orders-topic", MessageField.VALUE, [(HEADER, header)])


@pytest.mark.parametrize("kek", [b"../../sys/raw/x", b"orders/../other", b"a b", b"\xc3\xa9t\xc3\xa9"])
def test_a_record_naming_a_malformed_kek_never_reaches_the_kms(kms: LocalKms, kek: bytes) -> None:
    spy = CountingKms(kms)
    deserializer = DecryptingDeserializer(spy)  # type: ignore[arg-type]
    with pytest.raises(DecryptionError, match="key names are"):
        deserializer(b"x" * 32, ctx(forged_header(kek)))
    assert spy.unwrapped == []


def test_a_replayed_hostile_record_costs_one_kms_call_not_one_per_copy(kms: LocalKms) -> None:
    clock = [0.0]
    spy = CountingKms(kms)
    cache = DataKeyCache(spy, now=lambda: clock[0], failure_ttl_seconds=30)  # type: ignore[arg-type]
    deserializer = DecryptingDeserializer(spy, cache=cache)  # type: ignore[arg-type]
    bogus = forged_header(b"orders")
    for _ in range(50):
        with pytest.raises(DecryptionError, match="does not open"):
            deserializer(b"x" * 32, ctx(bogus))
    assert spy.unwrapped == ["orders"]
    clock[0] = 31.0  # after the failure TTL the KMS is asked again (it may have been fixed)
    with pytest.raises(DecryptionError):
        deserializer(b"x" * 32, ctx(bogus))
    assert spy.unwrapped == ["orders", "orders"]
    # a refusal of one wrapped key does not block good records under the same KEK
    headers: list[tuple[str, bytes]] = []
    good_ctx = SerializationContext("orders-topic", MessageField.VALUE, headers)
    value = EncryptingSerializer(kms, "orders", bind_key=False)(b"fine", good_ctx)
    assert deserializer(value, good_ctx) == b"fine"


def test_refused_keys_are_bounded_and_expired_data_keys_are_dropped(kms: LocalKms) -> None:
    clock = [0.0]
    cache = DataKeyCache(kms, max_entries=3, ttl_seconds=10, now=lambda: clock[0])
    for i in range(10):
        with pytest.raises(KmsError):
            cache.load(b"bad-%d" % i, WrappedKey("orders", 1, bytes([i]) * 60))
    assert len(cache.refusals) == 3
    cache.load(b"good-0", kms.wrap("orders", b"\1" * 32))
    clock[0] = 20.0
    cache.load(b"good-1", kms.wrap("orders", b"\2" * 32))
    assert list(cache.entries) == [b"good-1"]  # the expired key no longer sits in memory


def test_a_deterministic_field_naming_a_malformed_kek_never_reaches_the_kms(kms: LocalKms) -> None:
    spy = CountingKms(kms)
    policy = FieldPolicy.from_json_schema(
        {"type": "object", "properties": {"ssn": {"type": "string", "confluent:tags": ["PII"]}}},
        deterministic_tags=["PII"],  # a randomized rule refuses deterministic ciphertexts before any KMS call
    )
    deserializer = FieldDecryptingDeserializer(spy, policy)  # type: ignore[arg-type]
    kek = b"../../transit/keys"
    forged = base64.b64encode(DETERMINISTIC_MAGIC + bytes((len(kek),)) + kek + b"\0" * 32).decode()
    with pytest.raises(DecryptionError, match="not available"):
        deserializer({"ssn": forged}, SerializationContext("t", MessageField.VALUE, []))
    assert spy.derived == []


def test_an_empty_cache_passed_in_is_the_one_used(kms: LocalKms) -> None:
    from encryption import RecordKeyDeserializer

    shared = DataKeyCache(kms)  # empty, so falsy: it used to be silently replaced by a private cache
    assert DecryptingDeserializer(kms, cache=shared).cache is shared
    assert RecordKeyDeserializer(kms, cache=shared).cache is shared
    policy = FieldPolicy.from_json_schema(
        {"type": "object", "properties": {"ssn": {"type": "string", "confluent:tags": ["PII"]}}}
    )
    assert FieldDecryptingDeserializer(kms, policy, cache=shared).cache is shared


def _hashed_record(kms: LocalKms) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    from encryption import RecordKeySerializer

    headers: list[tuple[str, bytes]] = []
    out = SerializationContext("orders-topic", MessageField.KEY, headers)
    key = RecordKeySerializer(kms, "orders", hash_keys=True)(b"customer-42", out)
    out.field = MessageField.VALUE
    value = EncryptingSerializer(kms, "orders")(b"order", out)
    assert key is not None and value is not None
    return key, value, headers


def test_stripping_the_protected_key_header_is_refused_when_hashed_keys_are_expected(kms: LocalKms) -> None:
    from encryption import RecordKeyDeserializer
    from encryption.envelope import KEY_HEADER

    key, _, headers = _hashed_record(kms)
    strict = RecordKeyDeserializer(kms, hashed_keys=True)
    assert strict(key, SerializationContext("orders-topic", MessageField.KEY, headers)) == b"customer-42"
    stripped = [(n, v) for n, v in headers if n != KEY_HEADER]
    with pytest.raises(DecryptionError, match="not protected") as caught:
        strict(key, SerializationContext("orders-topic", MessageField.KEY, stripped))
    assert caught.value.topic == "orders-topic"
    with pytest.raises(DecryptionError, match="not protected"):  # a null header value counts as missing
        strict(key, SerializationContext("orders-topic", MessageField.KEY, [*stripped, (KEY_HEADER, None)]))
    assert strict(None, SerializationContext("orders-topic", MessageField.KEY, [])) is None  # null keys stay null
    # the lenient default still reads plain keys
    assert RecordKeyDeserializer(kms)(b"plain", SerializationContext("t", MessageField.KEY, [])) == b"plain"


def test_a_duplicate_header_after_a_null_one_is_refused(kms: LocalKms) -> None:
    from encryption import RecordKeyDeserializer
    from encryption.envelope import KEY_HEADER

    key, value, headers = _hashed_record(kms)
    protected = dict(headers)[KEY_HEADER]
    doubled = [(KEY_HEADER, None), *headers]
    with pytest.raises(DecryptionError, match="more than one"):
        RecordKeyDeserializer(kms)(key, SerializationContext("orders-topic", MessageField.KEY, doubled))
    enc = dict(headers)[HEADER]
    value_doubled = [(HEADER, None), (HEADER, enc), (KEY_HEADER, protected)]
    ctx_value = SerializationContext("orders-topic", MessageField.VALUE, value_doubled)
    with pytest.raises(DecryptionError, match="more than one"):
        DecryptingDeserializer(kms)(value, ctx_value)


def test_a_replayed_deterministic_field_naming_an_unknown_kek_costs_one_kms_call(kms: LocalKms) -> None:
    spy = CountingKms(kms)
    policy = FieldPolicy.from_json_schema(
        {"type": "object", "properties": {"ssn": {"type": "string", "confluent:tags": ["PII"]}}},
        deterministic_tags=["PII"],  # a randomized rule refuses deterministic ciphertexts before any KMS call
    )
    deserializer = FieldDecryptingDeserializer(spy, policy)  # type: ignore[arg-type]
    forged = base64.b64encode(DETERMINISTIC_MAGIC + b"\x05ghost" + b"\0" * 32).decode()
    for _ in range(20):
        with pytest.raises(DecryptionError, match="'ghost' is not available"):
            deserializer({"ssn": forged}, SerializationContext("t", MessageField.VALUE, []))
    assert spy.derived == ["ghost"]


def test_a_value_moved_onto_another_key_is_refused_when_key_binding_is_required(kms: LocalKms) -> None:
    from encryption import RecordKeyDeserializer

    # A producer without RecordKeySerializer: its values are not bound to their keys.
    headers: list[tuple[str, bytes]] = []
    value = EncryptingSerializer(kms, "orders", bind_key=False)(b"alice's order", SerializationContext("o", MessageField.VALUE, headers))
    moved = SerializationContext("o", MessageField.KEY, list(headers))
    assert RecordKeyDeserializer(kms)(b"bob", moved) == b"bob"
    moved.field = MessageField.VALUE
    assert DecryptingDeserializer(kms)(value, moved) == b"alice's order"  # lenient default: accepted
    strict = DecryptingDeserializer(kms, require_key_bound=True)
    parsed, _ = parse_header(dict(headers)[HEADER])
    strict.cache.load(parsed.cache_key, parsed.wrapped)  # data key cached: the inlined path is taken
    strict._opener.suffixes.get(b"V", "o")
    with pytest.raises(DecryptionError, match="not bound to its Kafka key"):
        strict(value, moved)
    # switched on after construction, both the inlined path and the reference path refuse
    lenient = DecryptingDeserializer(kms)
    assert lenient(value, moved) == b"alice's order"  # data key cached: the inlined path from now on
    lenient.require_key_bound = True
    with pytest.raises(DecryptionError, match="not bound to its Kafka key"):
        lenient(value, moved)
    # bound records still pass the strict consumer
    from encryption import RecordKeySerializer

    bound_headers: list[tuple[str, bytes]] = []
    out = SerializationContext("o", MessageField.KEY, bound_headers)
    wire_key = RecordKeySerializer(kms, "orders")(b"bob", out)
    out.field = MessageField.VALUE
    bound = EncryptingSerializer(kms, "orders")(b"bob's order", out)
    back = SerializationContext("o", MessageField.KEY, bound_headers)
    RecordKeyDeserializer(kms)(wire_key, back)
    back.field = MessageField.VALUE
    assert strict(bound, back) == b"bob's order"


def test_records_naming_an_unknown_kek_cost_one_kms_call_whatever_their_wrapped_bytes(kms: LocalKms) -> None:
    spy = CountingKms(kms)
    deserializer = DecryptingDeserializer(spy)  # type: ignore[arg-type]
    for i in range(20):
        with pytest.raises(DecryptionError, match="no key named 'ghost'"):
            deserializer(b"x" * 32, ctx(forged_header(b"ghost", blob=bytes([i]) * 60)))
        with pytest.raises(DecryptionError, match="has no version 9"):
            deserializer(b"x" * 32, ctx(forged_header(b"orders", version=9, blob=bytes([i]) * 60)))
    assert spy.unwrapped == ["ghost", "orders"]


def test_a_non_bytes_value_in_an_encrypted_bytes_field_is_refused_without_allocating(kms: LocalKms) -> None:
    policy = FieldPolicy.from_avro({
        "type": "record", "name": "R",
        "fields": [{"name": "blob", "type": "bytes", "confluent:tags": ["PII"]}],
    })
    # An inner deserializer that lets anything through (without one, the schema check refuses it first).
    deserializer = FieldDecryptingDeserializer(kms, policy, lambda data, _: data)
    with pytest.raises(DecryptionError, match="'blob' is not encrypted"):
        deserializer({"blob": 10**13}, SerializationContext("t", MessageField.VALUE, []))
    with pytest.raises(DecryptionError, match="does not match the policy's Avro schema"):
        FieldDecryptingDeserializer(kms, policy)({"blob": 10**13}, SerializationContext("t", MessageField.VALUE, []))


class _NoVault:
    url = "https://vault.invalid"

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"Vault was called ({name})")


@pytest.mark.parametrize("wrapped", [
    WrappedKey("orders", 1, b"vault:v1:QUFBQQ==\n"),  # a trailing newline slipped past `$`
    WrappedKey("../sys", 1, b"vault:v1:QUFBQQ=="),
])
def test_vault_refuses_hostile_wrapped_keys_before_calling_vault(wrapped: WrappedKey) -> None:
    from encryption.vault import VaultTransitKms

    vault = VaultTransitKms(_NoVault())  # type: ignore[arg-type]
    with pytest.raises(KmsError):
        vault.unwrap(wrapped)
    with pytest.raises(KmsError):
        vault.derived_secret("../sys", b"label")


@pytest.mark.parametrize("properties", [
    {"a.b": {"type": "string", "confluent:tags": ["PII"]},
     "a": {"type": "object", "properties": {"b": {"type": "string", "confluent:tags": ["PII"]}}}},
    {"a\0b": {"type": "string", "confluent:tags": ["PII"]}},
])
def test_fields_whose_names_could_be_confused_are_refused(properties: dict[str, Any]) -> None:
    from encryption import EncryptionError

    with pytest.raises(EncryptionError, match="ambiguous"):
        FieldPolicy.from_json_schema({"type": "object", "properties": properties})


def test_one_field_reached_twice_is_not_ambiguous(kms: LocalKms) -> None:
    tagged = {"type": "string", "confluent:tags": ["PII"]}
    policy = FieldPolicy.from_json_schema(
        {"type": "object", "properties": {"ssn": tagged}, "allOf": [{"properties": {"ssn": tagged}}]}
    )
    assert {rule.name for rule in policy.rules} == {"ssn"}
