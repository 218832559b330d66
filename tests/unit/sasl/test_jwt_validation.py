"""Bearer JWT validation: every rejection of the issue's item 3 has its own test."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jose import jwt

from sasl.issuer import generate_signing_key, jwks
from sasl.jwt_validation import JwkChoice, JwksCache, JwtValidator, ValidationPolicy
from sasl.oauthbearer import TokenValidationError

NOW = 1_800_000_000
RSA = generate_signing_key("RS256", 0)
EC = generate_signing_key("ES256", 0)
OTHER = generate_signing_key("RS256", 0)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def claims(**over: Any) -> dict[str, Any]:
    base = {
        "iss": "kgov",
        "aud": "kafka",
        "sub": "worker-1",
        "iat": NOW,
        "exp": NOW + 600,
        "scope": "kafka read",
    }
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def sign(key=RSA, headers: dict[str, Any] | None = None, **over: Any) -> str:
    h = {"kid": key.kid}
    h.update(headers or {})
    return jwt.encode(claims(**over), key.private_pem, algorithm=key.alg, headers=h)


def raw_token(header: dict[str, Any], payload: dict[str, Any], signature: bytes = b"") -> str:
    return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}.{b64(signature)}"


class Fetcher:
    def __init__(self, *keys) -> None:
        self.keys = list(keys)
        self.calls = 0

    def __call__(self) -> dict[str, Any]:
        self.calls += 1
        return jwks(self.keys)


class Monotonic:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(fetcher: Fetcher | None = None, mono: Monotonic | None = None, now: float = NOW, **policy: Any):
    fetcher = fetcher or Fetcher(RSA, EC)
    mono = mono or Monotonic()
    cache = JwksCache(fetcher, refresh_s=3600, unknown_kid_refresh_s=60, monotonic=mono)
    pol = {"issuer": "kgov", "audience": "kafka"}
    pol.update(policy)
    return JwtValidator(cache, ValidationPolicy(**pol), now_s=lambda: now), fetcher, mono


def rejects(validator: JwtValidator, token: str, reason: str) -> None:
    with pytest.raises(TokenValidationError) as info:
        validator.validate(token)
    assert reason in info.value.reason
    assert info.value.status in ("invalid_token", "insufficient_scope")


@pytest.mark.parametrize("key", [RSA, EC])
def test_valid_token(key) -> None:
    v, _, _ = make()
    result = v.validate(sign(key))
    assert result.principal_name == "worker-1"
    assert result.scopes == {"kafka", "read"}
    assert result.expiry_ms == (NOW + 600) * 1000


def test_principal_and_scope_claims_configurable() -> None:
    v, _, _ = make(principal_claim="client_id", scope_claim="scp", required_scopes=frozenset({"a"}))
    assert v.validate(sign(client_id="svc", scp=["a", "b"])).principal_name == "svc"
    rejects(v, sign(client_id="svc", scp=["b"]), "lacks required scope")
    rejects(v, sign(scp=["a"]), "no principal claim 'client_id'")


def test_a_scope_string_is_split_on_spaces_only() -> None:
    """RFC 9068 §2.2.3: space-separated scope-tokens (SP only, RFC 6749 §3.3); a list holds one scope
    per element, as in Kafka."""
    v, _, _ = make(required_scopes=frozenset({"admin"}))
    assert v.validate(sign(scope="kafka  admin")).scopes == {"kafka", "admin"}
    rejects(v, sign(scope="kafka\tadmin"), "lacks required scope")
    rejects(v, sign(scope="kafka\nadmin"), "lacks required scope")
    rejects(v, sign(scope=["kafka admin"]), "lacks required scope")
    assert v.validate(sign(scope=["kafka", "admin"])).scopes == {"kafka", "admin"}


@pytest.mark.parametrize("alg", ["none", "None", "NONE", "nOnE"])
def test_alg_none_rejected(alg: str) -> None:
    v, _, _ = make()
    rejects(v, raw_token({"alg": alg, "kid": RSA.kid}, claims()), "is not allowed")
    rejects(v, raw_token({"alg": alg, "kid": RSA.kid}, claims(), b"x"), "is not allowed")


@pytest.mark.parametrize("alg", ["HS256", "HS512"])
def test_hmac_signed_with_public_key_rejected(alg: str) -> None:
    v, _, _ = make()
    public_pem = json.dumps(RSA.public_jwk).encode()
    header = {"alg": alg, "kid": RSA.kid, "typ": "JWT"}
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims()).encode())}"
    mac = hmac.new(public_pem, signing_input.encode(), getattr(hashlib, "sha" + alg[2:])).digest()
    rejects(v, f"{signing_input}.{b64(mac)}", "is not allowed")


def test_alg_confusion_between_asymmetric_families_rejected() -> None:
    v, _, _ = make()
    # An ES256 token that names the RSA key's kid: the JWK type does not fit the algorithm.
    rejects(v, sign(EC, headers={"kid": RSA.kid}), "does not fit algorithm")
    # RS384 against a JWK declared for RS256.
    token = jwt.encode(claims(), RSA.private_pem, algorithm="RS384", headers={"kid": RSA.kid})
    rejects(v, token, "JWK is for 'RS256'")


def test_bad_signature_rejected() -> None:
    v, _, _ = make(Fetcher(RSA))
    forged = sign(OTHER, headers={"kid": RSA.kid})
    rejects(v, forged, "signature verification failed")
    head, payload, _sig = sign().split(".")
    tampered = b64(json.dumps(claims(sub="admin")).encode())
    rejects(v, f"{head}.{tampered}.{_sig}", "signature verification failed")
    rejects(v, f"{head}.{payload}.", "no signature")


def test_expired_rejected_with_skew() -> None:
    v, _, _ = make()
    rejects(v, sign(exp=NOW - 31, iat=NOW - 600), "expired")
    assert v.validate(sign(exp=NOW - 29, iat=NOW - 600)).principal_name == "worker-1"  # within the 30 s skew
    rejects(v, sign(exp=NOW - 30, iat=NOW - 600), "expired")  # jose4j: expired when now - skew >= exp
    rejects(v, sign(exp=None), "no numeric 'exp'")
    rejects(v, sign(exp="soon"), "no numeric 'exp'")


def test_not_yet_valid_rejected() -> None:
    v, _, _ = make()
    rejects(v, sign(nbf=NOW + 31), "'nbf' is in the future")
    assert v.validate(sign(nbf=NOW + 29)).principal_name == "worker-1"
    rejects(v, sign(iat=NOW + 120), "'iat' is in the future")
    rejects(v, sign(iat=None), "no 'iat'")


def test_issuer_and_audience() -> None:
    v, _, _ = make()
    rejects(v, sign(iss="evil"), "issuer does not match")
    rejects(v, sign(aud="other"), "audience does not match")
    assert v.validate(sign(aud=["other", "kafka"])).principal_name == "worker-1"
    open_v, _, _ = make(issuer=None, audience=None)
    assert open_v.validate(sign(iss="x", aud="y")).principal_name == "worker-1"


@pytest.mark.parametrize("param", ["jku", "x5u", "jwk", "x5c", "crit"])
def test_key_pointing_headers_rejected(param: str) -> None:
    v, _, _ = make()
    value: Any = {
        "jku": "https://evil.example/jwks.json",
        "x5u": "https://evil.example/cert",
        "jwk": OTHER.public_jwk,
        "x5c": ["MIIB"],
        "crit": ["exp"],
    }[param]
    rejects(v, sign(headers={param: value}), f"parameter '{param}' is not accepted")


def test_kid_tricks_rejected() -> None:
    fetcher = Fetcher(RSA)
    v, _, _ = make(fetcher)
    rejects(v, sign(headers={"kid": "../../../../dev/null"}), "no key in the JWKS")
    rejects(v, sign(headers={"kid": "x" * 1001}), "no usable 'kid'")
    rejects(v, sign(headers={"kid": ""}), "no usable 'kid'")
    rejects(v, sign(headers={"kid": 7}), "no usable 'kid'")


def test_unknown_kid_refresh_is_rate_limited() -> None:
    fetcher = Fetcher(RSA)
    mono = Monotonic()
    v, _, _ = make(fetcher, mono)
    assert v.validate(sign()).principal_name == "worker-1"
    assert fetcher.calls == 1
    unknown = sign(OTHER)
    rejects(v, unknown, "no key in the JWKS")
    assert fetcher.calls == 2  # one expedited refresh for the unknown kid
    for _ in range(5):
        rejects(v, unknown, "no key in the JWKS")
    assert fetcher.calls == 2  # ... and no more within the interval
    fetcher.keys.append(OTHER)  # the provider rotates in a new key
    mono.t += 61
    assert v.validate(unknown).principal_name == "worker-1"
    assert fetcher.calls == 3


def test_hourly_refresh_and_failed_fetch_keeps_keys() -> None:
    fetcher = Fetcher(RSA)
    mono = Monotonic()
    v, _, _ = make(fetcher, mono)
    v.validate(sign())
    mono.t += 3599
    v.validate(sign())
    assert fetcher.calls == 1
    mono.t += 2

    def broken() -> dict[str, Any]:
        raise OSError("provider down")

    v._keys._fetch = broken  # a fault we cannot cause with a real provider in a unit test
    assert v.validate(sign()).principal_name == "worker-1"


def test_malformed_tokens_rejected() -> None:
    v, _, _ = make()
    for token, reason in [
        ("abc", "three segments"),
        ("a.b.c.d", "three segments"),
        ("!!!.e30.e30", "malformed JWT header"),
        (f"{b64(b'[1]')}.e30.e30", "malformed JWT header"),
        ("x" * 20_000, "too long"),
    ]:
        rejects(v, token, reason)
    head = b64(json.dumps({"alg": "RS256", "kid": RSA.kid}).encode())
    rejects(v, f"{head}.e30.@@@", "signature verification failed")


def test_private_material_in_jwks_refused() -> None:
    leaky = dict(RSA.public_jwk, d="secret")
    v, _, _ = make(lambda: {"keys": [leaky]})
    rejects(v, sign(), "private key material")


def test_verified_token_cache_rechecks_claims_and_forgets_on_refresh(monkeypatch: pytest.MonkeyPatch) -> None:
    fetcher, mono, now = Fetcher(RSA), Monotonic(), [float(NOW)]
    cache = JwksCache(fetcher, refresh_s=3600, unknown_kid_refresh_s=60, monotonic=mono)
    v = JwtValidator(cache, ValidationPolicy(issuer="kgov", audience="kafka"), now_s=lambda: now[0])
    token = sign()
    assert v.validate(token).principal_name == "worker-1"
    calls = []
    original = JwkChoice.verifier
    # count signature verifications
    monkeypatch.setattr(JwkChoice, "verifier", lambda self, alg: calls.append(alg) or original(self, alg))
    assert v.validate(token).principal_name == "worker-1"
    assert calls == []  # served from the verified-token cache
    now[0] = NOW + 631
    rejects(v, token, "expired")  # claims are checked on every hit
    now[0] = NOW
    fetcher.keys = []  # the provider drops the key; the next refresh forgets verified tokens
    mono.t += 3601
    rejects(v, token, "no key in the JWKS")


@given(st.text(max_size=300))
def test_validator_only_ever_raises_token_validation_error(token: str) -> None:
    v, _, _ = make()
    with pytest.raises(TokenValidationError):
        v.validate(token)


@given(
    st.dictionaries(
        st.sampled_from(["alg", "kid", "typ", "jku", "crit", "x5c"]),
        st.one_of(st.none(), st.integers(), st.text(max_size=20), st.lists(st.integers(), max_size=2)),
    )
)
def test_arbitrary_headers_with_a_real_signature_never_crash(header: dict) -> None:
    v, _, _ = make()
    token = raw_token(header, claims(), b"\x00" * 256)
    with pytest.raises(TokenValidationError):
        v.validate(token)


# -- review fixes (rev-sasl) --------------------------------------------------------------------


def test_a_new_kid_per_attempt_does_not_fetch_per_attempt() -> None:
    """Kafka limits expedited refreshes per kid only; an attacker inventing kids must not turn every
    attempt into a fetch from the identity provider."""
    fetcher = Fetcher(RSA)
    mono = Monotonic()
    cache = JwksCache(
        fetcher, refresh_s=3600, unknown_kid_refresh_s=60, unknown_kid_min_interval_s=10, monotonic=mono
    )
    v = JwtValidator(cache, ValidationPolicy(issuer="kgov", audience="kafka"), now_s=lambda: NOW)
    for i in range(40):
        rejects(v, sign(headers={"kid": f"invented-{i}"}), "no key in the JWKS")
    assert fetcher.calls == 2  # the start-up load and one expedited refresh
    mono.t += 10
    fetcher.keys.append(OTHER)  # a real rotation still gets through once the interval has passed
    assert v.validate(sign(OTHER)).principal_name == "worker-1"
    assert fetcher.calls == 3


def _rsa_jwk_key(bits: int, kid: str, alg: str = "RS256") -> tuple[Any, dict[str, Any]]:
    from cryptography.hazmat.primitives.asymmetric import rsa

    private = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    numbers = private.public_key().public_numbers()

    def uint(n: int) -> str:
        return b64(n.to_bytes((n.bit_length() + 7) // 8, "big"))

    return private, {"kty": "RSA", "kid": kid, "alg": alg, "use": "sig", "n": uint(numbers.n), "e": uint(numbers.e)}


def test_rsa_keys_under_2048_bits_refused() -> None:
    from cryptography.hazmat.primitives import serialization

    private, jwk = _rsa_jwk_key(1024, "weak")
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    v, _, _ = make(lambda: {"keys": [jwk]})
    rejects(v, jwt.encode(claims(), pem, algorithm="RS256", headers={"kid": "weak"}), "under 2048")
    v2, _, _ = make(lambda: {"keys": [dict(jwk, n="")]})
    rejects(v2, jwt.encode(claims(), pem, algorithm="RS256", headers={"kid": "weak"}), "RSA modulus")


@pytest.mark.parametrize(
    "payload",
    [
        b'{"iss":"kgov","aud":"kafka","sub":"w","iat":1800000000,"exp":NaN}',
        b'{"iss":"kgov","aud":"kafka","sub":"w","iat":1800000000,"exp":Infinity}',
        b'{"iss":"kgov","aud":"kafka","sub":"w","iat":1800000000,"exp":1e400}',
        b'{"iss":"kgov","aud":"kafka","sub":"w","iat":NaN,"exp":1800000600}',
    ],
)
def test_non_finite_numbers_refused(payload: bytes) -> None:
    """A NaN `exp` compares false with everything: it would never expire (and crashed the lifetime)."""
    from jose import jws

    v, _, _ = make()
    token = jws.sign(payload, RSA.private_pem, headers={"kid": RSA.kid}, algorithm="RS256")
    rejects(v, token, "malformed JWT payload")


def test_rsassa_pss_tokens_verify() -> None:
    """PS256 is on the allow-list (jose4j accepts it); python-jose cannot verify it, so every PS token
    used to fail as a bad signature."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    private, jwk = _rsa_jwk_key(2048, "pss", alg="PS256")
    v, _, _ = make(lambda: {"keys": [jwk]})
    signing_input = f"{b64(json.dumps({'alg': 'PS256', 'kid': 'pss'}).encode())}.{b64(json.dumps(claims()).encode())}"

    def pss(salt: int) -> str:
        signature = private.sign(
            signing_input.encode(), padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=salt), hashes.SHA256()
        )
        return f"{signing_input}.{b64(signature)}"

    assert v.validate(pss(32)).principal_name == "worker-1"
    head, _payload, sig = pss(32).split(".")
    rejects(v, f"{head}.{b64(json.dumps(claims(sub='admin')).encode())}.{sig}", "signature verification failed")
    rejects(v, pss(0), "signature verification failed")  # RFC 7518 §3.5: salt = hash length


@pytest.mark.parametrize("name", [" admin", "admin ", "bob\nPrincipal = User:admin is Allowed", "x\x00y", "a\x85b"])
def test_principal_with_spaces_or_control_characters_refused(name: str) -> None:
    """Kafka would trim " admin" into User:admin; a newline would forge a line in the authorizer log."""
    v, _, _ = make(principal_claim="preferred_username")
    rejects(v, sign(preferred_username=name), "control characters")
    assert v.validate(sign(preferred_username="Zoë Smith")).principal_name == "Zoë Smith"


def test_expected_audience_is_a_comma_separated_list_as_kafka() -> None:
    v, _, _ = make(audience="kafka, kgov-gateway")
    assert v.validate(sign(aud="kgov-gateway")).principal_name == "worker-1"
    assert v.validate(sign(aud=["x", "kafka"])).principal_name == "worker-1"
    rejects(v, sign(aud="kafka, kgov-gateway"), "audience does not match")
    rejects(v, sign(aud=["x", 7]), "audience does not match")


@pytest.mark.parametrize(
    ("now", "exp", "skew", "valid"),
    [
        (NOW + 0.999, NOW, 0, False),  # expired AT exp, not after it (jose4j: now - skew >= exp)
        (NOW - 0.001, NOW, 0, True),
        (NOW + 29.999, NOW, 30, True),
        (NOW + 30.0, NOW, 30, False),
        (NOW + 0.5, NOW + 0.9, 0, False),  # the claim is read as whole seconds (longValue)
        (NOW - 0.5, NOW + 0.9, 0, True),
    ],
)
def test_exp_boundary_is_jose4j_numeric_date(now: float, exp: float, skew: int, valid: bool) -> None:
    """Kafka's BrokerJwtValidator delegates `exp` to jose4j's NumericDateValidator: NumericDate.now()
    is currentTimeMillis / 1000, the claim Number.longValue(), and the token is refused when
    `now - allowedClockSkewSeconds >= exp`."""
    v, _, _ = make(now=now, clock_skew_s=skew)
    token = sign(exp=exp, iat=NOW - 60)
    if valid:
        assert v.validate(token).expiry_ms == int(exp) * 1000  # getValueInMillis: whole seconds
    else:
        rejects(v, token, "JWT expired")


def _kidless(key=RSA, **over: Any) -> str:
    return jwt.encode(claims(**over), key.private_pem, algorithm=key.alg)


def test_kidless_token_verifies_with_the_only_fitting_key() -> None:
    """jose4j's VerificationJwkSelector (Kafka's RefreshingHttpsJwksVerificationKeyResolver) picks
    a key for a JWS without `kid` by type, use, key_ops, alg and curve; one fitting key is used."""
    assert "kid" not in jwt.get_unverified_header(_kidless())
    v, fetcher, _ = make(Fetcher(RSA, EC))  # one RSA and one EC key: each token has one candidate
    assert v.validate(_kidless(RSA)).principal_name == "worker-1"
    assert v.validate(_kidless(EC)).principal_name == "worker-1"
    # `"kid": null` is no kid for jose4j either (getKeyIdHeaderValue answers null)
    assert v.validate(sign(headers={"kid": None})).principal_name == "worker-1"
    assert fetcher.calls == 1
    forged = jwt.encode(claims(), OTHER.private_pem, algorithm="RS256")
    rejects(v, forged, "signature verification failed")  # the one candidate, and only that one


def test_kidless_token_refused_when_several_keys_fit() -> None:
    """Kafka would verify with the first fitting key in JWKS order only; kgov refuses instead of
    depending on the provider's key order, and never tries the keys in turn."""
    v, fetcher, _ = make(Fetcher(RSA, OTHER))
    rejects(v, _kidless(RSA), "2 keys in the JWKS fit RS256")
    rejects(v, _kidless(OTHER), "2 keys in the JWKS fit RS256")
    assert fetcher.calls == 1  # no refresh either


def test_kidless_selection_narrows_by_alg_use_key_ops_and_thumbprint() -> None:
    rsa, other = dict(RSA.public_jwk), dict(OTHER.public_jwk)
    cases = [
        [rsa, dict(other, alg="RS384")],  # other alg
        [rsa, dict(other, use="enc")],  # not a signature key
        [rsa, dict(other, key_ops=["encrypt"])],  # not for verify
        [{k: x for k, x in rsa.items() if k != "kid"}, EC.public_jwk],  # a JWK without kid
    ]
    for keys in cases:
        v, _, _ = make(lambda keys=keys: {"keys": keys})
        assert v.validate(_kidless(RSA)).principal_name == "worker-1"
    # a header thumbprint rules out keys that state another one
    v, _, _ = make(lambda: {"keys": [dict(rsa, x5t="AAAA"), dict(other, x5t="BBBB")]})
    token = jwt.encode(claims(), RSA.private_pem, algorithm="RS256", headers={"x5t": "AAAA"})
    assert v.validate(token).principal_name == "worker-1"
    rejects(v, jwt.encode(claims(), RSA.private_pem, algorithm="RS256", headers={"x5t": "CCCC"}), "no key")


def test_kidless_token_keeps_every_other_check() -> None:
    v, fetcher, _ = make(Fetcher(EC))
    rejects(v, _kidless(RSA), "no key in the JWKS fits RS256")
    assert fetcher.calls == 1  # no kid: nothing to expedite a refresh for
    # HS256 "signed" with the public key as secret: the allow-list refuses it before key selection
    secret = json.dumps(RSA.public_jwk).encode()
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims()).encode())
    mac = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    rejects(v, f"{head}.{body}.{b64(mac)}", "is not allowed")
    rejects(v, raw_token({"alg": "none"}, claims()), "is not allowed")
    # the sole fitting key must still be big enough and fit exactly (crv stated, alg equal)
    from cryptography.hazmat.primitives import serialization

    private, weak = _rsa_jwk_key(1024, "weak")
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    v2, _, _ = make(lambda: {"keys": [weak]})
    rejects(v2, jwt.encode(claims(), pem, algorithm="RS256"), "under 2048")
    v3, _, _ = make(lambda: {"keys": [dict(RSA.public_jwk, alg="RS384")]})
    rejects(v3, _kidless(RSA), "no key in the JWKS fits RS256")
    v4, _, _ = make(lambda: {"keys": [{k: x for k, x in EC.public_jwk.items() if k != "crv"}]})
    rejects(v4, _kidless(EC), "curve does not fit")


def test_keys_sharing_a_kid_are_told_apart_as_jose4j_does() -> None:
    """RFC 7517 §4.5 lets keys of different types share a `kid`; providers also publish an encryption
    key beside a signing key under one kid. jose4j's VerificationJwkSelector (Kafka's resolver) filters
    the kid's keys by the algorithm's key type and `use` before it picks one; kgov took the first key
    with the kid and refused the token when that one did not fit."""
    rsa, other = dict(RSA.public_jwk), dict(OTHER.public_jwk)
    ec_same_kid = dict(EC.public_jwk, kid=RSA.kid)
    v, _, _ = make(lambda: {"keys": [rsa, ec_same_kid]})
    assert v.validate(sign(EC, headers={"kid": RSA.kid})).principal_name == "worker-1"
    assert v.validate(sign(RSA)).principal_name == "worker-1"
    v, _, _ = make(lambda: {"keys": [dict(other, kid=RSA.kid, use="enc"), rsa]})
    assert v.validate(sign(RSA)).principal_name == "worker-1"
    # the signing key is the one used: a token signed with the encryption key's private half fails
    rejects(v, sign(OTHER, headers={"kid": RSA.kid}), "signature verification failed")
    # several keys fit: the first, as jose4j (`select` answers the first of the filtered list)
    v, _, _ = make(lambda: {"keys": [rsa, dict(other, kid=RSA.kid)]})
    assert v.validate(sign(RSA)).principal_name == "worker-1"
    rejects(v, sign(OTHER, headers={"kid": RSA.kid}), "signature verification failed")
    # none fits: refused with the reason of the first key with that kid, and no refresh
    fetches: list[int] = []
    v, _, _ = make(lambda: fetches.append(1) or {"keys": [dict(rsa, use="enc")]})
    rejects(v, sign(RSA), "not a signature key")
    assert len(fetches) == 1


def test_kid_path_refuses_a_key_not_for_verify() -> None:
    v, _, _ = make(lambda: {"keys": [dict(RSA.public_jwk, key_ops=["sign"])]})
    rejects(v, sign(), "key_ops does not allow verify")


@pytest.mark.parametrize("claim", ["nbf", "iat"])
@pytest.mark.parametrize(
    ("now", "value", "skew", "valid"),
    [
        (NOW + 0.5, NOW + 0.9, 0, True),  # both read as second NOW (jose4j NumericDate)
        (NOW + 0.999, NOW + 1, 0, False),  # now is still second NOW, before second NOW + 1
        (NOW + 1.0, NOW + 1, 0, True),
        (NOW + 1.5, NOW + 1.7, 0, True),  # the fraction of the claim does not count
        (NOW + 0.5, NOW + 30.7, 30, True),  # jose4j: refused only when now + skew < value
        (NOW + 0.999, NOW + 31, 30, False),
        (NOW + 1.0, NOW + 31, 30, True),
    ],
)
def test_nbf_and_iat_boundaries_are_jose4j_numeric_dates(
    claim: str, now: float, value: float, skew: int, valid: bool
) -> None:
    """jose4j's NumericDateValidator refuses `nbf` when `NumericDate.now() + skew < nbf`, both in whole
    seconds (now = milliseconds / 1000, the claim its longValue()); kgov applies the same to `iat`."""
    v, _, _ = make(now=now, clock_skew_s=skew)
    token = sign(**{claim: value}, exp=NOW + 600)
    if valid:
        assert v.validate(token).principal_name == "worker-1"
    else:
        rejects(v, token, f"JWT '{claim}' is in the future")


@pytest.mark.parametrize(("exp", "skew"), [(NOW, 30), (NOW + 0.9, 30), (NOW + 600, 0)])
def test_validated_token_says_until_when_the_validator_accepts_it(exp: float, skew: int) -> None:
    v, _, _ = make(now=NOW - 60, clock_skew_s=skew)
    token = v.validate(sign(exp=exp, iat=NOW - 120))
    assert token.expiry_ms == int(exp) * 1000
    assert token.accepted_until_ms == (int(exp) + skew) * 1000
    end_s = token.accepted_until_ms / 1000
    assert make(now=end_s - 0.001, clock_skew_s=skew)[0].validate(sign(exp=exp, iat=NOW - 120)).principal_name
    rejects(make(now=end_s, clock_skew_s=skew)[0], sign(exp=exp, iat=NOW - 120), "JWT expired")


INT64_MAX = 2**63 - 1


@pytest.mark.parametrize("exp", [INT64_MAX // 1000 + 1, 2**63, 10**20, 1e19])
def test_an_exp_whose_milliseconds_do_not_fit_in_a_long_is_refused(exp: float) -> None:
    # jose4j's NumericDate.getValueInMillis (Kafka's BrokerJwtValidator reads `exp` with it) throws when
    # seconds * 1000 overflows a long, so Kafka refuses such a token. Accepted, its session lifetime
    # (KIP-368) would not fit SaslAuthenticateResponse's int64 session_lifetime_ms either.
    v, _, _ = make()
    rejects(v, sign(exp=exp), "JWT 'exp' is out of range")


def test_the_largest_exp_kafka_takes_gives_lifetimes_that_fit_in_a_long() -> None:
    v, _, _ = make(clock_skew_s=300)
    token = v.validate(sign(exp=INT64_MAX // 1000))
    assert token.expiry_ms == INT64_MAX // 1000 * 1000
    assert token.accepted_until_ms is not None and token.accepted_until_ms <= INT64_MAX


def test_a_stale_jwks_is_refreshed_by_one_caller_while_the_others_use_the_keys_they_have() -> None:
    import threading

    gate, entered = threading.Event(), threading.Event()

    class SlowFetcher(Fetcher):
        slow = False

        def __call__(self) -> dict[str, Any]:
            if self.slow:
                entered.set()
                assert gate.wait(10)
            return super().__call__()

    fetcher = SlowFetcher(RSA, EC)
    v, _, mono = make(fetcher)
    assert v.validate(sign(RSA)).principal_name == "worker-1"  # first load
    mono.t += 3601  # stale
    fetcher.slow = True
    refresher = threading.Thread(target=lambda: v.validate(sign(RSA)))
    refresher.start()
    assert entered.wait(5)
    # The provider hangs for this refresh; other logins are answered from the keys already held.
    done = threading.Event()
    threading.Thread(target=lambda: (v.validate(sign(EC)), done.set())).start()
    assert done.wait(2), "a validation waited for another caller's JWKS refresh"
    gate.set()
    refresher.join(5)
    assert not refresher.is_alive()


@pytest.mark.parametrize(
    ("times", "refused"),
    [
        ({"iat": NOW, "exp": NOW - 10}, "iat"),  # exp before iat, still inside the 30 s skew
        ({"iat": NOW, "exp": NOW}, "iat"),  # as Kafka's validateTimeConsistency; jose4j lets it pass
        ({"iat": NOW + 0.6, "exp": NOW + 0.3}, "iat"),  # the same whole second: jose4j lets it pass
        ({"iat": NOW - 60, "nbf": NOW + 20, "exp": NOW + 10}, "nbf"),  # exp before nbf
        ({"iat": NOW - 60, "nbf": NOW + 10, "exp": NOW + 10}, "nbf"),
        ({"iat": NOW, "exp": NOW + 0.5}, None),  # after iat as given
        ({"iat": NOW - 60, "nbf": NOW, "exp": NOW + 1}, None),
    ],
)
def test_exp_not_after_iat_or_nbf_is_refused(times: dict[str, float], refused: str | None) -> None:
    """A token whose lifetime ends before (or when) it starts was never valid. Kafka's unsecured
    validator refuses `exp <= iat`; jose4j (the JWKS path) `exp` before `iat` or `nbf` in whole
    seconds. kgov refuses the union of both, on the claims as given; each refused case above passed
    every other check (its `exp` is inside the skew, `iat` and `nbf` not in the future)."""
    v, _, _ = make()
    token = sign(**times)
    if refused is None:
        assert v.validate(token).principal_name == "worker-1"
    else:
        rejects(v, token, f"JWT 'exp' is not after its '{refused}'")


def test_a_reserved_principal_is_refused() -> None:
    """kgov's admin user, with an external identity provider: its name would make the token a super user."""
    v, _, _ = make(reserved_principals=frozenset({"admin"}))
    rejects(v, sign(sub="admin"), "names kgov's admin user")
    assert v.validate(sign(sub="admin2")).principal_name == "admin2"
    assert v.validate(sign(sub="Admin")).principal_name == "Admin"  # Kafka principals are case-sensitive
    plain, _, _ = make()
    assert plain.validate(sign(sub="admin")).principal_name == "admin"
