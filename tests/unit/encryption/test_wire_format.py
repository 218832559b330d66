"""Format version 1 is a contract: records written before the serdes' hot paths were tuned must still
decrypt, and the serializer must still write them byte for byte (header layout, counter nonces from 0,
associated data). The records below were produced by the serializer of commit 2fa0231 with the key
ring and the deterministic randomness of `_deterministic_serializer`."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
from pathlib import Path

import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from encryption import DecryptingDeserializer, DecryptionError, EncryptingSerializer, LocalKms, RecordContext

VALUE = MessageField.VALUE
# version 1, flags 0, KEK "orders" v1, the 60-byte wrapped data key: what precedes the nonce
_PREFIX = (
    "0100066f72646572730000000100"
    "3c99bf0e3e0cc836afea6a9a0e1e56480b085ade47364276fdae62d6b9f3f1e8abd2fcf33738b822291385f8e26bb5ef2ef5839276adee53282e94704e"
)
_BOUND_PREFIX = "0102" + _PREFIX[4:]
_NO_KEY = object()

# (plaintext, Kafka key or _NO_KEY, value hex, kgov.enc header hex or None for the envelope form)
RECORDS = [
    (b"first record", _NO_KEY, "ba96e8a9acd653dfef4f0740bd0cdece4293a7f146792f9074b45612",
     _PREFIX + "000000000000000000000000"),
    (b"second record", _NO_KEY, "04f0fb5f1d1a404544c0a5f52a704930f9cdb54b72186dd9a0183f820e",
     _PREFIX + "000000000000000000000001"),
    (b"bound to alice", b"alice", "bbba0d6d587ab9ff210e93676ebb0218894f5d3d64e3032f5e7f2486fa5c",
     _BOUND_PREFIX + "000000000000000000000002"),
    (b"bound to a null key", None, "5493b0e5e295a1dd9474a063c951b6c5264d10a6ab540ea6a266e1225217f1d0f7efc2",
     _BOUND_PREFIX + "000000000000000000000003"),
    (b"envelope form", _NO_KEY,
     "4b474501" + _PREFIX + "000000000000000000000004ae925598e307aeb559b3c882dc5a62b8bf8938a566a111a29b7b921eac",
     None),
]


@pytest.fixture
def fixed_kms(tmp_path: Path) -> LocalKms:
    ring = tmp_path / "ring.json"
    document = {
        "format": "kgov-keyring",
        "version": 1,
        "keys": {"orders": {"current": 1, "versions": {"1": {"material": base64.b64encode(bytes(range(32))).decode()}}}},
    }
    fd = os.open(ring, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(document, out)
    return LocalKms(ring)


def _context(key: object, headers: list[tuple[str, bytes]] | None) -> SerializationContext:
    if key is _NO_KEY:
        return SerializationContext("orders", VALUE, headers)  # type: ignore[arg-type]
    return RecordContext("orders", VALUE, headers, key=key)


def _stored(value_hex: str, header_hex: str | None) -> tuple[bytes, list[tuple[str, bytes]] | None]:
    return bytes.fromhex(value_hex), None if header_hex is None else [("kgov.enc", bytes.fromhex(header_hex))]


def test_records_written_by_the_original_serializer_still_decrypt(fixed_kms: LocalKms) -> None:
    warm = DecryptingDeserializer(fixed_kms)
    for plaintext, key, value_hex, header_hex in RECORDS * 2:  # first pass fills the cache, second is warm
        value, headers = _stored(value_hex, header_hex)
        assert DecryptingDeserializer(fixed_kms)(value, _context(key, headers)) == plaintext
        assert warm(value, _context(key, headers)) == plaintext
    assert warm.cache.kms_calls == 1
    tampered_nonce = bytes.fromhex(str(RECORDS[1][3])[:-2] + "00")
    with pytest.raises(DecryptionError, match="authentication failed"):
        warm(bytes.fromhex(str(RECORDS[1][2])), _context(_NO_KEY, [("kgov.enc", tampered_nonce)]))


def test_the_serializer_still_writes_the_same_bytes(fixed_kms: LocalKms, monkeypatch: pytest.MonkeyPatch) -> None:
    counter = itertools.count()
    monkeypatch.setattr(os, "urandom", lambda n: hashlib.sha256(b"kgov-test-%d" % next(counter)).digest()[:n])
    # bind_key=True refuses records whose key is not known: the unbound records come from a second
    # serializer sharing the data key (and so the nonce counter) through the issuer.
    bound = EncryptingSerializer(fixed_kms, "orders")
    unbound = EncryptingSerializer(fixed_kms, "orders", bind_key=False, issuer=bound.issuer)
    for plaintext, key, value_hex, header_hex in RECORDS:
        headers: list[tuple[str, bytes]] | None = None if header_hex is None else []
        serializer = unbound if key is _NO_KEY else bound
        value = serializer(plaintext, _context(key, headers))
        assert value is not None
        assert value.hex() == value_hex
        assert headers == (None if header_hex is None else [("kgov.enc", bytes.fromhex(header_hex))])
