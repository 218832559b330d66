"""The sans-I/O contract every SASL mechanism implements (STYLE 2).

A server mechanism is fed the bytes the client sent and answers what to send next or a verdict.
The gateway, the HTTP layer and the tests all drive the same machines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from authz.model import Principal


@dataclass(frozen=True, slots=True)
class Challenge:
    """Send `data` to the client and wait for its next message."""

    data: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class Success:
    """Authenticated. `data` is a final server message to send (SCRAM's `v=...`), possibly empty."""

    principal: Principal
    session_lifetime_ms: int | None = None
    data: bytes = field(default=b"", repr=False)
    token_authenticated: bool = False
    mechanism: str = ""
    # The delegation token the login used (its id, never its HMAC), for the audit trail.
    token_id: str | None = None


@dataclass(frozen=True, slots=True)
class Failure:
    """Refused. `reason` is for the audit trail only, never for the client; `data` is what the
    protocol lets the server send before failing (SCRAM `e=...`, OAUTHBEARER's JSON error)."""

    reason: str
    data: bytes = field(default=b"", repr=False)
    mechanism: str = ""
    # The delegation token id the attempt named (SCRAM `tokenauth` user name, OAUTHBEARER bearer
    # form), whether or not such a token exists: for the audit trail only.
    token_id: str | None = None


Step = Challenge | Success | Failure


class ServerMechanism(Protocol):
    name: str

    def step(self, received: bytes) -> Step: ...


class UnsupportedMechanismError(ValueError):
    """The client asked for a mechanism that is not enabled."""
