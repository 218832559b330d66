"""The encrypted-record format (version 1; field format version 2), pure functions only.

A record value encrypted in *header form* keeps the ciphertext (AES-256-GCM output, 16-byte tag at the
end) as the value and carries one header, `kgov.enc`, whose value is:

    version   1 byte   = 1 (an unknown version is refused)
    flags     1 byte   bit 0: payload compressed (zlib) before encryption
                       bit 1: the Kafka record key is bound into the associated data
    kek_len   1 byte,  kek name (UTF-8)
    kek_ver   4 bytes  big-endian version of the KEK that wrapped the data key
    edek_len  2 bytes, wrapped data key (opaque to us; the KMS's format)
    nonce     12 bytes (a per-data-key counter: never repeats under one data key)

The *envelope form*, for paths without headers, is `MAGIC + header + ciphertext` in the value itself.

Field-level ciphertexts (`encryption.fields`) are envelopes too. Since format version 2 (the version
byte of their header) each is bound to its record: the record carries `kgov.enc.rec` once (16 random
bytes, new for every record), and a field's associated data ends with the Kafka key (only when flag bit
1 says so), that identifier and the field's concrete position (array indexes, map keys). Whole values
and protected keys stay at version 1.

Associated data binds the ciphertext to everything that decides how it is read:
`header || field tag || len16(topic) || topic [|| len32(key) || key]`. Replaying a record into
another topic, onto another key (when bound), or editing any header byte fails the GCM tag.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from encryption.errors import DecryptionError
from encryption.kms import WrappedKey

FORMAT_VERSION = 1
FIELD_FORMAT_VERSION = 2  # randomized field ciphertexts bound to their record (RECORD_HEADER)
HEADER = "kgov.enc"
KEY_HEADER = "kgov.enc.key"
RECORD_HEADER = "kgov.enc.rec"
RECORD_ID_SIZE = 16
SIGNATURE_HEADER = "kgov.sig"
MAGIC = b"KGE\x01"
NONCE_SIZE = 12
TAG_SIZE = 16

FLAG_COMPRESSED = 0x01
FLAG_KEY_BOUND = 0x02
KNOWN_FLAGS = FLAG_COMPRESSED | FLAG_KEY_BOUND

FIELD_VALUE = b"V"
FIELD_KEY = b"K"

NO_KEY = b"\xff\xff\xff\xff"  # a null Kafka key in the associated data


def key_part(wrapped: WrappedKey) -> bytes:
    """The constant middle of a header for one data key: KEK name and version, wrapped key."""
    name = wrapped.key_name.encode("utf-8")
    if not 0 < len(name) < 256 or len(wrapped.blob) > 0xFFFF:
        raise ValueError("KEK name or wrapped key too long for format version 1")
    return (
        bytes((len(name),)) + name + struct.pack(">IH", wrapped.version, len(wrapped.blob)) + wrapped.blob
    )


def header_prefix(flags: int, wrapped_part: bytes, version: int = FORMAT_VERSION) -> bytes:
    """Everything in the header except the nonce."""
    return bytes((version, flags)) + wrapped_part


def aad_suffix(field_tag: bytes, topic: bytes) -> bytes:
    """The part of the associated data after the header, for records not bound to their key."""
    if len(topic) > 0xFFFF:
        raise ValueError("topic name too long")
    return field_tag + len(topic).to_bytes(2, "big") + topic


def key_tail(key: bytes | None) -> bytes:
    """What a bound Kafka key adds at the end of the associated data."""
    return NO_KEY if key is None else len(key).to_bytes(4, "big") + key


def associated_data(header: bytes, field_tag: bytes, topic: bytes, key: bytes | None, key_bound: bool) -> bytes:
    aad = header + aad_suffix(field_tag, topic)
    return aad + key_tail(key) if key_bound else aad


@dataclass(frozen=True, slots=True)
class ParsedHeader:
    flags: int
    wrapped: WrappedKey
    nonce: bytes = field(repr=False)
    cache_key: bytes = field(repr=False)  # KEK name, version and wrapped key: what the data-key cache keys on


def parse_header(buf: bytes, start: int = 0, versions: tuple[int, ...] = (FORMAT_VERSION,)) -> tuple[ParsedHeader, int]:
    """Parses a header at `buf[start:]`; returns it and the index just past it. `versions`: the format
    versions the caller reads (whole values and keys: 1 only)."""
    try:
        version = buf[start]
        if version not in versions:
            raise DecryptionError(f"unknown encryption format version {version}")
        flags = buf[start + 1]
        if flags & ~KNOWN_FLAGS:
            raise DecryptionError(f"unknown encryption flags 0x{flags:02x}")
        name_len = buf[start + 2]
        pos = start + 3
        name = buf[pos : pos + name_len].decode("utf-8")
        pos += name_len
        kek_version, edek_len = struct.unpack_from(">IH", buf, pos)
        pos += 6
        blob = bytes(buf[pos : pos + edek_len])
        pos += edek_len
        nonce = bytes(buf[pos : pos + NONCE_SIZE])
        if name_len == 0 or len(blob) != edek_len or len(nonce) != NONCE_SIZE:
            raise DecryptionError("truncated encryption header")
        cache_key = bytes(buf[start + 2 : pos])
        return ParsedHeader(flags, WrappedKey(name, kek_version, blob), nonce, cache_key), pos + NONCE_SIZE
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise DecryptionError("malformed encryption header") from exc
