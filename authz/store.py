"""ACLs, role bindings and group memberships in the database.

Every write runs in one transaction that also bumps a change counter (`authz.database`), so other
nodes see the change on their next poll. ACL writes also append to `authz_acl_changes`, keyed by
that counter, so a node applies just the delta instead of reloading every ACL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from authz.database import Migration, bump_version, lock_component, migrate, read_version, transaction
from authz.model import Acl, Operation, PatternType, Permission, Principal, ResourceType
from authz.roles import RoleBinding

ACL_COMPONENT = "authz-acl"
MEMBERSHIP_COMPONENT = "authz-membership"
CHANGE_LOG_KEEP = 100_000  # change rows kept; a node further behind than this reloads everything

metadata = sa.MetaData()


def _acl_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("resource_type", sa.SmallInteger, nullable=False),
        sa.Column("resource_name", sa.String(1024), nullable=False),
        sa.Column("pattern_type", sa.SmallInteger, nullable=False),
        sa.Column("principal", sa.String(1024), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("operation", sa.SmallInteger, nullable=False),
        sa.Column("permission", sa.SmallInteger, nullable=False),
    ]


acls_table = sa.Table(
    "authz_acls",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    *_acl_columns(),
    sa.UniqueConstraint(
        "resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission",
        name="uq_authz_acls",
    ),
)

acl_changes = sa.Table(
    "authz_acl_changes",
    metadata,
    sa.Column("seq", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("version", sa.BigInteger, nullable=False, index=True),
    sa.Column("added", sa.Boolean, nullable=False),
    *_acl_columns(),
)

role_bindings_table = sa.Table(
    "authz_role_bindings",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("principal", sa.String(1024), nullable=False),
    sa.Column("role", sa.String(64), nullable=False),
    # -1 / "" stand for a cluster-wide binding (NULLs would defeat the unique constraint).
    sa.Column("resource_type", sa.SmallInteger, nullable=False),
    sa.Column("resource_name", sa.String(1024), nullable=False),
    sa.Column("pattern_type", sa.SmallInteger, nullable=False),
    sa.UniqueConstraint("principal", "role", "resource_type", "resource_name", "pattern_type",
                        name="uq_authz_role_bindings"),
)

group_members = sa.Table(
    "authz_group_members",
    metadata,
    sa.Column("group_name", sa.String(1024), primary_key=True),
    sa.Column("member", sa.String(1024), primary_key=True),
)


def _create_v1(conn: Connection) -> None:
    metadata.create_all(conn)


MIGRATIONS = [Migration(1, "ACLs, ACL change log, role bindings, group members", _create_v1)]


def _acl_values(acl: Acl) -> dict[str, object]:
    return {
        "resource_type": int(acl.resource_type),
        "resource_name": acl.resource_name,
        "pattern_type": int(acl.pattern_type),
        "principal": acl.principal,
        "host": acl.host,
        "operation": int(acl.operation),
        "permission": int(acl.permission),
    }


def _acl_from_row(row: sa.Row[tuple[object, ...]] | sa.RowMapping) -> Acl:
    m = row._mapping if isinstance(row, sa.Row) else row
    return Acl(
        ResourceType(m["resource_type"]),
        str(m["resource_name"]),
        PatternType(m["pattern_type"]),
        str(m["principal"]),
        str(m["host"]),
        Operation(m["operation"]),
        Permission(m["permission"]),
    )


def _acl_match(table: sa.Table, acl: Acl) -> sa.ColumnElement[bool]:
    return sa.and_(*(table.c[k] == v for k, v in _acl_values(acl).items()))


@dataclass(frozen=True, slots=True)
class AclDelta:
    version: int
    added: tuple[Acl, ...]
    removed: tuple[Acl, ...]
    complete: bool  # False: the change log no longer reaches back far enough; reload everything


class AclStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def migrate(self) -> None:
        migrate(self.engine, "authz", MIGRATIONS)

    # -------------------------------------------------------------- ACLs

    def load_acls(self) -> tuple[int, list[Acl]]:
        with self.engine.connect() as conn, conn.begin():
            version = read_version(conn, ACL_COMPONENT)
            rows = conn.execute(sa.select(*(acls_table.c[c.name] for c in _acl_columns()))).all()
        return version, [_acl_from_row(r) for r in rows]

    def add_acls(self, acls: Sequence[Acl], before_commit: Callable[[list[Acl]], None] | None = None) -> list[Acl]:
        """Inserts the ACLs that do not exist yet; returns those actually added (duplicates are no-ops).

        `before_commit(added)` runs inside the transaction (the audit trail): if it raises, nothing is stored.
        """
        added: list[Acl] = []
        if not acls:
            return added
        with transaction(self.engine) as conn:
            lock_component(conn, ACL_COMPONENT)
            for acl in dict.fromkeys(acls):
                exists = conn.execute(sa.select(acls_table.c.id).where(_acl_match(acls_table, acl))).first()
                if exists is None:
                    conn.execute(sa.insert(acls_table).values(**_acl_values(acl)))
                    added.append(acl)
            if added:
                version = bump_version(conn, ACL_COMPONENT)
                conn.execute(sa.insert(acl_changes), [dict(_acl_values(a), version=version, added=True) for a in added])
                if before_commit is not None:
                    before_commit(added)
        return added

    def remove_acls(self, acls: Iterable[Acl], before_commit: Callable[[list[Acl]], None] | None = None
                    ) -> list[Acl]:
        """Deletes the ACLs that still exist; returns those actually removed (see `add_acls`)."""
        removed: list[Acl] = []
        with transaction(self.engine) as conn:
            lock_component(conn, ACL_COMPONENT)
            for acl in dict.fromkeys(acls):
                result = conn.execute(sa.delete(acls_table).where(_acl_match(acls_table, acl)))
                if result.rowcount:
                    removed.append(acl)
            if removed:
                version = bump_version(conn, ACL_COMPONENT)
                conn.execute(
                    sa.insert(acl_changes), [dict(_acl_values(a), version=version, added=False) for a in removed]
                )
                self._prune_changes(conn, version)
                if before_commit is not None:
                    before_commit(removed)
        return removed

    @staticmethod
    def _prune_changes(conn: Connection, version: int) -> None:
        newest = conn.execute(sa.select(sa.func.max(acl_changes.c.seq))).scalar() or 0
        if newest > CHANGE_LOG_KEEP:
            conn.execute(sa.delete(acl_changes).where(acl_changes.c.seq <= newest - CHANGE_LOG_KEEP))

    def versions(self) -> tuple[int, int]:
        """(ACL version, membership version): one cheap query, what each node polls."""
        with self.engine.connect() as conn, conn.begin():
            return read_version(conn, ACL_COMPONENT), read_version(conn, MEMBERSHIP_COMPONENT)

    def acl_changes_since(self, version: int) -> AclDelta:
        with self.engine.connect() as conn, conn.begin():
            current = read_version(conn, ACL_COMPONENT)
            rows = conn.execute(
                sa.select(acl_changes).where(acl_changes.c.version > version).order_by(acl_changes.c.seq)
            ).all()
        if current > version and (not rows or rows[0].version != version + 1):
            return AclDelta(current, (), (), complete=False)
        # Net effect in order: an ACL added then removed within the window ends up removed.
        state: dict[Acl, bool] = {}
        for row in rows:
            acl = _acl_from_row(row)
            state.pop(acl, None)
            state[acl] = bool(row.added)
        return AclDelta(
            max((int(r.version) for r in rows), default=version),
            tuple(a for a, added in state.items() if added),
            tuple(a for a, added in state.items() if not added),
            complete=True,
        )

    # -------------------------------------------------------------- role bindings and groups

    def load_memberships(self) -> tuple[int, list[RoleBinding], dict[Principal, frozenset[Principal]]]:
        with self.engine.connect() as conn, conn.begin():
            version = read_version(conn, MEMBERSHIP_COMPONENT)
            bindings = [_binding_from_row(r) for r in conn.execute(sa.select(role_bindings_table)).all()]
            members: dict[Principal, set[Principal]] = {}
            for row in conn.execute(sa.select(group_members)).all():
                members.setdefault(Principal.parse(row.member), set()).add(Principal.parse(row.group_name))
        return version, sorted(bindings), {k: frozenset(v) for k, v in members.items()}

    def add_role_binding(self, binding: RoleBinding, before_commit: Callable[[bool], None] | None = None) -> bool:
        values = _binding_values(binding)
        with transaction(self.engine) as conn:
            lock_component(conn, MEMBERSHIP_COMPONENT)
            match = sa.and_(*(role_bindings_table.c[k] == v for k, v in values.items()))
            if conn.execute(sa.select(role_bindings_table.c.id).where(match)).first() is not None:
                return False
            conn.execute(sa.insert(role_bindings_table).values(**values))
            bump_version(conn, MEMBERSHIP_COMPONENT)
            if before_commit is not None:
                before_commit(True)
        return True

    def remove_role_binding(self, binding: RoleBinding, before_commit: Callable[[bool], None] | None = None) -> bool:
        values = _binding_values(binding)
        with transaction(self.engine) as conn:
            lock_component(conn, MEMBERSHIP_COMPONENT)
            match = sa.and_(*(role_bindings_table.c[k] == v for k, v in values.items()))
            removed = conn.execute(sa.delete(role_bindings_table).where(match)).rowcount
            if removed:
                bump_version(conn, MEMBERSHIP_COMPONENT)
                if before_commit is not None:
                    before_commit(True)
        return bool(removed)

    def add_member(self, group: Principal, member: Principal,
                       before_commit: Callable[[bool], None] | None = None) -> bool:
        with transaction(self.engine) as conn:
            lock_component(conn, MEMBERSHIP_COMPONENT)
            match = sa.and_(group_members.c.group_name == str(group), group_members.c.member == str(member))
            if conn.execute(sa.select(group_members).where(match)).first() is not None:
                return False
            conn.execute(sa.insert(group_members).values(group_name=str(group), member=str(member)))
            bump_version(conn, MEMBERSHIP_COMPONENT)
            if before_commit is not None:
                before_commit(True)
        return True

    def remove_member(self, group: Principal, member: Principal,
                          before_commit: Callable[[bool], None] | None = None) -> bool:
        with transaction(self.engine) as conn:
            lock_component(conn, MEMBERSHIP_COMPONENT)
            match = sa.and_(group_members.c.group_name == str(group), group_members.c.member == str(member))
            removed = conn.execute(sa.delete(group_members).where(match)).rowcount
            if removed:
                bump_version(conn, MEMBERSHIP_COMPONENT)
                if before_commit is not None:
                    before_commit(True)
        return bool(removed)


def _binding_values(b: RoleBinding) -> dict[str, object]:
    return {
        "principal": b.principal,
        "role": b.role,
        "resource_type": int(b.resource_type) if b.resource_type is not None else -1,
        "resource_name": b.resource_name or "",
        "pattern_type": int(b.pattern_type),
    }


def _binding_from_row(row: sa.Row[tuple[object, ...]]) -> RoleBinding:
    rt = int(row.resource_type)
    return RoleBinding(
        principal=row.principal,
        role=row.role,
        resource_type=ResourceType(rt) if rt >= 0 else None,
        resource_name=row.resource_name or None,
        pattern_type=PatternType(row.pattern_type),
    )
