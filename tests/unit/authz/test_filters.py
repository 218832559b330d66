"""DescribeAcls / DeleteAcls filters, transcribed from Kafka.

Sources: clients `ResourcePatternFilterTest.java` and `AclBindingTest.java`
(org.apache.kafka.common.acl), core `AuthorizerTest.scala` / the former `AclAuthorizerTest.scala`
(kafka.security.authorizer) and metadata `AclControlManagerTest.java` (org.apache.kafka.controller).
Each Kafka case is checked against `authz.model.AclFilter` and, where it is about which ACLs a filter
selects, against `AuthorizerData.acls` / `acls_to_delete` and the naive reference model too.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from authz.decide import AuthorizerData
from authz.model import (
    Acl,
    AclFilter,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from tests.unit.authz.reference_model import ReferenceAuthorizer, acl, filter_matches, reference_acls

Build = Callable[..., AuthorizerData | ReferenceAuthorizer]
BACKENDS: dict[str, Build] = {"kgov": AuthorizerData.build, "reference": ReferenceAuthorizer.build}


@pytest.fixture(params=sorted(BACKENDS))
def build(request: pytest.FixtureRequest) -> Build:
    """The listing and deleting scenarios run against kgov and against the naive reference model."""
    return BACKENDS[request.param]

TOPIC, GROUP, ANY_TYPE, UNKNOWN_TYPE = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.ANY, ResourceType.UNKNOWN
LITERAL, PREFIXED, ANY, MATCH = PatternType.LITERAL, PatternType.PREFIXED, PatternType.ANY, PatternType.MATCH
READ, WRITE, DESCRIBE, ALL = Operation.READ, Operation.WRITE, Operation.DESCRIBE, Operation.ALL
ALLOW, DENY = Permission.ALLOW, Permission.DENY

# ResourcePatternFilterTest: (filter type, filter name, filter pattern type), stored pattern, matches?
RESOURCE_PATTERN_FILTER_CASES = [
    # shouldNotMatchIfDifferentResourceType
    ((TOPIC, "Name", LITERAL), (GROUP, "Name", LITERAL), False),
    # shouldNotMatchIfDifferentName
    ((TOPIC, "Different", PREFIXED), (TOPIC, "Name", PREFIXED), False),
    # shouldNotMatchIfDifferentNameCase
    ((TOPIC, "NAME", LITERAL), (TOPIC, "Name", LITERAL), False),
    # shouldNotMatchIfDifferentPatternType
    ((TOPIC, "Name", LITERAL), (TOPIC, "Name", PREFIXED), False),
    # shouldMatchWhereResourceTypeIsAny
    ((ANY_TYPE, "Name", PREFIXED), (TOPIC, "Name", PREFIXED), True),
    # shouldMatchWhereResourceNameIsAny
    ((TOPIC, None, PREFIXED), (TOPIC, "Name", PREFIXED), True),
    # shouldMatchWherePatternTypeIsAny
    ((TOPIC, None, ANY), (TOPIC, "Name", PREFIXED), True),
    # shouldMatchWherePatternTypeIsMatch
    ((TOPIC, None, MATCH), (TOPIC, "Name", PREFIXED), True),
    # shouldMatchLiteralIfExactMatch
    ((TOPIC, "Name", LITERAL), (TOPIC, "Name", LITERAL), True),
    # shouldMatchLiteralIfNameMatchesAndPatternIsOnPatternTypeAny
    ((TOPIC, "Name", ANY), (TOPIC, "Name", LITERAL), True),
    # shouldMatchLiteralIfNameMatchesAndPatternIsOnPatternTypeMatch
    ((TOPIC, "Name", MATCH), (TOPIC, "Name", LITERAL), True),
    # shouldNotMatchLiteralIfNamePrefixed
    ((TOPIC, "Name-something", MATCH), (TOPIC, "Name", LITERAL), False),
    # shouldMatchLiteralWildcardIfExactMatch
    ((TOPIC, "*", LITERAL), (TOPIC, "*", LITERAL), True),
    # shouldNotMatchLiteralWildcardAgainstOtherName
    ((TOPIC, "Name", LITERAL), (TOPIC, "*", LITERAL), False),
    # shouldNotMatchLiteralWildcardTheWayAround
    ((TOPIC, "*", LITERAL), (TOPIC, "Name", LITERAL), False),
    # shouldNotMatchLiteralWildcardIfFilterHasPatternTypeOfAny
    ((TOPIC, "Name", ANY), (TOPIC, "*", LITERAL), False),
    # shouldMatchLiteralWildcardIfFilterHasPatternTypeOfMatch
    ((TOPIC, "Name", MATCH), (TOPIC, "*", LITERAL), True),
    # shouldMatchPrefixedIfExactMatch
    ((TOPIC, "Name", PREFIXED), (TOPIC, "Name", PREFIXED), True),
    # shouldNotMatchIfBothPrefixedAndFilterIsPrefixOfResource
    ((TOPIC, "Name", PREFIXED), (TOPIC, "Name-something", PREFIXED), False),
    # shouldNotMatchIfBothPrefixedAndResourceIsPrefixOfFilter
    ((TOPIC, "Name-something", PREFIXED), (TOPIC, "Name", PREFIXED), False),
    # shouldNotMatchPrefixedIfNamePrefixedAnyFilterTypeIsAny
    ((TOPIC, "Name-something", ANY), (TOPIC, "Name", PREFIXED), False),
    # shouldMatchPrefixedIfNamePrefixedAnyFilterTypeIsMatch
    ((TOPIC, "Name-something", MATCH), (TOPIC, "Name", PREFIXED), True),
]


@pytest.mark.parametrize(("flt", "pattern", "expected"), RESOURCE_PATTERN_FILTER_CASES)
def test_resource_pattern_filter_matches(
    flt: tuple[ResourceType, str | None, PatternType],
    pattern: tuple[ResourceType, str, PatternType],
    expected: bool,
) -> None:
    """ResourcePatternFilterTest (clients, org.apache.kafka.common.acl): every `matches` case."""
    f = AclFilter(resource_type=flt[0], resource_name=flt[1], pattern_type=flt[2])
    assert f.matches_pattern(ResourcePattern(*pattern)) is expected
    stored = acl(pattern[0], pattern[1], pattern[2], "User:alice", "*", READ, ALLOW)
    assert f.matches(stored) is expected
    # The naive model used by the property tests agrees with Kafka's table too.
    assert filter_matches(f, stored) is expected


def test_resource_pattern_filter_is_unknown() -> None:
    """ResourcePatternFilterTest.shouldBeUnknownIfResourceTypeUnknown / ...IfPatternTypeUnknown."""
    assert AclFilter(resource_type=UNKNOWN_TYPE, resource_name=None, pattern_type=LITERAL).is_unknown
    assert AclFilter(resource_type=GROUP, resource_name=None, pattern_type=PatternType.UNKNOWN).is_unknown
    assert not AclFilter(resource_type=GROUP, resource_name=None, pattern_type=LITERAL).is_unknown


# AclBindingTest fixtures.
ACL1 = acl(TOPIC, "mytopic", LITERAL, "User:ANONYMOUS", "", ALL, ALLOW)
ACL2 = acl(TOPIC, "mytopic", LITERAL, "User:*", "", READ, ALLOW)
ACL3 = acl(TOPIC, "mytopic2", LITERAL, "User:ANONYMOUS", "127.0.0.1", READ, DENY)
UNKNOWN_ACL = acl(TOPIC, "mytopic2", LITERAL, "User:ANONYMOUS", "127.0.0.1", Operation.UNKNOWN, DENY)
ANY_ANONYMOUS = AclFilter(principal="User:ANONYMOUS")
ANY_DENY = AclFilter(permission=DENY)
ANY_MYTOPIC = AclFilter(resource_type=TOPIC, resource_name="mytopic", pattern_type=LITERAL)


def test_acl_binding_matching() -> None:
    """AclBindingTest.testMatching (clients)."""
    assert acl(TOPIC, "mytopic", LITERAL, "User:ANONYMOUS", "", ALL, ALLOW) == ACL1
    assert ACL1 != ACL2
    for binding in (ACL1, ACL2, ACL3):
        assert AclFilter().matches(binding)
    assert ANY_ANONYMOUS.matches(ACL1)
    assert not ANY_ANONYMOUS.matches(ACL2)
    assert ANY_ANONYMOUS.matches(ACL3)
    assert not ANY_DENY.matches(ACL1)
    assert not ANY_DENY.matches(ACL2)
    assert ANY_DENY.matches(ACL3)
    assert ANY_MYTOPIC.matches(ACL1)
    assert ANY_MYTOPIC.matches(ACL2)
    assert not ANY_MYTOPIC.matches(ACL3)
    assert ANY_ANONYMOUS.matches(UNKNOWN_ACL)
    assert ANY_DENY.matches(UNKNOWN_ACL)
    assert not ANY_MYTOPIC.matches(UNKNOWN_ACL)


def test_acl_binding_unknowns() -> None:
    """AclBindingTest.testUnknowns (the filter half; kgov's Acl has no isUnknown)."""
    assert not ANY_ANONYMOUS.is_unknown
    assert not ANY_DENY.is_unknown
    assert not ANY_MYTOPIC.is_unknown
    assert AclFilter(operation=Operation.UNKNOWN).is_unknown
    assert AclFilter(permission=Permission.UNKNOWN).is_unknown


def test_exact_filter_matches_only_its_acl(build: Build) -> None:
    """AclBinding.toFilter (used by AuthorizerTest.removeAcls): the exact filter selects one ACL."""
    data = build([ACL1, ACL2, ACL3])
    for binding in (ACL1, ACL2, ACL3):
        assert data.acls(AclFilter.exact(binding)) == [binding]


USER_ALICE = "User:alice"


def _acls_filter_fixture() -> tuple[Acl, Acl, Acl, Acl]:
    # AuthorizerTest uses "foo-" + UUID / "bar-" + UUID; fixed suffixes keep the test deterministic.
    resource1, resource2 = "foo-5f0c6b1e", "bar-0d9a2c47"
    return (
        acl(TOPIC, resource1, LITERAL, USER_ALICE, "*", READ, ALLOW),
        acl(TOPIC, resource1, LITERAL, USER_ALICE, "192.168.0.1", WRITE, ALLOW),
        acl(TOPIC, resource2, LITERAL, USER_ALICE, "*", DESCRIBE, ALLOW),
        acl(TOPIC, "bar-", PREFIXED, "User:*", "*", READ, ALLOW),
    )


def test_acls_filter(build: Build) -> None:
    """AuthorizerTest.testAclsFilter (core, KRaft variant): describe and delete with LITERAL, PREFIXED,
    MATCH and ANY filters; KRaft computes every delete filter against the same snapshot."""
    acl1, acl2, acl3, acl4 = _acls_filter_fixture()
    all_acls = [acl1, acl2, acl3, acl4]
    data = build(all_acls)

    assert set(data.acls(AclFilter())) == {acl1, acl2, acl3, acl4}
    resource1 = AclFilter(TOPIC, acl1.resource_name, LITERAL)
    assert set(data.acls(resource1)) == {acl1, acl2}
    assert set(data.acls(AclFilter(TOPIC, "bar-", PREFIXED))) == {acl4}
    matching = AclFilter(ANY_TYPE, acl3.resource_name, MATCH)
    assert set(data.acls(matching)) == {acl3, acl4}

    filters = [
        matching,
        AclFilter.exact(acl1),
        AclFilter(TOPIC, acl3.resource_name, LITERAL),
        AclFilter(TOPIC, "baz", ANY),
    ]
    results = data.acls_to_delete(filters)
    assert len(results) == 4
    assert set(results[0]) == {acl3, acl4}
    assert set(results[1]) == {acl1}
    # "standard authorizer first finds the acls that match filters and then delete them. So
    # filters[2] will match acl3 even though it is also matching filters[0] and will be deleted by it"
    assert set(results[2]) == {acl3}
    assert results[3] == []
    for flt in [*filters, AclFilter(), resource1]:
        assert data.acls(flt) == reference_acls(all_acls, flt)


def test_get_acls_principal(build: Build) -> None:
    """AuthorizerTest.testGetAclsPrincipal: a principal filter is an exact string match, so `User:*`
    only finds ACLs stored for `User:*`."""
    resource = "foo-7d3e"
    specific = acl(TOPIC, resource, LITERAL, USER_ALICE, "*", WRITE, ALLOW)
    data = build([specific])
    assert len(data.acls(AclFilter(principal="User:*"))) == 0, "acl on specific should not be returned for wildcard"
    assert len(data.acls(AclFilter(principal=USER_ALICE))) == 1, "acl on specific should be returned for specific"

    (removed,) = data.acls_to_delete([AclFilter(TOPIC, resource, LITERAL)])
    data = data.with_acls(removed=removed)
    wildcard = acl(TOPIC, resource, LITERAL, "User:*", "*", WRITE, ALLOW)
    data = data.with_acls(added=[wildcard])
    assert len(data.acls(AclFilter(principal="User:*"))) == 1, "acl on wildcard should be returned for wildcard"
    assert len(data.acls(AclFilter(principal=USER_ALICE))) == 0, "acl on wildcard should not be returned for specific"


@pytest.mark.parametrize(
    ("name", "pattern_type"),
    [("foo-2b8e41", LITERAL), ("bar-", PREFIXED), ("*", LITERAL)],
)
@pytest.mark.parametrize("delete_pattern_type", ["own", ANY, MATCH])
def test_create_delete_timing(build: Build, name: str, pattern_type: PatternType, delete_pattern_type: object) -> None:
    """AuthorizerTest.testCreateDeleteTiming, without the ZooKeeper propagation delay: right after a
    create, a delete by (type, name, own pattern type | ANY | MATCH) returns exactly that ACL and the
    listing is empty afterwards."""
    created = acl(TOPIC, name, pattern_type, USER_ALICE, "*", READ, ALLOW)
    data = build()
    assert data.acls(AclFilter()) == []
    data = data.with_acls(added=[created])
    pt = pattern_type if delete_pattern_type == "own" else delete_pattern_type
    assert isinstance(pt, PatternType)
    (deleted,) = data.acls_to_delete([AclFilter(TOPIC, name, pt)])
    assert deleted == [created]
    data = data.with_acls(removed=deleted)
    assert data.acls(AclFilter()) == []


def test_validate_filter(build: Build) -> None:
    """AclControlManagerTest.testValidateFilter (metadata): unknown filters are refused on delete."""
    valid = AclFilter(ANY_TYPE, "*", LITERAL, "User:*", "*", Operation.ANY, Permission.ANY)
    data = build([acl(TOPIC, "*", LITERAL, "User:*", "*", READ, ALLOW)])
    assert data.acls_to_delete([valid]) == [[acl(TOPIC, "*", LITERAL, "User:*", "*", READ, ALLOW)]]
    with pytest.raises(InvalidAclError, match=r"^Unknown patternFilter\.$"):
        data.acls_to_delete([AclFilter(ANY_TYPE, "*", PatternType.UNKNOWN, "User:*", "*")])
    with pytest.raises(InvalidAclError, match=r"^Unknown entryFilter\.$"):
        data.acls_to_delete([AclFilter(ANY_TYPE, "*", MATCH, "User:*", "*", Operation.ANY, Permission.UNKNOWN)])


def test_delete_dedupe(build: Build) -> None:
    """AclControlManagerTest.testDeleteDedupe: ANY and the exact filter both report the one ACL."""
    binding = acl(TOPIC, "topic-1", LITERAL, "User:user", "10.0.0.1", ALL, ALLOW)
    data = build([binding])
    assert data.acls_to_delete([AclFilter()]) == [[binding]]
    assert data.acls_to_delete([AclFilter.exact(binding)]) == [[binding]]
    assert data.acls_to_delete([AclFilter(), AclFilter.exact(binding)]) == [[binding], [binding]]


# StandardAclTest.TEST_ACLS (metadata), the first five.
TEST_ACLS = [
    acl(ResourceType.CLUSTER, "kafka-cluster", LITERAL, "User:*", "*", Operation.ALTER, ALLOW),
    acl(TOPIC, "foo_", PREFIXED, "User:*", "*", READ, ALLOW),
    acl(GROUP, "mygroup", LITERAL, "User:foo", "*", READ, DENY),
    acl(GROUP, "mygroup", PREFIXED, "User:foo", "*", READ, DENY),
    acl(GROUP, "foo", PREFIXED, "User:foo", "*", READ, DENY),
]


def test_standard_acl_compare_to(build: Build) -> None:
    """StandardAclTest.testCompareTo: DescribeAcls lists in StandardAcl order -- resource type, then
    REVERSE resource name, then pattern type."""
    listed = build(TEST_ACLS).acls(AclFilter())
    assert listed.index(TEST_ACLS[0]) > listed.index(TEST_ACLS[1])  # CLUSTER after TOPIC
    assert listed.index(TEST_ACLS[2]) < listed.index(TEST_ACLS[3])  # LITERAL before PREFIXED
    assert listed.index(TEST_ACLS[4]) > listed.index(TEST_ACLS[3])  # "foo" after "mygroup" (reverse)
    assert listed == [TEST_ACLS[1], TEST_ACLS[2], TEST_ACLS[3], TEST_ACLS[4], TEST_ACLS[0]]


def test_create_acl_delete_acl(build: Build) -> None:
    """AclControlManagerTest.testCreateAclDeleteAcl, the deleting half: a (ANY, null, LITERAL) filter
    removes exactly the LITERAL ACLs; a filter with an UNKNOWN resource type is refused."""
    data = build(TEST_ACLS[:3])
    (deleted,) = data.acls_to_delete([AclFilter(ResourceType.ANY, None, LITERAL)])
    assert set(deleted) == {TEST_ACLS[0], TEST_ACLS[2]}
    assert data.with_acls(removed=deleted).acls(AclFilter()) == [TEST_ACLS[1]]
    with pytest.raises(InvalidAclError, match=r"^Unknown patternFilter\.$"):
        data.acls_to_delete([AclFilter(ResourceType.UNKNOWN, None, LITERAL)])
