"""The predefined roles' expansion, pinned: who may administer access (CLUSTER ALTER: ACLs, credentials,
clients, groups, any role binding), act for another user (USER CREATE_TOKENS / DESCRIBE_TOKENS) or
change broker configs and quotas (CLUSTER ALTER_CONFIGS). See docs/authorizer.md, "Predefined roles"."""

from __future__ import annotations

import pytest

from authz.model import Operation, ResourceType
from authz.roles import ACCESS_ADMIN_ROLES, PREDEFINED_ROLES, RoleBinding, user_admin_refusal

CLUSTER, USER = ResourceType.CLUSTER, ResourceType.USER


def holders(rt: ResourceType, op: Operation) -> set[str]:
    return {name for name, role in PREDEFINED_ROLES.items()
            if op in role.operations(rt) or Operation.ALL in role.operations(rt)}


def test_only_system_admin_administers_access() -> None:
    assert holders(CLUSTER, Operation.ALTER) == {"SystemAdmin"}


@pytest.mark.parametrize("op", [Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS])
def test_only_system_admin_acts_for_other_users(op: Operation) -> None:
    assert holders(USER, op) == {"SystemAdmin"}


def test_who_changes_broker_configs_and_quotas() -> None:
    assert holders(CLUSTER, Operation.ALTER_CONFIGS) == {"SystemAdmin", "ClusterAdmin"}


def test_user_admin_and_audit_admin_only_look() -> None:
    assert PREDEFINED_ROLES["UserAdmin"].grants == ((CLUSTER, frozenset({Operation.DESCRIBE})),)
    assert PREDEFINED_ROLES["AuditAdmin"].grants == (
        (CLUSTER, frozenset({Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS})),)


def test_user_admin_refusals() -> None:
    me = ("User:ua", "User:*", "Group:admins", "Role:UserAdmin")
    for role in sorted(ACCESS_ADMIN_ROLES):
        assert user_admin_refusal(RoleBinding("User:bob", role), me, adding=True) is not None
        assert user_admin_refusal(RoleBinding("User:bob", role), me, adding=False) is not None
    for target in ("User:ua", "User:*", "Group:admins"):
        assert user_admin_refusal(RoleBinding(target, "DeveloperRead", ResourceType.TOPIC, "t"), me,
                                  adding=True) is not None
        assert user_admin_refusal(RoleBinding(target, "DeveloperRead", ResourceType.TOPIC, "t"), me,
                                  adding=False) is None
    assert user_admin_refusal(RoleBinding("User:bob", "ClusterAdmin"), me, adding=True) is None
    assert user_admin_refusal(RoleBinding("Group:devs", "ResourceOwner", ResourceType.TOPIC, "t"), me,
                              adding=True) is None
