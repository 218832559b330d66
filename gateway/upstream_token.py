"""The gateway's own OAUTHBEARER token for the upstream cluster: OIDC client credentials, cached.

Behaves like librdkafka's `sasl.oauthbearer.method=oidc`: POST `grant_type=client_credentials`
(plus `scope`) as a form to the token endpoint, the client id and secret in HTTP Basic (RFC 6749
§2.3.1; raw unless `urlencode`, as Kafka's `sasl.oauthbearer.header.urlencode`), and take
`access_token` from the JSON answer. The token's end of life is the JWT's `exp` claim (what the
broker enforces; librdkafka reads it too), else `expires_in`; it is refreshed at 80% of its life
(librdkafka's refresh point). Nothing else is read from the token: the broker validates it.

The request and the answer are pure functions (`token_request`, `parse_token_response`);
`UpstreamTokenSource` adds HTTP, the cache and a back-off after failures. Error messages name the
endpoint and the client id, never the secret or a token.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_plus, urlencode

log = logging.getLogger("kgov.gateway.upstream")

REFRESH_AT = 0.8  # of the token's lifetime, as librdkafka
MIN_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
MAX_RESPONSE_BYTES = 1 << 20


class UpstreamLoginError(ConnectionError):
    """The gateway could not log in upstream: the upstream or its token endpoint refused the
    gateway's service credential, or could not be reached. `refused` is True for a definitive
    refusal (wrong credential), False for what may pass (network, 5xx)."""

    def __init__(self, message: str, *, refused: bool = True) -> None:
        super().__init__(message)
        self.refused = refused


@dataclass(frozen=True, slots=True)
class TokenRequest:
    body: bytes
    headers: dict[str, str] = field(repr=False)


@dataclass(frozen=True, slots=True)
class UpstreamToken:
    value: str = field(repr=False)
    obtained_ms: int
    expires_ms: int

    @property
    def refresh_ms(self) -> int:
        return self.obtained_ms + int((self.expires_ms - self.obtained_ms) * REFRESH_AT)


def token_request(client_id: str, client_secret: str, scope: str | None, *, urlencode_header: bool = False) -> TokenRequest:
    """RFC 6749 §4.4.2 access token request with client_secret_basic authentication."""
    if urlencode_header:
        client_id, client_secret = quote_plus(client_id), quote_plus(client_secret)
    basic = base64.b64encode(f"{client_id}:{client_secret}".encode()).decode()
    form = {"grant_type": "client_credentials"}
    if scope:
        form["scope"] = scope
    return TokenRequest(
        body=urlencode(form).encode(),
        headers={
            "Authorization": f"Basic {basic}",
            "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json",
        },
    )


def jwt_expiry_ms(token: str) -> int | None:
    """The `exp` claim of a JWT, read without verification (the broker verifies), or None."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, binascii.Error):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return None
    return int(exp * 1000)


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def printable(value: object, limit: int = 200) -> str:
    """`value` as text for a log line or an error: at most `limit` characters, control characters as `?`."""
    return "".join(c if c.isprintable() else "?" for c in str(value)[:limit])


def parse_token_response(status: int, body: bytes, *, now_ms: int, endpoint: str, client_id: str) -> UpstreamToken:
    """The token from a token endpoint's answer, or `UpstreamLoginError` saying what went wrong."""
    where = f"the upstream OAuth token endpoint {endpoint}"
    data = _json_object(body)
    if status != 200:
        refused = 400 <= status < 500
        detail = f"HTTP {status}"
        if data is not None and isinstance(data.get("error"), str):
            detail = f"{printable(data['error'], 64)} (HTTP {status})"
            if isinstance(data.get("error_description"), str):
                detail += f": {printable(data['error_description'])}"
        verb = "refused" if refused else "failed for"
        raise UpstreamLoginError(f"{where} {verb} client {client_id!r}: {detail}", refused=refused)
    if data is None:
        raise UpstreamLoginError(f"{where} answered something other than a JSON object", refused=False)
    token = data.get("access_token")
    if not isinstance(token, str) or not token:
        raise UpstreamLoginError(f"{where} answered without an access_token", refused=False)
    token_type = data.get("token_type")
    if token_type is not None and (not isinstance(token_type, str) or token_type.lower() != "bearer"):
        raise UpstreamLoginError(f"{where} answered token_type {printable(token_type, 32)!r}, not Bearer",
                                 refused=False)
    expires_ms = jwt_expiry_ms(token)
    if expires_ms is None:
        expires_in = data.get("expires_in")
        if isinstance(expires_in, bool) or not isinstance(expires_in, int | float):
            raise UpstreamLoginError(f"{where} answered a token whose lifetime is unknown (neither a JWT `exp` "
                                     "claim nor `expires_in`)", refused=False)
        expires_ms = now_ms + int(expires_in * 1000)
    if expires_ms <= now_ms:
        raise UpstreamLoginError(f"{where} answered an expired token (check the clocks)", refused=False)
    return UpstreamToken(token, now_ms, expires_ms)


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class UpstreamTokenSource:
    """The current upstream token: fetched on first use, reused until 80% of its life, then
    refetched (one fetch at a time; concurrent logins wait for it). If a refresh fails while the
    old token is still valid, the old token is used and the failure logged. After a failure with
    no usable token, further logins fail at once for a back-off (0.5 s doubling to 30 s) instead of
    hammering the endpoint."""

    def __init__(
        self,
        endpoint: str,
        client_id: str,
        client_secret: str,
        *,
        scope: str | None = None,
        urlencode_header: bool = False,
        ssl_context: ssl.SSLContext | None = None,
        now_ms: Callable[[], int] = _wall_clock_ms,
        timeout_s: float = 10.0,
    ) -> None:
        self.endpoint = endpoint
        self.client_id = client_id
        self._request = token_request(client_id, client_secret, scope, urlencode_header=urlencode_header)
        self._secret = client_secret
        self._ssl = ssl_context or ssl.create_default_context()
        self._now_ms = now_ms
        self._timeout_s = timeout_s
        self._token: UpstreamToken | None = None
        self._lock: asyncio.Lock | None = None
        self._failure: UpstreamLoginError | None = None
        self._failed_until_ms = 0
        self._backoff_s = MIN_BACKOFF_S
        self.fetches = 0  # successful fetches (for tests and metrics)
        self.attempts = 0

    def __repr__(self) -> str:
        return f"UpstreamTokenSource(endpoint={self.endpoint!r}, client_id={self.client_id!r})"

    async def token(self) -> str:
        current = self._token
        if current is not None and self._now_ms() < current.refresh_ms:
            return current.value
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            now = self._now_ms()
            current = self._token
            if current is not None and now < current.refresh_ms:
                return current.value
            usable = current is not None and now < current.expires_ms
            if self._failure is not None and now < self._failed_until_ms:
                if usable:
                    assert current is not None
                    return current.value
                raise UpstreamLoginError(str(self._failure), refused=self._failure.refused)
            try:
                fresh = await self._fetch()
            except UpstreamLoginError as exc:
                self._failure = exc
                self._failed_until_ms = self._now_ms() + int(self._backoff_s * 1000)
                self._backoff_s = min(self._backoff_s * 2, MAX_BACKOFF_S)
                if usable:
                    assert current is not None
                    log.warning("%s; using the current token until it expires", exc)
                    return current.value
                raise
            self._failure = None
            self._backoff_s = MIN_BACKOFF_S
            self._token = fresh
            self.fetches += 1
            log.info("fetched an upstream OAuth token for client %r from %s (expires in %d s)",
                     self.client_id, self.endpoint, (fresh.expires_ms - fresh.obtained_ms) // 1000)
            return fresh.value

    async def _fetch(self) -> UpstreamToken:
        self.attempts += 1
        try:
            return await self._fetch_unscrubbed()
        except UpstreamLoginError as exc:
            # The endpoint's error_description is its own text: make sure it cannot echo our secret.
            message = str(exc)
            if self._secret and self._secret in message:
                raise UpstreamLoginError(message.replace(self._secret, "***"), refused=exc.refused) from None
            raise

    async def _fetch_unscrubbed(self) -> UpstreamToken:
        import httpx

        where = f"the upstream OAuth token endpoint {self.endpoint}"
        try:
            async with (
                httpx.AsyncClient(verify=self._ssl, timeout=self._timeout_s, follow_redirects=False,
                                  trust_env=False) as client,
                client.stream("POST", self.endpoint, content=self._request.body,
                              headers=self._request.headers) as response,
            ):
                body = b""
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_RESPONSE_BYTES:
                        raise UpstreamLoginError(f"{where} answered more than {MAX_RESPONSE_BYTES} bytes",
                                                 refused=False)
                status = response.status_code
        except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
            # These messages name the URL and the network error, never the request's headers.
            raise UpstreamLoginError(
                f"{where} could not be reached: {type(exc).__name__}: {printable(exc)}",
                refused=False,
            ) from None
        return parse_token_response(status, body, now_ms=self._now_ms(), endpoint=self.endpoint,
                                    client_id=self.client_id)
