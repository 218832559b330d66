"""Delegation tokens through OAUTHBEARER (kgov's bearer form), against the credential service over
SQLite and a real PostgreSQL: who logs in, for how long, what is refused and what the audit says."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest

from authz.database import open_engine
from authz.model import Principal
from sasl.delegation import format_bearer
from sasl.http_auth import CredentialAuthenticator
from sasl.mechanism import Challenge, Failure, Success
from sasl.oauthbearer import TokenValidationError, build_client_initial_response
from sasl.service import LOOKUP_REFRESH_S, CredentialService
from tests.integration.sasl.test_service import SECRET_KEY, Clock, settings
from tests.integration.sasl.test_service import env as env  # the (service, clock, audit, engine) fixture

pytestmark = pytest.mark.postgres

ALICE, BOB = Principal("User", "alice"), Principal("User", "bob")


def login(svc: CredentialService, bearer: str, address: str = "10.1.0.1", authzid: str = "") -> Success | Failure:
    """One OAUTHBEARER exchange as librdkafka and kafka-python run it: on an error challenge the
    client answers %x01 and the exchange fails."""
    server = svc.server_mechanism("OAUTHBEARER", address)
    first = server.step(build_client_initial_response(bearer, authzid=authzid))
    if isinstance(first, Challenge):
        assert json.loads(first.data) == {"status": "invalid_token"}  # one answer for every bad token
        final = server.step(b"\x01")
        assert isinstance(final, Failure)
        return final
    assert isinstance(first, Success | Failure)
    return first


def bearer_of(created) -> str:
    return format_bearer(created.info.token_id, created.hmac)


def test_the_owner_logs_in_token_authenticated_until_the_token_ends(env) -> None:
    svc, clock, *_ = env
    created = svc.create_token(ALICE, renewers=[BOB], max_lifetime_ms=3_600_000)
    ok = login(svc, bearer_of(created))
    assert isinstance(ok, Success) and ok.mechanism == "OAUTHBEARER"
    assert ok.principal == ALICE and ok.token_authenticated
    # KIP-368: the session ends with the token (which still works during its expiry millisecond)
    assert ok.session_lifetime_ms == created.info.expiry_ms + 1 - svc.now_ms() == 3_600_001
    # the owner's name as authzid is the owner's login; another name is refused
    assert isinstance(login(svc, bearer_of(created), authzid="alice"), Success)
    other = login(svc, bearer_of(created), authzid="bob")
    assert isinstance(other, Failure) and "authorization id" in other.reason
    # a renewal lengthens the next session, with the same bearer (the HMAC does not change)
    clock.advance(minutes=30)
    renewed = svc.renew_token(BOB, base64.b64encode(created.hmac).decode(), 3_000_000)
    again = login(svc, bearer_of(created))
    assert isinstance(again, Success)
    assert again.session_lifetime_ms == min(renewed.expiry_ms, renewed.max_ms) + 1 - svc.now_ms() == 1_800_001


def test_the_session_never_outlasts_connections_max_reauth_ms(db_url: str) -> None:
    engine = open_engine(db_url)
    svc = CredentialService(engine, settings(connections_max_reauth_ms=60_000), clock=Clock())
    ok = login(svc, bearer_of(svc.create_token(ALICE)))
    assert isinstance(ok, Success) and ok.session_lifetime_ms == 60_000
    engine.dispose()


def test_a_token_session_may_not_manage_tokens(env) -> None:
    from sasl.delegation import DelegationTokenError, TokenErrorCode

    svc, *_ = env
    created = svc.create_token(ALICE)
    ok = login(svc, bearer_of(created))
    assert isinstance(ok, Success)
    # what the gateway passes on from the session (`SaslSession.token_authenticated`)
    with pytest.raises(DelegationTokenError) as refused:
        svc.create_token(ok.principal, token_authenticated=ok.token_authenticated)
    assert refused.value.code is TokenErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED


def test_expired_removed_unknown_and_wrong_hmac_tokens_get_one_answer(env) -> None:
    svc, clock, audit, _ = env
    live = svc.create_token(ALICE)
    short = svc.create_token(ALICE, max_lifetime_ms=60_000)
    removed = svc.create_token(BOB)
    assert svc.expire_token(BOB, base64.b64encode(removed.hmac).decode(), -1) == -1
    wrong = format_bearer(live.info.token_id, bytes(64))
    unknown = format_bearer("0b7cbd0c-4f0e-4a43-9d2e-5e6d1c7f1a2b", live.hmac)
    # the expiry millisecond still logs in, with a 1 ms session; the next one does not
    clock.advance(milliseconds=60_000)
    last = login(svc, bearer_of(short))
    assert isinstance(last, Success) and last.session_lifetime_ms == 1
    clock.advance(milliseconds=1)
    reasons = {}
    for name, bearer in [("wrong", wrong), ("unknown", unknown), ("expired", bearer_of(short)),
                         ("removed", bearer_of(removed)), ("malformed", bearer_of(live)[:-2])]:
        failure = login(svc, bearer, address=f"10.2.0.{len(reasons)}")
        assert isinstance(failure, Failure), name
        reasons[name] = failure.reason
    assert reasons == {
        "wrong": f"delegation token {live.info.token_id}: the HMAC does not match",
        "unknown": "unknown delegation token 0b7cbd0c-4f0e-4a43-9d2e-5e6d1c7f1a2b (never issued, or removed)",
        "expired": f"delegation token {short.info.token_id} has expired",
        "removed": f"unknown delegation token {removed.info.token_id} (never issued, or removed)",
        "malformed": "malformed delegation token bearer",
    }
    # every failure is one AUTHENTICATION event with the reason; no event holds an HMAC
    failures = [e.data for e in audit.events if str(e.type) == "io.kgov.authentication"]
    assert [f["result"]["reason"] for f in failures] == list(reasons.values())
    assert all(f["authenticationInfo"]["mechanism"] == "OAUTHBEARER" for f in failures)
    dump = "".join(e.to_json() for e in audit.events)
    for token in (live, short, removed):
        assert base64.b64encode(token.hmac).decode() not in dump
    # and the live token still works
    assert isinstance(login(svc, bearer_of(live)), Success)


def test_failed_bearer_logins_count_against_the_source(db_url: str) -> None:
    engine = open_engine(db_url)
    svc = CredentialService(engine, settings(max_failed_attempts_per_source=3), clock=Clock())
    created = svc.create_token(ALICE)
    for _ in range(3):
        assert isinstance(login(svc, format_bearer(created.info.token_id, bytes(64)), address="10.3.0.1"), Failure)
    blocked = login(svc, bearer_of(created), address="10.3.0.1")  # even the right HMAC, once blocked
    assert isinstance(blocked, Failure) and "too many failed" in blocked.reason
    assert isinstance(login(svc, bearer_of(created), address="10.3.0.2"), Success)
    engine.dispose()


def test_a_token_made_on_another_node_moments_ago_logs_in_at_once(db_url: str) -> None:
    """A service issues a token and hands it to a worker, which logs in through another node (the gateway)
    within milliseconds, long before that node's credential snapshot is due for a refresh: every login
    looks its name up in a snapshot checked against the store within `LOOKUP_REFRESH_S`, so the first
    login works. Whether a login asks the database depends on the clock only, never on the bearer: a
    wrong HMAC costs the queries a right one does, no more, and no query until the interval has passed."""
    from sqlalchemy import event

    engine = open_engine(db_url)
    mono = [1000.0]
    moment = LOOKUP_REFRESH_S + 0.001
    try:
        issuer = CredentialService(engine, settings(), clock=Clock())
        gateway = CredentialService(engine, settings(refresh_interval_s=5.0), clock=Clock(),
                                    monotonic=lambda: mono[0])
        assert isinstance(login(gateway, bearer_of(issuer.create_token(ALICE))), Success)  # its snapshot: fresh
        statements: list[str] = []
        event.listen(engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
        made = issuer.create_token(ALICE)
        mono[0] += moment
        ok = login(gateway, bearer_of(made))
        assert isinstance(ok, Success) and ok.principal == ALICE and ok.token_authenticated
        counts = []
        for bearer in (format_bearer(made.info.token_id, bytes(64)), bearer_of(made)):
            mono[0] += moment
            statements.clear()
            login(gateway, bearer)
            counts.append(len(statements))
        assert counts[0] == counts[1] > 0  # the change-version query, for the wrong HMAC as for the right one
        statements.clear()
        wrong = login(gateway, format_bearer(made.info.token_id, bytes(64)))
        assert isinstance(wrong, Failure) and wrong.reason.endswith("the HMAC does not match")
        assert statements == []  # within the interval: no query, whatever the bearer
    finally:
        engine.dispose()


def test_a_node_with_another_key_or_none_refuses_the_token(db_url: str) -> None:
    engine = open_engine(db_url)
    made = CredentialService(engine, settings(), clock=Clock()).create_token(ALICE)
    other = CredentialService(engine, settings(delegation_token_secret_key="another-delegation-key-0123"),
                              clock=Clock())
    refused = login(other, bearer_of(made))
    assert isinstance(refused, Failure) and refused.reason.endswith("the HMAC does not match")
    disabled = CredentialService(engine, settings(delegation_token_secret_key=None), clock=Clock())
    refused = login(disabled, bearer_of(made))
    assert isinstance(refused, Failure) and "delegation_token_secret_key is unset" in refused.reason
    assert SECRET_KEY not in refused.reason
    engine.dispose()


def test_jwts_still_log_in_and_only_sasl_takes_the_token_form(env) -> None:
    svc, *_ = env
    svc.set_client("svc-orders", "svc-orders-secret-0123", [], actor=ALICE)
    account = svc.authenticate_client("svc-orders", "svc-orders-secret-0123")
    assert account is not None
    jwt = svc.issue_token(account, None).access_token
    ok = login(svc, jwt)
    assert isinstance(ok, Success) and ok.principal == Principal("User", "svc-orders")
    assert not ok.token_authenticated
    # HTTP Bearer goes to the JWT validator only: the control plane's token routes could not tell a
    # token-authenticated caller, so a delegation token never authenticates there.
    bearer = bearer_of(svc.create_token(ALICE))
    with pytest.raises(TokenValidationError):
        svc.validator.validate(bearer)
    http = CredentialAuthenticator(svc, sleep=lambda _s: asyncio.sleep(0))
    assert asyncio.run(http.authenticate(f"Bearer {bearer}", "10.4.0.1")) is None
    assert asyncio.run(http.authenticate(f"Bearer {jwt}", "10.4.0.1")) == Principal("User", "svc-orders")
