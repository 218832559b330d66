"""SASL on one client connection, as a broker's SaslServerAuthenticator does it (sans-I/O, STYLE 2).

Drives a `sasl.mechanism.ServerMechanism` through SaslHandshake (v0/v1) and SaslAuthenticate and
keeps the KIP-368 session: lifetime = min(credential expiry, `max_reauth_ms`), re-authentication
with the same mechanism and principal, at most once a second. The caller owns the socket, the
failure delay and the audit trail; it asks `may_serve(now)` before every non-SASL request.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from authz.model import Principal
from sasl.mechanism import Challenge, Failure, ServerMechanism, Success, UnsupportedMechanismError

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58

MechanismFactory = Callable[[str, str], ServerMechanism]


class State(enum.Enum):
    AWAIT_HANDSHAKE = "await-handshake"
    AWAIT_AUTHENTICATE = "await-authenticate"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class AuthStep:
    """What to answer to one SaslAuthenticate (or raw v0 token)."""

    error_code: int
    error_message: str | None
    data: bytes
    session_lifetime_ms: int = 0
    done: bool = False  # authenticated (the connection may now serve requests)
    failed: bool = False  # close the connection after answering (after the failure delay)
    reason: str | None = None  # for the audit trail only
    reauthentication: bool = False


class SaslSession:
    def __init__(
        self,
        *,
        enabled: Sequence[str],
        factory: MechanismFactory,
        client_address: str,
        max_reauth_ms: int = 0,
    ) -> None:
        self.enabled = tuple(enabled)
        self._factory = factory
        self._client_address = client_address
        self._max_reauth_ms = max_reauth_ms
        self.state = State.AWAIT_HANDSHAKE
        self.mechanism_name: str | None = None
        self.principal: Principal | None = None
        self.token_authenticated = False
        self.handshake_version = 1
        self._mechanism: ServerMechanism | None = None
        self._session_expires_ms: int | None = None
        self._reauthenticating = False
        self._last_reauth_start_ms: int | None = None

    def may_serve(self, now_ms: int) -> bool:
        """A non-SASL request may be served: authenticated and the session not expired (KIP-368)."""
        if self.principal is None or self.state is State.FAILED:
            return False
        if self.state is State.AWAIT_AUTHENTICATE and not self._reauthenticating:
            return False
        return self._session_expires_ms is None or now_ms < self._session_expires_ms

    def handshake(self, mechanism: str, version: int, now_ms: int) -> int:
        """Answers a SaslHandshake: 0, UNSUPPORTED_SASL_MECHANISM or ILLEGAL_SASL_STATE."""
        if self.state is State.AUTHENTICATED:
            # KIP-368 re-authentication: only when the session expires, same mechanism, once a second.
            if self._session_expires_ms is None or mechanism != self.mechanism_name:
                return ILLEGAL_SASL_STATE
            if self._last_reauth_start_ms is not None and now_ms - self._last_reauth_start_ms < 1000:
                return ILLEGAL_SASL_STATE
            self._last_reauth_start_ms = now_ms
            self._reauthenticating = True
        elif self.state is not State.AWAIT_HANDSHAKE:
            return ILLEGAL_SASL_STATE
        try:
            if mechanism not in self.enabled:
                raise UnsupportedMechanismError(mechanism)
            self._mechanism = self._factory(mechanism, self._client_address)
        except UnsupportedMechanismError:
            self.state = State.FAILED
            return UNSUPPORTED_SASL_MECHANISM
        self.mechanism_name = mechanism
        self.handshake_version = version
        self.state = State.AWAIT_AUTHENTICATE
        return 0

    def authenticate(self, data: bytes, now_ms: int) -> AuthStep:
        if self.state is not State.AWAIT_AUTHENTICATE or self._mechanism is None:
            self.state = State.FAILED
            return AuthStep(ILLEGAL_SASL_STATE, "Unexpected SASL authenticate request", b"", failed=True,
                            reason="SaslAuthenticate before SaslHandshake")
        try:
            step = self._mechanism.step(data)
        except Exception as exc:  # a mechanism must never take the gateway down; garbage fails closed
            step = Failure(reason=f"mechanism error: {type(exc).__name__}")
        reauth = self._reauthenticating
        if isinstance(step, Challenge):
            return AuthStep(0, None, step.data, reauthentication=reauth)
        if isinstance(step, Success):
            if reauth and step.principal != self.principal:
                self.state = State.FAILED
                return AuthStep(SASL_AUTHENTICATION_FAILED, "Cannot change principals during re-authentication",
                                b"", failed=True, reason="principal changed during re-authentication",
                                reauthentication=True)
            lifetime = step.session_lifetime_ms or 0
            if self._max_reauth_ms > 0:
                lifetime = min(lifetime, self._max_reauth_ms) if lifetime > 0 else self._max_reauth_ms
            lifetime = max(lifetime, 0)
            self._session_expires_ms = now_ms + lifetime if lifetime > 0 else None
            self.principal = step.principal
            self.token_authenticated = step.token_authenticated
            self.state = State.AUTHENTICATED
            self._reauthenticating = False
            return AuthStep(0, None, step.data, session_lifetime_ms=lifetime, done=True, reauthentication=reauth)
        self.state = State.FAILED
        message = (
            f"Authentication failed during {'re-authentication' if reauth else 'authentication'} due to invalid "
            f"credentials with SASL mechanism {self.mechanism_name}"
        )
        return AuthStep(SASL_AUTHENTICATION_FAILED, message, step.data, failed=True, reason=step.reason,
                        reauthentication=reauth)
