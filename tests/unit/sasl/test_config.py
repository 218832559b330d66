"""Credential settings refuse weak or unusable values with a message that says the fix."""

from __future__ import annotations

import logging
from pathlib import Path

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


@pytest.mark.parametrize(
    "url", ["kgov.example.com", "ftp://kgov.example.com", "https://", "https://kgov.example.com/?a=1", "https://h/#f",
            "https://[::1"]
)
def test_public_base_url_must_be_an_absolute_http_url(url: str) -> None:
    with pytest.raises(ValidationError, match="public_base_url must be an absolute http"):
        Settings(oauth={"public_base_url": url})
    assert Settings(oauth={"public_base_url": "https://kgov.example.com/cp"}).oauth.public_base_url


def test_discovery_base_url_from_the_bound_address() -> None:
    """No configured base: the ASGI `server` (the bound socket), with IPv6 brackets and default ports
    left out; without one (a Unix socket) a clear error says what to set."""
    from starlette.requests import Request

    from authz.http import ApiError
    from sasl.api import discovery_base_url

    oauth = Settings().oauth

    def base(server: tuple[str, int] | None, scheme: str = "http", root_path: str = "") -> str:
        scope = {"type": "http", "server": server, "scheme": scheme, "root_path": root_path,
                 "headers": [(b"host", b"evil.example")], "path": "/", "query_string": b""}
        return discovery_base_url(Request(scope), oauth)

    assert base(("10.1.2.3", 8080)) == "http://10.1.2.3:8080"
    assert base(("10.1.2.3", 443), "https") == "https://10.1.2.3"
    assert base(("::1", 8080), root_path="/kgov") == "http://[::1]:8080/kgov"
    # A token_issuer that is not a URL kgov can parse is a name, not the base (it raised: every request 500)
    oauth = Settings(oauth={"token_issuer": "http://[::1"}).oauth
    assert base(("10.1.2.3", 8080)) == "http://10.1.2.3:8080"
    oauth = Settings().oauth
    with pytest.raises(ApiError) as err:
        base(None)
    assert err.value.status == 500 and "oauth.public_base_url" in err.value.message


def test_an_external_provider_without_an_audience_is_warned_about(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    from authz.database import open_engine
    from sasl.service import CredentialService

    engine = open_engine(f"sqlite:///{tmp_path / 'k.db'}")
    base = {"jwks_url": "https://idp.example.com/keys", "issuer": "https://idp.example.com"}
    with caplog.at_level(logging.WARNING, logger="kgov.sasl"):
        CredentialService(engine, Settings(dev_mode=True, oauth=base))
    assert "oauth.jwks_url is set without oauth.audience" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kgov.sasl"):
        CredentialService(engine, Settings(dev_mode=True, oauth={**base, "audience": "kafka"}))
    assert "without oauth.audience" not in caplog.text


@pytest.mark.parametrize("claim", ["sub", "iss", "aud", "exp", "nbf", "iat", "jti", "client_id"])
def test_the_scope_claim_cannot_be_a_claim_the_issuer_writes(claim: str) -> None:
    # kgov's issuer writes the scopes under `scope_claim` after its own claims: as "sub" it replaced
    # the subject, so a client allowed the scope "admin" got tokens for User:admin (a super user).
    with pytest.raises(ValidationError, match=r"oauth\.scope_claim"):
        Settings(oauth={"scope_claim": claim})


def test_the_scope_claim_cannot_be_the_principal_claim() -> None:
    with pytest.raises(ValidationError, match=r"oauth\.scope_claim"):
        Settings(oauth={"scope_claim": "email", "principal_claim": "email"})
    settings = Settings(oauth={"scope_claim": "scp", "principal_claim": "client_id"})
    assert (settings.oauth.scope_claim, settings.oauth.principal_claim) == ("scp", "client_id")


@pytest.mark.parametrize(
    "oauth",
    [
        {"issuer": "https://idp.example.com"},
        {"audience": "kafka"},
        {"audience": "kafka, other", "token_audience": "kgov"},
        {"issuer": "kgov", "token_issuer": "https://kgov.example.com"},
    ],
)
def test_without_jwks_url_the_expected_issuer_and_audience_must_be_the_issuers_own(oauth: dict[str, str]) -> None:
    # Without jwks_url, tokens are verified with kgov's own keys, and kgov's issuer writes `token_issuer`
    # and `token_audience`: another expected `iss` or `aud` refused every token it issued, each login
    # failing with "issuer does not match" and nothing saying why at start.
    with pytest.raises(ValidationError, match=r"without oauth\.jwks_url"):
        Settings(oauth=oauth)


def test_without_jwks_url_the_issuers_own_issuer_and_audience_may_be_restated() -> None:
    oauth = Settings(oauth={"issuer": "kgov", "audience": "kafka, kgov"}).oauth
    assert (oauth.issuer, oauth.audience) == ("kgov", "kafka, kgov")
    assert Settings(oauth={"audience": "kafka", "jwks_url": "https://idp.example.com/k", "issuer": "i"}).oauth.audience
