"""Delegation-token rules (KIP-48) as Kafka's KRaft controller applies them."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from authz.model import Principal
from sasl.delegation import (
    TOKEN_SALT_LENGTH,
    DelegationTokenError,
    TokenErrorCode,
    TokenPolicy,
    credentials_match_secret,
    decode_hmac,
    expire_answer_ms,
    expired,
    new_token,
    renewed,
    token_hmac,
    token_salt,
    token_scram_credentials,
    visible,
)
from sasl.mechanism import Challenge, Success
from sasl.scram import MECHANISMS, ScramClient, ScramIdentity, ScramServer

ALICE, BOB, CAROL, EVE = (Principal("User", n) for n in ("alice", "bob", "carol", "eve"))
POLICY = TokenPolicy(max_lifetime_ms=7_000, expiry_time_ms=1_000)


def make(**kw):
    args = dict(
        now_ms=100,
        owner=ALICE,
        requester=ALICE,
        renewers=[BOB],
        max_lifetime_ms=-1,
        policy=POLICY,
        token_authenticated=False,
        token_id=lambda: "tok-1",
    )
    args.update(kw)
    return new_token(**args)


def test_hmac_is_hmac_sha512_of_the_id() -> None:
    assert token_hmac(b"secret", "tok-1") == hmac.new(b"secret", b"tok-1", hashlib.sha512).digest()
    assert decode_hmac(base64.b64encode(b"abc").decode()) == b"abc"
    with pytest.raises(DelegationTokenError) as info:
        decode_hmac("not base64!")
    assert info.value.code is TokenErrorCode.DELEGATION_TOKEN_NOT_FOUND


def test_create_timestamps() -> None:
    t = make()
    assert (t.issue_ms, t.expiry_ms, t.max_ms) == (100, 1_100, 7_100)
    short = make(max_lifetime_ms=500)
    assert (short.expiry_ms, short.max_ms) == (600, 600)
    assert make(max_lifetime_ms=99_999).max_ms == 7_100  # capped by the configured maximum


def test_create_refusals() -> None:
    with pytest.raises(DelegationTokenError) as info:
        make(token_authenticated=True)
    assert info.value.code == 64 and "delegation token authenticated channels" in str(info.value)
    with pytest.raises(DelegationTokenError) as info:
        make(renewers=[Principal("Group", "ops")])
    assert info.value.code == TokenErrorCode.INVALID_PRINCIPAL_TYPE


def test_renew() -> None:
    t = make()
    r = renewed(t, caller=BOB, now_ms=900, renew_period_ms=-1, policy=POLICY)
    assert r.expiry_ms == 1_900
    assert renewed(t, caller=ALICE, now_ms=900, renew_period_ms=200, policy=POLICY).expiry_ms == 1_100
    with pytest.raises(DelegationTokenError) as info:
        renewed(t, caller=EVE, now_ms=900, renew_period_ms=-1, policy=POLICY)
    assert info.value.code == TokenErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
    with pytest.raises(DelegationTokenError) as info:
        renewed(t, caller=BOB, now_ms=1_101, renew_period_ms=-1, policy=POLICY)
    assert info.value.code == TokenErrorCode.DELEGATION_TOKEN_EXPIRED


def test_renew_never_passes_max_timestamp() -> None:
    t = make(max_lifetime_ms=1_500)
    t = renewed(t, caller=ALICE, now_ms=1_000, renew_period_ms=-1, policy=POLICY)
    assert t.expiry_ms == 1_600 == t.max_ms


def test_expire() -> None:
    t = make()
    assert expired(t, caller=BOB, now_ms=200, expiry_period_ms=-1) is None
    later = expired(t, caller=ALICE, now_ms=200, expiry_period_ms=300)
    assert later is not None and later.expiry_ms == 500
    now = expired(t, caller=ALICE, now_ms=200, expiry_period_ms=0)
    # expiry = now: still usable during that millisecond, as in Kafka (expiryTimestamp < now)
    assert now is not None and now.expiry_ms == 200
    assert not now.is_expired(200) and now.is_expired(201)
    with pytest.raises(DelegationTokenError):
        expired(t, caller=EVE, now_ms=200, expiry_period_ms=-1)
    with pytest.raises(DelegationTokenError) as info:
        expired(t, caller=ALICE, now_ms=5_000, expiry_period_ms=10)
    assert info.value.code == TokenErrorCode.DELEGATION_TOKEN_EXPIRED


def test_describe_visibility() -> None:
    t = make(requester=CAROL)
    never = lambda _t: False  # noqa: E731
    assert visible(t, caller=ALICE, owners=None, may_describe=never)
    assert visible(t, caller=BOB, owners=None, may_describe=never)
    assert visible(t, caller=CAROL, owners=None, may_describe=never)
    assert not visible(t, caller=EVE, owners=None, may_describe=never)
    assert visible(t, caller=EVE, owners=None, may_describe=lambda _t: True)
    assert visible(t, caller=ALICE, owners=[BOB], may_describe=never)  # bob is a renewer
    assert not visible(t, caller=ALICE, owners=[EVE], may_describe=never)


def test_expired_is_answered_before_owner_mismatch_as_kafka() -> None:
    """KRaft's DelegationTokenControlManager checks expiry first, for renew and expire alike, and
    refuses to expire (even with a negative period) a token that has already expired."""
    t = make()
    for call in (
        lambda: renewed(t, caller=EVE, now_ms=5_000, renew_period_ms=-1, policy=POLICY),
        lambda: expired(t, caller=EVE, now_ms=5_000, expiry_period_ms=10),
        lambda: expired(t, caller=ALICE, now_ms=5_000, expiry_period_ms=-1),
    ):
        with pytest.raises(DelegationTokenError) as info:
            call()
        assert info.value.code == TokenErrorCode.DELEGATION_TOKEN_EXPIRED


def test_a_token_expires_after_its_expiry_millisecond_as_kafka() -> None:
    """KRaft's DelegationTokenControlManager (renew, expire, sweepExpiredDelegationTokens) compares
    `maxTimestamp < now || expiryTimestamp < now`: the expiry millisecond itself still counts."""
    t = make()  # expiry 1_100, max 7_100
    assert not t.is_expired(1_100) and t.is_expired(1_101)
    assert t.usable_until_ms == 1_101
    assert renewed(t, caller=ALICE, now_ms=1_100, renew_period_ms=50, policy=POLICY).expiry_ms == 1_150
    with pytest.raises(DelegationTokenError) as info:
        renewed(t, caller=ALICE, now_ms=1_101, renew_period_ms=50, policy=POLICY)
    assert info.value.code == TokenErrorCode.DELEGATION_TOKEN_EXPIRED
    # the maximum timestamp counts the same way
    capped = make(max_lifetime_ms=500)  # expiry = max = 600
    assert not capped.is_expired(600) and capped.is_expired(601) and capped.usable_until_ms == 601
    assert expired(capped, caller=ALICE, now_ms=600, expiry_period_ms=-1) is None


def test_expire_with_a_negative_period_answers_the_period_as_kraft() -> None:
    """KRaft's expireDelegationToken: `setExpiryTimestampMs(requestData.expiryTimePeriodMs())` and a
    RemoveDelegationTokenRecord for a negative period; the new expiry timestamp otherwise."""
    t = make()
    assert expire_answer_ms(expired(t, caller=ALICE, now_ms=200, expiry_period_ms=-1), -1) == -1
    assert expire_answer_ms(expired(t, caller=ALICE, now_ms=200, expiry_period_ms=-5_000), -5_000) == -5_000
    assert expire_answer_ms(expired(t, caller=ALICE, now_ms=200, expiry_period_ms=300), 300) == 500
    assert expire_answer_ms(expired(t, caller=ALICE, now_ms=200, expiry_period_ms=99_999), 99_999) == 7_100


def test_token_scram_credentials_are_kafkas_prepare_scram_credentials() -> None:
    """Per mechanism: password base64(HmacSHA512(secret, id)), minimum iterations; the salt keyed by
    the secret and the id, the same for both mechanisms and on every call. A SCRAM client holding the
    HMAC logs in against them."""
    secret = b"delegation-secret-0123456789"
    creds = token_scram_credentials(secret, "tok-1")
    assert sorted(creds) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert creds == token_scram_credentials(secret, "tok-1")
    salt = token_salt(secret, "tok-1")
    assert len(salt) == TOKEN_SALT_LENGTH and salt != token_salt(secret, "tok-2") != token_salt(b"other", "tok-1")
    password = base64.b64encode(token_hmac(secret, "tok-1")).decode()
    for name, cred in creds.items():
        mech = MECHANISMS[name]
        assert cred.iterations == mech.min_iterations == 4096 and cred.salt == salt
        salted = hashlib.pbkdf2_hmac(mech.hash_name, password.encode(), salt, 4096)
        assert cred.server_key == hmac.digest(salted, b"Server Key", mech.hash_name)
        server = ScramServer(mech, lambda _n, _t, c=cred: ScramIdentity(ALICE, c, token_authenticated=True))
        client = ScramClient(mech, "tok-1", password, token_auth=True)
        first = server.step(client.first_message())
        assert isinstance(first, Challenge)
        assert isinstance(server.step(client.final_message(first.data)), Success)
    assert credentials_match_secret(secret, "tok-1", *creds.values())
    assert not credentials_match_secret(b"another-secret-0123456789", "tok-1", *creds.values())
    assert not credentials_match_secret(secret, "tok-2", creds["SCRAM-SHA-256"])
