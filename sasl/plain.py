"""SASL PLAIN (RFC 4616) server, sans-I/O, with Kafka's PlainSaslServer checks and wording."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from authz.model import Principal
from sasl.mechanism import Failure, Step, Success


@dataclass(frozen=True, slots=True)
class VerifiedUser:
    principal: Principal
    expiry_ms: int | None = None


# `(username, password) -> VerifiedUser | None`; constant time, never raises for bad credentials.
PasswordVerifier = Callable[[str, str], "VerifiedUser | None"]


@dataclass(frozen=True, slots=True)
class PlainMessage:
    authzid: str
    username: str
    password: str

    def __repr__(self) -> str:
        return f"PlainMessage(authzid={self.authzid!r}, username={self.username!r})"


class PlainError(ValueError):
    """A malformed PLAIN message; the message is Kafka's wording and carries no secret."""


def parse_plain(data: bytes) -> PlainMessage:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise PlainError("Invalid SASL/PLAIN response: not UTF-8") from None
    tokens = text.split("\x00")
    if len(tokens) != 3:
        raise PlainError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
    authzid, username, password = tokens
    if not username:
        raise PlainError("Authentication failed: username not specified")
    if not password:
        raise PlainError("Authentication failed: password not specified")
    return PlainMessage(authzid, username, password)


class PlainServer:
    name = "PLAIN"

    def __init__(
        self, verify: PasswordVerifier, *, session: Callable[[int | None], int | None] | None = None
    ) -> None:
        self._verify = verify
        self._session = session
        self._done = False

    def step(self, received: bytes) -> Step:
        if self._done:
            return Failure("PLAIN exchange already complete", mechanism=self.name)
        self._done = True
        try:
            msg = parse_plain(received)
        except PlainError as exc:
            return Failure(str(exc), mechanism=self.name)
        if msg.authzid and msg.authzid != msg.username:
            return Failure(
                "Authentication failed: Client requested an authorization id that is different from username",
                mechanism=self.name,
            )
        user = self._verify(msg.username, msg.password)
        if user is None:
            return Failure("Authentication failed: Invalid username or password", mechanism=self.name)
        lifetime = self._session(user.expiry_ms) if self._session else None
        if lifetime == 0:
            return Failure("Authentication failed: credential expired", mechanism=self.name)
        return Success(principal=user.principal, session_lifetime_ms=lifetime, mechanism=self.name)
