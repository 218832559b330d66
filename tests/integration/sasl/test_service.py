"""CredentialService over SQLite and a real PostgreSQL: SCRAM users, PLAIN, delegation tokens through
SCRAM `tokenauth`, service accounts and the client-credentials token flow, key rotation, multi-node refresh."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import scramp

from audit.model import EventType
from audit.sinks import MemorySink
from authz.database import open_engine
from authz.model import Principal
from kgov.settings import Settings
from sasl.delegation import DelegationTokenError, TokenErrorCode
from sasl.limiter import BEARER_CLAIM
from sasl.mechanism import Challenge, Failure, Success, UnsupportedMechanismError
from sasl.oauthbearer import TokenValidationError, build_client_initial_response
from sasl.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramClient
from sasl.service import CredentialError, CredentialService, OAuthError

pytestmark = pytest.mark.postgres

ALICE, BOB, EVE = Principal("User", "alice"), Principal("User", "bob"), Principal("User", "eve")
SECRET_KEY = "delegation-master-key-for-tests"


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kw: float) -> None:
        self.now += timedelta(**kw)


def settings(**sasl) -> Settings:
    return Settings(
        dev_mode=True,
        sasl={
            "delegation_token_secret_key": SECRET_KEY,
            "refresh_interval_s": 0.01,
            "scram_iterations": 4096,
            **sasl,
        },
    )


@pytest.fixture
def env(db_url: str):
    engine = open_engine(db_url)
    clock, audit = Clock(), MemorySink()
    svc = CredentialService(engine, settings(), audit=audit, clock=clock)
    yield svc, clock, audit, engine
    engine.dispose()


def scram_login(svc: CredentialService, mech, user: str, password: str, *, token: bool = False):
    server = svc.server_mechanism(mech.name, "10.0.0.1")
    client = ScramClient(mech, user, password, token_auth=token)
    first = server.step(client.first_message())
    if not isinstance(first, Challenge):
        return first
    result = server.step(client.final_message(first.data))
    if isinstance(result, Success):
        client.verify_server_final(result.data)
    return result


def test_scram_user_life_cycle(env) -> None:
    svc, _clock, audit, _ = env
    assert svc.set_scram_credential("alice", "SCRAM-SHA-512", "alice-pw", actor=ALICE) is False
    svc.set_scram_credential("alice", "scram-sha-256", "alice-pw", iterations=8192, actor=ALICE)
    users = svc.describe_scram_users()
    assert [(u.name, [(m.mechanism, m.iterations) for m in u.mechanisms]) for u in users] == [
        ("alice", [("SCRAM-SHA-256", 8192), ("SCRAM-SHA-512", 4096)])
    ]
    for mech in (SCRAM_SHA_256, SCRAM_SHA_512):
        ok = scram_login(svc, mech, "alice", "alice-pw")
        assert isinstance(ok, Success) and ok.principal == ALICE and not ok.token_authenticated
    assert isinstance(scram_login(svc, SCRAM_SHA_512, "alice", "wrong"), Failure)
    assert svc.set_scram_credential("alice", "SCRAM-SHA-512", "new-pw", actor=ALICE) is True
    assert isinstance(scram_login(svc, SCRAM_SHA_512, "alice", "alice-pw"), Failure)
    assert isinstance(scram_login(svc, SCRAM_SHA_512, "alice", "new-pw"), Success)
    svc.delete_scram_credential("alice", "SCRAM-SHA-512", actor=ALICE)
    assert isinstance(scram_login(svc, SCRAM_SHA_512, "alice", "new-pw"), Failure)
    with pytest.raises(CredentialError, match="does not exist") as info:
        svc.delete_scram_credential("alice", "SCRAM-SHA-512", actor=ALICE)
    assert info.value.code == 91
    changes = [e for e in audit.events if e.type is EventType.CREDENTIAL_CHANGE]
    assert [e.data["methodName"] for e in changes] == [
        "scram.UpsertCredential",
        "scram.UpsertCredential",
        "scram.UpsertCredential",
        "scram.DeleteCredential",
    ]
    assert all("pw" not in e.to_json() for e in changes)
    failures = [e for e in audit.events if e.type is EventType.AUTHENTICATION]
    assert len(failures) == 3 and failures[0].data["requestMetadata"]["clientAddress"] == "10.0.0.1"


def test_credential_validation(env) -> None:
    svc, *_ = env
    for args, code, msg in [
        (("", "SCRAM-SHA-256", "pw"), 93, "Username must not be empty"),
        (("u", "SCRAM-SHA-1", "pw"), 33, "Unknown SCRAM mechanism"),
        (("u", "SCRAM-SHA-256", ""), 93, "Password must not be empty"),
    ]:
        with pytest.raises(CredentialError, match=msg) as info:
            svc.set_scram_credential(*args, actor=ALICE)
        assert info.value.code == code
    with pytest.raises(CredentialError, match="Too few iterations"):
        svc.set_scram_credential("u", "SCRAM-SHA-256", "pw", iterations=100, actor=ALICE)
    with pytest.raises(CredentialError, match="Too many iterations"):
        svc.set_scram_credential("u", "SCRAM-SHA-256", "pw", iterations=20000, actor=ALICE)
    with pytest.raises(UnsupportedMechanismError):
        svc.server_mechanism("GSSAPI", "10.0.0.1")


def test_scramp_interop_through_the_service(env) -> None:
    svc, *_ = env
    svc.set_scram_credential("interop", "SCRAM-SHA-256", "interop-pw", actor=ALICE)
    server = svc.server_mechanism("SCRAM-SHA-256", "10.0.0.2")
    client = scramp.ScramClient(["SCRAM-SHA-256"], "interop", "interop-pw")
    first = server.step(client.get_client_first().encode())
    assert isinstance(first, Challenge)
    client.set_server_first(first.data.decode())
    result = server.step(client.get_client_final().encode())
    assert isinstance(result, Success)
    client.set_server_final(result.data.decode())


def test_plain_uses_scram_credential_and_cache(env) -> None:
    svc, *_ = env
    svc.set_scram_credential("bob", "SCRAM-SHA-512", "bob-pw", actor=ALICE)
    ok = svc.server_mechanism("PLAIN", "10.0.0.3").step(b"\x00bob\x00bob-pw")
    assert isinstance(ok, Success) and ok.principal == BOB
    assert svc.verify_password("bob", "bob-pw") is not None  # cached path
    assert svc.verify_password("bob", "nope") is None
    assert svc.verify_password("nobody", "bob-pw") is None
    svc.set_scram_credential("bob", "SCRAM-SHA-512", "bob-pw-2", actor=ALICE)
    assert svc.verify_password("bob", "bob-pw") is None  # the cache never outlives a password change


def test_a_failed_reauthentication_is_audited_as_one_for_the_sessions_principal(env) -> None:
    svc, _clock, audit, _engine = env
    svc.set_scram_credential("bob", "SCRAM-SHA-512", "bob-pw", actor=ALICE)
    assert isinstance(svc.server_mechanism("PLAIN", "10.0.0.4").step(b"\x00bob\x00nope"), Failure)
    renewing = svc.server_mechanism("PLAIN", "10.0.0.4", reauthenticating=BOB)
    assert isinstance(renewing.step(b"\x00bob\x00nope"), Failure)
    failures = [e.data for e in audit.events if e.type == EventType.AUTHENTICATION]
    assert [(f["authenticationInfo"]["principal"], f["result"]["reauthentication"]) for f in failures] == [
        (None, False), ("User:bob", True)]


def test_failure_limit_per_source(db_url: str) -> None:
    engine = open_engine(db_url)
    svc = CredentialService(engine, settings(max_failed_attempts_per_source=3))
    svc.set_scram_credential("carol", "SCRAM-SHA-512", "carol-pw", actor=ALICE)
    for _ in range(3):
        assert isinstance(svc.server_mechanism("PLAIN", "10.9.9.9").step(b"\x00carol\x00bad"), Failure)
    blocked = svc.server_mechanism("PLAIN", "10.9.9.9").step(b"\x00carol\x00carol-pw")
    assert isinstance(blocked, Failure) and "too many failed" in blocked.reason
    assert isinstance(svc.server_mechanism("PLAIN", "10.9.9.8").step(b"\x00carol\x00carol-pw"), Success)
    engine.dispose()


@pytest.mark.parametrize("odd", [Principal("User", "o" * 600), Principal("User", "a\x00b")])
def test_token_owners_and_requesters_the_store_cannot_keep_are_refused(env, odd: Principal) -> None:
    """The REST route refused them itself; Kafka's CreateDelegationToken (gateway.admin_apis: an owner of
    the caller's choosing, or a long OAUTHBEARER principal as the requester) reached the store, where
    PostgreSQL answered with a database error (the gateway closed the connection) and SQLite kept them."""
    svc, *_ = env
    for requester, owner in ((ALICE, odd), (odd, None)):
        with pytest.raises(DelegationTokenError) as refused:
            svc.create_token(requester, owner=owner)
        assert refused.value.code is TokenErrorCode.INVALID_PRINCIPAL_TYPE
    assert svc.describe_tokens(ALICE, owners=None, may_describe=lambda _: True) == []


def test_delegation_token_life_cycle(env) -> None:
    svc, clock, audit, _ = env
    created = svc.create_token(ALICE, renewers=[BOB], max_lifetime_ms=3_600_000)
    info, hmac_b64 = created.info, base64.b64encode(created.hmac).decode()
    assert info.owner == ALICE and info.renewers == (BOB,)
    assert info.expiry_ms == info.max_ms == info.issue_ms + 3_600_000  # max lifetime below the 1-day expiry
    # authenticate: token id as user name, base64 HMAC as password, tokenauth=true
    for mech in (SCRAM_SHA_256, SCRAM_SHA_512):
        ok = scram_login(svc, mech, info.token_id, hmac_b64, token=True)
        assert isinstance(ok, Success)
        assert ok.principal == ALICE and ok.token_authenticated
        # the token works through its expiry millisecond, so the session ends right after it
        assert ok.session_lifetime_ms == info.expiry_ms + 1 - svc.now_ms()
    # without tokenauth the id is not a user
    assert isinstance(scram_login(svc, SCRAM_SHA_512, info.token_id, hmac_b64), Failure)
    assert isinstance(scram_login(svc, SCRAM_SHA_512, info.token_id, "wrong", token=True), Failure)
    # a token-authenticated principal may not create tokens
    with pytest.raises(DelegationTokenError) as err:
        svc.create_token(ALICE, token_authenticated=True)
    assert err.value.code == TokenErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    # renew by a renewer; not by eve
    clock.advance(minutes=10)
    renewed = svc.renew_token(BOB, hmac_b64, 60_000)
    assert renewed.expiry_ms == svc.now_ms() + 60_000
    with pytest.raises(DelegationTokenError) as err:
        svc.renew_token(EVE, hmac_b64, 60_000)
    assert err.value.code == TokenErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
    # describe visibility
    assert [t.token_id for t in svc.describe_tokens(BOB, owners=None, may_describe=lambda t: False)] == [
        info.token_id
    ]
    assert svc.describe_tokens(EVE, owners=None, may_describe=lambda t: False) == []
    assert len(svc.describe_tokens(EVE, owners=[ALICE], may_describe=lambda t: True)) == 1
    assert svc.describe_tokens(ALICE, owners=[EVE], may_describe=lambda t: True) == []
    # expire now: the token still works during this millisecond (Kafka: expiryTimestamp < now),
    # with a 1 ms session, and fails from the next one on
    assert svc.expire_token(ALICE, hmac_b64, 0) == svc.now_ms()
    last = scram_login(svc, SCRAM_SHA_512, info.token_id, hmac_b64, token=True)
    assert isinstance(last, Success) and last.session_lifetime_ms == 1
    clock.advance(milliseconds=1)
    assert isinstance(scram_login(svc, SCRAM_SHA_512, info.token_id, hmac_b64, token=True), Failure)
    with pytest.raises(DelegationTokenError) as err:
        svc.renew_token(ALICE, hmac_b64, 1000)
    assert err.value.code == TokenErrorCode.DELEGATION_TOKEN_EXPIRED
    with pytest.raises(DelegationTokenError) as err:
        svc.renew_token(ALICE, base64.b64encode(b"x" * 64).decode(), 1000)
    assert err.value.code == TokenErrorCode.DELEGATION_TOKEN_NOT_FOUND
    methods = [e.data["methodName"] for e in audit.events if e.type is EventType.CREDENTIAL_CHANGE]
    assert methods == ["delegationToken.Create", "delegationToken.Renew", "delegationToken.Expire"]
    assert all(hmac_b64 not in e.to_json() for e in audit.events)


def test_token_expires_by_time_and_removal(env) -> None:
    svc, clock, *_ = env
    created = svc.create_token(ALICE, max_lifetime_ms=60_000)
    hmac_b64 = base64.b64encode(created.hmac).decode()
    assert isinstance(scram_login(svc, SCRAM_SHA_256, created.info.token_id, hmac_b64, token=True), Success)
    clock.advance(seconds=61)
    assert isinstance(scram_login(svc, SCRAM_SHA_256, created.info.token_id, hmac_b64, token=True), Failure)
    other = svc.create_token(BOB)
    # KRaft answers a negative period as given and removes the token
    assert svc.expire_token(BOB, base64.b64encode(other.hmac).decode(), -1) == -1
    assert other.info.token_id not in [t.token_id for t in svc.store.all_tokens()]
    with pytest.raises(DelegationTokenError) as err:
        svc.renew_token(BOB, base64.b64encode(other.hmac).decode(), 1)
    assert err.value.code == TokenErrorCode.DELEGATION_TOKEN_NOT_FOUND


def test_token_authenticated_sessions_may_not_manage_tokens(env) -> None:
    """Kafka's allowTokenRequests gates renew, expire and describe as well as create: otherwise a
    leaked token could keep itself alive to its maximum lifetime or expire its owner's other tokens."""
    svc, *_ = env
    created = svc.create_token(ALICE, renewers=[BOB])
    hmac_b64 = base64.b64encode(created.hmac).decode()
    calls = [
        lambda: svc.renew_token(ALICE, hmac_b64, 60_000, token_authenticated=True),
        lambda: svc.expire_token(ALICE, hmac_b64, -1, token_authenticated=True),
        lambda: svc.describe_tokens(ALICE, owners=None, may_describe=lambda t: True, token_authenticated=True),
        lambda: svc.create_token(ALICE, token_authenticated=True),
    ]
    for call in calls:
        with pytest.raises(DelegationTokenError) as err:
            call()
        assert err.value.code == TokenErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    assert [t.expiry_ms for t in svc.store.all_tokens()] == [created.info.expiry_ms]  # nothing changed


def test_tokens_disabled_without_secret(db_url: str) -> None:
    engine = open_engine(db_url)
    svc = CredentialService(engine, Settings(dev_mode=True))
    with pytest.raises(DelegationTokenError) as err:
        svc.create_token(ALICE)
    assert err.value.code == TokenErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    engine.dispose()


def test_a_client_id_with_nul_is_an_unknown_client_on_every_database(env) -> None:
    # `POST /oauth/token` hands the form's client_id (`%00` decodes to NUL) to `authenticate_client`.
    # PostgreSQL cannot even compare a NUL string: the look-up used to raise DataError (a 500, neither
    # counted nor audited nor delayed). No stored client id holds NUL (`set_client`), so: unknown.
    svc, _, _, _ = env
    svc.set_client("worker-svc", "worker-secret-0123456789", ["kafka"], actor=ALICE)
    assert svc.store.get_client("worker-svc\x00") is None
    assert svc.authenticate_client("worker-svc\x00", "worker-secret-0123456789") is None
    assert svc.authenticate_client("\x00", "worker-secret-0123456789") is None
    assert svc.authenticate_client("worker-svc", "worker-secret-0123456789") is not None


@pytest.mark.parametrize("client_id", [" worker", "worker ", "wor\nker", "worker\x1b[0m", "\u0085worker"])
def test_a_client_id_no_token_of_it_could_log_in_with_is_refused(env, client_id: str) -> None:
    # The issuer's tokens name the client id as `sub`, and the validator refuses a principal with
    # surrounding spaces or control characters: such a client was stored, given tokens, and every one
    # of them refused.
    svc, _, _, _ = env
    with pytest.raises(CredentialError) as err:
        svc.set_client(client_id, "worker-secret-0123456789", ["kafka"], actor=ALICE)
    assert err.value.code == CredentialError.UNACCEPTABLE_CREDENTIAL
    assert svc.list_clients() == []


def test_client_credentials_flow(env) -> None:
    svc, clock, audit, _ = env
    svc.set_client("worker-svc", "worker-secret-0123456789", ["kafka", "read"], actor=ALICE)
    assert svc.authenticate_client("worker-svc", "wrong-secret-0123456789") is None
    assert svc.authenticate_client("nobody", "worker-secret-0123456789") is None
    account = svc.authenticate_client("worker-svc", "worker-secret-0123456789")
    assert account is not None
    issued = svc.issue_token(account, "kafka")
    assert issued.scope == "kafka" and issued.expires_in == 900
    with pytest.raises(OAuthError) as err:
        svc.issue_token(account, "admin")
    assert err.value.error == "invalid_scope"
    token = svc.validator.validate(issued.access_token)
    assert token.principal_name == "worker-svc" and token.scopes == {"kafka"}
    result = svc.server_mechanism("OAUTHBEARER", "10.0.0.5").step(
        build_client_initial_response(issued.access_token)
    )
    assert isinstance(result, Success) and result.principal == Principal("User", "worker-svc")
    assert result.session_lifetime_ms == 900_000
    clock.advance(seconds=900 + 31)
    with pytest.raises(TokenValidationError, match="expired"):
        svc.validator.validate(issued.access_token)
    server = svc.server_mechanism("OAUTHBEARER", "10.0.0.5")
    assert isinstance(server.step(build_client_initial_response(issued.access_token)), Challenge)
    final = server.step(b"\x01")
    assert isinstance(final, Failure) and final.reason == "JWT expired"
    assert audit.events[-1].data["result"] == {"success": False, "reason": "JWT expired", "reauthentication": False}


def test_key_rotation_keeps_old_tokens_valid_until_they_expire(env) -> None:
    svc, clock, *_ = env
    svc.set_client("rot", "rotation-secret-0123456789", [], actor=ALICE)
    account = svc.authenticate_client("rot", "rotation-secret-0123456789")
    assert account is not None
    first = svc.issue_token(account, None)
    first_kid = svc.jwks_document()["keys"][0]["kid"]
    clock.advance(days=1, seconds=1)
    second = svc.issue_token(account, None)
    kids = [k["kid"] for k in svc.jwks_document()["keys"]]
    assert len(kids) == 2 and first_kid in kids
    assert svc.validator.validate(second.access_token).principal_name == "rot"
    clock.advance(seconds=900 + 31)
    with pytest.raises(TokenValidationError, match="expired"):
        svc.validator.validate(first.access_token)
    svc.rotate_signing_key()
    assert first_kid not in [k["kid"] for k in svc.jwks_document()["keys"]]
    assert all("d" not in k for k in svc.jwks_document()["keys"])


def test_second_node_sees_changes(db_url: str) -> None:
    engine_a, engine_b = open_engine(db_url), open_engine(db_url)
    a = CredentialService(engine_a, settings())
    b = CredentialService(engine_b, settings())
    a.set_scram_credential("dave", "SCRAM-SHA-512", "dave-pw", actor=ALICE)
    b._checked_at = 0.0
    assert isinstance(scram_login(b, SCRAM_SHA_512, "dave", "dave-pw"), Success)
    created = a.create_token(Principal("User", "dave"))
    b._checked_at = 0.0
    ok = scram_login(
        b, SCRAM_SHA_512, created.info.token_id, base64.b64encode(created.hmac).decode(), token=True
    )
    assert isinstance(ok, Success)
    a.set_client("multi", "multi-node-secret-0123456789", [], actor=ALICE)
    acct = a.authenticate_client("multi", "multi-node-secret-0123456789")
    assert acct is not None
    jwt_from_a = a.issue_token(acct, None).access_token
    assert b.validator.validate(jwt_from_a).principal_name == "multi"  # unknown kid -> one refresh
    engine_a.dispose()
    engine_b.dispose()


def test_ensure_admin(env) -> None:
    svc, *_ = env
    assert svc.ensure_admin("admin", "admin-password-long") is True
    assert svc.ensure_admin("admin", "other-password-long") is False
    assert svc.verify_password("admin", "admin-password-long") is not None


class FailingSink:
    """An audit sink whose disk is full: the one fault here we cannot cause with a real sink cheaply."""

    def write(self, event) -> None:
        from audit.sinks import AuditWriteError

        raise AuditWriteError("disk full")


def test_failed_audit_write_rolls_the_change_back(db_url: str) -> None:
    engine = open_engine(db_url)
    svc = CredentialService(engine, settings(), audit=FailingSink())
    with pytest.raises(Exception, match="disk full"):
        svc.set_scram_credential("mallory", "SCRAM-SHA-512", "pw", actor=ALICE)
    assert svc.describe_scram_users() == []
    with pytest.raises(Exception, match="disk full"):
        svc.create_token(ALICE)
    assert svc.store.all_tokens() == [] and svc.store.token_credentials() == {}
    with pytest.raises(Exception, match="disk full"):
        svc.set_client("c", "client-secret-0123456789", [], actor=ALICE)
    assert svc.list_clients() == []
    engine.dispose()


def test_salted_password_upsert_as_kafka_admin_clients_send_it(env) -> None:
    svc, _clock, audit, _ = env
    salt = b"salt-from-the-admin-client"
    salted = SCRAM_SHA_256.salted_password("wire-pw", salt, 4096)
    assert (
        svc.set_scram_salted_credential(
            "erin", "SCRAM-SHA-256", salt=salt, salted_password=salted, iterations=4096, actor=ALICE
        )
        is False
    )
    assert isinstance(scram_login(svc, SCRAM_SHA_256, "erin", "wire-pw"), Success)
    with pytest.raises(CredentialError, match="Invalid salt or salted password"):
        svc.set_scram_salted_credential(
            "erin", "SCRAM-SHA-256", salt=salt, salted_password=b"short", iterations=4096, actor=ALICE
        )
    with pytest.raises(CredentialError, match="Too few iterations"):
        svc.set_scram_salted_credential(
            "erin", "SCRAM-SHA-256", salt=salt, salted_password=salted, iterations=10, actor=ALICE
        )
    assert audit.events[-1].data["details"]["mechanism"] == "SCRAM-SHA-256"


def test_oauthbearer_failure_counts_even_if_the_client_hangs_up(db_url: str) -> None:
    engine = open_engine(db_url)
    audit = MemorySink()
    svc = CredentialService(engine, settings(max_failed_attempts_per_source=2), audit=audit)
    for _ in range(2):
        server = svc.server_mechanism("OAUTHBEARER", "10.7.7.7")
        assert isinstance(server.step(build_client_initial_response("not.a.jwt")), Challenge)
        # the client disconnects instead of sending %x01
    assert [e.data["authenticationInfo"]["mechanism"] for e in audit.events] == ["OAUTHBEARER", "OAUTHBEARER"]
    blocked = svc.server_mechanism("OAUTHBEARER", "10.7.7.7").step(build_client_initial_response("x.y.z"))
    assert isinstance(blocked, Failure) and "too many failed" in blocked.reason
    # a client that does answer %x01 is counted once, not twice
    svc2 = CredentialService(engine, settings(max_failed_attempts_per_source=2), audit=audit)
    server = svc2.server_mechanism("OAUTHBEARER", "10.7.7.8")
    server.step(build_client_initial_response("not.a.jwt"))
    assert isinstance(server.step(b"\x01"), Failure)
    assert svc2.limiter.refusal("10.7.7.8", BEARER_CLAIM) is None
    engine.dispose()


def test_signing_keys_encrypted_at_rest(db_url: str) -> None:
    engine = open_engine(db_url)
    sealed = Settings(dev_mode=True, oauth={"signing_key_secret": "signing-key-secret-for-tests"})
    svc = CredentialService(engine, sealed)
    svc.set_client("sealed", "sealed-secret-0123456789", [], actor=ALICE)
    account = svc.authenticate_client("sealed", "sealed-secret-0123456789")
    assert account is not None
    token = svc.issue_token(account, None).access_token
    stored = svc.store.signing_keys()
    assert stored and all(k.private_pem.startswith("kgov-aesgcm-v1:") for k in stored)
    assert all("PRIVATE KEY" not in k.private_pem for k in stored)
    # another node without the secret (or with a wrong one) validates, but cannot sign: fails closed
    for other in (Settings(dev_mode=True), Settings(dev_mode=True, oauth={"signing_key_secret": "x" * 20})):
        node = CredentialService(engine, other)
        assert node.validator.validate(token).principal_name == "sealed"
        with pytest.raises(OAuthError) as err:
            node.issue_token(account, None)
        assert err.value.error == "server_error" and err.value.status == 500
    # the right secret on another node signs
    assert CredentialService(engine, sealed).issue_token(account, None).access_token
    engine.dispose()


def server_first(svc: CredentialService, mech, name: str, *, token: bool = False) -> dict[str, str]:
    """The salt and iterations a client sees for `name` (the server-first message's s= and i=)."""
    server = svc.server_mechanism(mech.name, "10.0.0.9")
    reply = server.step(ScramClient(mech, name, "x", token_auth=token).first_message())
    assert isinstance(reply, Challenge)
    return dict(item.split("=", 1) for item in reply.data.decode().split(",")[1:])


def test_unknown_names_look_like_the_stored_credentials(db_url: str) -> None:
    """Users made by Kafka's tools have 4096 iterations and a base-36 text salt; a fake with kgov's
    defaults (8192, random bytes) would have marked every such user as real. Unknown names show the
    stored shapes in proportion (`scram.pick_fake_shape`), salt form included."""
    engine = open_engine(db_url)
    svc = CredentialService(engine, settings(scram_iterations=8192))
    for i in range(3):  # as kafka-configs.sh sends them through AlterUserScramCredentials
        salt = f"{i}k7x0q2m9zt4c1v8b5n3j6h0gz".encode()  # 26 base-36 characters
        salted = SCRAM_SHA_512.salted_password("pw", salt, 4096)
        svc.set_scram_salted_credential(
            f"kafka-user-{i}", "SCRAM-SHA-512", salt=salt, salted_password=salted, iterations=4096, actor=ALICE
        )
    svc.set_scram_credential("kgov-user", "SCRAM-SHA-512", "pw", actor=ALICE)  # 8192, 24 random bytes
    assert server_first(svc, SCRAM_SHA_512, "kafka-user-0")["i"] == "4096"
    fakes = [server_first(svc, SCRAM_SHA_512, f"no-such-user-{i}") for i in range(40)]
    kafka_like = [base64.b64decode(f["s"]) for f in fakes if f["i"] == "4096"]
    kgov_like = [base64.b64decode(f["s"]) for f in fakes if f["i"] == "8192"]
    assert len(kafka_like) + len(kgov_like) == 40 and kafka_like and kgov_like  # 3 : 1 expected
    assert all(len(s) == 26 and s.decode().isalnum() and s.decode() == s.decode().lower() for s in kafka_like)
    assert all(len(s) == 24 for s in kgov_like)
    # SCRAM-SHA-256 has no stored credential: the configured default shape.
    assert server_first(svc, SCRAM_SHA_256, "no-such-user")["i"] == "8192"
    # A token id that does not exist looks like a token (minimum iterations), not like a user.
    assert server_first(svc, SCRAM_SHA_512, "no-such-token", token=True)["i"] == "4096"
    engine.dispose()


def test_every_node_shows_the_same_salt_for_a_name(db_url: str) -> None:
    """Real users and tokens show one salt whichever node answers; so must unknown names, or asking
    two nodes (or one node before and after a restart) tells them apart."""
    engine_a, engine_b = open_engine(db_url), open_engine(db_url)
    a = CredentialService(engine_a, settings())
    created = a.create_token(ALICE)
    b = CredentialService(engine_b, settings())
    token_id = created.info.token_id
    assert server_first(a, SCRAM_SHA_256, token_id, token=True) == server_first(b, SCRAM_SHA_256, token_id, token=True)
    assert server_first(a, SCRAM_SHA_512, "ghost") == server_first(b, SCRAM_SHA_512, "ghost")
    engine_a.dispose()
    engine_b.dispose()


def test_unknown_name_salt_survives_a_restart(tmp_path) -> None:
    """A new process (fresh module state) on the same database shows the same fake salt."""
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'kgov.db'}"
    engine = open_engine(url)
    here = server_first(CredentialService(engine, settings()), SCRAM_SHA_512, "ghost")
    engine.dispose()
    script = (
        "import sys; sys.path.insert(0, '.');"
        "from tests.integration.sasl.test_service import CredentialService, open_engine, settings, server_first;"
        "from sasl.scram import SCRAM_SHA_512;"
        f"print(server_first(CredentialService(open_engine({url!r}), settings()), SCRAM_SHA_512, 'ghost')['s'])"
    )
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True, cwd=root
    )
    assert out.stdout.strip() == here["s"]


def test_plain_unknown_user_costs_what_a_real_check_costs(db_url: str, monkeypatch) -> None:
    """PLAIN / HTTP Basic: an unknown name runs PBKDF2 with the hash and iteration count most users
    have (Kafka-made users: 4096), not always kgov's default, so timing does not single out real names."""
    import hashlib

    engine = open_engine(db_url)
    svc = CredentialService(engine, settings(scram_iterations=8192))
    for i in range(2):
        salt = f"{i}salt".encode()
        svc.set_scram_salted_credential(
            f"k{i}", "SCRAM-SHA-512", salt=salt, salted_password=SCRAM_SHA_512.salted_password("pw", salt, 4096),
            iterations=4096, actor=ALICE,
        )
    calls: list[tuple[str, int]] = []
    real = hashlib.pbkdf2_hmac
    monkeypatch.setattr(hashlib, "pbkdf2_hmac", lambda h, p, s, n, *a: calls.append((h, n)) or real(h, p, s, n, *a))
    assert svc.verify_password("k0", "wrong") is None
    assert svc.verify_password("nobody", "wrong") is None
    assert calls == [("sha512", 4096), ("sha512", 4096)]
    engine.dispose()


def test_overlong_names_get_a_clear_error(env) -> None:
    """PostgreSQL used to answer a 256-character name with a database error (HTTP 500)."""
    svc, *_ = env
    salt = b"s"
    for call in (
        lambda: svc.set_scram_credential("u" * 256, "SCRAM-SHA-512", "pw", actor=ALICE),
        lambda: svc.set_scram_salted_credential(
            "u" * 256, "SCRAM-SHA-256", salt=salt, salted_password=b"x" * 32, iterations=4096, actor=ALICE
        ),
        lambda: svc.set_client("c" * 256, "client-secret-0123456789", [], actor=ALICE),
    ):
        with pytest.raises(CredentialError) as err:
            call()
        assert err.value.code == CredentialError.UNACCEPTABLE_CREDENTIAL and "at most 255" in str(err.value)
    assert svc.set_scram_credential("u" * 255, "SCRAM-SHA-512", "pw", actor=ALICE) is False
    assert svc.describe_scram_users() != [] and svc.list_clients() == []


def test_store_upgrade_from_v1_creates_the_shared_secret_once(db_url: str) -> None:
    import sqlalchemy as sa

    from authz.database import migrate
    from sasl.store import COMPONENT, MIGRATIONS, SCRAM_UNKNOWN_USER_SECRET, CredentialStore, server_secrets

    engine = open_engine(db_url)
    assert migrate(engine, COMPONENT, MIGRATIONS[:1]) == 1
    with engine.begin() as conn:  # as a kgov that only knew schema version 1 left it
        server_secrets.drop(conn, checkfirst=True)
    first = CredentialStore(engine).server_secret(SCRAM_UNKNOWN_USER_SECRET)
    assert len(first) == 32 and CredentialStore(engine).server_secret(SCRAM_UNKNOWN_USER_SECRET) == first
    with engine.begin() as conn:  # lost somehow: made again on first use, then stable
        conn.execute(sa.delete(server_secrets))
    again = CredentialStore(engine).server_secret(SCRAM_UNKNOWN_USER_SECRET)
    assert again == CredentialStore(engine).server_secret(SCRAM_UNKNOWN_USER_SECRET)
    engine.dispose()


def test_delegation_token_expiry_boundary_at_scram_login(env) -> None:
    """Kafka removes a token once `expiryTimestamp < now` (or `maxTimestamp < now`); kgov refuses it
    at login from the same millisecond on, not before."""
    svc, clock, *_ = env
    created = svc.create_token(ALICE, max_lifetime_ms=60_000)
    hmac_b64 = base64.b64encode(created.hmac).decode()
    clock.advance(milliseconds=60_000)
    assert svc.now_ms() == created.info.expiry_ms == created.info.max_ms
    ok = scram_login(svc, SCRAM_SHA_256, created.info.token_id, hmac_b64, token=True)
    assert isinstance(ok, Success) and ok.session_lifetime_ms == 1
    assert [t.token_id for t in svc.describe_tokens(ALICE, owners=None, may_describe=lambda t: True)] == [
        created.info.token_id
    ]
    clock.advance(milliseconds=1)
    assert isinstance(scram_login(svc, SCRAM_SHA_256, created.info.token_id, hmac_b64, token=True), Failure)
    assert svc.describe_tokens(ALICE, owners=None, may_describe=lambda t: True) == []
    with pytest.raises(DelegationTokenError) as err:
        svc.expire_token(ALICE, hmac_b64, -1)
    assert err.value.code == TokenErrorCode.DELEGATION_TOKEN_EXPIRED


def test_oauthbearer_token_inside_its_clock_skew_gets_a_session_that_ends_with_it(db_url: str) -> None:
    """Kafka accepts a token past `exp` inside `sasl.oauthbearer.clock.skew.seconds` and sends session
    lifetime 0 for it (no re-authentication deadline). kgov accepts it with a session that ends with
    the skew window, through the gateway's SASL session too (which must never send 0 for it)."""
    from gateway.sasl_session import SaslSession

    engine = open_engine(db_url)
    clock = Clock()
    svc = CredentialService(engine, settings(), clock=clock)  # clock_skew_s = 30, token lifetime 900 s
    svc.set_client("skewed", "skewed-secret-0123456789", [], actor=ALICE)
    account = svc.authenticate_client("skewed", "skewed-secret-0123456789")
    assert account is not None
    token = svc.issue_token(account, None).access_token
    exp_ms = svc.now_ms() + 900_000
    clock.advance(seconds=910)  # 10 s past exp, 20 s left of the skew
    result = svc.server_mechanism("OAUTHBEARER", "10.0.0.6").step(build_client_initial_response(token))
    assert isinstance(result, Success) and result.session_lifetime_ms == exp_ms + 30_000 - svc.now_ms() == 20_000
    session = SaslSession(enabled=svc.enabled_mechanisms, factory=svc.server_mechanism, client_address="10.0.0.6")
    assert session.handshake("OAUTHBEARER", 1, svc.now_ms()).error_code == 0
    step = session.authenticate(build_client_initial_response(token), svc.now_ms())
    assert step.done and step.error_code == 0 and step.session_lifetime_ms == 20_000
    assert session.session_expires_ms == exp_ms + 30_000
    clock.advance(milliseconds=19_999)  # the last millisecond of the skew window: a 1 ms session
    result = svc.server_mechanism("OAUTHBEARER", "10.0.0.6").step(build_client_initial_response(token))
    assert isinstance(result, Success) and result.session_lifetime_ms == 1
    clock.advance(milliseconds=1)
    server = svc.server_mechanism("OAUTHBEARER", "10.0.0.6")
    assert isinstance(server.step(build_client_initial_response(token)), Challenge)
    final = server.step(b"\x01")
    assert isinstance(final, Failure) and final.reason == "JWT expired"
    engine.dispose()


class Pbkdf2Calls:
    """Records every PBKDF2 (hash, iterations, password length, salt length) while installed."""

    def __init__(self, monkeypatch) -> None:
        import hashlib

        self.calls: list[tuple[str, int, int, int]] = []
        real = hashlib.pbkdf2_hmac

        def counting(h, password, salt, n, *a):
            self.calls.append((h, n, len(password), len(salt)))
            return real(h, password, salt, n, *a)

        monkeypatch.setattr(hashlib, "pbkdf2_hmac", counting)

    def take(self) -> list[tuple[str, int, int, int]]:
        calls, self.calls = self.calls, []
        return calls


def server_login(svc: CredentialService, mech, user: str, password: str, pbkdf2: Pbkdf2Calls):
    """A `tokenauth` SCRAM login where only the server's steps are watched for PBKDF2 (the client
    derives its salted password, as a real client does). Returns (result, server's PBKDF2 calls)."""
    server = svc.server_mechanism(mech.name, "10.0.0.1")
    client = ScramClient(mech, user, password, token_auth=True)
    first = server.step(client.first_message())
    seen = pbkdf2.take()
    assert isinstance(first, Challenge)
    final = client.final_message(first.data)
    pbkdf2.take()
    result = server.step(final)
    seen += pbkdf2.take()
    if isinstance(result, Success):
        client.verify_server_final(result.data)
    return result, seen


def test_a_token_login_runs_no_pbkdf2_found_or_not(env, monkeypatch) -> None:
    """A real token's credentials are derived once, when it is created; a login looks them up. An
    unknown or expired id gets the keyed fake, HMACs only. Neither runs a PBKDF2, both run the same
    HMACs, and what the client sees has one shape (minimum iterations, 24 bytes of salt)."""
    import hmac as hmac_mod
    import uuid

    svc, clock, *_ = env
    pbkdf2 = Pbkdf2Calls(monkeypatch)
    live = svc.create_token(ALICE)
    # creation: one derivation per mechanism, with base64(HMAC) as the password and a 24-byte salt
    assert pbkdf2.take() == [("sha256", 4096, 88, 24), ("sha512", 4096, 88, 24)]
    expired = svc.create_token(BOB, max_lifetime_ms=60_000).info.token_id
    clock.advance(milliseconds=60_001)
    pbkdf2.take()
    hmac_calls: list[str] = []
    real_digest = hmac_mod.digest
    monkeypatch.setattr(hmac_mod, "digest", lambda k, m, d: hmac_calls.append(d) or real_digest(k, m, d))
    live_id = live.info.token_id
    for mech in (SCRAM_SHA_256, SCRAM_SHA_512):
        work = {}
        for name in (live_id, expired, str(uuid.uuid4()), live_id, "not-even-a-uuid"):
            hmac_calls.clear()
            shown = server_first(svc, mech, name, token=True)
            assert pbkdf2.take() == [], name
            work[name] = list(hmac_calls)
            assert shown["i"] == "4096" and len(base64.b64decode(shown["s"], validate=True)) == 24
            assert server_first(svc, mech, name, token=True)["s"] == shown["s"]  # stable per id
        assert len({tuple(w) for w in work.values()}) == 1 and work[live_id], work  # same HMACs for every id
        ok, seen = server_login(svc, mech, live_id, base64.b64encode(live.hmac).decode(), pbkdf2)
        assert isinstance(ok, Success) and ok.principal == ALICE and ok.token_authenticated and seen == []


def test_token_credentials_are_stored_at_creation_and_removed_with_the_token(env, monkeypatch) -> None:
    svc, clock, *_ = env
    created = svc.create_token(ALICE, max_lifetime_ms=60_000)
    token_id = created.info.token_id
    stored = svc.store.token_credentials()
    assert sorted(stored) == [(token_id, "SCRAM-SHA-256"), (token_id, "SCRAM-SHA-512")]
    for mech in (SCRAM_SHA_256, SCRAM_SHA_512):
        cred = stored[(token_id, mech.name)]
        assert cred.iterations == 4096
        assert base64.b64decode(server_first(svc, mech, token_id, token=True)["s"]) == cred.salt
        # Kafka's prepareScramCredentials: password = base64(HMAC), minimum iterations
        salted = mech.salted_password(base64.b64encode(created.hmac).decode(), cred.salt, 4096)
        assert mech.hash(mech.hmac(salted, b"Client Key")) == cred.stored_key
    # expire with a negative period removes the token and its credentials
    svc.expire_token(ALICE, base64.b64encode(created.hmac).decode(), -1)
    assert svc.store.token_credentials() == {}
    # the expiry sweep (run by every create) removes an expired token's credentials too
    old = svc.create_token(BOB, max_lifetime_ms=1_000).info.token_id
    clock.advance(seconds=2)
    new = svc.create_token(BOB).info.token_id
    assert {t for t, _m in svc.store.token_credentials()} == {new} != {old}


def test_renewal_keeps_the_credential_and_logins_working(env, monkeypatch) -> None:
    svc, clock, *_ = env
    created = svc.create_token(ALICE, renewers=[BOB])  # expires in one day unless renewed
    hmac_b64 = base64.b64encode(created.hmac).decode()
    before = svc.store.token_credentials()
    clock.advance(hours=23)
    svc.renew_token(BOB, hmac_b64, 86_400_000)
    clock.advance(hours=2)  # past the first expiry
    assert svc.store.token_credentials() == before
    pbkdf2 = Pbkdf2Calls(monkeypatch)
    for mech in (SCRAM_SHA_256, SCRAM_SHA_512):
        ok, seen = server_login(svc, mech, created.info.token_id, hmac_b64, pbkdf2)
        assert isinstance(ok, Success) and ok.principal == ALICE and seen == []
        assert ok.session_lifetime_ms == 22 * 3_600_000 + 1
        wrong = base64.b64encode(bytes(64)).decode()  # an HMAC of the right length, not this token's
        failed, seen = server_login(svc, mech, created.info.token_id, wrong, pbkdf2)
        assert isinstance(failed, Failure) and failed.data == b"e=invalid-proof" and seen == []


def test_expiry_and_deletion_stop_token_logins_on_every_node(db_url: str, monkeypatch) -> None:
    """Two nodes on one database: a token made on one logs in on the other without any derivation
    there, and stops there once it expires or is removed."""
    engine_a, engine_b = open_engine(db_url), open_engine(db_url)
    clock = Clock()
    a = CredentialService(engine_a, settings(), clock=clock)
    b = CredentialService(engine_b, settings(), clock=clock)
    pbkdf2 = Pbkdf2Calls(monkeypatch)
    removed = a.create_token(ALICE)
    timed = a.create_token(BOB, max_lifetime_ms=60_000)
    pbkdf2.take()
    b.refresh()  # as the version poll does
    assert pbkdf2.take() == []  # the other node reads the credentials, it does not derive them
    logins = [(removed.info.token_id, base64.b64encode(removed.hmac).decode()),
              (timed.info.token_id, base64.b64encode(timed.hmac).decode())]
    for node in (a, b):
        for mech in (SCRAM_SHA_256, SCRAM_SHA_512):
            for token_id, hmac_b64 in logins:
                ok, seen = server_login(node, mech, token_id, hmac_b64, pbkdf2)
                assert isinstance(ok, Success) and seen == []
    a.expire_token(ALICE, logins[0][1], -1)
    clock.advance(milliseconds=60_001)
    b._checked_at = 0.0
    for node in (a, b):
        for mech in (SCRAM_SHA_256, SCRAM_SHA_512):
            for token_id, hmac_b64 in logins:
                failed, seen = server_login(node, mech, token_id, hmac_b64, pbkdf2)
                assert isinstance(failed, Failure) and failed.data == b"e=invalid-proof" and seen == []
    engine_a.dispose()
    engine_b.dispose()


def test_a_reload_reads_only_the_credentials_of_tokens_new_to_the_node(db_url: str) -> None:
    """A token's stored credentials never change, so a node keeps those it holds and reads (and
    checks against its secret) only new tokens' on a reload."""
    engine = open_engine(db_url)
    a = CredentialService(engine, settings())
    b = CredentialService(engine, settings())
    held = a.create_token(ALICE).info.token_id
    b.refresh()
    reads: list[list[str] | None] = []
    real = b.store.token_credentials
    b.store.token_credentials = lambda ids=None: reads.append(None if ids is None else list(ids)) or real(ids)
    added = a.create_token(BOB).info.token_id
    b.refresh()
    assert reads == [[added]]
    b.refresh()  # nothing new
    assert reads == [[added]]
    assert set(b._current().token_credentials) == {held, added}
    engine.dispose()


def legacy_tokens(engine, clock: Clock) -> None:
    """A live and an expired token as kgov with sasl schema version 2 stored them (no credentials)."""
    import sqlalchemy as sa

    from authz.database import migrate
    from sasl.delegation import hmac_lookup_key, token_hmac
    from sasl.store import COMPONENT, MIGRATIONS, delegation_tokens

    assert migrate(engine, COMPONENT, MIGRATIONS[:2]) == 2
    now = int(clock().timestamp() * 1000)
    with engine.begin() as conn:
        for token_id, max_ms in (("legacy-live", now + 3_600_000), ("legacy-expired", now - 1)):
            conn.execute(sa.insert(delegation_tokens).values(
                token_id=token_id, hmac_sha256=hmac_lookup_key(token_hmac(SECRET_KEY.encode(), token_id)),
                owner="User:alice", requester="User:alice", renewers="[]", issue_ms=now - 10,
                expiry_ms=max_ms, max_ms=max_ms))


def test_tokens_made_before_stored_credentials_get_them_once(db_url: str, monkeypatch) -> None:
    """A token from before store migration 3 (or from an older node in a rolling upgrade) has no
    stored credentials: the first node to load it derives and stores them, later nodes read them.
    An expired one is left alone."""
    from sasl.delegation import token_hmac

    engine = open_engine(db_url)
    clock = Clock()
    legacy_tokens(engine, clock)
    pbkdf2 = Pbkdf2Calls(monkeypatch)
    first = CredentialService(engine, settings(), clock=clock)
    assert sorted(pbkdf2.take()) == [("sha256", 4096, 88, 24), ("sha512", 4096, 88, 24)]
    assert sorted(first.store.token_credentials()) == [("legacy-live", "SCRAM-SHA-256"), ("legacy-live", "SCRAM-SHA-512")]
    second = CredentialService(engine, settings(), clock=clock)
    assert pbkdf2.take() == []
    hmac_b64 = base64.b64encode(token_hmac(SECRET_KEY.encode(), "legacy-live")).decode()
    for node in (first, second):
        for mech in (SCRAM_SHA_256, SCRAM_SHA_512):
            ok, seen = server_login(node, mech, "legacy-live", hmac_b64, pbkdf2)
            assert isinstance(ok, Success) and ok.principal == ALICE and seen == []
    engine.dispose()


def test_a_node_with_another_secret_key_does_not_store_credentials_for_an_old_token(db_url: str, caplog) -> None:
    """A node whose `delegation_token_secret_key` differs from the one an old token was made under (a
    misconfigured node in a rolling upgrade) must not derive and store credentials for it: they would be
    for an HMAC no client has, and every node with the right key would then refuse the token as made
    under another key, for the rest of its life. It leaves the token to the nodes that made it."""
    import logging

    from sasl.delegation import token_hmac

    engine = open_engine(db_url)
    clock = Clock()
    legacy_tokens(engine, clock)  # made under SECRET_KEY
    with caplog.at_level(logging.WARNING, logger="kgov.sasl"):
        other = CredentialService(engine, settings(delegation_token_secret_key="another-secret-key-0123456789"),
                                  clock=clock)
    assert other.store.token_credentials() == {}
    assert any("1 delegation token(s) were created under another delegation_token_secret_key" in r.getMessage()
               for r in caplog.records)
    right = CredentialService(engine, settings(), clock=clock)
    hmac_b64 = base64.b64encode(token_hmac(SECRET_KEY.encode(), "legacy-live")).decode()
    for mech in (SCRAM_SHA_256, SCRAM_SHA_512):
        assert isinstance(scram_login(right, mech, "legacy-live", hmac_b64, token=True), Success)
        assert isinstance(scram_login(other, mech, "legacy-live", hmac_b64, token=True), Failure)
    engine.dispose()


def test_a_node_that_cannot_store_derived_credentials_still_logs_the_token_in(
    db_url: str, monkeypatch, caplog
) -> None:
    import logging

    from sqlalchemy.exc import OperationalError

    from sasl.delegation import token_hmac
    from sasl.store import CredentialStore

    engine = open_engine(db_url)
    clock = Clock()
    legacy_tokens(engine, clock)

    def refuse(self, derived):
        raise OperationalError("INSERT", {}, Exception("read-only"))

    monkeypatch.setattr(CredentialStore, "add_token_credentials", refuse)
    with caplog.at_level(logging.WARNING, logger="kgov.sasl"):
        node = CredentialService(engine, settings(), clock=clock)
    assert "could not store the SCRAM credentials derived for 1 delegation token(s): OperationalError" in caplog.text
    assert node.store.token_credentials() == {}
    hmac_b64 = base64.b64encode(token_hmac(SECRET_KEY.encode(), "legacy-live")).decode()
    assert isinstance(scram_login(node, SCRAM_SHA_512, "legacy-live", hmac_b64, token=True), Success)
    engine.dispose()


def test_a_new_delegation_token_secret_invalidates_every_token(db_url: str, monkeypatch, caplog) -> None:
    """As in Kafka, where every broker derives token credentials from its own key: stored credentials
    made under another `delegation_token_secret_key` never log in, and the node says so (no secrets)."""
    import logging

    engine = open_engine(db_url)
    svc = CredentialService(engine, settings())
    created = svc.create_token(ALICE)
    hmac_b64 = base64.b64encode(created.hmac).decode()
    pbkdf2 = Pbkdf2Calls(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="kgov.sasl"):
        rotated = CredentialService(engine, settings(delegation_token_secret_key="another-secret-key-0123456789"))
    assert pbkdf2.take() == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("1 delegation token(s) were created under another delegation_token_secret_key" in w for w in warnings)
    assert not any(hmac_b64 in w or SECRET_KEY in w for w in warnings)
    for mech in (SCRAM_SHA_256, SCRAM_SHA_512):
        failed, seen = server_login(rotated, mech, created.info.token_id, hmac_b64, pbkdf2)
        assert isinstance(failed, Failure) and seen == []
        # it looks like an unknown id there
        assert server_first(rotated, mech, created.info.token_id, token=True)["i"] == "4096"
        ok, _ = server_login(svc, mech, created.info.token_id, hmac_b64, pbkdf2)
        assert isinstance(ok, Success)
    engine.dispose()


def test_an_unknown_token_id_shows_another_salt_than_the_same_name_without_tokenauth(env) -> None:
    """Keyed with the users' secret, an unknown token id showed the salt its name shows as an (unknown)
    user, while a real token's salt differs from it: comparing the two told whether the token exists."""
    import uuid

    svc, *_ = env
    real_id = svc.create_token(ALICE).info.token_id
    for name in (real_id, str(uuid.uuid4())):
        as_token = server_first(svc, SCRAM_SHA_512, name, token=True)
        as_user = server_first(svc, SCRAM_SHA_512, name)
        assert as_token["s"] != as_user["s"]
        assert server_first(svc, SCRAM_SHA_512, name, token=True) == as_token  # stable per id


def test_a_token_ids_salt_does_not_change_when_the_token_expires_or_is_removed(env) -> None:
    """The salt SCRAM shows for a token id is the same while the token lives, once it has expired and
    once it is removed: someone who knows the id cannot watch the salt to learn the token's fate."""
    svc, clock, _, _ = env
    created = svc.create_token(ALICE)
    token_id, hmac_b64 = created.info.token_id, base64.b64encode(created.hmac).decode()
    live = {m.name: server_first(svc, m, token_id, token=True) for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
    clock.advance(milliseconds=created.info.expiry_ms - svc.now_ms() + 1)
    assert isinstance(scram_login(svc, SCRAM_SHA_256, token_id, hmac_b64, token=True), Failure)
    for mech in (SCRAM_SHA_256, SCRAM_SHA_512):
        expired = server_first(svc, mech, token_id, token=True)
        assert (expired["s"], expired["i"]) == (live[mech.name]["s"], live[mech.name]["i"])
    svc.store.delete_expired_tokens(svc.now_ms())
    svc.refresh()
    assert token_id not in svc._current().tokens
    for mech in (SCRAM_SHA_256, SCRAM_SHA_512):
        removed = server_first(svc, mech, token_id, token=True)
        assert (removed["s"], removed["i"]) == (live[mech.name]["s"], live[mech.name]["i"])


def test_oauthbearer_refuses_a_token_whose_exp_is_not_after_its_iat_or_nbf(env) -> None:
    """Signed by the issuer's own key and inside the clock skew, so only the time consistency of its
    claims can refuse it (Kafka: `validateTimeConsistency` unsecured, jose4j on the JWKS path)."""
    from jose import jwt

    svc, clock, audit, _ = env
    svc.set_client("worker", "worker-secret-0123456789", [], actor=ALICE)  # kgov's tokens need their client
    key = svc._signing_key()
    now = int(clock().timestamp())

    def token(**times: int) -> bytes:
        claims = {"iss": "kgov", "aud": "kgov", "sub": "worker", **times}
        signed = jwt.encode(claims, key.private_pem, algorithm=key.alg, headers={"kid": key.kid})
        return build_client_initial_response(signed)

    ok = svc.server_mechanism("OAUTHBEARER", "10.0.0.7").step(token(iat=now - 60, nbf=now - 60, exp=now + 60))
    assert isinstance(ok, Success) and ok.principal == Principal("User", "worker")
    for bad, claim in ((token(iat=now, exp=now - 5), "iat"), (token(iat=now, exp=now), "iat"),
                       (token(iat=now - 60, nbf=now + 10, exp=now + 5), "nbf")):
        server = svc.server_mechanism("OAUTHBEARER", "10.0.0.7")
        assert isinstance(server.step(bad), Challenge)
        final = server.step(b"\x01")
        assert isinstance(final, Failure) and final.reason == f"JWT 'exp' is not after its '{claim}'"
        assert audit.events[-1].data["result"]["reason"] == final.reason


def test_the_cached_password_check_never_queries_the_database(db_url: str) -> None:
    """`verify_password_cached` runs on the HTTP server's event loop: when a credential refresh is due
    it answers None (the caller then runs `verify_password` in a thread, which refreshes) instead of
    querying the database, or reloading every credential, on the loop. A fresh snapshot answers."""
    import time

    from sqlalchemy import event

    engine = open_engine(db_url)
    svc = CredentialService(engine, settings(refresh_interval_s=0.2), clock=Clock())
    svc.set_scram_credential("alice", "SCRAM-SHA-512", "alice-pw", actor=ALICE)
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    try:
        assert svc.verify_password("alice", "alice-pw") is not None  # refreshes, and caches the derivation
        statements.clear()
        assert svc.verify_password_cached("alice", "alice-pw") is not None  # fresh: answered from the cache
        time.sleep(0.3)  # the refresh interval has passed
        assert svc.verify_password_cached("alice", "alice-pw") is None
        assert statements == []
        assert svc.verify_password("alice", "alice-pw") is not None  # the thread's call refreshes
        assert statements
        statements.clear()
        assert svc.verify_password_cached("alice", "alice-pw") is not None
        assert statements == []
    finally:
        engine.dispose()


def test_deleting_or_replacing_a_client_revokes_the_tokens_kgov_issued_it(db_url: str) -> None:
    """Kafka cannot revoke a JWT; kgov issued these and knows their client: once the client is deleted
    (or replaced, with a new secret) its tokens are refused over SASL and HTTP Bearer, on the node that
    made the change at once and on another node within `refresh_interval_s`, from the snapshot."""
    import asyncio
    import time

    from sasl.http_auth import CredentialAuthenticator

    engine_a, engine_b = open_engine(db_url), open_engine(db_url)
    audit = MemorySink()
    a = CredentialService(engine_a, settings(failed_authentication_delay_ms=0))
    b = CredentialService(engine_b, settings(failed_authentication_delay_ms=0), audit=audit)
    http_b = CredentialAuthenticator(b)

    def sasl_ok(node: CredentialService, jwt: str) -> bool:
        server = node.server_mechanism("OAUTHBEARER", "10.0.0.9")
        return isinstance(server.step(build_client_initial_response(jwt)), Success)

    def http_principal(jwt: str) -> Principal | None:
        return asyncio.run(http_b.authenticate(f"Bearer {jwt}", "10.0.0.9"))

    def issued(node: CredentialService, secret: str) -> str:
        account = node.authenticate_client("etl", secret)
        assert account is not None
        return node.issue_token(account, None).access_token

    a.set_client("etl", "first-secret-0123456789", [], actor=ALICE)
    old = issued(a, "first-secret-0123456789")
    assert sasl_ok(a, old) and sasl_ok(b, old)
    assert http_principal(old) == Principal("User", "etl")
    # Replaced with a new secret: the tokens issued for the old one stop, new ones work.
    a.set_client("etl", "second-secret-0123456789", [], actor=ALICE)
    assert not sasl_ok(a, old)
    time.sleep(0.02)  # b's `refresh_interval_s` is 0.01 s
    assert not sasl_ok(b, old) and http_principal(old) is None
    new = issued(a, "second-secret-0123456789")
    assert sasl_ok(b, new) and http_principal(new) == Principal("User", "etl")
    # Deleted: refused everywhere, though the signature and `exp` are still good.
    a.delete_client("etl", actor=ALICE)
    assert not sasl_ok(a, new)
    with pytest.raises(TokenValidationError, match="OAuth client etl was deleted"):
        a.validator.validate(new)
    time.sleep(0.02)
    assert not sasl_ok(b, new) and http_principal(new) is None
    reasons = [e.data["result"]["reason"] for e in audit.events if e.type == EventType.AUTHENTICATION]
    assert reasons[-2:] == ["OAuth client etl was deleted: the tokens issued to it are revoked"] * 2
    assert any("was replaced since this token was issued" in r for r in reasons)
    # A client of the same name created again does not bring the old tokens back.
    a.set_client("etl", "second-secret-0123456789", [], actor=ALICE)
    assert not sasl_ok(a, new)
    engine_a.dispose()
    engine_b.dispose()
