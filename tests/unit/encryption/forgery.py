"""Helpers of the tests of records written by someone without keys: a KMS that records what reaches
it, and a header naming a KEK and wrapped-key bytes of the caller's choosing."""

from __future__ import annotations

import struct
from typing import Any

from encryption import LocalKms
from encryption.envelope import header_prefix
from encryption.kms import WrappedKey


class CountingKms:
    """A LocalKms that records which key names reached it."""

    def __init__(self, inner: LocalKms) -> None:
        self.inner = inner
        self.unwrapped: list[str] = []
        self.derived: list[str] = []

    @property
    def unwraps(self) -> int:
        return len(self.unwrapped)

    def unwrap(self, wrapped: WrappedKey) -> bytes:
        self.unwrapped.append(wrapped.key_name)
        return self.inner.unwrap(wrapped)

    def derived_secret(self, key_name: str, label: bytes) -> bytes:
        self.derived.append(key_name)
        return self.inner.derived_secret(key_name, label)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def forged_header(kek: bytes, version: int = 1, blob: bytes = b"\0" * 60) -> bytes:
    """A value header (no flags, a zero nonce) naming `kek` version `version` and wrapped key `blob`."""
    part = bytes((len(kek),)) + kek + struct.pack(">IH", version, len(blob)) + blob
    return header_prefix(0, part) + b"\0" * 12
