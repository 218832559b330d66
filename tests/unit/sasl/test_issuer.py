"""kgov's token issuer: the claims it writes, and its sealed signing keys."""

from __future__ import annotations

import pytest
from jose import jwt

from sasl.config import ISSUER_CLAIMS
from sasl.issuer import (
    SealedKeyError,
    generate_signing_key,
    mint_access_token,
    open_private_key,
    seal_private_key,
)

KEY = generate_signing_key("ES256", 0)


def mint(scope_claim: str) -> str:
    return mint_access_token(
        KEY, issuer="kgov", audience="kafka", subject="reader", scopes=["admin"], now_s=1_800_000_000,
        lifetime_s=600, scope_claim=scope_claim,
    ).access_token


@pytest.mark.parametrize("claim", sorted(ISSUER_CLAIMS))
def test_a_scope_claim_naming_an_issuer_claim_is_refused(claim: str) -> None:
    # With scope_claim "sub", the client `reader` allowed the scope "admin" was issued a token for
    # User:admin: the scope string replaced the subject.
    with pytest.raises(ValueError, match="scope claim"):
        mint(claim)


def test_the_scopes_go_under_the_configured_claim_beside_the_subject() -> None:
    claims = jwt.get_unverified_claims(mint("scp"))
    assert claims["sub"] == claims["client_id"] == "reader"
    assert claims["scp"] == "admin" and "scope" not in claims


@pytest.mark.parametrize("stored", ["kgov-aesgcm-v1:", "kgov-aesgcm-v1:AAAA", "kgov-aesgcm-v1:!!!!", "kgov-aesgcm-v1:" + "A" * 40])
def test_a_damaged_sealed_key_is_a_sealed_key_error(stored: str) -> None:
    # The credential service publishes a key it cannot open and refuses to sign with it
    # (`SealedKeyError`); a damaged row raised ValueError out of every snapshot load instead.
    with pytest.raises(SealedKeyError):
        open_private_key(stored, KEY.kid, b"signing-key-secret-0123")


def test_a_sealed_key_opens_with_its_secret_and_kid_only() -> None:
    sealed = seal_private_key(KEY.private_pem, KEY.kid, b"signing-key-secret-0123")
    assert open_private_key(sealed, KEY.kid, b"signing-key-secret-0123") == KEY.private_pem
    for kid, secret in ((KEY.kid, b"another-secret-0123456"), ("other-kid", b"signing-key-secret-0123")):
        with pytest.raises(SealedKeyError):
            open_private_key(sealed, kid, secret)
