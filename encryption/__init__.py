"""End-to-end encryption for Kafka records: brokers, the gateway and operators see ciphertext only.

Quick start (confluent-kafka)::

    from confluent_kafka import DeserializingConsumer, SerializingProducer
    from confluent_kafka.serialization import StringDeserializer, StringSerializer
    from encryption import (DecryptingDeserializer, EncryptingSerializer, LocalKms,
                            RecordKeyDeserializer, RecordKeySerializer, check_serializer_pairing)

    kms = LocalKms("/etc/kgov/keyring.json")        # created on first use, mode 0600
    kms.create_key("orders")                         # or `kgov encryption keys create orders`
    producer = SerializingProducer(check_serializer_pairing({"bootstrap.servers": "...",
        "key.serializer": RecordKeySerializer(kms, "orders", StringSerializer()),   # values are bound to keys
        "value.serializer": EncryptingSerializer(kms, "orders", StringSerializer())}))
    producer.produce("orders", key="k1", value="secret", headers=[])   # fresh headers per record
    consumer = DeserializingConsumer({"bootstrap.servers": "...", "group.id": "g",
        "key.deserializer": RecordKeyDeserializer(kms, StringDeserializer(), kek_names=["orders"]),
        "value.deserializer": DecryptingDeserializer(kms, StringDeserializer(), kek_names=["orders"])})

Modules: `envelope` (the record format, version 1), `kms` (the `Kms` interface, `LocalKms`),
`vault` (`VaultTransitKms`), `datakeys` (data-key lifetimes and the unwrapped-key cache), `serdes`
(the serializers), `signing` (Ed25519), `fields` (field-level encryption by schema tags),
`reencrypt` (rewriting after a KEK rotation, and field records into field format version 2), `retry`, `errors` (`DecryptionError`, the one error a
consumer sees), `cli` (`kgov encryption ...`). What each ciphertext is bound to, key binding, where
field tags may be written (and which are refused) and the KMS unwrap limit: docs/encryption.md.

Public interface (stable): `LocalKms`, `EncryptingSerializer`, `DecryptingDeserializer`,
`DecryptionError`; the rest is importable from here as well. Names load on first use, so the key
tools (`kms`, `errors`, `cli`) work where confluent-kafka (needed by the serdes) is not installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_MODULES = {
    "ANY_KEK": "encryption.serdes",
    "DataKeyCache": "encryption.datakeys",
    "DataKeyIssuer": "encryption.datakeys",
    "DataKeyPolicy": "encryption.datakeys",
    "DecryptingDeserializer": "encryption.serdes",
    "DecryptionError": "encryption.errors",
    "EncryptingSerializer": "encryption.serdes",
    "EncryptionError": "encryption.errors",
    "FieldDecryptingDeserializer": "encryption.fields",
    "FieldEncryptingSerializer": "encryption.fields",
    "FieldPolicy": "encryption.fields",
    "FieldReencryptor": "encryption.reencrypt",
    "InsecureKeyRingError": "encryption.errors",
    "KeyNotFoundError": "encryption.errors",
    "Kms": "encryption.kms",
    "KmsError": "encryption.errors",
    "KmsUnavailableError": "encryption.errors",
    "LocalKms": "encryption.kms",
    "RecordContext": "encryption.serdes",
    "RecordKeyDeserializer": "encryption.serdes",
    "RecordKeySerializer": "encryption.serdes",
    "ReencryptionReport": "encryption.reencrypt",
    "Reencryptor": "encryption.reencrypt",
    "RetryPolicy": "encryption.retry",
    "Signer": "encryption.signing",
    "check_serializer_pairing": "encryption.serdes",
    "UnwrapLimit": "encryption.datakeys",
    "UnwrapRateLimitedError": "encryption.errors",
    "WrappedKey": "encryption.kms",
    "reencrypt_topic": "encryption.reencrypt",
}

__all__ = [
    "ANY_KEK",
    "DataKeyCache",
    "DataKeyIssuer",
    "DataKeyPolicy",
    "DecryptingDeserializer",
    "DecryptionError",
    "EncryptingSerializer",
    "EncryptionError",
    "FieldDecryptingDeserializer",
    "FieldEncryptingSerializer",
    "FieldPolicy",
    "FieldReencryptor",
    "InsecureKeyRingError",
    "KeyNotFoundError",
    "Kms",
    "KmsError",
    "KmsUnavailableError",
    "LocalKms",
    "RecordContext",
    "RecordKeyDeserializer",
    "RecordKeySerializer",
    "ReencryptionReport",
    "Reencryptor",
    "RetryPolicy",
    "Signer",
    "UnwrapLimit",
    "UnwrapRateLimitedError",
    "WrappedKey",
    "check_serializer_pairing",
    "reencrypt_topic",
]

if TYPE_CHECKING:
    from encryption.datakeys import DataKeyCache, DataKeyIssuer, DataKeyPolicy, UnwrapLimit
    from encryption.errors import (
        DecryptionError,
        EncryptionError,
        InsecureKeyRingError,
        KeyNotFoundError,
        KmsError,
        KmsUnavailableError,
        UnwrapRateLimitedError,
    )
    from encryption.fields import FieldDecryptingDeserializer, FieldEncryptingSerializer, FieldPolicy
    from encryption.kms import Kms, LocalKms, WrappedKey
    from encryption.reencrypt import FieldReencryptor, ReencryptionReport, Reencryptor, reencrypt_topic
    from encryption.retry import RetryPolicy
    from encryption.serdes import (
        ANY_KEK,
        DecryptingDeserializer,
        EncryptingSerializer,
        RecordContext,
        RecordKeyDeserializer,
        RecordKeySerializer,
        check_serializer_pairing,
    )
    from encryption.signing import Signer


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'encryption' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
