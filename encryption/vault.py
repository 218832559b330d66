"""HashiCorp Vault's Transit secrets engine as a `Kms` (through hvac).

KEKs are Transit keys of type `aes256-gcm96`; they never leave Vault. A wrapped data key is Vault's
ciphertext string (`vault:v<N>:<base64>`), whose version prefix tells which KEK version wrapped it.
`wrap` refuses a key that does not exist (Transit itself would create it on first encrypt).
The derived secret is Transit's HMAC of the label under key version 1, so it survives rotations.
Connection failures, 5xx answers, rate limiting and a sealed Vault are `KmsUnavailableError` (retried by
the serdes); a missing key is `KeyNotFoundError`; anything else is `KmsError`.

Every unwrap answer carries a data key in plaintext (base64) and every request carries the token, so
Vault is reached over https (certificates verified: hvac's default, which kgov never turns off) or
plain http on the loopback interface only; `allow_http=True` accepts plain http elsewhere, for a
network the operator vouches for. A departure from Confluent: `HcVaultKmsClient` of confluent-kafka-python
(schema_registry/rules/encryption/hcvault/hcvault_client.py) builds its hvac.Client with verify=False.
An answer without the documented fields (or not base64) is a `KmsError`, never a stray exception.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import hvac
import hvac.exceptions
import requests

from encryption.errors import KeyNotFoundError, KmsError, KmsUnavailableError
from encryption.kms import WrappedKey, check_key_name

T = TypeVar("T")

_CIPHERTEXT = re.compile(r"vault:v(\d+):[A-Za-z0-9+/=]+\Z")  # \Z: no trailing newline (unlike $)


class VaultTransitKms:
    """`Kms` backed by Vault Transit. Pass an authenticated `hvac.Client` (or url and token)."""

    def __init__(
        self,
        client: hvac.Client | None = None,
        *,
        url: str | None = None,
        token: str | None = None,
        mount_point: str = "transit",
        timeout: float = 5.0,
        allow_http: bool = False,
    ) -> None:
        if client is None:
            if url is None:
                raise KmsError("VaultTransitKms needs an hvac.Client or a url")
            _check_transport(url, allow_http)
            client = hvac.Client(url=url, token=token, timeout=timeout)
        elif isinstance(getattr(client, "url", None), str):
            _check_transport(client.url, allow_http)
        self._client = client
        self.mount_point = mount_point
        self._known: set[str] = set()

    def __repr__(self) -> str:
        return f"VaultTransitKms(url={getattr(self._client, 'url', '?')!r}, mount_point={self.mount_point!r})"

    def _call(self, what: str, name: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except hvac.exceptions.InvalidPath as exc:
            raise KeyNotFoundError(f"Vault has no transit key {name!r}") from exc
        except (
            hvac.exceptions.VaultDown,
            hvac.exceptions.InternalServerError,
            hvac.exceptions.BadGateway,
            hvac.exceptions.RateLimitExceeded,
            requests.exceptions.ConnectionError,
            requests.exceptions.Timeout,
        ) as exc:
            raise KmsUnavailableError(f"Vault unavailable during {what}: {type(exc).__name__}") from exc
        except hvac.exceptions.InvalidRequest as exc:
            if "not found" in str(exc).lower():
                raise KeyNotFoundError(f"Vault has no transit key {name!r}") from exc
            raise KmsError(f"Vault refused {what} for {name!r}") from exc
        except hvac.exceptions.VaultError as exc:
            raise KmsError(f"Vault refused {what} for {name!r}: {type(exc).__name__}") from exc

    def _transit(self) -> Any:
        return self._client.secrets.transit

    def create_key(self, name: str) -> int:
        check_key_name(name)
        if self._key_exists(name):
            raise KmsError(f"key {name!r} already exists; use rotate_key to add a version")
        self._call("create_key", name, lambda: self._transit().create_key(
            name, key_type="aes256-gcm96", mount_point=self.mount_point))
        return 1

    def _key_exists(self, name: str) -> bool:
        try:
            self._call("read_key", name, lambda: self._transit().read_key(name, mount_point=self.mount_point))
        except KeyNotFoundError:
            return False
        return True

    def current_version(self, name: str) -> int:
        check_key_name(name)
        response = self._call("read_key", name, lambda: self._transit().read_key(
            name, mount_point=self.mount_point))
        version = _answer(response, "latest_version", "read_key")
        if isinstance(version, bool) or not isinstance(version, int | str) or not str(version).isdigit():
            raise KmsError("Vault answered read_key without a valid latest_version")
        return int(version)

    def key_names(self) -> list[str]:
        try:
            response = self._call("list_keys", "*", lambda: self._transit().list_keys(mount_point=self.mount_point))
        except KeyNotFoundError:
            return []  # Vault answers 404 when the mount has no keys yet
        return sorted(str(name) for name in response["data"]["keys"])

    def rotate_key(self, name: str) -> int:
        check_key_name(name)
        self._call("rotate_key", name, lambda: self._transit().rotate_key(name, mount_point=self.mount_point))
        return self.current_version(name)

    def wrap(self, key_name: str, data_key: bytes) -> WrappedKey:
        # Transit's encrypt endpoint creates a missing key ("upsert"): a mistyped key name would
        # silently get a fresh KEK. Check existence once per name instead.
        if key_name not in self._known:
            check_key_name(key_name)
            if not self._key_exists(key_name):
                raise KeyNotFoundError(f"Vault has no transit key {key_name!r}")
            self._known.add(key_name)
        plaintext = base64.b64encode(data_key).decode("ascii")
        response = self._call("encrypt", key_name, lambda: self._transit().encrypt_data(
            key_name, plaintext=plaintext, mount_point=self.mount_point))
        ciphertext = str(_answer(response, "ciphertext", "encrypt"))
        match = _CIPHERTEXT.match(ciphertext)
        if match is None:
            raise KmsError("Vault returned a ciphertext in an unknown form")
        return WrappedKey(key_name, int(match.group(1)), ciphertext.encode("ascii"))

    def unwrap(self, wrapped: WrappedKey) -> bytes:
        check_key_name(wrapped.key_name)  # it comes from a record; hvac puts it into the URL path
        ciphertext = wrapped.blob.decode("ascii", errors="replace")
        match = _CIPHERTEXT.match(ciphertext)
        if match is None or int(match.group(1)) != wrapped.version:
            raise KmsError("wrapped data key is not a Vault transit ciphertext of the stated version")
        response = self._call("decrypt", wrapped.key_name, lambda: self._transit().decrypt_data(
            wrapped.key_name, ciphertext=ciphertext, mount_point=self.mount_point))
        return _base64(_answer(response, "plaintext", "decrypt"), "decrypt")

    def derived_secret(self, key_name: str, label: bytes) -> bytes:
        check_key_name(key_name)  # it may come from a record (deterministic fields)
        hash_input = base64.b64encode(b"kgov-derived-v1:" + label).decode("ascii")
        response = self._call("hmac", key_name, lambda: self._transit().generate_hmac(
            key_name, hash_input=hash_input, key_version=1, algorithm="sha2-256", mount_point=self.mount_point))
        text = _answer(response, "hmac", "hmac")
        return _base64(text.rsplit(":", 1)[-1] if isinstance(text, str) else text, "hmac")


def _answer(response: Any, field: str, what: str) -> Any:
    """`response["data"][field]`, or KmsError when Vault's answer does not have it (fail closed, one error type)."""
    try:
        return response["data"][field]
    except (KeyError, TypeError, IndexError):
        pass
    raise KmsError(f"Vault answered {what} without data.{field}")


def _base64(text: Any, what: str) -> bytes:
    if isinstance(text, str):
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            pass
    # No chained error: its message would quote the answer, which may be a data key.
    raise KmsError(f"Vault answered {what} with a value that is not base64")


def _check_transport(url: str, allow_http: bool) -> None:
    """Refuses a Vault URL over which data keys and the token would travel in the clear."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        return
    if parts.scheme == "http":
        host = parts.hostname or ""
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if loopback or allow_http:
            return
    raise KmsError(
        f"Vault at {parts.scheme}://{parts.hostname}: unwrapped data keys and the token would cross the network "
        "unprotected; use https (or plain http on the loopback interface, or allow_http=True for a network you trust)"
    )
