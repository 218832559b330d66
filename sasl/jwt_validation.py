"""Bearer JWT validation against a JWKS (KIP-768 semantics), with python-jose key objects.

What is refused, each with its own reason for the audit trail (the client only sees `invalid_token`):
- any algorithm outside the asymmetric allow-list: `none` in every casing, HS256/384/512 (so an
  HMAC token "signed" with our public key can never verify), unknown names;
- header parameters that point at keys (`jku`, `x5u`, `jwk`, `x5c`) or demand extensions (`crit`):
  keys come only from the configured JWKS, never from the token;
- a `kid` that is not a short string, or that the JWKS does not hold after at most one
  rate-limited refresh; a JWK whose `kty`/`alg`/`use`/`key_ops` does not fit the token's `alg`, and
  RSA keys under 2048 bits (RFC 7518 §3.3; jose4j, which Kafka uses, refuses them too);
- a token without `kid` unless exactly one JWKS key fits it (see `_kidless_choice`);
- a bad signature; missing, expired or out-of-range `exp` (its milliseconds must fit in a long, as
  jose4j's NumericDate.getValueInMillis requires), future `nbf`/`iat` (all in whole seconds, as jose4j's
  NumericDateValidator compares them, and with the configured skew); an `exp` not after `iat` or
  `nbf` (a token that was never valid, see `_check_claims`);
  wrong `iss` or `aud` when configured; a missing principal claim; missing required scopes;
- a principal with surrounding whitespace or control characters (line-based logs print it as is);
- JSON nested deeper than Python's json parses (its RecursionError is a malformed token, not a crash);
- JSON numbers that are not finite (`NaN`, `Infinity`, `1e400`): Python's json would read them, and a
  NaN `exp` compares false with everything, so it would never expire.

The JWKS cache refreshes hourly; an unknown `kid` triggers at most one refresh per
`unknown_kid_refresh_s` per kid (Kafka's RefreshingHttpsJwks: 60 s, at most 16 kids remembered,
kids over 1000 characters ignored). Kafka schedules that refresh in the background; here it runs in
the validating thread, so on top of the per-kid limit all unknown-kid refreshes together are spaced
at least `unknown_kid_min_interval_s` apart: a client inventing a new `kid` per attempt cannot make
every attempt cost a fetch from the identity provider. Fetches never overlap.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import math
import threading
import time
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import httpx
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from jose import jwk as jose_jwk
from jose.exceptions import JOSEError
from jose.utils import base64url_decode

from authz.clock import elapsed_clock
from sasl.oauthbearer import TokenValidationError, ValidatedToken

ALLOWED_ALGORITHMS: Final = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"}
)
_KTY_FOR_ALG: Final = {"RS": "RSA", "PS": "RSA", "ES": "EC"}
_CRV_FOR_ALG: Final = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}
_FORBIDDEN_HEADERS: Final = ("jku", "x5u", "jwk", "x5c", "crit")
MAX_KID_LENGTH: Final = 1000
MAX_REMEMBERED_MISSING_KIDS: Final = 16
MAX_TOKEN_LENGTH: Final = 16 * 1024
MIN_RSA_BITS: Final = 2048
INT64_MAX: Final = 2**63 - 1
# The latest `exp` whose milliseconds fit in a Java long (jose4j's NumericDate.canConvertToMillis).
MAX_EXP_S: Final = INT64_MAX // 1000


JwksFetcher = Callable[[], Mapping[str, Any]]


def http_jwks_fetcher(url: str, *, timeout_s: float = 10.0) -> JwksFetcher:
    """Fetches an external identity provider's JWKS. Only http(s) URLs; the URL is configuration,
    never taken from a token."""
    if not url.startswith(("https://", "http://")):
        raise ValueError(f"jwks_url must be an http(s) URL, got {url!r}")

    def fetch() -> Mapping[str, Any]:
        response = httpx.get(url, timeout=timeout_s, follow_redirects=False)
        response.raise_for_status()
        body = response.json()
        if not isinstance(body, dict) or not isinstance(body.get("keys"), list):
            raise ValueError("JWKS response has no 'keys' list")
        return body

    return fetch


class _Verifier(Protocol):
    def verify(self, msg: bytes, sig: bytes) -> bool: ...


class _PssKey:
    """RSASSA-PSS (PS256/384/512, RFC 7518 §3.5), which python-jose does not implement: MGF1 with
    the same hash, salt as long as the hash output."""

    def __init__(self, jwk: Mapping[str, Any], alg: str) -> None:
        self._alg = alg
        self._key = rsa.RSAPublicNumbers(_b64_uint(jwk.get("e")), _b64_uint(jwk.get("n"))).public_key()

    def _hash(self) -> hashes.HashAlgorithm:
        if self._alg == "PS384":
            return hashes.SHA384()
        return hashes.SHA512() if self._alg == "PS512" else hashes.SHA256()

    def verify(self, msg: bytes, sig: bytes) -> bool:
        algorithm = self._hash()
        pss = padding.PSS(mgf=padding.MGF1(self._hash()), salt_length=algorithm.digest_size)
        try:
            self._key.verify(sig, msg, pss, algorithm)
        except InvalidSignature:
            return False
        return True


def _b64_uint(value: Any) -> int:
    if not isinstance(value, str) or not value:
        raise ValueError("JWK integer member missing")
    return int.from_bytes(base64url_decode(value.encode("ascii")), "big")


class JwksCache:
    """An immutable kid -> JWK snapshot, swapped atomically on refresh."""

    def __init__(
        self,
        fetch: JwksFetcher,
        *,
        refresh_s: float = 3600,
        unknown_kid_refresh_s: float = 60,
        unknown_kid_min_interval_s: float = 10,
        monotonic: Callable[[], float] = elapsed_clock,
    ) -> None:
        self._fetch = fetch
        self._refresh_s = refresh_s
        self._unknown_kid_refresh_s = unknown_kid_refresh_s
        self._unknown_kid_min_interval_s = unknown_kid_min_interval_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        # Held for the whole of a fetch: concurrent validations never fetch the same JWKS twice.
        self._fetch_lock = threading.Lock()
        self._snapshot = JwksSnapshot((), {})
        self._loaded_at: float | None = None
        self._missing: OrderedDict[str, float] = OrderedDict()
        self._last_expedited: float | None = None
        self.refresh_count = 0

    def refresh(self) -> None:
        try:
            body = self._fetch()
        except Exception:
            # Keep serving the previous keys; the next lookup retries after the refresh interval.
            self._loaded_at = self._monotonic()
            raise
        keys = tuple(
            dict(item)
            for item in body.get("keys", [])
            if isinstance(item, dict) and isinstance(item.get("kid", ""), str)
        )
        by_kid: dict[str, tuple[int, ...]] = {}
        for index, item in enumerate(keys):
            if "kid" in item:
                by_kid[item["kid"]] = (*by_kid.get(item["kid"], ()), index)
        with self._lock:
            self._snapshot = JwksSnapshot(keys, by_kid)
            self._loaded_at = self._monotonic()
            self.refresh_count += 1

    def _stale(self) -> bool:
        return self._loaded_at is None or self._monotonic() - self._loaded_at >= self._refresh_s

    def ensure_fresh(self) -> None:
        """Fetches the JWKS when it is stale. Only the first load makes callers wait; afterwards one
        caller refreshes while every other one goes on with the keys it has (a provider answering slowly
        must not hold every login thread, e.g. all of the gateway's SASL workers, for the fetch timeout)."""
        if not self._stale():
            return
        if self._loaded_at is None:
            with self._fetch_lock:
                if self._stale():  # another thread may have fetched while we waited
                    with contextlib.suppress(Exception):  # a failed refresh keeps the cached keys
                        self.refresh()
            return
        if not self._fetch_lock.acquire(blocking=False):
            return  # a refresh is under way: the current keys serve meanwhile
        try:
            if self._stale():
                with contextlib.suppress(Exception):
                    self.refresh()
        finally:
            self._fetch_lock.release()

    def _expedite(self, kid: str) -> bool:
        """At most one refresh per kid per interval (remembering a bounded number of kids), and at
        most one for all unknown kids together per `unknown_kid_min_interval_s`."""
        now = self._monotonic()
        with self._lock:
            last = self._missing.get(kid)
            if last is not None and now - last < self._unknown_kid_refresh_s:
                return False
            recent = self._last_expedited
            if recent is not None and now - recent < self._unknown_kid_min_interval_s:
                return False  # not remembered: this kid may trigger the next allowed refresh
            self._last_expedited = now
            self._missing[kid] = now
            self._missing.move_to_end(kid)
            while len(self._missing) > MAX_REMEMBERED_MISSING_KIDS:
                self._missing.popitem(last=False)
        try:
            with self._fetch_lock:
                self.refresh()
        except Exception:
            return False
        return True

    def current(self) -> JwksSnapshot:
        """The keys to verify with now (refreshed first when stale)."""
        self.ensure_fresh()
        return self._snapshot

    def jwk_for(self, kid: str, header: Mapping[str, Any], alg: str) -> JwkChoice | None:
        """The key for a JWS naming `kid` (see `_kid_choice`); one rate-limited refresh when no key
        has that kid."""
        snapshot = self.current()
        found = snapshot.by_kid.get(kid)
        if found is None and len(kid) <= MAX_KID_LENGTH and self._expedite(kid):
            snapshot = self._snapshot
            found = snapshot.by_kid.get(kid)
        return None if found is None else _kid_choice(snapshot, found, header, alg)


class JwksSnapshot:
    """One fetched JWKS: its keys in document order, the positions of the keys with each `kid` (RFC
    7517 §4.5: keys of different types may share one), and the verifiers built from them (built
    lazily, and forgotten with the snapshot on refresh)."""

    def __init__(self, keys: tuple[dict[str, Any], ...], by_kid: dict[str, tuple[int, ...]]) -> None:
        self.keys = keys
        self.by_kid = by_kid
        self._verifiers: dict[tuple[int, str], _Verifier] = {}

    def verifier(self, index: int, alg: str) -> _Verifier:
        cached = self._verifiers.get((index, alg))
        if cached is None:
            jwk = self.keys[index]
            cached = _PssKey(jwk, alg) if alg.startswith("PS") else jose_jwk.construct(dict(jwk), alg)
            self._verifiers[(index, alg)] = cached
        return cached


@dataclass(frozen=True, slots=True)
class JwkChoice:
    """The JWK chosen to verify one token, with the snapshot it came from."""

    snapshot: JwksSnapshot
    index: int

    @property
    def jwk(self) -> dict[str, Any]:
        return self.snapshot.keys[self.index]

    def verifier(self, alg: str) -> _Verifier:
        return self.snapshot.verifier(self.index, alg)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"non-finite JSON number {name}")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("non-finite JSON number")
    return value


def _b64json(segment: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(
            base64url_decode(segment.encode("ascii")),
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
        )
    except (ValueError, UnicodeError, TypeError, RecursionError):
        # RecursionError: nested deeper than Python's json goes, which fits in MAX_TOKEN_LENGTH
        raise TokenValidationError(f"malformed JWT {what}") from None
    if not isinstance(value, dict):
        raise TokenValidationError(f"malformed JWT {what}")
    return value


@dataclass(frozen=True, slots=True)
class ValidationPolicy:
    issuer: str | None
    audience: str | None
    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scopes: frozenset[str] = frozenset()
    clock_skew_s: int = 30
    # Principal names a token may not claim: kgov's own admin user when tokens come from an external
    # identity provider (`CredentialService`), since that name is a super user on every login path.
    reserved_principals: frozenset[str] = frozenset()


class JwtValidator:
    """Validates compact JWS access tokens; `validate(token) -> ValidatedToken` or TokenValidationError.

    Tokens whose signature verified are remembered (by SHA-256, bounded LRU) together with the JWKS
    generation they were checked against: a repeated token (re-authentication, one HTTP request after
    another) skips the RSA/EC verification but has its time, issuer, audience and scope claims checked
    again. Any JWKS refresh forgets them, so a key removed by the provider stops them at once.
    """

    def __init__(
        self,
        keys: JwksCache,
        policy: ValidationPolicy,
        *,
        now_s: Callable[[], float] = time.time,
        cache_size: int = 10_000,
        revoked: Callable[[Mapping[str, Any]], str | None] | None = None,
    ) -> None:
        self._keys = keys
        self._policy = policy
        self._now_s = now_s
        # Asked last, for every token that passed every other check (cached or not): a reason to refuse
        # it although it verified (kgov's own issuer: its client was deleted), else None.
        self._revoked = revoked
        self._cache_size = cache_size
        self._verified: OrderedDict[bytes, tuple[int, dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, token: str) -> ValidatedToken:
        return self.validate(token)

    def validate(self, token: str) -> ValidatedToken:
        result = self._validate(token)
        if self._revoked is not None and (reason := self._revoked(result.claims)) is not None:
            raise TokenValidationError(reason)
        return result

    def _validate(self, token: str) -> ValidatedToken:
        if len(token) > MAX_TOKEN_LENGTH:
            raise TokenValidationError("JWT too long")
        self._keys.ensure_fresh()
        if self._cache_size <= 0:
            return self._check_claims(self._verify(token))
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        generation = self._keys.refresh_count
        with self._lock:
            hit = self._verified.get(digest)
        if hit is not None and hit[0] == generation:
            return self._check_claims(hit[1])
        claims = self._verify(token)
        result = self._check_claims(claims)
        with self._lock:
            self._verified[digest] = (generation, claims)
            self._verified.move_to_end(digest)
            while len(self._verified) > self._cache_size:
                self._verified.popitem(last=False)
        return result

    def _verify(self, token: str) -> dict[str, Any]:
        """Header rules, key selection and the signature; returns the (unchecked) claims."""
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenValidationError("not a compact JWS (three segments expected)")
        header = _b64json(parts[0], "header")
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in ALLOWED_ALGORITHMS:
            raise TokenValidationError(f"JWS algorithm {alg!r} is not allowed")
        for name in _FORBIDDEN_HEADERS:
            if name in header:
                raise TokenValidationError(f"JWS header parameter {name!r} is not accepted")
        kid = header.get("kid")
        if kid is None:
            choice = _kidless_choice(self._keys.current(), header, alg)
        elif not isinstance(kid, str) or not kid or len(kid) > MAX_KID_LENGTH:
            raise TokenValidationError("JWS header has no usable 'kid'")
        else:
            found = self._keys.jwk_for(kid, header, alg)
            if found is None:
                raise TokenValidationError(f"no key in the JWKS for kid {kid[:64]!r}")
            choice = found
        _check_key_fits(choice.jwk, alg)
        if not parts[2]:
            raise TokenValidationError("JWS has no signature")
        try:
            key = choice.verifier(alg)
            signature = base64url_decode(parts[2].encode("ascii"))
            ok = key.verify(f"{parts[0]}.{parts[1]}".encode("ascii"), signature)
        except (JOSEError, ValueError, UnicodeError, TypeError):
            ok = False
        if not ok:
            raise TokenValidationError("JWS signature verification failed")
        return _b64json(parts[1], "payload")

    def _check_claims(self, claims: dict[str, Any]) -> ValidatedToken:
        p = self._policy
        now = self._now_s()
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            raise TokenValidationError("JWT has no numeric 'exp'")
        # jose4j's NumericDateValidator (Kafka's BrokerJwtValidator): whole seconds on both sides
        # (NumericDate.now() is milliseconds / 1000, the claim its longValue()), expired when
        # `now - skew >= exp`, so a token stops working AT exp + skew.
        now_whole = math.floor(now)
        if _whole_seconds(exp) > MAX_EXP_S:
            # jose4j's NumericDate.getValueInMillis throws when seconds * 1000 overflows a long, so Kafka
            # refuses the token; here its session lifetime would not fit the wire's int64 either.
            raise TokenValidationError("JWT 'exp' is out of range")
        if now_whole - p.clock_skew_s >= _whole_seconds(exp):
            raise TokenValidationError("JWT expired")
        # The same whole seconds for `nbf` (jose4j: refused when `now + skew < nbf`) and for `iat`,
        # which kgov refuses on the same terms; Kafka's builder sets no iat restriction (jose4j's
        # `setIssuedAtRestrictions`), so there a future `iat` passes.
        for name in ("nbf", "iat"):
            value = claims.get(name)
            if value is not None and (not _is_number(value) or now_whole + p.clock_skew_s < _whole_seconds(value)):
                raise TokenValidationError(f"JWT '{name}' is in the future")
        if "iat" not in claims:
            raise TokenValidationError("JWT has no 'iat'")
        # A token whose `exp` is not after its `iat` (or `nbf`) was never valid; inside the clock skew
        # it would still pass every check above. Kafka refuses it on both of its paths, differently:
        # the unsecured validator (`OAuthBearerValidationUtils.validateTimeConsistency`) when `exp <=
        # iat` on the claims as given (fractions count, `nbf` is not compared); the JWKS path
        # (`BrokerJwtValidator` -> jose4j `NumericDateValidator`) only when `exp` is strictly before
        # `iat` or `nbf` in whole seconds, so there `exp == iat` passes and lives for the skew.
        # Deliberately stricter than the JWKS path (fail closed): `exp <= iat` and `exp <= nbf` on the
        # claims as given, which refuses everything either Kafka path refuses.
        for name in ("iat", "nbf"):
            value = claims.get(name)
            if value is not None and exp <= value:
                raise TokenValidationError(f"JWT 'exp' is not after its '{name}'")
        if p.issuer is not None and claims.get("iss") != p.issuer:
            raise TokenValidationError("JWT issuer does not match")
        if p.audience is not None:
            aud = claims.get("aud")
            audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
            # Kafka's sasl.oauthbearer.expected.audience is a list: any one of them will do.
            expected = {a.strip() for a in p.audience.split(",") if a.strip()}
            if not expected.intersection(a for a in audiences if isinstance(a, str)):
                raise TokenValidationError("JWT audience does not match")
        principal = claims.get(p.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise TokenValidationError(f"JWT has no principal claim {p.principal_claim!r}")
        if not is_clean_principal_name(principal):
            # Kafka trims (so " admin" would become User:admin); a control character would let the
            # name forge lines in the line-based authorizer log. Neither is a name worth accepting.
            raise TokenValidationError(
                f"JWT principal claim {p.principal_claim!r} has surrounding spaces or control characters"
            )
        if principal in p.reserved_principals:
            # A deliberate departure: Kafka makes any principal listed in super.users a super user, however
            # it logged in. kgov's admin user is one implicitly (`[admin] user`, "admin" by default); an
            # external identity provider that lets a user or application be named so must not make it one.
            raise TokenValidationError(
                f"JWT principal claim {p.principal_claim!r} names kgov's admin user, which only kgov's own "
                "credentials may log in as"
            )
        raw_scope = claims.get(p.scope_claim)
        if isinstance(raw_scope, str):
            # RFC 9068 §2.2.3 (RFC 8693 §4.2): a string holds scope-tokens separated by SP, RFC 6749 §3.3's
            # grammar; split on SP (U+0020) only, so "a\tb" is one scope that matches neither "a" nor "b".
            # **A departure from Kafka**: its `BrokerJwtValidator` / `ClientJwtValidator` (formerly
            # `ValidatorAccessTokenValidator` / `LoginAccessTokenValidator`) and `OAuthBearerUnsecuredJws`
            # take a string claim as ONE scope; Kafka never compares scopes itself, kgov does
            # (`required_scopes`), and a provider writing "kafka read" means two.
            scopes = frozenset(s for s in raw_scope.split(" ") if s)
        elif isinstance(raw_scope, list) and all(isinstance(s, str) for s in raw_scope):
            scopes = frozenset(raw_scope)
        else:
            scopes = frozenset()
        missing = p.required_scopes - scopes
        if missing:
            raise TokenValidationError(
                f"JWT lacks required scope(s) {sorted(missing)}",
                status="insufficient_scope",
                scope=" ".join(sorted(p.required_scopes)),
            )
        # Kafka's expiry for the session: NumericDate.getValueInMillis(), whole seconds * 1000; the
        # validator accepts the token until the millisecond (exp + skew) * 1000 (see above).
        return ValidatedToken(
            principal,
            scopes,
            _whole_seconds(exp) * 1000,
            claims,
            accepted_until_ms=min((_whole_seconds(exp) + p.clock_skew_s) * 1000, INT64_MAX),
        )


def is_clean_principal_name(name: str) -> bool:
    """No surrounding whitespace and no control character: what a token's principal must be (and so
    what kgov's issuer may name a client, `CredentialService.set_client`)."""
    return name == name.strip() and not any(unicodedata.category(c) == "Cc" for c in name)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _whole_seconds(value: float) -> int:
    """A NumericDate as jose4j reads it: Java's Number.longValue(), truncating toward zero."""
    return int(value)


def _thumbprint_matches(jwk: Mapping[str, Any], header: Mapping[str, Any], name: str, digest: str) -> bool:
    """jose4j's x5t / x5t#S256 filter (omitted okay; derived from the JWK's first x5c certificate
    when the JWK does not state it)."""
    wanted = header.get(name)
    if wanted is None:
        return True
    have = jwk.get(name)
    if have is None:
        chain = jwk.get("x5c")
        if not isinstance(chain, list) or not chain or not isinstance(chain[0], str):
            return True
        try:
            der = base64.b64decode(chain[0], validate=True)
        except ValueError:
            return False
        have = base64.urlsafe_b64encode(hashlib.new(digest, der).digest()).rstrip(b"=").decode()
    return bool(have == wanted)


def _fits_kidless(jwk: Mapping[str, Any], header: Mapping[str, Any], alg: str) -> bool:
    """jose4j's filter for an inbound JWS (SelectorSupport.filterForInboundSigned, then
    VerificationJwkSelector): the key type of the algorithm, `use` sig and `key_ops` verify when
    stated, the thumbprints when the header has them, the JWK's `alg` and EC curve when stated."""
    ops = jwk.get("key_ops")
    return (
        jwk.get("kty") == _KTY_FOR_ALG[alg[:2]]
        and jwk.get("use", "sig") == "sig"
        and (ops is None or (isinstance(ops, list) and "verify" in ops))
        and _thumbprint_matches(jwk, header, "x5t", "sha1")
        and _thumbprint_matches(jwk, header, "x5t#S256", "sha256")
        and jwk.get("alg", alg) == alg
        and (alg[:2] != "ES" or jwk.get("crv", _CRV_FOR_ALG[alg]) == _CRV_FOR_ALG[alg])
    )


def _kidless_choice(snapshot: JwksSnapshot, header: Mapping[str, Any], alg: str) -> JwkChoice:
    """The key for a JWS without `kid`. Kafka (RefreshingHttpsJwksVerificationKeyResolver ->
    jose4j VerificationJwkSelector.select) takes the first JWKS key that passes the filter above and
    verifies with that one only. Here only a sole fitting key is used: with several, which one
    signed depends on the provider's key order, so the token is refused (never tried key by key).
    No fitting key refreshes nothing (Kafka's expedited refresh needs a kid)."""
    fitting = [i for i, jwk in enumerate(snapshot.keys) if _fits_kidless(jwk, header, alg)]
    if not fitting:
        raise TokenValidationError(f"JWS has no 'kid' and no key in the JWKS fits {alg}")
    if len(fitting) > 1:
        raise TokenValidationError(f"JWS has no 'kid' and {len(fitting)} keys in the JWKS fit {alg}")
    return JwkChoice(snapshot, fitting[0])


def _kid_choice(snapshot: JwksSnapshot, indices: tuple[int, ...], header: Mapping[str, Any], alg: str) -> JwkChoice:
    """Among the keys with the token's `kid`, the first that fits it (`_fits_kidless`), as jose4j's
    VerificationJwkSelector narrows a kid's keys by key type, `use`, thumbprints, `alg` and curve and
    takes the first left. None fits: the first key with the kid, which `_check_key_fits` then refuses
    with the reason."""
    fitting = [i for i in indices if _fits_kidless(snapshot.keys[i], header, alg)]
    return JwkChoice(snapshot, fitting[0] if fitting else indices[0])


def _check_key_fits(jwk: Mapping[str, Any], alg: str) -> None:
    kty = _KTY_FOR_ALG[alg[:2]]
    if jwk.get("kty") != kty:
        raise TokenValidationError(f"JWK type {jwk.get('kty')!r} does not fit algorithm {alg}")
    if "alg" in jwk and jwk["alg"] != alg:
        raise TokenValidationError(f"JWK is for {jwk['alg']!r}, token uses {alg}")
    if jwk.get("use", "sig") != "sig":
        raise TokenValidationError("JWK is not a signature key")
    ops = jwk.get("key_ops")
    if ops is not None and not (isinstance(ops, list) and "verify" in ops):
        raise TokenValidationError("JWK key_ops does not allow verify")
    if kty == "EC" and jwk.get("crv") != _CRV_FOR_ALG[alg]:
        raise TokenValidationError(f"JWK curve does not fit algorithm {alg}")
    if any(k in jwk for k in ("d", "p", "q", "k")):
        raise TokenValidationError("JWKS holds private key material; refusing it")
    if kty == "RSA":
        try:
            bits = _b64_uint(jwk.get("n")).bit_length()
        except (ValueError, UnicodeError):
            raise TokenValidationError("JWK has no usable RSA modulus") from None
        if bits < MIN_RSA_BITS:
            raise TokenValidationError(f"JWK RSA modulus of {bits} bits is under {MIN_RSA_BITS}")
