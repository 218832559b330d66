"""The authorizer's vocabulary: Kafka's ACL enums and records, request context, actions, decisions.

Enum values are Kafka's wire codes (clients `common/resource`, `common/acl`), so the gateway can
map protocol fields directly. Everything here is immutable and free of I/O.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Final, NewType, Protocol, TypeVar

TopicName = NewType("TopicName", str)
ClusterId = NewType("ClusterId", str)

WILDCARD_RESOURCE: Final = "*"
WILDCARD_PRINCIPAL: Final = "User:*"
WILDCARD_HOST: Final = "*"
CLUSTER_RESOURCE_NAME: Final = "kafka-cluster"


class InvalidAclError(ValueError):
    """An ACL, filter or principal that Kafka would refuse; the message is Kafka's wording."""


class ResourceType(enum.IntEnum):
    # Enum's own __hash__ is a Python-level function; the int hash is equal for equal members and
    # several times cheaper on the decision-cache hot path.
    __hash__ = int.__hash__

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7
    # kgov extension: schema-registry subjects. Never sent on the Kafka wire.
    SUBJECT = 100

    @classmethod
    def parse(cls, text: str) -> ResourceType:
        return _parse_enum(cls, text, "resource type")


class PatternType(enum.IntEnum):
    __hash__ = int.__hash__

    UNKNOWN = 0
    ANY = 1  # filter only: any pattern type, exact name
    MATCH = 2  # filter only: every pattern that would match a resource of that name
    LITERAL = 3
    PREFIXED = 4

    @classmethod
    def parse(cls, text: str) -> PatternType:
        return _parse_enum(cls, text, "pattern type")


class Operation(enum.IntEnum):
    __hash__ = int.__hash__

    UNKNOWN = 0
    ANY = 1  # filter only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14

    @classmethod
    def parse(cls, text: str) -> Operation:
        return _parse_enum(cls, text, "operation")

    @property
    def camel(self) -> str:
        """`SecurityUtils.operationName`: READ -> Read, ALTER_CONFIGS -> AlterConfigs."""
        return "".join(part.capitalize() for part in self.name.split("_"))


class Permission(enum.IntEnum):
    __hash__ = int.__hash__

    UNKNOWN = 0
    ANY = 1  # filter only
    DENY = 2
    ALLOW = 3

    @classmethod
    def parse(cls, text: str) -> Permission:
        return _parse_enum(cls, text, "permission type")


_E = TypeVar("_E", bound=enum.IntEnum)


def _parse_enum(cls: type[_E], text: str, what: str) -> _E:
    """Accepts Kafka's spellings: `READ`, `Read`, `read`, `AlterConfigs`, `alter-configs`, `ALTER_CONFIGS`."""
    key = text.strip().replace("-", "_")
    if key.upper() in cls.__members__:
        return cls.__members__[key.upper()]
    # CamelCase (AlterConfigs, TransactionalId, IdempotentWrite) -> ALTER_CONFIGS ...
    snake = "".join("_" + c if c.isupper() and i else c for i, c in enumerate(key)).upper()
    if snake in cls.__members__:
        return cls.__members__[snake]
    raise InvalidAclError(f"Unknown {what}: {text!r}")


# Operations each resource type supports (Kafka's AclEntry.supportedOperations; ALL is also accepted).
SUPPORTED_OPERATIONS: Final[dict[ResourceType, frozenset[Operation]]] = {
    ResourceType.TOPIC: frozenset(
        {
            Operation.READ,
            Operation.WRITE,
            Operation.CREATE,
            Operation.DESCRIBE,
            Operation.DELETE,
            Operation.ALTER,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
        }
    ),
    ResourceType.GROUP: frozenset(
        {Operation.READ, Operation.DESCRIBE, Operation.DELETE, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}
    ),
    ResourceType.CLUSTER: frozenset(
        {
            Operation.CREATE,
            Operation.CLUSTER_ACTION,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
            Operation.IDEMPOTENT_WRITE,
            Operation.ALTER,
            Operation.DESCRIBE,
        }
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({Operation.DESCRIBE, Operation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({Operation.DESCRIBE}),
    ResourceType.USER: frozenset({Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS}),
    ResourceType.SUBJECT: frozenset(
        {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.DESCRIBE, Operation.ALTER,
         Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}
    ),
}


@dataclass(frozen=True, slots=True, order=True)
class Principal:
    """`User:alice`, `Group:sales`, `Role:DeveloperRead`. Parsed at the first colon, case-sensitive."""

    type: str
    name: str
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Principals key the decision cache: hash once, not on every lookup.
        object.__setattr__(self, "_hash", hash((self.type, self.name)))

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def parse(cls, text: str) -> Principal:
        kind, sep, name = text.partition(":")
        if not sep or not kind:
            raise InvalidAclError(f"expected a string in format principalType:principalName but got {text}")
        return cls(kind, name)

    @classmethod
    def parse_given(cls, text: str) -> Principal:
        """A principal a request or a command names, to store or look up: `parse`, and what the stores
        can keep (`refuse_nul`, `MAX_NAME_LENGTH`). Stored rows are read back with `parse`, so a row kept
        before these limits existed (SQLite stored anything) still loads."""
        principal = cls.parse(text)
        refuse_nul(text, "A principal")
        refuse_lone_surrogate(text, "A principal")
        refuse_longer(text, MAX_NAME_LENGTH, "A principal")
        return principal

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"


USER_WILDCARD = Principal("User", "*")


# The longest resource name, principal (`Type:name`) and ACL host the stores keep (their columns): PostgreSQL
# refuses a longer value with a database error, where SQLite would keep it. Kafka sets no such limit.
MAX_NAME_LENGTH = 1024
MAX_HOST_LENGTH = 255


def refuse_longer(value: str, limit: int, what: str) -> None:
    if len(value) > limit:
        raise InvalidAclError(f"{what} must be at most {limit} characters")


def refuse_nul(value: str, what: str) -> None:
    """Names taken from a request never hold NUL: PostgreSQL cannot store it in text (a database error,
    where SQLite would keep it), SASL PLAIN cannot carry it in a name (it separates the fields), and C
    tools reading the audit trail stop at it. A departure from Kafka, which accepts any string."""
    if "\x00" in value:
        raise InvalidAclError(f"{what} must not contain the NUL character")


_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def refuse_lone_surrogate(value: str, what: str) -> None:
    """Half of a UTF-16 surrogate pair reaches a Python string through a JSON escape (`\\ud800`), is
    not Unicode text, and neither SQLite nor PostgreSQL can store it (the write failed with a 500).
    Kafka never sees one: its strings arrive as UTF-8, which cannot encode it."""
    if _SURROGATE.search(value):
        raise InvalidAclError(f"{what} must not contain a lone surrogate (U+D800 to U+DFFF)")


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType


@dataclass(frozen=True, slots=True, order=True)
class Acl:
    """Kafka's StandardAcl: the 7-tuple. `principal` is the `Type:name` string as Kafka stores it."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    @property
    def pattern(self) -> ResourcePattern:
        return ResourcePattern(self.resource_type, self.resource_name, self.pattern_type)

    def __str__(self) -> str:
        return (
            f"StandardAcl(resourceType={self.resource_type.name}, resourceName={self.resource_name}, "
            f"patternType={self.pattern_type.name}, principal={self.principal}, host={self.host}, "
            f"operation={self.operation.name}, permissionType={self.permission.name})"
        )


@dataclass(frozen=True, slots=True)
class AclFilter:
    """AclBindingFilter: `None` name/principal/host match anything; ANY enums match anything.

    Pattern semantics (ResourcePatternFilter.matches): ANY = any pattern type with the exact name;
    MATCH = every stored pattern that would apply to a resource of that name; a concrete type =
    that type and the exact name.
    """

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not pattern.resource_type:
            return False
        pt = self.pattern_type
        if pt is not PatternType.ANY and pt is not PatternType.MATCH and pt is not pattern.pattern_type:
            return False
        if self.resource_name is None:
            return True
        if pt is PatternType.ANY or pt is pattern.pattern_type:
            return self.resource_name == pattern.name
        if pattern.pattern_type is PatternType.LITERAL:
            return self.resource_name == pattern.name or pattern.name == WILDCARD_RESOURCE
        if pattern.pattern_type is PatternType.PREFIXED:
            return self.resource_name.startswith(pattern.name)
        return False

    def matches(self, acl: Acl) -> bool:
        if not self.matches_pattern(acl.pattern):
            return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation is not Operation.ANY and self.operation is not acl.operation:
            return False
        return self.permission is Permission.ANY or self.permission is acl.permission

    @property
    def is_unknown(self) -> bool:
        return (
            self.resource_type is ResourceType.UNKNOWN
            or self.pattern_type is PatternType.UNKNOWN
            or self.operation is Operation.UNKNOWN
            or self.permission is Permission.UNKNOWN
        )

    @classmethod
    def exact(cls, acl: Acl) -> AclFilter:
        return cls(
            acl.resource_type, acl.resource_name, acl.pattern_type, acl.principal, acl.host, acl.operation,
            acl.permission,
        )


@dataclass(frozen=True, slots=True)
class DecisionCaller:
    """Who asked kgov's decision API (`/v1/data/kafka/authz/...`) for a decision on a broker's behalf:
    the HTTP caller's address as checked against `authz.decision_api_networks`, and the listed proxy
    (`http_forwarded_allow_ips`) that forwarded the request, if one did. Audited with the decision: any
    host on a listed network may ask, and the broker's document alone does not say who sent it."""

    address: str
    proxy: str | None = None


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who asks, from where, through which request. `client_address` is the IP literal (no port).
    `decision_caller` is set only for decisions asked through the decision API."""

    principal: Principal
    client_address: str
    listener: str = "INTERNAL"
    security_protocol: str = "PLAINTEXT"
    client_id: str = ""
    api_key: int = -1
    api_version: int = -1
    correlation_id: int = 0
    token_authenticated: bool = False
    decision_caller: DecisionCaller | None = None


@dataclass(frozen=True, slots=True)
class Action:
    """One thing to check. Only LITERAL resources are authorized, as in Kafka."""

    resource_type: ResourceType
    resource_name: str
    operation: Operation
    resource_ref_count: int = 1
    log_if_allowed: bool = True
    log_if_denied: bool = True
    pattern_type: PatternType = PatternType.LITERAL


class AuthorizationResult(enum.Enum):
    ALLOWED = "ALLOWED"
    DENIED = "DENIED"


class Rule:
    """Why a decision came out as it did. `str()` is Kafka's rendering, used in the audit line."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class SuperUser(Rule):
    def __str__(self) -> str:
        return "SuperUser"


@dataclass(frozen=True, slots=True)
class DefaultAllow(Rule):
    def __str__(self) -> str:
        return "DefaultAllow"


@dataclass(frozen=True, slots=True)
class DefaultDeny(Rule):
    def __str__(self) -> str:
        return "DefaultDeny"


@dataclass(frozen=True, slots=True)
class MatchingAcl(Rule):
    acl: Acl

    def __str__(self) -> str:
        return f"MatchingAcl(acl={self.acl})"


@dataclass(frozen=True, slots=True)
class RoleBindingRule(Rule):
    """An allow granted by a role binding (a kgov extension; Kafka has no equivalent rule)."""

    principal: str
    role: str
    resource_type: ResourceType
    pattern_name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return (
            f"RoleBinding(principal={self.principal}, role={self.role}, resourceType={self.resource_type.name}, "
            f"resourceName={self.pattern_name}, patternType={self.pattern_type.name})"
        )


@dataclass(frozen=True, slots=True)
class StaleSnapshot(Rule):
    """A denial because the node could not refresh its ACL snapshot for longer than
    `authz.max_snapshot_age_s` (a kgov extension; Kafka has no equivalent rule)."""

    def __str__(self) -> str:
        return "StaleAclSnapshot"


SUPER_USER_RULE: Final = SuperUser()
DEFAULT_ALLOW_RULE: Final = DefaultAllow()
DEFAULT_DENY_RULE: Final = DefaultDeny()


@dataclass(frozen=True, slots=True)
class Decision:
    result: AuthorizationResult
    rule: Rule = field(default=DEFAULT_DENY_RULE)

    @property
    def allowed(self) -> bool:
        return self.result is AuthorizationResult.ALLOWED


class Authorizer(Protocol):
    """The one entry point the gateway, the registry and the control plane call."""

    def authorize(self, ctx: RequestContext, actions: list[Action]) -> list[Decision]: ...

    def authorize_by_resource_type(
        self, ctx: RequestContext, operation: Operation, resource_type: ResourceType
    ) -> Decision: ...


class AuthorizerNotReadyError(RuntimeError):
    """Raised for a whole batch before the first ACL load completes (Kafka's AuthorizerNotReadyException)."""
