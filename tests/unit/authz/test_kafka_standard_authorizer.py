"""Kafka's KRaft authorizer tests, transcribed for kgov's `authz.decide.AuthorizerData`.

Source: metadata `src/test/java/org/apache/kafka/metadata/authorizer/StandardAuthorizerTest.java`
(apache/kafka trunk) and, for creation validation, `controller/AclControlManagerTest.java`.
Kafka's `StandardAuthorizer` configured with `super.users=User:superman` and loaded with ACLs maps
to `AuthorizerData.build(acls, super_users=...)`; `addAcl`/`removeAcl` map to `with_acls`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from audit.kafka_format import authorizer_log_level, authorizer_log_line
from authz.config import AuthzConfig, parse_super_users
from authz.database import open_engine
from authz.decide import AuthorizerData, validate_new_acl
from authz.model import (
    DEFAULT_DENY_RULE,
    SUPER_USER_RULE,
    Acl,
    AclFilter,
    Action,
    AuthorizationResult,
    AuthorizerNotReadyError,
    Decision,
    InvalidAclError,
    MatchingAcl,
    Operation,
    PatternType,
    Permission,
    Principal,
    RequestContext,
    ResourceType,
)
from authz.service import AuthorizerService
from tests.unit.authz.reference_model import ReferenceAuthorizer, acl, action, ctx

ALLOWED, DENIED = AuthorizationResult.ALLOWED, AuthorizationResult.DENIED
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALL, READ, WRITE, CREATE, DELETE, ALTER = (
    Operation.ALL, Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE, Operation.ALTER,
)
DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS = Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS
ALLOW, DENY = Permission.ALLOW, Permission.DENY
SUPERMAN = [Principal("User", "superman")]


Build = Callable[..., AuthorizerData | ReferenceAuthorizer]
BACKENDS: dict[str, Build] = {"kgov": AuthorizerData.build, "reference": ReferenceAuthorizer.build}


@pytest.fixture(params=sorted(BACKENDS))
def build(request: pytest.FixtureRequest) -> Build:
    """Each decision scenario runs against kgov and against the naive reference model."""
    return BACKENDS[request.param]


def authorizer(build: Build, acls: list[Acl] = (), **kwargs: object) -> AuthorizerData | ReferenceAuthorizer:  # type: ignore[assignment]
    """createAndInitializeStandardAuthorizer() followed by addAcl for each ACL."""
    kwargs.setdefault("super_users", SUPERMAN)
    return build(acls, **kwargs)


def results(data: AuthorizerData | ReferenceAuthorizer, context: RequestContext, actions: list[Action]) -> list[AuthorizationResult]:
    decisions = data.authorize(context, actions)
    assert len(decisions) == len(actions)
    return [d.result for d in decisions]


def new_foo_acl(op: Operation, permission: Permission) -> Acl:
    return acl(TOPIC, "foo_", PREFIXED, "User:bob", "*", op, permission)


def new_bar_acl(op: Operation, permission: Permission) -> Acl:
    return acl(GROUP, "bar", LITERAL, "User:*", "*", op, permission)


# --------------------------------------------------------------------------- configuration


def test_get_configured_super_users() -> None:
    """StandardAuthorizerTest.testGetConfiguredSuperUsers: `super.users` is split on `;`, trimmed,
    empty entries dropped, and every entry must be `type:name`."""
    assert parse_super_users("") == frozenset()
    assert parse_super_users(" ") == frozenset()
    bob_alice = frozenset({Principal("User", "bob"), Principal("User", "alice")})
    assert parse_super_users("User:bob;User:alice ") == bob_alice
    assert parse_super_users(";  User:bob  ;  User:alice ") == bob_alice
    with pytest.raises(InvalidAclError) as err:
        parse_super_users("bob;:alice")
    assert str(err.value) == "expected a string in format principalType:principalName but got bob"
    with pytest.raises(ValidationError, match="expected a string in format principalType:principalName but got bob"):
        AuthzConfig(super_users="bob;:alice")


def test_get_default_result(build: Build) -> None:
    """StandardAuthorizerTest.testGetDefaultResult: `allow.everyone.if.no.acl.found` defaults to
    false (DENIED); "true" gives ALLOWED, "false" DENIED."""
    assert AuthzConfig().allow_everyone_if_no_acl_found is False
    assert AuthzConfig(allow_everyone_if_no_acl_found="true").allow_everyone_if_no_acl_found is True  # type: ignore[arg-type]
    assert AuthzConfig(allow_everyone_if_no_acl_found="false").allow_everyone_if_no_acl_found is False  # type: ignore[arg-type]
    nothing = [action(READ, TOPIC, "foo")]
    assert results(authorizer(build), ctx("User:bob"), nothing) == [DENIED]
    assert results(authorizer(build, allow_everyone_if_no_acl_found=True), ctx("User:bob"), nothing) == [ALLOWED]


def test_configure(build: Build) -> None:
    """StandardAuthorizerTest.testConfigure."""
    config = AuthzConfig(super_users="User:alice;User:chris", allow_everyone_if_no_acl_found="true")  # type: ignore[arg-type]
    assert config.super_user_set == {Principal("User", "alice"), Principal("User", "chris")}
    assert config.allow_everyone_if_no_acl_found is True
    data = build(
        super_users=config.super_user_set, allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found
    )
    assert data.authorize(ctx("User:chris"), [action(ALTER, CLUSTER, "kafka-cluster")]) == [
        Decision(ALLOWED, SUPER_USER_RULE)
    ]


@pytest.mark.parametrize("enabled", [True, False])
def test_allow_everyone_if_no_acl_found_config(build: Build, enabled: bool) -> None:
    """StandardAuthorizerTest.testAllowEveryoneIfNoAclFoundConfigEnabled / ...Disabled (KAFKA-14435):
    the default applies only to a resource that no ACL of any principal matches."""
    data = build(
        [acl(TOPIC, "topic1", LITERAL, "User:Alice", "*", READ, ALLOW)],
        super_users=[Principal("User", "alice"), Principal("User", "chris")],
        allow_everyone_if_no_acl_found=enabled,
    )
    assert results(data, ctx("User:Bob"), [action(READ, TOPIC, "topic1")]) == [DENIED]
    assert results(data, ctx("User:Bob"), [action(READ, TOPIC, "topic2")]) == [ALLOWED if enabled else DENIED]


# --------------------------------------------------------------------------- findResult


def _single(build: Build, acl_: Acl, context: RequestContext, act: Action) -> Decision:
    """findResult(action, context, acl) on a snapshot holding only that ACL: Kafka's `null` (the ACL
    does not apply) is DENIED by the DefaultDeny rule, because the resource does have an ACL."""
    (decision,) = build([acl_]).authorize(context, [act])
    return decision


@pytest.mark.parametrize("op", [DESCRIBE, READ, WRITE, DELETE, ALTER])
def test_find_result_implication_allow_describe(build: Build, op: Operation) -> None:
    """StandardAuthorizerTest.testFindResultImplication: these ALLOWs all imply DESCRIBE."""
    rule = new_foo_acl(op, ALLOW)
    assert _single(build, rule, ctx("User:bob"), action(DESCRIBE, TOPIC, "foo_bar")) == Decision(ALLOWED, MatchingAcl(rule))


def test_find_result_implication(build: Build) -> None:
    """StandardAuthorizerTest.testFindResultImplication: CREATE does not imply DESCRIBE; DENY ACLs
    do no implication; ALTER_CONFIGS implies DESCRIBE_CONFIGS; exact matches deny."""
    bob = ctx("User:bob")
    describe = action(DESCRIBE, TOPIC, "foo_bar")
    describe_configs = action(DESCRIBE_CONFIGS, TOPIC, "foo_bar")
    not_applicable = Decision(DENIED, DEFAULT_DENY_RULE)
    # CREATE does not imply DESCRIBE
    assert _single(build, new_foo_acl(CREATE, ALLOW), bob, describe) == not_applicable
    # Deny ACLs don't do "implication".
    for op in (READ, WRITE, DELETE, ALTER):
        assert _single(build, new_foo_acl(op, DENY), bob, describe) == not_applicable, op
    # Exact match
    deny_describe = new_foo_acl(DESCRIBE, DENY)
    assert _single(build, deny_describe, bob, describe) == Decision(DENIED, MatchingAcl(deny_describe))
    # These permissions all imply DESCRIBE_CONFIGS.
    for op in (DESCRIBE_CONFIGS, ALTER_CONFIGS):
        rule = new_foo_acl(op, ALLOW)
        assert _single(build, rule, bob, describe_configs) == Decision(ALLOWED, MatchingAcl(rule)), op
    # Deny ACLs don't do "implication".
    assert _single(build, new_foo_acl(ALTER_CONFIGS, DENY), bob, describe_configs) == not_applicable
    # Exact match
    deny_alter_configs = new_foo_acl(ALTER_CONFIGS, DENY)
    assert _single(build, deny_alter_configs, bob, action(ALTER_CONFIGS, TOPIC, "foo_bar")) == Decision(
        DENIED, MatchingAcl(deny_alter_configs)
    )


def test_find_result_principal_matching(build: Build) -> None:
    """StandardAuthorizerTest.testFindResultPrincipalMatching."""
    allow = new_foo_acl(READ, ALLOW)
    assert _single(build, allow, ctx("User:bob"), action(READ, TOPIC, "foo_bar")) == Decision(ALLOWED, MatchingAcl(allow))
    # Principal does not match.
    assert _single(build, allow, ctx("User:alice"), action(READ, TOPIC, "foo_bar")) == Decision(DENIED, DEFAULT_DENY_RULE)
    # Wildcard principal matches anything.
    deny = new_bar_acl(READ, DENY)
    assert _single(build, deny, ctx("User:alice"), action(READ, GROUP, "bar")) == Decision(DENIED, MatchingAcl(deny))


# --------------------------------------------------------------------------- listing


def test_list_acls(build: Build) -> None:
    """StandardAuthorizerTest.testListAcls: DescribeAcls comes out in StandardAcl order (type, then
    REVERSE name, ..., operation)."""
    foo = [new_foo_acl(READ, ALLOW), new_foo_acl(WRITE, ALLOW)]
    bar = [new_bar_acl(DESCRIBE_CONFIGS, DENY), new_bar_acl(ALTER_CONFIGS, DENY)]
    data = authorizer(build, [*reversed(bar), *reversed(foo)])
    assert data.acls(AclFilter()) == [foo[0], foo[1], bar[0], bar[1]]
    data = data.with_acls(removed=[foo[1]])
    assert data.acls(AclFilter()) == [foo[0], bar[0], bar[1]]
    assert data.acls(AclFilter(TOPIC, None, PatternType.ANY)) == [foo[0]]


# --------------------------------------------------------------------------- authorize


def test_simple_authorizations(build: Build) -> None:
    """StandardAuthorizerTest.testSimpleAuthorizations."""
    data = authorizer(build, [new_foo_acl(READ, ALLOW), new_foo_acl(WRITE, ALLOW),
                       new_bar_acl(DESCRIBE_CONFIGS, ALLOW), new_bar_acl(ALTER_CONFIGS, ALLOW)])
    assert results(data, ctx("User:bob"), [action(READ, TOPIC, "foo_")]) == [ALLOWED]
    assert results(data, ctx("User:fred"), [action(ALTER_CONFIGS, GROUP, "bar")]) == [ALLOWED]


def test_deny_precedence_with_operation_all(build: Build) -> None:
    """StandardAuthorizerTest.testDenyPrecedenceWithOperationAll."""
    data = authorizer(build, [
        acl(TOPIC, "foo", LITERAL, "User:alice", "*", ALL, DENY),
        acl(TOPIC, "foo", PREFIXED, "User:alice", "*", READ, ALLOW),
        acl(TOPIC, "foo", LITERAL, "User:*", "*", ALL, DENY),
        acl(TOPIC, "foo", PREFIXED, "User:*", "*", DESCRIBE, ALLOW),
    ])
    assert results(data, ctx("User:alice"), [
        action(WRITE, TOPIC, "foo"),
        action(READ, TOPIC, "foo"),
        action(DESCRIBE, TOPIC, "foo"),
        action(READ, TOPIC, "foobar"),
    ]) == [DENIED, DENIED, DENIED, ALLOWED]
    assert results(data, ctx("User:bob"), [
        action(DESCRIBE, TOPIC, "foo"),
        action(READ, TOPIC, "foo"),
        action(WRITE, TOPIC, "foo"),
        action(DESCRIBE, TOPIC, "foobaz"),
        action(READ, TOPIC, "foobaz"),
    ]) == [DENIED, DENIED, DENIED, ALLOWED, DENIED]


def test_topic_acl_with_operation_all(build: Build) -> None:
    """StandardAuthorizerTest.testTopicAclWithOperationAll."""
    data = authorizer(build, [
        acl(TOPIC, "foo", LITERAL, "User:*", "*", ALL, ALLOW),
        acl(TOPIC, "bar", PREFIXED, "User:alice", "*", ALL, ALLOW),
        acl(TOPIC, "baz", LITERAL, "User:bob", "*", ALL, ALLOW),
    ])
    assert results(data, ctx("User:alice"), [
        action(WRITE, TOPIC, "foo"), action(DESCRIBE_CONFIGS, TOPIC, "bar"), action(DESCRIBE, TOPIC, "baz"),
    ]) == [ALLOWED, ALLOWED, DENIED]
    assert results(data, ctx("User:bob"), [
        action(WRITE, TOPIC, "foo"), action(READ, TOPIC, "bar"), action(DESCRIBE, TOPIC, "baz"),
    ]) == [ALLOWED, DENIED, ALLOWED]
    assert results(data, ctx("User:malory"), [
        action(DESCRIBE, TOPIC, "foo"), action(WRITE, TOPIC, "bar"), action(READ, TOPIC, "baz"),
    ]) == [ALLOWED, DENIED, DENIED]


def test_host_address_acl_validation(build: Build) -> None:
    """StandardAuthorizerTest.testHostAddressAclValidation (KAFKA-13698: the host is the client's IP
    literal; `InetAddress.getLocalHost()` is played by 10.20.30.40)."""
    host1, host2, local = "192.168.1.1", "192.168.1.2", "10.20.30.40"
    data = authorizer(build, [
        acl(TOPIC, "foo", LITERAL, "User:alice", host1, READ, DENY),
        acl(TOPIC, "foo", LITERAL, "User:alice", "*", READ, ALLOW),
        acl(TOPIC, "bar", LITERAL, "User:bob", host2, READ, ALLOW),
        acl(TOPIC, "bar", LITERAL, "User:*", local, DESCRIBE, ALLOW),
    ])
    actions = [action(READ, TOPIC, "foo"), action(READ, TOPIC, "bar"), action(DESCRIBE, TOPIC, "bar")]
    assert results(data, ctx("User:alice", local), actions) == [ALLOWED, DENIED, ALLOWED]
    assert results(data, ctx("User:alice", host1), actions) == [DENIED, DENIED, DENIED]
    assert results(data, ctx("User:alice", host2), actions) == [ALLOWED, DENIED, DENIED]
    assert results(data, ctx("User:bob", local), actions) == [DENIED, DENIED, ALLOWED]
    assert results(data, ctx("User:bob", host1), actions) == [DENIED, DENIED, DENIED]
    assert results(data, ctx("User:bob", host2), actions) == [DENIED, ALLOWED, ALLOWED]


MANY_ACLS = [
    acl(TOPIC, "green2", LITERAL, "User:*", "*", READ, ALLOW),
    acl(TOPIC, "green", PREFIXED, "User:bob", "*", READ, ALLOW),
    acl(TOPIC, "betamax4", LITERAL, "User:bob", "*", READ, ALLOW),
    acl(TOPIC, "betamax", LITERAL, "User:bob", "*", READ, ALLOW),
    acl(TOPIC, "beta", PREFIXED, "User:*", "*", READ, ALLOW),
    acl(TOPIC, "alpha", PREFIXED, "User:*", "*", READ, ALLOW),
    acl(TOPIC, "alp", PREFIXED, "User:bob", "*", READ, DENY),
    acl(GROUP, "*", LITERAL, "User:bob", "*", WRITE, ALLOW),
    acl(GROUP, "wheel", LITERAL, "User:*", "*", WRITE, DENY),
]


def test_authorization_with_many_acls(build: Build) -> None:
    """StandardAuthorizerTest.testAuthorizationWithManyAcls (addManyAcls)."""
    data = authorizer(build, MANY_ACLS)
    assert results(data, ctx("User:bob"), [action(READ, TOPIC, "green1"), action(WRITE, GROUP, "wheel")]) == [
        ALLOWED, DENIED,
    ]
    assert results(data, ctx("User:bob"), [
        action(READ, TOPIC, "alpha"), action(WRITE, GROUP, "arbitrary"), action(READ, TOPIC, "ala"),
    ]) == [DENIED, ALLOWED, DENIED]


# The lines StandardAuthorizerTest.testDenyAuditLogging / testAllowAuditLogging expect.
DENY_AUDIT_LINE = (
    "Principal = User:bob is Denied operation = READ from host = 127.0.0.1 on resource = "
    "Topic:LITERAL:alpha for request = Fetch with resourceRefCount = 1 based on rule "
    "MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=alp, patternType=PREFIXED, "
    "principal=User:bob, host=*, operation=READ, permissionType=DENY))"
)
ALLOW_AUDIT_LINE = (
    "Principal = User:bob is Allowed operation = READ from host = 127.0.0.1 on resource = "
    "Topic:LITERAL:green1 for request = Fetch with resourceRefCount = 1 based on rule "
    "MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=green, patternType=PREFIXED, "
    "principal=User:bob, host=*, operation=READ, permissionType=ALLOW))"
)


def _audit_line(context: RequestContext, act: Action, decision: Decision) -> str:
    return authorizer_log_line(
        principal=str(context.principal),
        allowed=decision.allowed,
        operation=act.operation.name,
        host=context.client_address,
        resource_type=act.resource_type.name,
        pattern_type=act.pattern_type.name,
        resource_name=act.resource_name,
        request_name="Fetch",  # the mock context's request: api key 1
        resource_ref_count=act.resource_ref_count,
        rule=str(decision.rule),
    )


@pytest.mark.parametrize("log_if_denied", [True, False])
def test_deny_audit_logging(build: Build, log_if_denied: bool) -> None:
    """StandardAuthorizerTest.testDenyAuditLogging: the exact kafka.authorizer.logger line, at INFO
    when the action asks for denials to be logged and TRACE otherwise."""
    data = authorizer(build, MANY_ACLS)
    context = ctx("User:bob", "127.0.0.1")
    act = action(READ, TOPIC, "alpha", log_if_allowed=False, log_if_denied=log_if_denied)
    (decision,) = data.authorize(context, [act])
    assert decision.result is DENIED
    assert _audit_line(context, act, decision) == DENY_AUDIT_LINE
    level = authorizer_log_level(allowed=False, log_if_allowed=act.log_if_allowed, log_if_denied=act.log_if_denied)
    assert level == ("INFO" if log_if_denied else "TRACE")


@pytest.mark.parametrize("log_if_allowed", [True, False])
def test_allow_audit_logging(build: Build, log_if_allowed: bool) -> None:
    """StandardAuthorizerTest.testAllowAuditLogging: DEBUG when asked for, TRACE otherwise."""
    data = authorizer(build, MANY_ACLS)
    context = ctx("User:bob", "127.0.0.1")
    act = action(READ, TOPIC, "green1", log_if_allowed=log_if_allowed, log_if_denied=False)
    (decision,) = data.authorize(context, [act])
    assert decision.result is ALLOWED
    assert _audit_line(context, act, decision) == ALLOW_AUDIT_LINE
    level = authorizer_log_level(allowed=True, log_if_allowed=act.log_if_allowed, log_if_denied=act.log_if_denied)
    assert level == ("DEBUG" if log_if_allowed else "TRACE")


class _Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def write_line(self, line: str) -> None:
        self.lines.append(line)


NOW = datetime(2026, 11, 21, 9, 30, 15, 123456, tzinfo=UTC)


@pytest.fixture
def service_parts(tmp_path: Path) -> Iterator[tuple[AuthorizerService, _Lines]]:
    """A live authorizer on an embedded SQLite database, `super.users=User:superman`, logging allowed
    decisions too (Kafka's DEBUG level enabled, as the Kafka test enables it)."""
    engine = open_engine(f"sqlite:///{tmp_path / 'kgov.db'}")
    lines = _Lines()
    service = AuthorizerService(
        engine, AuthzConfig(super_users="User:superman", log_allowed=True), lines=lines, clock=lambda: NOW
    )
    yield service, lines
    service.close()
    engine.dispose()


@pytest.mark.parametrize("log_if_denied", [True, False])
def test_deny_audit_logging_through_the_service(
    service_parts: tuple[AuthorizerService, _Lines], log_if_denied: bool
) -> None:
    """StandardAuthorizerTest.testDenyAuditLogging, end to end: the live authorizer writes Kafka's
    line in Kafka's log4j layout at INFO; a denial not asked to be logged is at most TRACE."""
    service, lines = service_parts
    service.start(background=False)
    assert service.create_acls(MANY_ACLS, actor=Principal("User", "superman")) == [None] * len(MANY_ACLS)
    lines.lines.clear()
    act = action(READ, TOPIC, "alpha", log_if_allowed=False, log_if_denied=log_if_denied)
    assert results(service.data, ctx("User:bob", "127.0.0.1"), [act]) == [DENIED]
    assert [d.result for d in service.authorize(ctx("User:bob", "127.0.0.1"), [act])] == [DENIED]
    if log_if_denied:
        assert lines.lines == [f"[2026-11-21 09:30:15,123] INFO {DENY_AUDIT_LINE} (kafka.authorizer.logger)"]
    else:
        assert all(line.startswith("[2026-11-21 09:30:15,123] TRACE ") for line in lines.lines), lines.lines


@pytest.mark.parametrize("log_if_allowed", [True, False])
def test_allow_audit_logging_through_the_service(
    service_parts: tuple[AuthorizerService, _Lines], log_if_allowed: bool
) -> None:
    """StandardAuthorizerTest.testAllowAuditLogging, end to end: DEBUG when asked for."""
    service, lines = service_parts
    service.start(background=False)
    service.create_acls(MANY_ACLS, actor=Principal("User", "superman"))
    lines.lines.clear()
    act = action(READ, TOPIC, "green1", log_if_allowed=log_if_allowed, log_if_denied=False)
    assert [d.result for d in service.authorize(ctx("User:bob", "127.0.0.1"), [act])] == [ALLOWED]
    if log_if_allowed:
        assert lines.lines == [f"[2026-11-21 09:30:15,123] DEBUG {ALLOW_AUDIT_LINE} (kafka.authorizer.logger)"]
    else:
        assert all(line.startswith("[2026-11-21 09:30:15,123] TRACE ") for line in lines.lines), lines.lines


def test_authorize_by_resource_type_audits_its_probe_as_kafka_does(service_parts: tuple[AuthorizerService, _Lines]) -> None:
    """The Authorizer default method starts with authorize() on Topic:LITERAL:hardcode, resourceRefCount
    0, logIfAllowed=true, logIfDenied=false, and StandardAuthorizer audits that like any decision: an
    ALLOWED probe is a DEBUG line, a DENIED one is not logged, and what the method then concludes from
    the other ACLs is not logged either."""
    service, lines = service_parts
    service.start(background=False)
    service.create_acls([acl(TOPIC, "*", PatternType.LITERAL, "User:alice", "*", WRITE, Permission.ALLOW),
                         acl(TOPIC, "orders", PatternType.LITERAL, "User:bob", "*", WRITE, Permission.ALLOW)],
                        actor=Principal("User", "superman"))
    lines.lines.clear()
    init_producer_id = 22
    assert service.authorize_by_resource_type(ctx("User:alice", api_key=init_producer_id), WRITE, TOPIC).allowed
    assert lines.lines == [
        "[2026-11-21 09:30:15,123] DEBUG Principal = User:alice is Allowed operation = WRITE from host = 127.0.0.1 "
        "on resource = Topic:LITERAL:hardcode for request = InitProducerId with resourceRefCount = 0 based on rule "
        "MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=*, patternType=LITERAL, principal=User:alice, "
        "host=*, operation=WRITE, permissionType=ALLOW)) (kafka.authorizer.logger)"
    ]
    lines.lines.clear()
    assert service.authorize_by_resource_type(ctx("User:bob", api_key=init_producer_id), WRITE, TOPIC).allowed
    assert not service.authorize_by_resource_type(ctx("User:carol", api_key=init_producer_id), WRITE, TOPIC).allowed
    assert lines.lines == []


def test_authorization_prior_to_complete_initial_load(service_parts: tuple[AuthorizerService, _Lines]) -> None:
    """StandardAuthorizerTest.testAuthorizationPriorToCompleteInitialLoad: before the first load only
    super users are authorized; anyone else gets AuthorizerNotReadyException for the whole batch."""
    service, _ = service_parts
    batch = [action(READ, TOPIC, "green1"), action(READ, TOPIC, "green2")]
    with pytest.raises(AuthorizerNotReadyError):
        service.authorize(ctx("User:bob"), batch)
    superman = service.authorize(ctx("User:superman"), [action(READ, TOPIC, "green1"), action(WRITE, GROUP, "wheel")])
    assert [d.result for d in superman] == [ALLOWED, ALLOWED]
    # authorizeByResourceType starts with authorize() (after checking its arguments), and the HTTP
    # surface decides like authorize: both answer a super user before the load too.
    assert service.authorize_by_resource_type(ctx("User:superman"), WRITE, TOPIC).allowed
    with pytest.raises(ValueError, match="non-filter operation"):
        service.authorize_by_resource_type(ctx("User:superman"), Operation.ANY, TOPIC)
    assert service.authorize_http(ctx("User:superman"), action(WRITE, GROUP, "wheel"), "POST /x").allowed
    for not_yet in (lambda: service.authorize_by_resource_type(ctx("User:bob"), WRITE, TOPIC),
                    lambda: service.authorize_http(ctx("User:bob"), action(WRITE, GROUP, "wheel"), "POST /x")):
        with pytest.raises(AuthorizerNotReadyError):
            not_yet()
    service.start(background=False)
    assert [d.result for d in service.authorize(ctx("User:bob"), batch)] == [DENIED, DENIED]


def test_create_acls_reports_each_acl(service_parts: tuple[AuthorizerService, _Lines]) -> None:
    """AclControlManagerTest.testCreateAclDeleteAcl, the creating half, through the live authorizer:
    CreateAcls answers per ACL -- three successes and Kafka's error for the invalid one, which
    alone is not stored -- and a repeated create is a successful no-op."""
    service, _ = service_parts
    service.start(background=False)
    valid = [
        acl(CLUSTER, "kafka-cluster", LITERAL, "User:*", "*", ALTER, ALLOW),
        acl(TOPIC, "foo_", PREFIXED, "User:*", "*", READ, ALLOW),
        acl(GROUP, "mygroup", LITERAL, "User:foo", "*", READ, DENY),
    ]
    invalid = acl(TOPIC, "*", PatternType.UNKNOWN, "User:*", "*", ALTER, ALLOW)
    outcome = service.create_acls([*valid, invalid], actor=Principal("User", "superman"))
    assert outcome[:3] == [None, None, None]
    assert isinstance(outcome[3], InvalidAclError) and str(outcome[3]) == "Invalid patternType UNKNOWN"
    assert set(service.describe_acls(AclFilter())) == set(valid)
    assert service.create_acls(valid[:1], actor=Principal("User", "superman")) == [None]
    assert len(service.describe_acls(AclFilter())) == 3


def test_super_user_and_default_rules_render_as_kafka(build: Build) -> None:
    """StandardAuthorizerData's other rule names in the audit line: SuperUser, DefaultDeny,
    DefaultAllow (MatchingRule.toString)."""
    data = authorizer(build, MANY_ACLS)
    assert str(data.authorize(ctx("User:superman"), [action(WRITE, GROUP, "wheel")])[0].rule) == "SuperUser"
    assert str(data.authorize(ctx("User:bob"), [action(READ, TOPIC, "zeta")])[0].rule) == "DefaultDeny"
    allow_all = authorizer(build, MANY_ACLS, allow_everyone_if_no_acl_found=True)
    assert str(allow_all.authorize(ctx("User:bob"), [action(READ, TOPIC, "zeta")])[0].rule) == "DefaultAllow"


def test_prefix_acls(build: Build) -> None:
    """StandardAuthorizerTest.testPrefixAcls (KAFKA-14265: a prefix ACL must not shadow another)."""
    data = authorizer(build, [
        acl(TOPIC, "fooa", PREFIXED, "User:alice", "*", ALL, ALLOW),
        acl(TOPIC, "foobar", LITERAL, "User:bob", "*", ALL, ALLOW),
        acl(TOPIC, "f", PREFIXED, "User:bob", "*", ALL, ALLOW),
    ])
    assert results(data, ctx("User:bob"), [
        action(WRITE, TOPIC, "foobarr"), action(READ, TOPIC, "goobar"), action(READ, TOPIC, "fooa"),
    ]) == [ALLOWED, DENIED, ALLOWED]
    assert results(data, ctx("User:alice"), [
        action(DESCRIBE, TOPIC, "fooa"), action(WRITE, TOPIC, "bar"), action(READ, TOPIC, "baz"),
    ]) == [ALLOWED, DENIED, DENIED]


# --------------------------------------------------------------------------- creation validation


def test_validate_new_acl() -> None:
    """AclControlManagerTest.testValidateNewAcl: each invalid field is refused with Kafka's message."""
    validate_new_acl(acl(TOPIC, "*", LITERAL, "User:*", "*", ALTER, ALLOW))
    cases = [
        (acl(TOPIC, "*", PatternType.UNKNOWN, "User:*", "*", ALTER, ALLOW), "Invalid patternType UNKNOWN"),
        (acl(ResourceType.UNKNOWN, "*", LITERAL, "User:*", "*", ALTER, ALLOW), "Invalid resourceType UNKNOWN"),
        (acl(TOPIC, "*", LITERAL, "User:*", "*", Operation.UNKNOWN, ALLOW), "Invalid operation UNKNOWN"),
        (acl(TOPIC, "*", LITERAL, "User:*", "*", ALTER, Permission.UNKNOWN), "Invalid permissionType UNKNOWN"),
        # The filter-only values are refused the same way.
        (acl(ResourceType.ANY, "*", LITERAL, "User:*", "*", ALTER, ALLOW), "Invalid resourceType ANY"),
        (acl(TOPIC, "*", PatternType.MATCH, "User:*", "*", ALTER, ALLOW), "Invalid patternType MATCH"),
        (acl(TOPIC, "*", PatternType.ANY, "User:*", "*", ALTER, ALLOW), "Invalid patternType ANY"),
        (acl(TOPIC, "*", LITERAL, "User:*", "*", Operation.ANY, ALLOW), "Invalid operation ANY"),
        (acl(TOPIC, "*", LITERAL, "User:*", "*", ALTER, Permission.ANY), "Invalid permissionType ANY"),
    ]
    for bad, message in cases:
        with pytest.raises(InvalidAclError) as err:
            validate_new_acl(bad)
        assert str(err.value) == message


@pytest.mark.parametrize("principal", ["invalid", ""])
def test_validate_acl_with_bad_principal(principal: str) -> None:
    """AclControlManagerTest.testValidateAclWithBadPrincipal / testValidateAclWithEmptyPrincipal."""
    with pytest.raises(InvalidAclError) as err:
        validate_new_acl(acl(TOPIC, "*", LITERAL, principal, "*", ALTER, ALLOW))
    assert str(err.value) == (
        f"Could not parse principal from `{principal}` (no colon is present separating the principal type "
        "from the principal name)"
    )


def test_validate_new_acl_resource_names() -> None:
    """AclControlManager.validateNewAcl "Resource name should not be empty" (AuthorizerTest
    testEmptyAclThrowsException) and the broker's CreateAcls check (AclApis.handleCreateAcls):
    "The only valid name for the CLUSTER resource is kafka-cluster"."""
    with pytest.raises(InvalidAclError) as err:
        validate_new_acl(acl(GROUP, "", LITERAL, "User:*", "*", READ, ALLOW))
    assert str(err.value) == "Resource name should not be empty"
    with pytest.raises(InvalidAclError) as err:
        validate_new_acl(acl(CLUSTER, "my-cluster", LITERAL, "User:alice", "*", ALTER, ALLOW))
    assert str(err.value) == "The only valid name for the CLUSTER resource is kafka-cluster"
    validate_new_acl(acl(CLUSTER, "kafka-cluster", LITERAL, "User:alice", "*", ALTER, ALLOW))
    # KRaft, unlike the ZooKeeper authorizer (KAFKA-13983), stores names with a '/'.
    validate_new_acl(acl(TOPIC, "test/1", LITERAL, "User:alice", "*", READ, ALLOW))


def test_duplicate_acl_is_a_no_op(build: Build) -> None:
    """AclControlManager.createAcls: `if (existingAcls.add(standardAcl))` -- adding an ACL that
    exists changes nothing (and still succeeds)."""
    rule = new_foo_acl(READ, ALLOW)
    data = authorizer(build, [rule, rule])
    assert data.acls(AclFilter()) == [rule]
    again = data.with_acls(added=[rule])
    assert again.acls(AclFilter()) == [rule]
    assert again.with_acls(removed=[rule]).acls(AclFilter()) == []
