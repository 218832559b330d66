"""A naive, obviously-correct model of Kafka's ACL authorizer, and small builders for the tests.

Every answer here is a linear scan over a plain collection of ACLs with set semantics: no index,
no cache, no shared code with `authz.decide`. It follows shared/reference/authz-sasl.md:
section 1.3 (StandardAuthorizerData.authorize), 1.9 (the `Authorizer.authorizeByResourceType`
default method, which StandardAuthorizer inherits) and 1.10 (ResourcePatternFilter /
AccessControlEntryFilter matching). `test_reference_model.py` compares `AuthorizerData` with it.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cmp_to_key

from authz.model import (
    DEFAULT_ALLOW_RULE,
    DEFAULT_DENY_RULE,
    SUPER_USER_RULE,
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
)
from authz.roles import RoleBinding, role_grants

# --------------------------------------------------------------------------- builders

ALL_OPERATIONS = tuple(op for op in Operation if op not in (Operation.UNKNOWN, Operation.ANY))
CONCRETE_TYPES = tuple(t for t in ResourceType if t not in (ResourceType.UNKNOWN, ResourceType.ANY))


def acl(
    resource_type: ResourceType,
    name: str,
    pattern_type: PatternType,
    principal: str,
    host: str,
    operation: Operation,
    permission: Permission,
) -> Acl:
    """Kafka's `new StandardAcl(type, name, patternType, principal, host, op, permission)`."""
    return Acl(resource_type, name, pattern_type, principal, host, operation, permission)


def ctx(principal: str, host: str = "127.0.0.1", *, api_key: int = 1) -> RequestContext:
    """MockAuthorizableRequestContext: loopback client, a Fetch request unless told otherwise."""
    return RequestContext(principal=Principal.parse(principal), client_address=host, api_key=api_key)


def action(
    operation: Operation,
    resource_type: ResourceType,
    name: str,
    *,
    log_if_allowed: bool = False,
    log_if_denied: bool = False,
    pattern_type: PatternType = PatternType.LITERAL,
) -> Action:
    """StandardAuthorizerTest.newAction: a LITERAL resource, refcount 1, logging off."""
    return Action(
        resource_type,
        name,
        operation,
        resource_ref_count=1,
        log_if_allowed=log_if_allowed,
        log_if_denied=log_if_denied,
        pattern_type=pattern_type,
    )


# --------------------------------------------------------------------------- authorize


@dataclass(frozen=True)
class Expected:
    """What Kafka decides: the verdict, the kind of rule, and (for MatchingAcl or a role binding)
    the rule Kafka reports, as a one-element set (`scan_order` says which one)."""

    allowed: bool
    rule: str  # "SuperUser" | "DefaultAllow" | "DefaultDeny" | "Matching"
    candidates: frozenset[Rule] = frozenset()


@dataclass(frozen=True)
class Entry:
    """One thing that can allow or deny: an ACL, or (kgov extension) one operation a role binding
    grants, written as the ALLOW ACL it amounts to. `governs`: counts as "an ACL on the resource"
    for allow.everyone.if.no.acl.found (ACLs and resource-scoped bindings do, cluster-wide ones not)."""

    acl: Acl
    rule: Rule
    governs: bool


def entries(acls: Iterable[Acl], bindings: Iterable[RoleBinding] = ()) -> list[Entry]:
    out = [Entry(a, MatchingAcl(a), True) for a in acls]
    for b in bindings:
        # The role matrix is data owned by authz.roles; the model only scans what it expands to.
        for rt, name, pt, op, rule in role_grants(b):
            out.append(Entry(Acl(rt, name, pt, b.principal, "*", op, Permission.ALLOW), rule, not b.cluster_wide))
    return out


def kafka_host_text(address: str) -> str:
    """What Java's `InetAddress.getHostAddress()` says for a client at `address` (the host Kafka
    compares ACL hosts with): IPv6 as eight `%x` groups, IPv4-mapped IPv6 as dotted IPv4."""
    if ":" not in address:
        return address
    literal, _, zone = address.partition("%")
    try:
        raw = socket.inet_pton(socket.AF_INET6, literal)
    except OSError:
        return address
    if raw[:12] == bytes(10) + b"\xff\xff":
        return socket.inet_ntop(socket.AF_INET, raw[12:])
    text = ":".join(f"{group:x}" for group in struct.unpack("!8H", raw))
    return f"{text}%{zone}" if zone else text


def effective_principals(principal: str, groups: Iterable[str], bindings: Iterable[RoleBinding]) -> set[str]:
    """Kafka: the caller and `User:*`. kgov adds the caller's groups and `Role:<r>` for every role
    bound to any of those."""
    holders = {principal, "User:*", *groups}
    return holders | {f"Role:{b.role}" for b in bindings if b.principal in holders}


def pattern_applies(a: Acl, resource_type: ResourceType, name: str) -> bool:
    """Section 1.3 step 8: same type and (exact LITERAL, LITERAL `*`, or a PREFIXED prefix)."""
    if a.resource_type is not resource_type:
        return False
    if a.pattern_type is PatternType.LITERAL:
        return a.resource_name in (name, "*")
    if a.pattern_type is PatternType.PREFIXED:
        return name.startswith(a.resource_name)
    return False


# Requested operation -> ALLOW ACL operations that grant it besides itself and ALL (AclOperation javadoc).
_ALLOW_IMPLIED_BY = {
    Operation.DESCRIBE: {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER},
    Operation.DESCRIBE_CONFIGS: {Operation.ALTER_CONFIGS},
}


def operation_matches(a: Acl, requested: Operation) -> bool:
    """Section 1.3 step 7: ALL matches everything; only ALLOW ACLs imply DESCRIBE/DESCRIBE_CONFIGS."""
    if a.operation is Operation.ALL or a.operation is requested:
        return True
    return a.permission is Permission.ALLOW and a.operation in _ALLOW_IMPLIED_BY.get(requested, set())


def scan_order(applicable: Iterable[Entry], name: str) -> list[Entry]:
    """The order StandardAuthorizerData.findAclRule meets the entries that apply to resource `name`
    (its comments, and StandardAcl.compareTo): first the patterns named `name` or a prefix of it,
    longest name first (the set is sorted by REVERSE name, and a prefix sorts before what it
    prefixes), LITERAL before PREFIXED for one name; then, in a second pass, the LITERAL `*`
    patterns. Inside one pattern: operation, principal, host, permission. kgov's role grants come
    after the ACLs of their pattern, ordered by their text."""

    def key(e: Entry) -> tuple[bool, int, int, tuple[object, ...]]:
        a = e.acl
        second_pass = a.pattern_type is PatternType.LITERAL and a.resource_name == "*" and name != "*"
        if isinstance(e.rule, MatchingAcl):
            inside: tuple[object, ...] = (0, int(a.operation), a.principal, a.host, int(a.permission))
        else:
            inside = (1, 0, str(e.rule), "", 0)
        return second_pass, -len(a.resource_name), int(a.pattern_type), inside

    return sorted(applicable, key=key)


def reference_authorize(
    acls: Iterable[Acl],
    *,
    super_users: Iterable[str] = (),
    allow_everyone_if_no_acl_found: bool = False,
    principal: str,
    host: str,
    act: Action,
    groups: Iterable[str] = (),
    bindings: Iterable[RoleBinding] = (),
) -> Expected:
    if act.pattern_type is not PatternType.LITERAL:
        raise ValueError(f"Only literal resources are supported. Got: {act.pattern_type.name}")
    if principal in set(super_users):
        return Expected(True, "SuperUser")
    host = kafka_host_text(host)
    bindings = list(bindings)
    effective = effective_principals(principal, groups, bindings)
    on_resource = [e for e in entries(acls, bindings) if pattern_applies(e.acl, act.resource_type, act.resource_name)]
    applicable = [
        e
        for e in on_resource
        if e.acl.principal in effective and e.acl.host in ("*", host) and operation_matches(e.acl, act.operation)
    ]
    ordered = scan_order(applicable, act.resource_name)
    denies = [e.rule for e in ordered if e.acl.permission is Permission.DENY]
    if denies:
        return Expected(False, "Matching", frozenset(denies[:1]))  # Kafka returns at the first DENY
    allows = [e.rule for e in ordered if e.acl.permission is Permission.ALLOW]
    if allows:
        return Expected(True, "Matching", frozenset(allows[-1:]))  # allowAcl is overwritten at each ALLOW
    if not any(e.governs for e in on_resource) and allow_everyone_if_no_acl_found:
        return Expected(True, "DefaultAllow")
    return Expected(False, "DefaultDeny")


# --------------------------------------------------------------------------- authorizeByResourceType


def check_by_resource_type_args(op: Operation, resource_type: ResourceType) -> None:
    """SecurityUtils.authorizeByResourceTypeCheckArgs."""
    if resource_type is ResourceType.ANY:
        raise ValueError("Must specify a non-filter resource type for authorizeByResourceType")
    if resource_type is ResourceType.UNKNOWN:
        raise ValueError("Unknown resource type")
    if op is Operation.ANY:
        raise ValueError("Must specify a non-filter operation type for authorizeByResourceType")
    if op is Operation.UNKNOWN:
        raise ValueError("Unknown operation type")


def reference_authorize_by_resource_type(
    acls: Iterable[Acl],
    *,
    super_users: Iterable[str] = (),
    allow_everyone_if_no_acl_found: bool = False,
    principal: str,
    host: str,
    op: Operation,
    resource_type: ResourceType,
    groups: Iterable[str] = (),
    bindings: Iterable[RoleBinding] = (),
) -> bool:
    check_by_resource_type_args(op, resource_type)
    acls, groups, bindings = list(acls), list(groups), list(bindings)
    probe = reference_authorize(
        acls,
        super_users=super_users,
        allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found,
        principal=principal,
        host=host,
        act=Action(resource_type, "hardcode", op, resource_ref_count=0, log_if_allowed=True, log_if_denied=False),
        groups=groups,
        bindings=bindings,
    )
    if probe.allowed:
        return True
    host = kafka_host_text(host)
    effective = effective_principals(principal, groups, bindings)
    relevant = [
        e.acl
        for e in entries(acls, bindings)
        if e.acl.resource_type is resource_type
        and e.acl.host in (host, "*")
        and e.acl.principal in effective
        and e.acl.operation in (op, Operation.ALL)  # exact operation: no DESCRIBE implication here
    ]

    def names(permission: Permission, pattern_type: PatternType) -> set[str]:
        return {a.resource_name for a in relevant if a.permission is permission and a.pattern_type is pattern_type}

    deny_literal, deny_prefixed = names(Permission.DENY, PatternType.LITERAL), names(Permission.DENY, PatternType.PREFIXED)
    allow_literal, allow_prefixed = names(Permission.ALLOW, PatternType.LITERAL), names(Permission.ALLOW, PatternType.PREFIXED)
    if "*" in deny_literal:
        return False
    if "*" in allow_literal:
        return True

    def dominated(name: str) -> bool:
        # Kafka walks the allowed name one character at a time (so a "" prefix deny never counts).
        return any(name[:n] in deny_prefixed for n in range(1, len(name) + 1))

    if any(name not in deny_literal and not dominated(name) for name in allow_literal):
        return True
    return any(not dominated(name) for name in allow_prefixed)


# --------------------------------------------------------------------------- DescribeAcls / DeleteAcls


def filter_matches(flt: AclFilter, a: Acl) -> bool:
    """AclBindingFilter.matches, written out from ResourcePatternFilter / AccessControlEntryFilter."""
    if flt.resource_type is not ResourceType.ANY and flt.resource_type is not a.resource_type:
        return False
    pt = flt.pattern_type
    if pt not in (PatternType.ANY, PatternType.MATCH) and pt is not a.pattern_type:
        return False
    if flt.resource_name is not None:
        if pt in (PatternType.ANY, a.pattern_type):
            if flt.resource_name != a.resource_name:
                return False
        elif a.pattern_type is PatternType.LITERAL:  # MATCH against a literal
            if flt.resource_name != a.resource_name and a.resource_name != "*":
                return False
        elif a.pattern_type is PatternType.PREFIXED:  # MATCH against a prefix
            if not flt.resource_name.startswith(a.resource_name):
                return False
        else:
            return False
    if flt.principal is not None and flt.principal != a.principal:
        return False
    if flt.host is not None and flt.host != a.host:
        return False
    if flt.operation is not Operation.ANY and flt.operation is not a.operation:
        return False
    return flt.permission is Permission.ANY or flt.permission is a.permission


def _compare(x: Acl, y: Acl) -> int:
    """StandardAcl.compareTo: type, then REVERSE name, then pattern type, op, principal, host, permission."""

    def cmp(p: object, q: object) -> int:
        return (p > q) - (p < q)  # type: ignore[operator]

    def java(text: str) -> bytes:  # String.compareTo compares UTF-16 code units
        return text.encode("utf-16-be", "surrogatepass")

    for p, q in (
        (x.resource_type, y.resource_type),
        (java(y.resource_name), java(x.resource_name)),
        (x.pattern_type, y.pattern_type),
        (x.operation, y.operation),
        (java(x.principal), java(y.principal)),
        (java(x.host), java(y.host)),
        (x.permission, y.permission),
    ):
        c = cmp(p, q)
        if c:
            return c
    return 0


def kafka_sorted(acls: Iterable[Acl]) -> list[Acl]:
    return sorted(acls, key=cmp_to_key(_compare))


def reference_acls(acls: Iterable[Acl], flt: AclFilter) -> list[Acl]:
    """DescribeAcls: a scan of the whole set, in Kafka's sort order."""
    return kafka_sorted(a for a in set(acls) if filter_matches(flt, a))


# --------------------------------------------------------------------------- the model as an authorizer


class ReferenceAuthorizer:
    """The naive model behind `AuthorizerData`'s interface, so that the transcribed Kafka scenarios
    can run against it too: that is what shows the model itself says what Kafka says."""

    def __init__(self, acls: Iterable[Acl], super_users: frozenset[str], allow_everyone_if_no_acl_found: bool) -> None:
        self.acl_set = frozenset(acls)
        self.super_users = super_users
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found

    @staticmethod
    def build(
        acls: Iterable[Acl] = (),
        *,
        super_users: Iterable[Principal] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> ReferenceAuthorizer:
        return ReferenceAuthorizer(acls, frozenset(str(p) for p in super_users), allow_everyone_if_no_acl_found)

    def with_acls(self, added: Iterable[Acl] = (), removed: Iterable[Acl] = ()) -> ReferenceAuthorizer:
        acls = (self.acl_set - set(removed)) | set(added)
        return ReferenceAuthorizer(acls, self.super_users, self.allow_everyone_if_no_acl_found)

    def authorize(self, context: RequestContext, actions: list[Action]) -> list[Decision]:
        principal = f"{context.principal.type}:{context.principal.name}"  # KafkaPrincipal(type, name)
        out = []
        for act in actions:
            expected = reference_authorize(
                self.acl_set,
                super_users=self.super_users,
                allow_everyone_if_no_acl_found=self.allow_everyone_if_no_acl_found,
                principal=principal,
                host=context.client_address,
                act=act,
            )
            result = AuthorizationResult.ALLOWED if expected.allowed else AuthorizationResult.DENIED
            rule: Rule
            if expected.rule == "Matching":
                acls = [r.acl for r in expected.candidates if isinstance(r, MatchingAcl)]
                rule = MatchingAcl(kafka_sorted(acls)[0]) if acls else min(expected.candidates, key=str)
            else:
                rule = {"SuperUser": SUPER_USER_RULE, "DefaultAllow": DEFAULT_ALLOW_RULE}.get(
                    expected.rule, DEFAULT_DENY_RULE
                )
            out.append(Decision(result, rule))
        return out

    def authorize_by_resource_type(self, context: RequestContext, op: Operation, rt: ResourceType) -> Decision:
        allowed = reference_authorize_by_resource_type(
            self.acl_set,
            super_users=self.super_users,
            allow_everyone_if_no_acl_found=self.allow_everyone_if_no_acl_found,
            principal=f"{context.principal.type}:{context.principal.name}",
            host=context.client_address,
            op=op,
            resource_type=rt,
        )
        if allowed:
            return Decision(AuthorizationResult.ALLOWED, DEFAULT_ALLOW_RULE)
        return Decision(AuthorizationResult.DENIED, DEFAULT_DENY_RULE)

    def acls(self, flt: AclFilter) -> list[Acl]:
        return reference_acls(self.acl_set, flt)

    def acls_to_delete(self, filters: list[AclFilter]) -> list[list[Acl]]:
        """AclControlManager.deleteAcls + validateFilter (KRaft: every filter sees the same set)."""
        for flt in filters:
            if flt.resource_type is ResourceType.UNKNOWN or flt.pattern_type is PatternType.UNKNOWN:
                raise InvalidAclError("Unknown patternFilter.")
            if flt.operation is Operation.UNKNOWN or flt.permission is Permission.UNKNOWN:
                raise InvalidAclError("Unknown entryFilter.")
        return [self.acls(flt) for flt in filters]
