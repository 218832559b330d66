"""Findings of the adversarial cryptographic review (2026-11-22): each test failed on the code before its fix.

The attacker here can write to the topic (any bytes, any headers) and may hold some keys, but not the
ones the test says it lacks.
"""

from __future__ import annotations

import pytest
from confluent_kafka.serialization import MessageField, SerializationContext
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from encryption import (
    EncryptingSerializer,
    EncryptionError,
    LocalKms,
    RecordKeySerializer,
    Signer,
)
from encryption.reencrypt import Reencryptor


def _produce(kms: LocalKms, key: bytes, value: bytes, headers: list, **options: object) -> tuple:
    ctx = SerializationContext("orders", MessageField.KEY, headers)
    wire_key = RecordKeySerializer(kms, "orders")(key, ctx)
    ctx.field = MessageField.VALUE
    return wire_key, EncryptingSerializer(kms, "orders", **options)(value, ctx), headers  # type: ignore[arg-type]


# -- reencrypt: a signature is checked before it is replaced by the operator's -------------------------------


def test_reencryptor_does_not_launder_a_signature_it_did_not_check(kms: LocalKms) -> None:
    """A record signed by a key nobody trusts (here: a forged signature) must not come out of
    re-encryption signed by the operator's trusted key."""
    operator = Signer("ops", Ed25519PrivateKey.generate())
    mallory = Signer("p1", Ed25519PrivateKey.generate())  # claims the producer's key id, with her own key
    key, value, headers = _produce(kms, b"alice", b"pay mallory", [], signer=mallory)
    kms.rotate_key("orders")
    with pytest.raises(EncryptionError, match="trusted_signers"):
        Reencryptor(kms, "orders", signer=operator).rewrite("orders", key, value, headers)
