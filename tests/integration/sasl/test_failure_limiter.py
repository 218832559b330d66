"""The failed-login limits (`sasl.limiter`) through the credential service over SQLite and a real PostgreSQL:
one client with a stale password must not lock out the others at its address; one address spraying
passwords across names is stopped; the counts and refusals do not tell which names exist."""

from __future__ import annotations

import pytest

from audit.model import EventType
from audit.sinks import MemorySink
from authz.database import open_engine
from authz.model import Principal
from kgov.settings import Settings
from sasl.limiter import ADDRESS_REFUSAL, NAME_REFUSAL
from sasl.mechanism import Challenge, Failure, Success
from sasl.oauthbearer import build_client_initial_response
from sasl.scram import SCRAM_SHA_256, ScramClient
from sasl.service import CredentialService

pytestmark = pytest.mark.postgres

ADMIN = Principal("User", "admin")
NAT = "10.20.0.1"  # the one address every client behind a NAT shares


def settings(**sasl: object) -> Settings:
    return Settings(dev_mode=True, sasl={"refresh_interval_s": 0.01, "scram_iterations": 4096,
                                         "delegation_token_secret_key": "limiter-test-delegation-key",
                                         "max_failed_attempts_per_source": 5, **sasl})


@pytest.fixture
def svc(db_url: str):
    engine = open_engine(db_url)
    service = CredentialService(engine, settings(max_failed_attempts_per_address=40), audit=MemorySink())
    service.set_scram_credential("stale-app", "SCRAM-SHA-256", "new-password", actor=ADMIN)
    service.set_scram_credential("other-app", "SCRAM-SHA-256", "other-password", actor=ADMIN)
    yield service
    engine.dispose()


def scram(svc: CredentialService, user: str, password: str, address: str = NAT) -> Success | Failure:
    server = svc.server_mechanism("SCRAM-SHA-256", address)
    client = ScramClient(SCRAM_SHA_256, user, password)
    first = server.step(client.first_message())
    if not isinstance(first, Challenge):
        assert isinstance(first, Failure)
        return first
    result = server.step(client.final_message(first.data))
    assert isinstance(result, Success | Failure)
    return result


def plain(svc: CredentialService, user: str, password: str, address: str = NAT) -> Success | Failure:
    result = svc.server_mechanism("PLAIN", address).step(f"\x00{user}\x00{password}".encode())
    assert isinstance(result, Success | Failure)
    return result


def test_a_stale_password_retrying_does_not_lock_out_its_neighbour(svc: CredentialService) -> None:
    for _ in range(60):  # librdkafka retrying its login on every reconnect, past the limit of 5
        assert isinstance(scram(svc, "stale-app", "old-password"), Failure)
    refused = scram(svc, "stale-app", "new-password")  # that name is over its limit here, even rightly
    assert isinstance(refused, Failure) and refused.reason == NAME_REFUSAL
    ok = scram(svc, "other-app", "other-password")  # the neighbour behind the same address logs in
    assert isinstance(ok, Success) and ok.principal == Principal("User", "other-app")
    assert isinstance(plain(svc, "other-app", "other-password"), Success)
    # the stale name elsewhere is unaffected
    assert isinstance(scram(svc, "stale-app", "new-password", address="10.20.0.2"), Success)


def test_a_spray_across_names_is_refused_past_the_address_cap(db_url: str) -> None:
    engine = open_engine(db_url)
    audit = MemorySink()
    service = CredentialService(engine, settings(), audit=audit)  # the default address cap, 100
    service.set_scram_credential("victim", "SCRAM-SHA-256", "victim-password", actor=ADMIN)
    reasons = [r.reason for r in (plain(service, f"user-{n}", "Winter2026!") for n in range(150))]
    assert all(r == "Authentication failed: Invalid username or password" for r in reasons[:100])
    assert reasons[100:] == [ADDRESS_REFUSAL] * 50  # refused unchecked, one name each
    refused = plain(service, "victim", "victim-password")  # every name at that address, while it lasts
    assert isinstance(refused, Failure) and refused.reason == ADDRESS_REFUSAL
    assert isinstance(plain(service, "victim", "victim-password", address="10.20.0.9"), Success)
    failures = [e for e in audit.events if e.type == EventType.AUTHENTICATION]
    assert len(failures) == 151  # every attempt audited, the refused ones with the refusal's reason
    engine.dispose()


def test_known_and_unknown_names_are_counted_and_refused_alike(svc: CredentialService) -> None:
    def failures_until_refused(user: str, address: str) -> tuple[int, str]:
        for n in range(20):
            result = plain(svc, user, "wrong", address)
            assert isinstance(result, Failure)
            if "too many" in result.reason:
                return n, result.reason
        raise AssertionError("never refused")

    assert failures_until_refused("stale-app", "10.20.1.1") == failures_until_refused("no-such-user", "10.20.1.2")
    assert failures_until_refused("stale-app", "10.20.1.1") == (0, NAME_REFUSAL)


def test_bad_bearer_tokens_do_not_lock_out_scram_users_at_their_address(svc: CredentialService) -> None:
    for _ in range(5):
        server = svc.server_mechanism("OAUTHBEARER", NAT)
        assert isinstance(server.step(build_client_initial_response("not.a.jwt")), Challenge)
        assert isinstance(server.step(b"\x01"), Failure)
    blocked = svc.server_mechanism("OAUTHBEARER", NAT).step(build_client_initial_response("x.y.z"))
    assert isinstance(blocked, Failure) and blocked.reason == NAME_REFUSAL  # bearers share one count
    assert isinstance(scram(svc, "other-app", "other-password"), Success)
    # nor a user who happens to be named like the bearers' count
    svc.set_scram_credential("bearer", "SCRAM-SHA-256", "bearer-password", actor=ADMIN)
    assert isinstance(scram(svc, "bearer", "bearer-password"), Success)


def test_malformed_first_messages_count_against_the_address_not_a_user(svc: CredentialService) -> None:
    for _ in range(12):
        assert isinstance(svc.server_mechanism("SCRAM-SHA-256", NAT).step(b"garbage"), Failure)
        assert isinstance(svc.server_mechanism("PLAIN", NAT).step(b"no separators"), Failure)
    refused = svc.server_mechanism("SCRAM-SHA-256", NAT).step(b"more garbage")
    assert isinstance(refused, Failure) and refused.reason == NAME_REFUSAL
    assert isinstance(scram(svc, "other-app", "other-password"), Success)
    # The address cap (40 here) counts those 5 with every other failure; refusals are not failures (or a
    # stale client refused on every reconnect would soon lock out the whole address again).
    for n in range(34):
        assert plain(svc, f"sprayed-{n}", "x").reason == "Authentication failed: Invalid username or password"
    assert isinstance(plain(svc, "other-app", "other-password"), Success)
    assert isinstance(plain(svc, "sprayed-34", "x"), Failure)  # the 40th
    refused = plain(svc, "other-app", "other-password")
    assert isinstance(refused, Failure) and refused.reason == ADDRESS_REFUSAL


def test_a_delegation_token_is_counted_by_its_id(svc: CredentialService) -> None:
    created = svc.create_token(Principal("User", "other-app"))
    for _ in range(5):
        server = svc.server_mechanism("SCRAM-SHA-256", NAT)
        client = ScramClient(SCRAM_SHA_256, created.info.token_id, "d3Jvbmc=", token_auth=True)
        first = server.step(client.first_message())
        assert isinstance(first, Challenge)
        assert isinstance(server.step(client.final_message(first.data)), Failure)
    server = svc.server_mechanism("SCRAM-SHA-256", NAT)
    refused = server.step(ScramClient(SCRAM_SHA_256, created.info.token_id, "x", token_auth=True).first_message())
    assert isinstance(refused, Failure) and refused.reason == NAME_REFUSAL
    # the token's owner, by password, is a different name
    assert isinstance(scram(svc, "other-app", "other-password"), Success)
