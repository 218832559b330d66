"""SCRAM core: RFC 7677 vector, a computed SHA-512 vector, message grammar, interop with scramp and kafka-python."""

from __future__ import annotations

import base64
import warnings

import pytest
import scramp
from hypothesis import given
from hypothesis import strategies as st

from authz.model import Principal
from sasl.mechanism import Challenge, Failure, Success
from sasl.scram import (
    BASE36,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    FakeCredentialShape,
    ScramClient,
    ScramCredential,
    ScramError,
    ScramIdentity,
    ScramServer,
    decode_sasl_name,
    derive_credential,
    encode_sasl_name,
    fake_credential,
    mechanism_named,
    parse_client_first,
    pick_fake_shape,
    shape_census,
)

RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"


def lookup_for(users: dict[str, ScramCredential], token: bool = False):
    def lookup(name: str, token_auth: bool) -> ScramIdentity | None:
        cred = users.get(name)
        if cred is None or token_auth != token:
            return None
        return ScramIdentity(Principal("User", name), cred, token_authenticated=token_auth)

    return lookup


def test_rfc7677_vector() -> None:
    cred = derive_credential(SCRAM_SHA_256, "pencil", iterations=4096, salt=RFC_SALT)
    assert base64.b64encode(cred.stored_key).decode() == "WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY="
    assert base64.b64encode(cred.server_key).decode() == "wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="
    server = ScramServer(SCRAM_SHA_256, lookup_for({"user": cred}), nonce=lambda: RFC_SERVER_NONCE)
    first = server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert isinstance(first, Challenge)
    assert first.data == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.step(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert isinstance(final, Success)
    assert final.data == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert final.principal == Principal("User", "user")
    assert final.mechanism == "SCRAM-SHA-256"


def test_rfc7677_client_side() -> None:
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first_message() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = client.final_message(
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert final.endswith(b",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(ScramError, match="Invalid server signature"):
        client.verify_server_final(b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")


def test_sha512_vector() -> None:
    cred = derive_credential(SCRAM_SHA_512, "pencil", iterations=4096, salt=RFC_SALT)
    assert base64.b64encode(cred.stored_key).decode() == (
        "6AAub3065EYRmyFpM2RNwqK+eGnrkYuEWbXn19LsEmBqzu8QaCXNc1FwpnX9NhH2hK/60dzj9DoO5DvVkOHbvg=="
    )
    server = ScramServer(SCRAM_SHA_512, lookup_for({"user": cred}), nonce=lambda: RFC_SERVER_NONCE)
    assert isinstance(server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"), Challenge)
    final = server.step(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=gMGXRcevScNtxZ6/8lQYpGtnsNAc3mGcmNomv+"
        b"xnoOMw+3R2xNJdMNnzMlTN8PPC6wdp6dybEmDYXYTxwnYPJQ=="
    )
    assert isinstance(final, Success)
    assert final.data == (
        b"v=ZQnYEgWQMFmmsM8aQMF0nDDCy/AgCzkwk8CmMZYcMg0vSVlKDanekLtifDSeVGT4+5ZxXnJq199RVG2rR7N7Zw=="
    )


@pytest.mark.parametrize("mech", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_scramp_client_against_our_server(mech) -> None:
    cred = derive_credential(mech, "s3cret-pw", iterations=8192)
    server = ScramServer(mech, lookup_for({"alice": cred}))
    client = scramp.ScramClient([mech.name], "alice", "s3cret-pw")
    challenge = server.step(client.get_client_first().encode())
    assert isinstance(challenge, Challenge)
    client.set_server_first(challenge.data.decode())
    result = server.step(client.get_client_final().encode())
    assert isinstance(result, Success), result
    client.set_server_final(result.data.decode())  # raises if our signature were wrong


@pytest.mark.parametrize("mech", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_our_client_against_scramp_server(mech) -> None:
    m = scramp.ScramMechanism(mech.name)
    salt, stored, server_key, iterations = m.make_auth_info("pw-for-bob", iteration_count=4096)
    server = m.make_server(lambda _u: (salt, stored, server_key, iterations))
    client = ScramClient(mech, "bob", "pw-for-bob")
    server.set_client_first(client.first_message().decode())
    final = client.final_message(server.get_server_first().encode())
    server.set_client_final(final.decode())
    client.verify_server_final(server.get_server_final().encode())


@pytest.mark.parametrize("mech", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_kafka_python_client_against_our_server(mech) -> None:
    cred = derive_credential(mech, "kp-password", iterations=4096)
    server = ScramServer(mech, lookup_for({"carol": cred}))
    with warnings.catch_warnings():  # kafka-python's import uses deprecated importlib.resources API
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.net.sasl.scram import ScramClient as KafkaPythonScramClient
    client = KafkaPythonScramClient("carol", "kp-password", mech.name)
    challenge = server.step(client.first_message())
    assert isinstance(challenge, Challenge)
    client.process_server_first_message(challenge.data)
    result = server.step(client.final_message())
    assert isinstance(result, Success)
    client.process_server_final_message(result.data)


def run(server: ScramServer, client: ScramClient):
    first = server.step(client.first_message())
    if not isinstance(first, Challenge):
        return first
    return server.step(client.final_message(first.data))


def test_wrong_password_and_unknown_user_fail_alike() -> None:
    cred = derive_credential(SCRAM_SHA_512, "right", iterations=4096)
    wrong = run(
        ScramServer(SCRAM_SHA_512, lookup_for({"dave": cred})), ScramClient(SCRAM_SHA_512, "dave", "wrong")
    )
    unknown_server = ScramServer(SCRAM_SHA_512, lookup_for({"dave": cred}), fake_iterations=4096)
    unknown = run(unknown_server, ScramClient(SCRAM_SHA_512, "nobody", "x"))
    assert isinstance(wrong, Failure) and isinstance(unknown, Failure)
    assert wrong.data == unknown.data == b"e=invalid-proof"
    assert "Invalid user credentials" in unknown.reason
    # The fake salt is stable per name, like a real user's.
    s1 = ScramServer(SCRAM_SHA_512, lookup_for({})).step(b"n,,n=ghost,r=abc")
    s2 = ScramServer(SCRAM_SHA_512, lookup_for({})).step(b"n,,n=ghost,r=def")
    assert isinstance(s1, Challenge) and isinstance(s2, Challenge)
    assert s1.data.split(b",")[1] == s2.data.split(b",")[1]


def test_token_auth_extension_reaches_lookup() -> None:
    cred = derive_credential(SCRAM_SHA_256, "hmac-b64", iterations=4096)
    server = ScramServer(SCRAM_SHA_256, lookup_for({"tok1": cred}, token=True))
    result = run(server, ScramClient(SCRAM_SHA_256, "tok1", "hmac-b64", token_auth=True))
    assert isinstance(result, Success) and result.token_authenticated
    plain = run(
        ScramServer(SCRAM_SHA_256, lookup_for({"tok1": cred}, token=True)),
        ScramClient(SCRAM_SHA_256, "tok1", "hmac-b64"),
    )
    assert isinstance(plain, Failure)


def test_parse_client_first_with_extensions_and_authzid() -> None:
    first = parse_client_first(b"n,a=user=2C1,n=user=2C1,r=abc,tokenauth=true,foo=bar")
    assert first.username == "user,1" and first.authzid == "user,1"
    assert first.token_auth and first.extensions["foo"] == "bar"
    assert first.bare == "n=user=2C1,r=abc,tokenauth=true,foo=bar"


@pytest.mark.parametrize(
    "message",
    [
        b"n,x=something,n=testuser,r=abc",  # bad gs2 header
        b"y,,n=testuser,r=abc",  # channel binding flag we do not support
        b"p=tls-unique,,n=testuser,r=abc",
        b"n,,m=ext,n=testuser,r=abc",  # mandatory extension
        b"n,,n=test=2Buser,r=abc",  # bad escape
        b"n,,n=,r=abc",
        b"n,,n=user",
        b"\xff\xfe",
    ],
)
def test_invalid_client_first_rejected(message: bytes) -> None:
    result = ScramServer(SCRAM_SHA_256, lookup_for({})).step(message)
    assert isinstance(result, Failure)
    assert result.data.startswith(b"e=")


def test_authzid_different_from_username_rejected() -> None:
    cred = derive_credential(SCRAM_SHA_256, "x", iterations=4096)
    result = ScramServer(SCRAM_SHA_256, lookup_for({"u": cred})).step(b"n,a=other,n=u,r=abc")
    assert isinstance(result, Failure) and "authorization id" in result.reason


def _final_parts(mech=SCRAM_SHA_256):
    cred = derive_credential(mech, "pw", iterations=4096)
    server = ScramServer(mech, lookup_for({"u": cred}))
    client = ScramClient(mech, "u", "pw")
    first = server.step(client.first_message())
    assert isinstance(first, Challenge)
    return server, client.final_message(first.data)


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda f: f.replace(b"c=biws", b"c=eSws"), "Channel binding"),
        (lambda f: f.replace(b",r=", b",r=x"), "nonce"),
        (lambda f: f[: f.index(b",p=")] + b",p=AAAA", "Invalid client credentials"),
        (lambda f: f[: f.index(b",p=")] + b",p=123", "format"),
        (lambda f: f.replace(b"c=biws", b"c=ab"), "format"),
        (lambda f: f[: f.index(b",p=")], "format"),
    ],
)
def test_tampered_client_final_rejected(mutate, reason: str) -> None:
    server, final = _final_parts()
    result = server.step(mutate(final))
    assert isinstance(result, Failure)
    assert reason in result.reason
    assert server.step(final).__class__ is Failure  # a failed exchange stays failed


def test_low_iteration_credential_refused() -> None:
    cred = ScramCredential(salt=b"s", stored_key=b"k" * 32, server_key=b"k" * 32, iterations=1000)
    result = ScramServer(SCRAM_SHA_256, lookup_for({"u": cred})).step(b"n,,n=u,r=abc")
    assert isinstance(result, Failure) and "less than the minimum 4096" in result.reason


def test_client_refuses_bad_server_first() -> None:
    client = ScramClient(SCRAM_SHA_256, "u", "pw", nonce="abc")
    client.first_message()
    with pytest.raises(ScramError, match="does not start with client nonce"):
        client.final_message(b"r=zzz123,s=QSXCR+Q6sek8bf92,i=4096")
    with pytest.raises(ScramError, match="less than the minimum"):
        client.final_message(b"r=abc123,s=QSXCR+Q6sek8bf92,i=1024")
    with pytest.raises(ScramError, match="format"):
        client.final_message(b"r=abc123,s=QSXCR+Q6sek8bf92,i=0x")
    with pytest.raises(ScramError, match="failed with error: invalid-proof"):
        client.verify_server_final(b"e=invalid-proof")


def test_client_refuses_an_iteration_count_too_long_to_read_with_scram_error() -> None:
    # Python's int() refuses over 4300 digits with ValueError, which callers catching ScramError (the
    # gateway's upstream login) would not expect; Kafka's ScramMessages answers SaslException.
    client = ScramClient(SCRAM_SHA_256, "u", "pw", nonce="abc")
    client.first_message()
    for digits in (b"9" * 5000, b"0" * 5000 + b"4096"):
        with pytest.raises(ScramError, match="invalid iterations"):
            client.final_message(b"r=abc123,s=QSXCR+Q6sek8bf92,i=" + digits)


def test_session_lifetime_and_expiry() -> None:
    cred = derive_credential(SCRAM_SHA_256, "pw", iterations=4096)

    def lookup(name: str, token_auth: bool) -> ScramIdentity:
        return ScramIdentity(Principal("User", "owner"), cred, token_authenticated=True, expiry_ms=10_000)

    ok = run(
        ScramServer(SCRAM_SHA_256, lookup, now_ms=lambda: 4_000, max_session_ms=60_000),
        ScramClient(SCRAM_SHA_256, "t", "pw"),
    )
    assert isinstance(ok, Success) and ok.session_lifetime_ms == 6_000
    capped = run(
        ScramServer(SCRAM_SHA_256, lookup, now_ms=lambda: 4_000, max_session_ms=1_000),
        ScramClient(SCRAM_SHA_256, "t", "pw"),
    )
    assert isinstance(capped, Success) and capped.session_lifetime_ms == 1_000
    expired = run(
        ScramServer(SCRAM_SHA_256, lookup, now_ms=lambda: 10_000), ScramClient(SCRAM_SHA_256, "t", "pw")
    )
    assert isinstance(expired, Failure)


@pytest.mark.parametrize(
    "name", ["user1", "123", "1,2", "user=A", "user==B", "user,1", "user 1", ",", "=", ",=", "=="]
)
def test_sasl_name_round_trip(name: str) -> None:
    assert decode_sasl_name(encode_sasl_name(name)) == name
    cred = derive_credential(SCRAM_SHA_256, "pw", iterations=4096)
    assert isinstance(
        run(ScramServer(SCRAM_SHA_256, lookup_for({name: cred})), ScramClient(SCRAM_SHA_256, name, "pw")),
        Success,
    )


def test_iteration_limits_and_names() -> None:
    with pytest.raises(ValueError, match="Too few iterations"):
        derive_credential(SCRAM_SHA_256, "pw", iterations=4095)
    with pytest.raises(ValueError, match="Too many iterations"):
        derive_credential(SCRAM_SHA_256, "pw", iterations=16385)
    assert mechanism_named("scram-sha-512") is SCRAM_SHA_512
    with pytest.raises(ValueError, match="Unknown SCRAM mechanism"):
        mechanism_named("SCRAM-SHA-1")
    assert "salt" not in repr(derive_credential(SCRAM_SHA_256, "pw", iterations=4096)).replace("salt=", "")


@given(st.binary(max_size=200))
def test_server_never_raises_on_garbage(data: bytes) -> None:
    server = ScramServer(SCRAM_SHA_256, lookup_for({}))
    assert isinstance(server.step(data), Challenge | Failure)
    assert isinstance(server.step(data), Failure)


# -- review fixes (rev-sasl) --------------------------------------------------------------------


def test_fake_shapes_follow_the_stored_credentials_in_proportion() -> None:
    kafka_made = ScramCredential(b"3kq9z0x1c7v2b8n4m6l5j0h9gf", b"k" * 64, b"s" * 64, 4096)
    kgov_made = derive_credential(SCRAM_SHA_512, "pw", iterations=8192)
    rare = derive_credential(SCRAM_SHA_512, "pw", iterations=16384)
    default = FakeCredentialShape(iterations=8192)
    key = b"k" * 32
    assert pick_fake_shape(shape_census([], default), SCRAM_SHA_512, "ghost", key=key) == default
    census = shape_census([kafka_made] * 6 + [kgov_made] * 3 + [rare], default)
    # The census does not depend on the order the database returned the rows in.
    assert census == shape_census([rare] + [kgov_made] * 3 + [kafka_made] * 6, default)
    names = [f"user-{i}" for i in range(4000)]
    picks = [pick_fake_shape(census, SCRAM_SHA_512, n, key=key) for n in names]
    counts = {s.iterations: sum(p.iterations == s.iterations for p in picks) for s in (
        FakeCredentialShape(4096), FakeCredentialShape(8192), FakeCredentialShape(16384))}
    # 60 % / 30 % / 10 % as stored; a single 16384-iteration user hides among ~400 unknown names.
    assert 2250 <= counts[4096] <= 2550 and 1050 <= counts[8192] <= 1350 and 300 <= counts[16384] <= 500
    assert FakeCredentialShape(4096, 26, BASE36) in picks  # the Kafka-made shape, salt form and all
    # Stable per name and key, and another key draws differently.
    assert picks == [pick_fake_shape(census, SCRAM_SHA_512, n, key=key) for n in names]
    assert picks != [pick_fake_shape(census, SCRAM_SHA_512, n, key=b"j" * 32) for n in names]
    # One more credential of an existing shape moves names only toward that shape, and few of them.
    grown = shape_census([kafka_made] * 6 + [kgov_made] * 4 + [rare], default)
    moved = [(a, b) for a, b in zip(picks, (pick_fake_shape(grown, SCRAM_SHA_512, n, key=key) for n in names),
                                     strict=True) if a != b]
    assert moved and len(moved) < 300 and all(b.iterations == 8192 for _a, b in moved)
    shape = FakeCredentialShape(4096, 26, BASE36)
    fake = fake_credential(SCRAM_SHA_512, "ghost", key=key, shape=shape)
    assert fake.iterations == 4096 and len(fake.salt) == 26 and all(b in BASE36 for b in fake.salt)
    long_salt = fake_credential(SCRAM_SHA_512, "ghost", key=key, shape=FakeCredentialShape(4096, 100))
    assert len(long_salt.salt) == 100
    assert fake_credential(SCRAM_SHA_512, "ghost", key=key, shape=shape) == fake  # stable per name and key
    assert fake_credential(SCRAM_SHA_512, "ghost", key=b"j" * 32, shape=shape).salt != fake.salt


def test_unknown_user_audit_reason_does_not_depend_on_the_proof_length() -> None:
    """The audit trail says "unknown user" whatever the client sent as proof (it used to say
    "Invalid client credentials" when the proof had the wrong length)."""
    server = ScramServer(SCRAM_SHA_256, lookup_for({}))
    first = server.step(b"n,,n=ghost,r=abc")
    assert isinstance(first, Challenge)
    nonce = first.data.decode().split(",")[0][2:]
    result = server.step(f"c=biws,r={nonce},p=YWJj".encode())
    assert isinstance(result, Failure) and result.data == b"e=invalid-proof"
    assert "Invalid user credentials" in result.reason


@pytest.mark.parametrize(
    "kwargs",
    [
        {"extensions": {"x": "1,tokenauth=true"}},
        {"extensions": {"bad-key": "1"}},
        {"extensions": {"x": ""}},
        {"nonce": "abc,r=forged"},
    ],
)
def test_client_refuses_extensions_or_nonce_that_would_add_attributes(kwargs) -> None:
    with pytest.raises(ScramError):
        ScramClient(SCRAM_SHA_256, "user", "pw", **kwargs)


def test_the_fake_credential_is_derived_for_known_names_too() -> None:
    """The first answer does the same work whether or not the name exists."""
    cred = derive_credential(SCRAM_SHA_256, "pw", iterations=4096)
    asked: list[tuple[str, bool]] = []

    def unknown(name: str, token_auth: bool) -> ScramCredential:
        asked.append((name, token_auth))
        return cred

    for name in ("known", "ghost"):
        ScramServer(SCRAM_SHA_256, lookup_for({"known": cred}), unknown=unknown).step(
            f"n,,n={name},r=abc".encode()
        )
    assert asked == [("known", False), ("ghost", False)]


def test_a_salted_password_cache_spares_pbkdf2_on_later_logins_and_only_for_its_salt(monkeypatch) -> None:
    """The gateway logs in upstream once per client connection, on its event loop: with the credential's
    SaltedPasswordCache only the first login runs PBKDF2. Each later one still proves itself to the real
    server (fresh nonces) and checks the server's signature; a new salt (the password changed upstream)
    runs PBKDF2 again, and a wrong cached entry cannot be made to pass."""
    from sasl.scram import SaltedPasswordCache, ScramMechanism

    derivations: list[int] = []
    original = ScramMechanism.salted_password

    def counting(self, password: str, salt: bytes, iterations: int) -> bytes:
        derivations.append(iterations)
        return original(self, password, salt, iterations)

    cred = derive_credential(SCRAM_SHA_512, "svc-password", iterations=16384)
    rotated = derive_credential(SCRAM_SHA_512, "svc-password", iterations=16384)  # a new salt
    changed = derive_credential(SCRAM_SHA_512, "new-password", iterations=16384)
    monkeypatch.setattr(ScramMechanism, "salted_password", counting)
    cache = SaltedPasswordCache()
    for _ in range(3):
        client = ScramClient(SCRAM_SHA_512, "svc", "svc-password", salted_cache=cache)
        result = run(ScramServer(SCRAM_SHA_512, lookup_for({"svc": cred})), client)
        assert isinstance(result, Success)
        client.verify_server_final(result.data)
    assert derivations == [16384]
    result = run(ScramServer(SCRAM_SHA_512, lookup_for({"svc": rotated})),
                 ScramClient(SCRAM_SHA_512, "svc", "svc-password", salted_cache=cache))
    assert isinstance(result, Success) and derivations == [16384, 16384]
    refused = run(ScramServer(SCRAM_SHA_512, lookup_for({"svc": changed})),
                  ScramClient(SCRAM_SHA_512, "svc", "svc-password", salted_cache=cache))
    assert isinstance(refused, Failure)
