"""PLAIN and OAUTHBEARER message handling (RFC 4616, RFC 7628 as Kafka parses them)."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from authz.model import Principal
from sasl.mechanism import Challenge, Failure, Success
from sasl.oauthbearer import (
    OAuthBearerError,
    OAuthBearerServer,
    TokenValidationError,
    ValidatedToken,
    build_client_initial_response,
    parse_client_initial_response,
)
from sasl.plain import PlainServer, VerifiedUser


def verify(user: str, password: str) -> VerifiedUser | None:
    return (
        VerifiedUser(Principal("User", user), expiry_ms=None) if (user, password) == ("alice", "pw") else None
    )


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (b"\x00alice\x00bad", "Invalid username or password"),
        (b"\x00bob\x00pw", "Invalid username or password"),
        (b"alice\x00pw", "expected 3 tokens, got 2"),
        (b"\x00alice\x00pw\x00x", "expected 3 tokens, got 4"),
        (b"\x00\x00pw", "username not specified"),
        (b"\x00alice\x00", "password not specified"),
        (b"bob\x00alice\x00pw", "authorization id that is different"),
        (b"\x00\xff\x00pw", "not UTF-8"),
    ],
)
def test_plain_failures(message: bytes, reason: str) -> None:
    result = PlainServer(verify).step(message)
    assert isinstance(result, Failure) and reason in result.reason
    assert "pw" not in result.reason.replace("password", "")


def test_plain_success_and_session() -> None:
    result = PlainServer(verify, session=lambda exp: 5000).step(b"alice\x00alice\x00pw")
    assert isinstance(result, Success)
    assert result.principal == Principal("User", "alice") and result.session_lifetime_ms == 5000
    server = PlainServer(verify)
    server.step(b"\x00alice\x00pw")
    assert isinstance(server.step(b"\x00alice\x00pw"), Failure)


def test_parse_kafka_examples() -> None:
    r = parse_client_initial_response(b"n,,\x01auth=Bearer 123.345.567\x01\x01")
    assert (r.token, r.authzid, dict(r.extensions)) == ("123.345.567", "", {})
    assert parse_client_initial_response(b"n,a=myuser,\x01auth=Bearer 345\x01\x01").authzid == "myuser"
    r = parse_client_initial_response(
        b"n,,\x01propA=valueA1, valueA2\x01auth=Bearer 567\x01propB=valueB\x01\x01"
    )
    assert dict(r.extensions) == {"propA": "valueA1, valueA2", "propB": "valueB"}
    rfc = base64.b64decode(
        "bixhPXVzZXJAZXhhbXBsZS5jb20sAWhvc3Q9c2VydmVyLmV4YW1wbGUuY29tAXBvcnQ9MTQzAWF1dGg9QmVhcmVyIHZGOWRmdDRxbVRj"
        "Mk52YjNSbGNrQmhiSFJoZG1semRHRXVZMjl0Q2c9PQEB"
    )
    r = parse_client_initial_response(rfc)
    assert r.authzid == "user@example.com" and r.token == "vF9dft4qmTc2Nvb3RlckBhbHRhdmlzdGEuY29tCg=="
    assert build_client_initial_response("123.345.567", extensions={"nineteen": "42"}) == (
        b"n,,\x01auth=Bearer 123.345.567\x01nineteen=42\x01\x01"
    )
    assert (
        parse_client_initial_response(build_client_initial_response("a.b.c", authzid="x,y")).authzid == "x,y"
    )


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (b"n,,\x01auth=Bearer\x01\x01", "invalid 'auth' format"),
        (b"n,,\x01auth=Basic abc\x01\x01", "Invalid scheme"),
        (b"n,,\x01foo=bar\x01\x01", "'auth' not specified"),
        (b"y,,\x01auth=Bearer abc\x01\x01", "Invalid OAUTHBEARER client first message"),
        (b"n,,\x01auth=Bearer abc\x01", "Invalid OAUTHBEARER client first message"),
        (b"\xff", "Invalid OAUTHBEARER client first message"),
    ],
)
def test_parse_errors(message: bytes, error: str) -> None:
    with pytest.raises(OAuthBearerError, match=error):
        parse_client_initial_response(message)
    assert isinstance(OAuthBearerServer(lambda t: pytest.fail("not reached")).step(message), Failure)


def validator(token: str) -> ValidatedToken:
    if token == "good":
        return ValidatedToken("worker-1", frozenset({"kafka"}), expiry_ms=90_000)
    raise TokenValidationError(f"signature check failed for {len(token)}-char token")


def test_oauthbearer_success() -> None:
    server = OAuthBearerServer(validator, session=lambda exp: (exp or 0) - 30_000)
    result = server.step(build_client_initial_response("good"))
    assert isinstance(result, Success)
    assert result.principal == Principal("User", "worker-1") and result.session_lifetime_ms == 60_000
    assert result.mechanism == "OAUTHBEARER"


def test_oauthbearer_error_flow() -> None:
    server = OAuthBearerServer(validator, openid_configuration="http://kgov/.well-known/openid-configuration")
    challenge = server.step(build_client_initial_response("bad.token"))
    assert isinstance(challenge, Challenge)
    body = json.loads(challenge.data)
    assert body == {
        "status": "invalid_token",
        "openid-configuration": "http://kgov/.well-known/openid-configuration",
    }
    final = server.step(b"\x01")
    assert isinstance(final, Failure) and "signature check failed" in final.reason
    assert isinstance(server.step(b"\x01"), Failure)


def test_oauthbearer_authzid_must_match_and_expired_session() -> None:
    result = OAuthBearerServer(validator).step(build_client_initial_response("good", authzid="someone-else"))
    assert isinstance(result, Failure) and "different from the token's principal" in result.reason
    server = OAuthBearerServer(validator, session=lambda exp: 0)
    assert isinstance(server.step(build_client_initial_response("good")), Challenge)
    assert isinstance(server.step(b"junk"), Failure)


@given(st.binary(max_size=300))
def test_servers_never_raise_on_garbage(data: bytes) -> None:
    for server in (PlainServer(verify), OAuthBearerServer(validator)):
        first = server.step(data)
        assert isinstance(first, Challenge | Failure | Success)
        assert isinstance(server.step(b"\x01"), Failure)


@given(
    st.text(
        alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters=","),
        min_size=1,
        max_size=40,
    ),
    st.text(alphabet="abcdefghijklmnop", min_size=1, max_size=10),
)
def test_build_and_parse_round_trip(authzid: str, ext_value: str) -> None:
    token = "eyJ.abc-_~+/.xyz=="
    parsed = parse_client_initial_response(
        build_client_initial_response(token, authzid=authzid, extensions={"ext": ext_value})
    )
    assert (parsed.token, parsed.authzid, dict(parsed.extensions)) == (token, authzid, {"ext": ext_value})


@pytest.mark.parametrize(
    ("token", "extensions", "message"),
    [
        ("abc\x01auth=Bearer forged", {}, "token charset"),
        ("abc def", {}, "token charset"),
        ("abc", {"auth": "Bearer other"}, "Extension name auth is invalid"),
        ("abc", {"bad-key": "v"}, "Extension name bad-key is invalid"),
        ("abc", {"ok": "v\x01auth=Bearer forged"}, "Extension value for ok is invalid"),
        ("abc", {"ok": ""}, "Extension value for ok is invalid"),
    ],
)
def test_client_initial_response_refuses_what_would_inject_fields(token, extensions, message) -> None:
    """Kafka's OAuthBearerClientInitialResponse validates what it sends; a 0x01 in a token or value
    would add fields (a second `auth`) of the sender's choosing."""
    with pytest.raises(OAuthBearerError, match=message):
        build_client_initial_response(token, extensions=extensions)


def test_a_token_inside_its_clock_skew_gets_a_session_ending_with_the_skew() -> None:
    """Past `exp` (remaining life 0) but accepted by the validator's skew: Kafka would send lifetime 0
    ("no limit"); here the session ends when the validator would stop accepting the token."""
    now = {"ms": 95_000}

    def in_skew(token: str) -> ValidatedToken:
        return ValidatedToken("worker-1", frozenset(), expiry_ms=90_000, accepted_until_ms=120_000)

    def session(expiry_ms: int | None) -> int | None:
        return max(0, (expiry_ms or 0) - now["ms"])

    result = OAuthBearerServer(in_skew, session=session).step(build_client_initial_response("good"))
    assert isinstance(result, Success) and result.session_lifetime_ms == 25_000
    now["ms"] = 120_000  # the validator would refuse it from here on; never a lifetime of 0
    server = OAuthBearerServer(in_skew, session=session)
    assert isinstance(server.step(build_client_initial_response("good")), Challenge)
    final = server.step(b"\x01")
    assert isinstance(final, Failure) and final.reason == "token expired"
    # Before `exp` the session still ends at `exp`, as Kafka's.
    now["ms"] = 89_000
    result = OAuthBearerServer(in_skew, session=session).step(build_client_initial_response("good"))
    assert isinstance(result, Success) and result.session_lifetime_ms == 1_000
