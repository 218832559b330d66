"""References need READ on every subject they reach: a caller may not use them to learn which versions
of other subjects exist, or what those schemas hold (registry.service, `_ReferenceWalk`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from authz.model import Action, Decision, Operation, PatternType, RequestContext
from tests.integration.registry.conftest import basic
from tests.integration.registry.test_access import ADDRESS, answer, denials_of, grant, holder

# The three routes that resolve a caller's references (compatibility in both forms, terse and verbose).
ROUTES = ("/subjects/orders-value/versions", "/subjects/orders-value",
          "/compatibility/subjects/orders-value/versions", "/compatibility/subjects/orders-value/versions/latest",
          "/compatibility/subjects/orders-value/versions?verbose=true")


def ref(subject: str, version: int = 1, name: str = "com.acme.Address") -> list[dict[str, Any]]:
    return [{"name": name, "subject": subject, "version": version}]


def order(subject: str, version: int = 1) -> dict[str, Any]:
    """The body of `Order`, whose one field is the `com.acme.Address` that `subject` v`version` defines."""
    return {"schema": holder("Order"), "references": ref(subject, version)}


def setup(admin: TestClient) -> None:
    """`common-value` and `secret-value` v1 both define com.acme.Address; `orders-value` v1 uses the first."""
    for subject in ("common-value", "secret-value"):
        assert admin.post(f"/subjects/{subject}/versions", json={"schema": ADDRESS}).status_code == 200
    assert admin.post("/subjects/orders-value/versions", json=order("common-value")).status_code == 200


def test_a_caller_with_read_on_the_referenced_subject_is_served_as_before(
        registry_app_factory: Callable[..., FastAPI], db_url: str) -> None:
    app = registry_app_factory(db=db_url)
    grant(app, "alice", "orders-", PatternType.PREFIXED, Operation.READ, Operation.WRITE)
    grant(app, "alice", "common-value", PatternType.LITERAL, Operation.READ)  # READ only: no WRITE on it
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("alice")) as alice:
        setup(admin)
        for route in ROUTES[1:]:  # lookup and compatibility: the same answer as the super user's
            assert answer(alice.post(route, json=order("common-value"))) == answer(
                admin.post(route, json=order("common-value"))), route
        assert alice.post(ROUTES[1], json=order("common-value")).json()["version"] == 1
        assert alice.post(ROUTES[2], json=order("common-value")).json() == {"is_compatible": True}
        registered = alice.post("/subjects/orders-archive/versions", json=order("common-value"))
        assert registered.status_code == 200
        assert registered.json()["references"] == ref("common-value")
        assert registered.json()["id"] == admin.get("/subjects/orders-value/versions/1").json()["id"]
        assert alice.post("/subjects/common-value/versions", json={"schema": ADDRESS}).status_code == 403
    assert denials_of(app, "common-value") == [("User:alice", "Write", "/subjects/common-value/versions")]


@pytest.mark.parametrize("route", ROUTES)
def test_a_forbidden_reference_answers_the_same_whether_or_not_it_exists(
        registry_app_factory: Callable[..., FastAPI], db_url: str, route: str) -> None:
    app = registry_app_factory(db=db_url)
    grant(app, "alice", "orders-", PatternType.PREFIXED, Operation.READ, Operation.WRITE)
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("alice")) as alice:
        setup(admin)
        if route != ROUTES[0]:  # (a registration would add a version)
            # Unchecked, the answers differ: that is what a caller could learn. The existing version is
            # used; the missing one is a 42201 that names it.
            assert admin.post(route, json=order("secret-value", 2)).content != admin.post(
                route, json=order("secret-value")).content

        refused = alice.post(route, json=order("secret-value"))
        assert (refused.status_code, refused.json()) == (403, {
            "error_code": 40301, "message": "User User:alice is not authorized to READ SUBJECT secret-value"})
        assert answer(alice.post(route, json=order("secret-value", 2))) == answer(refused)  # a missing version
        missing = answer(alice.post(route, json=order("hidden-value")))  # a missing subject, of the same length
        assert (missing[0], missing[1], missing[2].replace(b"hidden-value", b"secret-value")) == answer(refused)
    path = route.partition("?")[0]
    assert denials_of(app, "secret-value") == [("User:alice", "Read", path)] * 2
    assert denials_of(app, "hidden-value") == [("User:alice", "Read", path)]
    assert app.state.schema_registry.versions("orders-value") == [1]  # nothing was stored


def test_every_referenced_subject_is_checked_before_any_is_looked_up(app: FastAPI) -> None:
    grant(app, "alice", "orders-", PatternType.PREFIXED, Operation.READ, Operation.WRITE)
    grant(app, "alice", "common-value", PatternType.LITERAL, Operation.READ)
    two = {"schema": holder("Order"), "references": [*ref("common-value", 7, "x.Missing"), *ref("secret-value")]}
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("alice")) as alice:
        setup(admin)
        # a missing version of a readable subject comes first, and still the answer is the refusal
        assert admin.post(ROUTES[0], json=two).json()["error_code"] == 42201
        refused = alice.post(ROUTES[0], json=two)
        assert (refused.status_code, refused.json()["message"]) == (
            403, "User User:alice is not authorized to READ SUBJECT secret-value")


class DecisionSpy:
    """Records what the real authorizer is asked for through the HTTP path, in order."""

    def __init__(self, app: FastAPI) -> None:
        self.asked: list[tuple[str, str, str]] = []
        authorizer = app.state.authorizer
        decide = authorizer.authorize_http

        def spy(ctx: RequestContext, action: Action, method_name: str) -> Decision:
            self.asked.append((str(ctx.principal), action.resource_name, action.operation.name))
            decision: Decision = decide(ctx, action, method_name)
            return decision

        authorizer.authorize_http = spy


def test_a_subject_is_checked_once_per_request(app: FastAPI) -> None:
    grant(app, "alice", "orders-", PatternType.PREFIXED, Operation.READ, Operation.WRITE)
    grant(app, "alice", "common-value", PatternType.LITERAL, Operation.READ)
    both = {"schema": holder("Order"), "references": [*ref("common-value"), *ref("common-value", 1, "y.Other")]}
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("alice")) as alice:
        setup(admin)
        spy = DecisionSpy(app)
        # a registration prepares twice (before and under the writers' lock); each decision is made once
        assert alice.post("/subjects/orders-new/versions", json=both).status_code == 200
        assert spy.asked == [("User:alice", "orders-new", "WRITE"), ("User:alice", "common-value", "READ")]


# ---------------------------------------------------------------------------- references of references

HIDDEN = json.dumps({"type": "record", "name": "Hidden", "namespace": "com.secret",
                     "fields": [{"name": "pin", "type": "string"}]})
ENVELOPE = json.dumps({"type": "record", "name": "Envelope", "namespace": "com.acme",
                       "fields": [{"name": "hidden", "type": "com.secret.Hidden"}]})


def probe(type_name: str) -> dict[str, Any]:
    """A schema that references `shared-value` (which references `private-value`) and uses `type_name`:
    it parses only if that type is in scope, so its answer tells whether `private-value` defines it."""
    schema = json.dumps({"type": "record", "name": "Probe", "namespace": "com.acme",
                         "fields": [{"name": "p", "type": type_name}]})
    return {"schema": schema, "references": ref("shared-value", 1, "com.acme.Envelope")}


def setup_nested(admin: TestClient) -> None:
    assert admin.post("/subjects/private-value/versions", json={"schema": HIDDEN}).status_code == 200
    shared = {"schema": ENVELOPE, "references": ref("private-value", 1, "com.secret.Hidden")}
    assert admin.post("/subjects/shared-value/versions", json=shared).status_code == 200
    assert admin.post("/subjects/orders-value/versions", json=probe("com.secret.Hidden")).status_code == 200


def test_references_of_referenced_versions_need_read_too(
        registry_app_factory: Callable[..., FastAPI], db_url: str) -> None:
    app = registry_app_factory(db=db_url)
    grant(app, "alice", "orders-", PatternType.PREFIXED, Operation.READ, Operation.WRITE)
    grant(app, "alice", "shared-value", PatternType.LITERAL, Operation.READ)
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("alice")) as alice:
        setup_nested(admin)
        # the probe works for whoever is not checked: a type private-value defines parses, another does not
        assert admin.post(ROUTES[2], json=probe("com.secret.Hidden")).json() == {"is_compatible": True}
        assert admin.post(ROUTES[2], json=probe("com.secret.Nope")).json()["error_code"] == 42201
        assert admin.post(ROUTES[1], json=probe("com.secret.Hidden")).status_code == 200  # now a cached answer

        for route in ROUTES:
            refused = alice.post(route, json=probe("com.secret.Hidden"))
            assert (refused.status_code, refused.json()["message"]) == (
                403, "User User:alice is not authorized to READ SUBJECT private-value"), route
            assert answer(alice.post(route, json=probe("com.secret.Nope"))) == answer(refused), route
        assert len(denials_of(app, "private-value")) == 2 * len(ROUTES)

        grant(app, "alice", "private-value", PatternType.LITERAL, Operation.READ)
        for route in ROUTES[1:]:
            assert answer(alice.post(route, json=probe("com.secret.Hidden"))) == answer(
                admin.post(route, json=probe("com.secret.Hidden"))), route
        assert alice.post("/subjects/orders-probe/versions", json=probe("com.secret.Hidden")).status_code == 200


def json_probe(pointer: str) -> dict[str, Any]:
    """A JSON schema that references `shared-json` (which references `private-json`) and points into the
    document of `private-json`: whether it resolves tells the shape of a schema the caller may not read."""
    schema = json.dumps({"type": "object", "properties": {"x": {"$ref": pointer}}})
    return {"schemaType": "JSON", "schema": schema, "references": ref("shared-json", 1, "shared.json")}


def test_json_documents_reached_through_references_need_read_too(app: FastAPI) -> None:
    grant(app, "alice", "orders-", PatternType.PREFIXED, Operation.READ, Operation.WRITE)
    grant(app, "alice", "shared-json", PatternType.LITERAL, Operation.READ)
    private = json.dumps({"type": "object", "properties": {"pin": {"type": "string", "maxLength": 4}}})
    shared = json.dumps({"type": "object", "properties": {"p": {"$ref": "private.json"}}})
    verbose = "/compatibility/subjects/orders-json/versions?verbose=true"
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("alice")) as alice:
        assert admin.post("/subjects/private-json/versions", json={"schemaType": "JSON", "schema": private}
                          ).status_code == 200
        assert admin.post("/subjects/shared-json/versions", json={
            "schemaType": "JSON", "schema": shared, "references": ref("private-json", 1, "private.json")}
            ).status_code == 200
        # unchecked, the verdict tells which JSON pointers exist in private-json
        assert admin.post(verbose, json=json_probe("private.json#/properties/pin")).json()["is_compatible"]
        assert not admin.post(verbose, json=json_probe("private.json#/properties/nope")).json()["is_compatible"]
        refused = alice.post(verbose, json=json_probe("private.json#/properties/pin"))
        assert (refused.status_code, refused.json()["message"]) == (
            403, "User User:alice is not authorized to READ SUBJECT private-json")
        assert answer(alice.post(verbose, json=json_probe("private.json#/properties/nope"))) == answer(refused)


def test_a_cached_lookup_answer_is_checked_for_each_caller(app: FastAPI) -> None:
    grant(app, "alice", "orders-", PatternType.PREFIXED, Operation.READ)
    grant(app, "alice", "shared-value", PatternType.LITERAL, Operation.READ)
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("alice")) as alice:
        setup_nested(admin)
        for _ in range(2):  # the second is answered from the lookup cache (the first warmed it)
            assert admin.post(ROUTES[1], json=probe("com.secret.Hidden")).json()["version"] == 1
            refused = alice.post(ROUTES[1], json=probe("com.secret.Hidden"))
            assert (refused.status_code, refused.json()["error_code"]) == (403, 40301)
            assert "private-value" in refused.json()["message"]
    assert len(denials_of(app, "private-value")) == 2


def test_a_diamond_of_references_is_walked_once_per_version(app: FastAPI) -> None:
    """Ten levels of two subjects, each referencing both of the level below: 2^10 paths to the bottom, and
    yet each version is checked once and looked up a bounded number of times."""
    levels = 10
    grant(app, "alice", "orders-", PatternType.PREFIXED, Operation.READ, Operation.WRITE)
    grant(app, "alice", "level-", PatternType.PREFIXED, Operation.READ)
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("alice")) as alice:
        below: list[dict[str, Any]] = []
        for level in range(levels):
            for side in "ab":
                fields = [{"name": f"f{i}", "type": r["name"]} for i, r in enumerate(below)]
                schema = json.dumps({"type": "record", "name": f"com.acme.L{level}{side}",
                                     "fields": fields or [{"name": "x", "type": "int"}]})
                assert admin.post(f"/subjects/level-{level}{side}/versions",
                                  json={"schema": schema, "references": below}).status_code == 200
            below = [{"name": f"com.acme.L{level}{side}", "subject": f"level-{level}{side}", "version": 1}
                     for side in "ab"]
        registry = app.state.schema_registry
        looked_up: list[str] = []
        versions = registry._versions

        def counting(conn: Any, subject: str) -> Any:
            looked_up.append(subject)
            return versions(conn, subject)

        registry._versions = counting
        spy = DecisionSpy(app)
        top = {"schema": json.dumps({"type": "record", "name": "com.acme.Top", "fields": [
            {"name": "t", "type": f"com.acme.L{levels - 1}a"}]}), "references": below}
        assert alice.post("/subjects/orders-top/versions", json=top).status_code == 200
        assert spy.asked == [("User:alice", "orders-top", "WRITE")] + [
            ("User:alice", f"level-{n}{side}", "READ") for n in range(levels - 1, -1, -1) for side in "ab"]
        # both phases of the registration walk every version once (and look the new subject up)
        assert max(looked_up.count(f"level-{n}{side}") for n in range(levels) for side in "ab") == 2


# ---------------------------------------------------------------------------- contexts and anonymous reads


def test_a_reference_is_checked_under_the_subject_name_it_resolves_to(app: FastAPI) -> None:
    grant(app, "alice", ":.staging:", PatternType.PREFIXED, Operation.READ, Operation.WRITE)
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("alice")) as alice:
        for subject in (":.staging:common-value", ":.secret:common-value", "common-value"):
            assert admin.post(f"/subjects/{subject}/versions", json={"schema": ADDRESS}).status_code == 200
        assert alice.post("/subjects/:.staging:orders-value/versions",
                          json=order(":.staging:common-value")).status_code == 200
        refused = alice.post("/subjects/:.staging:orders-value/versions", json=order(":.secret:common-value"))
        assert (refused.status_code, refused.json()["message"]) == (
            403, "User User:alice is not authorized to READ SUBJECT :.secret:common-value")
        # An unqualified reference names the subject in the context of the referring subject (as in
        # Confluent), and is checked as that: `:.staging:common-value`, which alice may read, not the
        # default context's `common-value`, which she may not. It is stored as written.
        via_context = alice.post("/contexts/.staging/subjects/orders-value/versions", json=order("common-value"))
        assert (via_context.status_code, via_context.json()["version"]) == (200, 2)
        assert alice.get("/subjects/:.staging:orders-value/versions/2").json()["references"] == ref("common-value")
    assert denials_of(app, "common-value") == []
    assert [d[0] for d in denials_of(app, ":.secret:common-value")] == ["User:alice"]


def test_anonymous_reads_with_references_are_unchanged(registry_app_factory: Callable[..., FastAPI]) -> None:
    app = registry_app_factory(anonymous_read=True)
    grant(app, "alice", "orders-value", PatternType.LITERAL, Operation.READ)
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app) as anonymous, \
            TestClient(app, headers=basic("alice")) as alice:
        setup(admin)
        for route in ROUTES[1:]:
            for body in (order("common-value"), order("secret-value"), order("secret-value", 2)):
                assert answer(anonymous.post(route, json=body)) == answer(admin.post(route, json=body)), route
        assert anonymous.post(ROUTES[1], json=order("common-value")).json()["version"] == 1
        # an authenticated caller is still held to the ACLs, references included
        refused = alice.post(ROUTES[1], json=order("common-value"))
        assert (refused.status_code, refused.json()["error_code"]) == (403, 40301)
    assert denials_of(app, "common-value") == [("User:alice", "Read", ROUTES[1])]
