"""Access control of the registry: SUBJECT ACLs (LITERAL and PREFIXED) through the real authorizer."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
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
        assert alice.get(f"/schemas/ids/{payment_id}").status_code == 404  # as if unused
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


# Every route that resolves a schema id (`allow_id`), with the query parameters that change its checks.
ID_ROUTES = ("/schemas/ids/{}", "/schemas/ids/{}?subject=payments-value", "/schemas/ids/{}?fetchMaxId=true",
             "/schemas/ids/{}/schema", "/schemas/ids/{}/subjects", "/schemas/ids/{}/subjects?deleted=true",
             "/schemas/ids/{}/versions", "/schemas/ids/{}/versions?deleted=true")


def answer(response: Any) -> tuple[int, dict[str, str], bytes]:
    return response.status_code, dict(response.headers), response.content


def denials_of(app: FastAPI, subject: str) -> list[tuple[str, str, str]]:
    return [(e.data["authenticationInfo"]["principal"], e.data["authorizationInfo"]["operation"],
             e.data["methodName"]) for e in app.state.audit.events
            if e.type is EventType.AUTHORIZATION and not e.data["authorizationInfo"]["granted"]
            and e.data["authorizationInfo"]["resourceType"] == "Subject"
            and e.data["authorizationInfo"]["resourceName"] == subject]


def test_an_id_the_caller_may_not_read_answers_exactly_as_an_unused_id(app: FastAPI) -> None:
    grant(app, "alice", "orders-", PatternType.PREFIXED, Operation.READ)
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("alice")) as alice:
        payment_id = admin.post("/subjects/payments-value/versions", json={"schema": OTHER}).json()["id"]
        admin.get(f"/schemas/ids/{payment_id}")  # warm the fast path's caches: a denial must still fall through
        denied = {route: answer(alice.get(route.format(payment_id))) for route in ID_ROUTES}
        unused = {"error_code": 40403, "message": f"Schema {payment_id} not found"}
        for route, (status, _, body) in denied.items():
            assert (status, json.loads(body)) == (404, unused), route
            assert b"payments-value" not in body and b"alice" not in body  # the refusal names no subject
        # each refusal is still a denial in the audit trail: alice, READ, the subject that uses the id
        assert denials_of(app, "payments-value") == [
            ("User:alice", "Read", route.format(payment_id).partition("?")[0]) for route in ID_ROUTES]

        admin.delete("/subjects/payments-value")
        admin.delete("/subjects/payments-value?permanent=true")
        for route, before in denied.items():  # the same id, now unused: the same bytes, to anyone
            assert answer(alice.get(route.format(payment_id))) == before, route
            assert answer(admin.get(route.format(payment_id))) == before, route
        never_used = payment_id + 1
        for route in ID_ROUTES:
            assert answer(alice.get(route.format(never_used))) == answer(admin.get(route.format(never_used)))
    assert len(denials_of(app, "payments-value")) == len(ID_ROUTES)  # unused ids deny nothing


def test_callers_who_may_read_an_id_see_what_they_saw_before(app: FastAPI) -> None:
    grant(app, "alice", "orders-", PatternType.PREFIXED, Operation.READ)
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("alice")) as alice:
        shared = admin.post("/subjects/orders-value/versions", json={"schema": SCHEMA}).json()["id"]
        assert admin.post("/subjects/payments-value/versions", json={"schema": SCHEMA}).json()["id"] == shared
        for route in ("/schemas/ids/{}", "/schemas/ids/{}/schema", "/schemas/ids/{}?subject=orders-value"):
            assert answer(alice.get(route.format(shared))) == answer(admin.get(route.format(shared))), route
        assert json.loads(alice.get(f"/schemas/ids/{shared}").json()["schema"]) == json.loads(SCHEMA)
        # one readable subject opens the id; the listings still show only readable subjects
        assert alice.get(f"/schemas/ids/{shared}/subjects").json() == ["orders-value"]
        assert admin.get(f"/schemas/ids/{shared}/subjects").json() == ["orders-value", "payments-value"]
        assert alice.get(f"/schemas/ids/{shared}/versions").json() == [{"subject": "orders-value", "version": 1}]
    assert denials_of(app, "payments-value") == []  # filtering the listings is not a denial


def test_anonymous_id_reads_are_unchanged(registry_app_factory: Callable[..., FastAPI]) -> None:
    app = registry_app_factory(anonymous_read=True)
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app) as anonymous, \
            TestClient(app, headers=basic("alice")) as alice:
        schema_id = admin.post("/subjects/open-value/versions", json={"schema": SCHEMA}).json()["id"]
        for route in ID_ROUTES:
            assert anonymous.get(route.format(schema_id)).status_code == 200, route
            for url in (route.format(schema_id), route.format(schema_id + 1)):
                assert answer(anonymous.get(url)) == answer(admin.get(url)), url
            # an authenticated caller is still held to the ACLs, and told the id is unused
            assert error_of(alice.get(route.format(schema_id))) == (404, 40403, f"Schema {schema_id} not found")
    assert denials_of(app, "open-value") == [("User:alice", "Read", r.format(schema_id).partition("?")[0])
                                             for r in ID_ROUTES]


def error_of(response: Any) -> tuple[int, int, str]:
    body = response.json()
    return response.status_code, body["error_code"], body["message"]


# Every route that names a subject (reads and writes). The caller chose the name, so a 403 tells them
# nothing provided it comes before any lookup: the same bytes whether the subject exists or not.
SCHEMA_BODY = {"schema": SCHEMA}
SUBJECT_ROUTES = [
    ("GET", "/subjects/{}/versions", None), ("GET", "/subjects/{}/versions?deleted=true", None),
    ("GET", "/subjects/{}/versions/1", None), ("GET", "/subjects/{}/versions/latest/schema", None),
    ("GET", "/subjects/{}/versions/1/referencedby", None), ("GET", "/subjects/{}/metadata?key=a&value=b", None),
    ("GET", "/config/{}", None), ("GET", "/mode/{}", None), ("POST", "/subjects/{}", SCHEMA_BODY),
    ("POST", "/compatibility/subjects/{}/versions/latest", SCHEMA_BODY),
    ("POST", "/compatibility/subjects/{}/versions", SCHEMA_BODY), ("POST", "/subjects/{}/versions", SCHEMA_BODY),
    ("DELETE", "/subjects/{}/versions/1", None), ("DELETE", "/subjects/{}", None),
    ("PUT", "/config/{}", {"compatibility": "NONE"}), ("DELETE", "/config/{}", None),
    ("PUT", "/mode/{}", {"mode": "READONLY"}), ("DELETE", "/mode/{}", None),
]


@pytest.mark.parametrize(("method", "route", "body"), SUBJECT_ROUTES,
                         ids=[f"{m} {r}" for m, r, _ in SUBJECT_ROUTES])
def test_a_subject_route_refuses_before_it_looks_the_subject_up(app: FastAPI, method: str, route: str,
                                                                 body: dict[str, str] | None) -> None:
    existing, missing = "payments-value", "vanished-value"  # the same length, so Content-Length is comparable
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("alice")) as alice:
        admin.post(f"/subjects/{existing}/versions", json={"schema": OTHER})
        admin.put(f"/config/{existing}", json={"compatibility": "FULL"})
        admin.put(f"/mode/{existing}", json={"mode": "READWRITE"})
        refused = alice.request(method, route.format(existing), json=body)
        assert refused.status_code == 403 and refused.json()["error_code"] == 40301
        status, headers, content = answer(alice.request(method, route.format(missing), json=body))
        assert (status, headers, content.replace(missing.encode(), existing.encode())) == answer(refused)
    assert len(denials_of(app, existing)) == len(denials_of(app, missing)) == 1


def denials(app: FastAPI) -> list[tuple[str, str, str]]:
    return [(e.data["authenticationInfo"]["principal"], e.data["authorizationInfo"]["resourceName"],
             e.data["methodName"]) for e in app.state.audit.events
            if e.type is EventType.AUTHORIZATION and not e.data["authorizationInfo"]["granted"]]


ADDRESS = json.dumps({"type": "record", "name": "Address", "namespace": "com.acme",
                      "fields": [{"name": "street", "type": "string"}]})
ADDRESS_REF = [{"name": "com.acme.Address", "subject": "common-value", "version": 1}]


def holder(name: str) -> str:
    """A schema of record `name` whose one field is the referenced `com.acme.Address`."""
    return json.dumps({"type": "record", "name": name, "namespace": "com.acme",
                       "fields": [{"name": "address", "type": "com.acme.Address"}]})


def register_referrers(admin: TestClient) -> tuple[int, int]:
    """`common-value` v1, referenced by `payments-value` (its own id) and by one schema that both
    `orders-value` and `shipments-value` use: (payments' id, the shared id)."""
    admin.post("/subjects/common-value/versions", json={"schema": ADDRESS})
    payments = admin.post("/subjects/payments-value/versions",
                          json={"schema": holder("Payment"), "references": ADDRESS_REF}).json()["id"]
    shared = admin.post("/subjects/orders-value/versions",
                        json={"schema": holder("Order"), "references": ADDRESS_REF}).json()["id"]
    assert admin.post("/subjects/shipments-value/versions",
                      json={"schema": holder("Order"), "references": ADDRESS_REF}).json()["id"] == shared
    return payments, shared


REFERENCED_BY = ("/subjects/common-value/versions/1/referencedby",
                 "/subjects/common-value/versions/latest/referencedby?deleted=true",
                 "/subjects/common-value/versions/1/referencedby?offset=1")


def test_referencedby_lists_only_ids_the_caller_may_read(app: FastAPI) -> None:
    grant(app, "alice", "common-value", PatternType.LITERAL, Operation.READ)
    grant(app, "alice", "orders-", PatternType.PREFIXED, Operation.READ)
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("alice")) as alice:
        payments, shared = register_referrers(admin)
        assert admin.get(REFERENCED_BY[0]).json() == [payments, shared]
        assert alice.get(REFERENCED_BY[0]).json() == [shared]
        assert alice.get(REFERENCED_BY[2]).json() == []  # pages are cut from what the caller may see
        # an id is listed as /schemas/ids/{id} would answer it: a soft-deleted readable subject opens it
        admin.delete("/subjects/orders-value")
        assert alice.get(REFERENCED_BY[0]).json() == [shared]  # shipments-value keeps the id live
        admin.delete("/subjects/shipments-value")
        assert admin.get(REFERENCED_BY[0]).json() == [payments]
        assert alice.get(REFERENCED_BY[0]).json() == []
        assert alice.get(REFERENCED_BY[1]).json() == [shared]
        assert denials(app) == []  # filtering is not a denial
        assert alice.get(f"/schemas/ids/{shared}").status_code == 200
        assert alice.get(f"/schemas/ids/{payments}").status_code == 404


def register_in_contexts(admin: TestClient) -> None:
    for subject in ("default-value", ":.staging:orders-value", ":.secret:payments-value", ":.archive:old-value"):
        assert admin.post(f"/subjects/{subject}/versions", json={"schema": SCHEMA}).status_code == 200
    admin.delete("/subjects/:.archive:old-value")  # a context holding only soft-deleted versions is still listed


CONTEXTS = ("/contexts", "/contexts?contextPrefix=.s", "/contexts?offset=1&limit=1", "/contexts?contextPrefix=.a")


def test_contexts_lists_only_those_holding_a_readable_subject(app: FastAPI) -> None:
    grant(app, "alice", ":.staging:", PatternType.PREFIXED, Operation.READ)
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("alice")) as alice, \
            TestClient(app, headers=basic("bob")) as bob:
        register_in_contexts(admin)
        assert admin.get("/contexts").json() == [".", ".archive", ".secret", ".staging"]
        assert [alice.get(route).json() for route in CONTEXTS] == [[".", ".staging"], [".staging"], [".staging"], []]
        assert bob.get("/contexts").json() == ["."]  # the default context is always there, for clients
        grant(app, "alice", ":.archive:old-value", PatternType.LITERAL, Operation.READ)
        assert alice.get("/contexts").json() == [".", ".archive", ".staging"]
    assert denials(app) == []


def test_filtered_listings_are_unchanged_for_callers_who_may_read_every_subject(
        registry_app_factory: Callable[..., FastAPI]) -> None:
    app = registry_app_factory(anonymous_read=True)
    grant(app, "bob", "*", PatternType.LITERAL, Operation.READ)
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("bob")) as bob, \
            TestClient(app) as anonymous:
        payments, shared = register_referrers(admin)
        register_in_contexts(admin)
        assert [admin.get(route).json() for route in REFERENCED_BY] == [[payments, shared]] * 2 + [[shared]]
        assert [admin.get(route).json() for route in CONTEXTS] == [
            [".", ".archive", ".secret", ".staging"], [".secret", ".staging"], [".archive"], [".archive"]]
        for route in REFERENCED_BY + CONTEXTS:  # the admin's answers are those of the code before filtering
            assert answer(bob.get(route)) == answer(admin.get(route)) == answer(anonymous.get(route)), route
    assert denials(app) == []


@pytest.mark.parametrize("route", ["/config/__GLOBAL", "/mode/__GLOBAL"])
def test_a_subject_level_grant_cannot_reach_the_global_config_or_mode(app: FastAPI, route: str) -> None:
    """The global level is stored under the subject key `__GLOBAL`, a name no subject may have. A caller
    allowed ALTER_CONFIGS on every subject (or on a prefix of `__GLOBAL`) must not reset the global
    config or mode through the subject route: that needs CLUSTER ALTER (`DELETE /config`, `/mode`)."""
    grant(app, "alice", "*", PatternType.LITERAL, Operation.ALTER_CONFIGS, Operation.READ)
    grant(app, "bob", "__", PatternType.PREFIXED, Operation.ALTER_CONFIGS, Operation.READ)
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("alice")) as alice, \
            TestClient(app, headers=basic("bob")) as bob:
        assert admin.put("/config", json={"compatibility": "FULL"}).status_code == 200
        assert admin.put("/mode", json={"mode": "READONLY"}).status_code == 200
        for caller in (alice, bob):
            refused = caller.delete(route)
            assert (refused.status_code, refused.json()["error_code"]) == (422, 42208), refused.text
            assert caller.put(route, json={"compatibility": "NONE", "mode": "READWRITE"}).status_code == 422
        assert admin.get("/config").json() == {"compatibilityLevel": "FULL"}
        assert admin.get("/mode").json() == {"mode": "READONLY"}
        assert alice.delete("/config").status_code == 403  # the global routes stay the cluster's


def test_the_empty_subjects_level_is_audited_as_its_own_not_as_the_global_one(app: FastAPI) -> None:
    """`/config/` and `/mode/` name the subject "" (Confluent keeps it as `__EMPTY`), authorized as that
    subject; the audit trail must not record its change as one of the global level."""
    with TestClient(app, headers=basic("admin")) as admin:
        assert admin.put("/config/", json={"compatibility": "NONE"}).status_code == 200
        assert admin.put("/mode/", json={"mode": "READONLY"}).status_code == 200
        assert admin.delete("/config/").status_code == 200
        assert admin.delete("/mode/").status_code == 200
        assert admin.get("/config").json() == {"compatibilityLevel": "BACKWARD"}
        assert admin.get("/mode").json() == {"mode": "READWRITE"}
    changes = [(e.data["methodName"], e.data["resourceName"]) for e in app.state.audit.events
               if e.type is EventType.CONFIG_CHANGE]
    assert changes == [("schema-registry.config.update", ""), ("schema-registry.mode.update", ""),
                       ("schema-registry.config.delete", ""), ("schema-registry.mode.delete", "")]
