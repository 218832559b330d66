"""Optional Ed25519 signatures over a record's topic, key, value and headers.

The producer signs the bytes that go on the wire (so the value is the ciphertext when it is encrypted);
the consumer verifies against a set of trusted producer public keys, named by key id. The signed
message is a length-prefixed encoding (no ambiguity between fields) of:

    "kgov-sig-v1" || topic || key (or absent) || value (or absent) || headers sorted by (name, value)

where `headers` excludes the signature header itself. The header `kgov.sig` carries
`version(1) || len(key_id)(1) || key_id || signature(64)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from encryption.envelope import SIGNATURE_HEADER
from encryption.errors import DecryptionError, EncryptionError

_DOMAIN = b"kgov-sig-v1"
_VERSION = 1
_ABSENT = b"\xff\xff\xff\xff"

HeaderValue = str | bytes | None


def _lp(item: bytes | None) -> bytes:
    return _ABSENT if item is None else len(item).to_bytes(4, "big") + item


def _as_bytes(value: HeaderValue) -> bytes | None:
    return value.encode("utf-8") if isinstance(value, str) else value


def header_items(headers: object) -> list[tuple[str, bytes | None]]:
    """confluent-kafka headers (list of tuples or dict) as a list of (name, bytes) pairs."""
    if headers is None:
        return []
    items: Iterable[tuple[str, HeaderValue]]
    if isinstance(headers, Mapping):
        items = headers.items()
    elif isinstance(headers, list | tuple):
        items = headers
    else:
        raise EncryptionError("record headers must be a list of (name, value) tuples or a dict")
    return [(str(name), _as_bytes(value)) for name, value in items]


def signed_message(topic: str, key: bytes | None, value: bytes | None, headers: object) -> bytes:
    parts = [_DOMAIN, _lp(topic.encode("utf-8")), _lp(key), _lp(value)]
    signed_headers = sorted(
        ((name, val) for name, val in header_items(headers) if name != SIGNATURE_HEADER),
        key=lambda item: (item[0], item[1] or b""),
    )
    parts.append(len(signed_headers).to_bytes(4, "big"))
    for name, val in signed_headers:
        parts.append(_lp(name.encode("utf-8")))
        parts.append(_lp(val))
    return b"".join(parts)


@dataclass(frozen=True, slots=True)
class Signer:
    """A producer's signing key and the id consumers know its public key by."""

    key_id: str
    private_key: Ed25519PrivateKey = field(repr=False)

    def __post_init__(self) -> None:
        if not 0 < len(self.key_id.encode("utf-8")) < 256:
            raise ValueError("signer key_id must be 1-255 bytes")

    def signature_header(self, topic: str, key: bytes | None, value: bytes | None, headers: object) -> bytes:
        key_id = self.key_id.encode("utf-8")
        signature = self.private_key.sign(signed_message(topic, key, value, headers))
        return bytes((_VERSION, len(key_id))) + key_id + signature


def verify_signature(
    trusted: Mapping[str, Ed25519PublicKey],
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: object,
) -> str:
    """Checks the record's signature; returns the signer's key id or raises DecryptionError."""
    found = [val for name, val in header_items(headers) if name == SIGNATURE_HEADER]
    if not found or found[-1] is None:
        raise DecryptionError("record is not signed but signatures are required")
    if len(found) > 1:
        raise DecryptionError("record carries more than one signature header")
    header = found[0]
    assert header is not None
    if len(header) < 2 + 64 or header[0] != _VERSION or len(header) != 2 + header[1] + 64:
        raise DecryptionError("malformed signature header")
    key_id = header[2 : 2 + header[1]].decode("utf-8", errors="replace")
    public_key = trusted.get(key_id)
    if public_key is None:
        raise DecryptionError(f"record signed by untrusted key id {key_id!r}")
    try:
        public_key.verify(header[2 + header[1] :], signed_message(topic, key, value, headers))
    except InvalidSignature as exc:
        raise DecryptionError(f"signature by {key_id!r} does not verify") from exc
    return key_id
