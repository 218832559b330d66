"""The platform's storage conventions, shared by every package that keeps state.

It lives in `authz` because authz is the lowest package with state; the packages above it
(sasl, registry, encryption, gateway) import it from here.

- `open_engine(url)`: SQLAlchemy 2 engine for SQLite (WAL, busy timeout) or PostgreSQL (psycopg 3).
- `migrate(engine, component, migrations)`: numbered schema versions per component, recorded in
  `kgov_schema_versions`, applied once under a database-wide lock.
- `bump_version(conn, component)` / `read_version(conn, component)`: one counter row per component
  in `kgov_change_versions`. A writer bumps it inside its transaction; the row lock serialises
  writers, so versions commit in order and other nodes can poll the counter (cheap) and then read
  exactly the changes they have not seen.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

metadata = sa.MetaData()

schema_versions = sa.Table(
    "kgov_schema_versions",
    metadata,
    sa.Column("component", sa.String(64), primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
)

change_versions = sa.Table(
    "kgov_change_versions",
    metadata,
    sa.Column("component", sa.String(64), primary_key=True),
    sa.Column("version", sa.BigInteger, nullable=False),
)


class StorageError(RuntimeError):
    """The database refused or could not complete an operation; the message is safe to show."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Connection], None]


def redact_url(url: str) -> str:
    """The database URL with any password replaced, for logs and error messages."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def default_sqlite_url(data_dir: str | Path = ".kgov") -> str:
    path = Path(data_dir)
    path.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(path / 'kgov.db').resolve()}"


def open_engine(url: str, *, echo: bool = False) -> Engine:
    """An engine with the settings each backend needs for several concurrent writers. Its errors never
    list the statement's parameters (`hide_parameters`): they reach logs, and the credential tables
    hold salts, SCRAM keys and secret hashes."""
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    if url.startswith("sqlite"):
        engine = sa.create_engine(
            url,
            echo=echo,
            hide_parameters=True,
            connect_args={"timeout": 30, "check_same_thread": False},
            poolclass=sa.pool.QueuePool if ":memory:" not in url else sa.pool.StaticPool,
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            # Let SQLAlchemy, not pysqlite, decide when transactions begin (see `begin` below).
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            if ":memory:" not in url:
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn: Connection) -> None:
            # A write transaction (see `transaction`) takes the write lock at BEGIN IMMEDIATE, so two
            # writers queue instead of one failing with "database is locked" when it upgrades a
            # read lock; readers stay DEFERRED and never block each other under WAL.
            write = conn.get_execution_options().get("kgov_write", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine
    return sa.create_engine(url, echo=echo, hide_parameters=True, pool_pre_ping=True, pool_size=5, max_overflow=10)


@contextmanager
def transaction(engine: Engine) -> Iterator[Connection]:
    """A write transaction: committed on success, rolled back on any exception."""
    with engine.connect().execution_options(kgov_write=True) as conn, conn.begin():
        yield conn


def _lock_key(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def _take_global_lock(conn: Connection, name: str) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _lock_key(name)})
    # SQLite: BEGIN IMMEDIATE already holds the database write lock.


def migrate(engine: Engine, component: str, migrations: Sequence[Migration]) -> int:
    """Applies the migrations of `component` not yet applied; returns the resulting version."""
    versions = [m.version for m in migrations]
    if versions != sorted(set(versions)) or (versions and versions[0] < 1):
        raise ValueError(f"migrations of {component} must have increasing versions from 1")
    with transaction(engine) as conn:
        _take_global_lock(conn, "kgov-migrate")
        metadata.create_all(conn, tables=[schema_versions, change_versions], checkfirst=True)
        row = conn.execute(
            sa.select(schema_versions.c.version).where(schema_versions.c.component == component)
        ).first()
        current = row[0] if row else 0
        if versions and current > versions[-1]:
            raise StorageError(
                f"the database holds {component} schema version {current}, newer than this kgov "
                f"understands ({versions[-1]}); upgrade kgov"
            )
        for m in migrations:
            if m.version > current:
                m.apply(conn)
                current = m.version
        if row is None:
            conn.execute(sa.insert(schema_versions).values(component=component, version=current))
        else:
            conn.execute(
                sa.update(schema_versions).where(schema_versions.c.component == component).values(version=current)
            )
        return current


def bump_version(conn: Connection, component: str) -> int:
    """Increments the change counter of `component` inside the caller's transaction."""
    result = conn.execute(
        sa.update(change_versions)
        .where(change_versions.c.component == component)
        .values(version=change_versions.c.version + 1)
        .returning(change_versions.c.version)
    ).first()
    if result is not None:
        return int(result[0])
    conn.execute(sa.insert(change_versions).values(component=component, version=1))
    return 1


def lock_component(conn: Connection, component: str) -> None:
    """Serialises writers of `component` for the rest of the caller's transaction (a row lock on
    its counter under PostgreSQL; SQLite's BEGIN IMMEDIATE already holds the database lock)."""
    if conn.dialect.name != "postgresql":
        return
    stmt = sa.select(change_versions.c.version).where(change_versions.c.component == component).with_for_update()
    if conn.execute(stmt).first() is None:
        conn.execute(
            sa.text(
                "INSERT INTO kgov_change_versions (component, version) VALUES (:c, 0) ON CONFLICT DO NOTHING"
            ),
            {"c": component},
        )
        conn.execute(stmt)


def read_version(conn: Connection, component: str) -> int:
    row = conn.execute(
        sa.select(change_versions.c.version).where(change_versions.c.component == component)
    ).first()
    return int(row[0]) if row else 0
