"""Corners of Kafka's authorizer found by reading its source, and where kgov deliberately differs.

Sources: metadata/.../authorizer/StandardAuthorizerData.java (findAclRule, checkSection),
clients/.../server/authorizer/Authorizer.java (authorizeByResourceType default),
metadata/.../controller/AclControlManager.java (validateNewAcl). docs/authorizer.md explains each.
"""

from __future__ import annotations

import tempfile

import pytest

from authz.config import AuthzConfig
from authz.database import open_engine
from authz.decide import AuthorizerData, validate_new_acl
from authz.model import (
    Acl,
    AclFilter,
    DefaultDeny,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    Principal,
    RequestContext,
    ResourceType,
    SuperUser,
)
from authz.roles import RoleBinding, validate_role_binding
from authz.service import AuthorizerService
from tests.unit.authz.reference_model import acl, action, ctx

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
READ, WRITE = Operation.READ, Operation.WRITE
ALLOW, DENY = Permission.ALLOW, Permission.DENY


# --------------------------------------------------------------------------- CreateAcls validation


@pytest.mark.parametrize("created", [
    acl(TOPIC, "t", LITERAL, ":alice", "*", READ, ALLOW),  # empty principal type: Kafka needs only the colon
    acl(TOPIC, "t", LITERAL, "User:alice", "", READ, ALLOW),  # empty host: Kafka stores it
])
def test_kafka_accepts_what_only_looks_odd(created: Acl) -> None:
    """AclControlManager.validateNewAcl checks `principal.indexOf(":") == -1` and nothing about the
    host, so an export of a Kafka cluster's ACLs can hold these; kgov must take them back."""
    validate_new_acl(created)
    with tempfile.TemporaryDirectory() as tmp:
        engine = open_engine(f"sqlite:///{tmp}/kgov.db")
        service = AuthorizerService(engine, AuthzConfig())
        try:
            service.start(background=False)
            assert service.create_acls([created], actor=Principal("User", "admin")) == [None]
            assert service.describe_acls(AclFilter()) == [created]
            (decision,) = service.authorize(ctx("User:alice", "10.0.0.1"), [action(READ, TOPIC, "t")])
            assert not decision.allowed and isinstance(decision.rule, DefaultDeny)
        finally:
            service.close()
            engine.dispose()


def test_a_principal_without_colon_is_still_refused_with_kafkas_words() -> None:
    with pytest.raises(InvalidAclError, match="no colon is present separating the principal type"):
        validate_new_acl(acl(TOPIC, "t", LITERAL, "alice", "*", READ, ALLOW))


@pytest.mark.parametrize("text", ["a\ud800", "\udfffb", "x\ud83d"])
def test_a_lone_surrogate_is_refused_like_nul(text: str) -> None:
    """Half of a UTF-16 surrogate pair can reach kgov through a JSON escape but not Kafka (its
    strings arrive as UTF-8), and neither SQLite nor PostgreSQL can store it as text."""
    for bad in (acl(TOPIC, text, LITERAL, "User:alice", "*", READ, ALLOW),
                acl(TOPIC, "t", LITERAL, "User:" + text, "*", READ, ALLOW),
                acl(TOPIC, "t", LITERAL, "User:alice", text, READ, ALLOW)):
        with pytest.raises(InvalidAclError, match="must not contain a lone surrogate"):
            validate_new_acl(bad)
    with pytest.raises(InvalidAclError, match="must not contain a lone surrogate"):
        validate_role_binding(RoleBinding("User:alice", "DeveloperRead", TOPIC, text, LITERAL))
    with pytest.raises(InvalidAclError, match="must not contain a lone surrogate"):
        Principal.parse_given("User:" + text)
    validate_new_acl(acl(TOPIC, "\U0001f600", LITERAL, "User:\U0001f600", "*", READ, ALLOW))  # a whole pair is fine


# --------------------------------------------------------------------------- authorizeByResourceType


def test_by_resource_type_ignores_an_empty_prefix_deny() -> None:
    """Authorizer.authorizeByResourceType grows each allowed name one character at a time and looks
    the growing string up among the PREFIXED denies, so a PREFIXED "" deny never dominates (names
    are never empty through CreateAcls; this guards snapshots built from other sources)."""
    data = AuthorizerData.build([
        acl(TOPIC, "", PREFIXED, "User:bob", "*", WRITE, DENY),
        acl(TOPIC, "orders", LITERAL, "User:bob", "*", WRITE, ALLOW),
    ])
    assert data.authorize_by_resource_type(ctx("User:bob"), WRITE, TOPIC).allowed
    # authorize itself does apply the "" prefix to every name, as checkSection does.
    (decision,) = data.authorize(ctx("User:bob"), [action(WRITE, TOPIC, "orders")])
    assert not decision.allowed


# --------------------------------------------------------------------------- the `*` wildcard


@pytest.mark.parametrize("name", ["*group", "*", "**", "plain"])
def test_wildcard_acl_applies_to_every_name_including_those_starting_with_a_star(name: str) -> None:
    """Deliberate difference. StandardAuthorizerData.checkSection skips a LITERAL ACL whose name is
    a proper prefix of the resource name before it tests for the wildcard, so the LITERAL `*` ACLs
    are never applied to a resource named `*group` (a legal group, transactional id or user name).
    Kafka's documentation ("`*` can be used to represent a resource with any name") and the
    ZooKeeper AclAuthorizer apply them; so does kgov, so that a DENY on `*` is never bypassed."""
    data = AuthorizerData.build([
        acl(GROUP, "*", PREFIXED, "User:*", "*", READ, ALLOW),
        acl(GROUP, "*", LITERAL, "User:bob", "*", READ, DENY),
        acl(GROUP, "plain", LITERAL, "User:*", "*", READ, ALLOW),
    ])
    (decision,) = data.authorize(ctx("User:bob"), [action(READ, GROUP, name)])
    assert not decision.allowed


# --------------------------------------------------------------------------- which rule is reported

DESCRIBE, ALL = Operation.DESCRIBE, Operation.ALL


@pytest.mark.parametrize(("acls", "principal", "operation", "name", "reported"), [
    # Inside a pattern Kafka scans by operation first: READ(3) before DESCRIBE(8); the last ALLOW wins.
    ([acl(TOPIC, "t", LITERAL, "User:bob", "*", READ, ALLOW), acl(TOPIC, "t", LITERAL, "User:bob", "*", DESCRIBE, ALLOW)],
     "User:bob", DESCRIBE, "t", 1),
    # Across patterns: the exact LITERAL first, then the prefixes; the last ALLOW met is the prefix.
    ([acl(TOPIC, "orders", LITERAL, "User:bob", "*", READ, ALLOW), acl(TOPIC, "ord", PREFIXED, "User:bob", "*", READ, ALLOW)],
     "User:bob", READ, "orders", 1),
    # The first DENY met: ALL(2) sorts before READ(3) ...
    ([acl(TOPIC, "t", LITERAL, "User:bob", "*", READ, DENY), acl(TOPIC, "t", LITERAL, "User:bob", "*", ALL, DENY)],
     "User:bob", READ, "t", 1),
    # ... and, for one operation, principal `User:*` sorts before `User:bob` ('*' < 'b').
    ([acl(TOPIC, "t", LITERAL, "User:bob", "*", READ, DENY), acl(TOPIC, "t", LITERAL, "User:*", "*", READ, DENY)],
     "User:bob", READ, "t", 1),
    # A host-specific DENY sorts after `*` for the same principal ('*' < '1').
    ([acl(TOPIC, "t", LITERAL, "User:bob", "127.0.0.1", READ, DENY), acl(TOPIC, "t", LITERAL, "User:bob", "*", READ, DENY)],
     "User:bob", READ, "t", 1),
])
def test_reported_rule_is_the_one_kafka_names(
    acls: list[Acl], principal: str, operation: Operation, name: str, reported: int
) -> None:
    """StandardAuthorizerData.checkSection returns at the first matching DENY and overwrites
    `allowAcl` at every matching ALLOW; the audit line names that ACL (`based on rule MatchingAcl(...)`)."""
    (decision,) = AuthorizerData.build(acls).authorize(ctx(principal), [action(operation, TOPIC, name)])
    assert str(decision.rule) == f"MatchingAcl(acl={acls[reported]})"


# --------------------------------------------------------------------------- kgov extensions and User:*


def test_user_wildcard_holds_role_bindings_but_is_no_group_member() -> None:
    """docs/authorizer.md: a role bound to `User:*` is everyone's; `User:*` listed in a group is not."""
    data = AuthorizerData.build(
        [acl(TOPIC, "t", LITERAL, "Group:all", "*", READ, ALLOW)],
        groups={Principal("User", "*"): frozenset({Principal("Group", "all")})},
        role_bindings=[RoleBinding("User:*", "DeveloperRead", TOPIC, "r", LITERAL)],
    )
    carol = ctx("User:carol")
    assert data.authorize(carol, [action(READ, TOPIC, "r")])[0].allowed
    assert not data.authorize(carol, [action(READ, TOPIC, "t")])[0].allowed


# --------------------------------------------------------------------------- settings


@pytest.mark.parametrize(("text", "expected"), [
    ("true", True), (" TRUE ", True), ("True", True),
    ("false", False), ("yes", False), ("on", False), ("1", False), ("", False),
])
def test_allow_everyone_is_read_as_kafkas_parse_boolean(text: str, expected: bool) -> None:
    """`allow.everyone.if.no.acl.found` is `Boolean.parseBoolean(value.trim())`: only "true"."""
    assert AuthzConfig(allow_everyone_if_no_acl_found=text).allow_everyone_if_no_acl_found is expected  # type: ignore[arg-type]


# --------------------------------------------------------------------------- principals


def test_a_principal_type_with_a_colon_is_matched_as_kafka_parses_it() -> None:
    """Kafka keeps `super.users` as strings and compares `principal.toString()` with them
    (StandardAuthorizerData.authorize), but parses an ACL's principal at its FIRST colon
    (StandardAcl.kafkaPrincipal, SecurityUtils.parseKafkaPrincipal) and compares type and name. So
    for a caller of type `User:a` and name `b` (a custom principal builder; the OPA decision API
    passes the broker's type on as it is), `User:a:b` in super.users makes it a super user, while
    an ACL or role binding naming `User:a:b` is about type `User`, name `a:b`, and not about it."""
    caller = RequestContext(Principal("User:a", "b"), "10.0.0.1")
    acls = [acl(TOPIC, "t", LITERAL, "User:a:b", "*", READ, ALLOW)]
    data = AuthorizerData.build(acls, role_bindings=[RoleBinding("User:a:b", "DeveloperRead", TOPIC, "r", LITERAL)])
    for name in ("t", "r"):
        (decision,) = data.authorize(caller, [action(READ, TOPIC, name)])
        assert not decision.allowed and isinstance(decision.rule, DefaultDeny), name
    assert not data.authorize_by_resource_type(caller, READ, TOPIC).allowed
    # The ACL is about the principal of type `User` and name `a:b`.
    (decision,) = data.authorize(RequestContext(Principal("User", "a:b"), "10.0.0.1"), [action(READ, TOPIC, "t")])
    assert decision.allowed

    supers = AuthorizerData.build(acls, super_users=[Principal.parse("User:a:b")])
    (decision,) = supers.authorize(caller, [action(READ, TOPIC, "elsewhere")])
    assert decision.allowed and isinstance(decision.rule, SuperUser)
    assert supers.authorize_by_resource_type(caller, WRITE, GROUP).allowed
    # Before the first load only super users are answered, with the same comparison.
    with tempfile.TemporaryDirectory() as tmp:
        engine = open_engine(f"sqlite:///{tmp}/kgov.db")
        service = AuthorizerService(engine, AuthzConfig(super_users="User:a:b"))
        try:
            (decision,) = service.authorize(caller, [action(READ, TOPIC, "t")])
            assert decision.allowed and isinstance(decision.rule, SuperUser)
        finally:
            service.close()
            engine.dispose()
