"""`sasl.limiter`: the claimed name of a first message, the two counts, their window and memory bound."""

from __future__ import annotations

from sasl.limiter import (
    ADDRESS_REFUSAL,
    BEARER_CLAIM,
    MALFORMED_CLAIM,
    NAME_REFUSAL,
    FailureLimiter,
    claim_of_sasl,
    token_claim,
    user_claim,
)
from sasl.oauthbearer import build_client_initial_response


def test_the_claim_is_read_with_each_mechanisms_own_parser() -> None:
    assert claim_of_sasl("SCRAM-SHA-256", b"n,,n=al=2Cice,r=abc") == user_claim("al,ice")
    assert claim_of_sasl("SCRAM-SHA-512", b"n,,n=tok1,r=abc,tokenauth=true") == token_claim("tok1")
    assert claim_of_sasl("PLAIN", b"\x00bob\x00pw") == user_claim("bob")
    assert claim_of_sasl("OAUTHBEARER", build_client_initial_response("a.b.c")) == BEARER_CLAIM
    for mechanism, garbage in (("SCRAM-SHA-256", b"n,,x=1"), ("SCRAM-SHA-256", b"\xff"), ("PLAIN", b"bob\x00pw"),
                               ("PLAIN", b"\x00\xff\x00pw")):
        assert claim_of_sasl(mechanism, garbage) == MALFORMED_CLAIM
    assert user_claim("token") != token_claim("") and user_claim("") != BEARER_CLAIM


def test_pair_and_address_counts_slide_with_the_window() -> None:
    now = [0.0]
    limiter = FailureLimiter(2, 10.0, address_limit=3, monotonic=lambda: now[0])
    for _ in range(2):
        limiter.record_failure("10.0.0.1", user_claim("a"))
    assert limiter.refusal("10.0.0.1", user_claim("a")) == NAME_REFUSAL
    assert limiter.refusal("10.0.0.1", user_claim("b")) is None
    assert limiter.refusal("10.0.0.2", user_claim("a")) is None
    limiter.record_failure("10.0.0.1", user_claim("b"))
    assert limiter.refusal("10.0.0.1", user_claim("c")) == ADDRESS_REFUSAL
    now[0] = 10.5  # all three aged out
    assert limiter.refusal("10.0.0.1", user_claim("a")) is None
    # an IPv6 /64 is one address, for the pair count too
    for suffix in ("1", "2"):
        limiter.record_failure(f"2001:db8:0:1::{suffix}", user_claim("a"))
    assert limiter.refusal("2001:db8:0:1:ffff::9", user_claim("a")) == NAME_REFUSAL


def test_cycling_names_evicts_pair_counts_never_the_address_count() -> None:
    limiter = FailureLimiter(5, 60.0, address_limit=50, monotonic=lambda: 1.0, max_sources=4, max_pairs=8)
    for n in range(50):
        limiter.record_failure("10.0.0.1", user_claim(f"name-{n}"))
    assert limiter.refusal("10.0.0.1", user_claim("fresh")) == ADDRESS_REFUSAL
    assert len(limiter._pairs) == 8 and len(limiter._addresses) == 1
    # a very long claimed name costs a 16-byte key
    limiter.record_failure("10.0.0.2", user_claim("x" * 100_000))
    assert all(len(digest) == 16 for _, digest in limiter._pairs)
