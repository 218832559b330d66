"""kgov's token issuer for workers: signing keys (RS256 / ES256, rotating, `kid`) and JWT minting.

Rotation (pure, `plan_rotation`): one active key signs; when it is older than the rotation period a
new key becomes active and the old one is retired but stays in the JWKS until every token it signed
has expired (token lifetime + clock skew), then it is removed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from jose import jwt

from sasl.config import ISSUER_CLAIMS
from sasl.store import StoredSigningKey

SUPPORTED_SIGNING_ALGORITHMS = ("RS256", "ES256")
# kgov's own claim: which stored secret of the client the token was issued for (`client_version`),
# so that replacing or deleting the client revokes the tokens issued before (`sasl.service`).
CLIENT_VERSION_CLAIM = "kgov_client_version"
SEALED_PREFIX = "kgov-aesgcm-v1:"


class SealedKeyError(Exception):
    """A stored private key could not be opened (no or wrong `oauth.signing_key_secret`)."""


def _sealing_key(secret: bytes) -> AESGCM:
    key = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=b"kgov token-issuer signing keys v1"
    ).derive(secret)
    return AESGCM(key)


def seal_private_key(pem: str, kid: str, secret: bytes | None) -> str:
    """The PEM as stored: AES-256-GCM under a key derived from the configured secret (the `kid` is
    the associated data), or plain PEM when no secret is configured."""
    if secret is None:
        return pem
    nonce = secrets.token_bytes(12)
    sealed = _sealing_key(secret).encrypt(nonce, pem.encode(), kid.encode())
    return SEALED_PREFIX + base64.b64encode(nonce + sealed).decode()


def open_private_key(stored: str, kid: str, secret: bytes | None) -> str:
    if not stored.startswith(SEALED_PREFIX):
        return stored
    if secret is None:
        raise SealedKeyError("signing key is encrypted but oauth.signing_key_secret is not set")
    try:
        raw = base64.b64decode(stored[len(SEALED_PREFIX) :], validate=True)
        if len(raw) <= 12 + 16:  # a nonce and a tag, at the least
            raise ValueError("too short")
        return _sealing_key(secret).decrypt(raw[:12], raw[12:], kid.encode()).decode()
    except ValueError:  # binascii.Error and UnicodeDecodeError too
        # A damaged row: refused like a wrong secret (published, never signed with), not a crash of
        # every snapshot load.
        raise SealedKeyError("stored signing key is damaged (not a sealed key kgov wrote)") from None
    except InvalidTag:
        raise SealedKeyError(
            "signing key cannot be opened with the configured oauth.signing_key_secret"
        ) from None


def _b64url_uint(n: int, length: int | None = None) -> str:
    data = n.to_bytes(length or (n.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638 JWK thumbprint, used as the `kid`."""
    required = ("e", "kty", "n") if jwk["kty"] == "RSA" else ("crv", "kty", "x", "y")
    canonical = json.dumps({k: jwk[k] for k in required}, separators=(",", ":"), sort_keys=True)
    return base64.urlsafe_b64encode(hashlib.sha256(canonical.encode()).digest()).rstrip(b"=").decode()


def generate_signing_key(alg: str, now_ms: int) -> StoredSigningKey:
    if alg == "RS256":
        rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        numbers = rsa_key.public_key().public_numbers()
        jwk: dict[str, Any] = {"kty": "RSA", "n": _b64url_uint(numbers.n), "e": _b64url_uint(numbers.e)}
        private: Any = rsa_key
    elif alg == "ES256":
        ec_key = ec.generate_private_key(ec.SECP256R1())
        pub = ec_key.public_key().public_numbers()
        jwk = {"kty": "EC", "crv": "P-256", "x": _b64url_uint(pub.x, 32), "y": _b64url_uint(pub.y, 32)}
        private = ec_key
    else:
        raise ValueError(f"unsupported signing algorithm {alg!r}; expected RS256 or ES256")
    kid = _thumbprint(jwk)
    jwk.update({"kid": kid, "alg": alg, "use": "sig"})
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return StoredSigningKey(
        kid=kid, alg=alg, private_pem=pem, public_jwk=jwk, created_ms=now_ms, retired_ms=None
    )


@dataclass(frozen=True, slots=True)
class RotationPlan:
    add: list[StoredSigningKey]
    retire: dict[str, int]
    remove: list[str]
    expected_active: str | None

    @property
    def empty(self) -> bool:
        return not (self.add or self.retire or self.remove)


def active_key(keys: Sequence[StoredSigningKey]) -> StoredSigningKey | None:
    live = [k for k in keys if k.retired_ms is None]
    return max(live, key=lambda k: (k.created_ms, k.kid)) if live else None


def plan_rotation(
    keys: Sequence[StoredSigningKey],
    *,
    now_ms: int,
    alg: str,
    rotation_ms: int,
    keep_retired_ms: int,
    force: bool = False,
) -> RotationPlan:
    active = active_key(keys)
    add: list[StoredSigningKey] = []
    retire: dict[str, int] = {}
    needs_new = active is None or force or active.alg != alg or now_ms - active.created_ms >= rotation_ms
    if needs_new:
        add.append(generate_signing_key(alg, now_ms))
    for k in keys:
        if k.retired_ms is None and needs_new:
            retire[k.kid] = now_ms
    remove = [k.kid for k in keys if k.retired_ms is not None and now_ms - k.retired_ms > keep_retired_ms]
    return RotationPlan(add, retire, remove, active.kid if active else None)


def jwks(keys: Iterable[StoredSigningKey]) -> dict[str, Any]:
    """The public JWK Set (never private material)."""
    return {"keys": [dict(k.public_jwk) for k in keys]}


@dataclass(frozen=True, slots=True)
class IssuedToken:
    access_token: str = field(repr=False)
    expires_in: int
    scope: str


def client_version(secret_hash: str) -> str:
    """A short fingerprint of a client's stored secret hash (passlib PBKDF2, randomly salted), which
    changes whenever the client is replaced. It tells nothing about the secret: whoever could test
    guesses against it would need the hash, whose salt it does not carry."""
    return base64.urlsafe_b64encode(hashlib.sha256(secret_hash.encode()).digest()[:12]).decode()


def mint_access_token(
    key: StoredSigningKey,
    *,
    issuer: str,
    audience: str,
    subject: str,
    scopes: Iterable[str],
    now_s: int,
    lifetime_s: int,
    scope_claim: str = "scope",
    version: str | None = None,
) -> IssuedToken:
    """`version`: the client's `client_version`, written as `kgov_client_version`."""
    if scope_claim in ISSUER_CLAIMS:
        raise ValueError(f"the scope claim {scope_claim!r} would overwrite a claim the issuer writes itself")
    scope = " ".join(sorted(set(scopes)))
    claims = {
        "iss": issuer,
        "sub": subject,
        "aud": audience,
        "iat": now_s,
        "nbf": now_s,
        "exp": now_s + lifetime_s,
        "jti": secrets.token_urlsafe(16),
        "client_id": subject,
        scope_claim: scope,
    }
    if version is not None:
        claims[CLIENT_VERSION_CLAIM] = version
    token = jwt.encode(claims, key.private_pem, algorithm=key.alg, headers={"kid": key.kid, "typ": "JWT"})
    return IssuedToken(token, lifetime_s, scope)
