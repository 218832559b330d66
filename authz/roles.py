"""Predefined roles modelled on Confluent's RBAC, and role bindings.

A binding gives a principal (`User:` or `Group:`) a role, either cluster-wide or on one LITERAL or
PREFIXED resource pattern. Bindings only ever ALLOW: a DENY ACL on any effective principal still
wins (Confluent: "You cannot use a predefined role to override denial-of-access (DENY) that is
configured in an ACL").

Confluent publishes the role matrix only in part (shared/reference/authz-sasl.md section 3); where it
is silent, the expansion below follows the role's documented purpose. Kafka has no separate right to
administer access: CLUSTER ALTER lets its holder change ACLs and SCRAM credentials (CreateAcls,
AlterUserScramCredentials), and in kgov also role bindings, group members and OAuth clients, so it
is the right to give anyone anything. Only SystemAdmin holds it. UserAdmin (Confluent: manages role
bindings, no access to resources) holds no Kafka right beyond DESCRIBE on the cluster; the
role-binding routes let it bind the roles below SystemAdmin and UserAdmin to principals other than
itself (`user_admin_refusal`), which is narrower than Confluent, where UserAdmin manages every role binding.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Final

from authz.model import (
    CLUSTER_RESOURCE_NAME,
    MAX_NAME_LENGTH,
    WILDCARD_RESOURCE,
    InvalidAclError,
    Operation,
    PatternType,
    Principal,
    ResourceType,
    RoleBindingRule,
    refuse_lone_surrogate,
    refuse_longer,
    refuse_nul,
)

Op = Operation


@dataclass(frozen=True, slots=True)
class Role:
    name: str
    cluster_scoped: bool  # True: may only be bound cluster-wide
    grants: tuple[tuple[ResourceType, frozenset[Operation]], ...]
    description: str

    def operations(self, rt: ResourceType) -> frozenset[Operation]:
        for t, ops in self.grants:
            if t is rt:
                return ops
        return frozenset()


def _role(name: str, cluster_scoped: bool, description: str, **grants: set[Operation]) -> Role:
    return Role(
        name, cluster_scoped, tuple((ResourceType[t], frozenset(ops)) for t, ops in grants.items() if ops), description
    )


PREDEFINED_ROLES: Final[dict[str, Role]] = {
    r.name: r
    for r in (
        _role("SystemAdmin", True, "Full access to every resource in the cluster",
              TOPIC={Op.ALL}, GROUP={Op.ALL}, CLUSTER={Op.ALL}, TRANSACTIONAL_ID={Op.ALL},
              DELEGATION_TOKEN={Op.ALL}, USER={Op.ALL}, SUBJECT={Op.ALL}),
        _role("ClusterAdmin", True, "Sets up and runs clusters; no ACL or credential administration",
              CLUSTER={Op.CREATE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE,
                       Op.CLUSTER_ACTION},
              TOPIC={Op.ALL}, GROUP={Op.ALL}, TRANSACTIONAL_ID={Op.ALL}),
        # No CLUSTER ALTER (ACLs, credentials, role bindings of any role: SystemAdmin's power) and no
        # USER CREATE_TOKENS / DESCRIBE_TOKENS (a token for, or the HMAC of, any owner's token is a
        # login as that owner). Its role-binding right is `user_admin_refusal`, checked by the routes.
        _role("UserAdmin", True,
              "Manages role bindings below SystemAdmin and UserAdmin, for principals other than itself",
              CLUSTER={Op.DESCRIBE}),
        _role("SecurityAdmin", True, "Views ACLs, role bindings and security settings",
              CLUSTER={Op.DESCRIBE}),
        # Reads configuration; no ALTER_CONFIGS, which in Kafka alters broker configs and client
        # quotas (AlterConfigs, AlterClientQuotas), not an audit setting.
        _role("AuditAdmin", True, "Views the cluster's configuration and security settings; changes nothing",
              CLUSTER={Op.DESCRIBE, Op.DESCRIBE_CONFIGS}),
        _role("Operator", True, "Monitors and operates clusters and applications without reading data",
              CLUSTER={Op.DESCRIBE, Op.DESCRIBE_CONFIGS}, TOPIC={Op.DESCRIBE, Op.DESCRIBE_CONFIGS},
              GROUP={Op.DESCRIBE}, TRANSACTIONAL_ID={Op.DESCRIBE}),
        _role("ResourceOwner", False, "Owns resources: reads, writes and manages them",
              TOPIC={Op.ALL}, GROUP={Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS},
              TRANSACTIONAL_ID={Op.WRITE, Op.DESCRIBE}, SUBJECT={Op.ALL}),
        _role("DeveloperRead", False, "Consumes from topics and reads subjects",
              TOPIC={Op.READ, Op.DESCRIBE}, GROUP={Op.READ, Op.DESCRIBE}, TRANSACTIONAL_ID={Op.DESCRIBE},
              SUBJECT={Op.READ}),
        _role("DeveloperWrite", False, "Produces to topics and registers schemas",
              TOPIC={Op.WRITE, Op.DESCRIBE}, CLUSTER={Op.IDEMPOTENT_WRITE}, TRANSACTIONAL_ID={Op.WRITE, Op.DESCRIBE},
              SUBJECT={Op.WRITE, Op.READ}),
        _role("DeveloperManage", False, "Creates, configures and deletes topics, groups and subjects",
              TOPIC={Op.CREATE, Op.DELETE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS}, CLUSTER={Op.CREATE, Op.DESCRIBE_CONFIGS},
              GROUP={Op.DESCRIBE, Op.DELETE}, TRANSACTIONAL_ID={Op.DESCRIBE}, SUBJECT={Op.DELETE, Op.DESCRIBE}),
    )
}


@dataclass(frozen=True, slots=True, order=True)
class RoleBinding:
    """`principal` is `User:x` or `Group:x`; no resource means a cluster-wide binding."""

    principal: str
    role: str
    resource_type: ResourceType | None = None
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.LITERAL

    @property
    def cluster_wide(self) -> bool:
        return self.resource_type is None or self.resource_type is ResourceType.CLUSTER


def validate_role_binding(binding: RoleBinding) -> None:
    role = PREDEFINED_ROLES.get(binding.role)
    if role is None:
        raise InvalidAclError(
            f"Unknown role {binding.role!r}; predefined roles are: {', '.join(sorted(PREDEFINED_ROLES))}"
        )
    principal = Principal.parse_given(binding.principal)
    if principal.type not in ("User", "Group") or not principal.name:
        raise InvalidAclError(f"Role bindings take a User: or Group: principal, got {binding.principal}")
    if binding.resource_type is None:
        if binding.resource_name is not None:
            raise InvalidAclError("A resource name needs a resource type")
        return
    if binding.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        raise InvalidAclError("Invalid resourceType " + binding.resource_type.name)
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAclError("Invalid patternType " + binding.pattern_type.name)
    if not binding.resource_name:
        raise InvalidAclError("Resource name should not be empty")
    refuse_nul(binding.resource_name, "The resource name")
    refuse_lone_surrogate(binding.resource_name, "The resource name")
    refuse_longer(binding.resource_name, MAX_NAME_LENGTH, "The resource name")
    if binding.resource_type is ResourceType.CLUSTER:
        if binding.resource_name != CLUSTER_RESOURCE_NAME:
            raise InvalidAclError("The only valid name for the CLUSTER resource is kafka-cluster")
        return
    if role.cluster_scoped:
        raise InvalidAclError(f"Role {role.name} can only be bound at cluster scope")
    if not role.operations(binding.resource_type):
        raise InvalidAclError(f"Role {role.name} grants nothing on {binding.resource_type.name} resources")


def role_grants(
    binding: RoleBinding,
) -> Iterator[tuple[ResourceType, str, PatternType, Operation, RoleBindingRule]]:
    """(resource type, pattern name, pattern type, operation, rule) for every allow the binding gives."""
    role = PREDEFINED_ROLES.get(binding.role)
    if role is None:
        return
    if binding.cluster_wide:
        for rt, ops in role.grants:
            name = CLUSTER_RESOURCE_NAME if rt is ResourceType.CLUSTER else WILDCARD_RESOURCE
            rule = RoleBindingRule(binding.principal, role.name, rt, name, PatternType.LITERAL)
            for op in ops:
                yield rt, name, PatternType.LITERAL, op, rule
        return
    assert binding.resource_type is not None and binding.resource_name is not None
    rt = binding.resource_type
    rule = RoleBindingRule(binding.principal, role.name, rt, binding.resource_name, binding.pattern_type)
    for op in role.operations(rt):
        yield rt, binding.resource_name, binding.pattern_type, op, rule


# Roles whose holders administer access: binding or unbinding them takes CLUSTER ALTER (SystemAdmin,
# or an ACL), never UserAdmin's narrower right, or a UserAdmin could make itself or a friend SystemAdmin.
ACCESS_ADMIN_ROLES: Final[frozenset[str]] = frozenset({"SystemAdmin", "UserAdmin"})
USER_ADMIN_ROLE_PRINCIPAL: Final[str] = "Role:UserAdmin"


def user_admin_refusal(binding: RoleBinding, caller_principals: Collection[str], *, adding: bool) -> str | None:
    """Why a caller holding UserAdmin, but not CLUSTER ALTER, may not add (or remove) `binding`; None when
    it may. `caller_principals` are the strings the caller's ACLs and bindings match
    (`AuthorizerData.effective_principals`: itself, `User:*`, its groups). A binding for any of them
    would give the caller what it grants, so UserAdmin may not add one; removing one gives nothing.
    Compared as stored, as the decision compares them (`b.principal in holders`)."""
    if binding.role in ACCESS_ADMIN_ROLES:
        return (f"Only a holder of ALTER on the cluster (SystemAdmin) may bind or unbind {binding.role}; "
                "UserAdmin manages the other roles")
    if adding and binding.principal in caller_principals:
        return (f"UserAdmin may not bind a role to {binding.principal}: the caller is, or belongs to, that "
                "principal, and would grant itself the role")
    return None
