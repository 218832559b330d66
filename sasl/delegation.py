"""Delegation tokens (KIP-48, KIP-373): pure rules for create, renew, expire and describe.

Mirrors Kafka's KRaft `DelegationTokenControlManager` and `DelegationTokenManager.filterToken`:
the token id is a random UUID, the HMAC is HmacSHA512(key = UTF-8(secret), data = UTF-8(id)),
and a token is addressed by its (base64) HMAC. Error codes are Kafka's.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Final

from authz.model import Principal
from sasl.scram import MECHANISMS, ScramCredential, derive_credential


class TokenErrorCode(enum.IntEnum):
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67


_MESSAGES = {
    TokenErrorCode.DELEGATION_TOKEN_AUTH_DISABLED: "Delegation Token feature is not enabled.",
    TokenErrorCode.DELEGATION_TOKEN_NOT_FOUND: "Delegation Token is not found on server.",
    TokenErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH: "Specified Principal is not valid Owner/Renewer.",
    TokenErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: (
        "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels and on delegation "
        "token authenticated channels."
    ),
    TokenErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED: "Delegation Token authorization failed.",
    TokenErrorCode.DELEGATION_TOKEN_EXPIRED: "Delegation Token is expired.",
    TokenErrorCode.INVALID_PRINCIPAL_TYPE: "Request contained an invalid principal type.",
}


class DelegationTokenError(Exception):
    """A refused token operation; `code` is Kafka's error code, the message Kafka's text."""

    def __init__(self, code: TokenErrorCode, detail: str = "") -> None:
        super().__init__(_MESSAGES[code] + (f" {detail}" if detail else ""))
        self.code = code


@dataclass(frozen=True, slots=True)
class TokenInfo:
    token_id: str
    owner: Principal
    requester: Principal
    renewers: tuple[Principal, ...]
    issue_ms: int
    expiry_ms: int
    max_ms: int

    def is_expired(self, now_ms: int) -> bool:
        """Kafka's comparison (KRaft `DelegationTokenControlManager.renewDelegationToken`,
        `expireDelegationToken` and `sweepExpiredDelegationTokens`: `maxTimestamp < now ||
        expiryTimestamp < now`): a token still works during its expiry millisecond."""
        return now_ms > self.expiry_ms or now_ms > self.max_ms

    @property
    def usable_until_ms(self) -> int:
        """The first millisecond at which the token no longer authenticates."""
        return min(self.expiry_ms, self.max_ms) + 1

    def owner_or_renewer(self, principal: Principal) -> bool:
        """Kafka's TokenInformation.ownerOrRenewer (owner, requester or a renewer)."""
        return principal in (self.owner, self.requester) or principal in self.renewers


def token_json(info: TokenInfo) -> dict[str, object]:
    """The token's description as the REST API and `kgov tokens --json` render it (never the HMAC)."""
    return {
        "token_id": info.token_id,
        "owner": str(info.owner),
        "requester": str(info.requester),
        "renewers": [str(r) for r in info.renewers],
        "issue_timestamp_ms": info.issue_ms,
        "expiry_timestamp_ms": info.expiry_ms,
        "max_timestamp_ms": info.max_ms,
    }


@dataclass(frozen=True, slots=True)
class TokenPolicy:
    max_lifetime_ms: int
    expiry_time_ms: int


def token_hmac(secret: bytes, token_id: str) -> bytes:
    return hmac.digest(secret, token_id.encode("utf-8"), "sha512")


TOKEN_SALT_LENGTH = 24


def token_salt(secret: bytes, token_id: str) -> bytes:
    """The salt of a token's SCRAM credentials: keyed by the secret and the id, so every node shows the
    same salt for a token (Kafka salts randomly on each broker) and a stored credential can be checked
    against the secret it was made with (`credentials_match_secret`)."""
    return hmac.digest(secret, b"scram-salt\x00" + token_id.encode(), "sha256")[:TOKEN_SALT_LENGTH]


def token_scram_credentials(secret: bytes, token_id: str) -> dict[str, ScramCredential]:
    """Kafka's `DelegationTokenManager.prepareScramCredentials`: for every SCRAM mechanism, the
    credential whose password is base64(HMAC) at the mechanism's minimum iterations. One PBKDF2 per
    mechanism: run once per token (at creation), never per login."""
    password = base64.b64encode(token_hmac(secret, token_id)).decode()
    salt = token_salt(secret, token_id)
    return {
        name: derive_credential(mech, password, iterations=mech.min_iterations, salt=salt)
        for name, mech in MECHANISMS.items()
    }


def credentials_match_secret(secret: bytes, token_id: str, *credentials: ScramCredential) -> bool:
    """Whether stored token credentials were derived under `secret` (their salt says so). Ones made
    under another `delegation.token.secret.key` are never used: changing the key invalidates every
    token, as in Kafka, where each broker derives the credentials from its own key."""
    salt = token_salt(secret, token_id)
    return all(hmac.compare_digest(c.salt, salt) for c in credentials)


def hmac_lookup_key(hmac_value: bytes) -> str:
    """What the store indexes a token by: SHA-256 of the HMAC, useless as a credential."""
    return hashlib.sha256(hmac_value).hexdigest()


def decode_hmac(text: str) -> bytes:
    """The base64 HMAC as clients send it; anything malformed is simply not found."""
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise DelegationTokenError(TokenErrorCode.DELEGATION_TOKEN_NOT_FOUND) from None


# -- the OAUTHBEARER form of a token (kgov's own; Kafka has none) ------------------------------------
# Kafka logs a token in through SCRAM with the `tokenauth=true` extension only, which librdkafka and
# kafka-python cannot send. Both let the application hand over an OAUTHBEARER token (confluent-kafka's
# `oauth_cb`, kafka-python's `sasl_oauth_token_provider`), so kgov also accepts the token there, as
#
#     kgov-dt1~<token id>~<HMAC, standard base64 with padding, as `kgov tokens create` prints it>
#
# Every character is in RFC 6750's b64token set (what OAUTHBEARER carries), and `~` is in neither a
# token id nor standard base64, so the three parts split without ambiguity. It cannot be taken for a
# JWT, which is three base64url parts joined by exactly two dots: this form has no dot at all. The
# `1` is the format's version (STYLE 11).
BEARER_PREFIX: Final = "kgov-dt1~"
HMAC_LENGTH: Final = 64  # HMAC-SHA512
# Token ids are kgov's UUIDs (36 characters); the store's column holds 64. Anything else is malformed.
_BEARER = re.compile(
    r"kgov-dt1~(?P<token_id>[A-Za-z0-9_-]{1,64})~(?P<hmac>[A-Za-z0-9+/]{86}==)", re.ASCII
)
# A bearer longer than this is refused before any pattern runs on it (the form is at most 160).
MAX_BEARER_LENGTH: Final = 256


class BearerFormatError(ValueError):
    """A bearer value that claims the delegation-token form (`BEARER_PREFIX`) but is not in it. The
    message never quotes the value: it holds a secret."""


@dataclass(frozen=True, slots=True)
class DelegationBearer:
    token_id: str
    hmac: bytes = field(repr=False)


def is_delegation_bearer(bearer: str) -> bool:
    """Whether an OAUTHBEARER value claims the delegation-token form (and so is never a JWT)."""
    return bearer.startswith(BEARER_PREFIX)


def format_bearer(token_id: str, hmac_value: bytes) -> str:
    """The OAUTHBEARER value a client sends to log in with the token (`parse_bearer` reads it)."""
    bearer = f"{BEARER_PREFIX}{token_id}~{base64.b64encode(hmac_value).decode()}"
    if _BEARER.fullmatch(bearer) is None:
        raise BearerFormatError("not a delegation token id and HMAC")
    return bearer


def parse_bearer(bearer: str) -> DelegationBearer:
    """The token id and HMAC of a `format_bearer` value. Strict: one spelling per token (canonical
    base64, padding included, nothing before or after), so a value either is a token's or is refused."""
    if len(bearer) > MAX_BEARER_LENGTH:
        raise BearerFormatError("delegation token bearer too long")
    m = _BEARER.fullmatch(bearer)
    if m is None:
        raise BearerFormatError("malformed delegation token bearer")
    text = m.group("hmac")
    try:
        value = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise BearerFormatError("malformed delegation token bearer") from None
    # b64decode ignores the unused bits of the last character: only the canonical spelling counts.
    if len(value) != HMAC_LENGTH or base64.b64encode(value).decode() != text:
        raise BearerFormatError("malformed delegation token bearer")
    return DelegationBearer(m.group("token_id"), value)


def check_request_allowed(token_authenticated: bool) -> None:
    """Kafka's `allowTokenRequests` for create, renew, expire and describe alike: a session that
    authenticated with a delegation token may not manage tokens (else a leaked token could renew
    itself up to its maximum lifetime, or expire its owner's other tokens)."""
    if token_authenticated:
        raise DelegationTokenError(TokenErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)


def new_token(
    *,
    now_ms: int,
    owner: Principal,
    requester: Principal,
    renewers: Iterable[Principal],
    max_lifetime_ms: int,
    policy: TokenPolicy,
    token_authenticated: bool,
    token_id: Callable[[], str] = lambda: str(uuid.uuid4()),
) -> TokenInfo:
    check_request_allowed(token_authenticated)
    renewer_list = tuple(dict.fromkeys(renewers))
    if any(r.type != "User" for r in renewer_list) or owner.type != "User":
        raise DelegationTokenError(TokenErrorCode.INVALID_PRINCIPAL_TYPE)
    lifetime = min(policy.max_lifetime_ms, max_lifetime_ms) if max_lifetime_ms > 0 else policy.max_lifetime_ms
    max_ms = now_ms + lifetime
    return TokenInfo(
        token_id=token_id(),
        owner=owner,
        requester=requester,
        renewers=renewer_list,
        issue_ms=now_ms,
        expiry_ms=min(max_ms, now_ms + policy.expiry_time_ms),
        max_ms=max_ms,
    )


def _allowed_to_renew(info: TokenInfo, caller: Principal) -> bool:
    # Kafka's allowedToRenew: owner or listed renewer (not the requester).
    return caller == info.owner or caller in info.renewers


def _check_renewable(info: TokenInfo, caller: Principal, now_ms: int) -> None:
    # Kafka's DelegationTokenControlManager order: EXPIRED before OWNER_MISMATCH (the caller holds
    # the HMAC either way).
    if info.is_expired(now_ms):
        raise DelegationTokenError(TokenErrorCode.DELEGATION_TOKEN_EXPIRED)
    if not _allowed_to_renew(info, caller):
        raise DelegationTokenError(TokenErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH)


def renewed(
    info: TokenInfo, *, caller: Principal, now_ms: int, renew_period_ms: int, policy: TokenPolicy
) -> TokenInfo:
    _check_renewable(info, caller, now_ms)
    period = min(policy.expiry_time_ms, renew_period_ms) if renew_period_ms > 0 else policy.expiry_time_ms
    return replace(info, expiry_ms=min(info.max_ms, now_ms + period))


def expired(info: TokenInfo, *, caller: Principal, now_ms: int, expiry_period_ms: int) -> TokenInfo | None:
    """The token after an expire request; None means remove it now (a negative period, as Kafka).
    An already expired token is refused with DELEGATION_TOKEN_EXPIRED even then, as Kafka does; the
    expiry sweep removes it. What to answer as the expiry timestamp: `expire_answer_ms`."""
    _check_renewable(info, caller, now_ms)
    if expiry_period_ms < 0:
        return None
    return replace(info, expiry_ms=min(info.max_ms, now_ms + expiry_period_ms))


def expire_answer_ms(after: TokenInfo | None, expiry_period_ms: int) -> int:
    """The ExpireDelegationToken response's expiry timestamp. For a negative period KRaft's
    `DelegationTokenControlManager.expireDelegationToken` answers the requested period itself (so
    `--expiry-time-period -1` answers -1) and writes a RemoveDelegationTokenRecord; otherwise the
    new expiry timestamp."""
    return expiry_period_ms if after is None else after.expiry_ms


def visible(
    info: TokenInfo,
    *,
    caller: Principal,
    owners: list[Principal] | None,
    may_describe: Callable[[TokenInfo], bool],
) -> bool:
    """Kafka's filterToken: owners filter (absent = all), then caller's right to see the token.

    `may_describe` answers DESCRIBE on DELEGATION_TOKEN:<id> or DESCRIBE_TOKENS on USER:<owner>.
    """
    if owners is not None and not any(info.owner_or_renewer(o) for o in owners):
        return False
    return info.owner_or_renewer(caller) or may_describe(info)
