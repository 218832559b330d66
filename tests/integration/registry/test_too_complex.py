"""A schema too complex to check for compatibility is refused through HTTP (422/42201, naming the
setting), nothing is stored, and the registry serves the next client as usual."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from fastapi import FastAPI
from fastapi.testclient import TestClient

from authz.model import Operation, PatternType
from tests.integration.registry.conftest import basic
from tests.integration.registry.test_access import grant
from tests.unit.registry.compat.test_work_budget import STOPS_WITHIN_S, json_union

TOO_COMPLEX = "Schema is too complex to check for compatibility: more than"


def body(members: int, *, changed: bool) -> dict[str, str]:
    return {"schemaType": "JSON", "schema": json.dumps(json_union(members, changed=changed))}


def test_a_too_complex_update_is_refused_and_stores_nothing(app: FastAPI) -> None:
    grant(app, "alice", "huge", PatternType.LITERAL, Operation.READ, Operation.WRITE)
    grant(app, "bob", "orders", PatternType.LITERAL, Operation.READ, Operation.WRITE)
    with TestClient(app, headers=basic("alice")) as alice, TestClient(app, headers=basic("bob")) as bob:
        # The first version has nothing to be compared with: any schema within the body limit is stored.
        first = alice.post("/subjects/huge/versions", json=body(2000, changed=False))
        assert first.status_code == 200, first.text
        started = time.monotonic()
        refused = alice.post("/subjects/huge/versions", json=body(2000, changed=True))
        assert time.monotonic() - started < STOPS_WITHIN_S
        assert refused.status_code == 422
        assert refused.json()["error_code"] == 42201
        assert refused.json()["message"].startswith(TOO_COMPLEX)
        assert refused.json()["message"].endswith("subschema comparisons (registry.max_diff_work)")

        assert alice.get("/subjects/huge/versions").json() == [1]
        assert alice.post("/subjects/huge", json=body(2000, changed=True)).json()["error_code"] == 40403
        # Not even an id was spent on it.
        created = bob.post("/subjects/orders/versions", json={"schema": '{"type": "string"}'})
        assert created.status_code == 200, created.text
        assert created.json()["id"] == first.json()["id"] + 1


def test_a_too_complex_compatibility_test_fails_closed(app: FastAPI) -> None:
    with TestClient(app, headers=basic("admin")) as admin:
        assert admin.post("/subjects/huge/versions", json=body(2000, changed=False)).status_code == 200
        plain = admin.post("/compatibility/subjects/huge/versions/latest", json=body(2000, changed=True))
        assert plain.status_code == 422
        assert plain.json()["error_code"] == 42201
        assert plain.json()["message"].startswith(TOO_COMPLEX)
        # Verbose answers an invalid schema as Confluent does: incompatible, with the reason.
        verbose = admin.post("/compatibility/subjects/huge/versions?verbose=true", json=body(2000, changed=True))
        assert verbose.status_code == 200
        assert verbose.json()["is_compatible"] is False
        assert verbose.json()["messages"][0].startswith(TOO_COMPLEX)


def test_the_bound_comes_from_the_settings(registry_app_factory: Callable[..., FastAPI]) -> None:
    grown = {"schemaType": "JSON",
             "schema": json.dumps({"anyOf": [*json_union(20, changed=False)["anyOf"], {"type": "null"}]})}
    for max_diff_work, expected in ((50, 422), (10_000, 200)):
        with TestClient(registry_app_factory(max_diff_work=max_diff_work), headers=basic("admin")) as admin:
            assert admin.post("/subjects/s/versions", json=body(20, changed=False)).status_code == 200
            answer = admin.post("/subjects/s/versions", json=grown)
            assert answer.status_code == expected, answer.text
            if expected == 422:
                assert "more than 50 subschema comparisons (registry.max_diff_work)" in answer.json()["message"]
                assert admin.get("/subjects/s/versions").json() == [1]
