"""Data contracts over HTTP on SQLite and PostgreSQL: an explicit `version` in a registration
(`confluent:version`), the config's default and override metadata and rule sets, and metadata-only
registrations, as Confluent's `KafkaSchemaRegistry.register` / `maybePopulateFromPrevious` do them."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from authz.database import open_engine
from authz.model import Acl, Operation, PatternType, Permission, Principal, ResourceType
from registry import store
from registry.model import RegisterRequest, RegistryError
from registry.service import SchemaRegistry, anyone_may_read
from registry.store import install_schema
from tests.integration.registry.conftest import basic
from tests.integration.registry.test_api import USER_V1, USER_V2, error, record

pytestmark = pytest.mark.postgres

USER_V3 = record("User", ("name", "string"), ("tag", ["null", "string"]), doc="v3")
RULE_A = {"name": "a", "kind": "CONDITION", "mode": "WRITE", "type": "CEL", "expr": "true"}
RULE_B = {"name": "b", "kind": "CONDITION", "mode": "WRITE", "type": "CEL", "expr": "false"}


@pytest.fixture
def client(registry_app_factory: Callable[..., FastAPI], db_url: str) -> Iterator[TestClient]:
    with TestClient(registry_app_factory(db=db_url), headers=basic("admin")) as c:
        yield c


def post(client: TestClient, subject: str, **body: Any) -> Any:
    return client.post(f"/subjects/{subject}/versions", json=body)


def ok(client: TestClient, subject: str, **body: Any) -> dict[str, Any]:
    r = post(client, subject, **body)
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_explicit_version_must_be_the_next_and_is_recorded(client: TestClient) -> None:
    client.put("/config/s", json={"compatibility": "NONE"})
    first = ok(client, "s", schema=USER_V1, version=1)
    assert (first["version"], first["metadata"]) == (1, {"properties": {"confluent:version": "1"}})
    r = post(client, "s", schema=USER_V2, version=5)
    assert error(r) == (422, 42201)
    assert r.json()["message"] == "Version is not one more than previous version"
    assert client.get("/subjects/s/versions").json() == [1]  # nothing stored
    # The same schema again with the current version is not "already registered": it asks for version 1,
    # and the subject's next is 2.
    assert error(post(client, "s", schema=USER_V1, version=1)) == (422, 42201)
    second = ok(client, "s", schema=USER_V2, version=2)
    assert second["metadata"] == {"properties": {"confluent:version": "2"}}
    # Once the metadata carries it, confluent:version follows every new version, also without `version`.
    third = ok(client, "s", schema=USER_V3)
    assert (third["version"], third["metadata"]) == (3, {"properties": {"confluent:version": "3"}})
    # And re-registering a stored schema without `version` answers it (confluent:version set aside).
    assert ok(client, "s", schema=USER_V2)["version"] == 2
    assert client.get("/subjects/s/versions").json() == [1, 2, 3]


def test_version_is_checked_after_compatibility_and_kept_with_metadata(client: TestClient) -> None:
    ok(client, "c", schema=USER_V1, metadata={"properties": {"owner": "team-a"}})
    incompatible = record("User", ("name", "int"))
    assert error(post(client, "c", schema=incompatible, version=7)) == (409, 409)  # 409 before 42201
    created = ok(client, "c", schema=USER_V2, version=2)
    assert created["metadata"] == {"properties": {"confluent:version": "2", "owner": "team-a"}}


def test_version_minus_one_answers_an_equal_latest_else_registers(client: TestClient) -> None:
    # schema-registry#3361: -1 asks that the schema be the latest; an equivalent latest is answered.
    client.put("/config/l", json={"compatibility": "NONE"})
    first = ok(client, "l", schema=USER_V1)
    assert ok(client, "l", schema=USER_V1, version=-1)["version"] == 1
    ok(client, "l", schema=USER_V2)
    back = ok(client, "l", schema=USER_V1, version=-1)  # equal to version 1, but that is not the latest
    assert back["version"] == 3
    assert back["metadata"] == {"properties": {"confluent:version": "3"}} and back["id"] != first["id"]
    again = ok(client, "l", schema=USER_V1, version=-1)  # equal to the latest once confluent:version is aside
    assert (again["version"], again["id"]) == (3, back["id"])
    assert client.get("/subjects/l/versions").json() == [1, 2, 3]


def test_import_mode_keeps_the_given_version_and_adds_nothing(client: TestClient) -> None:
    client.put("/config", json={"overrideMetadata": {"properties": {"env": "prod"}}})
    client.put("/mode?force=true", json={"mode": "IMPORT"})
    imported = ok(client, "i", schema=USER_V1, id=50, version=7)
    assert imported["version"] == 7 and "metadata" not in imported
    client.put("/mode", json={"mode": "READWRITE"})
    assert client.get("/subjects/i/versions/7").json().get("metadata") is None
    nxt = ok(client, "i", schema=USER_V2, version=8)  # READWRITE again: the next after 7 is 8
    assert nxt["metadata"] == {"properties": {"confluent:version": "8", "env": "prod"}}


def test_config_defaults_and_overrides_merge_in_confluents_order(client: TestClient) -> None:
    config = {
        "defaultMetadata": {"properties": {"owner": "default", "tier": "gold"}, "sensitive": ["ssn"]},
        "overrideMetadata": {"properties": {"env": "prod", "owner": "override"}},
        "defaultRuleSet": {"domainRules": [RULE_A]},
        "overrideRuleSet": {"domainRules": [RULE_B]},
    }
    r = client.put("/config/m", json=config)
    assert r.status_code == 200 and r.json() == config
    assert client.get("/config/m").json() == {"compatibilityLevel": "BACKWARD", **config}
    created = ok(client, "m", schema=USER_V1, metadata={"properties": {"owner": "request", "team": "x"},
                                                         "sensitive": ["pan"]})
    # default < request < override, per property; sensitive is the union; rules by name, override last
    assert created["metadata"] == {"properties": {"env": "prod", "owner": "override", "team": "x", "tier": "gold"},
                                   "sensitive": ["pan", "ssn"]}
    assert created["ruleSet"] == {"domainRules": [RULE_A, RULE_B]}
    assert client.get("/subjects/m/versions/1").json()["metadata"] == created["metadata"]
    # The same registration again is that version (the merge gives the same annotations).
    again = ok(client, "m", schema=USER_V1, metadata={"properties": {"owner": "request", "team": "x"},
                                                       "sensitive": ["pan"]})
    assert (again["version"], again["id"]) == (1, created["id"])
    # Without metadata: the previous version's is the request's part, so nothing changes either.
    assert ok(client, "m", schema=USER_V1)["version"] == 1
    # A rule of the request with the override's name is replaced by the override's.
    mine = {**RULE_B, "expr": "mine"}
    v2 = ok(client, "m", schema=USER_V2, ruleSet={"domainRules": [mine]})
    assert v2["ruleSet"] == {"domainRules": [RULE_A, RULE_B]} and v2["version"] == 2


def test_global_and_context_config_apply_and_subject_config_replaces_them(client: TestClient) -> None:
    client.put("/config", json={"defaultMetadata": {"properties": {"source": "global"}}})
    assert ok(client, "g", schema=USER_V1)["metadata"] == {"properties": {"source": "global"}}
    client.put("/config/:.ctx:", json={"defaultMetadata": {"properties": {"source": "context"}}})
    assert ok(client, ":.ctx:g", schema=USER_V1)["metadata"] == {"properties": {"source": "context"}}
    client.put("/config/h", json={"compatibility": "NONE"})  # a subject config without defaults
    assert "metadata" not in ok(client, "h", schema=USER_V1)


def test_metadata_only_registration_copies_the_latest_schema(client: TestClient) -> None:
    address = record("Address", ("street", "string"))
    ok(client, "addr", schema=address)
    person = record("Person", ("home", "Address"))
    refs = [{"name": "Address", "subject": "addr", "version": 1}]
    first = ok(client, "p", schema=person, references=refs)
    created = ok(client, "p", metadata={"properties": {"owner": "b"}})  # no schema at all
    assert created["version"] == 2 and created["id"] != first["id"]
    assert created["references"] == refs and created["metadata"] == {"properties": {"owner": "b"}}
    assert client.get("/subjects/p/versions/2/schema").json() == client.get("/subjects/p/versions/1/schema").json()
    rules = ok(client, "p", schema="", ruleSet={"domainRules": [RULE_A]})  # empty string: the same
    assert rules["version"] == 3 and rules["metadata"] == {"properties": {"owner": "b"}}  # metadata inherited
    assert rules["ruleSet"] == {"domainRules": [RULE_A]}
    # Again with the same annotations: that version, nothing new.
    assert ok(client, "p", schema=" ", ruleSet={"domainRules": [RULE_A]})["version"] == 3


def test_empty_schema_without_a_live_version_is_42201_and_lookups_still_refuse_it(client: TestClient) -> None:
    r = post(client, "none", metadata={"properties": {"a": "b"}})
    assert error(r) == (422, 42201) and r.json()["message"] == "Empty schema"
    ok(client, "gone", schema=USER_V1)
    client.delete("/subjects/gone")
    assert error(post(client, "gone", schema="")) == (422, 42201)  # only soft-deleted versions: none live
    ok(client, "kept", schema=USER_V1)
    assert error(client.post("/subjects/kept", json={"schema": ""})) == (422, 42201)
    assert error(client.post("/compatibility/subjects/kept/versions/latest", json={"schema": ""})) == (422, 42201)
    client.put("/mode?force=true", json={"mode": "IMPORT"})
    assert error(post(client, "kept", schema="", id=9, version=2)) == (422, 42201)  # IMPORT copies nothing


@pytest.mark.parametrize("body", [
    {"defaultMetadata": ["x"]},
    {"overrideMetadata": {"properties": {"a": 1}}},
    {"defaultMetadata": {"tags": {"f": "PII"}}},
    {"defaultMetadata": {"sensitive": "ssn"}},
    {"defaultRuleSet": {"domainRules": ["rule"]}},
    {"overrideRuleSet": "x"},
])
def test_malformed_config_annotations_are_422_and_change_nothing(client: TestClient, body: dict[str, Any]) -> None:
    before = client.get("/config").json()
    assert error(client.put("/config", json=body)) == (422, 422)
    assert client.get("/config").json() == before


@pytest.mark.parametrize("body", [
    {"metadata": {"properties": {"a": ["b"]}}},
    {"metadata": {"sensitive": [1]}},
    {"ruleSet": {"migrationRules": [1]}},
])
def test_malformed_request_annotations_are_422(client: TestClient, body: dict[str, Any]) -> None:
    assert error(post(client, "bad", schema=USER_V1, **body)) == (422, 422)
    assert error(client.get("/subjects/bad/versions")) == (404, 40401)


def test_a_writer_without_read_gets_only_id_and_version(registry_app_factory: Callable[..., FastAPI],
                                                        db_url: str) -> None:
    # A metadata-only registration copies the subject's latest schema, and merges annotations from it
    # and from the config: a writer that may not READ the subject must not receive them.
    app = registry_app_factory(db=db_url)
    acl = Acl(ResourceType.SUBJECT, "orders", PatternType.LITERAL, "User:bob", "*", Operation.WRITE,
              Permission.ALLOW)
    assert app.state.authorizer.create_acls([acl], actor=Principal("User", "admin")) == [None]
    with TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("bob")) as bob:
        secret = record("Secret", ("ssn", "string"))
        admin.put("/config/orders", json={"overrideMetadata": {"properties": {"owner": "hidden"}}})
        first = ok(admin, "orders", schema=secret)
        assert first["schema"] and first["metadata"] == {"properties": {"owner": "hidden"}}
        r = post(bob, "orders", metadata={"properties": {"note": "x"}})
        assert r.status_code == 200 and r.json() == {"id": first["id"] + 1, "version": 2}
        again = post(bob, "orders", schema=secret, metadata={"properties": {"note": "x"}})
        assert again.json() == {"id": first["id"] + 1, "version": 2}  # answered, not added
        assert bob.get("/subjects/orders/versions/2").status_code == 403
        stored = admin.get("/subjects/orders/versions/2").json()
        assert stored["schema"] == first["schema"]
        assert stored["metadata"] == {"properties": {"note": "x", "owner": "hidden"}}


def test_explicit_version_is_a_compare_and_set_under_concurrency(db_url: str) -> None:
    # Writers that all ask for version 2 at once (each through its own registry, as several nodes
    # would): the check runs under the writers' lock, so exactly one wins and the others are 42201.
    engine = open_engine(db_url)
    install_schema(engine)
    try:
        SchemaRegistry(engine).register("cas", RegisterRequest(USER_V1), normalize=False, may_read=anyone_may_read)
        start = threading.Barrier(4)
        outcomes: list[object] = []

        def attempt(n: int) -> None:
            registry = SchemaRegistry(engine)
            schema = json.dumps({"type": "record", "name": "User", "fields": [
                {"name": "name", "type": "string"}, {"name": f"f{n}", "type": ["null", "string"], "default": None}]})
            start.wait()
            try:
                created, _ = registry.register("cas", RegisterRequest(schema, version=2), normalize=False,
                                               may_read=anyone_may_read)
                outcomes.append(created.version)
            except RegistryError as exc:
                outcomes.append(exc.code)

        threads = [threading.Thread(target=attempt, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(outcomes, key=str) == sorted([2, 42201, 42201, 42201], key=str)
        with engine.connect() as conn:
            assert [v.version for v in store.subject_versions(conn, "cas")] == [1, 2]
    finally:
        engine.dispose()
