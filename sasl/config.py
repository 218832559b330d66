"""Credential-service settings (sections `[admin]`, `[sasl]`, `[oauth]`)."""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr


class AdminConfig(BaseModel):
    """The bootstrap super user: created at start when missing, accepted by HTTP Basic."""

    user: str = "admin"
    password: SecretStr | None = Field(default=None, repr=False)


class SaslConfig(BaseModel):
    failed_authentication_delay_ms: int = Field(default=100, ge=0)
    scram_iterations: int = Field(default=8192, ge=4096, le=16384)


class OAuthConfig(BaseModel):
    jwks_url: str | None = None
    issuer: str | None = None
    audience: str | None = None
    principal_claim: str = "sub"
    scope_claim: str = "scope"
    clock_skew_s: int = Field(default=30, ge=0, le=300)
