"""Client quotas in the shared database (`authz.database` conventions: migrate, transaction, versions).

One row per (entity, key). An entity part is stored as kind + name ('none'/'name'/'default'), so a
default entity and an absent one stay distinct and the unique index works on every backend.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from authz.database import Migration, bump_version, migrate, read_version, transaction
from gateway.quota_model import ALL_KEYS, EntityPart, Part, QuotaEntity, QuotaError, ip_lookup_key

COMPONENT = "gateway_quotas"

_meta = sa.MetaData()
quotas_table = sa.Table(
    "kgov_client_quotas",
    _meta,
    sa.Column("user_kind", sa.String(8), nullable=False),
    sa.Column("user_name", sa.String(255), nullable=False),
    sa.Column("client_kind", sa.String(8), nullable=False),
    sa.Column("client_name", sa.String(255), nullable=False),
    sa.Column("ip_kind", sa.String(8), nullable=False),
    sa.Column("ip_name", sa.String(255), nullable=False),
    sa.Column("quota_key", sa.String(64), nullable=False),
    sa.Column("quota_value", sa.Float, nullable=False),
    sa.PrimaryKeyConstraint("user_kind", "user_name", "client_kind", "client_name", "ip_kind", "ip_name",
                            "quota_key"),
)


def _create(conn: Connection) -> None:
    _meta.create_all(conn, tables=[quotas_table])


MIGRATIONS: Sequence[Migration] = (Migration(1, "client quotas", _create),)


@dataclass(frozen=True, slots=True)
class QuotaOp:
    key: str
    value: float = 0.0
    remove: bool = False


def _cols(entity: QuotaEntity) -> dict[str, str]:
    return {
        "user_kind": entity.user.kind.value, "user_name": entity.user.name,
        "client_kind": entity.client_id.kind.value, "client_name": entity.client_id.name,
        "ip_kind": entity.ip.kind.value, "ip_name": entity.ip.name,
    }


def _entity(row: sa.RowMapping) -> QuotaEntity:
    ip = EntityPart(Part(row["ip_kind"]), row["ip_name"])
    if ip.kind is Part.NAME:
        # A row written before ip names were validated and normalised (`QuotaEntity.normalised`): in the
        # lookup form when it is an IP address, so it applies; otherwise as it is (it matches no client).
        ip = EntityPart.of(ip_lookup_key(ip.name) or ip.name)
    return QuotaEntity(
        EntityPart(Part(row["user_kind"]), row["user_name"]),
        EntityPart(Part(row["client_kind"]), row["client_name"]),
        ip,
    )


def validate_ops(entity: QuotaEntity, ops: Iterable[QuotaOp]) -> None:
    entity.validate()
    for op in ops:
        if op.key not in ALL_KEYS:
            raise QuotaError(f"Unknown quota key {op.key}")
        if not entity.allows(op.key):
            raise QuotaError(f"Quota {op.key} cannot be set for entity {entity.describe()}")
        if not op.remove and not op.value > 0:
            raise QuotaError(f"Quota {op.key} must be greater than 0, got {op.value}")
        if not op.remove and not math.isfinite(op.value):
            # JSON's 1e400 reads as infinity: Kafka refuses it for its LONG quotas (not a long value), and an
            # audit event holding it would not be JSON.
            raise QuotaError(f"Quota {op.key} must be a finite number, got {op.value}")


class QuotaStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def migrate(self) -> None:
        migrate(self.engine, COMPONENT, MIGRATIONS)

    def version(self) -> int:
        with self.engine.connect() as conn:
            return read_version(conn, COMPONENT)

    def load(self) -> tuple[int, dict[QuotaEntity, dict[str, float]]]:
        with self.engine.connect() as conn:
            version = read_version(conn, COMPONENT)
            rows = conn.execute(sa.select(quotas_table)).mappings().all()
        out: dict[QuotaEntity, dict[str, float]] = {}
        for row in rows:
            out.setdefault(_entity(row), {})[row["quota_key"]] = float(row["quota_value"])
        return version, out

    def alter(self, changes: Sequence[tuple[QuotaEntity, Sequence[QuotaOp]]]) -> None:
        """Applies every change in one transaction (validate first: all or nothing); ip entities are kept
        in their lookup form (`QuotaEntity.normalised`)."""
        for entity, ops in changes:
            validate_ops(entity, ops)
        changes = [(entity.normalised(), ops) for entity, ops in changes]
        with transaction(self.engine) as conn:
            for entity, ops in changes:
                where = [quotas_table.c[k] == v for k, v in _cols(entity).items()]
                for op in ops:
                    key_where = [*where, quotas_table.c.quota_key == op.key]
                    conn.execute(sa.delete(quotas_table).where(*key_where))
                    if not op.remove:
                        conn.execute(sa.insert(quotas_table).values(**_cols(entity), quota_key=op.key,
                                                                   quota_value=float(op.value)))
            bump_version(conn, COMPONENT)
