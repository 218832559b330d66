"""The live authorizer: an immutable snapshot swapped atomically, kept in step with the database.

Readers take `self._data` once per call (a plain attribute read: no lock on the hot path). Writers
commit to the database first, then refresh; a background thread polls the change counters every
`refresh_interval_s` so changes made through other nodes arrive within a second.

With `max_snapshot_age_s` > 0, a snapshot not confirmed current by the database for that long (the
database unreachable, so revocations made elsewhere cannot arrive) is stale: every decision is then
DENIED (rule `StaleAclSnapshot`) except super users', until a refresh succeeds again. That age, and
when the next poll is due, are read from `elapsed_clock`, which keeps counting while the machine is
suspended.
"""

from __future__ import annotations

import gc
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.engine import Engine

from audit.kafka_format import AUTHORIZER_LOGGER, authorizer_log_line, log4j_envelope, one_line
from audit.model import EventType, authorization_event, change_event
from audit.sinks import AuditSink, AuditWriteError, LineSink
from authz.clock import elapsed_clock
from authz.config import AuthzConfig
from authz.decide import (
    BY_TYPE_PROBE_NAME,
    SUPER_USER_DECISION,
    AuthorizerData,
    check_by_resource_type_args,
    super_user_names,
    validate_new_acl,
)
from authz.host_address import java_host_address
from authz.model import (
    Acl,
    AclFilter,
    Action,
    AuthorizationResult,
    AuthorizerNotReadyError,
    Decision,
    InvalidAclError,
    Operation,
    Principal,
    RequestContext,
    ResourceType,
    StaleSnapshot,
)
from authz.request_names import request_name
from authz.roles import RoleBinding, validate_role_binding
from authz.store import AclStore

log = logging.getLogger("kgov.authz")
kafka_log = logging.getLogger(AUTHORIZER_LOGGER)

MAX_ACLS_PER_OPERATION = 10_000  # Kafka's MAX_RECORDS_PER_USER_OP
LARGE_SNAPSHOT = 200_000

Clock = Callable[[], datetime]
STALE_SNAPSHOT_DECISION = Decision(AuthorizationResult.DENIED, StaleSnapshot())


@dataclass(frozen=True, slots=True)
class SnapshotState:
    """How current the ACL snapshot is (health endpoint and metrics)."""

    loaded: bool
    age_s: float | None  # since the database last confirmed it current; None before the first load
    max_age_s: float  # authz.max_snapshot_age_s; 0 = unlimited
    stale: bool  # older than max_age_s: every decision but super users' is DENIED


def load_groups_file(path: Path) -> dict[Principal, frozenset[Principal]]:
    """`{"Group:sales": ["User:alice", ...]}` -> member -> groups."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read groups file {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise ValueError(f"groups file {path} must hold an object of group -> [members]")
    out: dict[Principal, set[Principal]] = {}
    for group, members in raw.items():
        g = Principal.parse(group)
        if g.type != "Group" or not isinstance(members, list):
            raise ValueError(f"groups file {path}: {group!r} must be a Group: principal with a list of members")
        for member in members:
            out.setdefault(Principal.parse(str(member)), set()).add(g)
    return {k: frozenset(v) for k, v in out.items()}


def _freeze_if_large(acl_count: int) -> None:
    """Millions of long-lived index objects would make every full garbage collection pause the
    process for seconds; after a large load, collect once, then keep them out of the collector's scans."""
    if acl_count >= LARGE_SNAPSHOT:
        gc.collect()
        gc.freeze()


def _merge_groups(
    a: Mapping[Principal, frozenset[Principal]], b: Mapping[Principal, frozenset[Principal]]
) -> dict[Principal, frozenset[Principal]]:
    merged = dict(a)
    for member, groups in b.items():
        merged[member] = merged.get(member, frozenset()) | groups
    return merged


class AuthorizerService:
    def __init__(
        self,
        engine: Engine,
        config: AuthzConfig,
        *,
        audit: AuditSink | None = None,
        lines: LineSink | None = None,
        source: str = "kgov",
        clock: Clock = lambda: datetime.now(UTC),
        extra_super_users: frozenset[Principal] = frozenset(),
        monotonic: Callable[[], float] = elapsed_clock,
    ) -> None:
        self.store = AclStore(engine)
        self.config = config
        self.audit = audit
        self.lines = lines
        self.source = source
        self.clock = clock
        self.super_users = config.super_user_set | extra_super_users
        self._super_user_names = super_user_names(self.super_users)
        self._file_groups = load_groups_file(config.groups_file) if config.groups_file else {}
        self._data: AuthorizerData | None = None
        self._versions = (-1, -1)
        self._refresh_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by close(), and by a request that finds the snapshot stale
        self._thread: threading.Thread | None = None
        self.decisions_allowed = 0
        self.decisions_denied = 0
        self.audit_failures = 0
        # Ages and the poll schedule are measured on this clock (seconds; suspend counts, see elapsed_clock).
        self.monotonic = monotonic
        # When the background poller refreshes next; inf while it refreshes, and without a poller.
        self._next_poll_at = float("inf")
        self._confirmed_at: float | None = None  # when the database last confirmed the snapshot current
        # confirmed_at + max_snapshot_age_s, or None when unlimited: what the hot path compares against
        self._deadline: float | None = None
        self._stale = False  # the ERROR for this stale period has been logged
        self._stale_lock = threading.Lock()
        self.stale_periods = 0  # how many times the snapshot went stale (metrics)

    # ------------------------------------------------------------------ life cycle

    def start(self, *, background: bool = True) -> None:
        self.store.migrate()
        self.reload()
        if background and self._thread is None:
            self._thread = threading.Thread(target=self._poll, name="kgov-authz-refresh", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    @property
    def data(self) -> AuthorizerData:
        data = self._data
        if data is None:
            raise AuthorizerNotReadyError("The authorizer has not loaded its ACLs yet")
        return data

    def reload(self) -> None:
        """Full load from the database (start-up, or when the change log no longer reaches back)."""
        asked = self.monotonic()
        with self._refresh_lock:
            acl_count = self._load_all()
            self._confirmed(asked)
        _freeze_if_large(acl_count)

    def _load_all(self) -> int:
        """Builds and swaps in a snapshot of everything stored; the caller holds the refresh lock."""
        acl_version, acls = self.store.load_acls()
        member_version, bindings, groups = self.store.load_memberships()
        self._data = AuthorizerData.build(
            acls,
            super_users=self.super_users,
            allow_everyone_if_no_acl_found=self.config.allow_everyone_if_no_acl_found,
            groups=_merge_groups(groups, self._file_groups),
            role_bindings=bindings,
            cache_size=self.config.decision_cache_size,
            cache_max_bytes=self.config.decision_cache_max_bytes,
        )
        self._versions = (acl_version, member_version)
        return len(acls)

    def warm(self) -> None:
        """Builds the TOPIC by-resource-type index ahead of the first InitProducerId; `with_acls`
        then keeps it up to date, so no request pays for the build."""
        self.data.warm((ResourceType.TOPIC,))

    def refresh(self) -> bool:
        """Applies what changed in the database since the last look; True if anything did."""
        asked = self.monotonic()  # the snapshot is current as of the question, not the answer
        with self._refresh_lock:
            changed, reloaded = self._apply_changes()
            self._confirmed(asked)
        if reloaded is not None:
            _freeze_if_large(reloaded)
        return changed

    def _apply_changes(self) -> tuple[bool, int | None]:
        """(anything changed, ACL count if it took a full reload); the caller holds the refresh lock."""
        acl_version, member_version = self.store.versions()
        if (acl_version, member_version) == self._versions:
            return False, None
        data = self.data
        if acl_version != self._versions[0]:
            delta = self.store.acl_changes_since(self._versions[0])
            if not delta.complete:
                return True, self._load_all()
            data = data.with_acls(delta.added, delta.removed)
            acl_version = delta.version
        if member_version != self._versions[1]:
            member_version, bindings, groups = self.store.load_memberships()
            data = data.with_memberships(_merge_groups(groups, self._file_groups), bindings)
        self._data = data
        self._versions = (acl_version, member_version)
        return True, None

    def _poll(self) -> None:
        try:
            self.warm()
        except Exception:
            log.warning("could not warm the by-resource-type index", exc_info=True)
        interval = self.config.refresh_interval_s
        self._next_poll_at = self.monotonic() + interval
        while not self._stop.is_set():
            now = self.monotonic()
            if now < self._next_poll_at:
                # Event.wait times out on CLOCK_MONOTONIC, which stops during suspend; a request that finds
                # the snapshot stale after a resume ends this wait early (_wake_poller_if_due), so the node
                # refreshes at once instead of denying for the rest of the interval.
                self._wake.wait(self._next_poll_at - now)
                self._wake.clear()
                continue
            self._next_poll_at = float("inf")  # a poll is running: nothing to wake
            try:
                self.refresh()
            except Exception:  # the database may be briefly away: keep serving the last snapshot
                log.warning("authorizer refresh failed; serving the previous snapshot", exc_info=True)
                if self.snapshot_state().stale:
                    self._note_stale()  # logged when it happens, not at the next request
            finally:
                self._next_poll_at = self.monotonic() + interval

    # ------------------------------------------------------------------ snapshot age

    def _confirmed(self, asked: float) -> None:
        """The database answered a question asked at `asked` (self.monotonic): the snapshot is current as of then.
        The caller holds the refresh lock."""
        if self._confirmed_at is not None and asked < self._confirmed_at:
            return
        self._confirmed_at = asked
        max_age = self.config.max_snapshot_age_s
        self._deadline = asked + max_age if max_age > 0 else None
        if self._stale:
            with self._stale_lock:
                if self._stale:
                    self._stale = False
                    log.warning("ACL snapshot refreshed from the database again: decisions follow the ACLs again")

    def snapshot_state(self) -> SnapshotState:
        confirmed = self._confirmed_at
        max_age = self.config.max_snapshot_age_s
        age = None if confirmed is None else max(0.0, self.monotonic() - confirmed)
        stale = self._data is not None and max_age > 0 and age is not None and age >= max_age
        return SnapshotState(loaded=self._data is not None, age_s=age, max_age_s=max_age, stale=stale)

    def _note_stale(self) -> None:
        """Logs the ERROR once per stale period."""
        if self._stale:
            return
        with self._stale_lock:
            if self._stale:
                return
            self._stale = True
            self.stale_periods += 1
        log.error(
            "ACL snapshot not confirmed by the database for %.1f s (authz.max_snapshot_age_s = %g): denying "
            "every request except super users' until a refresh succeeds",
            self.snapshot_state().age_s or 0.0, self.config.max_snapshot_age_s,
        )

    # ------------------------------------------------------------------ decisions

    def _ready_data(self, ctx: RequestContext) -> AuthorizerData | Decision:
        """The snapshot to decide with, or the decision for every action when it cannot be used.

        Before the first load, StandardAuthorizerData answers super users before anything else and
        throws AuthorizerNotReadyException for anyone else; so does this. A stale snapshot (older than
        `max_snapshot_age_s`) also answers super users, and DENIES everyone else: a decision rather than
        an exception, so the gateway answers with Kafka's authorization errors and the denial is audited
        (a kgov extension: Kafka has no snapshot age)."""
        data = self._data
        deadline = self._deadline
        if data is not None:
            if deadline is None:
                return data
            now = self.monotonic()
            if now < deadline:
                return data
            self._wake_poller_if_due(now)
        if f"{ctx.principal.type}:{ctx.principal.name}" in self._super_user_names:
            return SUPER_USER_DECISION
        if data is None:
            raise AuthorizerNotReadyError("The authorizer has not loaded its ACLs yet")
        self._note_stale()
        return STALE_SNAPSHOT_DECISION

    def _wake_poller_if_due(self, now: float) -> None:
        """A stale snapshot whose next poll is already due (the poller is still sleeping out an interval
        that a suspend interrupted): poll now. Not before it is due, so that during a database outage
        requests do not turn the poller into a retry loop."""
        if now >= self._next_poll_at and not self._wake.is_set():
            self._wake.set()

    def authorize(self, ctx: RequestContext, actions: list[Action]) -> list[Decision]:
        data = self._data
        deadline = self._deadline  # None unless max_snapshot_age_s is set: one attribute read on the hot path
        if data is not None and (deadline is None or self.monotonic() < deadline):
            decisions = data.authorize(ctx, actions)
        else:
            ready = self._ready_data(ctx)
            if isinstance(ready, Decision):
                decisions = [ready] * len(actions)
                if self._data is None:  # not loaded yet: super users only, not audited (as before the load)
                    return decisions
            else:
                decisions = ready.authorize(ctx, actions)
        if self.audit is None and self.lines is None:
            return decisions
        return self._audit_decisions(ctx, actions, decisions, request_name(ctx.api_key))

    def authorize_by_resource_type(self, ctx: RequestContext, op: Operation, rt: ResourceType) -> Decision:
        check_by_resource_type_args(op, rt)
        ready = self._ready_data(ctx)
        # The Authorizer default method starts with authorize() on a made-up name: a super user is
        # allowed whatever the ACLs, and whether they are loaded.
        if isinstance(ready, Decision):
            return ready
        if self.audit is not None or self.lines is not None:
            # ... and that authorize() is Kafka's own, which audits the probe like any decision
            # (logIfAllowed=true, logIfDenied=false). What the method concludes after it is not logged.
            probe = Action(rt, BY_TYPE_PROBE_NAME, op, resource_ref_count=0, log_if_allowed=True,
                           log_if_denied=False)
            (checked,) = ready.authorize(ctx, [probe])
            if checked.allowed:
                # Denied instead when the audit trail cannot record it (fail closed).
                return self._audit_decisions(ctx, [probe], [checked], request_name(ctx.api_key))[0]
        return ready.authorize_by_resource_type(ctx, op, rt)

    def authorize_http(self, ctx: RequestContext, action: Action, method_name: str) -> Decision:
        ready = self._ready_data(ctx)
        decision = ready if isinstance(ready, Decision) else ready.authorize(ctx, [action])[0]
        return self._audit_decisions(ctx, [action], [decision], method_name)[0]

    def _audit_decisions(
        self, ctx: RequestContext, actions: list[Action], decisions: list[Decision], method: str
    ) -> list[Decision]:
        out = decisions
        for i, (action, decision) in enumerate(zip(actions, decisions, strict=True)):
            allowed = decision.result is AuthorizationResult.ALLOWED
            if allowed:
                self.decisions_allowed += 1
                if not (action.log_if_allowed and self.config.log_allowed):
                    continue
            else:
                self.decisions_denied += 1
                if not action.log_if_denied:
                    continue
            try:
                self._record(ctx, action, decision, method)
            except AuditWriteError:
                # Fail closed: a decision we cannot record is not granted.
                self.audit_failures += 1
                log.error("audit trail unavailable; denying %s on %s", action.operation.name, action.resource_type.name)
                if out is decisions:
                    out = list(decisions)
                out[i] = Decision(AuthorizationResult.DENIED, decision.rule)
        return out

    def _record(self, ctx: RequestContext, action: Action, decision: Decision, method: str) -> None:
        now = self.clock()
        allowed = decision.allowed
        rule = str(decision.rule)
        line = authorizer_log_line(
            principal=str(ctx.principal),
            allowed=allowed,
            operation=action.operation.name,
            host=java_host_address(ctx.client_address),  # Kafka logs getHostAddress()
            resource_type=action.resource_type.name,
            pattern_type=action.pattern_type.name,
            resource_name=action.resource_name,
            request_name=method,
            resource_ref_count=action.resource_ref_count,
            rule=rule,
        )
        level = "DEBUG" if allowed else "INFO"
        kafka_log.log(logging.DEBUG if allowed else logging.INFO, "%s", one_line(line))
        if self.lines is not None:
            self.lines.write_line(log4j_envelope(now, level, line, AUTHORIZER_LOGGER))
        if self.audit is not None:
            caller = ctx.decision_caller
            self.audit.write(
                authorization_event(
                    source=self.source,
                    time=now,
                    principal=str(ctx.principal),
                    granted=allowed,
                    operation=action.operation.camel,
                    resource_type=action.resource_type.name.title().replace("_", ""),
                    resource_name=action.resource_name,
                    pattern_type=action.pattern_type.name,
                    client_address=ctx.client_address,
                    method_name=method,
                    rule=rule,
                    client_id=ctx.client_id or None,
                    correlation_id=ctx.correlation_id if ctx.api_key >= 0 else None,
                    token_authenticated=ctx.token_authenticated,
                    decision_api_caller=None if caller is None else {"address": caller.address, "proxy": caller.proxy},
                )
            )

    # ------------------------------------------------------------------ administration

    def create_acls(self, acls: list[Acl], *, actor: Principal, client_address: str | None = None
                    ) -> list[InvalidAclError | None]:
        """Kafka's CreateAcls: a result per ACL; invalid ones fail alone, duplicates are no-ops."""
        if len(acls) > MAX_ACLS_PER_OPERATION:
            raise InvalidAclError(f"Cannot create more than {MAX_ACLS_PER_OPERATION} acls in a single operation.")
        results: list[InvalidAclError | None] = []
        valid: list[Acl] = []
        for acl in acls:
            try:
                validate_new_acl(acl)
            except InvalidAclError as exc:
                results.append(exc)
            else:
                results.append(None)
                valid.append(acl)
        self.store.add_acls(
            valid, before_commit=lambda added: self._audit_change("CreateAcls", actor, client_address, added=added)
        )
        self.refresh()
        return results

    def delete_acls(self, filters: list[AclFilter], *, actor: Principal, client_address: str | None = None
                    ) -> list[list[Acl]]:
        """Kafka's DeleteAcls (KRaft): every filter is matched against the same snapshot."""
        self.refresh()
        matches = self.data.acls_to_delete(filters)
        doomed = {acl for group in matches for acl in group}
        if len(doomed) > MAX_ACLS_PER_OPERATION:
            raise InvalidAclError(f"Cannot remove more than {MAX_ACLS_PER_OPERATION} acls in a single delete operation.")
        self.store.remove_acls(
            sorted(doomed),
            before_commit=lambda removed: self._audit_change("DeleteAcls", actor, client_address, removed=removed),
        )
        self.refresh()
        return matches

    def describe_acls(self, flt: AclFilter) -> list[Acl]:
        return self.data.acls(flt)

    def add_role_binding(self, binding: RoleBinding, *, actor: Principal, client_address: str | None = None) -> bool:
        validate_role_binding(binding)
        changed = self.store.add_role_binding(
            binding, before_commit=lambda c: self._audit_binding("AddRoleBinding", actor, client_address, binding, c))
        self.refresh()
        return changed

    def remove_role_binding(self, binding: RoleBinding, *, actor: Principal, client_address: str | None = None
                            ) -> bool:
        changed = self.store.remove_role_binding(
            binding,
            before_commit=lambda c: self._audit_binding("RemoveRoleBinding", actor, client_address, binding, c))
        self.refresh()
        return changed

    def role_bindings(self, principal: str | None = None) -> list[RoleBinding]:
        bindings = self.data.role_bindings
        return [b for b in bindings if principal is None or b.principal == principal]

    def add_group_member(self, group: Principal, member: Principal, *, actor: Principal,
                         client_address: str | None = None) -> bool:
        if group.type != "Group" or not group.name:
            raise InvalidAclError(f"expected a Group: principal, got {group}")
        changed = self.store.add_member(
            group, member,
            before_commit=lambda c: self._audit_membership("AddGroupMember", actor, client_address, group, member, c))
        self.refresh()
        return changed

    def remove_group_member(self, group: Principal, member: Principal, *, actor: Principal,
                            client_address: str | None = None) -> bool:
        changed = self.store.remove_member(
            group, member,
            before_commit=lambda c: self._audit_membership("RemoveGroupMember", actor, client_address, group, member,
                                                           c))
        self.refresh()
        return changed

    def groups(self) -> dict[str, list[str]]:
        """group -> sorted members (database and groups file)."""
        out: dict[str, set[str]] = {}
        for member, groups in self.data.groups.items():
            for g in groups:
                out.setdefault(str(g), set()).add(str(member))
        return {g: sorted(m) for g, m in sorted(out.items())}

    # ------------------------------------------------------------------ audit of changes

    def _write_change(self, event_type: EventType, method: str, actor: Principal, client: str | None,
                      target: str, details: dict[str, object]) -> None:
        if self.audit is None:
            return
        self.audit.write(
            change_event(type=event_type, source=self.source, time=self.clock(), principal=str(actor),
                         method_name=method, target=target, details=details, client_address=client)
        )

    def _audit_change(self, method: str, actor: Principal, client: str | None, *,
                      added: list[Acl] | None = None, removed: list[Acl] | None = None) -> None:
        for acl in added or removed or []:
            self._write_change(
                EventType.ACL_CHANGE, method, actor, client,
                f"acl/{acl.resource_type.name.lower()}={acl.resource_name}",
                {"acl": acl_to_json(acl), "added": added is not None},
            )

    def _audit_binding(self, method: str, actor: Principal, client: str | None, binding: RoleBinding,
                       changed: bool) -> None:
        self._write_change(EventType.ROLE_BINDING_CHANGE, method, actor, client, f"role-binding/{binding.principal}",
                           {"binding": binding_to_json(binding), "changed": changed})

    def _audit_membership(self, method: str, actor: Principal, client: str | None, group: Principal,
                          member: Principal, changed: bool) -> None:
        self._write_change(EventType.ROLE_BINDING_CHANGE, method, actor, client, f"group/{group}",
                           {"group": str(group), "member": str(member), "changed": changed})


def acl_to_json(acl: Acl) -> dict[str, str]:
    """The field names of Confluent's REST v3 ACL API (also `kgov acls export`)."""
    return {
        "resource_type": acl.resource_type.name,
        "resource_name": acl.resource_name,
        "pattern_type": acl.pattern_type.name,
        "principal": acl.principal,
        "host": acl.host,
        "operation": acl.operation.name,
        "permission": acl.permission.name,
    }


def binding_to_json(b: RoleBinding) -> dict[str, str | None]:
    return {
        "principal": b.principal,
        "role": b.role,
        "resource_type": b.resource_type.name if b.resource_type is not None else None,
        "resource_name": b.resource_name,
        "pattern_type": b.pattern_type.name if b.resource_type is not None else None,
    }
