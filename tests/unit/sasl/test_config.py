"""Credential settings refuse weak or unusable values with a message that says the fix."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kgov.settings import Settings


def test_short_delegation_secret_refused() -> None:
    with pytest.raises(ValidationError, match="at least 16 characters"):
        Settings(sasl={"delegation_token_secret_key": "short"})
    assert (
        Settings(sasl={"delegation_token_secret_key": "x" * 16}).sasl.delegation_token_secret_key is not None
    )


def test_secret_not_in_repr() -> None:
    settings = Settings(sasl={"delegation_token_secret_key": "very-secret-master-key"})
    assert "very-secret-master-key" not in repr(settings) and "very-secret-master-key" not in str(settings)


def test_mechanisms_and_jwks_url() -> None:
    with pytest.raises(ValidationError, match="unknown SASL mechanism"):
        Settings(sasl={"enabled_mechanisms": ["GSSAPI"]})
    assert Settings(sasl={"enabled_mechanisms": ["plain"]}).sasl.enabled_mechanisms == ["PLAIN"]
    with pytest.raises(ValidationError, match="http"):
        Settings(oauth={"jwks_url": "file:///etc/passwd"})
    with pytest.raises(ValidationError):
        Settings(sasl={"scram_iterations": 1000})


def test_external_provider_must_be_pinned_and_fetched_safely() -> None:
    """A JWKS URL without an expected issuer accepts tokens of every tenant sharing the provider's
    keys; plain http to a remote host lets anyone on the path substitute the keys."""
    with pytest.raises(ValidationError, match=r"needs oauth\.issuer"):
        Settings(oauth={"jwks_url": "https://login.example.com/common/keys"})
    with pytest.raises(ValidationError, match="plain http to a remote host"):
        Settings(oauth={"jwks_url": "http://idp.example.com/jwks.json", "issuer": "https://idp.example.com"})
    for url in ("http://127.0.0.1:8080/jwks.json", "http://localhost/jwks.json", "http://[::1]:9/jwks.json"):
        assert Settings(oauth={"jwks_url": url, "issuer": "i"}).oauth.jwks_url == url
    trusted = Settings(oauth={"jwks_url": "http://keycloak:8080/jwks", "issuer": "i", "jwks_allow_http": True})
    assert trusted.oauth.jwks_allow_http
    assert Settings(oauth={"jwks_url": "https://idp.example.com/jwks.json", "issuer": "i"}).oauth.issuer == "i"
