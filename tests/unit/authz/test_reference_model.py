"""Property tests: the indexed `AuthorizerData` against a naive scan (`reference_model.py`).

Random ACL sets use small alphabets so that names, prefixes, `*` and the `hardcode` probe of
authorizeByResourceType collide often: principals User:a / User:b / User:*; hosts `*`, IPv4 and
IPv6 (ACL hosts in Java's and in Python's spelling; clients over IPv4, IPv6 and IPv4-mapped IPv6);
every concrete operation; LITERAL (including `*` and names starting with `*`) and PREFIXED
(including one-letter) patterns. Also transcribed: Kafka's `StandardAuthorizerPropertyTest` invariants (metadata,
org.apache.kafka.metadata.authorizer), and a check that incremental snapshots (`with_acls`) equal a
fresh `build`.

Examples are derandomized so CI is reproducible; raise KGOV_HYPOTHESIS_EXAMPLES to search wider.
"""

from __future__ import annotations

import os
import string
import tempfile
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from audit.sinks import MemorySink
from authz.config import AuthzConfig
from authz.database import open_engine
from authz.decide import AuthorizerData
from authz.model import (
    Acl,
    AclFilter,
    Action,
    Decision,
    DefaultAllow,
    DefaultDeny,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    Principal,
    ResourceType,
    SuperUser,
)
from authz.roles import PREDEFINED_ROLES, RoleBinding, validate_role_binding
from authz.service import AuthorizerService
from tests.unit.authz.reference_model import (
    ALL_OPERATIONS,
    Expected,
    acl,
    ctx,
    kafka_sorted,
    reference_acls,
    reference_authorize,
    reference_authorize_by_resource_type,
)

EXAMPLES = int(os.environ.get("KGOV_HYPOTHESIS_EXAMPLES", "300"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=os.environ.get("KGOV_HYPOTHESIS_RANDOM") is None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY

names = st.one_of(
    st.text(alphabet="abh", min_size=1, max_size=3),
    st.sampled_from(["*", "*a", "h", "ha", "hard", "hardcode", "hardcoded"]),
)
# Names starting with `*` are legal for groups, transactional ids and users; see docs/authorizer.md.
resource_names = st.one_of(st.text(alphabet="abh", max_size=4),
                           st.sampled_from(["*", "*a", "*ab", "hardcode", "hardcoded"]))
# ACL hosts as Kafka stores them (Java's text of an IP) and as a Python user might write them.
ACL_HOSTS = ["*", "1.1.1.1", "2.2.2.2", "0:0:0:0:0:0:0:1", "::1", "2001:db8:0:0:0:0:0:1"]
# Half the time one of a few operations, so that implications (READ -> DESCRIBE) and ALL collide.
operations = st.one_of(
    st.sampled_from([Operation.READ, Operation.DESCRIBE, Operation.ALL, Operation.ALTER_CONFIGS]),
    st.sampled_from(ALL_OPERATIONS),
)
# authorizeByResourceType compares operations without implication: few operations make that visible.
FEW_OPERATIONS = st.sampled_from([Operation.READ, Operation.DESCRIBE, Operation.WRITE, Operation.ALL])
patterns = st.tuples(st.sampled_from([TOPIC, GROUP]), names, st.sampled_from([LITERAL, PREFIXED]))


@st.composite
def acl_sets(
    draw: st.DrawFn,
    ops: st.SearchStrategy[Operation] = operations,
    acl_principals: tuple[str, ...] = ("User:a", "User:b", "User:*"),
) -> frozenset[Acl]:
    """Up to 24 ACLs over a handful of patterns, so that several entries share one pattern."""
    pool = draw(st.lists(patterns, min_size=1, max_size=5))
    entries = draw(st.lists(st.tuples(
        st.sampled_from(pool),
        st.sampled_from(acl_principals),
        st.sampled_from(ACL_HOSTS),
        ops,
        st.sampled_from([ALLOW, DENY]),
    ), max_size=24))
    return frozenset(Acl(*pattern, principal, host, op, perm) for pattern, principal, host, op, perm in entries)


principals = st.sampled_from(["User:a", "User:b", "User:c"])
# Client addresses as Python's sockets give them (compressed IPv6, IPv4-mapped on dual-stack).
hosts = st.sampled_from(["1.1.1.1", "2.2.2.2", "3.3.3.3", "::1", "::ffff:1.1.1.1", "2001:db8::1"])
actions = st.builds(
    Action,
    resource_type=st.sampled_from([TOPIC, GROUP]),
    resource_name=resource_names,
    operation=operations,
)


@st.composite
def related_actions(draw: st.DrawFn, acl_set: frozenset[Acl], fallback: st.SearchStrategy[Action] = actions) -> Action:
    """Half the time an action on a resource some ACL is about (its name, or that name extended),
    often with that ACL's operation, so that decisions come from ACLs rather than defaults."""
    if not acl_set or draw(st.booleans()):
        return draw(fallback)
    base = draw(st.sampled_from(sorted(acl_set)))
    name = draw(resource_names) if base.resource_name == "*" else base.resource_name
    name += draw(st.sampled_from(["", "", "a", "bh"]))
    op = draw(st.one_of(st.just(base.operation), operations))
    return Action(base.resource_type, name, op)


configs = st.fixed_dictionaries({"super_user": st.booleans(), "allow_everyone": st.booleans()})


def _build(acl_set: frozenset[Acl] | set[Acl], config: dict[str, bool]) -> AuthorizerData:
    return AuthorizerData.build(
        acl_set,
        super_users=[Principal("User", "a")] if config["super_user"] else [],
        allow_everyone_if_no_acl_found=config["allow_everyone"],
    )


def _expected(acl_set: frozenset[Acl] | set[Acl], config: dict[str, bool], principal: str, host: str,
              act: Action) -> Expected:
    return reference_authorize(
        acl_set,
        super_users=["User:a"] if config["super_user"] else [],
        allow_everyone_if_no_acl_found=config["allow_everyone"],
        principal=principal,
        host=host,
        act=act,
    )


def _assert_same(decision: Decision, expected: Expected, context: str) -> None:
    assert decision.allowed is expected.allowed, context
    rule = decision.rule
    if expected.rule == "Matching":
        assert rule in expected.candidates, context
    else:
        kinds = {"SuperUser": SuperUser, "DefaultAllow": DefaultAllow, "DefaultDeny": DefaultDeny}
        assert isinstance(rule, kinds[expected.rule]), context


@PROPERTY
@given(acl_set=acl_sets(), config=configs, principal=principals, host=hosts, draw=st.data())
def test_authorize_matches_reference_scan(
    acl_set: frozenset[Acl], config: dict[str, bool], principal: str, host: str, draw: st.DataObject
) -> None:
    batch = draw.draw(st.lists(related_actions(acl_set), min_size=1, max_size=6), label="batch")
    data = _build(acl_set, config)
    context = ctx(principal, host)
    for attempt in ("fresh", "cached"):
        decisions = data.authorize(context, batch)
        assert len(decisions) == len(batch)
        for act, decision in zip(batch, decisions, strict=True):
            expected = _expected(acl_set, config, principal, host, act)
            _assert_same(decision, expected, f"{attempt}: {act} by {principal}@{host}")


@PROPERTY
@given(acl_set=acl_sets(), config=configs, principal=principals, host=hosts, act=actions)
def test_non_literal_action_always_raises(
    acl_set: frozenset[Acl], config: dict[str, bool], principal: str, host: str, act: Action
) -> None:
    """Kafka checks the pattern type of every action before anything else, each time."""
    data = _build(acl_set, config)
    context = ctx(principal, host)
    data.authorize(context, [act])
    for pt in (PREFIXED, PatternType.ANY, PatternType.MATCH):
        with pytest.raises(ValueError, match=rf"^Only literal resources are supported\. Got: {pt.name}$"):
            data.authorize(context, [act, replace(act, pattern_type=pt)])


@settings(PROPERTY, max_examples=EXAMPLES + EXAMPLES // 2)
@given(acl_set=st.one_of(acl_sets(), acl_sets(FEW_OPERATIONS)), config=configs, principal=principals, host=hosts,
       op=st.one_of(FEW_OPERATIONS, operations), rt=st.sampled_from([TOPIC, GROUP, CLUSTER]))
@example(  # an explicit DESCRIBE ALLOW next to a READ ALLOW of the same principal, host and pattern
    acl_set=frozenset({
        acl(TOPIC, "ab", LITERAL, "User:a", "*", Operation.READ, ALLOW),
        acl(TOPIC, "ab", LITERAL, "User:a", "*", Operation.DESCRIBE, ALLOW),
    }),
    config={"super_user": False, "allow_everyone": False},
    principal="User:a", host="1.1.1.1", op=Operation.DESCRIBE, rt=TOPIC,
)
def test_authorize_by_resource_type_matches_reference_scan(
    acl_set: frozenset[Acl], config: dict[str, bool], principal: str, host: str, op: Operation, rt: ResourceType
) -> None:
    data = _build(acl_set, config)
    decision = data.authorize_by_resource_type(ctx(principal, host), op, rt)
    expected = reference_authorize_by_resource_type(
        acl_set,
        super_users=["User:a"] if config["super_user"] else [],
        allow_everyone_if_no_acl_found=config["allow_everyone"],
        principal=principal,
        host=host,
        op=op,
        resource_type=rt,
    )
    assert decision.allowed is expected, f"{op.name} on any {rt.name} by {principal}@{host}"


filters = st.builds(
    AclFilter,
    resource_type=st.sampled_from([ResourceType.ANY, TOPIC, GROUP]),
    resource_name=st.none() | resource_names | names,
    pattern_type=st.sampled_from([PatternType.ANY, PatternType.MATCH, LITERAL, PREFIXED]),
    principal=st.none() | st.sampled_from(["User:a", "User:b", "User:*"]),
    host=st.none() | st.sampled_from(["*", "1.1.1.1"]),
    operation=st.sampled_from([Operation.ANY, *ALL_OPERATIONS]),
    permission=st.sampled_from([Permission.ANY, ALLOW, DENY]),
)


@PROPERTY
@given(acl_set=acl_sets(), flts=st.lists(filters, min_size=1, max_size=4))
def test_describe_and_delete_filters_match_reference_scan(acl_set: frozenset[Acl], flts: list[AclFilter]) -> None:
    data = AuthorizerData.build(acl_set)
    assert data.acls(AclFilter()) == kafka_sorted(acl_set)
    for flt in flts:
        assert data.acls(flt) == reference_acls(acl_set, flt), flt
    deleted = data.acls_to_delete(flts)
    assert [kafka_sorted(found) for found in deleted] == [reference_acls(acl_set, flt) for flt in flts]


requests = st.tuples(principals, hosts, actions)


@settings(PROPERTY, max_examples=max(EXAMPLES // 2, 50))
@given(base=acl_sets(), steps=st.lists(st.tuples(acl_sets(), st.data()), max_size=3), config=configs,
       probes=st.lists(requests, min_size=1, max_size=8))
def test_with_acls_equals_a_fresh_build(
    base: frozenset[Acl],
    steps: list[tuple[frozenset[Acl], st.DataObject]],
    config: dict[str, bool],
    probes: list[tuple[str, str, Action]],
) -> None:
    """An incrementally changed snapshot answers exactly like one built from the resulting set."""
    data = _build(base, config)
    current = set(base)
    for added, draw in steps:
        pool = sorted(current | added)
        removed = set(draw.draw(st.lists(st.sampled_from(pool), max_size=6))) if pool else set()
        removed -= added  # an ACL both added and removed in one step has no defined outcome
        # Fill the decision and by-resource-type caches and indexes that with_acls may carry over.
        data.authorize(ctx("User:a", "1.1.1.1"), [Action(TOPIC, "hard", Operation.READ)])
        for principal, host, act in probes:
            for rt in (TOPIC, GROUP):
                data.authorize_by_resource_type(ctx(principal, host), act.operation, rt)
        data = data.with_acls(added=added, removed=removed)
        current = (current | added) - removed
    fresh = _build(current, config)
    assert data.acls(AclFilter()) == fresh.acls(AclFilter()) == kafka_sorted(current)
    for principal, host, act in probes:
        context = ctx(principal, host)
        assert data.authorize(context, [act]) == fresh.authorize(context, [act])
        _assert_same(data.authorize(context, [act])[0], _expected(current, config, principal, host, act), str(act))
        for rt in (TOPIC, GROUP):
            assert (
                data.authorize_by_resource_type(context, act.operation, rt).allowed
                is fresh.authorize_by_resource_type(context, act.operation, rt).allowed
            )


# --------------------------------------------------------------------------- the live authorizer and its store


@settings(PROPERTY, max_examples=max(EXAMPLES // 10, 15))
@given(
    steps=st.lists(st.one_of(
        st.tuples(st.just("create"), acl_sets()),
        st.tuples(st.just("delete"), st.lists(filters, min_size=1, max_size=2)),
    ), min_size=1, max_size=5),
    probes=st.lists(requests, min_size=1, max_size=4),
)
def test_live_authorizers_follow_the_store(
    steps: list[tuple[str, object]], probes: list[tuple[str, str, Action]]
) -> None:
    """Two AuthorizerService nodes on one SQLite database: CreateAcls / DeleteAcls through node A,
    node B catches up by the change log (`refresh`). Both then hold exactly the reference set and
    decide like the naive scan, and every stored or removed ACL left exactly one audit event."""
    with tempfile.TemporaryDirectory() as tmp:
        engine = open_engine(f"sqlite:///{tmp}/kgov.db")
        audit = MemorySink()
        a = AuthorizerService(engine, AuthzConfig(), audit=audit)
        b = AuthorizerService(engine, AuthzConfig())
        try:
            a.start(background=False)
            b.start(background=False)
            current: set[Acl] = set()
            admin = Principal("User", "admin")
            for kind, arg in steps:
                before = len(audit.events)
                if kind == "create":
                    created = sorted(arg)  # type: ignore[call-overload]
                    assert a.create_acls(created, actor=admin) == [None] * len(created)
                    changed = set(created) - current
                    current |= changed
                else:
                    flts: list[AclFilter] = arg  # type: ignore[assignment]
                    deleted = a.delete_acls(flts, actor=admin)
                    assert [kafka_sorted(found) for found in deleted] == [reference_acls(current, f) for f in flts]
                    changed = {x for found in deleted for x in found}
                    current -= changed
                assert len(audit.events) - before == len(changed), kind
                b.refresh()
                for node in (a, b):
                    assert node.describe_acls(AclFilter()) == kafka_sorted(current)
            for principal, host, act in probes:
                expected = reference_authorize(current, principal=principal, host=host, act=act)
                for node in (a, b):
                    _assert_same(node.authorize(ctx(principal, host), [act])[0], expected, str(act))
        finally:
            a.close()
            b.close()
            engine.dispose()


# --------------------------------------------------------------------------- kgov: groups and roles

GROUPS = ("Group:g", "Group:h")
memberships = st.fixed_dictionaries(
    {"User:a": st.frozensets(st.sampled_from(GROUPS)), "User:b": st.frozensets(st.sampled_from(GROUPS))}
)


def _valid(binding: RoleBinding) -> bool:
    try:
        validate_role_binding(binding)
    except InvalidAclError:
        return False
    return True


role_bindings = st.one_of(
    st.builds(RoleBinding, principal=st.sampled_from(["User:a", "User:b", "User:*", *GROUPS]),
              role=st.sampled_from(sorted(PREDEFINED_ROLES))),
    st.builds(RoleBinding, principal=st.sampled_from(["User:a", "User:b", *GROUPS]),
              role=st.sampled_from(["DeveloperRead", "DeveloperWrite", "DeveloperManage", "ResourceOwner"]),
              resource_type=st.sampled_from([TOPIC, GROUP]), resource_name=names,
              pattern_type=st.sampled_from([LITERAL, PREFIXED])),
).filter(_valid)
kgov_actions = st.one_of(actions, st.builds(Action, resource_type=st.just(CLUSTER),
                                            resource_name=st.just("kafka-cluster"), operation=operations))


@PROPERTY
@given(
    acl_set=acl_sets(acl_principals=("User:a", "User:b", "User:*", *GROUPS, "Role:DeveloperRead")),
    bindings=st.lists(role_bindings, max_size=4),
    groups=memberships,
    config=configs,
    principal=principals,
    host=hosts,
    draw=st.data(),
)
def test_groups_and_role_bindings_match_reference_scan(
    acl_set: frozenset[Acl],
    bindings: list[RoleBinding],
    groups: dict[str, frozenset[str]],
    config: dict[str, bool],
    principal: str,
    host: str,
    draw: st.DataObject,
) -> None:
    """kgov's extension: a request is decided for the caller, its groups and the roles bound to any
    of them; a DENY on any of those wins over every grant; role grants ALLOW like ACLs; only ACLs and
    resource-scoped bindings count for allow.everyone.if.no.acl.found."""
    anchors = acl_set | {
        acl(b.resource_type, b.resource_name, b.pattern_type, b.principal, "*", Operation.READ, ALLOW)
        for b in bindings
        if b.resource_type is not None and b.resource_name is not None
    }
    batch = draw.draw(st.lists(related_actions(anchors, kgov_actions), min_size=1, max_size=5), label="batch")
    data = AuthorizerData.build(
        acl_set,
        super_users=[Principal("User", "a")] if config["super_user"] else [],
        allow_everyone_if_no_acl_found=config["allow_everyone"],
        groups={Principal.parse(u): frozenset(Principal.parse(g) for g in gs) for u, gs in groups.items()},
        role_bindings=bindings,
    )
    common = {
        "super_users": ["User:a"] if config["super_user"] else [],
        "allow_everyone_if_no_acl_found": config["allow_everyone"],
        "principal": principal,
        "host": host,
        "groups": groups.get(principal, frozenset()),
        "bindings": bindings,
    }
    context = ctx(principal, host)
    for act, decision in zip(batch, data.authorize(context, batch), strict=True):
        _assert_same(decision, reference_authorize(acl_set, act=act, **common), f"{act} by {principal}@{host}")
        for rt in (TOPIC, GROUP, CLUSTER):
            expected = reference_authorize_by_resource_type(acl_set, op=act.operation, resource_type=rt, **common)
            got = data.authorize_by_resource_type(context, act.operation, rt).allowed
            assert got is expected, f"{act.operation.name} on any {rt.name} by {principal}@{host}"


# --------------------------------------------------------------------------- StandardAuthorizerPropertyTest

TOPIC_CHARS = string.ascii_letters + string.digits + "._-"  # @ValidTopicChars
topics = st.text(alphabet=TOPIC_CHARS, min_size=1, max_size=40).filter(lambda t: t not in (".", ".."))
suffix_sets = st.sets(st.text(alphabet=TOPIC_CHARS, max_size=12), max_size=10)
KAFKA_PROPERTY = settings(PROPERTY, max_examples=max(EXAMPLES // 2, 50))
USER = ctx("User:user")


def _write_acl(name: str, pattern_type: PatternType, permission: Permission) -> Acl:
    """buildTopicWriteAcl."""
    return acl(TOPIC, name, pattern_type, "User:*", "*", Operation.WRITE, permission)


def _prefix_rules(topic: str, suffixes: set[str], permission: Permission, keep: object) -> set[Acl]:
    """addRandomPrefixRules: every proper prefix of the topic plus every random suffix."""
    patterns = {topic[:i] + suffix for i in range(len(topic)) for suffix in suffixes}
    return {_write_acl(p, PREFIXED, permission) for p in patterns if keep(p)}  # type: ignore[operator]


def _write_result(rules: set[Acl], topic: str) -> bool:
    (decision,) = AuthorizerData.build(rules).authorize(USER, [Action(TOPIC, topic, Operation.WRITE)])
    return decision.allowed


@KAFKA_PROPERTY
@given(topic=topics, suffixes=suffix_sets, data=st.data())
def test_matching_prefix_deny_overrides_all_allow_rules(topic: str, suffixes: set[str], data: st.DataObject) -> None:
    """StandardAuthorizerPropertyTest.matchingPrefixDenyOverridesAllAllowRules (the prefix may be "")."""
    prefix = topic[: data.draw(st.integers(0, len(topic) - 1))]
    rules = {_write_acl(prefix, PREFIXED, DENY)} | _prefix_rules(topic, suffixes, ALLOW, lambda p: p != "")
    assert _write_result(rules, topic) is False


@KAFKA_PROPERTY
@given(topic=topics, suffixes=suffix_sets)
def test_matching_literal_deny_overrides_all_allow_rules(topic: str, suffixes: set[str]) -> None:
    """StandardAuthorizerPropertyTest.matchingLiteralDenyOverridesAllAllowRules."""
    rules = {_write_acl(topic, LITERAL, DENY)} | _prefix_rules(topic, suffixes, ALLOW, lambda p: p != "")
    assert _write_result(rules, topic) is False


@KAFKA_PROPERTY
@given(topic=topics, suffixes=suffix_sets, data=st.data())
def test_matching_prefix_allow_with_no_matching_deny_rules(
    topic: str, suffixes: set[str], data: st.DataObject
) -> None:
    """StandardAuthorizerPropertyTest.matchingPrefixAllowWithNoMatchingDenyRules."""
    prefix = topic[: data.draw(st.integers(0, len(topic) - 1))]
    rules = {_write_acl(prefix, PREFIXED, ALLOW)} | _prefix_rules(
        topic, suffixes, DENY, lambda p: p != "" and not topic.startswith(p)
    )
    assert _write_result(rules, topic) is True


@KAFKA_PROPERTY
@given(topic=topics, suffixes=suffix_sets)
def test_matching_literal_allow_with_no_matching_deny_rules(topic: str, suffixes: set[str]) -> None:
    """StandardAuthorizerPropertyTest.matchingLiteralAllowWithNoMatchingDenyRules."""
    rules = {_write_acl(topic, LITERAL, ALLOW)} | _prefix_rules(
        topic, suffixes, DENY, lambda p: p != "" and not topic.startswith(p)
    )
    assert _write_result(rules, topic) is True
