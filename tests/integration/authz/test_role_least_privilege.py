"""Least privilege of the predefined roles on kgov's own admin APIs, through a real server.

Each test names an escalation path the control-plane review found: UserAdmin held CLUSTER ALTER (so
it could write ACLs, reset any password, bind SystemAdmin to itself) and USER CREATE_TOKENS on every
owner (a token owned by the admin is a login as the admin); AuditAdmin held ALTER_CONFIGS (quotas)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from kgov.app import build_app
from kgov.settings import Settings
from tests.support.server import serve_app

ADMIN = ("admin", "correct-horse-battery")
UA = ("uadmin", "uadmin-password-1")
AUD = ("auditor", "auditor-password-1")
DEV = ("dev", "developer-password-1")
ROLES = "/security/1.0/principals"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("kgov"), cluster_id="c1",
                        admin={"user": ADMIN[0], "password": ADMIN[1]},
                        sasl={"failed_authentication_delay_ms": 0, "delegation_token_secret_key": "role-tests-token-key-0123"})
    with serve_app(build_app(settings)) as url, httpx.Client(base_url=url, auth=ADMIN, timeout=10) as admin:
        for name, password in (UA, AUD, DEV):
            assert admin.put(f"/v1/scram/users/{name}", json={"password": password}).status_code == 201
        assert admin.post(f"{ROLES}/User:{UA[0]}/roles/UserAdmin", json={}).status_code == 204
        assert admin.post(f"{ROLES}/User:{AUD[0]}/roles/AuditAdmin", json={}).status_code == 204
        assert admin.post(f"{ROLES}/User:carol/roles/SystemAdmin", json={}).status_code == 204
        assert admin.put(f"/v1/groups/Group:admins/members/User:{UA[0]}").status_code == 204
        yield url


def client(base: str, auth: tuple[str, str]) -> httpx.Client:
    return httpx.Client(base_url=base, auth=auth, timeout=10)


def holders(base: str, role: str) -> list[str]:
    with client(base, ADMIN) as admin:
        r = admin.get(f"/security/1.0/lookup/role/{role}/resource/Topic/name/t")
        assert r.status_code == 200
        return list(r.json())


@pytest.mark.parametrize("role", ["SystemAdmin", "ClusterAdmin", "ResourceOwner", "Operator"])
def test_user_admin_cannot_bind_a_role_to_itself(base: str, role: str) -> None:
    with client(base, UA) as ua:
        r = ua.post(f"{ROLES}/User:{UA[0]}/roles/{role}", json={})
    assert r.status_code == 403, r.text
    assert f"User:{UA[0]}" not in holders(base, role)


def test_user_admin_cannot_bind_a_role_to_a_group_it_is_in_or_to_everyone(base: str) -> None:
    with client(base, UA) as ua:
        assert ua.post(f"{ROLES}/Group:admins/roles/ClusterAdmin", json={}).status_code == 403
        assert ua.post(f"{ROLES}/User:*/roles/ClusterAdmin", json={}).status_code == 403
        body = {"resourcePatterns": [{"resourceType": "TOPIC", "name": "t", "patternType": "LITERAL"}]}
        assert ua.post(f"{ROLES}/User:*/roles/ResourceOwner/bindings", json=body).status_code == 403
    assert holders(base, "ClusterAdmin") == []
    assert holders(base, "ResourceOwner") == []


def test_user_admin_cannot_make_anyone_system_admin_nor_remove_one(base: str) -> None:
    with client(base, UA) as ua:
        assert ua.post(f"{ROLES}/User:dev/roles/SystemAdmin", json={}).status_code == 403
        assert ua.post(f"{ROLES}/User:dev/roles/UserAdmin", json={}).status_code == 403
        r = ua.delete(f"{ROLES}/User:carol/roles/SystemAdmin")
    assert r.status_code == 403
    assert "SystemAdmin" in r.json()["message"]
    assert holders(base, "SystemAdmin") == ["User:carol"]
    assert holders(base, "UserAdmin") == [f"User:{UA[0]}"]


def test_user_admin_manages_the_other_roles_of_other_principals(base: str) -> None:
    body = {"resourcePatterns": [{"resourceType": "TOPIC", "name": "orders-", "patternType": "PREFIXED"}]}
    with client(base, UA) as ua:
        assert ua.post(f"{ROLES}/User:dev/roles/DeveloperRead/bindings", json=body).status_code == 204
        assert ua.post(f"{ROLES}/User:dev/roles/Operator", json={}).status_code == 204
        assert ua.get(f"{ROLES}/User:dev/roles/DeveloperRead/resources").json() == [
            {"resourceType": "TOPIC", "name": "orders-", "patternType": "PREFIXED"}]
        assert ua.request("DELETE", f"{ROLES}/User:dev/roles/DeveloperRead/bindings", json=body).status_code == 204
        assert ua.delete(f"{ROLES}/User:dev/roles/Operator").status_code == 204
        assert ua.get(f"{ROLES}/User:dev/roles/DeveloperRead/resources").json() == []


def test_user_admin_cannot_write_acls_credentials_or_clients(base: str) -> None:
    acl = {"resource_type": "TOPIC", "resource_name": "*", "pattern_type": "LITERAL", "principal": f"User:{UA[0]}",
           "host": "*", "operation": "ALL", "permission": "ALLOW"}
    with client(base, UA) as ua:
        assert ua.post("/v3/clusters/c1/acls", json=acl).status_code == 403
        assert ua.put(f"/v1/scram/users/{ADMIN[0]}", json={"password": "taken-over-password"}).status_code == 403
        assert ua.post("/v1/oauth/clients", json={"client_id": "svc-ua", "client_secret": "s" * 20}).status_code == 403
        assert ua.put("/v1/groups/Group:admins/members/User:dev").status_code == 403
    with client(base, ADMIN) as admin:
        assert admin.get("/v3/clusters/c1/acls", params={"principal": f"User:{UA[0]}"}).json()["data"] == []
        assert admin.get("/v1/oauth/clients").json() == []
        assert admin.get("/v1/groups").json() == {"Group:admins": [f"User:{UA[0]}"]}


def test_user_admin_cannot_get_a_token_for_another_owner_nor_see_theirs(base: str) -> None:
    with client(base, ADMIN) as admin:
        own = admin.post("/v1/delegation-tokens", json={})
        assert own.status_code == 201
    with client(base, UA) as ua:
        assert ua.post("/v1/delegation-tokens", json={"owner": f"User:{ADMIN[0]}"}).status_code == 403
        seen = ua.get("/v1/delegation-tokens").json()
    assert own.json()["token_id"] not in [t["token_id"] for t in seen]


def test_audit_admin_reads_but_cannot_change_quotas(base: str) -> None:
    change = {"entity": {"user": "dev"}, "set": {"producer_byte_rate": 1}}
    with client(base, AUD) as aud:
        assert aud.get("/v1/quotas").status_code == 200
        assert aud.put("/v1/quotas", json=change).status_code == 403
    with client(base, ADMIN) as admin:
        assert admin.get("/v1/quotas").json() == []


def test_a_deny_of_describe_on_the_cluster_takes_user_admins_binding_right(base: str) -> None:
    denied = ("uadmin2", "uadmin2-password-1")
    deny = {"resource_type": "CLUSTER", "resource_name": "kafka-cluster", "pattern_type": "LITERAL",
            "principal": f"User:{denied[0]}", "host": "*", "operation": "DESCRIBE", "permission": "DENY"}
    with client(base, ADMIN) as admin:
        assert admin.put(f"/v1/scram/users/{denied[0]}", json={"password": denied[1]}).status_code == 201
        assert admin.post(f"{ROLES}/User:{denied[0]}/roles/UserAdmin", json={}).status_code == 204
        assert admin.post("/v3/clusters/c1/acls", json=deny).status_code == 201
    with client(base, denied) as ua:
        assert ua.post(f"{ROLES}/User:dev/roles/Operator", json={}).status_code == 403
    assert "User:dev" not in holders(base, "Operator")
