"""Client quotas in the shared database (`authz.database` conventions: migrate, transaction, versions).

One row per (entity, key). An entity part is stored as kind + name ('none'/'name'/'default'), so a
default entity and an absent one stay distinct and the unique index works on every backend.

An ip entity's name is kept in its lookup form (`QuotaEntity.normalised`). Rows written before that could
spell one address several ways (`::ffff:10.0.0.7`, `[10.0.0.7]`, `10.0.0.7`), each its own row: migration 2
merges them into one row per address and key (`ip_spelling_kept`), and `load` applies the same rule to
any such rows it still finds, each time naming the rows and the one that applies in a WARNING.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from authz.database import Migration, bump_version, migrate, read_version, transaction
from gateway.quota_model import ALL_KEYS, EntityPart, Part, QuotaEntity, QuotaError, ip_lookup_key

COMPONENT = "gateway_quotas"
log = logging.getLogger("kgov.gateway.quotas")

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


def ip_spelling_kept(address: str, spellings: Sequence[tuple[str, float]]) -> tuple[str, float]:
    """Of the rows (stored name, value) that spell the ip entity `address` (its lookup form) for one key,
    the one that applies: the row stored as `address`, which every change since the names were normalised
    went to (AlterClientQuotas, `kgov quotas`, REST write and remove that row), so it holds the latest
    value any of them set; without one, the lowest value (the most restrictive: fail closed), then the
    first name. Kafka has no rule for it: its brokers apply every ip record to the address it resolves to
    (`ClientQuotaMetadataManager.handleIpQuota` -> `ConnectionQuotas.updateIpConnectionRateQuota`), so
    the record applied last wins, while DescribeClientQuotas lists each spelling as its own entity."""
    for name, value in spellings:
        if name == address:
            return name, value
    return min(spellings, key=lambda spelling: (spelling[1], spelling[0]))


def _spellings_line(address: str, key: str, spellings: Sequence[tuple[str, float]],
                    kept: tuple[str, float]) -> str:
    rows = ", ".join(f"ip={name!r} {key}={value:g}" for name, value in sorted(spellings))
    return (f"client quota rows {rows} name one ip entity, {address}: {key}={kept[1]:g} of the row "
            f"ip={kept[0]!r} applies (the row stored as {address} wins, else the lowest value)")


def _merge_ip_spellings(conn: Connection) -> None:
    """Migration 2: every ip row stored in another spelling than its lookup form is replaced by one row
    in that form per address and key, with the value `ip_spelling_kept` picks (WARNING naming the rows
    when several spelled one address, INFO when one was only renamed). A name that is no IP address
    stays as it is (it matches no client; `kgov quotas remove` can delete it)."""
    t = quotas_table
    rows = conn.execute(sa.select(t.c.ip_name, t.c.quota_key, t.c.quota_value).where(
        t.c.ip_kind == Part.NAME.value, t.c.user_kind == Part.NONE.value,
        t.c.client_kind == Part.NONE.value)).all()
    found: dict[tuple[str, str], list[tuple[str, float]]] = {}
    for name, key, value in rows:
        address = ip_lookup_key(name)
        if address is not None:
            found.setdefault((address, key), []).append((name, float(value)))
    changed = False
    for (address, key), spellings in sorted(found.items()):
        if [name for name, _ in spellings] == [address]:
            continue
        kept = ip_spelling_kept(address, spellings)
        if len(spellings) > 1:
            log.warning("%s; merged into that one row", _spellings_line(address, key, spellings, kept))
        else:
            log.info("client quota row ip=%r %s=%g is now stored as ip=%r", kept[0], key, kept[1], address)
        conn.execute(sa.delete(t).where(
            t.c.ip_kind == Part.NAME.value, t.c.ip_name.in_([name for name, _ in spellings]), t.c.quota_key == key,
            t.c.user_kind == Part.NONE.value, t.c.client_kind == Part.NONE.value))
        conn.execute(sa.insert(t).values(**_cols(QuotaEntity(ip=EntityPart.of(address))), quota_key=key,
                                         quota_value=kept[1]))
        changed = True
    if changed:
        bump_version(conn, COMPONENT)


MIGRATIONS: Sequence[Migration] = (
    Migration(1, "client quotas", _create),
    Migration(2, "ip entities: one row per address, in its lookup form", _merge_ip_spellings),
)


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
        self._warned: set[str] = set()  # the WARNING lines `load` wrote already (each once per store)

    def migrate(self) -> None:
        migrate(self.engine, COMPONENT, MIGRATIONS)

    def version(self) -> int:
        with self.engine.connect() as conn:
            return read_version(conn, COMPONENT)

    def load(self) -> tuple[int, dict[QuotaEntity, dict[str, float]]]:
        with self.engine.connect() as conn:
            version = read_version(conn, COMPONENT)
            rows = conn.execute(sa.select(quotas_table)).mappings().all()
        found: dict[tuple[QuotaEntity, str], list[tuple[str, float]]] = {}
        for row in rows:
            found.setdefault((_entity(row), row["quota_key"]), []).append((row["ip_name"], float(row["quota_value"])))
        out: dict[QuotaEntity, dict[str, float]] = {}
        for (entity, key), spellings in found.items():
            # Several rows for one entity and key: only ip rows spelling one address several ways (the
            # primary key keeps every other entity to one row), written by a gateway older than migration 2.
            kept = ip_spelling_kept(entity.ip.name, spellings) if len(spellings) > 1 else spellings[0]
            if len(spellings) > 1:
                line = _spellings_line(entity.ip.name, key, spellings, kept)
                if line not in self._warned:
                    self._warned.add(line)
                    log.warning("%s", line)
            out.setdefault(entity, {})[key] = kept[1]
        return version, out

    def alter(self, changes: Sequence[tuple[QuotaEntity, Sequence[QuotaOp]]]) -> None:
        """Applies every change in one transaction (validate first: all or nothing); ip entities are kept
        in their lookup form (`QuotaEntity.normalised`), and a change to one replaces or removes its rows
        in any other spelling too (left by a gateway older than migration 2), so what is set or removed
        is what applies."""
        for entity, ops in changes:
            validate_ops(entity, ops)
        changes = [(entity.normalised(), ops) for entity, ops in changes]
        t = quotas_table
        with transaction(self.engine) as conn:
            stored_ips: list[str] | None = None
            for entity, ops in changes:
                where = [t.c[k] == v for k, v in _cols(entity).items()]
                if entity.ip.kind is Part.NAME:
                    if stored_ips is None:
                        stored_ips = list(conn.execute(sa.select(t.c.ip_name).distinct().where(
                            t.c.ip_kind == Part.NAME.value)).scalars())
                    spellings = [n for n in stored_ips if ip_lookup_key(n) == entity.ip.name] or [entity.ip.name]
                    where = [t.c.ip_kind == Part.NAME.value, t.c.ip_name.in_(spellings),
                             t.c.user_kind == Part.NONE.value, t.c.client_kind == Part.NONE.value]
                for op in ops:
                    key_where = [*where, t.c.quota_key == op.key]
                    conn.execute(sa.delete(t).where(*key_where))
                    if not op.remove:
                        conn.execute(sa.insert(t).values(**_cols(entity), quota_key=op.key,
                                                         quota_value=float(op.value)))
            bump_version(conn, COMPONENT)
