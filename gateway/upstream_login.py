"""The client side of the gateway's OAUTHBEARER login to its upstream (RFC 7628, KIP-255), sans-I/O.

`OAuthBearerExchange` is fed each SaslAuthenticate answer and says what to send next:
1. the client initial response `n,,` %x01 `auth=Bearer <token>` {%x01 key=value} %x01 %x01
   (Kafka's OAuthBearerClientInitialResponse, with the KIP-342 extensions);
2. an empty answer without error: authenticated;
3. a JSON error (`{"status":"invalid_token",...}`) without error code: the server refused the token
   and waits for the client's %x01, after which it fails the exchange (Kafka's OAuthBearerSaslClient
   sends the %x01 too); the refusal is reported with the server's status;
4. an error code: refused, with the broker's message.
Messages never contain the token.

`reauthentication_delay_s` says when an established upstream session is re-authenticated (KIP-368).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from gateway.upstream_token import UpstreamLoginError, UpstreamTokenSource, printable
from sasl.oauthbearer import SEPARATOR, build_client_initial_response


@dataclass(frozen=True)
class OAuthBearerLogin:
    """How the gateway logs in upstream with OAUTHBEARER: where its tokens come from, and the
    SASL extensions it sends with them."""

    tokens: UpstreamTokenSource
    extensions: Mapping[str, str] = field(default_factory=dict)


# Kafka's SaslClientAuthenticator re-authenticates at a random point of this window of the session
# lifetime: the 85% leaves room for latency and clock drift, the 10% jitter spreads the
# re-authentications of many connections opened together.
REAUTH_WINDOW_START = 0.85
REAUTH_WINDOW_JITTER = 0.10


def reauthentication_delay_s(session_lifetime_ms: int, rand: float) -> float | None:
    """Seconds from a successful (re-)authentication to the next re-authentication of that session,
    for `rand` uniform in [0, 1); None when the upstream granted an unlimited session (0)."""
    if session_lifetime_ms <= 0:
        return None
    return session_lifetime_ms * (REAUTH_WINDOW_START + REAUTH_WINDOW_JITTER * rand) / 1000


@dataclass(frozen=True, slots=True)
class Send:
    data: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class Authenticated:
    session_lifetime_ms: int


def _status_of(data: bytes) -> str:
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return "an unreadable error"
    status = body.get("status") if isinstance(body, dict) else None
    if not isinstance(status, str):
        return "an error without status"
    text = printable(status, 64)
    scope = body.get("scope")
    if isinstance(scope, str) and scope:
        text += f" (scope {printable(scope)})"
    return text


class OAuthBearerExchange:
    def __init__(self, token: str, extensions: Mapping[str, str] | None = None) -> None:
        self._token = token
        self._extensions = dict(extensions or {})
        self._server_status: str | None = None
        self._done = False

    def first_message(self) -> bytes:
        return build_client_initial_response(self._token, extensions=self._extensions)

    def on_response(self, error_code: int, error_message: str | None, data: bytes,
                    session_lifetime_ms: int = 0) -> Send | Authenticated:
        """The next step after one SaslAuthenticate answer; raises `UpstreamLoginError` on refusal."""
        if self._done:
            raise UpstreamLoginError("upstream OAUTHBEARER exchange continued after it ended")
        if self._server_status is not None:
            # The answer to our %x01: the server fails the exchange (an error code is expected).
            self._done = True
            detail = f"; the broker said: {self._scrub(error_message)}" if error_message else ""
            raise UpstreamLoginError(
                f"the upstream refused the gateway's OAUTHBEARER token: {self._server_status}"
                f" (error {error_code}){detail}"
            )
        if error_code:
            self._done = True
            detail = f": {self._scrub(error_message)}" if error_message else ""
            raise UpstreamLoginError(
                f"upstream OAUTHBEARER authentication failed (error {error_code}){detail}"
            )
        if data:
            self._server_status = _status_of(data)
            return Send(SEPARATOR.encode())
        self._done = True
        return Authenticated(max(session_lifetime_ms, 0))

    def _scrub(self, message: str) -> str:
        text = message.replace(self._token, "<token>") if self._token else message
        return printable(text, 300)
