"""Persistence of credentials through SQLAlchemy (`authz.database` conventions), no policy here.

Tables (component `sasl`):
- `sasl_scram_credentials`: per user and mechanism salt, StoredKey, ServerKey, iterations. Never a password.
- `sasl_service_accounts`: OAuth client id, passlib hash of its secret, allowed scopes.
- `sasl_delegation_tokens`: KIP-48 token information; the HMAC itself is not stored (as Kafka), only
  SHA-256 of it to find a token by the HMAC a client presents.
- `sasl_signing_keys`: the token issuer's keys (private PEM, public JWK), with retirement times.
- `sasl_server_secrets` (v2): random keys the nodes must share, each created once, on first use by
  `server_secret`. `scram-unknown-user` keys the fake SCRAM salts shown for unknown user names, so
  every node and every restart shows the same salt for the same name, as it would for a real user. `scram-unknown-token` does the same for
  unknown delegation-token ids (`tokenauth`) and keys the password their fake derivation runs with;
  a key of its own, since with the users' key an unknown id would show the same salt as a login
  without `tokenauth` under that name, while a real token's differs (a second row, so no schema change
  and no new version that older nodes would refuse).
- `sasl_delegation_token_credentials` (v3): each token's SCRAM credential per mechanism (salt,
  StoredKey, ServerKey, iterations; never the HMAC), derived once when the token is created so a
  login costs no PBKDF2. Tokens created before v3 (or by an older node during a rolling upgrade) get
  theirs from the first node that loads them (`add_token_credentials`), not in the migration: that
  needs `delegation_token_secret_key`, which the store never sees, and would hold the migration lock
  for a PBKDF2 per token. Removed with their token.
Every write bumps the `sasl` change version so other nodes reload their snapshot.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from authz.database import Migration, bump_version, lock_component, migrate, read_version, transaction
from authz.model import Principal
from sasl.delegation import TokenInfo
from sasl.scram import ScramCredential

COMPONENT = "sasl"

# Called inside the write transaction with the method's result: the audit record is written there,
# so a failed audit write rolls the change back (no unaudited credential change).
OnCommit = Callable[[Any], None] | None


def _changed(conn: Connection, before_commit: OnCommit, result: Any) -> None:
    bump_version(conn, COMPONENT)
    if before_commit is not None:
        before_commit(result)


metadata = sa.MetaData()

scram_credentials = sa.Table(
    "sasl_scram_credentials",
    metadata,
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column("mechanism", sa.String(32), primary_key=True),
    sa.Column("salt", sa.LargeBinary, nullable=False),
    sa.Column("stored_key", sa.LargeBinary, nullable=False),
    sa.Column("server_key", sa.LargeBinary, nullable=False),
    sa.Column("iterations", sa.Integer, nullable=False),
    sa.Column("updated_ms", sa.BigInteger, nullable=False),
)

service_accounts = sa.Table(
    "sasl_service_accounts",
    metadata,
    sa.Column("client_id", sa.String(255), primary_key=True),
    sa.Column("secret_hash", sa.String(255), nullable=False),
    sa.Column("scopes", sa.Text, nullable=False),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
)

delegation_tokens = sa.Table(
    "sasl_delegation_tokens",
    metadata,
    sa.Column("token_id", sa.String(64), primary_key=True),
    sa.Column("hmac_sha256", sa.String(64), nullable=False, unique=True),
    sa.Column("owner", sa.String(512), nullable=False),
    sa.Column("requester", sa.String(512), nullable=False),
    sa.Column("renewers", sa.Text, nullable=False),
    sa.Column("issue_ms", sa.BigInteger, nullable=False),
    sa.Column("expiry_ms", sa.BigInteger, nullable=False),
    sa.Column("max_ms", sa.BigInteger, nullable=False),
)

token_credentials = sa.Table(
    "sasl_delegation_token_credentials",
    metadata,
    sa.Column("token_id", sa.String(64), primary_key=True),
    sa.Column("mechanism", sa.String(32), primary_key=True),
    sa.Column("salt", sa.LargeBinary, nullable=False),
    sa.Column("stored_key", sa.LargeBinary, nullable=False),
    sa.Column("server_key", sa.LargeBinary, nullable=False),
    sa.Column("iterations", sa.Integer, nullable=False),
)

signing_keys = sa.Table(
    "sasl_signing_keys",
    metadata,
    sa.Column("kid", sa.String(128), primary_key=True),
    sa.Column("alg", sa.String(16), nullable=False),
    sa.Column("private_pem", sa.Text, nullable=False),
    sa.Column("public_jwk", sa.Text, nullable=False),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    sa.Column("retired_ms", sa.BigInteger, nullable=True),
)


server_secrets = sa.Table(
    "sasl_server_secrets",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value", sa.LargeBinary, nullable=False),
)

SCRAM_UNKNOWN_USER_SECRET = "scram-unknown-user"  # noqa: S105 - the name of a secret, not a secret
SCRAM_UNKNOWN_TOKEN_SECRET = "scram-unknown-token"  # noqa: S105 - the name of a secret, not a secret


def _create_v1(conn: Connection) -> None:
    metadata.create_all(conn, checkfirst=True)


def _create_v2(conn: Connection) -> None:
    server_secrets.create(conn, checkfirst=True)  # its rows are made on first use (`server_secret`)


def _create_v3(conn: Connection) -> None:
    # Existing tokens get their rows from the first node that loads them (see the module docstring).
    token_credentials.create(conn, checkfirst=True)


MIGRATIONS = [
    Migration(1, "credential tables", _create_v1),
    Migration(2, "shared server secrets", _create_v2),
    Migration(3, "delegation-token SCRAM credentials", _create_v3),
]


@dataclass(frozen=True, slots=True)
class ServiceAccount:
    client_id: str
    secret_hash: str = field(repr=False)
    scopes: tuple[str, ...]
    created_ms: int


@dataclass(frozen=True, slots=True)
class StoredSigningKey:
    kid: str
    alg: str
    private_pem: str = field(repr=False)
    public_jwk: dict[str, Any]
    created_ms: int
    retired_ms: int | None


@dataclass(frozen=True, slots=True)
class StoredToken:
    info: TokenInfo
    hmac_sha256: str = field(repr=False)


class CredentialStore:
    """SQL for the credential tables. Callers hold no connection; each method is one transaction."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        migrate(engine, COMPONENT, MIGRATIONS)

    # -- change counter -------------------------------------------------------------------------
    def version(self) -> int:
        with self.engine.connect() as conn:
            return read_version(conn, COMPONENT)

    def _write(self) -> Any:
        return transaction(self.engine)

    # -- shared secrets -------------------------------------------------------------------------
    def server_secret(self, name: str) -> bytes:
        """A random key shared by every node, created on first use (never rotated, never shown)."""
        select = sa.select(server_secrets.c.value).where(server_secrets.c.name == name)
        with self.engine.connect() as conn:
            row = conn.execute(select).first()
        if row is not None:
            return bytes(row[0])
        with self._write() as conn:
            lock_component(conn, COMPONENT)
            row = conn.execute(select).first()
            if row is None:
                value = secrets.token_bytes(32)
                conn.execute(sa.insert(server_secrets).values(name=name, value=value))
                return value
        return bytes(row[0])

    # -- SCRAM ----------------------------------------------------------------------------------
    def upsert_scram(
        self, name: str, mechanism: str, cred: ScramCredential, now_ms: int, *, before_commit: OnCommit = None
    ) -> bool:
        """Stores a credential; True when it replaced an existing one."""
        values = {
            "salt": cred.salt,
            "stored_key": cred.stored_key,
            "server_key": cred.server_key,
            "iterations": cred.iterations,
            "updated_ms": now_ms,
        }
        key = (scram_credentials.c.name == name) & (scram_credentials.c.mechanism == mechanism)
        with self._write() as conn:
            updated = bool(conn.execute(sa.update(scram_credentials).where(key).values(**values)).rowcount)
            if not updated:
                conn.execute(sa.insert(scram_credentials).values(name=name, mechanism=mechanism, **values))
            _changed(conn, before_commit, updated)
        return updated

    def delete_scram(self, name: str, mechanism: str | None, *, before_commit: OnCommit = None) -> int:
        cond = scram_credentials.c.name == name
        if mechanism is not None:
            cond = cond & (scram_credentials.c.mechanism == mechanism)
        with self._write() as conn:
            n = int(conn.execute(sa.delete(scram_credentials).where(cond)).rowcount)
            if n:
                _changed(conn, before_commit, n)
        return n

    def all_scram(self) -> dict[tuple[str, str], ScramCredential]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(scram_credentials)).all()
        return {
            (r.name, r.mechanism): ScramCredential(
                bytes(r.salt), bytes(r.stored_key), bytes(r.server_key), r.iterations
            )
            for r in rows
        }

    # -- service accounts -----------------------------------------------------------------------
    def upsert_client(
        self,
        client_id: str,
        secret_hash: str,
        scopes: list[str],
        now_ms: int,
        *,
        before_commit: OnCommit = None,
    ) -> bool:
        values = {"secret_hash": secret_hash, "scopes": json.dumps(sorted(set(scopes)))}
        with self._write() as conn:
            cond = service_accounts.c.client_id == client_id
            updated = bool(conn.execute(sa.update(service_accounts).where(cond).values(**values)).rowcount)
            if not updated:
                conn.execute(
                    sa.insert(service_accounts).values(client_id=client_id, created_ms=now_ms, **values)
                )
            _changed(conn, before_commit, updated)
        return updated

    def delete_client(self, client_id: str, *, before_commit: OnCommit = None) -> bool:
        with self._write() as conn:
            n = conn.execute(
                sa.delete(service_accounts).where(service_accounts.c.client_id == client_id)
            ).rowcount
            if n:
                _changed(conn, before_commit, n)
        return bool(n)

    def get_client(self, client_id: str) -> ServiceAccount | None:
        if "\x00" in client_id:
            # No client id holds NUL (`CredentialService.set_client`), and PostgreSQL cannot even compare
            # one: the form of `POST /oauth/token` would otherwise turn `%00` into a database error.
            return None
        with self.engine.connect() as conn:
            r = conn.execute(
                sa.select(service_accounts).where(service_accounts.c.client_id == client_id)
            ).first()
        return _account(r) if r else None

    def list_clients(self) -> list[ServiceAccount]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(service_accounts).order_by(service_accounts.c.client_id)).all()
        return [_account(r) for r in rows]

    # -- delegation tokens ----------------------------------------------------------------------
    def insert_token(
        self,
        info: TokenInfo,
        hmac_sha256: str,
        credentials: Mapping[str, ScramCredential],
        *,
        before_commit: OnCommit = None,
    ) -> None:
        """The token and its SCRAM credentials (per mechanism name), in one transaction."""
        with self._write() as conn:
            conn.execute(sa.insert(delegation_tokens).values(hmac_sha256=hmac_sha256, **_token_values(info)))
            _insert_token_credentials(conn, info.token_id, credentials)
            _changed(conn, before_commit, info)

    def token_credentials(self, token_ids: Collection[str] | None = None) -> dict[tuple[str, str], ScramCredential]:
        """The stored token credentials by (token id, mechanism): of `token_ids`, or all."""
        with self.engine.connect() as conn:
            if token_ids is None:
                rows = conn.execute(sa.select(token_credentials)).all()
            else:
                ids = list(token_ids)
                rows = []
                for i in range(0, len(ids), 500):  # bounded IN lists
                    chunk = ids[i : i + 500]
                    rows += conn.execute(
                        sa.select(token_credentials).where(token_credentials.c.token_id.in_(chunk))
                    ).all()
        return {
            (r.token_id, r.mechanism): ScramCredential(
                bytes(r.salt), bytes(r.stored_key), bytes(r.server_key), r.iterations
            )
            for r in rows
        }

    def token_hmac_keys(self, token_ids: Collection[str]) -> dict[str, str]:
        """The stored HMAC lookup keys (`sasl.delegation.hmac_lookup_key`) of `token_ids`, by token id."""
        ids = list(token_ids)
        keys: dict[str, str] = {}
        with self.engine.connect() as conn:
            for i in range(0, len(ids), 500):  # bounded IN lists
                rows = conn.execute(
                    sa.select(delegation_tokens.c.token_id, delegation_tokens.c.hmac_sha256).where(
                        delegation_tokens.c.token_id.in_(ids[i : i + 500])
                    )
                ).all()
                keys.update((r.token_id, r.hmac_sha256) for r in rows)
        return keys

    def add_token_credentials(self, derived: Mapping[str, Mapping[str, ScramCredential]]) -> int:
        """Stores credentials derived for tokens that had none (token id -> mechanism -> credential);
        skips tokens removed meanwhile and mechanisms already stored. Returns the rows added.

        No version bump: nodes derive the same values (the salt is keyed, see
        `sasl.delegation.token_salt`), and every later load reads them from here."""
        added = 0
        with self._write() as conn:
            lock_component(conn, COMPONENT)  # serialised with `delete_token` / `delete_expired_tokens`
            for token_id, creds in derived.items():
                exists = conn.execute(
                    sa.select(delegation_tokens.c.token_id).where(delegation_tokens.c.token_id == token_id)
                ).first()
                if exists is None:
                    continue
                have = set(
                    conn.execute(
                        sa.select(token_credentials.c.mechanism).where(token_credentials.c.token_id == token_id)
                    ).scalars()
                )
                missing = {m: c for m, c in creds.items() if m not in have}
                _insert_token_credentials(conn, token_id, missing)
                added += len(missing)
        return added

    def update_token_expiry(self, token_id: str, expiry_ms: int, *, before_commit: OnCommit = None) -> None:
        with self._write() as conn:
            conn.execute(
                sa.update(delegation_tokens)
                .where(delegation_tokens.c.token_id == token_id)
                .values(expiry_ms=expiry_ms)
            )
            _changed(conn, before_commit, expiry_ms)

    def delete_token(self, token_id: str, *, before_commit: OnCommit = None) -> None:
        with self._write() as conn:
            lock_component(conn, COMPONENT)
            conn.execute(sa.delete(token_credentials).where(token_credentials.c.token_id == token_id))
            conn.execute(sa.delete(delegation_tokens).where(delegation_tokens.c.token_id == token_id))
            _changed(conn, before_commit, token_id)

    def token_by_hmac(self, hmac_sha256: str) -> TokenInfo | None:
        with self.engine.connect() as conn:
            r = conn.execute(
                sa.select(delegation_tokens).where(delegation_tokens.c.hmac_sha256 == hmac_sha256)
            ).first()
        return _token(r) if r else None

    def all_tokens(self) -> list[TokenInfo]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(delegation_tokens).order_by(delegation_tokens.c.issue_ms)).all()
        return [_token(r) for r in rows]

    def delete_expired_tokens(self, now_ms: int) -> int:
        """Kafka's expiry sweep: tokens past their expiry or maximum timestamp."""
        cond = (delegation_tokens.c.expiry_ms < now_ms) | (delegation_tokens.c.max_ms < now_ms)
        with self._write() as conn:
            lock_component(conn, COMPONENT)
            expired = sa.select(delegation_tokens.c.token_id).where(cond)
            conn.execute(sa.delete(token_credentials).where(token_credentials.c.token_id.in_(expired)))
            n = conn.execute(sa.delete(delegation_tokens).where(cond)).rowcount
            if n:
                bump_version(conn, COMPONENT)
        return int(n)

    # -- signing keys ---------------------------------------------------------------------------
    def signing_keys(self) -> list[StoredSigningKey]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(signing_keys).order_by(signing_keys.c.created_ms, signing_keys.c.kid)
            ).all()
        return [
            StoredSigningKey(
                r.kid, r.alg, r.private_pem, json.loads(r.public_jwk), r.created_ms, r.retired_ms
            )
            for r in rows
        ]

    def replace_signing_keys(
        self,
        added: list[StoredSigningKey],
        retired: dict[str, int],
        removed: list[str],
        *,
        expected_active: str | None,
    ) -> bool:
        """Applies one rotation atomically; False (nothing done) if another node rotated first."""
        with self._write() as conn:
            active = conn.execute(
                sa.select(signing_keys.c.kid)
                .where(signing_keys.c.retired_ms.is_(None))
                .order_by(signing_keys.c.created_ms.desc())
                .with_for_update()
            ).first()
            if (active[0] if active else None) != expected_active:
                return False
            for kid, when in retired.items():
                conn.execute(sa.update(signing_keys).where(signing_keys.c.kid == kid).values(retired_ms=when))
            if removed:
                conn.execute(sa.delete(signing_keys).where(signing_keys.c.kid.in_(removed)))
            for k in added:
                conn.execute(
                    sa.insert(signing_keys).values(
                        kid=k.kid,
                        alg=k.alg,
                        private_pem=k.private_pem,
                        public_jwk=json.dumps(k.public_jwk),
                        created_ms=k.created_ms,
                        retired_ms=k.retired_ms,
                    )
                )
            bump_version(conn, COMPONENT)
        return True


def _account(r: Any) -> ServiceAccount:
    return ServiceAccount(r.client_id, r.secret_hash, tuple(json.loads(r.scopes)), r.created_ms)


def _insert_token_credentials(conn: Connection, token_id: str, credentials: Mapping[str, ScramCredential]) -> None:
    if credentials:
        conn.execute(
            sa.insert(token_credentials),
            [
                {
                    "token_id": token_id,
                    "mechanism": mechanism,
                    "salt": c.salt,
                    "stored_key": c.stored_key,
                    "server_key": c.server_key,
                    "iterations": c.iterations,
                }
                for mechanism, c in credentials.items()
            ],
        )


def _token_values(info: TokenInfo) -> dict[str, Any]:
    return {
        "token_id": info.token_id,
        "owner": str(info.owner),
        "requester": str(info.requester),
        "renewers": json.dumps([str(p) for p in info.renewers]),
        "issue_ms": info.issue_ms,
        "expiry_ms": info.expiry_ms,
        "max_ms": info.max_ms,
    }


def _token(r: Any) -> TokenInfo:
    return TokenInfo(
        token_id=r.token_id,
        owner=Principal.parse(r.owner),
        requester=Principal.parse(r.requester),
        renewers=tuple(Principal.parse(p) for p in json.loads(r.renewers)),
        issue_ms=r.issue_ms,
        expiry_ms=r.expiry_ms,
        max_ms=r.max_ms,
    )
