"""Access control of the registry: SUBJECT ACLs (LITERAL and PREFIXED) through the real authorizer."""

from __future__ import annotations

import json
from collections.abc import Callable

from fastapi import FastAPI
from fastapi.testclient import TestClient

from audit.model import EventType
from authz.model import Acl, Operation, PatternType, Permission, Principal, ResourceType
from tests.integration.registry.conftest import basic

SCHEMA = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]})
OTHER = json.dumps({"type": "record", "name": "Payment", "fields": [{"name": "id", "type": "long"}]})


def grant(app: FastAPI, user: str, name: str, pattern: PatternType, *operations: Operation,
          resource_type: ResourceType = ResourceType.SUBJECT) -> None:
    acls = [Acl(resource_type, name, pattern, f"User:{user}", "*", op, Permission.ALLOW) for op in operations]
    errors = app.state.authorizer.create_acls(acls, actor=Principal("User", "admin"))
    assert errors == [None] * len(acls)


def test_a_team_owns_its_prefix_and_nothing_else(app: FastAPI) -> None:
    grant(app, "alice", "orders-", PatternType.PREFIXED, Operation.READ, Operation.WRITE, Operation.DELETE)
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("alice")) as alice:
        payment_id = admin.post("/subjects/payments-value/versions", json={"schema": OTHER}).json()["id"]
        created = alice.post("/subjects/orders-value/versions", json={"schema": SCHEMA})
        assert created.status_code == 200
        denied = alice.post("/subjects/payments-value/versions", json={"schema": SCHEMA})
        assert (denied.status_code, denied.json()["error_code"]) == (403, 40301)
        assert alice.get("/subjects").json() == ["orders-value"]
        assert admin.get("/subjects").json() == ["orders-value", "payments-value"]
        assert alice.get(f"/schemas/ids/{created.json()['id']}").status_code == 200
        assert alice.get(f"/schemas/ids/{payment_id}").status_code == 403
        assert alice.get("/subjects/payments-value/versions").status_code == 403
        assert [s["subject"] for s in alice.get("/schemas").json()] == ["orders-value"]
        assert alice.delete("/subjects/payments-value").status_code == 403
        assert alice.delete("/subjects/orders-value").json() == [1]
        # changing the level of a subject is ALTER_CONFIGS, not WRITE; global config needs the cluster
        assert alice.put("/config/orders-value", json={"compatibility": "NONE"}).status_code == 403
        assert alice.put("/config", json={"compatibility": "NONE"}).status_code == 403
        assert alice.put("/mode", json={"mode": "READONLY"}).status_code == 403
        assert admin.put("/config", json={"compatibility": "NONE"}).status_code == 200
    denials = [e for e in app.state.audit.events
               if e.type is EventType.AUTHORIZATION and not e.data["authorizationInfo"]["granted"]]
    assert {(e.data["authenticationInfo"]["principal"], e.data["authorizationInfo"]["resourceName"])
            for e in denials} >= {("User:alice", "payments-value"), ("User:alice", "kafka-cluster")}
    changes = [e for e in app.state.audit.events if e.type is EventType.SCHEMA_CHANGE]
    assert [(e.data["authenticationInfo"]["principal"], e.data["methodName"]) for e in changes] == [
        ("User:admin", "schema-registry.schema.register"), ("User:alice", "schema-registry.schema.register"),
        ("User:alice", "schema-registry.subject.delete")]


def test_literal_grant_and_cluster_alter(app: FastAPI) -> None:
    grant(app, "bob", "exact-value", PatternType.LITERAL, Operation.READ, Operation.WRITE)
    grant(app, "bob", "kafka-cluster", PatternType.LITERAL, Operation.ALTER, resource_type=ResourceType.CLUSTER)
    with TestClient(app, headers=basic("bob")) as bob:
        assert bob.post("/subjects/exact-value/versions", json={"schema": SCHEMA}).status_code == 200
        assert bob.post("/subjects/exact-value2/versions", json={"schema": SCHEMA}).status_code == 403
        assert bob.put("/mode", json={"mode": "READONLY"}).json() == {"mode": "READONLY"}


def test_every_request_is_authenticated(app: FastAPI) -> None:
    with TestClient(app) as anonymous:
        r = anonymous.get("/subjects")
        assert (r.status_code, r.json()["error_code"]) == (401, 40101)
        assert "WWW-Authenticate" in r.headers
        assert anonymous.get("/schemas/ids/1").status_code == 401
        wrong = anonymous.get("/subjects", headers={"Authorization": "Basic YWRtaW46bm9wZQ=="})
        assert wrong.status_code == 401


def test_anonymous_read_when_switched_on(registry_app_factory: Callable[..., FastAPI]) -> None:
    app = registry_app_factory(anonymous_read=True)
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app) as anonymous:
        schema_id = admin.post("/subjects/open-value/versions", json={"schema": SCHEMA}).json()["id"]
        assert anonymous.get("/subjects").json() == ["open-value"]
        assert anonymous.get(f"/schemas/ids/{schema_id}").status_code == 200
        assert anonymous.post("/subjects/open-value", json={"schema": SCHEMA}).json()["id"] == schema_id
        assert anonymous.post("/subjects/open-value/versions", json={"schema": OTHER}).status_code == 401
        assert anonymous.delete("/subjects/open-value").status_code == 401
        # an authenticated caller is still held to the ACLs
        with TestClient(app, headers=basic("alice")) as alice:
            assert alice.get("/subjects").json() == []
