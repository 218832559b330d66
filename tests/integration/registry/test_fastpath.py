"""`GET /schemas/ids/{id}` from memory: same answers, same access control, changes from other nodes seen."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient

from authz.model import Acl, AclFilter, Operation, PatternType, Permission, Principal, ResourceType
from registry.service import SchemaRegistry
from tests.integration.registry.conftest import basic

SCHEMA = json.dumps({"type": "record", "name": "Fast", "fields": [{"name": "id", "type": "string"}]})


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_repeated_lookups_keep_access_control(app: FastAPI) -> None:
    clock = FakeMonotonic()
    app.state.schema_registry = SchemaRegistry(app.state.engine, monotonic=clock)
    acl = Acl(ResourceType.SUBJECT, "fast-", PatternType.PREFIXED, "User:alice", "*", Operation.READ,
              Permission.ALLOW)
    app.state.authorizer.create_acls([acl], actor=Principal("User", "admin"))
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("alice")) as alice:
        schema_id = admin.post("/subjects/fast-value/versions", json={"schema": SCHEMA}).json()["id"]
        first = alice.get(f"/schemas/ids/{schema_id}")
        assert app.state.schema_registry.cached_usages(schema_id) == ("fast-value",)
        again = alice.get(f"/schemas/ids/{schema_id}")  # answered by the fast path
        assert (again.status_code, again.content, again.headers["content-type"]) == (
            200, first.content, first.headers["content-type"])
        # what Java and Python deserializers send
        java = alice.get(f"/schemas/ids/{schema_id}?fetchMaxId=false&subject=fast-value")
        assert (java.status_code, java.content) == (200, first.content)
        assert alice.get(f"/schemas/ids/{schema_id}?subject=other").content == first.content
        assert alice.get(f"/schemas/ids/{schema_id}?fetchMaxId=true").json()["maxId"] == schema_id
        assert alice.get(f"/schemas/ids/{schema_id}", headers={"Accept": "application/json"}).headers[
            "content-type"] == "application/json"
        assert alice.get(f"/schemas/ids/{schema_id}", headers={"Accept": "text/plain"}).status_code == 406
        bad = alice.get(f"/schemas/ids/{schema_id}", headers={"Authorization": "Basic YWxpY2U6d3Jvbmc="})
        assert bad.status_code == 401
        with TestClient(app, headers=basic("bob")) as bob:
            denied = bob.get(f"/schemas/ids/{schema_id}")  # falls through to the route: answered as unused
            assert (denied.status_code, denied.json()["error_code"]) == (404, 40403)
        app.state.authorizer.delete_acls([AclFilter.exact(acl)], actor=Principal("User", "admin"))
        assert alice.get(f"/schemas/ids/{schema_id}").status_code == 404


def test_a_hard_delete_on_another_node_is_seen_within_the_poll_interval(
    registry_app_factory: Callable[..., FastAPI], tmp_path_factory: object
) -> None:
    node_a = registry_app_factory()
    node_b = registry_app_factory(db=str(node_a.state.engine.url))
    clock = FakeMonotonic()
    node_b.state.schema_registry = SchemaRegistry(node_b.state.engine, monotonic=clock)
    with TestClient(node_a, headers=basic("admin")) as a, TestClient(node_b, headers=basic("admin")) as b:
        schema_id = a.post("/subjects/gone-value/versions", json={"schema": SCHEMA}).json()["id"]
        assert b.get(f"/schemas/ids/{schema_id}").status_code == 200
        assert b.get(f"/schemas/ids/{schema_id}").status_code == 200
        a.delete("/subjects/gone-value")
        a.delete("/subjects/gone-value?permanent=true")
        assert b.get(f"/schemas/ids/{schema_id}").status_code == 200  # within the interval: still cached
        clock.now += 1.0
        gone = b.get(f"/schemas/ids/{schema_id}")
        assert (gone.status_code, gone.json()["error_code"]) == (404, 40403)


def test_lookups_are_cached_until_a_change(registry_app_factory: Callable[..., FastAPI]) -> None:
    node_a = registry_app_factory()
    node_b = registry_app_factory(db=str(node_a.state.engine.url))
    clock = FakeMonotonic()
    node_b.state.schema_registry = SchemaRegistry(node_b.state.engine, monotonic=clock)
    props_ab = '{"type":"record","name":"P","a":1,"b":2,"fields":[{"name":"x","type":"string"}]}'
    spaced = '{"type":"record","name":"P","b":2,"a":1,"fields":[{"name":"x","type":"string"}]}'
    with TestClient(node_a, headers=basic("admin")) as a, TestClient(node_b, headers=basic("admin")) as b:
        a.post("/subjects/look-value/versions", json={"schema": props_ab})
        assert b.post("/subjects/look-value", json={"schema": props_ab}).json()["version"] == 1
        assert b.post("/subjects/look-value", json={"schema": spaced}).status_code == 404  # not normalised
        # a local config change is seen at once
        b.put("/config/look-value", json={"normalize": True})
        assert b.post("/subjects/look-value", json={"schema": spaced}).json()["version"] == 1
        assert b.post("/subjects/look-value", json={"schema": props_ab}).json()["version"] == 1
        # a delete on another node is seen after the poll interval
        a.delete("/subjects/look-value")
        assert b.post("/subjects/look-value", json={"schema": props_ab}).status_code == 200
        clock.now += 1.0
        gone = b.post("/subjects/look-value", json={"schema": props_ab})
        assert (gone.status_code, gone.json()["error_code"]) == (404, 40401)


def test_a_failed_login_on_the_fast_path_counts_once(tmp_path: Path) -> None:
    """With the real credential store: a wrong password on a cached id is one failed attempt (one audit
    event, one step towards the per-source limit, one failure delay), though the fast path tries the
    credentials before the full route answers the 401."""
    from kgov.app import build_app
    from kgov.settings import Settings

    settings = Settings(data_dir=tmp_path, admin={"password": "admin-password-for-tests"},
                        sasl={"failed_authentication_delay_ms": 0, "max_failed_attempts_per_source": 2})
    admin = {"Authorization": "Basic " + base64.b64encode(b"admin:admin-password-for-tests").decode()}
    wrong = {"Authorization": "Basic " + base64.b64encode(b"admin:guess").decode()}
    with TestClient(build_app(settings)) as client:
        schema_id = client.post("/subjects/fast-value/versions", json={"schema": SCHEMA}, headers=admin).json()["id"]
        assert client.get(f"/schemas/ids/{schema_id}", headers=admin).status_code == 200  # now cached
        r = client.get(f"/schemas/ids/{schema_id}", headers=wrong)
        assert (r.status_code, r.json()) == (401, {"error_code": 40101, "message": "Unauthorized"})
        assert r.headers["WWW-Authenticate"].startswith("Basic")
        assert client.get(f"/schemas/ids/{schema_id}", headers=admin).status_code == 200  # 1 of 2 attempts used
    events = [json.loads(line) for line in (tmp_path / "audit" / "events.jsonl").read_text().splitlines()]
    failures = [e for e in events if e["data"].get("result", {}).get("success") is False]
    assert [e["data"]["result"]["reason"] for e in failures] == ["Authentication failed: Invalid username or password"]
