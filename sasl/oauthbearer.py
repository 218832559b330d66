"""SASL OAUTHBEARER (RFC 7628, Kafka KIP-255) server, sans-I/O.

The client initial response is `n,[a=authzid],` 0x01 `auth=Bearer <token>` 0x01 {key=value 0x01} 0x01.
On a bad token the server answers the RFC's JSON error as a challenge; the client then sends a
single 0x01 and the exchange fails.

The bearer is a JWT, or a delegation token in kgov's own form (`sasl.delegation.BEARER_PREFIX`): the
validator the credential service passes tells them apart, and marks a delegation-token session
`token_authenticated`.

Session lifetime (KIP-368): until the token's `exp` (a delegation token's expiry). A JWT already
past `exp` but still inside the validator's clock skew is accepted, as Kafka does, but, unlike Kafka
(which sends lifetime 0, "no limit", for it), with a session that ends when the skew window does, so
the client must re-authenticate with a fresh token. The client only ever learns `invalid_token`:
the real reason goes into `Failure.reason` (the audit event).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from authz.model import Principal
from sasl.mechanism import Challenge, Failure, Step, Success

SEPARATOR: Final = "\x01"
_SASLNAME = r"(?:[^\x00\x01=,]|=2C|=3D)+"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<kvpairs>(?:[A-Za-z]+=[\x21-\x7E \t\r\n]+\x01)*)\x01"
)
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")
_TOKEN = re.compile(r"[-_~+/.a-zA-Z0-9]+=*")
_EXTENSION_KEY = re.compile(r"[A-Za-z]+")
_EXTENSION_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")


class OAuthBearerError(ValueError):
    """A malformed client initial response (Kafka's wording)."""


class TokenValidationError(Exception):
    """A token was refused. `reason` is for the audit trail only; `status` is what the client sees."""

    def __init__(
        self, reason: str, status: str = "invalid_token", scope: str | None = None, *, token_id: str | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.scope = scope
        # The delegation token id a bearer in kgov's form named (never its HMAC), for the audit trail.
        self.token_id = token_id


@dataclass(frozen=True, slots=True)
class ValidatedToken:
    principal_name: str
    scopes: frozenset[str]
    # The token's `exp` in milliseconds (Kafka's `OAuthBearerToken.lifetimeMs`).
    expiry_ms: int | None
    claims: Mapping[str, object] = field(default_factory=dict, repr=False)
    # The first millisecond at which the validator refuses the token (`exp` + the clock skew); None:
    # no skew window beyond `expiry_ms`.
    accepted_until_ms: int | None = None
    # A delegation token's OAUTHBEARER form (`sasl.delegation.parse_bearer`), not a JWT: the session is
    # token-authenticated, as a SCRAM `tokenauth` login's (Kafka's `tokenAuthenticated`).
    token_authenticated: bool = False
    # That delegation token's id, for the audit trail (never its HMAC).
    token_id: str | None = None


TokenValidator = Callable[[str], ValidatedToken]


@dataclass(frozen=True, slots=True)
class ClientInitialResponse:
    authzid: str
    token: str = field(repr=False)
    extensions: Mapping[str, str]


def _decode_name(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


def parse_client_initial_response(data: bytes) -> ClientInitialResponse:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message") from None
    m = _CLIENT_FIRST.fullmatch(text)
    if m is None:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message")
    pairs: dict[str, str] = {}
    for item in m.group("kvpairs").split(SEPARATOR):
        if item:
            key, _, value = item.partition("=")
            pairs[key] = value
    auth = pairs.pop("auth", None)
    if auth is None:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message: 'auth' not specified")
    am = _AUTH.fullmatch(auth)
    if am is None:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message: invalid 'auth' format")
    if am.group("scheme").lower() != "bearer":
        raise OAuthBearerError(f"Invalid scheme in OAUTHBEARER client first message: {am.group('scheme')}")
    authzid = _decode_name(m.group("authzid")) if m.group("authzid") else ""
    return ClientInitialResponse(authzid=authzid, token=am.group("token"), extensions=pairs)


def build_client_initial_response(
    token: str, *, authzid: str = "", extensions: Mapping[str, str] | None = None
) -> bytes:
    """Kafka's OAuthBearerClientInitialResponse.toBytes layout, with its checks: the token in RFC 6750's
    charset, extension names letters only and not `auth`, values printable ASCII or space/tab/CR/LF.
    A token or value carrying 0x01 would otherwise add fields of its own choosing."""
    if not _TOKEN.fullmatch(token):
        raise OAuthBearerError("Invalid OAUTHBEARER token: not in the RFC 6750 token charset")
    for key, value in (extensions or {}).items():
        if key == "auth" or not _EXTENSION_KEY.fullmatch(key):
            raise OAuthBearerError(f"Extension name {key} is invalid")
        if not _EXTENSION_VALUE.fullmatch(value):
            raise OAuthBearerError(f"Extension value for {key} is invalid")
    ext = "".join(f"{SEPARATOR}{k}={v}" for k, v in (extensions or {}).items())
    a = f"a={authzid.replace('=', '=3D').replace(',', '=2C')}" if authzid else ""
    return f"n,{a},{SEPARATOR}auth=Bearer {token}{ext}{SEPARATOR}{SEPARATOR}".encode()


def error_json(status: str, scope: str | None = None, openid_configuration: str | None = None) -> bytes:
    body: dict[str, str] = {"status": status}
    if scope:
        body["scope"] = scope
    if openid_configuration:
        body["openid-configuration"] = openid_configuration
    return json.dumps(body, separators=(",", ":")).encode()


class OAuthBearerServer:
    name = "OAUTHBEARER"

    def __init__(
        self,
        validate: TokenValidator,
        *,
        session: Callable[[int | None], int | None] | None = None,
        openid_configuration: str | None = None,
    ) -> None:
        self._validate = validate
        self._session = session
        self._openid_configuration = openid_configuration
        self._state = 0
        self._error_reason = ""
        self._error_token_id: str | None = None

    @property
    def pending_error(self) -> str | None:
        """The refusal reason while the JSON error challenge awaits the client's %x01, else None.

        Callers count the failure at this point: a client that disconnects instead of answering
        must not escape the failed-attempt limit."""
        return self._error_reason if self._state == 1 else None

    @property
    def pending_token_id(self) -> str | None:
        """The delegation token id the refused bearer named, while `pending_error` is set."""
        return self._error_token_id if self._state == 1 else None

    def step(self, received: bytes) -> Step:
        if self._state == 1:
            # The client's 0x01 after our JSON error: the exchange fails with the reason kept.
            self._state = 2
            reason = self._error_reason
            if received != SEPARATOR.encode():
                reason += " (client did not answer the error with %x01)"
            return Failure(reason, mechanism=self.name, token_id=self._error_token_id)
        if self._state != 0:
            return Failure("OAUTHBEARER exchange already complete", mechanism=self.name)
        try:
            response = parse_client_initial_response(received)
        except OAuthBearerError as exc:
            self._state = 2
            return Failure(str(exc), mechanism=self.name)
        try:
            token = self._validate(response.token)
        except TokenValidationError as exc:
            self._error_token_id = exc.token_id
            return self._error(exc.reason, exc.status, exc.scope)
        self._error_token_id = token.token_id
        if response.authzid and response.authzid != token.principal_name:
            self._state = 2
            return Failure(
                f"Authentication failed: Client requested an authorization id ({response.authzid}) that is "
                f"different from the token's principal name ({token.principal_name})",
                mechanism=self.name,
                token_id=token.token_id,
            )
        session = self._session
        lifetime = session(token.expiry_ms) if session else None
        if session is not None and lifetime == 0 and token.accepted_until_ms is not None:
            # Past `exp` but inside the clock skew, which the validator allowed. Kafka accepts it too
            # and (`SaslServerAuthenticator.calcCompletionTimesAndReturnSessionLifetimeMs`, negative
            # remaining life clamped to 0) sends session lifetime 0: a session with no re-authentication
            # deadline at all. Here the session ends with the skew window instead.
            lifetime = session(token.accepted_until_ms)
        if lifetime == 0:
            return self._error("token expired", "invalid_token", None)
        self._state = 2
        return Success(
            principal=Principal("User", token.principal_name),
            session_lifetime_ms=lifetime,
            token_authenticated=token.token_authenticated,
            mechanism=self.name,
            token_id=token.token_id,
        )

    def _error(self, reason: str, status: str, scope: str | None) -> Challenge:
        self._state = 1
        self._error_reason = reason
        return Challenge(error_json(status, scope, self._openid_configuration))
