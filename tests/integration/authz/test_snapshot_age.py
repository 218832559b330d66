"""authz.max_snapshot_age_s: a node that cannot reach the database stops trusting its ACL snapshot.

Node A loses the database while node B, which still reaches it, revokes an ACL. Within the age bound A
keeps deciding with its last snapshot; past it A denies everyone but super users, logs one ERROR, and
reports the stale state; once the database is back A applies the revocation and decides normally.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from pydantic import ValidationError
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from authz.clock import _suspend_counting_clock, elapsed_clock
from authz.config import AuthzConfig
from authz.database import open_engine
from authz.model import (
    Acl,
    AclFilter,
    Action,
    AuthorizationResult,
    AuthorizerNotReadyError,
    Operation,
    PatternType,
    Permission,
    Principal,
    RequestContext,
    ResourceType,
    StaleSnapshot,
)
from authz.service import AuthorizerService

pytestmark = pytest.mark.postgres

ADMIN = Principal("User", "admin")
BOB = RequestContext(Principal("User", "bob"), "10.0.0.1", api_key=1)
ROOT = RequestContext(Principal("User", "root"), "10.0.0.2", api_key=1)
READ_ORDERS = Action(ResourceType.TOPIC, "orders", Operation.READ)
BOB_READS = Acl(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:bob", "*", Operation.READ, Permission.ALLOW)
EXACT_BOB_READS = AclFilter(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:bob", "*", Operation.READ,
                            Permission.ALLOW)


@dataclass
class Outage:
    """Cuts node A off the database (and only A): B keeps reaching it."""

    url_a: str
    url_b: str
    kind: str
    admin_dsn: str = ""
    role: str = ""
    db_dir: Path | None = None

    def cut(self, engine_a: Engine) -> None:
        if self.kind == "sqlite":
            assert self.db_dir is not None
            # A's pooled connections hold the open file and would keep reading it wherever it moves: they
            # go, as after a restart of the pool. The database moves away and a plain file takes the
            # directory's place, so opening it fails even as root (permissions would not stop root).
            engine_a.dispose()
            self.db_dir.rename(self.db_dir.with_name("moved"))
            self.db_dir.write_text("not a directory")
        else:
            with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
                conn.execute(f'ALTER ROLE "{self.role}" NOLOGIN')
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (self.role,))

    def restore(self) -> None:
        if self.kind == "sqlite":
            assert self.db_dir is not None
            self.db_dir.unlink()
            self.db_dir.with_name("moved").rename(self.db_dir)
        else:
            with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
                conn.execute(f'ALTER ROLE "{self.role}" LOGIN')

    @property
    def url_b_during(self) -> str:
        """Where B finds the database while A cannot (SQLite: the moved file)."""
        if self.kind == "sqlite":
            assert self.db_dir is not None
            return f"sqlite:///{self.db_dir.with_name('moved') / 'kgov.db'}"
        return self.url_b


@pytest.fixture
def outage(db_url: str, tmp_path: Path) -> Iterator[Outage]:
    if db_url.startswith("sqlite"):
        db_dir = tmp_path / "db"
        db_dir.mkdir()
        url = f"sqlite:///{db_dir / 'kgov.db'}"
        yield Outage(url, url, "sqlite", db_dir=db_dir)
        return
    # PostgreSQL: A logs in as a role of its own, which the outage stops from logging in.
    admin_dsn = db_url.replace("postgresql+psycopg://", "postgresql://")
    role = "node_a_" + uuid.uuid4().hex[:8]
    engine = open_engine(db_url)
    AuthorizerService(engine, AuthzConfig()).store.migrate()
    engine.dispose()
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'GRANT ALL ON ALL TABLES IN SCHEMA public TO "{role}"')
        conn.execute(f'GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO "{role}"')
    server, db = db_url.rsplit("@", 1)[1].rsplit("/", 1)
    yield Outage(f"postgresql+psycopg://{role}@{server}/{db}", db_url, "postgres", admin_dsn=admin_dsn, role=role)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
        conn.execute(f'DROP OWNED BY "{role}"')
        conn.execute(f'DROP ROLE "{role}"')


def node(url: str, clock: list[float] | None = None, **config: float) -> tuple[AuthorizerService, Engine]:
    engine = open_engine(url)
    settings: dict[str, float] = {"refresh_interval_s": 0.05, **config}
    service = AuthorizerService(
        engine, AuthzConfig(super_users="User:root", **settings),
        monotonic=(lambda: clock[0]) if clock is not None else elapsed_clock,
    )
    return service, engine


def stale_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == logging.ERROR and "max_snapshot_age_s" in r.getMessage()]


def test_past_the_age_bound_only_super_users_are_allowed_until_the_database_is_back(
    outage: Outage, caplog: pytest.LogCaptureFixture
) -> None:
    clock = [1000.0]
    b, engine_b = node(outage.url_b)
    b.start(background=False)
    a, engine_a = node(outage.url_a, clock, max_snapshot_age_s=10)
    a.start(background=False)
    try:
        b.create_acls([BOB_READS], actor=ADMIN)
        a.refresh()
        assert a.authorize(BOB, [READ_ORDERS])[0].allowed
        state = a.snapshot_state()
        assert state.loaded and not state.stale and state.age_s == 0 and state.max_age_s == 10

        outage.cut(engine_a)
        engine_b.dispose()
        b_during, engine_b_during = node(outage.url_b_during)
        b_during.start(background=False)
        assert b_during.delete_acls([EXACT_BOB_READS], actor=ADMIN) == [[BOB_READS]]
        clock[0] += 9.0
        with pytest.raises(OperationalError):
            a.refresh()
        # Within the bound: the last snapshot, revocation not seen (the documented window).
        assert a.authorize(BOB, [READ_ORDERS])[0].allowed and not a.snapshot_state().stale
        assert stale_errors(caplog) == []

        clock[0] += 1.0  # 10 s since the database last confirmed the snapshot
        with pytest.raises(OperationalError):
            a.refresh()
        for _ in range(3):
            denied = a.authorize(BOB, [READ_ORDERS, Action(ResourceType.GROUP, "g", Operation.READ)])
            assert [d.result for d in denied] == [AuthorizationResult.DENIED] * 2
            assert all(isinstance(d.rule, StaleSnapshot) and str(d.rule) == "StaleAclSnapshot" for d in denied)
        assert not a.authorize_by_resource_type(BOB, Operation.WRITE, ResourceType.TOPIC).allowed
        assert not a.authorize_http(BOB, READ_ORDERS, "ListTopics").allowed
        root = a.authorize(ROOT, [READ_ORDERS])[0]
        assert root.allowed and str(root.rule) == "SuperUser"
        assert a.authorize_by_resource_type(ROOT, Operation.WRITE, ResourceType.TOPIC).allowed
        errors = stale_errors(caplog)
        assert len(errors) == 1 and a.stale_periods == 1  # once per transition, not per decision
        assert "denying every request except super users'" in errors[0].getMessage()
        state = a.snapshot_state()
        assert state.stale and state.age_s == 10.0

        b_during.close()
        engine_b_during.dispose()
        outage.restore()
        clock[0] += 1.0
        assert a.refresh()  # the revocation made meanwhile arrives
        state = a.snapshot_state()
        assert not state.stale and state.age_s == 0
        bob = a.authorize(BOB, [READ_ORDERS])[0]
        assert not bob.allowed and str(bob.rule) == "DefaultDeny"
        assert any("refreshed from the database again" in r.getMessage() for r in caplog.records)
        b, engine_b = node(outage.url_b)
        b.start(background=False)
        b.create_acls([BOB_READS], actor=ADMIN)
        a.refresh()
        assert a.authorize(BOB, [READ_ORDERS])[0].allowed
        # A second outage is a second transition: logged again.
        clock[0] += 30.0
        assert not a.authorize(BOB, [READ_ORDERS])[0].allowed
        assert len(stale_errors(caplog)) == 2 and a.stale_periods == 2
    finally:
        a.close()
        b.close()
        engine_a.dispose()
        engine_b.dispose()


def test_the_poller_reports_the_stale_snapshot_without_waiting_for_a_request(
    outage: Outage, caplog: pytest.LogCaptureFixture
) -> None:
    # Thirty polls of 0.05 s: a loaded machine's pause does not make a connected node stale.
    a, engine_a = node(outage.url_a, max_snapshot_age_s=1.5)
    a.start()  # the background poller, real time
    try:
        assert not a.snapshot_state().stale
        caplog.set_level(logging.WARNING, logger="kgov.authz")
        outage.cut(engine_a)
        deadline = time.monotonic() + 10
        while not stale_errors(caplog) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(stale_errors(caplog)) == 1 and a.snapshot_state().stale
        outage.restore()
        deadline = time.monotonic() + 10
        while a.snapshot_state().stale and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not a.snapshot_state().stale
        assert a.authorize(BOB, [READ_ORDERS])[0].rule != StaleSnapshot()
    finally:
        a.close()
        engine_a.dispose()


def test_unlimited_by_default_and_the_bound_must_exceed_the_poll_interval(outage: Outage) -> None:
    clock = [0.0]
    a, engine_a = node(outage.url_a, clock)
    a.start(background=False)
    try:
        outage.cut(engine_a)
        clock[0] += 1e9
        assert str(a.authorize(BOB, [READ_ORDERS])[0].rule) == "DefaultDeny"  # the snapshot, not StaleAclSnapshot
        assert not a.snapshot_state().stale and a.snapshot_state().max_age_s == 0
        outage.restore()
    finally:
        a.close()
        engine_a.dispose()
    with pytest.raises(ValidationError, match=r"longer than authz\.refresh_interval_s"):
        AuthzConfig(refresh_interval_s=0.5, max_snapshot_age_s=0.5)
    with pytest.raises(ValidationError):
        AuthzConfig(max_snapshot_age_s=-1)
    assert AuthzConfig(max_snapshot_age_s=0).max_snapshot_age_s == 0


def test_before_the_first_load_kafkas_not_ready_rule_still_applies(outage: Outage) -> None:
    a, engine_a = node(outage.url_a, max_snapshot_age_s=5)
    try:
        with pytest.raises(AuthorizerNotReadyError):
            a.authorize(BOB, [READ_ORDERS])
        assert a.authorize(ROOT, [READ_ORDERS])[0].allowed
        assert not a.snapshot_state().loaded and not a.snapshot_state().stale
    finally:
        engine_a.dispose()


# ---------------------------------------------------------------------- suspend and resume


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="CLOCK_BOOTTIME is Linux's")
def test_ages_are_measured_on_a_clock_that_counts_suspend() -> None:
    # CLOCK_MONOTONIC (time.monotonic) stops while the machine is suspended; CLOCK_BOOTTIME does not.
    assert isinstance(elapsed_clock, functools.partial)
    assert elapsed_clock.func is time.clock_gettime and elapsed_clock.args == (time.CLOCK_BOOTTIME,)
    assert inspect.signature(AuthorizerService).parameters["monotonic"].default is elapsed_clock
    before = time.clock_gettime(time.CLOCK_BOOTTIME)
    assert before <= elapsed_clock() <= time.clock_gettime(time.CLOCK_BOOTTIME)


def test_without_a_boot_clock_ages_fall_back_to_monotonic(monkeypatch: pytest.MonkeyPatch) -> None:
    if hasattr(time, "CLOCK_BOOTTIME"):
        def refused(clock_id: int) -> float:
            raise OSError(22, "Invalid argument")

        monkeypatch.setattr(time, "clock_gettime", refused)  # a kernel or sandbox that refuses the clock
        assert _suspend_counting_clock() is time.monotonic
        monkeypatch.undo()
        monkeypatch.delattr(time, "CLOCK_BOOTTIME")  # a platform without it
    assert _suspend_counting_clock() is time.monotonic


def test_after_a_resume_the_snapshot_is_stale_and_the_first_request_refreshes_it_at_once(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = [1000.0]
    # The longest poll interval allowed: a poller left to sleep it out would refresh about 1 s late.
    a, engine = node(db_url, clock, refresh_interval_s=1.0, max_snapshot_age_s=5)
    started: list[float] = []  # real time at which each refresh began (a loaded machine may run it slowly)
    refresh = a.refresh

    def timed() -> bool:
        started.append(time.monotonic())
        return refresh()

    a.refresh = timed  # type: ignore[method-assign]
    a.start()  # the background poller; its waits are real time, its schedule is the injected clock
    try:
        a.create_acls([BOB_READS], actor=ADMIN)
        assert a.authorize(BOB, [READ_ORDERS])[0].allowed
        clock[0] += 3600.0  # the machine was suspended for an hour: the injected boot clock counted it
        resumed = time.monotonic()
        first = a.authorize(BOB, [READ_ORDERS])[0]
        # Nothing confirmed the snapshot for an hour: denied, as any snapshot past the bound.
        assert not first.allowed and isinstance(first.rule, StaleSnapshot)
        while a.snapshot_state().stale and time.monotonic() - resumed < 30:
            time.sleep(0.01)
        after = [t - resumed for t in started if t >= resumed]
        # Woken by the request, not at the end of its real-time wait (up to the 1 s interval).
        assert after and after[0] < 0.75, "the poller slept out its interval instead of refreshing"
        state = a.snapshot_state()
        assert not state.stale and state.age_s == 0  # confirmed at the resumed clock's time
        assert a.authorize(BOB, [READ_ORDERS])[0].allowed
        assert len(stale_errors(caplog)) == 1
        a.close()  # the poller logs the recovery right after it swapped the state in: wait for it
        assert any("refreshed from the database again" in r.getMessage() for r in caplog.records)
    finally:
        a.close()
        engine.dispose()


class CountingEvent(threading.Event):
    def __init__(self) -> None:
        super().__init__()
        self.sets = 0

    def set(self) -> None:
        self.sets += 1
        super().set()


def test_requests_on_a_stale_snapshot_do_not_turn_the_poller_into_a_retry_loop(outage: Outage) -> None:
    clock = [1000.0]
    a, engine_a = node(outage.url_a, clock, refresh_interval_s=1.0, max_snapshot_age_s=5)
    attempts: list[float] = []
    refresh = a.refresh

    def counted() -> bool:
        attempts.append(clock[0])
        return refresh()

    a.refresh = counted  # type: ignore[method-assign]
    wakes = CountingEvent()
    a._wake = wakes  # every wake costs the poller a turn on the GIL: requests wake it only when a poll is due
    a.start()
    try:
        outage.cut(engine_a)
        clock[0] += 3600.0  # resumed, and the database is not there
        assert not a.authorize(BOB, [READ_ORDERS])[0].allowed  # wakes the poller: one attempt, which fails
        deadline = time.monotonic() + 5
        while not attempts and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # let that attempt finish and schedule the next one
        for _ in range(500):
            assert not a.authorize(BOB, [READ_ORDERS])[0].allowed
        time.sleep(0.3)
        # The injected clock stands still, so no further poll is due: the requests woke no more.
        assert attempts == [4600.0] and wakes.sets == 1
        clock[0] += 1.0  # the next poll is due: it happens, once
        deadline = time.monotonic() + 5
        while len(attempts) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        assert attempts == [4600.0, 4601.0]
        outage.restore()
    finally:
        a.close()
        engine_a.dispose()
