"""The credential service: one object the gateway, the control plane and the CLI share.

`CredentialService(engine, settings)` owns the store, an in-memory snapshot of credentials (reloaded
when another node bumps the `sasl` change version), the PLAIN derivation cache, the per-source
failure limiter, the token issuer and the JWT validator. Every credential change writes a
CREDENTIAL_CHANGE audit event; every failed authentication an AUTHENTICATION event with the reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import logging
import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final

from passlib.hash import pbkdf2_sha256
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from audit.model import EventType, change_event
from audit.request_log import authentication_event
from audit.sinks import AuditSink
from authz.clock import elapsed_clock
from authz.model import Principal
from sasl import issuer as issuer_mod
from sasl.delegation import (
    TOKEN_SALT_LENGTH,
    BearerFormatError,
    DelegationTokenError,
    TokenErrorCode,
    TokenInfo,
    TokenPolicy,
    check_request_allowed,
    credentials_match_secret,
    decode_hmac,
    expire_answer_ms,
    expired,
    hmac_lookup_key,
    is_delegation_bearer,
    new_token,
    parse_bearer,
    renewed,
    token_hmac,
    token_salt,
    token_scram_credentials,
    visible,
)
from sasl.http_auth import MAX_SECRET_LENGTH, CredentialStoreUnavailable, verify_hashed_secret
from sasl.issuer import IssuedToken
from sasl.jwt_validation import (
    JwksCache,
    JwtValidator,
    ValidationPolicy,
    http_jwks_fetcher,
    is_clean_principal_name,
)
from sasl.limiter import FailureLimiter, claim_of_sasl
from sasl.mechanism import Failure, ServerMechanism, Step, Success, UnsupportedMechanismError
from sasl.oauthbearer import OAuthBearerServer, TokenValidationError, ValidatedToken
from sasl.plain import PlainServer, VerifiedUser
from sasl.scram import (
    MECHANISMS,
    SCRAM_SHA_512,
    FakeCredentialShape,
    ScramCredential,
    ScramIdentity,
    ScramMechanism,
    ScramServer,
    ShapeCensus,
    check_iterations,
    credential_from_salted,
    derive_credential,
    fake_credential,
    pick_fake_shape,
    shape_census,
)
from sasl.session import session_lifetime_ms
from sasl.store import (
    SCRAM_UNKNOWN_TOKEN_SECRET,
    SCRAM_UNKNOWN_USER_SECRET,
    CredentialStore,
    ServiceAccount,
    StoredSigningKey,
)

log = logging.getLogger("kgov.sasl")
ALL_MECHANISMS: Final = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN", "OAUTHBEARER")
# How old the credential snapshot may be when a login looks a name up (`_login_snapshot`): a name it
# lacks was most likely created moments ago on another node. Hits and misses alike, so the look-again
# does not tell which names exist; at most one version query per this interval per node.
LOOKUP_REFRESH_S: Final = 0.05
# How long a login waits for another thread's check of the store before going on with the snapshot it
# has: a database that hangs (a dropped connection, a failover) delays logins by at most this.
CHECK_WAIT_S: Final = 1.0
_DUMMY_CLIENT_HASH: Final = pbkdf2_sha256.hash(secrets.token_urlsafe(16))


# Stand-ins `scram_identity` uses for an unknown token id: always expired, never a match.
_NO_TOKEN: Final = TokenInfo("", Principal("User", ""), Principal("User", ""), (), -1, -1, -1)
_NO_CREDENTIAL: Final = ScramCredential(b"", b"", b"", 0)
_NO_CREDENTIALS: Final[Mapping[str, ScramCredential]] = {}


class CredentialError(ValueError):
    """A refused credential change; `code` is Kafka's error code, the message safe to show."""

    UNSUPPORTED_SASL_MECHANISM = 33
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class SnapshotState:
    """How current the credential snapshot is (`/health`, metrics), as `authz.service.SnapshotState`."""

    age_s: float  # since the database last confirmed the snapshot current
    max_age_s: float  # sasl.max_snapshot_age_s; 0 = unlimited
    stale: bool  # older than max_age_s: logins that need the snapshot fail
    unreachable: bool  # the last check of the database failed
    outages: int  # how many times a check failed after one had succeeded (metrics)


class OAuthError(Exception):
    """An RFC 6749 §5.2 token-endpoint error (`invalid_client`, `invalid_scope`, ...)."""

    def __init__(self, error: str, description: str, status: int = 400) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status


@dataclass(frozen=True, slots=True)
class MechanismInfo:
    mechanism: str
    iterations: int


@dataclass(frozen=True, slots=True)
class ScramUser:
    name: str
    mechanisms: tuple[MechanismInfo, ...]


@dataclass(frozen=True, slots=True)
class CreatedToken:
    info: TokenInfo
    hmac: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class _Snapshot:
    version: int
    scram: Mapping[tuple[str, str], ScramCredential]
    tokens: Mapping[str, TokenInfo]
    # token id -> mechanism -> the token's SCRAM credential, derived when it was created; only those
    # made under this node's `delegation_token_secret_key` (`_usable_token_credentials`).
    token_credentials: Mapping[str, Mapping[str, ScramCredential]]
    keys: tuple[StoredSigningKey, ...]
    # Per SCRAM mechanism, the shapes of the stored credentials, from which the credential shown for
    # an unknown name takes its own (`scram.pick_fake_shape`).
    unknown_shapes: Mapping[str, ShapeCensus]
    # The mechanism PLAIN / HTTP Basic checks most names against (SHA-512 when any user has it).
    plain_mechanism: ScramMechanism = SCRAM_SHA_512
    # OAuth client id -> `issuer.client_version` of its stored secret: the tokens kgov issued stop
    # verifying once their client is gone or replaced (`_revoked_own_token`).
    clients: Mapping[str, str] = field(default_factory=dict)
    # OAuth client id -> the client (its secret's hash, its scopes): `POST /oauth/token` checks these.
    accounts: Mapping[str, ServiceAccount] = field(default_factory=dict)


class _PlainCache:
    """Successful password verifications: keyed HMAC(user, password) -> the StoredKey it matched.

    A changed credential has a new StoredKey, so stale entries never verify. Entries live `ttl_s`.
    Only successes are cached, so guessing still costs a PBKDF2 per attempt.
    """

    def __init__(
        self, size: int, ttl_s: float = 300.0, monotonic: Callable[[], float] = elapsed_clock
    ) -> None:
        self._size = size
        self._ttl = ttl_s
        self._monotonic = monotonic
        self._key = secrets.token_bytes(32)
        self._entries: OrderedDict[bytes, tuple[bytes, float]] = OrderedDict()
        self._lock = threading.Lock()

    def key(self, mechanism: str, username: str, password: str) -> bytes:
        data = f"{mechanism}\x00{username}\x00".encode() + password.encode("utf-8")
        return hmac.digest(self._key, data, "sha256")

    def matches(self, key: bytes, stored_key: bytes) -> bool:
        with self._lock:
            entry = self._entries.get(key)
        if entry is None or self._monotonic() > entry[1]:
            return False
        return hmac.compare_digest(entry[0], stored_key)

    def put(self, key: bytes, stored_key: bytes) -> None:
        if self._size <= 0:
            return
        with self._lock:
            self._entries[key] = (stored_key, self._monotonic() + self._ttl)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)


class _AuditedMechanism:
    """Wraps a server mechanism: refuses blocked sources, records and audits failures."""

    def __init__(
        self,
        inner: ServerMechanism,
        service: CredentialService,
        client_address: str,
        reauthenticating: Principal | None = None,
    ) -> None:
        self.name = inner.name
        self._inner = inner
        self._service = service
        self._address = client_address
        self._reauthenticating = reauthenticating
        self._started = False
        self._done = False
        self._recorded = False
        self._claim = ""

    def __repr__(self) -> str:
        return f"AuditedMechanism({self.name}, client={self._address})"

    def step(self, received: bytes) -> Step:
        if self._done:
            return Failure("exchange already complete", mechanism=self.name)
        if not self._started:
            self._started = True
            # The name the client claims, read before any secret is checked: its failures count
            # against that name at this address, and against the address as a whole.
            self._claim = claim_of_sasl(self.name, received)
            if (refusal := self._service.limiter.refusal(self._address, self._claim)) is not None:
                self._done = True
                failure = Failure(refusal, mechanism=self.name)
                self._service.audit_authentication(failure, self._address, "kafka.Authenticate",
                                                   reauthenticating=self._reauthenticating)
                return failure
        try:
            result = self._inner.step(received)
        except CredentialStoreUnavailable as exc:
            # Fails closed; not counted against the source, which did nothing wrong.
            self._done = True
            failure = Failure(str(exc), mechanism=self.name)
            self._service.audit_authentication(failure, self._address, "kafka.Authenticate",
                                               reauthenticating=self._reauthenticating)
            return failure
        if isinstance(result, Failure):
            self._done = True
            if not self._recorded:
                self._record(result)
        elif isinstance(result, Success):
            self._done = True
        elif (pending := getattr(self._inner, "pending_error", None)) is not None and not self._recorded:
            # OAUTHBEARER's error challenge: the attempt has failed already, whatever the client does next.
            self._record(Failure(pending, mechanism=self.name,
                                 token_id=getattr(self._inner, "pending_token_id", None)))
        return result

    def _record(self, failure: Failure) -> None:
        self._recorded = True
        self._service.limiter.record_failure(self._address, self._claim)
        self._service.audit_authentication(failure, self._address, "kafka.Authenticate",
                                           reauthenticating=self._reauthenticating)


class CredentialService:
    """Credentials for SASL and HTTP: SCRAM users, service accounts, delegation tokens, issuer keys."""

    def __init__(
        self,
        engine: Engine,
        settings: Any,
        *,
        audit: AuditSink | None = None,
        clock: Callable[[], datetime] | None = None,
        source: str = "kgov",
        monotonic: Callable[[], float] = elapsed_clock,
    ) -> None:
        self.store = CredentialStore(engine)
        self._monotonic = monotonic
        self.sasl = settings.sasl
        self.oauth = settings.oauth
        if self.oauth.jwks_url is not None and not self.oauth.audience:
            # As Kafka without sasl.oauthbearer.expected.audience; kept as a default for compatibility.
            log.warning("oauth.jwks_url is set without oauth.audience: every token %s issued for any of its "
                        "applications is accepted; set oauth.audience to the audience your Kafka clients get",
                        self.oauth.issuer)
        self._audit = audit
        self._clock = clock or (lambda: datetime.now(UTC))
        self._source = source
        self.limiter = FailureLimiter(
            self.sasl.max_failed_attempts_per_source, self.sasl.failed_attempts_window_s,
            address_limit=self.sasl.max_failed_attempts_per_address,
        )
        self._plain_cache = _PlainCache(self.sasl.plain_cache_size)
        secret = self.sasl.delegation_token_secret_key
        signing_secret = self.oauth.signing_key_secret
        self._signing_secret: bytes | None = (
            signing_secret.get_secret_value().encode() if signing_secret else None
        )
        self._token_secret: bytes | None = secret.get_secret_value().encode() if secret else None
        self._policy = TokenPolicy(
            self.sasl.delegation_token_max_lifetime_ms, self.sasl.delegation_token_expiry_time_ms
        )
        self._unknown_key = self.store.server_secret(SCRAM_UNKNOWN_USER_SECRET)
        self._unknown_token_key = self.store.server_secret(SCRAM_UNKNOWN_TOKEN_SECRET)
        self._refresh_lock = threading.Lock()
        self._check_lock = threading.Lock()  # one check of the store at a time (`_checked_snapshot`)
        self._checked_at = float("-inf")  # when the last check of the store began (or failed)
        self._unreachable_since: float | None = None  # the current outage's first failed check
        self._stale_logged = False  # the ERROR of the current stale period is out
        self.store_outages = 0
        # What the last load accepted / refused of the stored token credentials (see `_load`).
        self._held_token_credentials: Mapping[str, Mapping[str, ScramCredential]] = {}
        self._foreign_tokens: set[str] = set()
        self._snapshot = self._load()
        self._confirmed_at = self._monotonic()  # when the store last confirmed the snapshot current
        own_issuer = self.oauth.jwks_url is None
        fetch = http_jwks_fetcher(self.oauth.jwks_url) if self.oauth.jwks_url else self._own_jwks
        self.jwks = JwksCache(
            fetch,
            refresh_s=self.oauth.jwks_refresh_s,
            unknown_kid_refresh_s=self.oauth.jwks_unknown_kid_refresh_s,
            unknown_kid_min_interval_s=self.oauth.jwks_unknown_kid_min_interval_s,
        )
        self.validator = JwtValidator(
            self.jwks,
            ValidationPolicy(
                issuer=self.oauth.issuer or (self.oauth.token_issuer if own_issuer else None),
                audience=self.oauth.audience or (self.oauth.token_audience if own_issuer else None),
                principal_claim=self.oauth.principal_claim,
                scope_claim=self.oauth.scope_claim,
                required_scopes=frozenset(self.oauth.required_scopes),
                clock_skew_s=self.oauth.clock_skew_s,
                reserved_principals=self._reserved_principals(settings, own_issuer),
            ),
            now_s=lambda: self._clock().timestamp(),
            # Only kgov's own tokens (its issuer, its keys: with `jwks_url` unset the JWKS holds nothing
            # else) can be revoked; an external provider's are its own business, as in Kafka.
            revoked=self._revoked_own_token if own_issuer else None,
        )

    def __repr__(self) -> str:
        return f"CredentialService(version={self._snapshot.version})"

    @staticmethod
    def _reserved_principals(settings: Any, own_issuer: bool) -> frozenset[str]:
        """With an external identity provider, tokens naming kgov's admin user (a super user everywhere:
        kgov's `[admin] user`, when the settings have one) are refused; kgov's own issuer only issues
        tokens to its service accounts, which an administrator creates."""
        admin = getattr(getattr(settings, "admin", None), "user", None)
        return frozenset({admin}) if not own_issuer and isinstance(admin, str) and admin else frozenset()

    # -- time, snapshot --------------------------------------------------------------------------
    def now_ms(self) -> int:
        return int(self._clock().timestamp() * 1000)

    @property
    def failure_delay_s(self) -> float:
        """Kafka's connection.failed.authentication.delay.ms: callers wait this long before answering a failure."""
        return float(self.sasl.failed_authentication_delay_ms) / 1000.0

    def _load(self) -> _Snapshot:
        version = self.store.version()
        tokens = {t.token_id: t for t in self.store.all_tokens()}
        token_credentials = self._usable_token_credentials(tokens)
        keys = []
        for k in self.store.signing_keys():
            try:
                pem = issuer_mod.open_private_key(k.private_pem, k.kid, self._signing_secret)
            except issuer_mod.SealedKeyError:
                pem = ""  # still published in the JWKS; signing with it fails closed in `_signing_key`
            keys.append(dataclasses.replace(k, private_pem=pem))
        scram = self.store.all_scram()
        default = FakeCredentialShape(iterations=self.sasl.scram_iterations)
        shapes = {
            name: shape_census((c for (_u, m), c in scram.items() if m == name), default)
            for name in MECHANISMS
        }
        has_512 = any(m == SCRAM_SHA_512.name for (_u, m) in scram)
        plain = SCRAM_SHA_512 if has_512 or not scram else MECHANISMS["SCRAM-SHA-256"]
        accounts = {c.client_id: c for c in self.store.list_clients()}
        clients = {cid: issuer_mod.client_version(c.secret_hash) for cid, c in accounts.items()}
        return _Snapshot(version, scram, tokens, token_credentials, tuple(keys), shapes, plain, clients, accounts)

    def _usable_token_credentials(
        self, tokens: Mapping[str, TokenInfo]
    ) -> dict[str, Mapping[str, ScramCredential]]:
        """The token credentials this node may log in with: those whose salt says they were derived
        under its own `delegation_token_secret_key` (`credentials_match_secret`), so that changing the
        key invalidates every token, as in Kafka.

        Incremental: a token's stored credentials never change (written with it, removed with it),
        so those the previous load accepted are kept and only tokens new to this node are read and
        checked; a reload costs no credential rows and no HMAC for the tokens already held.

        A live token without credentials (created before store migration 3, or by an older node
        during a rolling upgrade) gets them here, once: derived (one PBKDF2 per mechanism) and stored,
        so other nodes and restarts read them instead. Nodes that load it before they are stored
        derive the same values (the salt is keyed), so the race costs work, never correctness. Tokens
        created by this version always come with theirs (`create_token`): a load never derives every
        token."""
        secret = self._token_secret
        if secret is None:
            return {}
        held = self._held_token_credentials
        usable: dict[str, Mapping[str, ScramCredential]] = {}
        new: list[str] = []
        for token_id in tokens:
            creds = held.get(token_id)
            if creds is not None:
                usable[token_id] = creds
            elif token_id not in self._foreign_tokens:
                new.append(token_id)
        foreign = self._foreign_tokens & tokens.keys()
        now = self.now_ms()
        stored = self.store.token_credentials(new) if new else {}
        incomplete = [t for t in new if not tokens[t].is_expired(now)
                      and sum((t, m) in stored for m in MECHANISMS) < len(MECHANISMS)]
        # Credentials are derived (and stored for every node) only for a token made under this node's key,
        # as its stored HMAC look-up key says: a node configured with another key would store credentials
        # for an HMAC no client has, and every node with the right key would then refuse the token.
        made_here = {t for t, key in (self.store.token_hmac_keys(incomplete) if incomplete else {}).items()
                     if hmac.compare_digest(key, hmac_lookup_key(token_hmac(secret, t)))}
        derived: dict[str, dict[str, ScramCredential]] = {}
        for token_id in new:
            mine = {m: c for m in MECHANISMS if (c := stored.get((token_id, m))) is not None}
            if mine and not credentials_match_secret(secret, token_id, *mine.values()):
                foreign.add(token_id)
                continue
            if len(mine) < len(MECHANISMS) and not tokens[token_id].is_expired(now):
                if token_id not in made_here:
                    foreign.add(token_id)
                    continue
                fresh = token_scram_credentials(secret, token_id)
                derived[token_id] = {m: c for m, c in fresh.items() if m not in mine}
                mine = fresh
            if len(mine) == len(MECHANISMS):  # else an expired token from before migration 3
                usable[token_id] = mine
        if derived:
            try:
                self.store.add_token_credentials(derived)
                log.info("derived and stored the SCRAM credentials of %d delegation token(s) made before "
                         "they were stored", len(derived))
            except SQLAlchemyError as exc:
                # This node logs them in with what it derived; other nodes derive their own.
                log.warning("could not store the SCRAM credentials derived for %d delegation token(s): %s",
                            len(derived), type(exc).__name__)
        if foreign - self._foreign_tokens:
            # A count only: never an id's credential, never a secret. Such tokens fail at login as
            # unknown ids do.
            log.warning("%d delegation token(s) were created under another delegation_token_secret_key and "
                        "cannot log in through this node (every node sharing the database needs the same key)",
                        len(foreign))
        self._foreign_tokens = foreign
        self._held_token_credentials = usable
        return usable

    def refresh(self) -> None:
        """Reloads the snapshot now (after a local write, or when told of a change)."""
        with self._refresh_lock:
            asked = self._monotonic()
            self._snapshot = self._load()
        self._confirmed(asked)

    def _check(self) -> None:
        """Asks the store for its change version and reloads when it moved. A failure is logged once per
        outage and leaves the snapshot as it was (`_served` decides whether it may still be used)."""
        asked = self._checked_at = self._monotonic()
        try:
            if self.store.version() != self._snapshot.version:
                with self._refresh_lock:
                    self._snapshot = self._load()
        except SQLAlchemyError as exc:
            now = self._checked_at = self._monotonic()  # the next try waits from here, however long this took
            if self._unreachable_since is None:
                self._unreachable_since = now
                self.store_outages += 1
                # The exception's type only: a driver's message may hold the database URL.
                log.warning("credential store unreachable (%s): logins use the credentials confirmed %.1f s ago, "
                            "for at most sasl.max_snapshot_age_s = %g s (0: no limit); retrying every %g s",
                            type(exc).__name__, now - self._confirmed_at, self.sasl.max_snapshot_age_s,
                            self.sasl.refresh_interval_s)
            return
        self._confirmed(asked)

    def _confirmed(self, asked: float) -> None:
        """The store answered a check (or a load) asked at `asked`: the snapshot was current then."""
        self._confirmed_at = max(self._confirmed_at, asked)
        if self._unreachable_since is not None:
            since, self._unreachable_since = self._unreachable_since, None
            self._stale_logged = False
            log.warning("credential store reachable again after %.1f s: logins follow the stored credentials "
                        "again", self._monotonic() - since)

    def _checked_snapshot(self, interval: float) -> _Snapshot:
        """The snapshot, after checking the store for changes when the last check is `interval` old
        (`refresh_interval_s` while the store fails, so an outage costs a try per interval, not per
        login). One check at a time: a caller that finds one running waits for it (at most
        `CHECK_WAIT_S`) and uses its result rather than asking again."""
        if self._unreachable_since is not None:
            interval = max(interval, self.sasl.refresh_interval_s)
        if self._monotonic() - self._checked_at >= interval and self._check_lock.acquire(timeout=CHECK_WAIT_S):
            try:
                if self._monotonic() - self._checked_at >= interval:
                    self._check()
            finally:
                self._check_lock.release()
        return self._served()

    def _served(self) -> _Snapshot:
        """The snapshot, unless the store has not confirmed it for `max_snapshot_age_s`: then revocations
        made through other nodes cannot arrive, and `CredentialStoreUnavailable` fails the caller closed."""
        max_age = self.sasl.max_snapshot_age_s
        if max_age > 0 and self._monotonic() - self._confirmed_at >= max_age:
            if not self._stale_logged:
                self._stale_logged = True
                log.error("credential snapshot not confirmed by the database for %.1f s (sasl.max_snapshot_age_s "
                          "= %g): logins are refused until the database answers",
                          self._monotonic() - self._confirmed_at, max_age)
            raise CredentialStoreUnavailable(
                "credentials not confirmed by the database for longer than sasl.max_snapshot_age_s: "
                "logins are refused until it answers"
            )
        return self._snapshot

    def snapshot_state(self) -> SnapshotState:
        max_age = self.sasl.max_snapshot_age_s
        age = self._monotonic() - self._confirmed_at
        return SnapshotState(age_s=age, max_age_s=max_age, stale=max_age > 0 and age >= max_age,
                             unreachable=self._unreachable_since is not None, outages=self.store_outages)

    def snapshot_problem(self) -> str | None:
        """For `/health`: why this node refuses logins, or None. Checks the store when due, so that a
        node nobody logs in to notices the database is back (the load balancer's probe brings it back)."""
        with contextlib.suppress(CredentialStoreUnavailable):
            self._current()
        state = self.snapshot_state()
        if state.stale:
            return (f"credential snapshot not confirmed by the database for {state.age_s:.0f} s "
                    "(sasl.max_snapshot_age_s): logins refused")
        return None

    def _login_snapshot(self) -> _Snapshot:
        """The snapshot a login looks its name up in: checked against the store within the last
        `LOOKUP_REFRESH_S`, so a user, client or token created through another node a moment ago is
        found. Every login pays the same (a hit as a miss: only the clock decides whether this call
        queries), so the time to the first answer does not tell a stored name from an unknown one."""
        return self._checked_snapshot(min(LOOKUP_REFRESH_S, self.sasl.refresh_interval_s))

    def _current(self) -> _Snapshot:
        return self._checked_snapshot(self.sasl.refresh_interval_s)

    # -- mechanisms ------------------------------------------------------------------------------
    def server_mechanism(
        self, name: str, client_address: str, *, reauthenticating: Principal | None = None
    ) -> ServerMechanism:
        """A fresh server state machine for one SASL exchange from `client_address` (IP literal).

        `name` is the mechanism the client asked for in SaslHandshake: SCRAM-SHA-256, SCRAM-SHA-512,
        PLAIN or OAUTHBEARER (delegation tokens authenticate through SCRAM with `tokenauth=true`, or
        through OAUTHBEARER in kgov's bearer form: `validate_sasl_bearer`).
        Raises `UnsupportedMechanismError` for anything not enabled in `[sasl] enabled_mechanisms`.
        The returned machine audits and counts its own failures and refuses a source that exceeded
        the failure limit; the caller applies `failure_delay_s` before sending a failure.
        `Success.session_lifetime_ms` is the KIP-368 session lifetime (None = unlimited).
        `reauthenticating` is the principal whose session a KIP-368 re-authentication renews (None for
        a first login): its failures are audited as that principal's failed re-authentication.
        """
        upper = name.upper()
        if upper not in ALL_MECHANISMS or upper not in {m.upper() for m in self.sasl.enabled_mechanisms}:
            raise UnsupportedMechanismError(f"Unsupported SASL mechanism {name}")
        inner: ServerMechanism
        if upper in MECHANISMS:
            mech = MECHANISMS[upper]
            inner = ScramServer(
                mech,
                lambda user, token_auth: self.scram_identity(mech, user, token_auth),
                now_ms=self.now_ms,
                max_session_ms=self.sasl.connections_max_reauth_ms or None,
                unknown=lambda user, token_auth: self.unknown_scram_credential(mech, user, token_auth),
            )
        elif upper == "PLAIN":
            inner = PlainServer(self.verify_password, session=self._session)
        else:
            inner = OAuthBearerServer(self.validate_sasl_bearer, session=self._session)
        return _AuditedMechanism(inner, self, client_address, reauthenticating)

    def _session(self, expiry_ms: int | None) -> int | None:
        return session_lifetime_ms(self.now_ms(), expiry_ms, self.sasl.connections_max_reauth_ms or None)

    @property
    def enabled_mechanisms(self) -> list[str]:
        return [m for m in ALL_MECHANISMS if m in {x.upper() for x in self.sasl.enabled_mechanisms}]

    def scram_identity(
        self, mechanism: ScramMechanism, username: str, token_auth: bool
    ) -> ScramIdentity | None:
        snap = self._login_snapshot()
        if not token_auth:
            cred = snap.scram.get((username, mechanism.name))
            return ScramIdentity(Principal("User", username), cred) if cred else None
        # A token's credential was derived when it was created: a look-up, as for a user. An unknown
        # or expired id (or any id, without `delegation_token_secret_key`) gets None, and `ScramServer`
        # goes on with `unknown_scram_credential`, which it computes for every name, found or not,
        # with HMACs only. No PBKDF2 either way, and the same steps here for every id (stand-ins for
        # what is missing), so a real id with a wrong HMAC takes no longer to fail than any other.
        info = snap.tokens.get(username, _NO_TOKEN)
        cred = snap.token_credentials.get(username, _NO_CREDENTIALS).get(mechanism.name, _NO_CREDENTIAL)
        live = not info.is_expired(self.now_ms()) and cred is not _NO_CREDENTIAL
        # The token still works during its expiry millisecond (Kafka compares `expiryTimestamp <
        # now`), so the session may last until the millisecond after it.
        identity = ScramIdentity(info.owner, cred, token_authenticated=True, expiry_ms=info.usable_until_ms)
        return identity if live else None

    def validate_sasl_bearer(self, bearer: str) -> ValidatedToken:
        """An OAUTHBEARER login's token: a delegation token in kgov's form (`sasl.delegation.
        BEARER_PREFIX`), else a JWT. Only the Kafka SASL path takes delegation tokens: HTTP Bearer
        (`sasl.http_auth`) calls `validator` itself, so a token never reaches the control plane, whose
        token routes could not tell a token-authenticated caller (Kafka's tokens are SASL-only too)."""
        if is_delegation_bearer(bearer):
            return self.validate_delegation_bearer(bearer)
        return self.validator(bearer)

    def validate_delegation_bearer(self, bearer: str) -> ValidatedToken:
        """The owner of the delegation token a bearer names, token-authenticated, with the token's end as
        the session's (KIP-368); else `TokenValidationError` (`invalid_token` to the client, like any bad
        token). The HMAC is recomputed from the id under this node's key and compared in constant time
        (what is stored is only a hash of it); an unknown, removed or expired id, a wrong HMAC, or no
        `delegation_token_secret_key` at all run the same steps (stand-ins for what is missing), so
        neither the answer nor the time tells a real id from a guessed one. The reason, for the audit
        event only, names the id (never the HMAC)."""
        try:
            parsed = parse_bearer(bearer)
        except BearerFormatError as exc:
            raise TokenValidationError(str(exc)) from None
        # Checked against the store within LOOKUP_REFRESH_S, whatever the id: a token issued elsewhere
        # moments ago and handed straight to a worker is found, and a guess costs what a real id does.
        snap = self._login_snapshot()
        secret = self._token_secret
        expected = token_hmac(secret if secret is not None else self._unknown_token_key, parsed.token_id)
        matches = hmac.compare_digest(expected, parsed.hmac)
        info = snap.tokens.get(parsed.token_id, _NO_TOKEN)
        expired_now = info.is_expired(self.now_ms())
        if secret is None:
            reason = "delegation tokens are disabled (sasl.delegation_token_secret_key is unset)"
        elif info is _NO_TOKEN:
            reason = f"unknown delegation token {parsed.token_id} (never issued, or removed)"
        elif not matches:
            reason = f"delegation token {parsed.token_id}: the HMAC does not match"
        elif expired_now:
            reason = f"delegation token {parsed.token_id} has expired"
        elif info.owner.type != "User":  # `new_token` allows no other owner; fail closed all the same
            reason = f"delegation token {parsed.token_id}: its owner is not a User principal"
        else:
            # The token still works during its expiry millisecond (as for SCRAM, `scram_identity`).
            return ValidatedToken(principal_name=info.owner.name, scopes=frozenset(),
                                  expiry_ms=info.usable_until_ms, token_authenticated=True,
                                  token_id=parsed.token_id)
        raise TokenValidationError(reason, token_id=parsed.token_id)

    @staticmethod
    def _token_shape(mechanism: ScramMechanism) -> FakeCredentialShape:
        # A delegation token's credential: minimum iterations, 24 keyed bytes of salt.
        return FakeCredentialShape(iterations=mechanism.min_iterations, salt_length=TOKEN_SALT_LENGTH)

    def unknown_scram_credential(
        self, mechanism: ScramMechanism, username: str, token_auth: bool
    ) -> ScramCredential:
        """What SCRAM shows for a name without a credential, so that a probe cannot tell it from a
        real user by its salt or iteration count: keyed by the database's shared secret (the same on
        every node and after restarts), shaped like most stored credentials of that mechanism; for
        `tokenauth`, keyed by a secret of its own and shaped like a delegation token's (minimum
        iterations, 24 bytes of salt)."""
        if token_auth:
            fake = fake_credential(
                mechanism, username, key=self._unknown_token_key, shape=self._token_shape(mechanism)
            )
            if self._token_secret is None:
                return fake
            # The salt a token with this id has (or had, or would have): the same for a live token, one
            # that expired or was removed, and an id never issued, so the salt tells nobody which.
            return dataclasses.replace(fake, salt=token_salt(self._token_secret, username))
        census = self._login_snapshot().unknown_shapes[mechanism.name]
        shape = pick_fake_shape(census, mechanism, username, key=self._unknown_key)
        return fake_credential(mechanism, username, key=self._unknown_key, shape=shape)

    def verify_password_cached(self, username: str, password: str) -> VerifiedUser | None:
        """The derivation cache's answer for a password verified recently, or None (meaning: run
        `verify_password`). Cheap enough for an event loop: no PBKDF2 and no database here. When a
        credential refresh is due it answers None: the refresh (a query, perhaps a reload of every
        credential) then runs in `verify_password`, off the loop, and a removed user is not served
        from a snapshot nobody refreshes."""
        if (self._unreachable_since is not None  # `verify_password` decides, with `max_snapshot_age_s`
                or self._monotonic() - self._checked_at >= min(LOOKUP_REFRESH_S, self.sasl.refresh_interval_s)):
            return None
        snap = self._snapshot
        for mech in (SCRAM_SHA_512, MECHANISMS["SCRAM-SHA-256"]):
            cred = snap.scram.get((username, mech.name))
            if cred is not None:
                if self._plain_cache.matches(self._plain_cache.key(mech.name, username, password), cred.stored_key):
                    return VerifiedUser(Principal("User", username))
                return None
        return None

    def verify_password(self, username: str, password: str) -> VerifiedUser | None:
        """PLAIN / HTTP Basic against the stored SCRAM credential (SHA-512 preferred), constant time."""
        snap = self._login_snapshot()
        found: tuple[ScramMechanism, ScramCredential] | None = None
        for mech in (SCRAM_SHA_512, MECHANISMS["SCRAM-SHA-256"]):
            cred = snap.scram.get((username, mech.name))
            if cred is not None:
                found = (mech, cred)
                break
        if found is None:
            # The work of checking a user with the shape SCRAM shows for this name (`pick_fake_shape`),
            # so the time taken does not tell whether the name exists.
            mech = snap.plain_mechanism
            shape = pick_fake_shape(snap.unknown_shapes[mech.name], mech, username, key=self._unknown_key)
            mech.salted_password(password, b"kgov-none", shape.iterations)
            return None
        mech, cred = found
        cache_key = self._plain_cache.key(mech.name, username, password)
        if self._plain_cache.matches(cache_key, cred.stored_key):
            return VerifiedUser(Principal("User", username))
        salted = mech.salted_password(password, cred.salt, cred.iterations)
        if not hmac.compare_digest(mech.hash(mech.hmac(salted, b"Client Key")), cred.stored_key):
            return None
        self._plain_cache.put(cache_key, cred.stored_key)
        return VerifiedUser(Principal("User", username))

    # -- audit -----------------------------------------------------------------------------------
    def audit_authentication(
        self, failure: Failure, client_address: str, method: str, *, reauthenticating: Principal | None = None
    ) -> None:
        if self._audit is None:
            return
        # One shape for every authentication event (the gateway writes the same builder's events).
        # A failed re-authentication names the session's principal, as the gateway's own events do.
        event = authentication_event(source=self._source, time=self._clock(),
                                     principal=str(reauthenticating) if reauthenticating else None,
                                     mechanism=failure.mechanism, client_address=client_address, success=False,
                                     reason=failure.reason, reauthentication=reauthenticating is not None,
                                     token_id=failure.token_id)
        self._audit.write(replace(event, data={**event.data, "methodName": method}))

    def _audit_change(
        self,
        method: str,
        target: str,
        details: Callable[[Any], Mapping[str, Any]],
        actor: Principal | str,
        client_address: str | None,
    ) -> Callable[[Any], None] | None:
        """The store's `before_commit` hook: writes the CREDENTIAL_CHANGE event inside the transaction,
        so a failing audit sink rolls the change back. `details` gets the store method's result."""
        sink = self._audit
        if sink is None:
            return None

        def write(result: Any) -> None:
            sink.write(
                change_event(
                    type=EventType.CREDENTIAL_CHANGE,
                    source=self._source,
                    time=self._clock(),
                    principal=str(actor),
                    method_name=method,
                    target=target,
                    details=details(result),
                    client_address=client_address,
                )
            )

        return write

    # -- SCRAM users -----------------------------------------------------------------------------
    def set_scram_credential(
        self,
        name: str,
        mechanism: str,
        password: str,
        *,
        iterations: int | None = None,
        actor: Principal | str,
        client_address: str | None = None,
        shared_principal: bool = False,
    ) -> bool:
        """Creates or replaces a credential (Kafka's AlterUserScramCredentials upsertion); True if replaced.
        A new user named like an OAuth client needs `shared_principal` (`_refuse_shared_principal`)."""
        _check_username(name)
        self._refuse_shared_principal(name, scram=True, allowed=shared_principal)
        mech = MECHANISMS.get(mechanism.upper())
        if mech is None:
            raise CredentialError(CredentialError.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        if not password:
            raise CredentialError(CredentialError.UNACCEPTABLE_CREDENTIAL, "Password must not be empty")
        n = self.sasl.scram_iterations if iterations is None else iterations
        try:
            check_iterations(mech, n)
        except ValueError as exc:
            raise CredentialError(CredentialError.UNACCEPTABLE_CREDENTIAL, str(exc)) from None
        return self._store_scram(
            name, mech, derive_credential(mech, password, iterations=n), actor, client_address
        )

    def set_scram_salted_credential(
        self,
        name: str,
        mechanism: str,
        *,
        salt: bytes,
        salted_password: bytes,
        iterations: int,
        actor: Principal | str,
        client_address: str | None = None,
    ) -> bool:
        """Kafka's AlterUserScramCredentials upsertion as sent on the wire: the client computed the
        salted password; StoredKey and ServerKey are derived here. True if it replaced a credential.
        Kafka's request has no way to say `shared_principal`: a new user named like an OAuth client is
        refused with DUPLICATE_RESOURCE (`_refuse_shared_principal`)."""
        _check_username(name)
        self._refuse_shared_principal(name, scram=True, allowed=False)
        mech = MECHANISMS.get(mechanism.upper())
        if mech is None:
            raise CredentialError(CredentialError.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        try:
            check_iterations(mech, iterations)
        except ValueError as exc:
            raise CredentialError(CredentialError.UNACCEPTABLE_CREDENTIAL, str(exc)) from None
        if not salt or len(salted_password) != mech.digest_size:
            raise CredentialError(CredentialError.UNACCEPTABLE_CREDENTIAL, "Invalid salt or salted password")
        cred = credential_from_salted(mech, salted_password, salt, iterations)
        return self._store_scram(name, mech, cred, actor, client_address)

    def _store_scram(
        self,
        name: str,
        mech: ScramMechanism,
        cred: ScramCredential,
        actor: Principal | str,
        client_address: str | None,
    ) -> bool:
        audit = self._audit_change(
            "scram.UpsertCredential",
            f"user={name}",
            lambda replaced: {
                "user": name,
                "mechanism": mech.name,
                "iterations": cred.iterations,
                "replaced": replaced,
            },
            actor,
            client_address,
        )
        replaced = self.store.upsert_scram(name, mech.name, cred, self.now_ms(), before_commit=audit)
        self.refresh()
        return replaced

    def delete_scram_credential(
        self, name: str, mechanism: str | None, *, actor: Principal | str, client_address: str | None = None
    ) -> int:
        _check_username(name)
        mech_name = None
        if mechanism is not None:
            mech = MECHANISMS.get(mechanism.upper())
            if mech is None:
                raise CredentialError(CredentialError.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
            mech_name = mech.name
        audit = self._audit_change(
            "scram.DeleteCredential",
            f"user={name}",
            lambda removed: {"user": name, "mechanism": mech_name or "ALL", "removed": removed},
            actor,
            client_address,
        )
        removed = self.store.delete_scram(name, mech_name, before_commit=audit)
        if not removed:
            raise CredentialError(
                CredentialError.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
            )
        self.refresh()
        return removed

    def describe_scram_users(self, names: Iterable[str] | None = None) -> list[ScramUser]:
        snap = self._current()
        wanted = set(names) if names is not None else None
        users: dict[str, list[MechanismInfo]] = {}
        for (user, mech), cred in sorted(snap.scram.items()):
            if wanted is None or user in wanted:
                users.setdefault(user, []).append(MechanismInfo(mech, cred.iterations))
        return [ScramUser(u, tuple(m)) for u, m in sorted(users.items())]

    def ensure_admin(self, user: str, password: str | None) -> bool:
        """Creates the bootstrap admin as a SCRAM-SHA-512 user when missing; True if created."""
        if not password or (user, SCRAM_SHA_512.name) in self._current().scram:
            return False
        # The configured super user is created even if a client holds its name (made before the
        # clash was refused, or with shared_principal): refusing would stop kgov from starting.
        self.set_scram_credential(user, SCRAM_SHA_512.name, password, actor="kgov:bootstrap",
                                  shared_principal=True)
        return True

    def _refuse_shared_principal(self, name: str, *, scram: bool, allowed: bool) -> None:
        """A SCRAM user and an OAuth client of one name are one principal, `User:<name>`, as in Kafka
        (SCRAM's authorization id and OAUTHBEARER's `sub` both become a `User:` KafkaPrincipal): the
        client would hold every ACL, role and group of the user, and the user the client's. So a new
        one of either kind named like the other is refused (DUPLICATE_RESOURCE, 409) unless the
        request says `shared_principal`; changing an existing user or client is not. Checked against
        the database (clients) and the current snapshot (users); two nodes creating the two kinds at
        the same moment are not serialized against each other."""
        if allowed:
            return
        is_user = any(user == name for user, _mechanism in self._current().scram)
        is_client = self.store.get_client(name) is not None
        if scram and (is_user or not is_client):
            return
        if not scram and (is_client or not is_user):
            return
        other = "an OAuth client" if scram else "a SCRAM user"
        raise CredentialError(
            CredentialError.DUPLICATE_RESOURCE,
            f"{name} is already {other}: both would be the principal User:{name} and share its ACLs, roles and "
            "groups. Choose another name, or set shared_principal to mean one principal with two credentials",
        )

    # -- service accounts ------------------------------------------------------------------------
    def set_client(
        self,
        client_id: str,
        secret: str,
        scopes: Iterable[str] = (),
        *,
        actor: Principal | str,
        client_address: str | None = None,
        shared_principal: bool = False,
    ) -> bool:
        if not client_id or ":" in client_id or "\x00" in client_id or len(client_id) > MAX_NAME_LENGTH:
            raise CredentialError(
                CredentialError.UNACCEPTABLE_CREDENTIAL,
                f"client_id must be non-empty, at most {MAX_NAME_LENGTH} characters, without ':' or NUL",
            )
        if not is_clean_principal_name(client_id):
            # The client id is its tokens' principal (`sub`), which the validator refuses so.
            raise CredentialError(
                CredentialError.UNACCEPTABLE_CREDENTIAL,
                "client_id must not have surrounding spaces or control characters",
            )
        if len(secret) < 16:
            raise CredentialError(
                CredentialError.UNACCEPTABLE_CREDENTIAL, "client_secret must have at least 16 characters"
            )
        if not _FORM_SAFE.fullmatch(client_id) or not _FORM_SAFE.fullmatch(secret):
            # `POST /oauth/token` reads HTTP Basic as sent (`sasl.api._client_credentials`); with these
            # characters a client that form-urlencodes first (RFC 6749 §2.3.1, Kafka's
            # sasl.oauthbearer.header.urlencode=true) sends the same bytes as one that does not.
            raise CredentialError(
                CredentialError.UNACCEPTABLE_CREDENTIAL,
                "client_id and client_secret may hold only letters, digits, '.', '_' and '-' (so that "
                "clients that URL-encode them for HTTP Basic and clients that do not send the same value)",
            )
        if len(secret) > MAX_SECRET_LENGTH:  # passlib hashes no longer secret
            raise CredentialError(
                CredentialError.UNACCEPTABLE_CREDENTIAL,
                f"client_secret must have at most {MAX_SECRET_LENGTH} characters",
            )
        scope_list = sorted({s for s in scopes if s})
        if any(not _valid_scope_token(s) for s in scope_list):
            raise CredentialError(CredentialError.UNACCEPTABLE_CREDENTIAL, "invalid scope value")
        self._refuse_shared_principal(client_id, scram=False, allowed=shared_principal)
        audit = self._audit_change(
            "oauth.UpsertClient",
            f"client={client_id}",
            lambda replaced: {"client_id": client_id, "scopes": scope_list, "replaced": replaced},
            actor,
            client_address,
        )
        replaced = self.store.upsert_client(
            client_id, pbkdf2_sha256.hash(secret), scope_list, self.now_ms(), before_commit=audit
        )
        self.refresh()  # the client's tokens (`_revoked_own_token`) follow at once on this node
        return replaced

    def delete_client(
        self, client_id: str, *, actor: Principal | str, client_address: str | None = None
    ) -> None:
        audit = self._audit_change(
            "oauth.DeleteClient",
            f"client={client_id}",
            lambda _r: {"client_id": client_id},
            actor,
            client_address,
        )
        # No client id holds NUL (`set_client`); PostgreSQL would refuse to even look it up.
        if "\x00" in client_id or not self.store.delete_client(client_id, before_commit=audit):
            raise CredentialError(
                CredentialError.RESOURCE_NOT_FOUND, f"OAuth client {client_id} does not exist"
            )
        self.refresh()  # its tokens stop at once on this node, on the others at their next check

    def list_clients(self) -> list[ServiceAccount]:
        return self.store.list_clients()

    def authenticate_client(self, client_id: str, secret: str) -> ServiceAccount | None:
        """The client, when the secret is its own. From the snapshot, checked against the store within
        `LOOKUP_REFRESH_S` (`_login_snapshot`): a client created or replaced through another node a
        moment ago is found, no request queries the database for its id, and the tokens issued here
        carry the secret version this node's validator holds (`_revoked_own_token`).
        Raises `CredentialStoreUnavailable` past `max_snapshot_age_s`."""
        account = self._login_snapshot().accounts.get(client_id)
        ok = verify_hashed_secret(secret, account.secret_hash if account else _DUMMY_CLIENT_HASH)
        return account if ok and account else None

    # -- token issuer ----------------------------------------------------------------------------
    def _own_jwks(self) -> Mapping[str, Any]:
        return issuer_mod.jwks(self.store.signing_keys())

    def jwks_document(self) -> dict[str, Any]:
        self._signing_key()
        return issuer_mod.jwks(self._current().keys)

    def rotate_signing_key(self, *, force: bool = False) -> StoredSigningKey:
        keep_ms = (self.oauth.token_lifetime_s + self.oauth.clock_skew_s) * 1000
        for _ in range(3):
            keys = self.store.signing_keys()
            plan = issuer_mod.plan_rotation(
                keys,
                now_ms=self.now_ms(),
                alg=self.oauth.signing_algorithm,
                rotation_ms=self.oauth.key_rotation_s * 1000,
                keep_retired_ms=keep_ms,
                force=force,
            )
            sealed = [
                dataclasses.replace(
                    k, private_pem=issuer_mod.seal_private_key(k.private_pem, k.kid, self._signing_secret)
                )
                for k in plan.add
            ]
            if plan.empty or self.store.replace_signing_keys(
                sealed, plan.retire, plan.remove, expected_active=plan.expected_active
            ):
                break
        self.refresh()
        with contextlib.suppress(Exception):  # own JWKS comes from our database; retried on next lookup
            self.jwks.refresh()
        active = issuer_mod.active_key(self._snapshot.keys)
        assert active is not None
        return active

    def _signing_key(self) -> StoredSigningKey:
        active = issuer_mod.active_key(self._current().keys)
        if (
            active is None
            or active.alg != self.oauth.signing_algorithm
            or self.now_ms() - active.created_ms >= self.oauth.key_rotation_s * 1000
        ):
            active = self.rotate_signing_key()
        if not active.private_pem:
            raise OAuthError(
                "server_error",
                "the token issuer cannot open its signing key (check oauth.signing_key_secret)",
                500,
            )
        return active

    def _revoked_own_token(self, claims: Mapping[str, Any]) -> str | None:
        """Why a token kgov's issuer minted no longer authenticates, or None. Kafka cannot revoke a JWT
        (its validators check signature and claims only, so a token lives until `exp`); kgov issued
        these itself and knows their clients, so deleting a client, or replacing it (`set_client`: a
        new secret, or new scopes), ends its tokens at the next snapshot refresh (`[sasl]
        refresh_interval_s`) on every node. The snapshot answers: no database query per token. A
        token from before `kgov_client_version` was written is ended by the deletion only."""
        if claims.get("iss") != self.oauth.token_issuer:
            return None  # not minted here (the validator's issuer check refuses it anyway)
        client_id = claims.get("client_id", claims.get("sub"))
        try:
            clients = self._login_snapshot().clients
        except CredentialStoreUnavailable:
            return "cannot tell whether the token's OAuth client was deleted: the credential store is unreachable"
        current = clients.get(client_id) if isinstance(client_id, str) else None
        if current is None:
            return f"OAuth client {client_id} was deleted: the tokens issued to it are revoked"
        version = claims.get(issuer_mod.CLIENT_VERSION_CLAIM)
        if version is not None and not (isinstance(version, str) and hmac.compare_digest(version, current)):
            return f"OAuth client {client_id} was replaced since this token was issued: it is revoked"
        return None

    def issue_token(self, account: ServiceAccount, requested_scope: str | None) -> IssuedToken:
        """RFC 6749 §4.4: a short-lived JWT whose `sub` is the client id."""
        allowed = set(account.scopes)
        requested = set(requested_scope.split()) if requested_scope else allowed
        if not requested <= allowed:
            raise OAuthError("invalid_scope", "the requested scope is not allowed for this client")
        return issuer_mod.mint_access_token(
            self._signing_key(),
            issuer=self.oauth.token_issuer,
            audience=self.oauth.token_audience,
            subject=account.client_id,
            scopes=requested,
            now_s=int(self._clock().timestamp()),
            lifetime_s=self.oauth.token_lifetime_s,
            scope_claim=self.oauth.scope_claim,
            version=issuer_mod.client_version(account.secret_hash),
        )

    # -- delegation tokens -----------------------------------------------------------------------
    def _secret(self) -> bytes:
        if self._token_secret is None:
            raise DelegationTokenError(TokenErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
        return self._token_secret

    def _token_by_hmac(self, hmac_b64: str) -> TokenInfo:
        info = self.store.token_by_hmac(hmac_lookup_key(decode_hmac(hmac_b64)))
        if info is None:
            raise DelegationTokenError(TokenErrorCode.DELEGATION_TOKEN_NOT_FOUND)
        return info

    def create_token(
        self,
        requester: Principal,
        *,
        renewers: Iterable[Principal] = (),
        max_lifetime_ms: int = -1,
        owner: Principal | None = None,
        token_authenticated: bool = False,
        client_address: str | None = None,
    ) -> CreatedToken:
        """KIP-48 create. The caller has already checked CREATE_TOKENS on User:<owner> when owner != requester.

        `token_authenticated`: the caller's session authenticated with a delegation token; create,
        renew, expire and describe then all answer DELEGATION_TOKEN_REQUEST_NOT_ALLOWED (Kafka's
        `allowTokenRequests`, checked before anything else)."""
        check_request_allowed(token_authenticated)
        for who in (owner or requester, requester):
            if len(str(who)) > MAX_TOKEN_PRINCIPAL_LENGTH or "\x00" in str(who):
                # The store's owner and requester columns; PostgreSQL would answer with a database error.
                # Kafka keeps any principal; this check serves REST and Kafka's CreateDelegationToken alike.
                raise DelegationTokenError(
                    TokenErrorCode.INVALID_PRINCIPAL_TYPE,
                    f"Token owners and requesters are at most {MAX_TOKEN_PRINCIPAL_LENGTH} characters (Type:name), "
                    "without NUL",
                )
        secret = self._secret()
        now = self.now_ms()
        self.store.delete_expired_tokens(now)
        info = new_token(
            now_ms=now,
            owner=owner or requester,
            requester=requester,
            renewers=renewers,
            max_lifetime_ms=max_lifetime_ms,
            policy=self._policy,
            token_authenticated=token_authenticated,
        )
        mac = token_hmac(secret, info.token_id)
        # Kafka derives these on every broker whenever it loads a token; here once, on this node.
        credentials = token_scram_credentials(secret, info.token_id)
        audit = self._audit_change(
            "delegationToken.Create",
            f"delegation-token={info.token_id}",
            lambda _r: {
                "token_id": info.token_id,
                "owner": str(info.owner),
                "renewers": [str(r) for r in info.renewers],
                "expiry_timestamp_ms": info.expiry_ms,
                "max_timestamp_ms": info.max_ms,
            },
            requester,
            client_address,
        )
        self.store.insert_token(info, hmac_lookup_key(mac), credentials, before_commit=audit)
        self.refresh()
        return CreatedToken(info, mac)

    def renew_token(
        self,
        caller: Principal,
        hmac_b64: str,
        renew_period_ms: int,
        *,
        token_authenticated: bool = False,
        client_address: str | None = None,
    ) -> TokenInfo:
        check_request_allowed(token_authenticated)
        self._secret()
        info = renewed(
            self._token_by_hmac(hmac_b64),
            caller=caller,
            now_ms=self.now_ms(),
            renew_period_ms=renew_period_ms,
            policy=self._policy,
        )
        audit = self._audit_change(
            "delegationToken.Renew",
            f"delegation-token={info.token_id}",
            lambda _r: {"token_id": info.token_id, "expiry_timestamp_ms": info.expiry_ms},
            caller,
            client_address,
        )
        self.store.update_token_expiry(info.token_id, info.expiry_ms, before_commit=audit)
        self.refresh()
        return info

    def expire_token(
        self,
        caller: Principal,
        hmac_b64: str,
        expiry_period_ms: int,
        *,
        token_authenticated: bool = False,
        client_address: str | None = None,
    ) -> int:
        """Returns the new expiry timestamp; a negative period removes the token at once and returns
        the period as given (Kafka's KRaft controller does the same)."""
        check_request_allowed(token_authenticated)
        self._secret()
        now = self.now_ms()
        before = self._token_by_hmac(hmac_b64)
        after = expired(before, caller=caller, now_ms=now, expiry_period_ms=expiry_period_ms)
        expiry = expire_answer_ms(after, expiry_period_ms)
        audit = self._audit_change(
            "delegationToken.Expire",
            f"delegation-token={before.token_id}",
            lambda _r: {"token_id": before.token_id, "expiry_timestamp_ms": expiry, "removed": after is None},
            caller,
            client_address,
        )
        if after is None:
            self.store.delete_token(before.token_id, before_commit=audit)
        else:
            self.store.update_token_expiry(after.token_id, after.expiry_ms, before_commit=audit)
        self.refresh()
        return expiry

    def describe_tokens(
        self,
        caller: Principal,
        *,
        owners: list[Principal] | None,
        may_describe: Callable[[TokenInfo], bool],
        token_authenticated: bool = False,
    ) -> list[TokenInfo]:
        """Tokens the caller may see (Kafka's filterToken). HMACs are never returned after creation."""
        check_request_allowed(token_authenticated)
        self._secret()
        if owners is not None and not owners:
            return []
        now = self.now_ms()
        return [
            t
            for t in self.store.all_tokens()
            if not t.is_expired(now) and visible(t, caller=caller, owners=owners, may_describe=may_describe)
        ]


MAX_NAME_LENGTH: Final = 255  # the name columns of sasl/store.py
# What application/x-www-form-urlencoded leaves as it is in Java's URLEncoder, Python's quote_plus and
# the WHATWG serializer alike.
_FORM_SAFE: Final = re.compile(r"[A-Za-z0-9._-]+")
MAX_TOKEN_PRINCIPAL_LENGTH: Final = 512  # the token owner and requester columns


def _check_username(name: str) -> None:
    # Kafka's wording for the empty name; the length is the store's column (PostgreSQL would refuse
    # a longer one with a database error, SQLite would keep it).
    if not name:
        raise CredentialError(CredentialError.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise CredentialError(
            CredentialError.UNACCEPTABLE_CREDENTIAL, f"Username must be at most {MAX_NAME_LENGTH} characters"
        )
    if "\x00" in name:  # PostgreSQL cannot store it, PLAIN cannot send it (authz.model.refuse_nul)
        raise CredentialError(CredentialError.UNACCEPTABLE_CREDENTIAL, "Username must not contain NUL")


def _valid_scope_token(s: str) -> bool:
    # RFC 6749 §3.3 scope-token: %x21 / %x23-5B / %x5D-7E
    return all(c == "\x21" or "\x23" <= c <= "\x5b" or "\x5d" <= c <= "\x7e" for c in s)
