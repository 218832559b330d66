"""kgov's token issuer: what `mint_access_token` writes cannot be overwritten by the scope claim."""

from __future__ import annotations

import pytest
from jose import jwt

from sasl.issuer import ISSUER_CLAIMS, generate_signing_key, mint_access_token

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
