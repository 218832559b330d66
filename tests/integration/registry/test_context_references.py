"""References resolve in the context of the referring subject, as Confluent's `qualifySubjectWithParent`:
`x` referenced from `:.ctx:orders` is `:.ctx:x`; `:.other:x` stays as written (`registry.model.reference_subject`).

The default context's `x` and `:.ctx:x` both define `com.acme.Address`, with different fields, so a field
default of `Order` that fits only one of them shows which one a registration used.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from authz.database import bump_version, transaction
from authz.model import Operation, PatternType
from registry import store
from tests.integration.registry.conftest import basic
from tests.integration.registry.test_access import denials_of, grant

STREET = json.dumps({"type": "record", "name": "Address", "namespace": "com.acme",
                     "fields": [{"name": "street", "type": "string"}]})
ZIP = json.dumps({"type": "record", "name": "Address", "namespace": "com.acme",
                  "fields": [{"name": "zip", "type": "int"}]})
FITS_ZIP, FITS_STREET = {"zip": 5}, {"street": "Main"}


def order(default: dict[str, Any] | None = None, name: str = "Order") -> str:
    field: dict[str, Any] = {"name": "address", "type": "com.acme.Address"}
    if default is not None:
        field["default"] = default
    return json.dumps({"type": "record", "name": name, "namespace": "com.acme", "fields": [field]})


def refs(subject: str, name: str = "com.acme.Address") -> list[dict[str, Any]]:
    return [{"name": name, "subject": subject, "version": 1}]


def body(subject: str, default: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"schema": order(default), "references": refs(subject)}


# Self-contained: BACKWARD compatible with an Order whose Address is ZIP, not with one whose Address is STREET.
INLINE_ZIP = json.dumps({"type": "record", "name": "Order", "namespace": "com.acme", "fields": [
    {"name": "address", "type": json.loads(ZIP)}]})


def setup(admin: TestClient) -> None:
    assert admin.post("/subjects/x/versions", json={"schema": STREET}).status_code == 200
    assert admin.post("/subjects/:.ctx:x/versions", json={"schema": ZIP}).status_code == 200


def error(response: Any) -> tuple[int, int, str]:
    return response.status_code, response.json()["error_code"], response.json()["message"]


def test_an_unqualified_reference_takes_the_context_of_its_subject(
        registry_app_factory: Callable[..., FastAPI], db_url: str) -> None:
    app = registry_app_factory(db=db_url)
    with TestClient(app, headers=basic("admin")) as admin:
        setup(admin)
        created = admin.post("/subjects/:.ctx:orders/versions", json=body("x", FITS_ZIP))
        assert created.status_code == 200
        assert created.json()["references"] == refs("x")  # stored and answered as written
        wrong = admin.post("/subjects/:.ctx:orders/versions", json=body("x", FITS_STREET))
        assert error(wrong)[:2] == (422, 42201)
        assert "Invalid default for field address" in error(wrong)[2]
        # the default context is unchanged: `x` is `x` there
        assert error(admin.post("/subjects/orders/versions", json=body("x", FITS_ZIP)))[:2] == (422, 42201)
        assert admin.post("/subjects/orders/versions", json=body("x", FITS_STREET)).status_code == 200

        # lookup and compatibility resolve the same way, through a context base URL too
        found = admin.post("/subjects/:.ctx:orders", json=body("x", FITS_ZIP))
        assert (found.status_code, found.json()["id"]) == (200, created.json()["id"])
        assert admin.post("/contexts/.ctx/subjects/orders", json=body("x", FITS_ZIP)).json()["version"] == 1
        again = admin.post("/contexts/.ctx/subjects/orders/versions", json=body("x", FITS_ZIP)).json()
        assert (again["id"], again["version"]) == (created.json()["id"], 1)  # already registered
        assert admin.post("/compatibility/subjects/:.ctx:orders/versions/latest",
                          json=body("x", FITS_ZIP)).json() == {"is_compatible": True}
        assert error(admin.post("/compatibility/subjects/:.ctx:orders/versions/latest",
                                json=body("x", FITS_STREET)))[:2] == (422, 42201)
        # the stored versions are parsed in their subject's context too
        assert admin.post("/compatibility/subjects/:.ctx:orders/versions/latest",
                          json={"schema": INLINE_ZIP}).json() == {"is_compatible": True}
        assert admin.post("/compatibility/subjects/orders/versions/latest",
                          json={"schema": INLINE_ZIP}).json() == {"is_compatible": False}


def test_qualified_references_stay_as_written(registry_app_factory: Callable[..., FastAPI], db_url: str) -> None:
    app = registry_app_factory(db=db_url)
    with TestClient(app, headers=basic("admin")) as admin:
        setup(admin)
        assert admin.post("/subjects/:.other:orders/versions", json=body(":.ctx:x", FITS_ZIP)).status_code == 200
        assert admin.post("/subjects/orders/versions", json=body(":.ctx:x", FITS_ZIP)).status_code == 200
        assert admin.post("/subjects/:.ctx:orders/versions", json=body(":.ctx:x", FITS_ZIP)).status_code == 200
        # `:.:x` names the default context from the default context only; from another one Confluent
        # (and kgov) looks up `:.ctx::.:x`: a context cannot reference the default context's subjects
        assert admin.post("/subjects/orders-2/versions", json=body(":.:x", FITS_STREET)).status_code == 200
        assert error(admin.post("/subjects/:.ctx:orders-2/versions", json=body(":.:x"))) == (
            422, 42201, "Invalid schema: reference 'com.acme.Address' to subject ':.ctx::.:x' version 1 does not exist")


def test_ids_are_shared_only_where_references_resolve_alike(
        registry_app_factory: Callable[..., FastAPI], db_url: str) -> None:
    app = registry_app_factory(db=db_url)
    with TestClient(app, headers=basic("admin")) as admin:
        setup(admin)
        assert admin.post("/subjects/:.ctx2:x/versions", json={"schema": ZIP}).status_code == 200

        def id_of(subject: str, reference: str) -> int:
            response = admin.post(f"/subjects/{subject}/versions", json=body(reference))
            assert response.status_code == 200, response.text
            return int(response.json()["id"])

        in_ctx = id_of(":.ctx:orders", "x")
        assert id_of(":.ctx:payments", "x") == in_ctx  # same context: same schema, same id
        # ids are global: `x` from .ctx2 is another subject (even with the same text), so another id
        assert id_of(":.ctx2:orders", "x") != in_ctx
        assert id_of(":.ctx2:payments", ":.ctx:x") not in (in_ctx, id_of(":.ctx2:orders", "x"))
        in_default = id_of("orders", "x")
        assert in_default != in_ctx
        assert id_of("payments", "x") == in_default


def test_deletes_and_referencedby_follow_the_resolved_subject(
        registry_app_factory: Callable[..., FastAPI], db_url: str) -> None:
    app = registry_app_factory(db=db_url)
    with TestClient(app, headers=basic("admin")) as admin:
        setup(admin)
        in_ctx = admin.post("/subjects/:.ctx:orders/versions", json=body("x", FITS_ZIP)).json()["id"]
        in_default = admin.post("/subjects/orders/versions", json=body("x", FITS_STREET)).json()["id"]
        assert admin.get("/subjects/:.ctx:x/versions/1/referencedby").json() == [in_ctx]
        assert admin.get("/contexts/.ctx/subjects/x/versions/1/referencedby").json() == [in_ctx]
        assert admin.get("/subjects/x/versions/1/referencedby").json() == [in_default]

        in_use = (422, 42206, "One or more references exist to the schema {subject=:.ctx:x,version=1}.")
        assert error(admin.delete("/subjects/:.ctx:x/versions/1")) == in_use
        assert error(admin.delete("/subjects/:.ctx:x")) == in_use
        assert error(admin.delete("/subjects/x/versions/1"))[:2] == (422, 42206)
        # once the default context's referrer is gone, its `x` may go; `:.ctx:x` is still referenced
        assert admin.delete("/subjects/orders").json() == [1]
        assert admin.delete("/subjects/x/versions/1").json() == 1
        assert error(admin.delete("/subjects/:.ctx:x/versions/1")) == in_use

        # a soft-deleted referrer keeps `:.ctx:x` from being deleted permanently
        assert admin.delete("/subjects/:.ctx:orders").json() == [1]
        assert admin.get("/subjects/:.ctx:x/versions/1/referencedby").json() == []
        assert admin.get("/subjects/:.ctx:x/versions/1/referencedby?deleted=true").json() == [in_ctx]
        assert admin.delete("/subjects/:.ctx:x/versions/1").json() == 1
        assert error(admin.delete("/subjects/:.ctx:x/versions/1?permanent=true")) == in_use
        assert admin.delete("/subjects/:.ctx:orders?permanent=true").json() == [1]
        assert admin.delete("/subjects/:.ctx:x/versions/1?permanent=true").json() == 1


ROUTES = ("/subjects/:.ctx:orders/versions", "/subjects/:.ctx:orders",
          "/compatibility/subjects/:.ctx:orders/versions", "/contexts/.ctx/subjects/orders/versions")


@pytest.mark.parametrize("route", ROUTES)
def test_the_read_check_is_on_the_subject_looked_up(app: FastAPI, route: str) -> None:
    """READ on the default context's `x` is not READ on `:.ctx:x`, directly or through a stored reference."""
    for user in ("alice", "bob"):
        grant(app, user, ":.ctx:orders", PatternType.PREFIXED, Operation.READ, Operation.WRITE)
        grant(app, user, ":.ctx:holder", PatternType.LITERAL, Operation.READ)
    grant(app, "alice", ":.ctx:x", PatternType.LITERAL, Operation.READ)
    grant(app, "bob", "x", PatternType.LITERAL, Operation.READ)
    holder = {"schema": order(name="Holder"), "references": refs("x")}  # in .ctx: `:.ctx:x`
    through = {"schema": order(name="Order"), "references": refs("holder", "com.acme.Holder")}
    through["schema"] = through["schema"].replace("com.acme.Address", "com.acme.Holder")
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("alice")) as alice, \
            TestClient(app, headers=basic("bob")) as bob:
        setup(admin)
        assert admin.post("/subjects/:.ctx:holder/versions", json=holder).status_code == 200
        assert admin.put("/config/:.ctx:orders", json={"compatibility": "NONE"}).status_code == 200
        if route != ROUTES[0]:  # (so that the lookup finds both)
            for sent in (body("x", FITS_ZIP), through):
                assert admin.post(ROUTES[0], json=sent).status_code == 200
        for sent in (body("x", FITS_ZIP), through):
            assert alice.post(route, json=sent).status_code == 200, sent
            assert error(bob.post(route, json=sent)) == (
                403, 40301, "User User:bob is not authorized to READ SUBJECT :.ctx:x")
    assert denials_of(app, "x") == []
    assert [d[:2] for d in denials_of(app, ":.ctx:x")] == [("User:bob", "Read")] * 2


def test_a_schema_stored_before_references_took_their_context(
        registry_app_factory: Callable[..., FastAPI], db_url: str) -> None:
    """Before, an id was shared by the same text and references as written whatever the context: such
    an id is parsed in the context of each subject using it, and re-registering it there finds it."""
    app = registry_app_factory(db=db_url)
    with TestClient(app, headers=basic("admin")) as admin:
        setup(admin)
        shared = admin.post("/subjects/orders/versions", json=body("x")).json()["id"]
        with transaction(app.state.engine) as conn:  # what the old code did for `:.ctx:orders`
            bump_version(conn, store.COMPONENT)
            store.insert_version(conn, ":.ctx:orders", 1, shared)
            store.set_high_water(conn, ":.ctx:orders", 1)
        assert admin.post("/compatibility/subjects/orders/versions/latest",
                          json={"schema": INLINE_ZIP}).json() == {"is_compatible": False}
        assert admin.post("/compatibility/subjects/:.ctx:orders/versions/latest",
                          json={"schema": INLINE_ZIP}).json() == {"is_compatible": True}
        again = admin.post("/subjects/:.ctx:orders/versions", json=body("x")).json()
        assert (again["id"], again["version"]) == (shared, 1)
        payments = admin.post("/subjects/:.ctx:payments/versions", json=body("x")).json()["id"]
        assert payments != shared
        assert admin.get("/subjects/:.ctx:x/versions/1/referencedby").json() == [shared, payments]
        assert admin.get("/subjects/x/versions/1/referencedby").json() == [shared]


def test_a_stored_reference_takes_the_context_of_the_version_holding_it(app: FastAPI) -> None:
    """`:.other:holder` references `x`: that is `:.other:x`, also for a schema of `:.ctx:orders` that
    references `:.other:holder` (parsed, and checked for READ, as `:.other:x`)."""
    grant(app, "bob", ":.ctx:orders", PatternType.PREFIXED, Operation.READ, Operation.WRITE)
    grant(app, "bob", ":.other:holder", PatternType.LITERAL, Operation.READ)
    grant(app, "bob", ":.ctx:x", PatternType.LITERAL, Operation.READ)
    grant(app, "alice", ":.", PatternType.PREFIXED, Operation.READ, Operation.WRITE)
    holder = {"schema": order(name="Holder"), "references": refs("x")}
    sent = {"schema": json.dumps({"type": "record", "name": "Order", "namespace": "com.acme", "fields": [
        {"name": "holder", "type": "com.acme.Holder", "default": {"address": FITS_STREET}}]}),
        "references": refs(":.other:holder", "com.acme.Holder")}
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("alice")) as alice, \
            TestClient(app, headers=basic("bob")) as bob:
        setup(admin)  # `:.ctx:x` is ZIP
        assert admin.post("/subjects/:.other:x/versions", json={"schema": STREET}).status_code == 200
        assert admin.post("/subjects/:.other:holder/versions", json=holder).status_code == 200
        assert alice.post("/subjects/:.ctx:orders/versions", json=sent).status_code == 200
        assert error(bob.post("/subjects/:.ctx:orders", json=sent)) == (
            403, 40301, "User User:bob is not authorized to READ SUBJECT :.other:x")
