"""HTTP authentication for the control plane.

`CredentialAuthenticator` (installed by `sasl.api.install`): `Authorization: Basic` checked as PLAIN
against the SCRAM credential store (with the derivation cache), and `Authorization: Bearer <JWT>`
validated like OAUTHBEARER tokens. Failures count against the per-source limit, are audited with their
reason, and are answered `failed_authentication_delay_ms` after the request arrived (not after the check:
a user who has only a SCRAM-SHA-256 credential, or other iterations than most, takes a PBKDF2 of another
cost than an unknown name, and the difference would name the user); the caller only ever sees 401.

`BootstrapAdminAuthenticator` is the start-up fallback before the credential store is installed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from passlib.hash import pbkdf2_sha256
from passlib.utils import MAX_PASSWORD_SIZE

from authz.model import Principal
from sasl.limiter import BEARER_CLAIM, MALFORMED_CLAIM, user_claim
from sasl.mechanism import Failure
from sasl.oauthbearer import TokenValidationError

if TYPE_CHECKING:
    from sasl.service import CredentialService


class CredentialStoreUnavailable(Exception):
    """The credential snapshot is older than `[sasl] max_snapshot_age_s`: the database has not confirmed
    it for that long, so logins that need it fail closed. The message names the setting, no secret.
    (Here rather than in `sasl.service`, which imports this module.)"""

# A hash of a random value, so a request for an unknown user costs the same as a known one.
_DUMMY_HASH = pbkdf2_sha256.hash(base64.b64encode(b"kgov-no-such-user").decode())
# The longest secret passlib hashes or verifies (longer ones raise PasswordSizeError).
MAX_SECRET_LENGTH = MAX_PASSWORD_SIZE


def verify_hashed_secret(secret: str, stored_hash: str) -> bool:
    """passlib's pbkdf2_sha256 verification for a secret of any length: one longer than passlib takes
    (it would raise, answering 500 without the failure delay) costs the same PBKDF2 and never matches."""
    fits = len(secret) <= MAX_SECRET_LENGTH
    return bool(pbkdf2_sha256.verify(secret[:MAX_SECRET_LENGTH], stored_hash)) and fits


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
            verified = verify_hashed_secret(password, self._hash if known and self._hash else _DUMMY_HASH)
            if known and verified:
                return Principal("User", user)
        await asyncio.sleep(self._failure_delay_s)
        return None


def parse_bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    value = value.strip()
    if scheme.lower() != "bearer" or not value:
        return None
    return value


class CredentialAuthenticator:
    """HTTP Basic (SCRAM users, as PLAIN) and Bearer JWTs against the credential service."""

    def __init__(
        self,
        service: CredentialService,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._service = service
        self._monotonic = monotonic
        self._sleep = sleep

    def __repr__(self) -> str:
        return "CredentialAuthenticator()"

    async def authenticate(self, authorization: str | None, client_address: str) -> Principal | None:
        service = self._service
        started = self._monotonic()
        reason = "no credentials"
        mechanism = "HTTP"
        basic = parse_basic(authorization)
        bearer = parse_bearer(authorization) if basic is None else None
        # The name claimed, before any secret is checked (`sasl.limiter`): Basic's user; a bearer has none.
        claim = user_claim(basic[0]) if basic is not None else BEARER_CLAIM if bearer is not None else MALFORMED_CLAIM
        refusal = service.limiter.refusal(client_address, claim) if authorization else None
        if refusal is not None:
            reason = refusal
        elif basic is not None:
            mechanism = "HTTP-BASIC"
            user, password = basic
            # A recently verified password is answered from the cache on the loop; PBKDF2 on a
            # miss runs in a worker thread, off the event loop.
            try:
                verified = service.verify_password_cached(user, password) or await asyncio.to_thread(
                    service.verify_password, user, password
                )
            except CredentialStoreUnavailable as exc:  # fails closed, as a wrong password does (401)
                verified, reason = None, str(exc)
            else:
                reason = "Authentication failed: Invalid username or password"
            if verified is not None:
                return verified.principal
        elif bearer is not None:
            mechanism = "HTTP-BEARER"
            try:
                validated = await asyncio.to_thread(service.validator.validate, bearer)
                return Principal("User", validated.principal_name)
            except TokenValidationError as exc:
                reason = exc.reason
        elif authorization:
            reason = "unsupported Authorization scheme"
        if authorization:
            # A refusal is not counted: a client refused on every retry would push its whole address over.
            if refusal is None:
                service.limiter.record_failure(client_address, claim)
            service.audit_authentication(
                Failure(reason, mechanism=mechanism), client_address, "http.Authenticate"
            )
        await self._sleep(max(0.0, service.failure_delay_s - (self._monotonic() - started)))
        return None


def build_authenticator(state: Any) -> BootstrapAdminAuthenticator:
    """The control plane's authenticator, from `app.state` (settings, engine)."""
    settings = state.settings
    password = settings.admin.password.get_secret_value() if settings.admin.password else None
    return BootstrapAdminAuthenticator(
        settings.admin.user, password, failure_delay_s=settings.sasl.failed_authentication_delay_ms / 1000
    )
