"""The client side of the gateway's upstream OAUTHBEARER login, driven against kgov's own server machine."""

from __future__ import annotations

import pytest

from gateway.upstream_login import Authenticated, OAuthBearerExchange, Send, reauthentication_delay_s
from gateway.upstream_token import UpstreamLoginError
from sasl.mechanism import Challenge, Failure, Success
from sasl.oauthbearer import (
    OAuthBearerServer,
    TokenValidationError,
    ValidatedToken,
    parse_client_initial_response,
)

TOKEN = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJndyJ9.c2ln"


def validator(token: str) -> ValidatedToken:
    if token != TOKEN:
        raise TokenValidationError("signature did not verify")
    return ValidatedToken("gw", frozenset(), expiry_ms=61_000)


def test_initial_response_is_kafkas_layout_with_kip342_extensions() -> None:
    """Kafka's OAuthBearerClientInitialResponseTest vector."""
    assert OAuthBearerExchange("123.345.567", {"nineteen": "42"}).first_message() == (
        b"n,,\x01auth=Bearer 123.345.567\x01nineteen=42\x01\x01")
    assert OAuthBearerExchange("123.345.567").first_message() == b"n,,\x01auth=Bearer 123.345.567\x01\x01"
    parsed = parse_client_initial_response(OAuthBearerExchange(TOKEN, {"logicalCluster": "lkc-1"}).first_message())
    assert parsed.token == TOKEN and parsed.extensions == {"logicalCluster": "lkc-1"}


def test_accepted_token_reports_the_session_lifetime() -> None:
    server = OAuthBearerServer(validator, session=lambda expiry_ms: (expiry_ms or 0) - 1_000)
    client = OAuthBearerExchange(TOKEN)
    verdict = server.step(client.first_message())
    assert isinstance(verdict, Success) and verdict.session_lifetime_ms == 60_000
    step = client.on_response(0, None, verdict.data, verdict.session_lifetime_ms or 0)
    assert step == Authenticated(60_000)


def test_refused_token_answers_the_json_error_with_x01_then_fails_clearly() -> None:
    server = OAuthBearerServer(validator)
    client = OAuthBearerExchange("eyJ.wrong.token")
    challenge = server.step(client.first_message())
    assert isinstance(challenge, Challenge) and challenge.data == b'{"status":"invalid_token"}'
    reply = client.on_response(0, None, challenge.data)
    assert reply == Send(b"\x01")
    verdict = server.step(reply.data)
    assert isinstance(verdict, Failure)
    with pytest.raises(UpstreamLoginError) as info:
        # what a broker sends after the %x01 (Kafka: SASL_AUTHENTICATION_FAILED with its message)
        client.on_response(58, "Authentication failed during authentication due to invalid credentials with "
                               "SASL mechanism OAUTHBEARER", b"")
    message = str(info.value)
    assert message.startswith("the upstream refused the gateway's OAUTHBEARER token: invalid_token (error 58)")
    assert "eyJ.wrong.token" not in message and info.value.refused


def test_scope_of_an_insufficient_scope_error_is_reported() -> None:
    client = OAuthBearerExchange(TOKEN)
    client.on_response(0, None, b'{"status": "insufficient_scope", "scope": "kafka:write"}')
    with pytest.raises(UpstreamLoginError, match=r"insufficient_scope \(scope kafka:write\)"):
        client.on_response(58, None, b"")


def test_an_error_code_at_once_fails_without_echoing_the_token() -> None:
    client = OAuthBearerExchange(TOKEN)
    with pytest.raises(UpstreamLoginError) as info:
        client.on_response(58, f"bad token {TOKEN}\nsecond line", b"")
    assert TOKEN not in str(info.value) and "\n" not in str(info.value)
    assert "upstream OAUTHBEARER authentication failed (error 58): bad token <token>" in str(info.value)


@pytest.mark.parametrize("data", [b"not json", b"[]", b'{"status": 5}'])
def test_unreadable_server_errors_still_fail(data: bytes) -> None:
    client = OAuthBearerExchange(TOKEN)
    assert client.on_response(0, None, data) == Send(b"\x01")
    with pytest.raises(UpstreamLoginError, match="refused the gateway's OAUTHBEARER token: an "):
        client.on_response(0, None, b"")  # even a server that "succeeds" after its own error fails


def test_nothing_is_accepted_after_the_exchange_ended() -> None:
    client = OAuthBearerExchange(TOKEN)
    assert isinstance(client.on_response(0, None, b""), Authenticated)
    with pytest.raises(UpstreamLoginError, match="after it ended"):
        client.on_response(0, None, b"")


def test_reauthentication_falls_between_85_and_95_percent_of_the_session() -> None:
    """Kafka's SaslClientAuthenticator: 0.85 + rand * 0.10 of the session lifetime."""
    assert reauthentication_delay_s(60_000, 0.0) == pytest.approx(51.0)
    assert reauthentication_delay_s(60_000, 0.5) == pytest.approx(54.0)
    assert reauthentication_delay_s(60_000, 0.999999) == pytest.approx(57.0, abs=1e-3)
    assert reauthentication_delay_s(1500, 0.0) == pytest.approx(1.275)
    # an unlimited session (0, or a nonsensical negative lifetime) is never re-authenticated
    assert reauthentication_delay_s(0, 0.5) is None
    assert reauthentication_delay_s(-5, 0.5) is None
