"""The former AclAuthorizer scenarios, transcribed for kgov's `authz.decide.AuthorizerData`.

Sources (apache/kafka, core `src/test/scala/unit/kafka/security/authorizer/`): `AuthorizerTest.scala`
(the KRaft/ZK successor of `AclAuthorizerTest.scala`; KRaft expectations are used), `BaseAuthorizerTest.scala`
(authorizeByResourceType, KIP-679) and `AuthorizerWrapperTest.scala`. The ZooKeeper-only, threading and
plugin-lifecycle tests are not transcribed here (see the report of the change that added this file).

`Authorizer` below plays Kafka's `authorizer1`: it holds the current immutable snapshot and applies
`createAcls` / `deleteAcls` the way the tests' `addAcls` / `removeAcls` helpers do. Every scenario
runs twice: against kgov's `AuthorizerData` and against the naive `ReferenceAuthorizer`, which is how
the model the property tests trust is itself held to Kafka's expectations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from pydantic import ValidationError

from authz.config import AuthzConfig, parse_super_users
from authz.decide import AuthorizerData
from authz.model import (
    Acl,
    AclFilter,
    Action,
    AuthorizationResult,
    Operation,
    PatternType,
    Permission,
    Principal,
    RequestContext,
    ResourceType,
)
from tests.unit.authz.reference_model import ALL_OPERATIONS, CONCRETE_TYPES, ReferenceAuthorizer, ctx

TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = (
    ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID,
)
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALL, READ, WRITE, DELETE, ALTER, DESCRIBE = (
    Operation.ALL, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER, Operation.DESCRIBE,
)
ALLOW, DENY = Permission.ALLOW, Permission.DENY

# BaseAuthorizerTest fixtures.
SUPER_USERS = "User:superuser1; User:superuser2"
USERNAME = "alice"
PRINCIPAL = f"User:{USERNAME}"
REQUEST_CONTEXT = ctx(PRINCIPAL, "192.168.0.1", api_key=0)

Pattern = tuple[ResourceType, str, PatternType]


@dataclass(frozen=True)
class Ace:
    """Kafka's AccessControlEntry(principal, host, operation, permissionType)."""

    principal: str
    host: str
    operation: Operation
    permission: Permission

    def on(self, pattern: Pattern) -> Acl:
        return Acl(pattern[0], pattern[1], pattern[2], self.principal, self.host, self.operation, self.permission)


ALLOW_READ = Ace("User:*", "*", READ, ALLOW)
ALLOW_WRITE = Ace("User:*", "*", WRITE, ALLOW)
DENY_READ = Ace("User:*", "*", READ, DENY)

# AuthorizerTest fixtures; `resource` is "foo-" + UUID in Kafka.
RESOURCE: Pattern = (TOPIC, "foo-9b2f4e61-3a1c-4c55-8f0e-2d7b8c9a1e34", LITERAL)
WILDCARD_RESOURCE: Pattern = (TOPIC, "*", LITERAL)
PREFIXED_RESOURCE: Pattern = (TOPIC, "foo", PREFIXED)
CLUSTER_RESOURCE: Pattern = (CLUSTER, "kafka-cluster", LITERAL)


Build = Callable[..., AuthorizerData | ReferenceAuthorizer]
BACKENDS: dict[str, Build] = {"kgov": AuthorizerData.build, "reference": ReferenceAuthorizer.build}


class Authorizer:
    """A StandardAuthorizer under test: the snapshot plus the BaseAuthorizerTest helper methods."""

    def __init__(
        self, build: Build, *, super_users: str = SUPER_USERS, allow_everyone_if_no_acl_found: bool = False
    ) -> None:
        self.data = build(
            super_users=parse_super_users(super_users), allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found
        )

    def add_acls(self, aces: set[Ace], pattern: Pattern) -> None:
        self.data = self.data.with_acls(added=[ace.on(pattern) for ace in aces])

    def remove_acls(self, aces: set[Ace], pattern: Pattern) -> bool:
        """`removeAcls`: the exact bindings, or every ACL of the pattern when `aces` is empty."""
        filters = [AclFilter.exact(ace.on(pattern)) for ace in aces] or [AclFilter(*pattern)]
        deleted = self.data.acls_to_delete(filters)
        self.data = self.data.with_acls(removed=[a for found in deleted for a in found])
        return all(deleted)

    def get_acls(self, pattern: Pattern | None = None, principal: str | None = None) -> set[Acl]:
        flt = AclFilter(*pattern, principal=principal) if pattern else AclFilter(principal=principal)
        return set(self.data.acls(flt))

    def get_aces(self, pattern: Pattern) -> set[Ace]:
        return {Ace(a.principal, a.host, a.operation, a.permission) for a in self.get_acls(pattern)}

    def authorize(self, context: RequestContext, op: Operation, pattern: Pattern) -> bool:
        act = Action(pattern[0], pattern[1], op, 1, log_if_allowed=True, log_if_denied=True, pattern_type=pattern[2])
        (decision,) = self.data.authorize(context, [act])
        return decision.result is AuthorizationResult.ALLOWED

    def authorize_by_resource_type(self, context: RequestContext, op: Operation, rt: ResourceType) -> bool:
        return self.data.authorize_by_resource_type(context, op, rt).result is AuthorizationResult.ALLOWED

    def change_acl_and_verify(
        self, original: set[Ace], added: set[Ace], removed: set[Ace], pattern: Pattern = RESOURCE
    ) -> set[Ace]:
        acls = set(original)
        if added:
            self.add_acls(added, pattern)
            acls |= added
        if removed:
            self.remove_acls(removed, pattern)
            acls -= removed
        assert self.get_aces(pattern) == acls
        return acls


@pytest.fixture(params=sorted(BACKENDS))
def build(request: pytest.FixtureRequest) -> Build:
    return BACKENDS[request.param]


@pytest.fixture
def authorizer(build: Build) -> Authorizer:
    return Authorizer(build)


class CustomPrincipal(Principal):
    """AuthorizerTest.CustomPrincipal: a principal subclass whose equals() is always false, so that
    only a comparison by type and name can recognise it."""

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = Principal.__hash__


def custom_ctx(name: str, host: str) -> RequestContext:
    return RequestContext(principal=CustomPrincipal("User", name), client_address=host)


# --------------------------------------------------------------------------- AuthorizerTest


def test_authorize_throws_on_non_literal_resource(authorizer: Authorizer) -> None:
    """AuthorizerTest.testAuthorizeThrowsOnNonLiteralResource."""
    with pytest.raises(ValueError, match=r"^Only literal resources are supported\. Got: PREFIXED$"):
        authorizer.authorize(REQUEST_CONTEXT, READ, (TOPIC, "something", PREFIXED))
    # Kafka has no decision cache: the check holds after the literal resource was decided too.
    assert not authorizer.authorize(REQUEST_CONTEXT, READ, (TOPIC, "something", LITERAL))
    with pytest.raises(ValueError, match=r"^Only literal resources are supported\. Got: PREFIXED$"):
        authorizer.authorize(REQUEST_CONTEXT, READ, (TOPIC, "something", PREFIXED))


def test_authorize_with_empty_resource_name(authorizer: Authorizer) -> None:
    """AuthorizerTest.testAuthorizeWithEmptyResourceName."""
    assert not authorizer.authorize(REQUEST_CONTEXT, READ, (GROUP, "", LITERAL))
    authorizer.add_acls({ALLOW_READ}, (GROUP, "*", LITERAL))
    assert authorizer.authorize(REQUEST_CONTEXT, READ, (GROUP, "", LITERAL))


def test_topic_acl(authorizer: Authorizer) -> None:
    """AuthorizerTest.testTopicAcl."""
    user1, user2, user3 = PRINCIPAL, "User:rob", "User:batman"
    host1, host2 = "192.168.1.1", "192.168.1.2"
    acls = {
        Ace(user1, host1, READ, ALLOW),  # user1 has READ access from host1 and host2.
        Ace(user1, host2, READ, ALLOW),
        Ace(user1, host1, READ, DENY),  # user1 does not have READ access from host1.
        Ace(user1, host1, WRITE, ALLOW),  # user1 has WRITE access from host1 only.
        Ace(user1, "*", DESCRIBE, ALLOW),  # user1 has DESCRIBE access from all hosts.
        Ace(user2, "*", READ, ALLOW),  # user2 has READ access from all hosts.
        Ace(user3, "*", WRITE, ALLOW),  # user3 has WRITE access from all hosts.
    }
    authorizer.change_acl_and_verify(set(), acls, set())
    host1_ctx, host2_ctx = ctx(user1, host1), ctx(user1, host2)
    assert authorizer.authorize(host2_ctx, READ, RESOURCE), "User1 should have READ access from host2"
    assert not authorizer.authorize(host1_ctx, READ, RESOURCE), "User1 should not have READ access from host1"
    assert authorizer.authorize(host1_ctx, WRITE, RESOURCE), "User1 should have WRITE access from host1"
    assert not authorizer.authorize(host2_ctx, WRITE, RESOURCE), "User1 should not have WRITE access from host2"
    assert authorizer.authorize(host1_ctx, DESCRIBE, RESOURCE), "User1 should have DESCRIBE access from host1"
    assert authorizer.authorize(host2_ctx, DESCRIBE, RESOURCE), "User1 should have DESCRIBE access from host2"
    assert not authorizer.authorize(host1_ctx, ALTER, RESOURCE), "User1 should not have edit access from host1"
    assert not authorizer.authorize(host2_ctx, ALTER, RESOURCE), "User1 should not have edit access from host2"
    # test if user has READ or WRITE access they also get DESCRIBE access
    user2_ctx, user3_ctx = ctx(user2, host1), ctx(user3, host1)
    assert authorizer.authorize(user2_ctx, DESCRIBE, RESOURCE), "User2 should have DESCRIBE access from host1"
    assert authorizer.authorize(user3_ctx, DESCRIBE, RESOURCE), "User3 should have DESCRIBE access from host1"
    assert authorizer.authorize(user2_ctx, READ, RESOURCE), "User2 should have READ access from host1"
    assert authorizer.authorize(user3_ctx, WRITE, RESOURCE), "User3 should have WRITE access from host1"


def test_allow_access_with_custom_principal(authorizer: Authorizer) -> None:
    """AuthorizerTest.testAllowAccessWithCustomPrincipal: principals compare by type and name."""
    host1, host2 = "192.168.1.1", "192.168.1.2"
    acls = {Ace(PRINCIPAL, host1, READ, DENY), Ace(PRINCIPAL, host2, READ, ALLOW)}
    authorizer.change_acl_and_verify(set(), acls, set())
    assert authorizer.authorize(custom_ctx(USERNAME, host2), READ, RESOURCE)
    assert not authorizer.authorize(custom_ctx(USERNAME, host1), READ, RESOURCE)


def test_deny_takes_precedence(authorizer: Authorizer) -> None:
    """AuthorizerTest.testDenyTakesPrecedence."""
    host = "192.168.2.1"
    acls = {Ace("User:*", "*", ALL, ALLOW), Ace(PRINCIPAL, host, ALL, DENY)}
    authorizer.change_acl_and_verify(set(), acls, set())
    assert not authorizer.authorize(ctx(PRINCIPAL, host), READ, RESOURCE), "deny should take precedence over allow."


def test_allow_all_access(authorizer: Authorizer) -> None:
    """AuthorizerTest.testAllowAllAccess."""
    authorizer.change_acl_and_verify(set(), {Ace("User:*", "*", ALL, ALLOW)}, set())
    assert authorizer.authorize(ctx("User:random", "192.0.4.4"), READ, RESOURCE)


def test_super_user_has_access(authorizer: Authorizer) -> None:
    """AuthorizerTest.testSuperUserHasAccess (`super.users` given with a space after the `;`)."""
    authorizer.change_acl_and_verify(set(), {Ace("User:*", "*", ALL, DENY)}, set())
    assert authorizer.authorize(ctx("User:superuser1", "192.0.4.4"), READ, RESOURCE)
    assert authorizer.authorize(ctx("User:superuser2", "192.0.4.4"), READ, RESOURCE)


def test_super_user_with_custom_principal_has_access(authorizer: Authorizer) -> None:
    """AuthorizerTest.testSuperUserWithCustomPrincipalHasAccess."""
    authorizer.change_acl_and_verify(set(), {Ace("User:*", "*", ALL, DENY)}, set())
    assert authorizer.authorize(custom_ctx("superuser1", "192.0.4.4"), READ, RESOURCE)


def test_wild_card_acls(authorizer: Authorizer) -> None:
    """AuthorizerTest.testWildCardAcls."""
    assert not authorizer.authorize(REQUEST_CONTEXT, READ, RESOURCE), "when acls = [], authorizer should fail close."
    host1 = "192.168.3.1"
    read = Ace(PRINCIPAL, host1, READ, ALLOW)
    acls = authorizer.change_acl_and_verify(set(), {read}, set(), WILDCARD_RESOURCE)
    host1_ctx = ctx(PRINCIPAL, host1)
    assert authorizer.authorize(host1_ctx, READ, RESOURCE), "User1 should have READ access from host1"
    # allow WRITE to specific topic.
    authorizer.change_acl_and_verify(set(), {Ace(PRINCIPAL, host1, WRITE, ALLOW)}, set())
    # deny WRITE to wild card topic.
    authorizer.change_acl_and_verify(acls, {Ace(PRINCIPAL, host1, WRITE, DENY)}, set(), WILDCARD_RESOURCE)
    assert not authorizer.authorize(host1_ctx, WRITE, RESOURCE), "User1 should not have WRITE access from host1"


def test_no_acl_found(authorizer: Authorizer) -> None:
    """AuthorizerTest.testNoAclFound."""
    assert not authorizer.authorize(REQUEST_CONTEXT, READ, RESOURCE), "when acls = [], authorizer should deny op."


def test_no_acl_found_override(build: Build) -> None:
    """AuthorizerTest.testNoAclFoundOverride."""
    authorizer = Authorizer(build, allow_everyone_if_no_acl_found=True)
    assert authorizer.authorize(REQUEST_CONTEXT, READ, RESOURCE)


def test_acl_config_with_whitespace(build: Build) -> None:
    """AuthorizerTest.testAclConfigWithWhitespace: every configuration value padded with spaces
    (Kafka trims them: `Boolean.parseBoolean(value.trim())`, `super.users` entries trimmed)."""
    try:
        config = AuthzConfig(
            super_users=" " + SUPER_USERS + " ",
            allow_everyone_if_no_acl_found="  true ",  # type: ignore[arg-type]
        )
    except ValidationError as exc:
        pytest.fail(f"padded configuration values are refused: {exc}")
    assert config.allow_everyone_if_no_acl_found is True
    assert config.super_user_set == {Principal("User", "superuser1"), Principal("User", "superuser2")}
    authorizer = Authorizer(build, super_users=config.super_users, allow_everyone_if_no_acl_found=True)
    assert authorizer.authorize(REQUEST_CONTEXT, READ, RESOURCE)


def test_acl_management_apis(authorizer: Authorizer) -> None:
    """AuthorizerTest.testAclManagementAPIs."""
    user1, user2 = PRINCIPAL, "User:bob"
    acl1, acl2 = Ace(user1, "host1", READ, ALLOW), Ace(user1, "host1", WRITE, ALLOW)
    acl3, acl4 = Ace(user2, "host2", READ, ALLOW), Ace(user2, "host2", WRITE, ALLOW)
    acls = authorizer.change_acl_and_verify(set(), {acl1, acl2, acl3, acl4}, set())
    # test addAcl is additive
    acl5 = Ace(user2, "*", READ, ALLOW)
    acls = authorizer.change_acl_and_verify(acls, {acl5}, set())
    # test get by principal name.
    assert authorizer.get_acls(principal=user1) == {a.on(RESOURCE) for a in (acl1, acl2)}
    assert authorizer.get_acls(principal=user2) == {a.on(RESOURCE) for a in (acl3, acl4, acl5)}

    resource_to_acls: dict[Pattern, set[Ace]] = {
        (TOPIC, "*", LITERAL): {Ace(user2, "*", READ, ALLOW)},
        (CLUSTER, "*", LITERAL): {Ace(user2, "host1", READ, ALLOW)},
        (GROUP, "*", LITERAL): acls,
        (GROUP, "test-ConsumerGroup", LITERAL): acls,
    }
    for pattern, aces in resource_to_acls.items():
        authorizer.change_acl_and_verify(set(), aces, set(), pattern)
    expected = {a.on(p) for p, aces in {**resource_to_acls, RESOURCE: acls}.items() for a in aces}
    assert authorizer.get_acls() == expected

    # test remove acl from existing acls.
    acls = authorizer.change_acl_and_verify(acls, set(), {acl1, acl5})
    # test remove all acls for resource
    authorizer.remove_acls(set(), RESOURCE)
    assert authorizer.get_aces(RESOURCE) == set()
    # test removing last acl
    acls = authorizer.change_acl_and_verify(set(), {acl1}, set())
    authorizer.change_acl_and_verify(acls, set(), acls)
    assert authorizer.get_aces(RESOURCE) == set()
    assert authorizer.get_acls() == {a.on(p) for p, aces in resource_to_acls.items() for a in aces}


def test_local_concurrent_modification_of_resource_acls(authorizer: Authorizer) -> None:
    """AuthorizerTest.testLocalConcurrentModificationOfResourceAcls: two separate adds to one
    resource keep both ACLs."""
    common: Pattern = (TOPIC, "test", LITERAL)
    acl1, acl2 = Ace(PRINCIPAL, "*", READ, ALLOW), Ace("User:bob", "*", READ, DENY)
    authorizer.add_acls({acl1}, common)
    authorizer.add_acls({acl2}, common)
    assert authorizer.get_aces(common) == {acl1, acl2}


def _implications_of_allow(authorizer: Authorizer, parent: Operation, allowed: set[Operation]) -> None:
    host_ctx = ctx(PRINCIPAL, "192.168.3.1")
    rule = Ace(PRINCIPAL, "*", parent, ALLOW)
    authorizer.add_acls({rule}, CLUSTER_RESOURCE)
    for op in ALL_OPERATIONS:
        authorized = authorizer.authorize(host_ctx, op, CLUSTER_RESOURCE)
        expected = op in allowed or op is parent
        assert authorized is expected, f"ALLOW {parent.name} {'should' if expected else 'should not'} imply {op.name}"
    authorizer.remove_acls({rule}, CLUSTER_RESOURCE)


def _implications_of_deny(authorizer: Authorizer, parent: Operation, denied: set[Operation]) -> None:
    host_ctx = ctx(PRINCIPAL, "192.168.3.1")
    rules = {Ace(PRINCIPAL, "*", parent, DENY), Ace(PRINCIPAL, "*", ALL, ALLOW)}
    authorizer.add_acls(rules, CLUSTER_RESOURCE)
    for op in ALL_OPERATIONS:
        authorized = authorizer.authorize(host_ctx, op, CLUSTER_RESOURCE)
        expected_denied = op in denied or op is parent
        assert authorized is not expected_denied, f"DENY {parent.name} and {op.name}"
    authorizer.remove_acls(rules, CLUSTER_RESOURCE)


def test_acl_inheritance(authorizer: Authorizer) -> None:
    """AuthorizerTest.testAclInheritance: the implications listed in AclOperation's javadoc, and the
    requested operation ALL is only granted by an ALLOW ALL."""
    everything = set(ALL_OPERATIONS) - {ALL}
    _implications_of_allow(authorizer, ALL, everything)
    _implications_of_deny(authorizer, ALL, everything)
    _implications_of_allow(authorizer, READ, {DESCRIBE})
    _implications_of_allow(authorizer, WRITE, {DESCRIBE})
    _implications_of_allow(authorizer, DELETE, {DESCRIBE})
    _implications_of_allow(authorizer, ALTER, {DESCRIBE})
    _implications_of_deny(authorizer, DESCRIBE, set())
    _implications_of_allow(authorizer, Operation.ALTER_CONFIGS, {Operation.DESCRIBE_CONFIGS})
    _implications_of_deny(authorizer, Operation.DESCRIBE_CONFIGS, set())
    assert authorizer.get_acls() == set()


def test_access_allowed_if_allow_acl_exists_on_wildcard_resource(authorizer: Authorizer) -> None:
    """AuthorizerTest.testAccessAllowedIfAllowAclExistsOnWildcardResource."""
    authorizer.add_acls({ALLOW_READ}, WILDCARD_RESOURCE)
    assert authorizer.authorize(REQUEST_CONTEXT, READ, RESOURCE)


def test_delete_acl_on_wildcard_resource(authorizer: Authorizer) -> None:
    """AuthorizerTest.testDeleteAclOnWildcardResource."""
    authorizer.add_acls({ALLOW_READ, ALLOW_WRITE}, WILDCARD_RESOURCE)
    authorizer.remove_acls({ALLOW_READ}, WILDCARD_RESOURCE)
    assert authorizer.get_aces(WILDCARD_RESOURCE) == {ALLOW_WRITE}


def test_delete_all_acl_on_wildcard_resource(authorizer: Authorizer) -> None:
    """AuthorizerTest.testDeleteAllAclOnWildcardResource."""
    authorizer.add_acls({ALLOW_READ}, WILDCARD_RESOURCE)
    authorizer.remove_acls(set(), WILDCARD_RESOURCE)
    assert authorizer.get_acls() == set()


def test_access_allowed_if_allow_acl_exists_on_prefixed_resource(authorizer: Authorizer) -> None:
    """AuthorizerTest.testAccessAllowedIfAllowAclExistsOnPrefixedResource."""
    authorizer.add_acls({ALLOW_READ}, PREFIXED_RESOURCE)
    assert authorizer.authorize(REQUEST_CONTEXT, READ, RESOURCE)


def test_delete_acl_on_prefixed_resource(authorizer: Authorizer) -> None:
    """AuthorizerTest.testDeleteAclOnPrefixedResource."""
    authorizer.add_acls({ALLOW_READ, ALLOW_WRITE}, PREFIXED_RESOURCE)
    authorizer.remove_acls({ALLOW_READ}, PREFIXED_RESOURCE)
    assert authorizer.get_aces(PREFIXED_RESOURCE) == {ALLOW_WRITE}


def test_delete_all_acl_on_prefixed_resource(authorizer: Authorizer) -> None:
    """AuthorizerTest.testDeleteAllAclOnPrefixedResource."""
    authorizer.add_acls({ALLOW_READ, ALLOW_WRITE}, PREFIXED_RESOURCE)
    authorizer.remove_acls(set(), PREFIXED_RESOURCE)
    assert authorizer.get_acls() == set()


@pytest.mark.parametrize(
    ("target", "others"),
    [
        (RESOURCE, (WILDCARD_RESOURCE, PREFIXED_RESOURCE)),
        (WILDCARD_RESOURCE, (RESOURCE, PREFIXED_RESOURCE)),
        (PREFIXED_RESOURCE, (WILDCARD_RESOURCE, RESOURCE)),
    ],
    ids=["testAddAclsOnLiteralResource", "testAddAclsOnWildcardResource", "testAddAclsOnPrefixedResource"],
)
def test_add_acls_on_resource(authorizer: Authorizer, target: Pattern, others: tuple[Pattern, Pattern]) -> None:
    """AuthorizerTest.testAddAclsOnLiteralResource / ...OnWildcardResource / ...OnPrefixedResource:
    adds are unions, and listing by an exact pattern does not pick up the other pattern types."""
    authorizer.add_acls({ALLOW_READ, ALLOW_WRITE}, target)
    authorizer.add_acls({ALLOW_WRITE, DENY_READ}, target)
    assert authorizer.get_aces(target) == {ALLOW_READ, ALLOW_WRITE, DENY_READ}
    for other in others:
        assert authorizer.get_aces(other) == set()


def test_authorize_with_prefixed_resource(authorizer: Authorizer) -> None:
    """AuthorizerTest.testAuthorizeWithPrefixedResource: many unrelated DENY prefixes around the
    resource name do not hide the PREFIXED allow `foo` (the UUIDs of Kafka's test fixed here)."""
    for pattern in [
        (TOPIC, "a_other", LITERAL),
        (TOPIC, "a_other", PREFIXED),
        (TOPIC, "foo-1d8a6c0e-7c63-4f5e-a1b2-0c9d8e7f6a5b", PREFIXED),
        (TOPIC, "foo-4a3b2c1d-0e9f-4a8b-9c7d-6e5f4a3b2c1d", PREFIXED),
        (TOPIC, "foo-7e6d5c4b-3a29-4817-a6b5-c4d3e2f1a0b9-zzz", PREFIXED),
        (TOPIC, "fooo-2b3c4d5e-6f70-4182-93a4-b5c6d7e8f901", PREFIXED),
        (TOPIC, "fo-3c4d5e6f-7081-4293-a4b5-c6d7e8f90a1b", PREFIXED),
        (TOPIC, "fop-4d5e6f70-8192-43a4-b5c6-d7e8f90a1b2c", PREFIXED),
        (TOPIC, "fon-5e6f7081-92a3-44b5-c6d7-e8f90a1b2c3d", PREFIXED),
        (TOPIC, "fon-", PREFIXED),
        (TOPIC, "z_other", PREFIXED),
        (TOPIC, "z_other", LITERAL),
    ]:
        authorizer.add_acls({DENY_READ}, pattern)
    authorizer.add_acls({ALLOW_READ}, PREFIXED_RESOURCE)
    assert authorizer.authorize(REQUEST_CONTEXT, READ, RESOURCE)


def test_single_character_resource_acls(authorizer: Authorizer) -> None:
    """AuthorizerTest.testSingleCharacterResourceAcls."""
    authorizer.add_acls({ALLOW_READ}, (TOPIC, "f", LITERAL))
    assert authorizer.authorize(REQUEST_CONTEXT, READ, (TOPIC, "f", LITERAL))
    assert not authorizer.authorize(REQUEST_CONTEXT, READ, (TOPIC, "foo", LITERAL))
    authorizer.add_acls({ALLOW_READ}, (TOPIC, "_", PREFIXED))
    assert authorizer.authorize(REQUEST_CONTEXT, READ, (TOPIC, "_foo", LITERAL))
    assert authorizer.authorize(REQUEST_CONTEXT, READ, (TOPIC, "_", LITERAL))
    assert not authorizer.authorize(REQUEST_CONTEXT, READ, (TOPIC, "foo_", LITERAL))


# --------------------------------------------------------------------------- authorizeByResourceType


def test_authorize_by_resource_type_no_acl_found_override(build: Build) -> None:
    """AuthorizerTest.testAuthorizeByResourceTypeNoAclFoundOverride."""
    authorizer = Authorizer(build, allow_everyone_if_no_acl_found=True)
    assert authorizer.authorize_by_resource_type(REQUEST_CONTEXT, READ, TOPIC)
    assert authorizer.authorize_by_resource_type(REQUEST_CONTEXT, WRITE, TOPIC)


@pytest.mark.parametrize("allow_everyone", [False, True])
def test_authorize_by_resource_type_no_acls(build: Build, allow_everyone: bool) -> None:
    """SecurityUtils.authorizeByResourceTypeCheckArgs (the filter values ANY/UNKNOWN are refused with
    Kafka's messages) and, without ACLs, the default result for every type and operation."""
    authorizer = Authorizer(build, allow_everyone_if_no_acl_found=allow_everyone)
    messages = {
        (None, ResourceType.ANY): "Must specify a non-filter resource type for authorizeByResourceType",
        (None, ResourceType.UNKNOWN): "Unknown resource type",
        (Operation.ANY, None): "Must specify a non-filter operation type for authorizeByResourceType",
        (Operation.UNKNOWN, None): "Unknown operation type",
    }
    for op in Operation:
        for rt in ResourceType:
            message = messages.get((None, rt)) or messages.get((op, None))
            if message:
                with pytest.raises(ValueError) as err:
                    authorizer.authorize_by_resource_type(REQUEST_CONTEXT, op, rt)
                assert str(err.value) == message
            else:
                assert rt in CONCRETE_TYPES and op in ALL_OPERATIONS
                assert authorizer.authorize_by_resource_type(REQUEST_CONTEXT, op, rt) is allow_everyone, (op, rt)


def test_authorize_by_resource_type_multiple_add_and_remove(authorizer: Authorizer) -> None:
    """BaseAuthorizerTest.testAuthorizeByResourceTypeMultipleAddAndRemove."""
    user1, host1 = "User:user1", "192.168.1.1"
    resource1: Pattern = (TOPIC, "sb1-6f1e2d3c", LITERAL)
    deny_read, allow_read = Ace(user1, host1, READ, DENY), Ace(user1, host1, READ, ALLOW)
    u1h1 = ctx(user1, host1)
    for _ in range(10):
        assert not authorizer.authorize_by_resource_type(u1h1, READ, TOPIC)
        authorizer.add_acls({allow_read}, resource1)
        assert authorizer.authorize_by_resource_type(u1h1, READ, TOPIC)
        for _ in range(10):
            authorizer.add_acls({deny_read}, resource1)
            assert not authorizer.authorize_by_resource_type(u1h1, READ, TOPIC)
            authorizer.remove_acls({deny_read}, resource1)
            authorizer.add_acls({allow_read}, resource1)
            assert authorizer.authorize_by_resource_type(u1h1, READ, TOPIC)
        authorizer.remove_acls({allow_read}, resource1)
        assert not authorizer.authorize_by_resource_type(u1h1, READ, TOPIC)


def test_authorize_by_resource_type_isolation_unrelated_deny_wont_dominate_allow(authorizer: Authorizer) -> None:
    """BaseAuthorizerTest.testAuthorizeByResourceTypeIsolationUnrelatedDenyWontDominateAllow."""
    user1, user2, host1, host2 = "User:user1", "User:user2", "192.168.1.1", "192.168.1.2"
    resource1: Pattern = (TOPIC, "sb1-0a1b2c3d", LITERAL)
    resource2: Pattern = (TOPIC, "sb2-4e5f6a7b", LITERAL)
    resource3: Pattern = (GROUP, "s", PREFIXED)
    authorizer.add_acls({
        Ace(user1, host1, READ, DENY),
        Ace(user2, host1, READ, DENY),
        Ace(user1, host2, WRITE, DENY),
        Ace(user2, host2, READ, DENY),
        Ace(user1, host2, READ, ALLOW),
    }, resource1)
    authorizer.add_acls({Ace(user1, host2, READ, DENY)}, resource2)
    authorizer.add_acls({Ace(user1, host2, READ, DENY)}, resource3)
    u1h1, u1h2 = ctx(user1, host1), ctx(user1, host2)
    assert not authorizer.authorize_by_resource_type(u1h1, READ, TOPIC)
    assert not authorizer.authorize_by_resource_type(u1h1, READ, GROUP)
    assert not authorizer.authorize_by_resource_type(u1h1, READ, TRANSACTIONAL_ID)
    assert not authorizer.authorize_by_resource_type(u1h1, READ, CLUSTER)
    assert authorizer.authorize_by_resource_type(u1h2, READ, TOPIC)


def test_authorize_by_resource_type_deny_takes_precedence(authorizer: Authorizer) -> None:
    """BaseAuthorizerTest.testAuthorizeByResourceTypeDenyTakesPrecedence."""
    user1, host1 = "User:user1", "192.168.1.1"
    resource1: Pattern = (TOPIC, "sb1-8c9d0e1f", LITERAL)
    u1h1 = ctx(user1, host1)
    authorizer.add_acls({Ace(user1, host1, WRITE, ALLOW)}, resource1)
    assert authorizer.authorize_by_resource_type(u1h1, WRITE, TOPIC)
    authorizer.add_acls({Ace(user1, host1, WRITE, DENY)}, resource1)
    assert not authorizer.authorize_by_resource_type(u1h1, WRITE, TOPIC)


def test_authorize_by_resource_type_prefixed_resource_deny_dominate(authorizer: Authorizer) -> None:
    """BaseAuthorizerTest.testAuthorizeByResourceTypePrefixedResourceDenyDominate."""
    user1, host1 = "User:user1", "192.168.1.1"
    u1h1 = ctx(user1, host1)
    allow, deny = Ace(user1, host1, READ, ALLOW), Ace(user1, host1, READ, DENY)
    authorizer.add_acls({allow}, (GROUP, "abcde", PREFIXED))
    assert authorizer.authorize_by_resource_type(u1h1, READ, GROUP)
    authorizer.add_acls({deny}, (GROUP, "abcd", PREFIXED))
    assert not authorizer.authorize_by_resource_type(u1h1, READ, GROUP)
    authorizer.add_acls({allow}, (GROUP, "abc", PREFIXED))
    assert authorizer.authorize_by_resource_type(u1h1, READ, GROUP)
    authorizer.add_acls({deny}, (GROUP, "a", PREFIXED))
    assert not authorizer.authorize_by_resource_type(u1h1, READ, GROUP)
    authorizer.add_acls({allow}, (GROUP, "ab", PREFIXED))
    assert not authorizer.authorize_by_resource_type(u1h1, READ, GROUP)


def test_authorize_by_resource_type_wildcard_resource_deny_dominate(authorizer: Authorizer) -> None:
    """BaseAuthorizerTest.testAuthorizeByResourceTypeWildcardResourceDenyDominate."""
    user1, host1 = "User:user1", "192.168.1.1"
    u1h1 = ctx(user1, host1)
    allow, deny = Ace(user1, host1, WRITE, ALLOW), Ace(user1, host1, WRITE, DENY)
    authorizer.add_acls({allow}, (GROUP, "hello", PREFIXED))
    assert authorizer.authorize_by_resource_type(u1h1, WRITE, GROUP)
    authorizer.add_acls({deny}, (GROUP, "*", LITERAL))
    assert not authorizer.authorize_by_resource_type(u1h1, WRITE, GROUP)
    authorizer.add_acls({allow}, (GROUP, "*", LITERAL))
    assert not authorizer.authorize_by_resource_type(u1h1, WRITE, GROUP)
    authorizer.add_acls({allow}, (GROUP, "aloha", LITERAL))
    assert not authorizer.authorize_by_resource_type(u1h1, WRITE, GROUP)


def test_authorize_by_resource_type_with_all_operation_ace(authorizer: Authorizer) -> None:
    """BaseAuthorizerTest.testAuthorizeByResourceTypeWithAllOperationAce."""
    user1, host1 = "User:user1", "192.168.1.1"
    resource1: Pattern = (TOPIC, "sb1-2a3b4c5d", LITERAL)
    u1h1 = ctx(user1, host1)
    assert not authorizer.authorize_by_resource_type(u1h1, READ, TOPIC)
    authorizer.add_acls({Ace(user1, host1, WRITE, DENY), Ace(user1, host1, ALL, ALLOW)}, resource1)
    assert authorizer.authorize_by_resource_type(u1h1, READ, TOPIC)
    authorizer.add_acls({Ace(user1, host1, ALL, DENY)}, resource1)
    assert not authorizer.authorize_by_resource_type(u1h1, READ, TOPIC)


def test_authorize_by_resource_type_with_all_host_ace(authorizer: Authorizer) -> None:
    """BaseAuthorizerTest.testAuthorizeByResourceTypeWithAllHostAce."""
    user1, host1, host2 = "User:user1", "192.168.1.1", "192.168.1.2"
    resource1: Pattern = (TOPIC, "sb1-6e7f8a9b", LITERAL)
    resource2: Pattern = (TOPIC, "sb2-0c1d2e3f", LITERAL)
    allow_host1, deny_host1 = Ace(user1, host1, READ, ALLOW), Ace(user1, host1, READ, DENY)
    deny_all_host, allow_all_host = Ace(user1, "*", READ, DENY), Ace(user1, "*", READ, ALLOW)
    u1h1, u1h2 = ctx(user1, host1), ctx(user1, host2)
    assert not authorizer.authorize_by_resource_type(u1h1, READ, TOPIC)
    authorizer.add_acls({allow_host1}, resource1)
    assert authorizer.authorize_by_resource_type(u1h1, READ, TOPIC)
    authorizer.add_acls({deny_all_host}, resource1)
    assert not authorizer.authorize_by_resource_type(u1h1, READ, TOPIC)
    authorizer.add_acls({deny_host1}, resource2)
    assert not authorizer.authorize_by_resource_type(u1h1, READ, TOPIC)
    assert not authorizer.authorize_by_resource_type(u1h2, READ, TOPIC)
    authorizer.add_acls({allow_all_host}, resource2)
    assert authorizer.authorize_by_resource_type(u1h2, READ, TOPIC)
    authorizer.add_acls({deny_all_host}, resource2)
    assert not authorizer.authorize_by_resource_type(u1h2, READ, TOPIC)


def test_authorize_by_resource_type_with_all_principal_ace(authorizer: Authorizer) -> None:
    """BaseAuthorizerTest.testAuthorizeByResourceTypeWithAllPrincipalAce."""
    user1, user2, host1 = "User:user1", "User:user2", "192.168.1.1"
    resource1: Pattern = (TOPIC, "sb1-4a5b6c7d", LITERAL)
    resource2: Pattern = (TOPIC, "sb2-8e9f0a1b", LITERAL)
    allow_user1, deny_user1 = Ace(user1, host1, READ, ALLOW), Ace(user1, host1, READ, DENY)
    deny_all_user, allow_all_user = Ace("User:*", host1, READ, DENY), Ace("User:*", host1, READ, ALLOW)
    u1h1, u2h1 = ctx(user1, host1), ctx(user2, host1)
    assert not authorizer.authorize_by_resource_type(u1h1, READ, TOPIC)
    authorizer.add_acls({allow_user1}, resource1)
    assert authorizer.authorize_by_resource_type(u1h1, READ, TOPIC)
    authorizer.add_acls({deny_all_user}, resource1)
    assert not authorizer.authorize_by_resource_type(u1h1, READ, TOPIC)
    authorizer.add_acls({deny_user1}, resource2)
    assert not authorizer.authorize_by_resource_type(u1h1, READ, TOPIC)
    assert not authorizer.authorize_by_resource_type(u2h1, READ, TOPIC)
    authorizer.add_acls({allow_all_user}, resource2)
    assert authorizer.authorize_by_resource_type(u2h1, READ, TOPIC)
    authorizer.add_acls({deny_all_user}, resource2)
    assert not authorizer.authorize_by_resource_type(u2h1, READ, TOPIC)


def test_authorize_by_resource_type_super_user_has_access(authorizer: Authorizer) -> None:
    """BaseAuthorizerTest.testAuthorzeByResourceTypeSuperUserHasAccess (sic)."""
    deny_all = Ace("User:*", "*", ALL, DENY)
    for rt in (TOPIC, CLUSTER, GROUP, TRANSACTIONAL_ID):
        authorizer.add_acls({deny_all}, (rt, "*", LITERAL))
    super_user = ctx("User:superuser1", "192.0.4.4")
    for rt in (TOPIC, CLUSTER, GROUP, TRANSACTIONAL_ID):
        assert authorizer.authorize_by_resource_type(super_user, READ, rt), "superuser always has access"


def test_authorize_by_resource_type_enable_allow_every_one(build: Build) -> None:
    """AuthorizerWrapperTest.testAuthorizeByResourceTypeEnableAllowEveryOne (the same outcome under
    the Authorizer interface default that StandardAuthorizer uses)."""
    authorizer = Authorizer(build, allow_everyone_if_no_acl_found=True)
    assert authorizer.authorize_by_resource_type(REQUEST_CONTEXT, READ, TOPIC)
    deny_all = Ace("User:*", "*", ALL, DENY)
    authorizer.add_acls({deny_all}, RESOURCE)
    assert authorizer.authorize_by_resource_type(REQUEST_CONTEXT, READ, TOPIC), (
        "Should still allow since the deny only apply on the specific resource"
    )
    authorizer.add_acls({deny_all}, WILDCARD_RESOURCE)
    assert not authorizer.authorize_by_resource_type(REQUEST_CONTEXT, READ, TOPIC), (
        "a binding that denies all users and hosts wins even with allow.everyone.if.no.acl.found = true"
    )


def test_authorize_by_resource_type_disable_allow_everyone_override(authorizer: Authorizer) -> None:
    """AuthorizerWrapperTest.testAuthorizeByResourceTypeDisableAllowEveryoneOverride."""
    assert not authorizer.authorize_by_resource_type(REQUEST_CONTEXT, READ, TOPIC)


def test_authorize_by_resource_type_does_not_imply_describe(authorizer: Authorizer) -> None:
    """Authorizer.authorizeByResourceType compares the ACL's own operation (`op` or ALL): an ALLOW
    READ on a literal topic does not answer DESCRIBE, but an explicit DESCRIBE ALLOW does, even when
    the same principal also holds READ there (shared/reference/authz-sasl.md section 1.9)."""
    user1, host1 = "User:user1", "192.168.1.1"
    u1h1 = ctx(user1, host1)
    authorizer.add_acls({Ace(user1, host1, READ, ALLOW)}, (TOPIC, "orders", LITERAL))
    assert authorizer.authorize_by_resource_type(u1h1, READ, TOPIC)
    assert not authorizer.authorize_by_resource_type(u1h1, DESCRIBE, TOPIC)
    authorizer.add_acls({Ace(user1, host1, DESCRIBE, ALLOW)}, (TOPIC, "orders", LITERAL))
    assert authorizer.authorize_by_resource_type(u1h1, DESCRIBE, TOPIC)
