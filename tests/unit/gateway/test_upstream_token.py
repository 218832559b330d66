"""The gateway's upstream OAuth token: the client-credentials request and the token endpoint's answer."""

from __future__ import annotations

import asyncio
import base64
import json
from urllib.parse import parse_qs

import pytest

from gateway.upstream_token import (
    UpstreamLoginError,
    UpstreamToken,
    UpstreamTokenSource,
    jwt_expiry_ms,
    parse_token_response,
    token_request,
)
from sasl.issuer import generate_signing_key, mint_access_token

ENDPOINT = "https://idp.example.com/oauth2/token"
NOW_MS = 1_700_000_000_000


def parse(status: int, body: object, now_ms: int = NOW_MS) -> UpstreamToken:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return parse_token_response(status, raw, now_ms=now_ms, endpoint=ENDPOINT, client_id="gw")


def basic_of(headers: dict[str, str]) -> str:
    scheme, _, value = headers["Authorization"].partition(" ")
    assert scheme == "Basic"
    return base64.b64decode(value).decode()


def test_request_is_a_client_credentials_form_with_the_secret_in_http_basic_as_librdkafka() -> None:
    req = token_request("gw", "s3cret:with=odd&chars", "kafka produce")
    assert basic_of(req.headers) == "gw:s3cret:with=odd&chars"  # raw, as sasl.oauthbearer.header.urlencode=false
    assert req.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert req.headers["Accept"] == "application/json"
    assert parse_qs(req.body.decode(), strict_parsing=True) == {
        "grant_type": ["client_credentials"], "scope": ["kafka produce"]}
    assert b"s3cret" not in req.body and "s3cret" not in repr(req)


def test_request_without_scope_and_with_urlencoded_header() -> None:
    req = token_request("gw:1", "a b+c", None, urlencode_header=True)
    assert req.body == b"grant_type=client_credentials"
    assert basic_of(req.headers) == "gw%3A1:a+b%2Bc"  # RFC 6749 §2.3.1


def test_expiry_comes_from_the_jwt_exp_claim_of_a_real_kgov_token() -> None:
    key = generate_signing_key("ES256", NOW_MS)
    issued = mint_access_token(key, issuer="kgov", audience="kgov", subject="gw", scopes=[],
                               now_s=NOW_MS // 1000, lifetime_s=600)
    assert jwt_expiry_ms(issued.access_token) == NOW_MS + 600_000
    # the JWT's exp wins over a disagreeing expires_in: it is what the broker enforces
    token = parse(200, {"access_token": issued.access_token, "token_type": "Bearer", "expires_in": 3600})
    assert (token.obtained_ms, token.expires_ms) == (NOW_MS, NOW_MS + 600_000)
    assert issued.access_token not in repr(token)


def jws_with(payload: bytes) -> str:
    return "a." + base64.urlsafe_b64encode(payload).decode().rstrip("=") + ".c"


@pytest.mark.parametrize("value", ["opaque-token", "a.b", "a.!!!.c", jws_with(b'{"exp":"x"}'), jws_with(b"[1]"),
                                   jws_with(b'{"exp":true}'),
                                   # Python's json reads these; a time cannot be made of them
                                   jws_with(b'{"exp":Infinity}'), jws_with(b'{"exp":NaN}'), jws_with(b'{"exp":1e300}')])
def test_no_jwt_expiry_in_opaque_or_odd_tokens(value: str) -> None:
    assert jwt_expiry_ms(value) is None


def test_opaque_token_lives_for_expires_in() -> None:
    token = parse(200, {"access_token": "opaque-abc", "token_type": "bearer", "expires_in": 100})
    assert (token.value, token.obtained_ms, token.expires_ms) == ("opaque-abc", NOW_MS, NOW_MS + 100_000)


def test_refused_client_is_a_definitive_refusal_naming_endpoint_and_client() -> None:
    with pytest.raises(UpstreamLoginError) as info:
        parse(401, {"error": "invalid_client", "error_description": "client authentication failed"})
    assert info.value.refused
    assert str(info.value) == (f"the upstream OAuth token endpoint {ENDPOINT} refused client 'gw': "
                               "invalid_client (HTTP 401): client authentication failed")


@pytest.mark.parametrize(("status", "body", "expected", "refused"), [
    (400, {"error": "invalid_scope"}, "refused client 'gw': invalid_scope (HTTP 400)", True),
    (403, b"<html>forbidden</html>", "refused client 'gw': HTTP 403", True),
    (503, b"busy", "failed for client 'gw': HTTP 503", False),
    (302, b"", "failed for client 'gw': HTTP 302", False),  # redirects are not followed
    (200, b"not json", "answered something other than a JSON object", False),
    (200, [1, 2], "answered something other than a JSON object", False),
    (200, {"token_type": "Bearer"}, "answered without an access_token", False),
    (200, {"access_token": "", "expires_in": 5}, "answered without an access_token", False),
    (200, {"access_token": "t", "token_type": "mac", "expires_in": 5}, "token_type 'mac', not Bearer", False),
    (200, {"access_token": "t"}, "lifetime is unknown", False),
    (200, {"access_token": "t", "expires_in": "60"}, "lifetime is unknown", False),
    (200, b'{"access_token": "t", "expires_in": Infinity}', "lifetime is unknown", False),
    (200, b'{"access_token": "t", "expires_in": NaN}', "lifetime is unknown", False),
    (200, {"access_token": "t", "expires_in": 0}, "answered an expired token", False),
])
def test_bad_answers_say_what_is_wrong(status: int, body: object, expected: str, refused: bool) -> None:
    with pytest.raises(UpstreamLoginError) as info:
        parse(status, body)
    assert expected in str(info.value) and info.value.refused is refused


def test_control_characters_from_the_endpoint_do_not_reach_the_message() -> None:
    with pytest.raises(UpstreamLoginError) as info:
        parse(400, {"error": "bad\nline", "error_description": "x\x1b[31my"})
    assert "\n" not in str(info.value) and "\x1b" not in str(info.value)


def test_token_source_repr_names_no_secret() -> None:
    source = UpstreamTokenSource(ENDPOINT, "gw", "top-secret-value")
    assert "top-secret-value" not in repr(source) and "gw" in repr(source)


def test_unreachable_endpoint_fails_softly_then_logins_fail_at_once_until_the_retry(refused_port: int) -> None:
    """A real refused TCP connection; the clock and the jitter are injected, so the retry time is exact.
    (The background retries themselves: tests/unit/gateway/test_upstream_token_refresh.py.)"""
    now = [NOW_MS]
    source = UpstreamTokenSource(f"http://127.0.0.1:{refused_port}/token", "gw", "s3cret-value",
                                 now_ms=lambda: now[0], timeout_s=2, rand=lambda: 0.5)

    async def attempt() -> UpstreamLoginError:
        with pytest.raises(UpstreamLoginError) as info:
            await source.token()
        return info.value

    first = asyncio.run(attempt())
    assert not first.refused and "could not be reached: ConnectError" in str(first)
    assert "s3cret-value" not in str(first)
    assert source.next_attempt_ms == NOW_MS + 100  # sasl.login.retry.backoff.ms
    again = asyncio.run(attempt())  # before the retry time: the same error, no new request
    assert str(again) == str(first) and source.attempts == 1
    now[0] += 100
    asyncio.run(attempt())
    assert source.attempts == 2 and source.failures == 2
    assert source.next_attempt_ms == now[0] + 200  # doubled
    now[0] += 199
    asyncio.run(attempt())
    assert source.attempts == 2 and source.fetches == 0
