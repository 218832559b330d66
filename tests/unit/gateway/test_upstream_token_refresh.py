"""The upstream token's background refresher: when it refreshes, how it retries, how it stops.

Against kgov's real token endpoint (its control plane on a thread, over SQLite), with one manual
clock shared by the issuer and the token source, so refresh and retry times are exact and nothing
sleeps for them. The only fake is `HangingEndpoint`, an endpoint that accepts and never answers (a
fault kgov's endpoint cannot produce); a closed port stands for an endpoint that is down.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gateway.upstream_token import (
    RefreshPolicy,
    UpstreamLoginError,
    UpstreamToken,
    UpstreamTokenSource,
    refresh_due_ms,
    retry_delay_ms,
)
from tests.support.hanging import HangingEndpoint

CLIENT_ID = "gw-refresh"
SECRET = "gw-refresh-secret-0c4f"
LIFETIME_S = 900  # kgov's default token lifetime
S = 1000  # ms


# -- the pure schedule -------------------------------------------------------------------------------

def token(obtained_ms: int, lifetime_s: int) -> UpstreamToken:
    return UpstreamToken("t", obtained_ms, obtained_ms + lifetime_s * S)


def test_long_lived_token_refreshes_between_80_and_85_percent_as_kafka() -> None:
    t, policy = token(0, 3600), RefreshPolicy()
    assert refresh_due_ms(t, 0, 0.0, policy) == 2880 * S  # window factor 0.8
    assert refresh_due_ms(t, 0, 0.5, policy) == 2970 * S  # plus half the 0.05 jitter
    assert refresh_due_ms(t, 0, 0.999999, policy) == pytest.approx(3060 * S, abs=1)


def test_refresh_keeps_the_buffer_before_expiry() -> None:
    # 80% of 900 s is 720 s, inside the 300 s buffer: refreshed when 300 s are left, whatever the jitter
    for rand in (0.0, 0.5, 0.99):
        assert refresh_due_ms(token(0, 900), 0, rand, RefreshPolicy()) == 600 * S


def test_refresh_waits_at_least_the_minimum_period() -> None:
    # a token obtained 3000 s ago (computed late): 80% would be 120 s ago; the minimum period is 60 s
    assert refresh_due_ms(token(0, 3600), 3000 * S, 0.0, RefreshPolicy()) == 3060 * S


def test_short_token_ignores_both_buffers_and_uses_the_factor_on_what_is_left() -> None:
    # 300 s left < 60 s + 300 s: Kafka ignores the buffers and refreshes at 80-85% of what is left
    assert refresh_due_ms(token(0, 300), 0, 0.0, RefreshPolicy()) == 240 * S
    assert refresh_due_ms(token(0, 300), 100 * S, 1.0, RefreshPolicy()) == 100 * S + 170 * S
    # an already expired token: refresh now
    assert refresh_due_ms(token(0, 300), 400 * S, 0.0, RefreshPolicy()) == 400 * S
    # Kafka's largest factor and jitter (1.0 + 0.25) would land after expiry: capped at it
    late = RefreshPolicy(window_factor=1.0, window_jitter=0.25)
    assert refresh_due_ms(token(0, 300), 0, 0.99, late) == 300 * S


def test_without_buffer_and_jitter_it_is_librdkafkas_80_percent() -> None:
    policy = RefreshPolicy(window_jitter=0.0, buffer_ms=0, min_period_ms=0)
    assert refresh_due_ms(token(0, 900), 0, 0.7, policy) == 720 * S


def test_retry_delay_doubles_from_100_ms_to_10_s_with_20_percent_jitter() -> None:
    policy = RefreshPolicy()
    assert [retry_delay_ms(n, 0.5, policy) for n in range(1, 10)] == [
        100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]
    assert retry_delay_ms(1, 0.0, policy) == 80 and retry_delay_ms(1, 0.999999, policy) == 119
    assert retry_delay_ms(500, 0.0, policy) == 8000 and retry_delay_ms(500, 0.999999, policy) == 11_999


# -- the source against kgov's token endpoint ---------------------------------------------------------

class ManualClock:
    """Wall-clock milliseconds that move only when the test says; `sleep` waits for that."""

    def __init__(self) -> None:
        # on a whole second: kgov's issuer stamps whole seconds, so lifetimes come out exact
        self.ms = int(datetime.now(UTC).timestamp()) * 1000
        self._sleepers: list[tuple[int, asyncio.Future[None]]] = []

    def now_ms(self) -> int:
        return self.ms

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.ms / 1000, UTC)

    async def sleep(self, seconds: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.ms + max(int(seconds * 1000), 1), fut))
        await fut

    async def advance(self, ms: int) -> None:
        self.ms += ms
        due = [f for at, f in self._sleepers if at <= self.ms]
        self._sleepers = [(at, f) for at, f in self._sleepers if at > self.ms]
        for fut in due:
            if not fut.done():
                fut.set_result(None)
        for _ in range(5):
            await asyncio.sleep(0)


class Issuer:
    """kgov's control plane over a fresh database, with a service account for the gateway."""

    def __init__(self, tmp: Path) -> None:
        from authz.database import open_engine
        from authz.model import Principal
        from kgov.settings import Settings
        from sasl.service import CredentialService

        self.clock: ManualClock | None = None
        self.settings = Settings(db=f"sqlite:///{tmp / 'kgov.db'}", data_dir=tmp,
                                 oauth={"token_lifetime_s": LIFETIME_S})
        self._now = lambda: self.clock.now() if self.clock is not None else datetime.now(UTC)
        self.engine = open_engine(self.settings.database_url)
        self.credentials = CredentialService(self.engine, self.settings, clock=self._now)
        self.admin = Principal("User", "admin")

    def add_client(self) -> None:
        self.credentials.set_client(CLIENT_ID, SECRET, actor=self.admin)

    def remove_client(self) -> None:
        self.credentials.delete_client(CLIENT_ID, actor=self.admin)


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Issuer, str]]:
    from tests.integration.gateway.conftest import serve_control_plane

    tmp = tmp_path_factory.mktemp("issuer")
    made = Issuer(tmp)
    with serve_control_plane(made.settings, clock=made._now) as url:
        made.add_client()
        yield made, f"{url}/oauth/token"
    made.engine.dispose()


@pytest.fixture
def clock(issuer: tuple[Issuer, str]) -> Iterator[ManualClock]:
    made = ManualClock()
    issuer[0].clock = made
    issuer[0].add_client()
    yield made
    issuer[0].clock = None


def source_for(endpoint: str, clock: ManualClock, *, rand: float = 0.5, timeout_s: float = 10.0,
               policy: RefreshPolicy | None = None) -> UpstreamTokenSource:
    return UpstreamTokenSource(endpoint, CLIENT_ID, SECRET, now_ms=clock.now_ms, sleep=clock.sleep,
                               rand=lambda: rand, timeout_s=timeout_s, policy=policy)


async def eventually(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Real time for what takes real time (an HTTP round trip); the manual clock stands still. The
    timeout only bounds a failing test: a passing one goes on as soon as the condition holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


def no_other_tasks() -> bool:
    return asyncio.all_tasks() == {asyncio.current_task()}


@pytest.fixture
def hanging() -> Iterator[HangingEndpoint]:
    endpoint = HangingEndpoint()
    yield endpoint
    endpoint.close()


def secrets_in(text: str, *tokens: str) -> list[str]:
    basic = base64.b64encode(f"{CLIENT_ID}:{SECRET}".encode()).decode()
    return [s for s in (SECRET, basic, *tokens) if s and s in text]


def test_refresher_fetches_at_start_then_exactly_at_the_refresh_time(
    issuer: tuple[Issuer, str], clock: ManualClock, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    source = source_for(issuer[1], clock)

    async def scenario() -> list[str]:
        start = clock.ms
        await source.start()
        first = await source.token()
        assert source.fetches == 1
        # kgov's 900 s token is refreshed when 300 s are left (Kafka's buffer), at 600 s
        assert source.next_attempt_ms == start + 600 * S
        await clock.advance(600 * S - 1)
        await asyncio.sleep(0.05)
        assert source.fetches == 1 and await source.token() == first
        await clock.advance(1)
        await eventually(lambda: source.fetches == 2)  # no login asked for it
        second = await source.token()
        assert second != first and source.attempts == 2
        assert source.next_attempt_ms == clock.ms + 600 * S
        await source.close()
        assert no_other_tasks()
        return [first, second]

    values = asyncio.run(scenario())
    assert "fetched an upstream OAuth token for client 'gw-refresh'" in caplog.text
    assert "(expires in 900 s, refreshed in 600 s)" in caplog.text
    assert not secrets_in(caplog.text, *values) and SECRET not in repr(source)


def test_logins_get_the_current_token_at_once_while_a_refresh_hangs(
    issuer: tuple[Issuer, str], clock: ManualClock, hanging: HangingEndpoint,
) -> None:
    source = source_for(issuer[1], clock, timeout_s=30)

    async def scenario() -> None:
        await source.start()
        first = await source.token()
        source.endpoint = hanging.url  # the identity provider now hangs
        await clock.advance(600 * S)
        await eventually(lambda: len(hanging.accepted) == 1)  # the refresh is in flight ...
        # ... and 50 logins at once get the current token without waiting for it
        # (at once: the hanging fetch would hold them for its 30 s)
        got = await asyncio.wait_for(asyncio.gather(*(source.token() for _ in range(50))), timeout=5)
        assert got == [first] * 50
        assert source.attempts == 2 and len(hanging.accepted) == 1
        await source.close()
        assert no_other_tasks()

    asyncio.run(scenario())


def test_logins_without_a_valid_token_share_one_fetch(
    issuer: tuple[Issuer, str], clock: ManualClock, hanging: HangingEndpoint,
) -> None:
    """Single flight, against the real endpoint and then against one that hangs past its deadline."""
    # (The real endpoint gets a generous deadline: on a loaded machine its answer can take over 0.5 s.)
    source = source_for(issuer[1], clock, timeout_s=30)

    async def scenario() -> None:
        got = await asyncio.gather(*(source.token() for _ in range(30)))
        assert len(set(got)) == 1 and source.attempts == 1 and source.fetches == 1
        source.endpoint = hanging.url
        source._timeout_s = 0.5
        await clock.advance(LIFETIME_S * S)  # expired; no refresher runs here
        results = await asyncio.gather(*(source.token() for _ in range(30)), return_exceptions=True)
        assert source.attempts == 2 and len(hanging.accepted) == 1
        assert {str(r) for r in results} == {
            f"the upstream OAuth token endpoint {hanging.url} did not answer within 0.5 s"}
        assert all(isinstance(r, UpstreamLoginError) and not r.refused for r in results)
        # within the retry delay, logins fail at once with that error and send nothing
        with pytest.raises(UpstreamLoginError, match="did not answer"):
            await source.token()
        assert source.attempts == 2
        await source.close()

    asyncio.run(scenario())


def test_start_survives_a_down_endpoint_and_retries_with_capped_backoff(
    issuer: tuple[Issuer, str], clock: ManualClock, caplog: pytest.LogCaptureFixture, refused_port: int,
) -> None:
    caplog.set_level(logging.DEBUG)
    down = f"http://127.0.0.1:{refused_port}/oauth/token"
    source = source_for(down, clock)

    async def scenario() -> None:
        await source.start()  # does not raise
        assert source.attempts == 1 and source.fetches == 0
        delays = []
        for attempt in range(2, 11):
            delay = source.next_attempt_ms - clock.ms
            delays.append(delay)
            await clock.advance(delay - 1)
            await asyncio.sleep(0.02)
            assert source.attempts == attempt - 1, "retried before its time"
            # meanwhile logins fail at once, with the endpoint's error, and send nothing
            with pytest.raises(UpstreamLoginError, match="could not be reached"):
                await source.token()
            await clock.advance(1)
            await eventually(lambda attempt=attempt: source.failures == attempt)  # type: ignore[misc]
            assert source.attempts == attempt
        assert delays == [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]
        source.endpoint = issuer[1]  # the endpoint is back
        await clock.advance(source.next_attempt_ms - clock.ms)
        await eventually(lambda: source.fetches == 1)
        assert await source.token() and source.failures == 0
        assert source._token is not None and source.next_attempt_ms == source._token.expires_ms - 300 * S
        await source.close()
        assert no_other_tasks()

    asyncio.run(scenario())
    assert f"the upstream OAuth token endpoint {down} could not be reached: ConnectError" in caplog.text
    assert "upstream logins fail until a token is fetched; retrying in 0.1 s" in caplog.text
    assert not secrets_in(caplog.text)


def test_a_refused_client_at_start_raises_and_leaves_nothing_running(
    issuer: tuple[Issuer, str], clock: ManualClock,
) -> None:
    source = UpstreamTokenSource(issuer[1], CLIENT_ID, "not-the-secret", now_ms=clock.now_ms, sleep=clock.sleep)

    async def scenario() -> None:
        with pytest.raises(UpstreamLoginError) as info:
            await source.start()
        assert info.value.refused and "invalid_client (HTTP 401)" in str(info.value)
        assert "not-the-secret" not in str(info.value)
        assert no_other_tasks()

    asyncio.run(scenario())


def test_failed_refresh_keeps_the_valid_token_retries_then_fails_closed_at_expiry(
    issuer: tuple[Issuer, str], clock: ManualClock, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    made, endpoint = issuer
    source = source_for(endpoint, clock)

    async def scenario() -> str:
        await source.start()
        first = await source.token()
        made.remove_client()  # the identity provider now refuses the gateway
        await clock.advance(600 * S)
        await eventually(lambda: source.failures == 1)
        assert await source.token() == first  # still valid: still served
        await clock.advance(source.next_attempt_ms - clock.ms)
        await eventually(lambda: source.failures == 2)  # retried: refused again
        assert source.attempts == 3
        assert source.next_attempt_ms - clock.ms == 200
        assert source._token is not None
        await clock.advance(source._token.expires_ms - clock.ms)  # expired now
        with pytest.raises(UpstreamLoginError, match="refused client 'gw-refresh': invalid_client"):
            await asyncio.wait_for(source.token(), timeout=5)
        await source.close()
        assert no_other_tasks()
        return first

    first = asyncio.run(scenario())
    assert ("refused client 'gw-refresh': invalid_client (HTTP 401): client authentication failed; using the "
            "current token until it expires in 300 s; retrying in 0.1 s") in caplog.text
    assert not secrets_in(caplog.text, first)


def test_close_stops_a_hanging_fetch_and_its_waiting_logins(
    issuer: tuple[Issuer, str], clock: ManualClock, hanging: HangingEndpoint,
) -> None:
    source = source_for(hanging.url, clock, timeout_s=30)

    async def scenario() -> None:
        starting = asyncio.ensure_future(source.start())
        await eventually(lambda: len(hanging.accepted) == 1)
        logins = [asyncio.ensure_future(source.token()) for _ in range(5)]
        await asyncio.sleep(0.01)
        await asyncio.wait_for(source.close(), timeout=5)  # not the hanging fetch's 30 s
        results = await asyncio.gather(starting, *logins, return_exceptions=True)
        assert results[0] is None  # start gave up quietly: the gateway is stopping
        assert {str(r) for r in results[1:]} == {"the gateway is shutting down"}
        assert no_other_tasks()
        with pytest.raises(UpstreamLoginError, match="shutting down"):
            await source.token()  # nothing new is fetched after close
        assert len(hanging.accepted) == 1

    asyncio.run(scenario())


def test_close_stops_the_sleeping_refresher(issuer: tuple[Issuer, str], clock: ManualClock) -> None:
    source = source_for(issuer[1], clock)

    async def scenario() -> None:
        await source.start()
        await asyncio.sleep(0.01)
        assert not no_other_tasks()  # the refresher is waiting for its time
        await source.close()
        assert no_other_tasks()
        await source.close()  # idempotent

    asyncio.run(scenario())
    # a closed loop with a pending task would have warned ("Task was destroyed but it is pending")


def test_an_unforeseen_error_is_a_failed_fetch_that_is_retried(
    issuer: tuple[Issuer, str], clock: ManualClock, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fault injection: reading the endpoint's (real) answer raises something unexpected."""
    import gateway.upstream_token as module

    real_parse = module.parse_token_response

    def broken(*args: object, **kwargs: object) -> UpstreamToken:
        raise KeyError(SECRET)  # its text must not reach the message

    monkeypatch.setattr(module, "parse_token_response", broken)
    source = source_for(issuer[1], clock)

    async def scenario() -> None:
        await source.start()  # not a refusal: the gateway starts, the refresher retries
        assert source.failures == 1 and source.fetches == 0
        with pytest.raises(UpstreamLoginError) as info:
            await source.token()
        assert str(info.value) == (f"the upstream OAuth token endpoint {issuer[1]}'s answer could not be used "
                                   "(KeyError)")
        monkeypatch.setattr(module, "parse_token_response", real_parse)
        await clock.advance(source.next_attempt_ms - clock.ms)
        await eventually(lambda: source.fetches == 1)
        await source.close()
        assert no_other_tasks()

    asyncio.run(scenario())
