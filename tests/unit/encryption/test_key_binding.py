"""bind_key=True never writes a record that is not bound to its Kafka key: the pairing with
RecordKeySerializer is checked when the producer config is built, and every record is checked again."""

from __future__ import annotations

import pytest
from confluent_kafka.error import ValueSerializationError
from confluent_kafka.serialization import MessageField, SerializationContext, StringSerializer
from confluent_kafka.serializing_producer import SerializingProducer

from encryption import (
    DecryptingDeserializer,
    EncryptingSerializer,
    EncryptionError,
    LocalKms,
    RecordContext,
    RecordKeyDeserializer,
    RecordKeySerializer,
    check_serializer_pairing,
)
from encryption.envelope import FLAG_KEY_BOUND, HEADER, parse_header

VALUE = MessageField.VALUE
# Nothing listens there: SerializingProducer.produce runs both serializers before it queues the record.
NO_BROKER = "127.0.0.1:9"


def producer(key_serializer: object, value_serializer: object) -> SerializingProducer:
    config: dict[str, object] = {"bootstrap.servers": NO_BROKER, "value.serializer": value_serializer}
    if key_serializer is not None:
        config["key.serializer"] = key_serializer
    return SerializingProducer(config)


@pytest.mark.parametrize("key_serializer", [None, StringSerializer()], ids=["no-key-serializer", "string"])
def test_the_confluent_producer_refuses_a_record_it_could_not_bind(kms: LocalKms, key_serializer: object) -> None:
    encrypting = EncryptingSerializer(kms, "orders", StringSerializer())
    kafka = producer(key_serializer, encrypting)
    headers: list[tuple[str, bytes]] = []
    key = "alice" if key_serializer is not None else b"alice"
    with pytest.raises(ValueSerializationError) as info:
        kafka.produce("orders", key=key, value="secret", headers=headers)
    refusal = info.value.__context__  # confluent-kafka raises it from inside `except Exception as se`
    assert isinstance(refusal, EncryptionError)
    assert "RecordKeySerializer" in str(refusal) and "bind_key=False" in str(refusal)
    assert headers == []  # no header half-written (tests/integration/encryption/test_broker.py: nothing stored)
    # The same serializer with RecordKeySerializer: produced, and bound.
    paired = producer(RecordKeySerializer(kms, "orders", StringSerializer()), encrypting)
    paired.produce("orders", key="alice", value="secret", headers=headers)
    assert parse_header(dict(headers)[HEADER])[0].flags & FLAG_KEY_BOUND


def test_a_warm_serializer_refuses_a_record_whose_key_is_unknown(kms: LocalKms) -> None:
    """The inlined hot path (data key active, topic seen) must refuse too, not only the first record."""
    serializer = EncryptingSerializer(kms, "orders")
    for i in range(3):
        headers: list[tuple[str, bytes]] = []
        assert serializer(b"bound %d" % i, RecordContext("orders", VALUE, headers, key=b"k")) is not None
        assert parse_header(headers[0][1])[0].flags == FLAG_KEY_BOUND
    assert serializer._sealer.hot is not None
    for headers_or_none in ([], None):  # header form and envelope form
        with pytest.raises(EncryptionError, match="key is not known"):
            serializer(b"unbound", SerializationContext("orders", VALUE, headers_or_none))
        assert not headers_or_none


def test_null_keys_and_tombstones(kms: LocalKms) -> None:
    serializer = EncryptingSerializer(kms, "orders")
    headers: list[tuple[str, bytes]] = []
    ctx = SerializationContext("orders", MessageField.KEY, headers)
    assert RecordKeySerializer(kms, "orders")(None, ctx) is None  # a null key is known too
    ctx.field = VALUE
    value = serializer(b"keyless", ctx)
    assert value is not None and parse_header(headers[0][1])[0].flags == FLAG_KEY_BOUND
    back = SerializationContext("orders", MessageField.KEY, headers)
    RecordKeyDeserializer(kms)(None, back)
    back.field = VALUE
    assert DecryptingDeserializer(kms)(value, back) == b"keyless"
    # A tombstone is never encrypted, so there is nothing to bind: it passes whatever the key serializer.
    assert serializer(None, SerializationContext("orders", VALUE, [])) is None


def test_bind_key_false_writes_unbound_records_on_purpose(kms: LocalKms) -> None:
    headers: list[tuple[str, bytes]] = []
    value = EncryptingSerializer(kms, "orders", bind_key=False)(b"x", RecordContext("orders", VALUE, headers, key=b"k"))
    assert value is not None and parse_header(headers[0][1])[0].flags == 0


def test_the_pairing_is_checked_when_the_producer_config_is_built(kms: LocalKms) -> None:
    binding = EncryptingSerializer(kms, "orders", StringSerializer())
    with pytest.raises(EncryptionError, match=r"key\.serializer StringSerializer does not make the key known"):
        check_serializer_pairing({"key.serializer": StringSerializer(), "value.serializer": binding})
    with pytest.raises(EncryptionError, match=r"no key\.serializer"):
        check_serializer_pairing({"value.serializer": binding})
    good = {"key.serializer": RecordKeySerializer(kms, "orders"), "value.serializer": binding}
    assert check_serializer_pairing(good) is good
    unbound = {"key.serializer": StringSerializer(), "value.serializer": EncryptingSerializer(kms, "orders", bind_key=False)}
    assert check_serializer_pairing(unbound) is unbound
    plain = {"key.serializer": StringSerializer(), "value.serializer": StringSerializer()}
    assert check_serializer_pairing(plain) is plain
    # What it returns goes straight into the producer.
    SerializingProducer({"bootstrap.servers": NO_BROKER, **check_serializer_pairing(good)})



def test_a_record_context_key_that_is_not_the_wire_bytes_is_refused_clearly() -> None:
    # A str key used to reach `len(key).to_bytes(...) + key` and fail there with a bare TypeError.
    with pytest.raises(EncryptionError, match=r"takes the record's key as written to Kafka \(bytes, or None\), got str"):
        RecordContext("orders", VALUE, [], key="k")
    for key in (b"k", bytearray(b"k"), None):
        RecordContext("orders", VALUE, [], key=key)
