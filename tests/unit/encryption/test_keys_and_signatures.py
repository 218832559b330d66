"""Protected message keys (binding, keyed hashes) and Ed25519 record signatures."""

from __future__ import annotations

import pytest
from confluent_kafka.serialization import (
    MessageField,
    SerializationContext,
    StringDeserializer,
    StringSerializer,
)
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from encryption import (
    DecryptingDeserializer,
    DecryptionError,
    EncryptingSerializer,
    EncryptionError,
    LocalKms,
    RecordContext,
    RecordKeyDeserializer,
    RecordKeySerializer,
    Signer,
)
from encryption.envelope import KEY_HEADER, SIGNATURE_HEADER


class Producer:
    """What SerializingProducer does: one context, key serializer first, then the value serializer."""

    def __init__(self, kms: LocalKms, *, hash_keys: bool = False, signer: Signer | None = None) -> None:
        self.key_serializer = RecordKeySerializer(kms, "orders", StringSerializer(), hash_keys=hash_keys)
        self.value_serializer = EncryptingSerializer(kms, "orders", StringSerializer(), signer=signer)

    def produce(self, key: str | None, value: str | None, headers: list | None = None, topic: str = "orders"
                ) -> tuple[bytes | None, bytes | None, list]:
        headers = [] if headers is None else headers
        ctx = SerializationContext(topic, MessageField.KEY, headers)
        wire_key = self.key_serializer(key, ctx)
        ctx.field = MessageField.VALUE
        return wire_key, self.value_serializer(value, ctx), headers


def consume(kms: LocalKms, key: bytes | None, value: bytes | None, headers: list, topic: str = "orders",
            **options: object) -> tuple[str | None, str | None]:
    """What DeserializingConsumer does: one context, key deserializer first."""
    ctx = SerializationContext(topic, MessageField.KEY, headers)
    plain_key = RecordKeyDeserializer(kms, StringDeserializer())(key, ctx)
    ctx.field = MessageField.VALUE
    return plain_key, DecryptingDeserializer(kms, StringDeserializer(), **options)(value, ctx)  # type: ignore[arg-type]


def test_value_is_bound_to_its_key(kms: LocalKms) -> None:
    key, value, headers = Producer(kms).produce("alice", "secret")
    assert key == b"alice"
    assert consume(kms, key, value, headers) == ("alice", "secret")
    with pytest.raises(DecryptionError, match="authentication failed"):
        consume(kms, b"mallory", value, headers)
    # A plain value deserializer does not know the key: a clear error, not garbage.
    with pytest.raises(DecryptionError, match="RecordKeyDeserializer"):
        DecryptingDeserializer(kms)(value, SerializationContext("orders", MessageField.VALUE, headers))
    # A null key is bound too.
    key, value, headers = Producer(kms).produce(None, "secret")
    assert consume(kms, None, value, headers) == (None, "secret")
    with pytest.raises(DecryptionError):
        consume(kms, b"", value, headers)


def test_unbound_serializer_reads_without_a_key_deserializer(kms: LocalKms) -> None:
    serializer = EncryptingSerializer(kms, "orders", bind_key=False)
    ctx = RecordContext("orders", MessageField.VALUE, [], key=b"alice")
    value = serializer(b"secret", ctx)
    plain = SerializationContext("orders", MessageField.VALUE, ctx.headers)
    assert DecryptingDeserializer(kms)(value, plain) == b"secret"


def test_hashed_keys_are_stable_hide_the_key_and_restore_it(kms: LocalKms) -> None:
    producer = Producer(kms, hash_keys=True)
    key1, value1, headers1 = producer.produce("alice@example.com", "one")
    key2, _, _ = producer.produce("alice@example.com", "two")
    key3, _, _ = producer.produce("bob@example.com", "three")
    assert key1 is not None and len(key1) == 32 and key1 == key2 != key3
    assert b"alice" not in key1 and all(b"alice" not in value for _, value in headers1)
    assert [name for name, _ in headers1] == [KEY_HEADER, "kgov.enc"]
    assert consume(kms, key1, value1, headers1) == ("alice@example.com", "one")
    # The hash survives a KEK rotation (compaction keeps working) and another producer agrees on it.
    kms.rotate_key("orders")
    assert Producer(kms, hash_keys=True).produce("alice@example.com", "four")[0] == key1
    # The protected key is bound to the hashed key: it cannot be moved onto another record's key.
    with pytest.raises(DecryptionError, match="authentication failed"):
        consume(kms, key3, value1, headers1)


def test_hashed_keys_need_headers(kms: LocalKms) -> None:
    serializer = RecordKeySerializer(kms, "orders", hash_keys=True)
    with pytest.raises(EncryptionError, match="headers=\\[\\]"):
        serializer(b"alice", SerializationContext("orders", MessageField.KEY, None))


def test_tombstones_with_hashed_keys_keep_the_key_readable(kms: LocalKms) -> None:
    key, value, headers = Producer(kms, hash_keys=True).produce("alice", None)
    assert value is None and key is not None and len(key) == 32
    assert consume(kms, key, value, headers) == ("alice", None)


def signer_and_trust() -> tuple[Signer, dict]:
    private = Ed25519PrivateKey.generate()
    return Signer("producer-1", private), {"producer-1": private.public_key()}


def test_signed_records_verify_against_trusted_keys(kms: LocalKms) -> None:
    signer, trusted = signer_and_trust()
    key, value, headers = Producer(kms, signer=signer).produce("alice", "secret", [("trace", b"abc")])
    assert [name for name, _ in headers] == ["trace", "kgov.enc", SIGNATURE_HEADER]
    assert consume(kms, key, value, headers, trusted_signers=trusted) == ("alice", "secret")
    # Tombstones are signed as well, so a forged deletion is caught.
    key, tomb, tomb_headers = Producer(kms, signer=signer).produce("alice", None)
    assert consume(kms, key, tomb, tomb_headers, trusted_signers=trusted) == ("alice", None)
    with pytest.raises(DecryptionError, match="not signed"):
        consume(kms, key, None, [], trusted_signers=trusted)


@pytest.mark.parametrize("attack", ["header", "key", "topic", "untrusted", "unsigned", "value"])
def test_signature_failures(kms: LocalKms, attack: str) -> None:
    signer, trusted = signer_and_trust()
    topic = "orders"
    key, value, headers = Producer(kms, signer=signer).produce("alice", "secret", [("trace", b"abc")])
    assert value is not None
    if attack == "header":
        headers = [("trace", b"abd"), *headers[1:]]
    elif attack == "key":
        key = b"bob"
    elif attack == "topic":
        topic = "payments"
    elif attack == "untrusted":
        trusted = {"producer-1": Ed25519PrivateKey.generate().public_key()}
    elif attack == "unsigned":
        headers = [h for h in headers if h[0] != SIGNATURE_HEADER]
    elif attack == "value":
        value = value[:-1] + bytes([value[-1] ^ 1])
    with pytest.raises(DecryptionError):
        consume(kms, key, value, headers, topic=topic, trusted_signers=trusted)


def test_signing_needs_the_key_and_headers(kms: LocalKms) -> None:
    signer, _ = signer_and_trust()
    serializer = EncryptingSerializer(kms, "orders", signer=signer)
    with pytest.raises(EncryptionError, match="RecordKeySerializer"):
        serializer(b"x", SerializationContext("orders", MessageField.VALUE, []))
    with pytest.raises(EncryptionError, match="headers"):
        serializer(b"x", RecordContext("orders", MessageField.VALUE, None, key=b"k"))
    assert "private" not in repr(signer) and "producer-1" in repr(signer)
