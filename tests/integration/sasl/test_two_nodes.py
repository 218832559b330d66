"""Two credential services over one database (SQLite and PostgreSQL): what one node creates, the other
finds at the next login, without a query per login, and what a node does when it loses the database.

Each node's clock is injected (`monotonic=`): "a moment later" is `LOOKUP_REFRESH_S`, well inside
`refresh_interval_s`, so the second node only finds a new name because the login looked again.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import Engine

from authz.database import open_engine
from authz.model import Principal
from sasl.limiter import user_claim
from sasl.mechanism import Challenge, Failure, Success
from sasl.oauthbearer import TokenValidationError, build_client_initial_response
from sasl.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramClient
from sasl.service import LOOKUP_REFRESH_S, CredentialService, CredentialStoreUnavailable
from tests.integration.authz.test_snapshot_age import Outage
from tests.integration.authz.test_snapshot_age import outage as outage  # the fixture, re-exported
from tests.integration.sasl.test_service import SECRET_KEY, scram_login, settings

pytestmark = pytest.mark.postgres

ALICE = Principal("User", "alice")
REFRESH_S = 0.5  # the default: the look-again, not the poll, must find what the other node made
MOMENT = LOOKUP_REFRESH_S + 0.001  # just past the look-again interval (clear of float rounding)


class Mono:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


def two_nodes(url_a: str, url_b: str, mono: Mono, **sasl: Any) -> tuple[CredentialService, CredentialService,
                                                                          list[Engine]]:
    engines = [open_engine(url_a), open_engine(url_b)]
    conf = settings(refresh_interval_s=REFRESH_S, **sasl)
    a, b = (CredentialService(e, conf, monotonic=mono) for e in engines)
    return a, b, engines


@pytest.fixture
def nodes(db_url: str) -> Iterator[tuple[CredentialService, CredentialService, Mono]]:
    mono = Mono()
    a, b, engines = two_nodes(db_url, db_url, mono)
    yield a, b, mono
    for e in engines:
        e.dispose()


class VersionCalls:
    """Counts (and can hold) the node's change-version queries."""

    def __init__(self, svc: CredentialService) -> None:
        self.count = 0
        self.gate: threading.Event | None = None
        real = svc.store.version

        def version() -> int:
            self.count += 1
            if self.gate is not None:
                self.gate.wait(5)
            return real()

        svc.store.version = version  # type: ignore[method-assign]


def test_a_scram_user_made_on_one_node_logs_in_through_the_other_a_moment_later(nodes) -> None:
    a, b, mono = nodes
    assert isinstance(scram_login(b, SCRAM_SHA_512, "carol", "carol-pw"), Failure)  # B has checked just now
    a.set_scram_credential("carol", "SCRAM-SHA-512", "carol-pw", actor=ALICE)
    assert isinstance(scram_login(b, SCRAM_SHA_512, "carol", "carol-pw"), Failure)  # same instant: not yet
    mono.advance(MOMENT)
    assert isinstance(scram_login(b, SCRAM_SHA_512, "carol", "carol-pw"), Success)
    assert b.verify_password("carol", "carol-pw") is not None
    # Removed on A: refused by B a moment later too (a hit looks again as a miss does).
    a.delete_scram_credential("carol", None, actor=ALICE)
    mono.advance(MOMENT)
    assert isinstance(scram_login(b, SCRAM_SHA_512, "carol", "carol-pw"), Failure)


def test_an_oauth_client_made_or_replaced_on_one_node_works_through_the_other(nodes) -> None:
    a, b, mono = nodes
    assert b.authenticate_client("etl", "first-secret-0123456789") is None  # B has checked just now
    a.set_client("etl", "first-secret-0123456789", ["kafka"], actor=ALICE)
    mono.advance(MOMENT)
    account = b.authenticate_client("etl", "first-secret-0123456789")
    assert account is not None and account.scopes == ("kafka",)
    from_b = b.issue_token(account, None).access_token
    assert b.validator.validate(from_b).principal_name == "etl"
    from_a = a.issue_token(a.authenticate_client("etl", "first-secret-0123456789"), None).access_token
    assert b.validator.validate(from_a).principal_name == "etl"

    a.set_client("etl", "second-secret-0123456789", ["kafka"], actor=ALICE)
    mono.advance(MOMENT)
    assert b.authenticate_client("etl", "first-secret-0123456789") is None
    account = b.authenticate_client("etl", "second-secret-0123456789")
    assert account is not None
    new_from_b = b.issue_token(account, None).access_token
    assert b.validator.validate(new_from_b).principal_name == "etl"
    assert a.validator.validate(new_from_b).principal_name == "etl"
    with pytest.raises(TokenValidationError, match="replaced"):
        b.validator.validate(from_b)  # issued for the first secret


def test_a_delegation_token_made_on_one_node_logs_in_through_the_other(nodes) -> None:
    a, b, mono = nodes
    b.scram_identity(SCRAM_SHA_256, "warm-up", False)
    created = a.create_token(ALICE)
    mono.advance(MOMENT)
    password = base64.b64encode(created.hmac).decode()
    assert isinstance(scram_login(b, SCRAM_SHA_256, created.info.token_id, password, token=True), Success)


def test_logins_ask_the_store_at_most_once_per_interval_whatever_the_name(nodes) -> None:
    a, b, mono = nodes
    a.set_scram_credential("dora", "SCRAM-SHA-256", "dora-pw", actor=ALICE)
    b.scram_identity(SCRAM_SHA_256, "dora", False)  # B catches up with A
    mono.advance(MOMENT)
    calls = VersionCalls(b)
    for name in ["dora", "ghost-1", "ghost-2", "dora", "ghost-3"] * 20:
        b.scram_identity(SCRAM_SHA_256, name, False)
        with pytest.raises(TokenValidationError):
            b.validate_delegation_bearer(f"kgov-dt1~{name}~{base64.b64encode(bytes(64)).decode()}")
    for name in ["etl", "ghost-4"]:
        b.authenticate_client(name, "x" * 20)
    assert calls.count == 1  # a flood of unknown names is one query, the same as known ones
    mono.advance(MOMENT)
    b.scram_identity(SCRAM_SHA_256, "dora", False)  # a hit
    assert calls.count == 2
    mono.advance(MOMENT)
    b.scram_identity(SCRAM_SHA_256, "ghost-4", False)  # a miss: the same
    assert calls.count == 3


def test_concurrent_lookups_share_one_check(nodes) -> None:
    _a, b, mono = nodes
    mono.advance(MOMENT)
    calls = VersionCalls(b)
    calls.gate = threading.Event()
    threads = [threading.Thread(target=b.scram_identity, args=(SCRAM_SHA_256, f"ghost-{i}", False))
               for i in range(6)]
    for t in threads:
        t.start()
    while calls.count == 0:
        threading.Event().wait(0.001)
    calls.gate.set()
    for t in threads:
        t.join(5)
    assert calls.count == 1


def test_unknown_names_show_the_iteration_counts_in_use(nodes) -> None:
    """A user made with other iterations than the rest is not singled out: unknown names show that count
    too, in proportion, the same on every node and on every attempt."""
    a, b, mono = nodes
    for i in range(3):
        a.set_scram_credential(f"user-{i}", "SCRAM-SHA-512", "pw", iterations=4096, actor=ALICE)
    a.set_scram_credential("odd", "SCRAM-SHA-512", "pw", iterations=16384, actor=ALICE)
    mono.advance(MOMENT)

    def iterations(svc: CredentialService, name: str) -> int:
        server = svc.server_mechanism("SCRAM-SHA-512", "10.0.0.1")
        first = server.step(ScramClient(SCRAM_SHA_512, name, "guess").first_message())
        assert isinstance(first, Challenge)
        return int(dict(p.split("=", 1) for p in first.data.decode().split(","))["i"])

    assert iterations(b, "odd") == 16384
    shown = [iterations(b, f"nobody-{i}") for i in range(200)]
    assert 25 <= shown.count(16384) <= 80 and shown.count(4096) == 200 - shown.count(16384)
    assert shown == [iterations(a, f"nobody-{i}") for i in range(200)]  # every node, every attempt


@pytest.fixture
def cut_off(outage: Outage) -> Iterator[tuple[CredentialService, CredentialService, Mono, Callable[[], None]]]:
    """Node A loses the database; B keeps it."""
    mono = Mono()
    b_engine = open_engine(outage.url_b)
    b = CredentialService(b_engine, settings(refresh_interval_s=REFRESH_S), monotonic=mono)
    if outage.kind == "postgres":  # the sasl tables exist now: node A's role may use them
        with psycopg.connect(outage.admin_dsn, autocommit=True) as conn:
            conn.execute(f'GRANT ALL ON ALL TABLES IN SCHEMA public TO "{outage.role}"')
    a_engine = open_engine(outage.url_a)
    a = CredentialService(a_engine, settings(refresh_interval_s=REFRESH_S, max_snapshot_age_s=10), monotonic=mono)
    engines = [a_engine, b_engine]

    def cut() -> None:
        b_engine.dispose()
        outage.cut(a_engine)
        engines.append(open_engine(outage.url_b_during))
        b.store.engine = engines[-1]

    yield a, b, mono, cut
    for e in engines:
        e.dispose()


def test_a_node_without_the_database_serves_its_snapshot_for_max_snapshot_age_s(cut_off, outage, caplog) -> None:
    a, b, mono, cut = cut_off
    b.set_scram_credential("erin", "SCRAM-SHA-512", "erin-pw", actor=ALICE)
    b.set_client("svc", "svc-secret-0123456789", [], actor=ALICE)
    mono.advance(MOMENT)
    assert isinstance(scram_login(a, SCRAM_SHA_512, "erin", "erin-pw"), Success)
    cut()
    b.delete_scram_credential("erin", None, actor=ALICE)  # A cannot learn of it
    caplog.set_level(logging.WARNING, logger="kgov.sasl")
    for _ in range(5):  # a blip: logins go on with what A holds, one WARNING, one try per refresh interval
        mono.advance(REFRESH_S + 0.001)
        assert isinstance(scram_login(a, SCRAM_SHA_512, "erin", "erin-pw"), Success)
        assert a.authenticate_client("svc", "svc-secret-0123456789") is not None
    warnings = [r for r in caplog.records if "credential store unreachable" in r.getMessage()]
    assert len(warnings) == 1 and "max_snapshot_age_s = 10" in warnings[0].getMessage()
    state = a.snapshot_state()
    assert state.unreachable and not state.stale and state.outages == 1 and a.snapshot_problem() is None

    mono.advance(10)  # past the bound: logins fail closed, with the reason in the audit trail
    failed = scram_login(a, SCRAM_SHA_512, "erin", "erin-pw")
    assert isinstance(failed, Failure) and "max_snapshot_age_s" in failed.reason
    assert a.limiter.refusal("10.0.0.1", user_claim("erin")) is None  # not the client's fault: not counted
    with pytest.raises(CredentialStoreUnavailable):
        a.verify_password("erin", "erin-pw")
    with pytest.raises(CredentialStoreUnavailable):
        a.authenticate_client("svc", "svc-secret-0123456789")
    assert a.snapshot_state().stale and "max_snapshot_age_s" in (a.snapshot_problem() or "")
    scram_login(a, SCRAM_SHA_512, "erin", "erin-pw")
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "max_snapshot_age_s" in errors[0].getMessage()
    assert not any("erin-pw" in r.getMessage() or SECRET_KEY in r.getMessage() for r in caplog.records)

    outage.restore()
    mono.advance(REFRESH_S + 0.001)
    assert isinstance(scram_login(a, SCRAM_SHA_512, "erin", "erin-pw"), Failure)  # the deletion arrived
    assert a.authenticate_client("svc", "svc-secret-0123456789") is not None
    assert not a.snapshot_state().stale and not a.snapshot_state().unreachable
    assert any("reachable again" in r.getMessage() for r in caplog.records)


def test_oauthbearer_login_with_a_token_issued_elsewhere(nodes) -> None:
    a, b, mono = nodes
    b.validate_sasl_bearer  # noqa: B018 - B is up
    b.authenticate_client("w", "x" * 20)
    a.set_client("worker", "worker-secret-0123456789", [], actor=ALICE)
    token = a.issue_token(a.authenticate_client("worker", "worker-secret-0123456789"), None).access_token
    mono.advance(MOMENT)
    server = b.server_mechanism("OAUTHBEARER", "10.0.0.1")
    assert isinstance(server.step(build_client_initial_response(token)), Success)
