"""LocalKms: key ring file, permissions, versions, wrapping, derived secrets; retry policy."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from encryption import (
    InsecureKeyRingError,
    KeyNotFoundError,
    KmsError,
    KmsUnavailableError,
    LocalKms,
    WrappedKey,
)
from encryption.retry import RetryPolicy, call_with_retry


def ring(tmp_path: Path) -> LocalKms:
    return LocalKms(tmp_path / "keys" / "ring.json")


def test_key_ring_is_created_on_first_use_with_owner_only_mode(tmp_path: Path) -> None:
    kms = ring(tmp_path)
    assert stat.S_IMODE(os.stat(kms.path).st_mode) == 0o600
    assert kms.key_names() == []
    assert kms.create_key("orders") == 1
    assert stat.S_IMODE(os.stat(kms.path).st_mode) == 0o600
    assert kms.key_names() == ["orders"]


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o666])
def test_wider_permissions_are_refused_with_the_fix(tmp_path: Path, mode: int) -> None:
    kms = ring(tmp_path)
    kms.create_key("orders")
    os.chmod(kms.path, mode)
    with pytest.raises(InsecureKeyRingError, match="chmod 600"):
        LocalKms(kms.path)
    # An instance that already runs refuses to re-read the widened file too.
    with pytest.raises(InsecureKeyRingError):
        kms.rotate_key("orders")


def test_key_material_never_appears_in_repr_or_errors(tmp_path: Path) -> None:
    kms = ring(tmp_path)
    kms.create_key("orders")
    document = json.loads(kms.path.read_text())
    material = document["keys"]["orders"]["versions"]["1"]["material"]
    wrapped = kms.wrap("orders", b"\x01" * 32)
    assert material not in repr(kms)
    assert "blob" not in repr(wrapped) and repr(wrapped.blob) not in repr(wrapped)
    kms.path.write_text(kms.path.read_text().replace('"current": 1', '"current": 7'))
    with pytest.raises(KmsError) as info:
        LocalKms(kms.path)
    assert material not in str(info.value)
    assert "corrupt" in str(info.value)


def test_rotation_keeps_old_versions_for_unwrapping(tmp_path: Path) -> None:
    kms = ring(tmp_path)
    kms.create_key("orders")
    old = kms.wrap("orders", b"a" * 32)
    assert kms.rotate_key("orders") == 2
    new = kms.wrap("orders", b"b" * 32)
    assert (old.version, new.version) == (1, 2)
    assert kms.unwrap(old) == b"a" * 32
    assert kms.unwrap(new) == b"b" * 32
    assert kms.current_version("orders") == 2


def test_unwrap_fails_for_unknown_key_version_or_tampering(tmp_path: Path) -> None:
    kms = ring(tmp_path)
    kms.create_key("orders")
    wrapped = kms.wrap("orders", b"a" * 32)
    with pytest.raises(KeyNotFoundError):
        kms.unwrap(WrappedKey("payments", 1, wrapped.blob))
    with pytest.raises(KeyNotFoundError):
        kms.unwrap(WrappedKey("orders", 9, wrapped.blob))
    tampered = bytearray(wrapped.blob)
    tampered[-1] ^= 1
    with pytest.raises(KmsError):
        kms.unwrap(WrappedKey("orders", 1, bytes(tampered)))
    # The wrapped key is bound to its name and version: it does not open as another key.
    kms.create_key("payments")
    with pytest.raises(KmsError):
        kms.unwrap(WrappedKey("payments", 1, wrapped.blob))


def test_two_processes_sharing_a_ring_see_each_others_rotations(tmp_path: Path) -> None:
    writer = ring(tmp_path)
    reader = LocalKms(writer.path)
    writer.create_key("orders")
    writer.rotate_key("orders")
    wrapped = writer.wrap("orders", b"c" * 32)
    assert reader.unwrap(wrapped) == b"c" * 32
    assert reader.current_version("orders") == 2
    writer.rotate_key("orders")
    assert reader.wrap("orders", b"d" * 32).version == 3  # new data keys use the other process's rotation


def test_create_rotate_errors(tmp_path: Path) -> None:
    kms = ring(tmp_path)
    kms.create_key("orders")
    with pytest.raises(KmsError, match="already exists"):
        kms.create_key("orders")
    with pytest.raises(KeyNotFoundError):
        kms.rotate_key("missing")
    with pytest.raises(KeyNotFoundError):
        kms.wrap("missing", b"a" * 32)
    for bad in ["", "has space", "../etc", "x" * 129]:
        with pytest.raises(KmsError):
            kms.create_key(bad)
    assert kms.ensure_key("orders") == 1
    assert kms.ensure_key("fresh") == 1


def test_derived_secret_is_stable_across_rotation_and_distinct_per_label_and_key(tmp_path: Path) -> None:
    kms = ring(tmp_path)
    kms.create_key("orders")
    kms.create_key("payments")
    before = kms.derived_secret("orders", b"key-hash")
    kms.rotate_key("orders")
    assert kms.derived_secret("orders", b"key-hash") == before
    assert len(before) == 32
    assert kms.derived_secret("orders", b"other") != before
    assert kms.derived_secret("payments", b"key-hash") != before


def test_retry_backs_off_then_reports_the_outage() -> None:
    waits: list[float] = []
    policy = RetryPolicy(attempts=4, initial_delay=0.1, max_delay=0.3, sleep=waits.append)
    calls = 0

    def down() -> int:
        nonlocal calls
        calls += 1
        raise KmsUnavailableError("connection refused")

    with pytest.raises(KmsUnavailableError, match="after 4 attempts"):
        call_with_retry(policy, "unwrap", down)
    assert calls == 4
    assert len(waits) == 3
    assert 0.05 <= waits[0] <= 0.1 and 0.1 <= waits[1] <= 0.2 and 0.15 <= waits[2] <= 0.3

    outcomes: list[object] = [KmsUnavailableError("blip"), 42]

    def flaky() -> int:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        assert isinstance(outcome, int)
        return outcome

    assert call_with_retry(policy, "unwrap", flaky) == 42

    def refused() -> int:
        raise KeyNotFoundError("no key")

    waits.clear()
    with pytest.raises(KeyNotFoundError):
        call_with_retry(policy, "unwrap", refused)
    assert waits == []  # permanent errors are not retried
