"""HTTP authentication for the control plane.

For now: the bootstrap super user from configuration (`[admin]`), checked with HTTP Basic against a
passlib hash made at start-up. The credential-services issue replaces this with the credential store
(SCRAM users checked as PLAIN) and Bearer JWTs.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
from typing import Any

from passlib.hash import pbkdf2_sha256

from authz.model import Principal

# A hash of a random value, so a request for an unknown user costs the same as a known one.
_DUMMY_HASH = pbkdf2_sha256.hash(base64.b64encode(b"kgov-no-such-user").decode())


def parse_basic(authorization: str | None) -> tuple[str, str] | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "basic" or not value:
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    if not sep:
        return None
    return user, password


class BootstrapAdminAuthenticator:
    """Accepts exactly one user: the configured bootstrap admin."""

    def __init__(self, user: str, password: str | None, *, failure_delay_s: float = 0.1) -> None:
        self._user = user
        self._hash = pbkdf2_sha256.hash(password) if password else None
        self._failure_delay_s = failure_delay_s

    def __repr__(self) -> str:
        return f"BootstrapAdminAuthenticator(user={self._user!r})"

    async def authenticate(self, authorization: str | None, client_address: str) -> Principal | None:
        creds = parse_basic(authorization)
        if creds is not None:
            user, password = creds
            known = self._hash is not None and hmac.compare_digest(user.encode(), self._user.encode())
            verified = pbkdf2_sha256.verify(password, self._hash if known and self._hash else _DUMMY_HASH)
            if known and verified:
                return Principal("User", user)
        await asyncio.sleep(self._failure_delay_s)
        return None


def build_authenticator(state: Any) -> BootstrapAdminAuthenticator:
    """The control plane's authenticator, from `app.state` (settings, engine)."""
    settings = state.settings
    password = settings.admin.password.get_secret_value() if settings.admin.password else None
    return BootstrapAdminAuthenticator(
        settings.admin.user, password, failure_delay_s=settings.sasl.failed_authentication_delay_ms / 1000
    )
