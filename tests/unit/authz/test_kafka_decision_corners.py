"""One test per point of a review of kgov's authorizer against Kafka's source.

Each expectation is read from apache/kafka trunk: StandardAuthorizerData (findResult, checkSection,
MatchingRuleBuilder), StandardAuthorizer (super.users), ResourcePatternFilter.matches, and the
Authorizer.authorizeByResourceType default method. Where kgov extends Kafka (groups, roles) the
test says so. `test_kafka_source_scan.py` compares the same rules over random ACL sets.
"""

from __future__ import annotations

import pytest

from authz.decide import AuthorizerData, validate_new_acl
from authz.model import (
    Acl,
    AclFilter,
    DefaultAllow,
    DefaultDeny,
    InvalidAclError,
    MatchingAcl,
    Operation,
    PatternType,
    Permission,
    Principal,
    RequestContext,
    ResourceType,
    SuperUser,
)
from authz.roles import RoleBinding
from tests.unit.authz.reference_model import ALL_OPERATIONS, acl, action, ctx

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
Op = Operation


def decide(acls: list[Acl], principal: str, op: Op, name: str, rt: ResourceType = TOPIC, *,
           host: str = "10.0.0.1", **build: object) -> tuple[bool, object]:
    (decision,) = AuthorizerData.build(acls, **build).authorize(ctx(principal, host), [action(op, rt, name)])  # type: ignore[arg-type]
    return decision.allowed, decision.rule


# --------------------------------------------------------------------------- implied operations

# StandardAuthorizerData.IMPLIES_DESCRIBE / IMPLIES_DESCRIBE_CONFIGS (each includes the operation itself).
IMPLIES = {Op.DESCRIBE: {Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
           Op.DESCRIBE_CONFIGS: {Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}}


@pytest.mark.parametrize("granted", ALL_OPERATIONS)
@pytest.mark.parametrize("requested", ALL_OPERATIONS)
def test_an_allow_implies_exactly_what_find_result_says(granted: Op, requested: Op) -> None:
    """ALLOW ALL allows everything; ALLOW READ/WRITE/DELETE/ALTER allow DESCRIBE; ALLOW ALTER_CONFIGS
    allows DESCRIBE_CONFIGS; nothing else is implied, and asking for ALL needs an ALL ACL."""
    expected = granted is Op.ALL or requested is granted or granted in IMPLIES.get(requested, set())
    allowed, _ = decide([acl(TOPIC, "t", LITERAL, "User:bob", "*", granted, ALLOW)], "User:bob", requested, "t")
    assert allowed is expected


@pytest.mark.parametrize("denied", ALL_OPERATIONS)
@pytest.mark.parametrize("requested", ALL_OPERATIONS)
def test_a_deny_implies_nothing_but_deny_all_denies_everything(denied: Op, requested: Op) -> None:
    """"this rule only applies to ALLOW ACLs. So for example, a DENY ACL for READ on a resource does
    not DENY describe for that resource" (findResult). Next to an ALLOW ALL, only a DENY of the
    requested operation or of ALL denies."""
    acls = [acl(TOPIC, "t", LITERAL, "User:bob", "*", Op.ALL, ALLOW),
            acl(TOPIC, "t", LITERAL, "User:bob", "*", denied, DENY)]
    allowed, rule = decide(acls, "User:bob", requested, "t")
    assert allowed is not (denied is Op.ALL or denied is requested)
    assert rule == MatchingAcl(acls[0] if allowed else acls[1])


# --------------------------------------------------------------------------- DENY wins, wherever it is

PATTERNS = [("orders", LITERAL), ("ord", PREFIXED), ("orders", PREFIXED), ("*", LITERAL)]


@pytest.mark.parametrize("allow_pattern", PATTERNS)
@pytest.mark.parametrize("deny_pattern", PATTERNS)
@pytest.mark.parametrize(("deny_principal", "deny_host"), [
    ("User:bob", "*"), ("User:*", "*"), ("User:bob", "10.0.0.1"), ("User:*", "10.0.0.1"),
])
def test_a_matching_deny_wins_over_any_allow(
    allow_pattern: tuple[str, PatternType], deny_pattern: tuple[str, PatternType], deny_principal: str, deny_host: str
) -> None:
    """MatchingRuleBuilder.build: "If any DENY ACLs match, the operation is denied, no matter how
    many ALLOW ACLs match", across LITERAL, PREFIXED and `*`, for `User:*` and host `*` too."""
    acls = [acl(TOPIC, *allow_pattern, "User:*", "*", Op.READ, ALLOW),
            acl(TOPIC, *deny_pattern, deny_principal, deny_host, Op.READ, DENY)]
    allowed, rule = decide(acls, "User:bob", Op.READ, "orders")
    assert not allowed and rule == MatchingAcl(acls[1])
    # For another caller on another host, the DENY applies only if it names `User:*` and `*`.
    allowed, rule = decide(acls, "User:alice", Op.READ, "orders", host="10.0.0.2")
    applies = deny_principal == "User:*" and deny_host == "*"
    assert allowed is not applies and rule == MatchingAcl(acls[1] if applies else acls[0])


@pytest.mark.parametrize(("acl_host", "client", "applies"), [
    ("0:0:0:0:0:0:0:1", "::1", True),  # Java's text of an IPv6 address: uncompressed, no leading zeros
    ("::1", "::1", False),  # Kafka compares strings: a compressed ACL host matches no client
    ("2001:db8:0:0:0:0:0:1", "2001:0db8::0001", True),
    ("2001:DB8:0:0:0:0:0:1", "2001:db8::1", False),  # Java writes lower case
    ("10.0.0.1", "::ffff:10.0.0.1", True),  # an IPv4-mapped client is an Inet4Address in Java
    ("::ffff:10.0.0.1", "::ffff:10.0.0.1", False),
    ("0:0:0:0:0:0:a00:1", "::10.0.0.1", True),  # IPv4-compatible is an Inet6Address
    ("fe80:0:0:0:0:0:0:1%eth0", "fe80::1%eth0", True),  # a zone is kept
    ("fe80:0:0:0:0:0:0:1", "fe80::1%eth0", False),
    ("localhost", "127.0.0.1", False),  # no host names
    ("10.0.0.0/8", "10.0.0.1", False),  # no CIDR ranges
])
def test_acl_hosts_match_javas_text_of_the_client_ip(acl_host: str, client: str, applies: bool) -> None:
    acls = [acl(TOPIC, "t", LITERAL, "User:bob", "*", Op.READ, ALLOW),
            acl(TOPIC, "t", LITERAL, "User:bob", acl_host, Op.READ, DENY)]
    allowed, _ = decide(acls, "User:bob", Op.READ, "t", host=client)
    assert allowed is not applies


@pytest.mark.parametrize(("acl_principal", "caller", "applies"), [
    ("User:bob", "User:bob", True),
    ("user:bob", "User:bob", False),  # principal types are case-sensitive
    ("User:Bob", "User:bob", False),  # and so are names
    ("Group:ops", "Group:ops", True),  # any principal type: a custom principal builder's
    ("Group:ops", "User:ops", False),
    ("User:*", "Group:ops", True),  # `User:*` is every caller, whatever its type
    ("Group:*", "Group:ops", False),  # there is no other wildcard
    ("User:bob ", "User:bob", False),
])
def test_principals_match_by_exact_type_and_name(acl_principal: str, caller: str, applies: bool) -> None:
    allowed, _ = decide([acl(TOPIC, "t", LITERAL, acl_principal, "*", Op.READ, ALLOW)], caller, Op.READ, "t")
    assert allowed is applies


@pytest.mark.parametrize(("name", "pattern", "resource", "applies"), [
    ("Orders", LITERAL, "orders", False),  # resource names are case-sensitive
    ("Ord", PREFIXED, "orders", False),
    ("orders", PREFIXED, "orders", True),  # a prefix equal to the name
    ("orders", PREFIXED, "order", False),
    ("orders.", PREFIXED, "orders", False),
    ("é", PREFIXED, "éa", True),
    ("e", PREFIXED, "éa", False),  # é is one character, not e and an accent
    ("\U0001f600", PREFIXED, "\U0001f600x", True),
    ("x" * 1024, PREFIXED, "x" * 5000, True),
    ("x" * 1023 + "y", PREFIXED, "x" * 5000, False),
    ("*", PREFIXED, "orders", False),  # a PREFIXED `*` is a prefix, not a wildcard
    ("*", LITERAL, "orders", True),
])
def test_resource_patterns_match_as_string_equality_and_starts_with(
    name: str, pattern: PatternType, resource: str, applies: bool
) -> None:
    validate_new_acl(acl(GROUP, name, pattern, "User:bob", "*", Op.READ, ALLOW))
    allowed, _ = decide([acl(GROUP, name, pattern, "User:bob", "*", Op.READ, ALLOW)], "User:bob", Op.READ,
                        resource, GROUP)
    assert allowed is applies


def test_an_empty_prefix_applies_to_every_name_but_cannot_be_created() -> None:
    """checkSection: matchesUpTo is 0, the length of "", so a PREFIXED "" would apply to every
    name; AclControlManager.validateNewAcl refuses an empty name, and so does kgov."""
    with pytest.raises(InvalidAclError, match="Resource name should not be empty"):
        validate_new_acl(acl(TOPIC, "", PREFIXED, "User:bob", "*", Op.READ, DENY))
    acls = [acl(TOPIC, "", PREFIXED, "User:bob", "*", Op.READ, DENY), acl(TOPIC, "t", LITERAL, "User:bob", "*", Op.READ, ALLOW)]
    assert decide(acls, "User:bob", Op.READ, "t")[0] is False


def test_the_cluster_resource_is_named_kafka_cluster() -> None:
    with pytest.raises(InvalidAclError, match="The only valid name for the CLUSTER resource is kafka-cluster"):
        validate_new_acl(acl(CLUSTER, "kafka", PREFIXED, "User:bob", "*", Op.ALTER, ALLOW))
    acls = [acl(CLUSTER, "kafka-cluster", LITERAL, "User:bob", "*", Op.IDEMPOTENT_WRITE, ALLOW)]
    assert decide(acls, "User:bob", Op.IDEMPOTENT_WRITE, "kafka-cluster", CLUSTER)[0] is True
    assert decide(acls, "User:bob", Op.IDEMPOTENT_WRITE, "other", CLUSTER)[0] is False


# --------------------------------------------------------------------------- filters


def test_filters_with_any_type_and_match_pattern() -> None:
    """ResourcePatternFilter.matches: ANY type matches every type; MATCH returns every stored pattern
    that would apply to a resource of that name (exact LITERAL, LITERAL `*`, PREFIXED prefixes) and
    nothing else; ANY pattern type with a name is that exact name under any pattern type."""
    acls = [
        acl(TOPIC, "orders", LITERAL, "User:bob", "*", Op.READ, ALLOW),
        acl(GROUP, "orders", LITERAL, "User:bob", "*", Op.READ, ALLOW),
        acl(TOPIC, "ord", PREFIXED, "User:bob", "*", Op.READ, ALLOW),
        acl(TOPIC, "orders", PREFIXED, "User:bob", "*", Op.READ, ALLOW),
        acl(TOPIC, "orders-eu", PREFIXED, "User:bob", "*", Op.READ, ALLOW),
        acl(TOPIC, "*", LITERAL, "User:bob", "*", Op.READ, ALLOW),
        acl(TOPIC, "*", PREFIXED, "User:bob", "*", Op.READ, ALLOW),
        acl(TOPIC, "ORDERS", LITERAL, "User:bob", "*", Op.READ, ALLOW),
    ]
    data = AuthorizerData.build(acls)
    match = set(data.acls(AclFilter(ResourceType.ANY, "orders", PatternType.MATCH)))
    assert match == {acls[0], acls[1], acls[2], acls[3], acls[5]}
    assert set(data.acls(AclFilter(TOPIC, "orders", PatternType.MATCH))) == {acls[0], acls[2], acls[3], acls[5]}
    assert set(data.acls(AclFilter(ResourceType.ANY, "orders", PatternType.ANY))) == {acls[0], acls[1], acls[3]}
    assert set(data.acls(AclFilter(TOPIC, "*", PatternType.ANY))) == {acls[5], acls[6]}
    assert data.acls(AclFilter(ResourceType.ANY, "Orders", PatternType.MATCH)) == [acls[5]]
    (deleted,) = data.acls_to_delete([AclFilter(TOPIC, "orders-eu-1", PatternType.MATCH)])
    assert set(deleted) == {acls[2], acls[3], acls[4], acls[5]}


# --------------------------------------------------------------------------- allow.everyone.if.no.acl.found


@pytest.mark.parametrize(("other", "default_applies"), [
    (acl(TOPIC, "t", LITERAL, "User:alice", "*", Op.READ, ALLOW), False),  # another principal's ACL
    (acl(TOPIC, "t", LITERAL, "User:bob", "*", Op.WRITE, ALLOW), False),  # another operation
    (acl(TOPIC, "t", LITERAL, "User:bob", "10.9.9.9", Op.READ, ALLOW), False),  # another host
    (acl(TOPIC, "t", LITERAL, "User:alice", "*", Op.READ, DENY), False),
    (acl(TOPIC, "", PREFIXED, "User:alice", "*", Op.READ, ALLOW), False),
    (acl(TOPIC, "*", LITERAL, "User:alice", "*", Op.READ, ALLOW), False),
    (acl(TOPIC, "t2", LITERAL, "User:bob", "*", Op.READ, DENY), True),  # another resource
    (acl(TOPIC, "tt", PREFIXED, "User:bob", "*", Op.READ, DENY), True),  # a longer prefix
    (acl(TOPIC, "*", PREFIXED, "User:bob", "*", Op.READ, DENY), True),
    (acl(GROUP, "t", LITERAL, "User:bob", "*", Op.READ, DENY), True),  # another resource type
])
def test_allow_everyone_applies_only_when_no_acl_is_on_the_resource(other: Acl, default_applies: bool) -> None:
    """MatchingRuleBuilder: `hasResourceAcls` is set for every ACL whose pattern applies, whatever
    its principal, host, operation or permission (KAFKA-14435)."""
    allowed, rule = decide([other], "User:bob", Op.READ, "t", allow_everyone_if_no_acl_found=True)
    assert allowed is default_applies
    assert isinstance(rule, DefaultAllow if default_applies else DefaultDeny)


def test_super_users_bypass_every_deny_and_are_compared_as_written() -> None:
    """`superUsers.contains(principal.toString())` before any ACL. `User:*` in super.users makes
    only a caller literally named `*` a super user, not every user."""
    deny_all = [acl(TOPIC, "*", LITERAL, "User:*", "*", Op.ALL, DENY)]
    assert decide(deny_all, "User:bob", Op.READ, "t", super_users=[Principal("User", "bob")]) == (True, SuperUser())
    assert decide(deny_all, "User:bob", Op.READ, "t", super_users=[Principal("User", "*")])[0] is False
    assert decide(deny_all, "User:Bob", Op.READ, "t", super_users=[Principal("User", "bob")])[0] is False
    data = AuthorizerData.build(deny_all, super_users=[Principal("User", "bob")])
    assert data.authorize_by_resource_type(ctx("User:bob"), Op.WRITE, TOPIC).rule == SuperUser()


# --------------------------------------------------------------------------- authorizeByResourceType


@pytest.mark.parametrize(("acls", "allowed"), [
    # Allowed on a name the probe "hardcode" does not cover: the dominance check finds it.
    ([acl(TOPIC, "orders", LITERAL, "User:bob", "*", Op.WRITE, ALLOW)], True),
    # ... unless a PREFIXED deny covers it; a LITERAL deny of another name does not.
    ([acl(TOPIC, "orders", LITERAL, "User:bob", "*", Op.WRITE, ALLOW),
      acl(TOPIC, "ord", PREFIXED, "User:bob", "*", Op.WRITE, DENY)], False),
    ([acl(TOPIC, "orders", PREFIXED, "User:bob", "*", Op.WRITE, ALLOW),
      acl(TOPIC, "orders", LITERAL, "User:bob", "*", Op.WRITE, DENY)], True),
    # A LITERAL `*` deny for the operation ends it; one for another operation does not.
    ([acl(TOPIC, "orders", LITERAL, "User:bob", "*", Op.WRITE, ALLOW),
      acl(TOPIC, "*", LITERAL, "User:*", "*", Op.WRITE, DENY)], False),
    ([acl(TOPIC, "orders", LITERAL, "User:bob", "*", Op.WRITE, ALLOW),
      acl(TOPIC, "*", LITERAL, "User:*", "*", Op.READ, DENY)], True),
    # A deny of "hardcode" itself only answers the probe.
    ([acl(TOPIC, "hard", PREFIXED, "User:bob", "*", Op.WRITE, ALLOW),
      acl(TOPIC, "hardcode", LITERAL, "User:bob", "*", Op.WRITE, DENY)], True),
    # No implication: READ does not answer DESCRIBE here (asked below for WRITE, given READ).
    ([acl(TOPIC, "orders", LITERAL, "User:bob", "*", Op.READ, ALLOW)], False),
    ([acl(TOPIC, "orders", LITERAL, "User:bob", "*", Op.ALL, ALLOW)], True),
    ([acl(TOPIC, "orders", LITERAL, "User:bob", "10.9.9.9", Op.WRITE, ALLOW)], False),
    ([acl(GROUP, "orders", LITERAL, "User:bob", "*", Op.WRITE, ALLOW)], False),
])
def test_authorize_by_resource_type_as_the_default_method(acls: list[Acl], allowed: bool) -> None:
    data = AuthorizerData.build(acls)
    assert data.authorize_by_resource_type(ctx("User:bob", "10.0.0.1"), Op.WRITE, TOPIC).allowed is allowed


def test_authorize_by_resource_type_does_not_imply_describe() -> None:
    data = AuthorizerData.build([acl(TOPIC, "orders", LITERAL, "User:bob", "*", Op.READ, ALLOW)])
    assert not data.authorize_by_resource_type(ctx("User:bob"), Op.DESCRIBE, TOPIC).allowed
    # though a plain DESCRIBE of that topic is allowed
    assert data.authorize(ctx("User:bob"), [action(Op.DESCRIBE, TOPIC, "orders")])[0].allowed


# --------------------------------------------------------------------------- groups and roles (kgov)


def test_a_deny_to_a_group_wins_over_an_allow_to_its_member() -> None:
    ops = Principal("Group", "ops")
    acls = [acl(TOPIC, "orders", LITERAL, "User:bob", "*", Op.READ, ALLOW),
            acl(TOPIC, "ord", PREFIXED, "Group:ops", "*", Op.READ, DENY)]
    bindings = [RoleBinding("User:bob", "DeveloperRead", TOPIC, "orders", LITERAL)]
    member = AuthorizerData.build(acls, groups={Principal("User", "bob"): frozenset({ops})}, role_bindings=bindings)
    (decision,) = member.authorize(ctx("User:bob"), [action(Op.READ, TOPIC, "orders")])
    assert not decision.allowed and decision.rule == MatchingAcl(acls[1])
    assert not member.authorize_by_resource_type(ctx("User:bob"), Op.READ, TOPIC).allowed
    # Out of the group, the ACL and the role allow again; the group is not a principal of others.
    former = member.with_memberships(groups={})
    assert former.authorize(ctx("User:bob"), [action(Op.READ, TOPIC, "orders")])[0].allowed
    assert former.authorize_by_resource_type(ctx("User:bob"), Op.READ, TOPIC).allowed


def test_removing_a_role_binding_takes_its_grants_away() -> None:
    bob = RequestContext(Principal("User", "bob"), "10.0.0.1")
    ops = Principal("Group", "ops")
    bindings = [RoleBinding("Group:ops", "DeveloperWrite", TOPIC, "orders", PREFIXED),
                RoleBinding("User:bob", "Operator")]
    data = AuthorizerData.build([], groups={Principal("User", "bob"): frozenset({ops})}, role_bindings=bindings)
    write, describe = action(Op.WRITE, TOPIC, "orders-eu"), action(Op.DESCRIBE_CONFIGS, CLUSTER, "kafka-cluster")
    assert [d.allowed for d in data.authorize(bob, [write, describe])] == [True, True]
    assert data.authorize_by_resource_type(bob, Op.WRITE, TOPIC).allowed
    without_write = data.with_memberships(role_bindings=bindings[1:])
    assert [d.allowed for d in without_write.authorize(bob, [write, describe])] == [False, True]
    assert not without_write.authorize_by_resource_type(bob, Op.WRITE, TOPIC).allowed
    without_any = without_write.with_memberships(role_bindings=[])
    assert [d.allowed for d in without_any.authorize(bob, [write, describe])] == [False, False]
    # the snapshot the removal started from still answers as it did (snapshots are immutable)
    assert [d.allowed for d in data.authorize(bob, [write, describe])] == [True, True]
