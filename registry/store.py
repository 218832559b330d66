"""Persistence of the registry through SQLAlchemy 2: schemas, subject versions, references, config, mode.

Every function takes the caller's `Connection`, so `registry.service` composes them inside one
transaction. Rows of `registry_schemas` are immutable once written (an id always means the same
text), which is what lets API nodes cache id lookups in memory without invalidation.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from authz.database import Migration, change_versions, migrate
from registry.model import Reference, StoredSchema, SubjectVersion

COMPONENT = "registry"

metadata = sa.MetaData()

schemas = sa.Table(
    "registry_schemas",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("schema_type", sa.String(16), nullable=False),
    sa.Column("schema_text", sa.Text, nullable=False),
    sa.Column("refs", sa.Text, nullable=False),
    sa.Column("metadata", sa.Text, nullable=True),
    sa.Column("rule_set", sa.Text, nullable=True),
    # sha256 of type, canonical text and references: equal content, for lookups.
    sa.Column("content_fp", sa.String(64), nullable=False, index=True),
    # content plus metadata and rule set: equal fingerprints share one global id.
    sa.Column("fingerprint", sa.String(64), nullable=False, unique=True),
)

versions = sa.Table(
    "registry_versions",
    metadata,
    sa.Column("subject", sa.String(1024), primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("schema_id", sa.Integer, sa.ForeignKey("registry_schemas.id"), nullable=False, index=True),
    sa.Column("deleted", sa.Boolean, nullable=False, default=False),
)

references = sa.Table(
    "registry_references",
    metadata,
    sa.Column("schema_id", sa.Integer, sa.ForeignKey("registry_schemas.id"), primary_key=True),
    sa.Column("name", sa.String(1024), primary_key=True),
    sa.Column("subject", sa.String(1024), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Index("ix_registry_references_target", "subject", "version"),
)

# One row per subject that ever had a version: the highest version number handed out, so numbers
# are never reused while the subject exists (soft deletes and hard deletes of single versions).
subjects = sa.Table(
    "registry_subjects",
    metadata,
    sa.Column("subject", sa.String(1024), primary_key=True),
    sa.Column("high_water", sa.Integer, nullable=False),
)

configs = sa.Table(
    "registry_configs",
    metadata,
    sa.Column("subject", sa.String(1024), primary_key=True),  # GLOBAL_KEY for the global row
    sa.Column("body", sa.Text, nullable=False),  # the Config object as Confluent returns it
)

modes = sa.Table(
    "registry_modes",
    metadata,
    sa.Column("subject", sa.String(1024), primary_key=True),
    sa.Column("mode", sa.String(32), nullable=False),
)


def _create_tables(conn: Connection) -> None:
    metadata.create_all(conn, checkfirst=True)
    # The change counter row must exist before any writer runs: `bump_version` on an existing row is
    # what serialises registry writers across processes (see `registry.service.SchemaRegistry`).
    exists = conn.execute(
        sa.select(change_versions.c.component).where(change_versions.c.component == COMPONENT)
    ).first()
    if exists is None:
        conn.execute(sa.insert(change_versions).values(component=COMPONENT, version=0))


MIGRATIONS = [Migration(1, "schemas, versions, references, subjects, configs, modes", _create_tables)]


def install_schema(engine: Engine) -> int:
    return migrate(engine, COMPONENT, MIGRATIONS)


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _schema_from_row(row: Any) -> StoredSchema:
    return StoredSchema(
        id=row.id,
        schema_type=row.schema_type,
        schema=row.schema_text,
        references=tuple(Reference(r["name"], r["subject"], r["version"]) for r in json.loads(row.refs)),
        metadata=_loads(row.metadata),
        rule_set=_loads(row.rule_set),
    )


def schema_by_id(conn: Connection, schema_id: int) -> StoredSchema | None:
    row = conn.execute(sa.select(schemas).where(schemas.c.id == schema_id)).first()
    return None if row is None else _schema_from_row(row)


def schema_id_by_fingerprint(conn: Connection, fingerprint: str) -> int | None:
    row = conn.execute(sa.select(schemas.c.id).where(schemas.c.fingerprint == fingerprint)).first()
    return None if row is None else int(row[0])


def fingerprints_of(conn: Connection, schema_ids: Iterable[int]) -> dict[int, tuple[str, str]]:
    """schema id -> (content fingerprint, full fingerprint)."""
    ids = list(set(schema_ids))
    if not ids:
        return {}
    rows = conn.execute(
        sa.select(schemas.c.id, schemas.c.content_fp, schemas.c.fingerprint).where(schemas.c.id.in_(ids))
    )
    return {int(r.id): (r.content_fp, r.fingerprint) for r in rows}


def max_schema_id(conn: Connection) -> int:
    return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(schemas.c.id), 0))).scalar_one())


def insert_schema(conn: Connection, schema: StoredSchema, content_fp: str, fingerprint: str) -> None:
    conn.execute(
        sa.insert(schemas).values(
            id=schema.id,
            schema_type=schema.schema_type,
            schema_text=schema.schema,
            refs=json.dumps([r.to_json() for r in schema.references], separators=(",", ":")),
            metadata=_dumps(schema.metadata),
            rule_set=_dumps(schema.rule_set),
            content_fp=content_fp,
            fingerprint=fingerprint,
        )
    )
    if schema.references:
        conn.execute(
            sa.insert(references),
            [{"schema_id": schema.id, "name": r.name, "subject": r.subject, "version": r.version}
             for r in schema.references],
        )


def subject_versions(conn: Connection, subject: str) -> list[SubjectVersion]:
    """Every stored version of `subject` (soft-deleted ones included), oldest first."""
    rows = conn.execute(
        sa.select(versions.c.version, versions.c.deleted, schemas)
        .join(schemas, schemas.c.id == versions.c.schema_id)
        .where(versions.c.subject == subject)
        .order_by(versions.c.version)
    )
    return [SubjectVersion(subject, int(r.version), _schema_from_row(r), bool(r.deleted)) for r in rows]


def all_versions(conn: Connection, subject_prefix: str = "") -> list[SubjectVersion]:
    """Every stored version of every subject starting with `subject_prefix`, by subject then version."""
    query = (
        sa.select(versions.c.subject, versions.c.version, versions.c.deleted, schemas)
        .join(schemas, schemas.c.id == versions.c.schema_id)
        .order_by(versions.c.subject, versions.c.version)
    )
    if subject_prefix:
        query = query.where(versions.c.subject.startswith(subject_prefix, autoescape=True))
    return [
        SubjectVersion(r.subject, int(r.version), _schema_from_row(r), bool(r.deleted)) for r in conn.execute(query)
    ]


@dataclass(frozen=True, slots=True)
class SubjectState:
    subject: str
    live: int
    total: int


def subject_states(conn: Connection) -> list[SubjectState]:
    """Per subject: how many versions are live and how many are stored."""
    live = sa.func.sum(sa.case((versions.c.deleted.is_(False), 1), else_=0))
    rows = conn.execute(
        sa.select(versions.c.subject, live.label("live"), sa.func.count().label("total"))
        .group_by(versions.c.subject)
        .order_by(versions.c.subject)
    )
    return [SubjectState(r.subject, int(r.live or 0), int(r.total)) for r in rows]


def usages_of_id(conn: Connection, schema_id: int) -> list[tuple[str, int, bool]]:
    """(subject, version, deleted) of every stored version that uses `schema_id`."""
    rows = conn.execute(
        sa.select(versions.c.subject, versions.c.version, versions.c.deleted)
        .where(versions.c.schema_id == schema_id)
        .order_by(versions.c.subject, versions.c.version)
    )
    return [(r.subject, int(r.version), bool(r.deleted)) for r in rows]


def references_to(conn: Connection, written: Sequence[str], version: int, *, include_deleted: bool
                  ) -> list[tuple[int, str, str]]:
    """(schema id, reference subject as written, referring subject) for each stored version (live ones
    only unless `include_deleted`) of a schema with a reference to one of the `written` subject names
    at `version`. Which subject a reference names depends on the referring subject's context
    (`registry.model.reference_subject`): the caller filters."""
    query = (
        sa.select(references.c.schema_id, references.c.subject, versions.c.subject.label("referrer"))
        .distinct()
        .join(versions, versions.c.schema_id == references.c.schema_id)
        .where(references.c.subject.in_(list(written)), references.c.version == version)
        .order_by(references.c.schema_id)
    )
    if not include_deleted:
        query = query.where(versions.c.deleted.is_(False))
    return [(int(r.schema_id), str(r.subject), str(r.referrer)) for r in conn.execute(query)]


def high_water(conn: Connection, subject: str) -> int:
    row = conn.execute(sa.select(subjects.c.high_water).where(subjects.c.subject == subject)).first()
    return 0 if row is None else int(row[0])


def set_high_water(conn: Connection, subject: str, value: int) -> None:
    updated = conn.execute(
        sa.update(subjects).where(subjects.c.subject == subject).values(high_water=value)
    ).rowcount
    if not updated:
        conn.execute(sa.insert(subjects).values(subject=subject, high_water=value))


def insert_version(conn: Connection, subject: str, version: int, schema_id: int) -> None:
    conn.execute(sa.insert(versions).values(subject=subject, version=version, schema_id=schema_id, deleted=False))


def mark_deleted(conn: Connection, subject: str, version_numbers: Sequence[int]) -> None:
    conn.execute(
        sa.update(versions)
        .where(versions.c.subject == subject, versions.c.version.in_(list(version_numbers)))
        .values(deleted=True)
    )


def remove_versions(conn: Connection, subject: str, version_numbers: Sequence[int]) -> None:
    conn.execute(
        sa.delete(versions).where(versions.c.subject == subject, versions.c.version.in_(list(version_numbers)))
    )


def forget_subject(conn: Connection, subject: str) -> None:
    """After the last version is gone for good: its config, mode and version counter go too."""
    conn.execute(sa.delete(subjects).where(subjects.c.subject == subject))
    conn.execute(sa.delete(configs).where(configs.c.subject == subject))
    conn.execute(sa.delete(modes).where(modes.c.subject == subject))


def get_config(conn: Connection, key: str) -> dict[str, Any] | None:
    row = conn.execute(sa.select(configs.c.body).where(configs.c.subject == key)).first()
    return None if row is None else dict(json.loads(row[0]))


def get_configs(conn: Connection, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    rows = conn.execute(sa.select(configs.c.subject, configs.c.body).where(configs.c.subject.in_(list(keys))))
    return {r.subject: dict(json.loads(r.body)) for r in rows}


def put_config(conn: Connection, key: str, body: dict[str, Any]) -> None:
    text = json.dumps(body, separators=(",", ":"))
    if not conn.execute(sa.update(configs).where(configs.c.subject == key).values(body=text)).rowcount:
        conn.execute(sa.insert(configs).values(subject=key, body=text))


def delete_config(conn: Connection, key: str) -> None:
    conn.execute(sa.delete(configs).where(configs.c.subject == key))


def get_mode(conn: Connection, key: str) -> str | None:
    row = conn.execute(sa.select(modes.c.mode).where(modes.c.subject == key)).first()
    return None if row is None else str(row[0])


def get_modes(conn: Connection, keys: Sequence[str]) -> dict[str, str]:
    rows = conn.execute(sa.select(modes.c.subject, modes.c.mode).where(modes.c.subject.in_(list(keys))))
    return {r.subject: str(r.mode) for r in rows}


def put_mode(conn: Connection, key: str, mode: str) -> None:
    if not conn.execute(sa.update(modes).where(modes.c.subject == key).values(mode=mode)).rowcount:
        conn.execute(sa.insert(modes).values(subject=key, mode=mode))


def delete_mode(conn: Connection, key: str) -> None:
    conn.execute(sa.delete(modes).where(modes.c.subject == key))


def has_any_version(conn: Connection, subject: str | None = None) -> bool:
    """Whether `subject` (or, when None, any subject) has a stored version, soft-deleted ones included."""
    query = sa.select(versions.c.subject).limit(1)
    if subject is not None:
        query = query.where(versions.c.subject == subject)
    return conn.execute(query).first() is not None
