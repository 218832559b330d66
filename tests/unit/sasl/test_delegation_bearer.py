"""The OAUTHBEARER form of a delegation token (`sasl.delegation.format_bearer` / `parse_bearer`)."""

from __future__ import annotations

import base64
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sasl.delegation import (
    BEARER_PREFIX,
    BearerFormatError,
    DelegationBearer,
    format_bearer,
    is_delegation_bearer,
    parse_bearer,
    token_hmac,
)
from sasl.oauthbearer import build_client_initial_response, parse_client_initial_response

TOKEN_ID = "0b7cbd0c-4f0e-4a43-9d2e-5e6d1c7f1a2b"
MAC = token_hmac(b"a-test-delegation-token-secret", TOKEN_ID)
GOOD = f"kgov-dt1~{TOKEN_ID}~{base64.b64encode(MAC).decode()}"
# A JWT (RFC 7519's example): three base64url parts joined by two dots.
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
       ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")


def test_round_trip_and_the_exact_form() -> None:
    assert format_bearer(TOKEN_ID, MAC) == GOOD
    assert parse_bearer(GOOD) == DelegationBearer(TOKEN_ID, MAC)
    assert is_delegation_bearer(GOOD) and GOOD.startswith(BEARER_PREFIX)
    assert len(GOOD) == len(BEARER_PREFIX) + 36 + 1 + 88


def test_the_hmac_never_shows_in_a_repr() -> None:
    b64 = base64.b64encode(MAC).decode()
    assert b64 not in repr(parse_bearer(GOOD)) and str(MAC) not in repr(parse_bearer(GOOD))


def test_it_is_never_taken_for_a_jwt_nor_a_jwt_for_it() -> None:
    assert not is_delegation_bearer(JWT)
    with pytest.raises(BearerFormatError):
        parse_bearer(JWT)
    # A JWT has exactly two dots; the bearer form has none, and `~` is not base64url.
    assert GOOD.count(".") == 0 and "~" not in JWT


def test_it_travels_in_an_oauthbearer_initial_response_unchanged() -> None:
    # RFC 6750's b64token charset, so Kafka's client-side checks (and ours) let it through.
    sent = build_client_initial_response(GOOD)
    assert parse_client_initial_response(sent).token == GOOD
    # As librdkafka and kafka-python write it: `n,,` then the bearer.
    assert parse_client_initial_response(b"n,,\x01auth=Bearer " + GOOD.encode() + b"\x01\x01").token == GOOD


B64 = base64.b64encode(MAC).decode()
B64URL = base64.urlsafe_b64encode(b"\xfb" * 64).decode()


@pytest.mark.parametrize(
    "hostile",
    [
        "",
        BEARER_PREFIX,
        f"{BEARER_PREFIX}~{B64}",  # no id
        f"{BEARER_PREFIX}{TOKEN_ID}~",  # no HMAC
        f"{BEARER_PREFIX}{TOKEN_ID}{B64}",  # one separator
        f"{BEARER_PREFIX}{TOKEN_ID}~{B64}~",  # a trailing part
        f"{BEARER_PREFIX}{TOKEN_ID}~~{B64}",
        f"{BEARER_PREFIX}{TOKEN_ID}~{B64}\n",  # `$` would let a newline pass; fullmatch does not
        f" {GOOD}",
        f"{GOOD} ",
        f"KGOV-DT1~{TOKEN_ID}~{B64}",  # the prefix is case-sensitive
        f"kgov-dt2~{TOKEN_ID}~{B64}",  # an unknown version
        f"{BEARER_PREFIX}{TOKEN_ID}~{B64[:-2]}",  # padding dropped
        f"{BEARER_PREFIX}{TOKEN_ID}~{B64[:-1]}",
        f"{BEARER_PREFIX}{TOKEN_ID}~{B64URL}",  # base64url
        f"{BEARER_PREFIX}{TOKEN_ID}~{base64.b64encode(MAC[:63]).decode()}",  # 63 bytes
        f"{BEARER_PREFIX}{TOKEN_ID}~{base64.b64encode(MAC + b'x').decode()}",  # 65 bytes
        f"{BEARER_PREFIX}{TOKEN_ID}~{base64.b64encode(MAC * 2).decode()}",
        f"{BEARER_PREFIX}{'a' * 65}~{B64}",  # longer than the store's id column
        f"{BEARER_PREFIX}{'a' * 10_000}~{B64}",
        f"{BEARER_PREFIX}tok.en~{B64}",
        f"{BEARER_PREFIX}tok/en~{B64}",
        f"{BEARER_PREFIX}tok\x00en~{B64}",
        f"{BEARER_PREFIX}tok\x01en~{B64}",
        f"{BEARER_PREFIX}tök~{B64}",
        f"{BEARER_PREFIX}\u0663\u0664~{B64}",  # Arabic-Indic digits: not [0-9]
        f"{BEARER_PREFIX}\uff41~{B64}",  # fullwidth a
        f"{BEARER_PREFIX}{TOKEN_ID}~{B64[:-3]}\u0661==",
        f"{BEARER_PREFIX}{TOKEN_ID}~{B64[:40]} {B64[41:]}",
    ],
)
def test_hostile_values_are_refused_without_quoting_them(hostile: str) -> None:
    with pytest.raises(BearerFormatError) as refused:
        parse_bearer(hostile)
    assert B64 not in str(refused.value) and TOKEN_ID not in str(refused.value)


def test_only_the_canonical_base64_spelling_is_accepted() -> None:
    # The last character of a 64-byte value carries 2 unused bits: base64 decoders ignore them, so four
    # spellings decode to the same HMAC. Only the one `b64encode` writes is a token's.
    last = B64[-3]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    index = alphabet.index(last)
    assert index % 16 == 0  # unused bits are zero in the canonical form
    for other in alphabet[index + 1: index + 16]:
        twin = f"{BEARER_PREFIX}{TOKEN_ID}~{B64[:-3]}{other}=="
        assert base64.b64decode(twin.rsplit("~", 1)[1]) == MAC
        with pytest.raises(BearerFormatError):
            parse_bearer(twin)


def test_format_refuses_what_it_could_not_read_back() -> None:
    for token_id, mac in (("", MAC), ("a~b", MAC), ("a" * 65, MAC), (TOKEN_ID, MAC[:32])):
        with pytest.raises(BearerFormatError):
            format_bearer(token_id, mac)


@given(st.text(max_size=300))
def test_any_text_parses_to_a_token_or_raises_the_one_error(text: str) -> None:
    try:
        parsed = parse_bearer(text)
    except BearerFormatError:
        return
    assert format_bearer(parsed.token_id, parsed.hmac) == text


@given(st.from_regex(re.compile(r"[A-Za-z0-9_-]{1,64}", re.ASCII), fullmatch=True), st.binary(min_size=64, max_size=64))
def test_every_id_and_hmac_round_trip(token_id: str, mac: bytes) -> None:
    bearer = format_bearer(token_id, mac)
    assert parse_bearer(bearer) == DelegationBearer(token_id, mac)
    assert parse_client_initial_response(build_client_initial_response(bearer)).token == bearer


@pytest.mark.parametrize("token_authenticated", [False, True])
def test_the_oauthbearer_server_passes_the_token_authenticated_mark_on(token_authenticated: bool) -> None:
    from sasl.mechanism import Success
    from sasl.oauthbearer import OAuthBearerServer, ValidatedToken

    def validate(_bearer: str) -> ValidatedToken:
        return ValidatedToken("alice", frozenset(), expiry_ms=None, token_authenticated=token_authenticated)

    result = OAuthBearerServer(validate).step(build_client_initial_response(GOOD))
    assert isinstance(result, Success) and result.token_authenticated is token_authenticated
