"""kgov's decisions against a step-by-step transcription of Kafka's own scan.

`reference_model.py` states Kafka's rules as set semantics ("every ACL whose pattern applies"),
which is a derivation. This file does not derive: `KafkaScan` replays what apache/kafka trunk does,
statement by statement, over a sorted list standing for the TreeSet:

- `StandardAuthorizerData.authorize` / `findAclRule` / `checkSection` / `matchesUpTo` /
  `findResult` / `MatchingRuleBuilder.build` (metadata/.../authorizer/StandardAuthorizerData.java);
- `StandardAcl.compareTo` (type, REVERSE name, pattern type, operation, principal, host,
  permission) and `StandardAcl.kafkaPrincipal` (split at the first colon);
- `StandardAuthorizer.getConfiguredSuperUsers` (super users are compared as strings);
- the `Authorizer.authorizeByResourceType` default method (clients/.../server/authorizer/Authorizer.java).

Java strings are sequences of UTF-16 code units: `compareTo`, `charAt`, `substring` and
`toCharArray` all work on those, so the transcription does too (`_units`).

The only cases left out are the two docs/authorizer.md lists as deliberate differences: resource
names starting with `*` (Kafka skips the LITERAL `*` ACLs for them) and the scans that never end
or throw in Kafka's wildcard pass (`KafkaScanBroke`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from authz.decide import AuthorizerData
from authz.model import (
    Acl,
    AclFilter,
    Action,
    Decision,
    DefaultAllow,
    DefaultDeny,
    MatchingAcl,
    Operation,
    PatternType,
    Permission,
    Principal,
    RequestContext,
    ResourceType,
    SuperUser,
)
from tests.unit.authz.reference_model import kafka_host_text
from tests.unit.authz.test_reference_model import EXAMPLES
from tests.unit.authz.test_reference_model import PROPERTY as REFERENCE_PROPERTY

# Half of test_reference_model.py's examples: each one replays Java scans.
PROPERTY = settings(REFERENCE_PROPERTY, max_examples=max(EXAMPLES // 2, 50),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
LITERAL, PREFIXED, UNKNOWN_PT = PatternType.LITERAL, PatternType.PREFIXED, PatternType.UNKNOWN
ALLOW, DENY = Permission.ALLOW, Permission.DENY
Op = Operation

# --------------------------------------------------------------------------- Java strings


@cache
def _units(text: str) -> tuple[int, ...]:
    """The UTF-16 code units of a Java String holding `text`."""
    raw = text.encode("utf-16-be", "surrogatepass")
    return tuple(int.from_bytes(raw[i:i + 2], "big") for i in range(0, len(raw), 2))


def _java_compare(a: str, b: str) -> int:
    """String.compareTo: code unit by code unit, then length."""
    x, y = _units(a), _units(b)
    return (x > y) - (x < y)


def _java_substring(text: str, end: int) -> str:
    units = _units(text)
    if end > len(units):
        raise KafkaScanBroke("StringIndexOutOfBoundsException")
    return b"".join(u.to_bytes(2, "big") for u in units[:end]).decode("utf-16-be", "surrogatepass")


def _matches_up_to(resource: str, pattern: str) -> int:
    """StandardAuthorizerData.matchesUpTo."""
    r, p = _units(resource), _units(pattern)
    i = 0
    while i < len(r) and i < len(p) and r[i] == p[i]:
        i += 1
    return i


def _cmp(a: int, b: int) -> int:
    return (a > b) - (a < b)


def _compare_acls(x: Acl, y: Acl) -> int:
    """StandardAcl.compareTo. kgov's enum values are Kafka's codes, which are also the ordinals."""
    for c in (
        _cmp(x.resource_type, y.resource_type),
        _java_compare(y.resource_name, x.resource_name),  # REVERSE sort by resource name
        _cmp(x.pattern_type, y.pattern_type),
        _cmp(x.operation, y.operation),
        _java_compare(x.principal, y.principal),
        _java_compare(x.host, y.host),
        _cmp(x.permission, y.permission),
    ):
        if c:
            return c
    return 0


class KafkaScanBroke(Exception):
    """Kafka's scan would loop forever or throw here (docs/authorizer.md, "No hang on unusual names")."""


# --------------------------------------------------------------------------- StandardAuthorizerData


@dataclass
class _RuleBuilder:
    deny: Acl | None = None
    allow: Acl | None = None
    has_resource_acls: bool = False


@dataclass(frozen=True)
class KafkaResult:
    allowed: bool
    rule: str  # "SuperUser" | "DefaultAllow" | "DefaultDeny" | "MatchingAcl"
    acl: Acl | None = None


class KafkaScan:
    def __init__(self, acls: Iterable[Acl], super_users: Iterable[str], allow_everyone_if_no_acl_found: bool) -> None:
        # A TreeSet: sorted by compareTo, without duplicates.
        ordered: list[Acl] = []
        for a in acls:
            index = self._tail_index(ordered, a)
            if index == len(ordered) or _compare_acls(ordered[index], a) != 0:
                ordered.insert(index, a)
        self.tree = ordered
        self.super_users = set(super_users)
        self.default_allow = allow_everyone_if_no_acl_found

    @staticmethod
    def _tail_index(tree: list[Acl], exemplar: Acl) -> int:
        """Where `tailSet(exemplar, true)` starts: the first element not less than the exemplar."""
        for i, a in enumerate(tree):
            if _compare_acls(a, exemplar) >= 0:
                return i
        return len(tree)

    # StandardAuthorizerData.authorize (after the not-ready check; kgov tests that elsewhere).
    def authorize(self, principal: tuple[str, str], client_address: str, act: Action) -> KafkaResult:
        if f"{principal[0]}:{principal[1]}" in self.super_users:
            return KafkaResult(True, "SuperUser")
        matching = {principal, ("User", "*")}
        return self._find_acl_rule(matching, kafka_host_text(client_address), act)

    def _find_acl_rule(self, matching: set[tuple[str, str]], host: str, act: Action) -> KafkaResult:
        builder = _RuleBuilder()
        exemplar = Acl(act.resource_type, act.resource_name, UNKNOWN_PT, "", "", Op.UNKNOWN, Permission.UNKNOWN)
        self._check_section(act, exemplar, matching, host, builder)
        if builder.deny is None:
            exemplar = Acl(act.resource_type, "*", LITERAL, "", "", Op.UNKNOWN, Permission.UNKNOWN)
            self._check_section(act, exemplar, matching, host, builder)
        if builder.deny is not None:
            return KafkaResult(False, "MatchingAcl", builder.deny)
        if builder.allow is not None:
            return KafkaResult(True, "MatchingAcl", builder.allow)
        if not builder.has_resource_acls:
            return KafkaResult(self.default_allow, "DefaultAllow" if self.default_allow else "DefaultDeny")
        return KafkaResult(False, "DefaultDeny")

    def _check_section(
        self, act: Action, exemplar: Acl, matching: set[tuple[str, str]], host: str, builder: _RuleBuilder
    ) -> None:
        resource_name = act.resource_name
        position = self._tail_index(self.tree, exemplar)
        steps = 0
        while position < len(self.tree):
            steps += 1
            if steps > 50 * (len(self.tree) + 1):
                raise KafkaScanBroke("the scan never ends")
            a = self.tree[position]
            position += 1
            if a.resource_type != act.resource_type:
                break
            up_to = _matches_up_to(resource_name, a.resource_name)
            if up_to == len(_units(a.resource_name)):
                if a.pattern_type is LITERAL and up_to != len(_units(resource_name)):
                    continue
            elif not (a.resource_name == "*" and a.pattern_type is LITERAL):
                exemplar = Acl(exemplar.resource_type, _java_substring(exemplar.resource_name, up_to),
                               exemplar.pattern_type, exemplar.principal, exemplar.host, exemplar.operation,
                               exemplar.permission)
                position = self._tail_index(self.tree, exemplar)
                continue
            builder.has_resource_acls = True
            result = self._find_result(act, matching, host, a)
            if result is True:
                builder.allow = a
            elif result is False:
                builder.deny = a
                return

    @staticmethod
    def _find_result(act: Action, matching: set[tuple[str, str]], host: str, a: Acl) -> bool | None:
        kind, _, name = a.principal.partition(":")  # StandardAcl.kafkaPrincipal
        if (kind, name) not in matching:
            return None
        if a.host != "*" and a.host != host:
            return None
        if a.operation is not Op.ALL:
            if a.permission is ALLOW:
                if act.operation is Op.DESCRIBE:
                    if a.operation not in (Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
                        return None
                elif act.operation is Op.DESCRIBE_CONFIGS:
                    if a.operation not in (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS):
                        return None
                elif act.operation is not a.operation:
                    return None
            elif act.operation is not a.operation:
                return None
        return a.permission is ALLOW

    # ----------------------------------------------------------------------- Authorizer default method

    def authorize_by_resource_type(
        self, principal: tuple[str, str], client_address: str, op: Operation, rt: ResourceType
    ) -> bool:
        probe = self.authorize(principal, client_address, Action(rt, "hardcode", op, resource_ref_count=0))
        if probe.allowed:
            return True
        host = kafka_host_text(client_address)
        deny_literal: set[tuple[int, ...]] = set()
        deny_prefixed: set[tuple[int, ...]] = set()
        allow_literal: set[tuple[int, ...]] = set()
        allow_prefixed: set[tuple[int, ...]] = set()
        wildcard_allow = False
        for a in self.tree:  # acls(ResourcePatternFilter(rt, null, ANY), AccessControlEntryFilter.ANY)
            if a.resource_type is not rt:
                continue
            if a.host != host and a.host != "*":
                continue
            kind, _, name = a.principal.partition(":")  # SecurityUtils.parseKafkaPrincipal: split(":", 2)
            if (kind, name) != principal and a.principal != "User:*":
                continue
            if a.operation is not op and a.operation is not Op.ALL:
                continue
            if a.permission is DENY:
                if a.pattern_type is LITERAL:
                    if a.resource_name == "*":
                        return False
                    deny_literal.add(_units(a.resource_name))
                elif a.pattern_type is PREFIXED:
                    deny_prefixed.add(_units(a.resource_name))
                continue
            if a.permission is not ALLOW:
                continue
            if a.pattern_type is LITERAL:
                if a.resource_name == "*":
                    wildcard_allow = True
                    continue
                allow_literal.add(_units(a.resource_name))
            elif a.pattern_type is PREFIXED:
                allow_prefixed.add(_units(a.resource_name))
        if wildcard_allow:
            return True
        for literal, allowed in ((True, allow_literal), (False, allow_prefixed)):
            for units in allowed:
                if literal and units in deny_literal:
                    continue
                dominated = any(units[:n] in deny_prefixed for n in range(1, len(units) + 1))
                if not dominated:
                    return True
        return False


# --------------------------------------------------------------------------- comparison


def _same(decision: Decision, expected: KafkaResult, resource_name: str) -> bool:
    if decision.allowed is not expected.allowed:
        return False
    rule = decision.rule
    if expected.rule == "MatchingAcl":
        if resource_name[:1] < "*" and resource_name and expected.allowed:
            # Documented difference: for such a name Kafka's wildcard pass meets the name's own
            # patterns again after the `*` ones, so it may report one of those ALLOWs instead.
            return isinstance(rule, MatchingAcl)
        return isinstance(rule, MatchingAcl) and rule.acl == expected.acl
    kinds = {"SuperUser": SuperUser, "DefaultAllow": DefaultAllow, "DefaultDeny": DefaultDeny}
    return isinstance(rule, kinds[expected.rule])


# Small alphabets so that names, prefixes and the `hardcode` probe collide. `é`, U+FFFD and an
# astral character make UTF-16 order differ from code-point order; `!` sorts before `*`.
NAME_CHARS = "ab\u00e9\ufffd\U0001f600"
acl_names = st.one_of(
    st.text(alphabet=NAME_CHARS, min_size=1, max_size=3),
    st.sampled_from(["*", "h", "hard", "hardcode", "!", "!a"]),
)
resource_names = st.one_of(
    st.text(alphabet=NAME_CHARS, min_size=0, max_size=4),
    st.sampled_from(["hardcode", "hardcoded", "!a", "!b", "*"]),
)
ACL_PRINCIPALS = ["User:alice", "User:bob", "User:*", "Group:alice", "user:alice", "User:Alice", "User:a:b",
                  "User:\U0001f600", "User:\ufffd"]
ACL_HOSTS = ["*", "10.0.0.1", "0:0:0:0:0:0:0:1", "::1", "fe80:0:0:0:0:0:0:1%eth0"]
CALLERS = [("User", "alice"), ("User", "bob"), ("Group", "alice"), ("User", "a:b"), ("User:a", "b"), ("User", "\U0001f600"),
           ("User", "*")]
CLIENTS = ["10.0.0.1", "10.0.0.2", "::1", "::ffff:10.0.0.1", "fe80::1%eth0"]
# Mostly operations that imply one another (READ -> DESCRIBE, ALTER_CONFIGS -> DESCRIBE_CONFIGS, ALL).
operations = st.one_of(st.sampled_from([Op.READ, Op.DESCRIBE, Op.ALL, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS]),
                       st.sampled_from([Op.READ, Op.DESCRIBE, Op.ALL, Op.WRITE]),
                       st.sampled_from([op for op in Op if op not in (Op.UNKNOWN, Op.ANY)]))
acl_principals = st.one_of(st.sampled_from(["User:alice", "User:*"]), st.sampled_from(ACL_PRINCIPALS))


@st.composite
def acl_sets(draw: st.DrawFn) -> list[Acl]:
    pool = draw(st.lists(st.tuples(st.sampled_from([TOPIC, GROUP]), acl_names, st.sampled_from([LITERAL, PREFIXED])),
                         min_size=1, max_size=6))
    rows = draw(st.lists(st.tuples(st.sampled_from(pool), acl_principals, st.sampled_from(ACL_HOSTS),
                                   operations, st.sampled_from([ALLOW, DENY])), min_size=1, max_size=20))
    return [Acl(rt, name, pt, principal, host, op, perm) for (rt, name, pt), principal, host, op, perm in rows]


# The client addresses an ACL host may be meant for (Java's text, Python's, an IPv4-mapped form).
_CLIENTS_FOR = {"10.0.0.1": ["10.0.0.1", "::ffff:10.0.0.1"], "0:0:0:0:0:0:0:1": ["::1", "0::1"],
                "::1": ["::1"], "fe80:0:0:0:0:0:0:1%eth0": ["fe80::1%eth0"]}


@st.composite
def requests(draw: st.DrawFn, acls: list[Acl]) -> tuple[tuple[str, str], str, Action]:
    """(caller, client address, action). Most of the time about an ACL: its resource (the name, or
    the name extended), often its principal, host and operation, so that decisions come from ACLs."""
    caller = draw(st.sampled_from(CALLERS))
    client = draw(st.sampled_from(CLIENTS))
    rt = draw(st.sampled_from([TOPIC, GROUP]))
    op = draw(operations)
    if not acls or draw(st.integers(0, 3)) == 0:
        return caller, client, Action(rt, draw(resource_names), op)
    base = draw(st.sampled_from(acls))
    name = base.resource_name + draw(st.sampled_from(["", "", "a", "\U0001f600"]))
    if draw(st.integers(0, 3)):
        kind, _, principal_name = base.principal.partition(":")
        caller = (kind, principal_name)
    if base.host in _CLIENTS_FOR and draw(st.integers(0, 3)):
        client = draw(st.sampled_from(_CLIENTS_FOR[base.host]))
    if draw(st.integers(0, 2)):
        op = base.operation
    return caller, client, Action(base.resource_type, name, op)


configs = st.fixed_dictionaries({"super_users": st.sampled_from([(), (), (), ("User:alice",), ("User:a:b",)]),
                                 "allow_everyone": st.booleans()})


def _both(acls: list[Acl], config: dict[str, object]) -> tuple[AuthorizerData, KafkaScan]:
    supers: tuple[str, ...] = config["super_users"]  # type: ignore[assignment]
    data = AuthorizerData.build(acls, super_users=[Principal.parse(s) for s in supers],
                                allow_everyone_if_no_acl_found=bool(config["allow_everyone"]))
    return data, KafkaScan(acls, supers, bool(config["allow_everyone"]))


@PROPERTY
@given(acls=acl_sets(), config=configs, data=st.data())
def test_authorize_decides_and_reports_as_kafkas_scan(
    acls: list[Acl], config: dict[str, object], data: st.DataObject
) -> None:
    caller, client, act = data.draw(requests(acls))
    assume(not act.resource_name.startswith("*"))  # deliberate difference, docs/authorizer.md
    kgov, kafka = _both(acls, config)
    try:
        expected = kafka.authorize(caller, client, act)
    except KafkaScanBroke:
        assume(False)  # deliberate difference, docs/authorizer.md
    decision = kgov.authorize(RequestContext(Principal(*caller), client), [act])[0]
    assert _same(decision, expected, act.resource_name), f"{act} by {caller}@{client}: kgov {decision}, Kafka {expected}"


@PROPERTY
@given(acls=acl_sets(), config=configs, caller=st.sampled_from(CALLERS), client=st.sampled_from(CLIENTS),
       op=operations, rt=st.sampled_from([TOPIC, GROUP]))
@example(  # a PREFIXED deny cut inside a surrogate pair can't come from Kafka's wire; an astral prefix can
    acls=[Acl(TOPIC, "\U0001f600", PREFIXED, "User:alice", "*", Op.READ, DENY),
          Acl(TOPIC, "\U0001f600a", LITERAL, "User:alice", "*", Op.READ, ALLOW),
          Acl(TOPIC, "hardcode", LITERAL, "User:bob", "*", Op.READ, ALLOW)],
    config={"super_users": (), "allow_everyone": False}, caller=("User", "alice"), client="10.0.0.1",
    op=Op.READ, rt=TOPIC,
)
def test_authorize_by_resource_type_as_kafkas_default_method(
    acls: list[Acl], config: dict[str, object], caller: tuple[str, str], client: str, op: Operation,
    rt: ResourceType,
) -> None:
    kgov, kafka = _both(acls, config)
    try:
        expected = kafka.authorize_by_resource_type(caller, client, op, rt)
    except KafkaScanBroke:
        assume(False)
    decision = kgov.authorize_by_resource_type(RequestContext(Principal(*caller), client), op, rt)
    assert decision.allowed is expected, f"{op.name} on any {rt.name} by {caller}@{client}"


def test_a_name_sorting_before_the_wildcard_is_decided_as_kafka_with_another_reported_allow() -> None:
    """docs/authorizer.md, "No hang on unusual names": Kafka's wildcard pass starts at `*` and, for a
    name whose first character sorts before it, walks on into that name's own patterns (when it does
    not hang), so the last ALLOW it reports can be `!` rather than `*`. The decision is the same."""
    acls = [Acl(GROUP, "!", PREFIXED, "User:alice", "*", Op.READ, ALLOW),
            Acl(GROUP, "*", LITERAL, "User:*", "*", Op.READ, ALLOW),
            Acl(GROUP, "!", PREFIXED, "User:bob", "*", Op.READ, DENY)]
    kgov, kafka = _both(acls, {"super_users": (), "allow_everyone": False})
    for caller, allowed in ((("User", "alice"), True), (("User", "bob"), False), (("User", "carol"), True)):
        act = Action(GROUP, "!a", Op.READ)
        expected = kafka.authorize(caller, "10.0.0.1", act)
        (decision,) = kgov.authorize(RequestContext(Principal(*caller), "10.0.0.1"), [act])
        assert decision.allowed is expected.allowed is allowed
        assert _same(decision, expected, act.resource_name)
    assert kafka.authorize(("User", "alice"), "10.0.0.1", Action(GROUP, "!a", Op.READ)).acl == acls[0]


@PROPERTY
@given(acls=acl_sets())
@example(acls=[Acl(GROUP, "\ufffd", LITERAL, "User:alice", "*", Op.READ, ALLOW),
               Acl(GROUP, "\U0001f600", LITERAL, "User:alice", "*", Op.READ, ALLOW),
               Acl(GROUP, "g", LITERAL, "User:\ufffd", "*", Op.READ, ALLOW),
               Acl(GROUP, "g", LITERAL, "User:\U0001f600", "*", Op.READ, ALLOW)])
def test_describe_lists_acls_in_the_tree_sets_order(acls: list[Acl]) -> None:
    """StandardAuthorizerData.acls walks `aclsByResource` in StandardAcl.compareTo order, which
    compares names, principals and hosts as Java strings (UTF-16 code units): U+FFFD sorts after
    an astral character there, before it in code-point order."""
    kgov, kafka = _both(acls, {"super_users": (), "allow_everyone": False})
    assert kgov.acls(AclFilter()) == kafka.tree
