"""Odd input on every package's routes of the assembled control plane, over SQLite and PostgreSQL: a clear
4xx in each package's error shape, the same on both databases, never a 500 (PostgreSQL refuses NUL in text,
SQLite and PostgreSQL refuse integers past 64 bits)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from kgov.app import build_app
from kgov.settings import Settings

ADMIN_PW = "admin-password-for-tests"
ADMIN = {"Authorization": "Basic " + base64.b64encode(f"admin:{ADMIN_PW}".encode()).decode()}
ACL = {"resource_type": "TOPIC", "resource_name": "t", "pattern_type": "LITERAL", "principal": "User:x",
       "host": "*", "operation": "READ", "permission": "ALLOW"}


@pytest.fixture
def client(db_url: str, tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path, db=db_url, admin={"password": ADMIN_PW},
                        sasl={"failed_authentication_delay_ms": 0, "delegation_token_secret_key": "k" * 32})
    app = build_app(settings)
    with TestClient(app, headers=ADMIN, raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize(("method", "path", "body", "status"), [
    ("PUT", "/v1/scram/users/a%00b", {"password": "a-long-password"}, 400),
    ("GET", "/v1/scram/users/a%00b", None, 404),
    ("DELETE", "/v1/scram/users/a%00b", None, 400),
    ("POST", "/v1/oauth/clients", {"client_id": "a\x00b", "client_secret": "a-long-enough-secret"}, 400),
    ("DELETE", "/v1/oauth/clients/a%00b", None, 404),
    ("POST", "/v3/clusters/kgov-cluster/acls", {**ACL, "resource_name": "a\x00b"}, 400),
    ("POST", "/v3/clusters/kgov-cluster/acls", {**ACL, "principal": "User:a\x00b"}, 400),
    ("POST", "/v3/clusters/kgov-cluster/acls", {**ACL, "host": "a\x00b"}, 400),
    ("GET", "/v3/clusters/kgov-cluster/acls?resource_name=a%00b", None, 200),  # a filter matching nothing
    ("PUT", "/v1/groups/Group:a%00b/members/User:x", None, 400),
    ("PUT", "/v1/groups/Group:g/members/User:a%00b", None, 400),
    ("POST", "/security/1.0/principals/User:a%00b/roles/Operator", {}, 400),
    ("POST", "/v1/delegation-tokens", {"renewers": ["User:a\x00b"]}, 400),
    ("POST", "/v1/delegation-tokens", {"owner": "User:a\x00b"}, 400),
    ("PUT", "/v1/quotas", {"entity": {"user": "a\x00b"}, "set": {"producer_byte_rate": 1000}}, 400),
])
def test_a_nul_in_a_name_is_refused_alike_on_both_databases(client: TestClient, method: str, path: str,
                                                            body: object, status: int) -> None:
    r = client.request(method, path, json=body)
    assert r.status_code == status, r.text
    if status >= 400:
        assert set(r.json()) == {"error_code", "message"}


@pytest.mark.parametrize("path", ["/schemas/ids/99999999999999999999", "/schemas/ids/99999999999999999999/schema",
                                  "/schemas/ids/99999999999999999999/subjects",
                                  "/schemas/ids/99999999999999999999/versions", "/schemas/ids/2147483648",
                                  # and below it: SQLite cannot bind past -2**63 (an OverflowError)
                                  "/schemas/ids/-99999999999999999999", "/schemas/ids/-99999999999999999999/schema",
                                  "/schemas/ids/-99999999999999999999/subjects",
                                  "/schemas/ids/-99999999999999999999/versions", "/schemas/ids/-2147483649",
                                  # digits str.isdigit() knows but int() does not (the fast path took them)
                                  "/schemas/ids/%C2%B2", "/schemas/ids/1%E2%91%A0"])
def test_a_schema_id_past_int32_is_not_found(client: TestClient, path: str) -> None:
    r = client.get(path)
    assert (r.status_code, r.json()["error_code"]) == (404, 40403), r.text


@pytest.mark.parametrize("value", ["1e400", "-1e400", "NaN", "Infinity"])
def test_a_quota_is_a_finite_number(client: TestClient, value: str) -> None:
    body = '{"entity": {"user": "a"}, "set": {"producer_byte_rate": ' + value + "}}"
    r = client.put("/v1/quotas", content=body, headers={"Content-Type": "application/json"})
    assert (r.status_code, r.json()["error_code"]) == (400, 40001), r.text
    assert client.get("/v1/quotas").json() == []


LONG = "n" * 1100


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/v3/clusters/kgov-cluster/acls", {**ACL, "resource_name": LONG}),
    ("POST", "/v3/clusters/kgov-cluster/acls", {**ACL, "principal": "User:" + LONG}),
    ("POST", "/v3/clusters/kgov-cluster/acls", {**ACL, "host": "h" * 300}),
    ("POST", "/v3/clusters/kgov-cluster/acls:batch", {"data": [ACL, {**ACL, "resource_name": LONG}]}),
    ("PUT", f"/v1/groups/Group:{LONG}/members/User:x", None),
    ("PUT", f"/v1/groups/Group:g/members/User:{LONG}", None),
    ("POST", f"/security/1.0/principals/User:{LONG}/roles/Operator", {}),
    ("POST", "/security/1.0/principals/User:x/roles/DeveloperRead/bindings",
     {"resourcePatterns": [{"resourceType": "Topic", "name": LONG}]}),
    ("POST", "/v1/delegation-tokens", {"owner": "User:" + "o" * 600}),
    ("PUT", "/v1/quotas", {"entity": {"user": "u" * 300}, "set": {"producer_byte_rate": 1000}}),
    ("PUT", "/v1/quotas", {"entity": {"client-id": "c" * 300}, "set": {"producer_byte_rate": 1000}}),
    ("POST", f"/subjects/{LONG}/versions", {"schema": '"string"'}),
    ("PUT", f"/config/{LONG}", {"compatibility": "NONE"}),
    ("PUT", f"/mode/{LONG}", {"mode": "READONLY"}),
    ("POST", "/subjects/s/versions", {"schema": '"string"', "references": [{"name": LONG, "subject": "s",
                                                                            "version": 1}]}),
])
def test_a_name_longer_than_its_column_is_a_bad_request(client: TestClient, method: str, path: str,
                                                        body: object) -> None:
    r = client.request(method, path, json=body)
    assert 400 <= r.status_code < 500, r.text
    assert set(r.json()) == {"error_code", "message"}
    assert client.get("/v3/clusters/kgov-cluster/acls").json()["data"] == []  # a batch is all or nothing
