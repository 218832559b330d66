"""Credential-service settings (sections `[admin]`, `[sasl]`, `[oauth]`)."""

from __future__ import annotations

import ipaddress
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

DAY_MS = 24 * 3600 * 1000
# The claims kgov's token issuer writes itself (`sasl.issuer.mint_access_token`); the scope claim may be
# none of them (as "sub" the scope string would become the token's principal).
ISSUER_CLAIMS = frozenset({"iss", "sub", "aud", "iat", "nbf", "exp", "jti", "client_id", "kgov_client_version"})


class AdminConfig(BaseModel):
    """The bootstrap super user: created at start when missing, accepted by HTTP Basic."""

    user: str = "admin"
    password: SecretStr | None = Field(default=None, repr=False)


class SaslConfig(BaseModel):
    # Kafka's connection.failed.authentication.delay.ms: every failure answer waits this long.
    failed_authentication_delay_ms: int = Field(default=100, ge=0)
    scram_iterations: int = Field(default=8192, ge=4096, le=16384)
    # Per claimed name per client address: after this many failures within the window, further attempts
    # with that name from there fail at once (`sasl.limiter`).
    max_failed_attempts_per_source: int = Field(default=20, ge=1)
    # Per client address, whatever the names: the backstop against spraying passwords across names.
    max_failed_attempts_per_address: int = Field(default=100, ge=1)
    failed_attempts_window_s: float = Field(default=60.0, gt=0)
    # Kafka's connections.max.reauth.ms (KIP-368); 0 = no maximum session lifetime.
    connections_max_reauth_ms: int = Field(default=0, ge=0)
    enabled_mechanisms: list[str] = ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN", "OAUTHBEARER"]
    # Successful PLAIN / HTTP Basic verifications kept in memory (no PBKDF2 for a repeated login).
    plain_cache_size: int = Field(default=10_000, ge=0)
    # How often a node checks the database for credential changes made elsewhere.
    refresh_interval_s: float = Field(default=0.5, gt=0, le=5.0)
    # Logins fail closed once the database has not confirmed the credential snapshot for this long
    # (revocations made through other nodes cannot arrive); 0 = serve it for ever, as a Kafka broker
    # serves its cached SCRAM credentials without the controller.
    max_snapshot_age_s: float = Field(default=300.0, ge=0, le=86_400)
    # Kafka's delegation.token.secret.key: unset disables delegation tokens (DELEGATION_TOKEN_AUTH_DISABLED).
    delegation_token_secret_key: SecretStr | None = Field(default=None, repr=False)
    delegation_token_max_lifetime_ms: int = Field(default=7 * DAY_MS, gt=0)
    delegation_token_expiry_time_ms: int = Field(default=DAY_MS, gt=0)

    @field_validator("delegation_token_secret_key")
    @classmethod
    def _strong_secret(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None and len(v.get_secret_value()) < 16:
            raise ValueError(
                "sasl.delegation_token_secret_key must have at least 16 characters (it keys every token's "
                "HMAC); set KGOV_SASL__DELEGATION_TOKEN_SECRET_KEY to a long random value, or leave it unset "
                "to disable delegation tokens"
            )
        return v

    @model_validator(mode="after")
    def _age_above_interval(self) -> SaslConfig:
        if 0 < self.max_snapshot_age_s <= self.refresh_interval_s:
            raise ValueError(
                f"sasl.max_snapshot_age_s ({self.max_snapshot_age_s}) must be 0 (no limit) or longer than "
                f"sasl.refresh_interval_s ({self.refresh_interval_s}): one check comes every interval"
            )
        return self

    @field_validator("enabled_mechanisms")
    @classmethod
    def _known_mechanisms(cls, v: list[str]) -> list[str]:
        known = {"SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN", "OAUTHBEARER"}
        unknown = [m for m in v if m.upper() not in known]
        if unknown:
            raise ValueError(f"unknown SASL mechanism(s) {unknown}; supported: {sorted(known)}")
        return [m.upper() for m in v]


class OAuthConfig(BaseModel):
    @field_validator("jwks_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("https://", "http://")):
            raise ValueError("oauth.jwks_url must be an http(s) URL (file and other schemes are refused)")
        return v

    @field_validator("public_base_url")
    @classmethod
    def _absolute_base_url(cls, v: str | None) -> str | None:
        if v is not None and not is_base_url(v):
            raise ValueError(
                "oauth.public_base_url must be an absolute http(s) URL without query or fragment, "
                "e.g. https://kgov.example.com"
            )
        return v

    @field_validator("signing_key_secret")
    @classmethod
    def _strong_signing_secret(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None and len(v.get_secret_value()) < 16:
            raise ValueError("oauth.signing_key_secret must have at least 16 characters")
        return v

    @model_validator(mode="after")
    def _scope_claim_is_its_own(self) -> OAuthConfig:
        # The issuer writes the scopes under `scope_claim` next to its own claims: as "sub" the scope
        # string was the subject, so a client allowed the scope "admin" was issued tokens for User:admin.
        if self.scope_claim in ISSUER_CLAIMS or self.scope_claim == self.principal_claim:
            raise ValueError(
                f"oauth.scope_claim {self.scope_claim!r} must differ from oauth.principal_claim and from the "
                f"claims kgov's issuer writes ({', '.join(sorted(ISSUER_CLAIMS))}); Kafka's default is \"scope\""
            )
        return self

    @model_validator(mode="after")
    def _external_provider_is_pinned(self) -> OAuthConfig:
        if self.jwks_url is None:
            return self._own_issuer_is_expected()
        if self.issuer is None:
            raise ValueError(
                "oauth.jwks_url needs oauth.issuer: without it every token signed with that provider's "
                "keys is accepted, including tokens of its other tenants (multi-tenant providers share "
                "their keys); set KGOV_OAUTH__ISSUER to the provider's exact `iss` value"
            )
        if urlsplit(self.jwks_url).scheme == "http" and not (
            self.jwks_allow_http or is_loopback_host(urlsplit(self.jwks_url).hostname or "")
        ):
            raise ValueError(
                "oauth.jwks_url is plain http to a remote host: whoever can alter that traffic can hand "
                "kgov their own keys and sign any token; use https, or set oauth.jwks_allow_http = true "
                "if the network path is trusted"
            )
        return self

    def _own_issuer_is_expected(self) -> OAuthConfig:
        # Without jwks_url only kgov's own keys verify, and its issuer writes `token_issuer` and
        # `token_audience`: expecting another `iss` or `aud` refused every token it issued.
        if self.issuer is not None and self.issuer != self.token_issuer:
            raise ValueError(
                f"oauth.issuer {self.issuer!r} without oauth.jwks_url: tokens are then kgov's own, whose `iss` "
                f"is oauth.token_issuer ({self.token_issuer!r}); set oauth.token_issuer instead, or set "
                "oauth.jwks_url for an external identity provider"
            )
        if self.audience is not None and self.token_audience not in {a.strip() for a in self.audience.split(",")}:
            raise ValueError(
                f"oauth.audience {self.audience!r} without oauth.jwks_url: tokens are then kgov's own, whose "
                f"`aud` is oauth.token_audience ({self.token_audience!r}); set oauth.token_audience instead, or "
                "set oauth.jwks_url for an external identity provider"
            )
        return self

    # Validation of bearer tokens (OAUTHBEARER and HTTP). No jwks_url: kgov's own issuer keys.
    jwks_url: str | None = None
    # Plain-http JWKS URLs are accepted for loopback hosts only, unless this says the path is trusted.
    jwks_allow_http: bool = False
    issuer: str | None = None
    # Comma-separated, as Kafka's sasl.oauthbearer.expected.audience: the token's `aud` must hold one.
    audience: str | None = None
    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scopes: list[str] = []
    clock_skew_s: int = Field(default=30, ge=0, le=300)
    jwks_refresh_s: int = Field(default=3600, ge=1)
    # An unknown `kid` triggers at most one JWKS refresh per this interval (Kafka: 60 s).
    jwks_unknown_kid_refresh_s: int = Field(default=60, ge=1)
    # ... and all unknown-kid refreshes together at most once per this interval (a client inventing
    # a new kid per attempt must not turn every attempt into a fetch from the identity provider).
    jwks_unknown_kid_min_interval_s: int = Field(default=10, ge=1)
    # kgov's own token issuer (`POST /oauth/token`).
    token_issuer: str = "kgov"  # noqa: S105 - an issuer name
    token_audience: str = "kgov"  # noqa: S105 - an audience name
    # The control plane's public URL for the discovery document (behind a proxy). Unset: an http(s)
    # `token_issuer`, else the address the server is bound to; never the request's Host header.
    public_base_url: str | None = None
    token_lifetime_s: int = Field(default=900, ge=60, le=86_400)
    signing_algorithm: Literal["RS256", "ES256"] = "RS256"
    # Encrypts the issuer's private keys at rest (AES-256-GCM); unset stores them as plain PEM.
    signing_key_secret: SecretStr | None = Field(default=None, repr=False)
    key_rotation_s: int = Field(default=86_400, ge=60)


def is_loopback_host(host: str) -> bool:
    """`localhost` or a loopback IP literal: where plain http cannot be read by anyone else."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_base_url(value: str) -> bool:
    """An absolute http(s) URL with a host and no query or fragment: something to put paths after.
    False for what cannot be parsed ("http://[::1", an unclosed IPv6 literal, raises in `urlsplit`)."""
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and not (parts.query or parts.fragment)
