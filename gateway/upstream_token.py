"""The gateway's own OAUTHBEARER token for the upstream cluster: OIDC client credentials, kept fresh
in the background.

Behaves like librdkafka's `sasl.oauthbearer.method=oidc`: POST `grant_type=client_credentials`
(plus `scope`) as a form to the token endpoint, the client id and secret in HTTP Basic (RFC 6749
§2.3.1; raw unless `urlencode`, as Kafka's `sasl.oauthbearer.header.urlencode`), and take
`access_token` from the JSON answer. The token's end of life is the JWT's `exp` claim (what the
broker enforces; librdkafka reads it too), else `expires_in`. Nothing else is read from the token:
the broker validates it.

When to refresh and how to retry are pure functions (`refresh_due_ms`, `retry_delay_ms`) of a
`RefreshPolicy` whose defaults are Kafka's `sasl.login.refresh.*` and `sasl.login.retry.backoff.*`.
`UpstreamTokenSource` adds HTTP, the current token, a single-flight fetch and the background
refresher that the gateway's runtime starts and stops. Error messages name the endpoint and the
client id, never the secret or a token.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import math
import random
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard
from urllib.parse import quote_plus, urlencode

log = logging.getLogger("kgov.gateway.upstream")

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


@dataclass(frozen=True, slots=True)
class RefreshPolicy:
    """When the token is refreshed and how failed fetches are retried.

    The defaults are Kafka's client defaults (`SaslConfigs`): `sasl.login.refresh.window.factor`
    0.8 (legal 0.5-1.0), `sasl.login.refresh.window.jitter` 0.05 (0-0.25),
    `sasl.login.refresh.min.period.seconds` 60 (0-900), `sasl.login.refresh.buffer.seconds` 300
    (0-3600), `sasl.login.retry.backoff.ms` 100 and `sasl.login.retry.backoff.max.ms` 10000.
    `GatewayConfig` validates the same ranges."""

    window_factor: float = 0.8
    window_jitter: float = 0.05
    min_period_ms: int = 60_000
    buffer_ms: int = 300_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 10_000


# Kafka's ExponentialBackoff (used by its clients for retry.backoff.ms/retry.backoff.max.ms) spreads
# each wait uniformly over ±20%, so that many gateways started together do not retry in step.
RETRY_JITTER = 0.2


def refresh_due_ms(token: UpstreamToken, now_ms: int, rand: float, policy: RefreshPolicy) -> int:
    """When to fetch the next token, for `rand` uniform in [0, 1): Kafka's
    ExpiringCredentialRefreshingLogin.refreshMs with the token's start = when it was obtained.

    At `window_factor` plus up to `window_jitter` of the lifetime (0.8-0.85 by default), but no
    later than `buffer_ms` before expiry and no sooner than `min_period_ms` from now. When what is
    left of the token is shorter than the two buffers together, both are ignored and the factor
    applies to what is left (never past expiry). librdkafka refreshes at 80% of what is left,
    without jitter or buffers: `buffer_ms = 0, window_jitter = 0` give its schedule."""
    pct = policy.window_factor + policy.window_jitter * rand
    if now_ms + policy.min_period_ms + policy.buffer_ms > token.expires_ms:
        # Kafka lets factor + jitter reach 1.25, which would refresh after expiry: not past it here.
        return now_ms + int(max(token.expires_ms - now_ms, 0) * min(pct, 1.0))
    proposed = token.obtained_ms + int((token.expires_ms - token.obtained_ms) * pct)
    return max(min(proposed, token.expires_ms - policy.buffer_ms), now_ms + policy.min_period_ms)


def retry_delay_ms(failures: int, rand: float, policy: RefreshPolicy) -> int:
    """The wait after `failures` consecutive failed fetches (1 or more), for `rand` uniform in
    [0, 1): `retry_backoff_ms` doubling per failure up to `retry_backoff_max_ms`, times 0.8-1.2.

    Kafka retries a failed token request from `sasl.login.retry.backoff.ms` doubling up to
    `sasl.login.retry.backoff.max.ms` (its oauthbearer `Retry`), and both Kafka's refreshing login
    and librdkafka retry a failed refresh every 10 s: with the defaults the gateway retries
    quickly at first and settles at about that 10 s."""
    exponent = min(max(failures, 1) - 1, 62)
    base = min(policy.retry_backoff_ms * (1 << exponent), policy.retry_backoff_max_ms)
    return max(1, int(base * (1 + RETRY_JITTER * (2 * rand - 1))))


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
    if not _is_finite_number(exp):
        return None
    return int(exp * 1000)


def _is_finite_number(value: object) -> TypeGuard[int | float]:
    """A JSON number usable as a time: Python's json reads `Infinity` and `NaN` too."""
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value) \
        and abs(value) < 1e15


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
        if not _is_finite_number(expires_in):
            raise UpstreamLoginError(f"{where} answered a token whose lifetime is unknown (neither a JWT `exp` "
                                     "claim nor `expires_in`)", refused=False)
        expires_ms = now_ms + int(expires_in * 1000)
    if expires_ms <= now_ms:
        raise UpstreamLoginError(f"{where} answered an expired token (check the clocks)", refused=False)
    return UpstreamToken(token, now_ms, expires_ms)


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class UpstreamTokenSource:
    """The gateway's current upstream token, kept fresh by a background refresher.

    `start()` fetches the first token (a refused client credential raises: it will not pass by
    itself; an unreachable or failing endpoint is logged and retried in the background) and starts
    the refresher; `close()` stops it and any fetch in flight. The refresher fetches a new token at
    `refresh_due_ms` and retries failures after `retry_delay_ms`; until a new token arrives, the
    current one is served for as long as it is valid (as Kafka's refreshing login and librdkafka
    keep the old credential while a refresh fails).

    `token()` is what a login calls: it answers the current token at once while one is valid, so
    logins never wait for the endpoint then. Without a valid token it joins the fetch in flight (one
    at a time, shared by every caller), fails at once with the last error while a retry is pending,
    or else starts a fetch. The refresher reads `now_ms` at least every `tick_s` (librdkafka checks
    its refresh time on a 1 s timer too), so a wall clock that jumps is noticed within a tick."""

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
        policy: RefreshPolicy | None = None,
        rand: Callable[[], float] = random.random,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        tick_s: float = 1.0,
    ) -> None:
        self.endpoint = endpoint
        self.client_id = client_id
        self._request = token_request(client_id, client_secret, scope, urlencode_header=urlencode_header)
        self._secret = client_secret
        self._ssl = ssl_context or ssl.create_default_context()
        self._now_ms = now_ms
        self._timeout_s = timeout_s
        self.policy = policy or RefreshPolicy()
        self._rand = rand
        self._sleep = sleep
        self._tick_s = tick_s
        self._token: UpstreamToken | None = None
        self._failure: UpstreamLoginError | None = None
        self._failures = 0  # consecutive failed fetches
        self.next_attempt_ms = 0  # when the refresher fetches next (refresh or retry)
        self._in_flight: asyncio.Task[UpstreamToken] | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._closed = False
        self.fetches = 0  # successful fetches (for tests and metrics)
        self.attempts = 0

    def __repr__(self) -> str:
        return f"UpstreamTokenSource(endpoint={self.endpoint!r}, client_id={self.client_id!r})"

    @property
    def failures(self) -> int:
        """Consecutive failed fetches, counted once each has ended (0 after a success)."""
        return self._failures

    def _valid(self, now_ms: int) -> UpstreamToken | None:
        current = self._token
        return current if current is not None and now_ms < current.expires_ms else None

    async def token(self) -> str:
        """The token for a login now; raises `UpstreamLoginError` when there is no valid one."""
        current = self._valid(self._now_ms())
        if current is not None:
            return current.value
        if self._in_flight is None and self._failure is not None and self._now_ms() < self.next_attempt_ms:
            raise UpstreamLoginError(str(self._failure), refused=self._failure.refused)
        return (await self._shared_fetch()).value

    async def start(self) -> None:
        """Fetches the first token and starts the refresher. Raises `UpstreamLoginError` only when
        the endpoint refused the client (nothing is left running then)."""
        if self._refresher is not None:
            return
        self._closed = False
        try:
            await self._shared_fetch()
        except UpstreamLoginError as exc:
            if exc.refused:
                raise
        if self._closed:  # closed while the first fetch ran
            return
        self._refresher = asyncio.get_running_loop().create_task(
            self._refresh_loop(), name=f"upstream-token-refresher {self.client_id}")

    async def close(self) -> None:
        """Stops the refresher and any fetch in flight; waits until both have ended."""
        self._closed = True
        tasks = [t for t in (self._refresher, self._in_flight) if t is not None]
        self._refresher = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, UpstreamLoginError):
                await task

    async def _refresh_loop(self) -> None:
        while True:
            now = self._now_ms()
            if now >= self.next_attempt_ms:
                with contextlib.suppress(UpstreamLoginError):  # logged by _attempt; retried at next_attempt_ms
                    await self._shared_fetch()
                continue
            await self._sleep(min((self.next_attempt_ms - now) / 1000, self._tick_s))

    async def _shared_fetch(self) -> UpstreamToken:
        """Joins the fetch in flight, or starts one: concurrent callers share a single request."""
        if self._closed:
            raise UpstreamLoginError("the gateway is shutting down", refused=False)
        task = self._in_flight
        if task is None:
            task = asyncio.get_running_loop().create_task(self._attempt())
            self._in_flight = task
            task.add_done_callback(self._fetch_done)
        try:
            # shielded: a caller that gives up (its client left) does not cancel the others' fetch
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and (current is None or not current.cancelling()):
                raise UpstreamLoginError("the gateway is shutting down", refused=False) from None
            raise

    def _fetch_done(self, task: asyncio.Task[UpstreamToken]) -> None:
        if self._in_flight is task:
            self._in_flight = None
        if not task.cancelled():
            task.exception()  # retrieved here too: every caller may have gone

    async def _attempt(self) -> UpstreamToken:
        """One fetch; records its outcome and when the refresher fetches next."""
        try:
            fresh = await self._fetch()
        except UpstreamLoginError as exc:
            self._failure = exc
            self._failures += 1
            now = self._now_ms()
            delay = retry_delay_ms(self._failures, self._rand(), self.policy)
            self.next_attempt_ms = now + delay
            current = self._valid(now)
            if current is not None:
                log.warning("%s; using the current token until it expires in %d s; retrying in %.1f s",
                            exc, (current.expires_ms - now) // 1000, delay / 1000)
            else:
                log.warning("%s; upstream logins fail until a token is fetched; retrying in %.1f s",
                            exc, delay / 1000)
            raise
        self._failure = None
        self._failures = 0
        self._token = fresh
        self.fetches += 1
        self.next_attempt_ms = refresh_due_ms(fresh, fresh.obtained_ms, self._rand(), self.policy)
        log.info("fetched an upstream OAuth token for client %r from %s (expires in %d s, refreshed in %d s)",
                 self.client_id, self.endpoint, (fresh.expires_ms - fresh.obtained_ms) // 1000,
                 (self.next_attempt_ms - fresh.obtained_ms) // 1000)
        return fresh

    async def _fetch(self) -> UpstreamToken:
        self.attempts += 1
        try:
            # One deadline for the whole exchange: httpx's timeout applies to each read, so an
            # endpoint that trickles its answer would otherwise hold the fetch much longer.
            return await asyncio.wait_for(self._fetch_unscrubbed(), self._timeout_s)
        except TimeoutError:
            raise UpstreamLoginError(
                f"the upstream OAuth token endpoint {self.endpoint} did not answer within {self._timeout_s:g} s",
                refused=False,
            ) from None
        except UpstreamLoginError as exc:
            # The endpoint's error_description is its own text: make sure it cannot echo our secret.
            message = str(exc)
            if self._secret and self._secret in message:
                raise UpstreamLoginError(message.replace(self._secret, "***"), refused=exc.refused) from None
            raise
        except Exception as exc:
            # A bug or an answer nobody foresaw must not stop the refresher: it is a failed fetch
            # like any other, retried later. Only the type is said: the text could quote the answer.
            raise UpstreamLoginError(
                f"the upstream OAuth token endpoint {self.endpoint}'s answer could not be used "
                f"({type(exc).__name__})",
                refused=False,
            ) from None

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
