"""Kafka-exact authorization decisions over an immutable snapshot (Kafka's StandardAuthorizerData).

Semantics (shared/reference/authz-sasl.md section 1.3): only LITERAL actions; super users first;
the matching principals are the caller and `User:*` (plus, in kgov, the caller's groups and the
roles bound to any of them); host is `*` or the client IP as Java writes it (`host_address`); an
ALLOW of READ/WRITE/DELETE/ALTER implies DESCRIBE and ALTER_CONFIGS implies DESCRIBE_CONFIGS, a DENY
implies nothing; a matching DENY wins; `allow.everyone.if.no.acl.found` applies only when no ACL of
any principal matches the resource. The reported rule is Kafka's (`scan_key`). docs/authorizer.md
has the full rules and the deliberate differences (LITERAL `*` also applies to names starting with `*`).

Index: per resource type, one dict of LITERAL patterns and one of PREFIXED patterns keyed by name,
plus the sorted set of distinct PREFIXED name lengths. A lookup probes the exact name, `*`, and
`name[:n]` for each prefix length n, so its cost depends on how many distinct prefix lengths exist,
never on how many ACLs there are. Inside a pattern, grants are keyed principal -> host -> operation.
"""

from __future__ import annotations

import bisect
import gc
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from authz.host_address import java_host_address
from authz.model import (
    CLUSTER_RESOURCE_NAME,
    DEFAULT_ALLOW_RULE,
    DEFAULT_DENY_RULE,
    MAX_HOST_LENGTH,
    MAX_NAME_LENGTH,
    SUPER_USER_RULE,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    Acl,
    AclFilter,
    Action,
    AuthorizationResult,
    Decision,
    InvalidAclError,
    MatchingAcl,
    Operation,
    PatternType,
    Permission,
    Principal,
    RequestContext,
    ResourceType,
    Rule,
    refuse_lone_surrogate,
    refuse_longer,
    refuse_nul,
)
from authz.roles import RoleBinding, role_grants

LITERAL: Final = PatternType.LITERAL
_ALL: Final = Operation.ALL
ALLOWED: Final = AuthorizationResult.ALLOWED
DENIED: Final = AuthorizationResult.DENIED

# Requested operation -> the ALLOW ACL operations that grant it (besides itself and ALL).
_IMPLIED_BY: Final[dict[Operation, tuple[Operation, ...]]] = {
    Operation.DESCRIBE: (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER),
    Operation.DESCRIBE_CONFIGS: (Operation.ALTER_CONFIGS,),
}
# ALLOW ACL operation -> the requested operations it grants.
_GRANTS: Final[dict[Operation, tuple[Operation, ...]]] = {
    op: (op, *(req for req, by in _IMPLIED_BY.items() if op in by)) for op in Operation
}

# The resource name the Authorizer.authorizeByResourceType default method asks authorize() about first.
BY_TYPE_PROBE_NAME: Final = "hardcode"

_CONCRETE_TYPES: Final = tuple(t for t in ResourceType if t not in (ResourceType.UNKNOWN, ResourceType.ANY))


def super_user_names(super_users: Iterable[Principal]) -> frozenset[str]:
    """Kafka keeps `super.users` as strings and looks up `principal.toString()` in them
    (StandardAuthorizerData.authorize), so `User:a:b` names the caller of type `User:a` and name `b`
    as well as the one of type `User` and name `a:b`; compare `str(principal)` with these."""
    return frozenset(str(p) for p in super_users)


def validate_new_acl(acl: Acl) -> None:
    """Kafka's creation validation (AclControlManager.validateNewAcl + AclApis), with its messages."""
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidAclError("Invalid resourceType " + acl.resource_type.name)
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAclError("Invalid patternType " + acl.pattern_type.name)
    if acl.operation in (Operation.UNKNOWN, Operation.ANY):
        raise InvalidAclError("Invalid operation " + acl.operation.name)
    if acl.permission not in (Permission.ALLOW, Permission.DENY):
        raise InvalidAclError("Invalid permissionType " + acl.permission.name)
    if not acl.resource_name:
        raise InvalidAclError("Resource name should not be empty")
    for value, limit, what in ((acl.resource_name, MAX_NAME_LENGTH, "The resource name"),
                               (acl.principal, MAX_NAME_LENGTH, "The principal"),
                               (acl.host, MAX_HOST_LENGTH, "The host")):
        refuse_nul(value, what)
        refuse_lone_surrogate(value, what)
        refuse_longer(value, limit, what)
    if acl.resource_type is ResourceType.CLUSTER and acl.resource_name != CLUSTER_RESOURCE_NAME:
        raise InvalidAclError("The only valid name for the CLUSTER resource is kafka-cluster")
    # Kafka checks only for the colon: `:alice` (empty type) and an empty host are stored, and
    # simply match no caller. Refusing them would break importing a Kafka cluster's ACLs.
    if ":" not in acl.principal:
        raise InvalidAclError(
            f"Could not parse principal from `{acl.principal}` (no colon is present separating the principal "
            "type from the principal name)"
        )


def check_by_resource_type_args(op: Operation, rt: ResourceType) -> None:
    """SecurityUtils.authorizeByResourceTypeCheckArgs, the first thing authorizeByResourceType does."""
    if rt is ResourceType.ANY:
        raise ValueError("Must specify a non-filter resource type for authorizeByResourceType")
    if rt is ResourceType.UNKNOWN:
        raise ValueError("Unknown resource type")
    if op is Operation.ANY:
        raise ValueError("Must specify a non-filter operation type for authorizeByResourceType")
    if op is Operation.UNKNOWN:
        raise ValueError("Unknown operation type")


def _java_text(text: str) -> bytes:
    """A key that orders strings as Java's String.compareTo does, by UTF-16 code unit (big-endian
    bytes compare the same way): Python compares code points, which puts U+FFFD before an astral
    character where Java puts it after."""
    return text.encode("utf-16-be", "surrogatepass")


def _kafka_order(acl: Acl) -> tuple[int, _Reverse, int, int, bytes, bytes, int]:
    """StandardAcl.compareTo: type, REVERSE name, pattern type, operation, principal, host, permission."""
    return (
        acl.resource_type,
        _Reverse(_java_text(acl.resource_name)),
        acl.pattern_type,
        acl.operation,
        _java_text(acl.principal),
        _java_text(acl.host),
        acl.permission,
    )


@dataclass(frozen=True, slots=True)
class _Reverse:
    value: bytes

    def __lt__(self, other: _Reverse) -> bool:
        return self.value > other.value


@dataclass(slots=True)
class _Grants:
    """What one (pattern, principal, host) says: requested op -> the rule that allows/denies it."""

    allow: dict[Operation, Rule] = field(default_factory=dict)
    deny: dict[Operation, Rule] = field(default_factory=dict)


# principal -> host -> grants
_PatternIndex = dict[str, dict[str, _Grants]]


@dataclass(slots=True)
class _Pattern:
    """Everything attached to one resource pattern.

    `governed` is what `allow.everyone.if.no.acl.found` looks at: true when the pattern has an ACL
    or a role binding scoped to it. Cluster-wide role bindings (which kgov stores on `*`) do not
    govern, so binding SystemAdmin to an operator does not change the default for everyone else.
    """

    grants: _PatternIndex
    acls: frozenset[Acl]
    governed: bool
    role_rules: tuple[_RoleRule, ...] = ()


# (principal, operation, rule, scoped-to-this-pattern)
_RoleRule = tuple[str, Operation, Rule, bool]


def scan_key(rule: Rule) -> tuple[int, int, str, str]:
    """Where a rule sits in Kafka's scan of one resource pattern: StandardAcl.compareTo orders the
    ACLs of a pattern by operation, principal, host, then permission. Role-binding grants (a kgov
    extension) come after every ACL. Kafka reports the FIRST matching DENY in scan order and the
    LAST matching ALLOW (MatchingRuleBuilder.allowAcl is overwritten at every ALLOW)."""
    if isinstance(rule, MatchingAcl):
        acl = rule.acl
        return 0, acl.operation, acl.principal, acl.host
    return 1, 0, str(rule), ""


def _build_pattern(acls: Iterable[Acl], role_rules: Iterable[_RoleRule]) -> _Pattern:
    acl_set = frozenset(acls)
    role_rules = tuple(role_rules)
    grants: _PatternIndex = {}
    # Kafka's order inside a pattern (type, name and pattern type are the same for all of them):
    # per (principal, host) the first DENY and the last ALLOW recorded are the ones Kafka would
    # report; `_decide` then compares across principals and hosts with `scan_key`.
    for acl in sorted(acl_set, key=lambda a: (a.operation, a.principal, a.host, a.permission)):
        g = grants.setdefault(acl.principal, {}).setdefault(acl.host, _Grants())
        rule: Rule = MatchingAcl(acl)
        if acl.permission is Permission.DENY:
            g.deny.setdefault(acl.operation, rule)
        elif acl.operation is Operation.ALL:
            g.allow[Operation.ALL] = rule
        else:
            for op in _GRANTS[acl.operation]:
                g.allow[op] = rule
    for principal, op, rule, _scoped in role_rules:
        g = grants.setdefault(principal, {}).setdefault(WILDCARD_HOST, _Grants())
        for granted in (Operation.ALL,) if op is Operation.ALL else _GRANTS[op]:
            current = g.allow.get(granted)
            if current is None or scan_key(rule) > scan_key(current):
                g.allow[granted] = rule
    return _Pattern(grants, acl_set, bool(acl_set) or any(scoped for *_, scoped in role_rules), role_rules)


@dataclass(slots=True)
class _TypeNames:
    """authorizeByResourceType material for one (principal, host, operation-or-ALL)."""

    allow_literal: set[str] = field(default_factory=set)
    allow_prefixed: set[str] = field(default_factory=set)
    deny_literal: set[str] = field(default_factory=set)
    deny_prefixed: set[str] = field(default_factory=set)

    def copy(self) -> _TypeNames:
        return _TypeNames(set(self.allow_literal), set(self.allow_prefixed), set(self.deny_literal),
                          set(self.deny_prefixed))


def _type_entries(pattern: _Pattern | None) -> set[tuple[str, str, Operation, bool]]:
    """What a pattern contributes to authorizeByResourceType: (principal, host, ACL operation, deny).
    The ACLs' own operations (no DESCRIBE implication: Kafka compares `op` or ALL)."""
    if pattern is None:
        return set()
    entries = {(a.principal, a.host, a.operation, a.permission is Permission.DENY) for a in pattern.acls}
    entries.update((p, WILDCARD_HOST, op, False) for p, op, _rule, _scoped in pattern.role_rules)
    return entries


_PatternKey = tuple[ResourceType, PatternType, str]

DEFAULT_CACHE_SIZE: Final = 200_000
DEFAULT_CACHE_MAX_BYTES: Final = 128 * 1024 * 1024
# What a cache entry holds besides its strings: the key tuple (6 slots), a Decision or a tuple of
# names, and the dict's share of slots and index (CPython 3.11, 64-bit; measured in
# tests/unit/authz/test_decision_cache_bytes.py).
_ENTRY_OVERHEAD: Final = 240
_sizeof = sys.getsizeof
_DECISIONS, _BY_TYPE, _PRINCIPALS = 0, 1, 2  # AuthorizerData._held_bytes


def _entry_bytes(*texts: str) -> int:
    """A cache entry's cost: its strings as CPython stores them (1, 2 or 4 bytes a character) and the
    overhead. A string several keys share is counted in each, so the sum errs high."""
    return _ENTRY_OVERHEAD + sum(map(_sizeof, texts))


class AuthorizerData:
    """An immutable snapshot of ACLs, memberships and role bindings, with the decision functions.

    Derived caches (effective principals, decisions, by-type indexes) are filled lazily and belong
    to the snapshot, so a swap to a new snapshot invalidates all of them at once.

    The caches keyed by callers' names (decisions, by-type decisions, effective principals) are bounded
    by `cache_max_bytes` together, and the two decision caches by `cache_size` entries each as well: a
    key holds the principal's and the resource's names, which the decision API takes up to 32,767
    characters long, so a count alone would let one caller grow them to gigabytes. Past the count a
    cache is emptied (as it always was), past the bytes all three are, and they refill: a cost only on
    a miss, never on a hit. The byte count is kept
    without a lock; two threads missing at once may both add to it or both reset it, which moves the
    bound by one entry, not more.
    """

    __slots__ = (
        "_by_type",
        "_by_type_decisions",
        "_decisions",
        "_effective",
        "_held_bytes",
        "_literal",
        "_prefix_counts",
        "_prefix_lengths",
        "_prefixed",
        "_super_user_names",
        "allow_everyone_if_no_acl_found",
        "cache_max_bytes",
        "cache_size",
        "groups",
        "role_bindings",
        "super_users",
    )

    def __init__(
        self,
        literal: dict[ResourceType, dict[str, _Pattern]],
        prefixed: dict[ResourceType, dict[str, _Pattern]],
        *,
        super_users: frozenset[Principal],
        allow_everyone_if_no_acl_found: bool,
        groups: Mapping[Principal, frozenset[Principal]],
        role_bindings: tuple[RoleBinding, ...],
        cache_size: int,
        cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES,
        prefix_counts: dict[ResourceType, dict[int, int]] | None = None,
        by_type: dict[ResourceType, dict[tuple[str, str, Operation], _TypeNames]] | None = None,
    ) -> None:
        self._literal = literal
        self._prefixed = prefixed
        if prefix_counts is None:
            prefix_counts = {}
            for rt, names in prefixed.items():
                counts = prefix_counts[rt] = {}
                for name in names:
                    counts[len(name)] = counts.get(len(name), 0) + 1
        # How many PREFIXED patterns of each name length exist: kept up to date by `with_acls`
        # so a change never rescans every prefix.
        self._prefix_counts = prefix_counts
        self._prefix_lengths: dict[ResourceType, tuple[int, ...]] = {
            rt: tuple(sorted(counts, reverse=True)) for rt, counts in prefix_counts.items() if counts
        }
        self.super_users = super_users
        self._super_user_names = super_user_names(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.groups = groups
        self.role_bindings = role_bindings
        self.cache_size = cache_size
        self.cache_max_bytes = cache_max_bytes
        # What each name-keyed cache holds by `_entry_bytes`: [decisions, by-type decisions, principals].
        self._held_bytes = [0, 0, 0]
        self._effective: dict[Principal, tuple[str, ...]] = {}
        self._decisions: dict[tuple[str, str, str, Operation, ResourceType, str], Decision] = {}
        self._by_type: dict[ResourceType, dict[tuple[str, str, Operation], _TypeNames]] = by_type or {}
        self._by_type_decisions: dict[tuple[str, str, str, Operation, ResourceType], Decision] = {}

    # ------------------------------------------------------------------ construction

    @staticmethod
    def build(
        acls: Iterable[Acl] = (),
        *,
        super_users: Iterable[Principal] = (),
        allow_everyone_if_no_acl_found: bool = False,
        groups: Mapping[Principal, frozenset[Principal]] | None = None,
        role_bindings: Iterable[RoleBinding] = (),
        cache_size: int = DEFAULT_CACHE_SIZE,
        cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES,
    ) -> AuthorizerData:
        # Millions of small objects and no garbage cycles: the cyclic collector would spend most
        # of a large build rescanning what was just allocated.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return AuthorizerData._build(acls, super_users, allow_everyone_if_no_acl_found, groups, role_bindings,
                                         cache_size, cache_max_bytes)
        finally:
            if was_enabled:
                gc.enable()

    @staticmethod
    def _build(
        acls: Iterable[Acl],
        super_users: Iterable[Principal],
        allow_everyone_if_no_acl_found: bool,
        groups: Mapping[Principal, frozenset[Principal]] | None,
        role_bindings: Iterable[RoleBinding],
        cache_size: int,
        cache_max_bytes: int,
    ) -> AuthorizerData:
        bindings = tuple(role_bindings)
        by_pattern: dict[_PatternKey, list[Acl]] = {}
        for acl in acls:
            by_pattern.setdefault((acl.resource_type, acl.pattern_type, acl.resource_name), []).append(acl)
        role_rules = _role_rules(bindings)
        literal: dict[ResourceType, dict[str, _Pattern]] = {}
        prefixed: dict[ResourceType, dict[str, _Pattern]] = {}
        for key in by_pattern.keys() | role_rules.keys():
            rt, pt, name = key
            target = literal if pt is PatternType.LITERAL else prefixed
            target.setdefault(rt, {})[name] = _build_pattern(by_pattern.get(key, ()), role_rules.get(key, ()))
        return AuthorizerData(
            literal,
            prefixed,
            super_users=frozenset(super_users),
            allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found,
            groups=dict(groups or {}),
            role_bindings=bindings,
            cache_size=cache_size,
            cache_max_bytes=cache_max_bytes,
        )

    def _replace(self, **changes: object) -> AuthorizerData:
        fields: dict[str, object] = {
            "literal": self._literal,
            "prefixed": self._prefixed,
            "super_users": self.super_users,
            "allow_everyone_if_no_acl_found": self.allow_everyone_if_no_acl_found,
            "groups": self.groups,
            "role_bindings": self.role_bindings,
            "cache_size": self.cache_size,
            "cache_max_bytes": self.cache_max_bytes,
            "prefix_counts": self._prefix_counts,
            "by_type": self._by_type,
        }
        fields.update(changes)
        literal = fields.pop("literal")
        prefixed = fields.pop("prefixed")
        return AuthorizerData(literal, prefixed, **fields)  # type: ignore[arg-type]

    def with_acls(self, added: Iterable[Acl] = (), removed: Iterable[Acl] = ()) -> AuthorizerData:
        """A new snapshot with ACLs added and removed. Only the touched patterns are rebuilt; the
        per-type dicts are copied (O(patterns of that type)); the prefix-length counts and any
        by-resource-type index already built are updated in place of being rebuilt."""
        changes: dict[_PatternKey, tuple[set[Acl], set[Acl]]] = {}
        for acl in added:
            changes.setdefault((acl.resource_type, acl.pattern_type, acl.resource_name), (set(), set()))[0].add(acl)
        for acl in removed:
            changes.setdefault((acl.resource_type, acl.pattern_type, acl.resource_name), (set(), set()))[1].add(acl)
        if not changes:
            return self
        literal = dict(self._literal)
        prefixed = dict(self._prefixed)
        prefix_counts = dict(self._prefix_counts)
        by_type = dict(self._by_type)
        copied: set[tuple[str, ResourceType]] = set()
        copied_names: set[tuple[ResourceType, tuple[str, str, Operation]]] = set()
        role_rules = _role_rules(self.role_bindings)
        for (rt, pt, name), (plus, minus) in changes.items():
            is_literal = pt is PatternType.LITERAL
            top = literal if is_literal else prefixed
            if (pt.name, rt) not in copied:
                top[rt] = dict(top.get(rt, {}))
                copied.add((pt.name, rt))
                if not is_literal:
                    prefix_counts[rt] = dict(prefix_counts.get(rt, {}))
                if rt in by_type and ("by_type", rt) not in copied:
                    by_type[rt] = dict(by_type[rt])
                    copied.add(("by_type", rt))
            patterns = top[rt]
            old = patterns.get(name)
            acls = (set(old.acls) if old else set()) - minus | plus
            rules = role_rules.get((rt, pt, name), ())
            new_pattern = _build_pattern(acls, rules) if acls or rules else None
            if new_pattern is not None:
                patterns[name] = new_pattern
            else:
                patterns.pop(name, None)
            if not is_literal and (old is None) != (new_pattern is None):
                counts = prefix_counts[rt]
                counts[len(name)] = counts.get(len(name), 0) + (1 if old is None else -1)
                if not counts[len(name)]:
                    del counts[len(name)]
            index = by_type.get(rt)
            if index is None:
                continue
            before = _type_entries(old)
            after = _type_entries(new_pattern)
            for entry in before ^ after:
                principal, host, op, deny = entry
                key = (principal, host, op)
                if (rt, key) not in copied_names:
                    current = index.get(key)
                    index[key] = current.copy() if current is not None else _TypeNames()
                    copied_names.add((rt, key))
                names = index[key]
                target = (names.deny_literal if is_literal else names.deny_prefixed) if deny else (
                    names.allow_literal if is_literal else names.allow_prefixed)
                if entry in after:
                    target.add(name)
                else:
                    target.discard(name)
        for top in (literal, prefixed):
            for rt in [rt for rt, patterns in top.items() if not patterns]:
                del top[rt]
        return self._replace(literal=literal, prefixed=prefixed, prefix_counts=prefix_counts, by_type=by_type)

    def with_memberships(
        self,
        groups: Mapping[Principal, frozenset[Principal]] | None = None,
        role_bindings: Iterable[RoleBinding] | None = None,
    ) -> AuthorizerData:
        """A new snapshot with other group memberships and/or role bindings (rebuilds the index)."""
        new_bindings = tuple(role_bindings) if role_bindings is not None else self.role_bindings
        if new_bindings != self.role_bindings:
            return AuthorizerData.build(
                self.all_acls(),
                super_users=self.super_users,
                allow_everyone_if_no_acl_found=self.allow_everyone_if_no_acl_found,
                groups=groups if groups is not None else self.groups,
                role_bindings=new_bindings,
                cache_size=self.cache_size,
                cache_max_bytes=self.cache_max_bytes,
            )
        return self._replace(groups=dict(groups) if groups is not None else self.groups)

    def with_settings(
        self, *, super_users: Iterable[Principal], allow_everyone_if_no_acl_found: bool
    ) -> AuthorizerData:
        return self._replace(
            super_users=frozenset(super_users), allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found
        )

    # ------------------------------------------------------------------ reading ACLs

    def all_acls(self) -> list[Acl]:
        out: list[Acl] = []
        for top in (self._literal, self._prefixed):
            for patterns in top.values():
                for pattern in patterns.values():
                    out.extend(pattern.acls)
        return out

    def __len__(self) -> int:
        return sum(len(p.acls) for top in (self._literal, self._prefixed) for ps in top.values() for p in ps.values())

    def acls(self, flt: AclFilter) -> list[Acl]:
        """DescribeAcls: every ACL the filter matches, in Kafka's order."""
        out: list[Acl] = []
        for top in (self._literal, self._prefixed):
            for rt, patterns in top.items():
                if flt.resource_type is not ResourceType.ANY and flt.resource_type is not rt:
                    continue
                if flt.resource_name is not None and flt.pattern_type in (PatternType.ANY, PatternType.LITERAL,
                                                                          PatternType.PREFIXED):
                    one = patterns.get(flt.resource_name)
                    candidates: Iterable[_Pattern] = (one,) if one is not None else ()
                else:
                    candidates = patterns.values()
                for pattern in candidates:
                    out.extend(acl for acl in pattern.acls if flt.matches(acl))
        out.sort(key=_kafka_order)
        return out

    def acls_to_delete(self, filters: list[AclFilter]) -> list[list[Acl]]:
        """DeleteAcls, KRaft semantics: each filter's matches are computed against the same snapshot
        (so an ACL matched by two filters is reported by both)."""
        results = []
        for flt in filters:
            if flt.resource_type is ResourceType.UNKNOWN or flt.pattern_type is PatternType.UNKNOWN:
                raise InvalidAclError("Unknown patternFilter.")
            if flt.operation is Operation.UNKNOWN or flt.permission is Permission.UNKNOWN:
                raise InvalidAclError("Unknown entryFilter.")
            results.append(self.acls(flt))
        return results

    # ------------------------------------------------------------------ decisions

    def effective_principals(self, principal: Principal) -> tuple[str, ...]:
        """The principal strings ACLs are matched against: the caller, `User:*`, its groups, and the
        `Role:` principals bound to any of those."""
        found = self._effective.get(principal)
        if found is not None:
            return found
        base = str(principal)
        # Kafka parses an ACL's principal at its first colon (StandardAcl.kafkaPrincipal) and compares
        # type and name: no ACL or binding can name a caller whose type holds a colon, though its
        # `Type:name` text may equal one's (`User:a:b` is type `User`, name `a:b`).
        names = [base, WILDCARD_PRINCIPAL] if ":" not in principal.type else [WILDCARD_PRINCIPAL]
        groups = self.groups.get(principal, frozenset())
        names.extend(str(g) for g in sorted(groups))
        if self.role_bindings:
            holders = set(names)
            names.extend(
                sorted({f"Role:{b.role}" for b in self.role_bindings if b.principal in holders} - holders)
            )
        result = tuple(dict.fromkeys(names))
        self._make_room(self._effective, _PRINCIPALS, _entry_bytes(principal.type, principal.name, base))
        self._effective[principal] = result
        return result

    def authorize(self, ctx: RequestContext, actions: list[Action]) -> list[Decision]:
        # Hot path: one flat tuple key of cached-hash strings and ints per action. Super users and
        # custom principal classes are handled on a miss (`_decide`): the answer is fixed per snapshot.
        principal = ctx.principal
        pname = principal.name
        ptype = principal.type
        host = ctx.client_address
        cache = self._decisions
        out = []
        for action in actions:
            if action.pattern_type is not LITERAL:
                raise ValueError(f"Only literal resources are supported. Got: {action.pattern_type.name}")
            key = (pname, host, action.resource_name, action.operation, action.resource_type, ptype)
            decision = cache.get(key)
            if decision is None:
                # Kafka compares ACL hosts with Java's text of the IP; the cache keys the raw text.
                decision = self._decide(principal, java_host_address(host), action.resource_type,
                                        action.resource_name, action.operation)
                self._make_room(cache, _DECISIONS, _ENTRY_OVERHEAD + _sizeof(pname) + _sizeof(host)
                                + _sizeof(action.resource_name) + _sizeof(ptype))  # _entry_bytes, inlined
                cache[key] = decision
            out.append(decision)
        return out

    @property
    def cached_bytes(self) -> int:
        """What the name-keyed caches hold now, as `cache_max_bytes` counts it."""
        return sum(self._held_bytes)

    def _make_room(self, cache: dict[Any, Any], slot: int, entry_bytes: int) -> None:
        """Before `cache` (`_held_bytes[slot]`) takes an entry of `entry_bytes`: the decision caches are
        emptied when they hold `cache_size` entries (the principal cache has no count bound, as before),
        and all three when the entry would take them past `cache_max_bytes`."""
        held = self._held_bytes
        if slot != _PRINCIPALS and len(cache) >= self.cache_size:
            cache.clear()
            held[slot] = 0
        if held[0] + held[1] + held[2] + entry_bytes > self.cache_max_bytes:
            self._decisions.clear()
            self._by_type_decisions.clear()
            self._effective.clear()
            held[0] = held[1] = held[2] = 0
        held[slot] += entry_bytes

    def _decide(
        self, principal: Principal, host: str, rt: ResourceType, name: str, op: Operation
    ) -> Decision:
        if type(principal) is not Principal:
            # Like Kafka, a custom principal class is matched by type and name only.
            principal = Principal(principal.type, principal.name)
        if str(principal) in self._super_user_names:
            return SUPER_USER_DECISION
        principals = self.effective_principals(principal)
        hosts = (host, WILDCARD_HOST) if host != WILDCARD_HOST else (WILDCARD_HOST,)
        has_acls = False
        allow_rule: Rule | None = None
        for pattern in self._matching_patterns(rt, name):
            if pattern.governed:
                has_acls = True
            deny_rule: Rule | None = None
            pattern_allow: Rule | None = None
            for p in principals:
                by_host = pattern.grants.get(p)
                if by_host is None:
                    continue
                for h in hosts:
                    g = by_host.get(h)
                    if g is None:
                        continue
                    deny = g.deny
                    if deny:
                        for found in (deny.get(op), deny.get(_ALL)):
                            if found is not None and (deny_rule is None or scan_key(found) < scan_key(deny_rule)):
                                deny_rule = found
                    allow = g.allow
                    for found in (allow.get(op), allow.get(_ALL)):
                        if found is not None and (pattern_allow is None or scan_key(found) > scan_key(pattern_allow)):
                            pattern_allow = found
            if deny_rule is not None:
                return Decision(DENIED, deny_rule)  # Kafka stops at the first DENY it meets
            if pattern_allow is not None:
                allow_rule = pattern_allow  # ... and reports the last ALLOW it met
        if allow_rule is not None:
            return Decision(ALLOWED, allow_rule)
        if not has_acls and self.allow_everyone_if_no_acl_found:
            return DEFAULT_ALLOW_DECISION
        return DEFAULT_DENY_DECISION

    def _matching_patterns(self, rt: ResourceType, name: str) -> list[_Pattern]:
        """Patterns that apply to resource `name`, in Kafka's scan order: exact LITERAL, PREFIXED
        from the longest prefix down, then the `*` LITERAL."""
        found: list[_Pattern] = []
        literal = self._literal.get(rt)
        if literal is not None:
            exact = literal.get(name)
            if exact is not None:
                found.append(exact)
        prefixed = self._prefixed.get(rt)
        if prefixed is not None:
            size = len(name)
            for n in self._prefix_lengths[rt]:
                if n <= size:
                    hit = prefixed.get(name if n == size else name[:n])
                    if hit is not None:
                        found.append(hit)
        if literal is not None and name != WILDCARD_RESOURCE:
            wildcard = literal.get(WILDCARD_RESOURCE)
            if wildcard is not None:
                found.append(wildcard)
        return found

    # ------------------------------------------------------------------ KIP-679

    def authorize_by_resource_type(self, ctx: RequestContext, op: Operation, rt: ResourceType) -> Decision:
        """May the caller do `op` on at least one resource of type `rt`? (Authorizer's default method.)"""
        check_by_resource_type_args(op, rt)
        key = (ctx.principal.type, ctx.principal.name, java_host_address(ctx.client_address), op, rt)
        cached = self._by_type_decisions.get(key)
        if cached is not None:
            return cached
        decision = self._by_resource_type(ctx, op, rt)
        self._make_room(self._by_type_decisions, _BY_TYPE, _entry_bytes(key[0], key[1], key[2]))
        self._by_type_decisions[key] = decision
        return decision

    def _by_resource_type(self, ctx: RequestContext, op: Operation, rt: ResourceType) -> Decision:
        # Step 1: a plain check on a made-up name covers super users, wildcard allows and the
        # allow-everyone default (Kafka passes "hardcode").
        probe = self.authorize(ctx, [Action(rt, BY_TYPE_PROBE_NAME, op, resource_ref_count=0, log_if_allowed=True,
                                            log_if_denied=False)])[0]
        if probe.allowed:
            return probe
        index = self._type_index(rt)
        principals = self.effective_principals(ctx.principal)
        host = java_host_address(ctx.client_address)
        hosts = (host, WILDCARD_HOST) if host != WILDCARD_HOST else (WILDCARD_HOST,)
        groups = [
            names
            for p in principals
            for h in hosts
            for o in ((op, Operation.ALL) if op is not Operation.ALL else (Operation.ALL,))
            if (names := index.get((p, h, o))) is not None
        ]
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        wildcard_allow = False
        for names in groups:
            if WILDCARD_RESOURCE in names.deny_literal:
                return DEFAULT_DENY_DECISION
            deny_literal |= names.deny_literal
            deny_prefixed |= names.deny_prefixed
            wildcard_allow = wildcard_allow or WILDCARD_RESOURCE in names.allow_literal
        if wildcard_allow:
            return Decision(ALLOWED, DEFAULT_ALLOW_RULE)
        # Kafka tests the allowed name one character at a time, so a "" deny prefix never dominates.
        deny_lengths = sorted({len(p) for p in deny_prefixed if p})

        def prefix_denied(name: str) -> bool:
            stop = bisect.bisect_right(deny_lengths, len(name))
            return any(name[:n] in deny_prefixed for n in deny_lengths[:stop])

        for names in groups:
            for name in names.allow_literal:
                if name not in deny_literal and not prefix_denied(name):
                    return Decision(ALLOWED, DEFAULT_ALLOW_RULE)
            for name in names.allow_prefixed:
                if not prefix_denied(name):
                    return Decision(ALLOWED, DEFAULT_ALLOW_RULE)
        return DEFAULT_DENY_DECISION

    def _type_index(self, rt: ResourceType) -> dict[tuple[str, str, Operation], _TypeNames]:
        index = self._by_type.get(rt)
        if index is not None:
            return index
        index = {}
        for top, pt in ((self._literal, PatternType.LITERAL), (self._prefixed, PatternType.PREFIXED)):
            literal = pt is PatternType.LITERAL
            for name, pattern in top.get(rt, {}).items():
                for principal, host, op, deny in _type_entries(pattern):
                    names = index.get((principal, host, op))
                    if names is None:
                        names = index[(principal, host, op)] = _TypeNames()
                    if deny:
                        (names.deny_literal if literal else names.deny_prefixed).add(name)
                    else:
                        (names.allow_literal if literal else names.allow_prefixed).add(name)
        self._by_type[rt] = index
        return index

    def warm(self, types: Iterable[ResourceType] = _CONCRETE_TYPES) -> None:
        """Builds the by-resource-type indexes of `types` ahead of use; `with_acls` carries them on."""
        for rt in types:
            self._type_index(rt)


SUPER_USER_DECISION: Final = Decision(ALLOWED, SUPER_USER_RULE)
DEFAULT_ALLOW_DECISION: Final = Decision(ALLOWED, DEFAULT_ALLOW_RULE)
DEFAULT_DENY_DECISION: Final = Decision(DENIED, DEFAULT_DENY_RULE)


def _role_rules(bindings: tuple[RoleBinding, ...]) -> dict[_PatternKey, list[_RoleRule]]:
    """Role bindings expanded into per-pattern allow rules."""
    out: dict[_PatternKey, list[_RoleRule]] = {}
    for binding in bindings:
        scoped = not binding.cluster_wide
        for rt, name, pt, op, rule in role_grants(binding):
            out.setdefault((rt, pt, name), []).append((binding.principal, op, rule, scoped))
    return out
