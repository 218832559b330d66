"""The Confluent Schema Registry REST surface, over HTTP, against a real database and the real authorizer.

Expected codes, messages and semantics are Confluent's (RestApiTest and the error table in
shared/reference/schema-registry.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.integration.registry.conftest import basic

V1 = "application/vnd.schemaregistry.v1+json"


def record(name: str, *fields: tuple[str, object], **extra: object) -> str:
    doc: dict[str, object] = {"type": "record", "name": name,
                              "fields": [{"name": n, "type": t} for n, t in fields], **extra}
    return json.dumps(doc)


USER_V1 = record("User", ("name", "string"))
USER_V2 = json.dumps({"type": "record", "name": "User", "fields": [
    {"name": "name", "type": "string"}, {"name": "age", "type": "int", "default": 0}]})
USER_BAD = record("User", ("name", "string"), ("age", "int"))  # new field without default: not BACKWARD


def register(client: TestClient, subject: str, schema: str, **body: object) -> dict[str, object]:
    r = client.post(f"/subjects/{subject}/versions", json={"schema": schema, **body})
    assert r.status_code == 200, r.text
    return dict(r.json())


def error(response: Any) -> tuple[int, int]:
    return response.status_code, response.json()["error_code"]


def test_register_is_idempotent_and_reuses_ids_across_subjects(client: TestClient) -> None:
    first = register(client, "users-value", USER_V1)
    assert (first["id"], first["version"]) == (1, 1)
    assert register(client, "users-value", USER_V1)["version"] == 1
    second = register(client, "users-value", USER_V2)
    assert (second["id"], second["version"]) == (2, 2)
    # an earlier, still registered schema answers its existing version, not a new one
    assert register(client, "users-value", USER_V1) == first
    other = register(client, "other-value", USER_V2)
    assert (other["id"], other["version"]) == (2, 1)
    assert client.get("/subjects").json() == ["other-value", "users-value"]
    assert client.get("/subjects/users-value/versions").json() == [1, 2]
    assert sorted(map(tuple, (d.values() for d in client.get("/schemas/ids/2/versions").json()))) == [
        ("other-value", 1), ("users-value", 2)]
    assert client.get("/schemas/ids/2/subjects").json() == ["other-value", "users-value"]


def test_responses_carry_confluent_shapes_and_content_types(client: TestClient) -> None:
    register(client, "s", USER_V1)
    r = client.get("/schemas/ids/1")
    assert r.headers["content-type"] == V1
    assert r.json() == {"schema": USER_V1.replace(" ", "")}  # AVRO: schemaType omitted, canonical text
    r = client.get("/subjects/s/versions/latest")
    assert r.json() == {"subject": "s", "version": 1, "id": 1, "schema": USER_V1.replace(" ", "")}
    assert client.get("/subjects/s/versions/-1").json()["version"] == 1
    assert client.get("/subjects/s/versions/1/schema").text == USER_V1.replace(" ", "")
    assert client.get("/schemas/ids/1/schema").text == USER_V1.replace(" ", "")
    assert client.get("/schemas/ids/1?fetchMaxId=TRUE").json()["maxId"] == 1
    assert client.get("/schemas/types").json() == ["AVRO", "JSON"]
    r = client.get("/subjects", headers={"Accept": "application/json"})
    assert r.headers["content-type"] == "application/json"
    r = client.get("/subjects", headers={"Accept": "application/vnd.schemaregistry+json; q=0.9, */*; q=0.1"})
    assert r.headers["content-type"] == "application/vnd.schemaregistry+json"
    r = client.get("/subjects", headers={"Accept": "text/html"})
    assert r.status_code == 406
    for ctype in (V1, "application/vnd.schemaregistry+json", "application/json", "application/octet-stream"):
        r = client.post("/subjects/s", content=json.dumps({"schema": USER_V1}), headers={"Content-Type": ctype})
        assert r.status_code == 200, (ctype, r.text)
    r = client.post("/subjects/s", content=json.dumps({"schema": USER_V1}), headers={"Content-Type": "text/xml"})
    assert error(r) == (415, 415)


def test_string_schema_is_stored_in_canonical_form(client: TestClient) -> None:
    register(client, "plain", json.dumps({"type": "string"}))
    assert client.get("/schemas/ids/1").json() == {"schema": '"string"'}


def test_json_schema_reports_its_type(client: TestClient) -> None:
    schema = json.dumps({"type": "object", "properties": {"a": {"type": "string"}}})
    created = register(client, "j", schema, schemaType="JSON")
    assert created["schemaType"] == "JSON"
    assert client.get(f"/schemas/ids/{created['id']}").json()["schemaType"] == "JSON"


def test_lookup(client: TestClient) -> None:
    assert error(client.post("/subjects/nobody", json={"schema": USER_V1})) == (404, 40401)
    register(client, "s", USER_V1)
    found = client.post("/subjects/s", json={"schema": USER_V1})
    assert found.json() == {"subject": "s", "version": 1, "id": 1, "schema": USER_V1.replace(" ", "")}
    assert error(client.post("/subjects/s", json={"schema": USER_V2})) == (404, 40403)
    assert error(client.post("/subjects/s", json={"schema": "{not json"})) == (422, 42201)
    client.delete("/subjects/s/versions/1")
    assert error(client.post("/subjects/s?deleted=False", json={"schema": USER_V1})) == (404, 40401)
    assert client.post("/subjects/s?deleted=TRUE", json={"schema": USER_V1}).json()["version"] == 1


def test_incompatible_schema_is_409_and_level_can_be_changed(client: TestClient) -> None:
    register(client, "s", USER_V1)
    r = client.post("/subjects/s/versions", json={"schema": USER_BAD})
    assert error(r) == (409, 409)
    assert r.json()["message"].startswith(
        'Schema being registered is incompatible with an earlier schema for subject "s", details: [')
    verdict = client.post("/compatibility/subjects/s/versions/latest", json={"schema": USER_BAD})
    assert verdict.json() == {"is_compatible": False}
    verbose = client.post("/compatibility/subjects/s/versions/1?verbose=True", json={"schema": USER_BAD}).json()
    assert verbose["is_compatible"] is False and any("age" in m for m in verbose["messages"])
    assert verbose["messages"][-3:] == ["{oldSchemaVersion: 1}", f"{{oldSchema: '{USER_V1.replace(' ', '')}'}}",
                                        "{validateFields: 'false', compatibility: 'BACKWARD'}"]
    assert client.post("/compatibility/subjects/s/versions?verbose=false", json={"schema": USER_V2}).json() == {
        "is_compatible": True}
    assert client.put("/config/s", json={"compatibility": "none"}).json() == {"compatibility": "NONE"}
    assert client.get("/config/s").json() == {"compatibilityLevel": "NONE"}
    assert register(client, "s", USER_BAD)["version"] == 2


def test_compatibility_endpoints_edge_cases(client: TestClient) -> None:
    # latest of an unknown subject: compatible (RestApiTest.testCompatibilityNonExistentSubject)
    assert client.post("/compatibility/subjects/none/versions/latest", json={"schema": USER_V1}).json() == {
        "is_compatible": True}
    assert error(client.post("/compatibility/subjects/none/versions/3", json={"schema": USER_V1})) == (404, 40402)
    assert error(client.post("/compatibility/subjects/none/versions/zero", json={"schema": USER_V1})) == (
        422, 42202)
    register(client, "s", USER_V1)
    invalid = client.post("/compatibility/subjects/s/versions/latest?verbose=true", json={"schema": "{"})
    assert invalid.json()["is_compatible"] is False and invalid.json()["messages"]
    assert error(client.post("/compatibility/subjects/s/versions/latest", json={"schema": "{"})) == (422, 42201)


def test_transitive_levels_compare_all_live_versions(client: TestClient) -> None:
    client.put("/config/t", json={"compatibility": "NONE"})
    register(client, "t", record("R", ("a", "string")))
    register(client, "t", record("R", ("b", "string")))
    third = record("R", ("b", "string"), ("c", "string"))
    client.put("/config/t", json={"compatibility": "FORWARD_TRANSITIVE"})
    # readers of version 1 need field a, which the new schema lacks
    assert error(client.post("/subjects/t/versions", json={"schema": third})) == (409, 409)
    client.put("/config/t", json={"compatibility": "FORWARD"})
    assert register(client, "t", third)["version"] == 3


def test_schema_type_change_is_incompatible_except_under_none(client: TestClient) -> None:
    register(client, "x", USER_V1)
    json_schema = json.dumps({"type": "object"})
    assert error(client.post("/subjects/x/versions", json={"schema": json_schema, "schemaType": "JSON"})) == (
        409, 409)
    client.put("/config/x", json={"compatibility": "NONE"})
    assert register(client, "x", json_schema, schemaType="JSON")["version"] == 2


def test_soft_and_hard_delete_of_versions(client: TestClient) -> None:
    register(client, "d", USER_V1)
    register(client, "d", USER_V2)
    assert error(client.delete("/subjects/d/versions/1?permanent=true")) == (404, 40407)
    assert client.delete("/subjects/d/versions/1").json() == 1
    assert error(client.delete("/subjects/d/versions/1")) == (404, 40406)
    assert client.get("/subjects/d/versions").json() == [2]
    assert client.get("/subjects/d/versions?deleted=true").json() == [1, 2]
    assert client.get("/subjects/d/versions?deletedOnly=true").json() == [1]
    assert error(client.get("/subjects/d/versions/1")) == (404, 40402)
    assert client.get("/subjects/d/versions/1?deleted=true").json()["deleted"] is True
    assert client.get("/schemas/ids/1").status_code == 200  # the id stays resolvable
    assert client.delete("/subjects/d/versions/1?permanent=true").json() == 1
    assert error(client.get("/subjects/d/versions/1?deleted=true")) == (404, 40402)
    assert error(client.delete("/subjects/d/versions/7")) == (404, 40402)
    assert error(client.delete("/subjects/nope/versions/1")) == (404, 40401)
    assert error(client.delete("/subjects/d/versions/0")) == (422, 42202)
    # version numbers are never reused (RestApiTest.testDeleteSchemaVersionBasic)
    client.delete("/subjects/d/versions/latest")
    assert register(client, "d", USER_V1)["version"] == 3


def test_latest_names_the_latest_live_version_in_permanent_deletes_too(client: TestClient) -> None:
    # Confluent's deleteSchemaVersion resolves `latest` with getLatestVersion, which skips soft-deleted
    # versions: a permanent delete of `latest` meets a live version (40407) or none (40402, "Version -1"),
    # and never destroys the newest soft-deleted version.
    register(client, "dl", USER_V1)
    register(client, "dl", USER_V2)
    assert client.delete("/subjects/dl/versions/2").json() == 2
    assert error(client.delete("/subjects/dl/versions/latest?permanent=true")) == (404, 40407)
    assert client.delete("/subjects/dl/versions/latest?permanent=true").json()["message"] == (
        "Subject 'dl' Version 1 was not deleted first before being permanently deleted")
    assert client.get("/subjects/dl/versions?deleted=true").json() == [1, 2]
    assert client.delete("/subjects/dl/versions/latest").json() == 1
    for permanent in ("true", "false"):
        response = client.delete(f"/subjects/dl/versions/latest?permanent={permanent}")
        assert error(response) == (404, 40402)
        assert response.json()["message"] == "Version -1 not found."
    assert client.get("/subjects/dl/versions?deleted=true").json() == [1, 2]
    assert client.delete("/subjects/dl/versions/2?permanent=true").json() == 2
    assert client.get("/subjects/dl/versions?deleted=true").json() == [1]


def test_latest_is_the_latest_live_version_even_with_deleted(client: TestClient) -> None:
    # Confluent's getSchemaByVersion reads `latest` through getLatestVersion, which skips soft-deleted
    # versions whatever `deleted` says; with none live but some soft-deleted it answers 40402 "Version -1".
    register(client, "dd", USER_V1)
    register(client, "dd", USER_V2)
    client.delete("/subjects/dd/versions/2")
    for version in ("latest", "-1"):
        found = client.get(f"/subjects/dd/versions/{version}?deleted=true").json()
        assert (found["version"], "deleted" in found) == (1, False)
    assert client.get("/subjects/dd/versions/latest/schema?deleted=true").json() == json.loads(USER_V1)
    client.delete("/subjects/dd/versions/1")
    response = client.get("/subjects/dd/versions/latest?deleted=true")
    assert error(response) == (404, 40402)
    assert response.json()["message"] == "Version -1 not found."
    assert error(client.get("/subjects/dd/versions/latest/referencedby")) == (404, 40402)
    assert error(client.get("/subjects/dd/versions/latest")) == (404, 40401)
    assert client.get("/subjects/dd/versions/2?deleted=true").json()["deleted"] is True


def test_re_registering_a_soft_deleted_schema_replaces_its_soft_deleted_version(client: TestClient) -> None:
    # Confluent's KafkaSchemaRegistry.register tombstones the subject's soft-deleted versions of the same
    # id ("Tombstone previous version with the same ID"): one version per schema id in a subject.
    register(client, "rr", USER_V1)
    register(client, "rr", USER_V2)
    client.delete("/subjects/rr/versions/1")
    assert register(client, "rr", USER_V1)["version"] == 3
    assert client.get("/subjects/rr/versions?deleted=true").json() == [2, 3]
    assert client.get("/schemas/ids/1/versions?deleted=true").json() == [{"subject": "rr", "version": 3}]
    assert error(client.get("/subjects/rr/versions/1?deleted=true")) == (404, 40402)
    # another subject's soft-deleted version of the id is left alone
    register(client, "other", USER_V1)
    client.delete("/subjects/other/versions/1")
    client.delete("/subjects/rr/versions/3")
    assert register(client, "rr", USER_V1)["version"] == 4
    assert client.get("/subjects/other/versions?deleted=true").json() == [1]


def test_a_soft_deleted_version_still_referenced_is_kept_when_its_schema_returns(client: TestClient) -> None:
    address = record("Address", ("street", "string"), namespace="com.acme")
    register(client, "addr", address)
    person = json.dumps({"type": "record", "name": "Person", "namespace": "com.acme",
                         "fields": [{"name": "home", "type": "com.acme.Address"}]})
    refs = [{"name": "com.acme.Address", "subject": "addr", "version": 1}]
    register(client, "pers", person, references=refs)
    client.delete("/subjects/pers/versions/1")
    client.delete("/subjects/addr/versions/1")
    register(client, "addr", address)
    # the soft-deleted `pers` version (its id still readable) still names addr version 1
    assert client.get("/subjects/addr/versions?deleted=true").json() == [1, 2]
    assert client.get("/subjects/addr/versions/1/referencedby?deleted=true").json() == [2]


def test_a_schema_sent_with_its_references_inlined_is_the_version_that_references_them(client: TestClient) -> None:
    # Confluent's register and lookUpSchemaUnderSubject: a schema without references that equals (Avro
    # Java's Schema.equals, references resolved) a version with references is that version. A Java
    # producer whose generated class inlines the referenced type registers such a text.
    address = {"type": "record", "name": "Address", "namespace": "com.acme",
               "fields": [{"name": "street", "type": "string"}]}
    register(client, "addr", json.dumps(address))
    person = json.dumps({"type": "record", "name": "Person", "namespace": "com.acme",
                         "fields": [{"name": "home", "type": "com.acme.Address"}]})
    refs = [{"name": "com.acme.Address", "subject": "addr", "version": 1}]
    assert (register(client, "pers", person, references=refs)["id"], 1) == (2, 1)
    inlined = json.dumps({"type": "record", "name": "Person", "namespace": "com.acme",
                          "fields": [{"name": "home", "type": {**address, "doc": "docs are not compared"}}]})
    looked_up = client.post("/subjects/pers", json={"schema": inlined}).json()
    assert (looked_up["id"], looked_up["version"]) == (2, 1)
    assert (register(client, "pers", inlined)["id"], client.get("/subjects/pers/versions").json()) == (2, [1])
    # a different type is a new schema
    other = json.dumps({"type": "record", "name": "Person", "namespace": "com.acme", "fields": [
        {"name": "home", "type": {**address, "fields": [{"name": "street", "type": "string", "default": ""}]}}]})
    assert error(client.post("/subjects/pers", json={"schema": other})) == (404, 40403)
    assert register(client, "pers", other)["version"] == 2


def test_lookups_without_metadata_match_annotated_versions_inlined_or_not(client: TestClient) -> None:
    # kgov's departure (README): a lookup that gives no metadata matches whatever the version has.
    address = {"type": "record", "name": "Address", "fields": [{"name": "street", "type": "string"}]}
    register(client, "ad", json.dumps(address))
    person = json.dumps({"type": "record", "name": "Person", "fields": [{"name": "home", "type": "Address"}]})
    refs = [{"name": "Address", "subject": "ad", "version": 1}]
    created = register(client, "pe", person, references=refs, metadata={"properties": {"owner": "a"}})
    inlined = json.dumps({"type": "record", "name": "Person", "fields": [{"name": "home", "type": address}]})
    assert client.post("/subjects/pe", json={"schema": person, "references": refs}).json()["id"] == created["id"]
    assert client.post("/subjects/pe", json={"schema": inlined}).json()["id"] == created["id"]
    other = {"properties": {"owner": "b"}}
    assert error(client.post("/subjects/pe", json={"schema": inlined, "metadata": other})) == (404, 40403)
    # registering the inlined text without metadata takes the version's (inherited), so it is that version
    assert register(client, "pe", inlined)["id"] == created["id"]


def test_subject_delete_rules(client: TestClient) -> None:
    register(client, "sd", USER_V1)
    register(client, "sd", USER_V2)
    assert error(client.delete("/subjects/sd?permanent=true")) == (404, 40405)
    assert client.delete("/subjects/sd?permanent=False").json() == [1, 2]
    assert error(client.delete("/subjects/sd")) == (404, 40404)
    assert client.delete("/subjects/sd").json()["message"] == (
        "Subject 'sd' was soft deleted.Set permanent=true to delete permanently")
    assert client.get("/subjects").json() == []
    assert client.get("/subjects?deleted=true").json() == ["sd"]
    assert error(client.get("/subjects/sd/versions")) == (404, 40401)
    assert error(client.get("/subjects/sd/versions/latest")) == (404, 40401)
    assert client.delete("/subjects/sd?permanent=true").json() == [1, 2]
    assert error(client.delete("/subjects/sd")) == (404, 40401)
    assert client.get("/subjects?deleted=true").json() == []
    # the subject is gone for good: numbering starts again, the schema keeps its global id
    assert register(client, "sd", USER_V1) == {"id": 1, "version": 1, "schema": USER_V1.replace(" ", "")}


def test_references_must_exist_and_block_deletes(client: TestClient) -> None:
    address = record("Address", ("street", "string"), namespace="com.acme")
    register(client, "address", address)
    person = json.dumps({"type": "record", "name": "Person", "namespace": "com.acme",
                         "fields": [{"name": "home", "type": "com.acme.Address"}]})
    missing = [{"name": "com.acme.Address", "subject": "address", "version": 9}]
    assert error(client.post("/subjects/person/versions", json={"schema": person, "references": missing})) == (
        422, 42201)
    refs = [{"name": "com.acme.Address", "subject": "address", "version": 1}]
    created = register(client, "person", person, references=refs)
    assert created["references"] == refs
    assert client.get(f"/schemas/ids/{created['id']}").json()["references"] == refs
    assert client.get("/subjects/address/versions/1/referencedby").json() == [created["id"]]
    assert error(client.delete("/subjects/address/versions/1")) == (422, 42206)
    assert error(client.delete("/subjects/address")) == (422, 42206)
    assert client.post("/subjects/person", json={"schema": person, "references": refs}).json()["version"] == 1
    client.delete("/subjects/person")
    assert client.delete("/subjects/address").json() == [1]  # only soft-deleted referrers remain
    assert error(client.delete("/subjects/address?permanent=true")) == (422, 42206)
    client.delete("/subjects/person?permanent=true")
    assert client.delete("/subjects/address?permanent=true").json() == [1]


def test_normalize_makes_equivalent_spellings_one_schema(client: TestClient) -> None:
    # custom properties in another order: the same schema only once normalised
    ab = '{"type":"record","name":"N","a":1,"b":2,"fields":[{"name":"x","type":"string"}]}'
    ba = '{"type":"record","name":"N","b":2,"a":1,"fields":[{"name":"x","type":"string"}]}'
    first = register(client, "n", ab)
    assert register(client, "n", ba)["version"] == 2
    normal = client.post("/subjects/m/versions?normalize=TRUE", json={"schema": ba}).json()
    again = client.post("/subjects/m/versions?normalize=true", json={"schema": ab}).json()
    assert normal == again and normal["version"] == 1
    assert normal["id"] == first["id"]  # normalised text equals the stored text of `ab`
    assert client.post("/subjects/m?normalize=true", json={"schema": ba}).json()["version"] == 1
    assert error(client.post("/subjects/m", json={"schema": ba})) == (404, 40403)


def test_metadata_and_rule_set_are_stored_and_returned(client: TestClient) -> None:
    metadata = {"properties": {"owner": "team-a"}, "tags": {"name": ["PII"]}}
    rule_set = {"domainRules": [{"name": "r", "kind": "CONDITION", "mode": "WRITE", "type": "CEL",
                                 "expr": "message.name != ''"}]}
    created = register(client, "md", USER_V1, metadata=metadata, ruleSet=rule_set)
    got = client.get(f"/schemas/ids/{created['id']}").json()
    assert (got["metadata"], got["ruleSet"]) == (metadata, rule_set)
    assert client.get("/subjects/md/versions/1").json()["metadata"] == metadata
    # different metadata on the same text is a different schema (and a new id)
    other = register(client, "md", USER_V1, metadata={"properties": {"owner": "team-b"}})
    assert other["id"] != created["id"] and other["version"] == 2


def test_a_registration_without_metadata_takes_the_latest_versions(client: TestClient) -> None:
    # Confluent's register (maybePopulateFromPrevious): metadata and ruleSet absent from the request are
    # the latest live version's, so a producer re-registering its schema finds the version a steward
    # annotated, and a new version keeps the annotations.
    metadata = {"properties": {"owner": "team-a"}}
    rule_set = {"domainRules": [{"name": "r", "kind": "CONDITION", "mode": "WRITE", "type": "CEL", "expr": "true"}]}
    first = register(client, "inh", USER_V1, metadata=metadata, ruleSet=rule_set)
    again = register(client, "inh", USER_V1)
    assert (again["id"], again["version"]) == (first["id"], 1)
    assert client.get("/subjects/inh/versions").json() == [1]
    second = register(client, "inh", USER_V2)
    latest = client.get("/subjects/inh/versions/latest").json()
    assert (latest["version"], latest["metadata"], latest["ruleSet"]) == (2, metadata, rule_set)
    assert client.get(f"/schemas/ids/{second['id']}").json()["metadata"] == metadata
    # what the request gives is kept
    other = register(client, "inh", USER_V2, metadata={"properties": {"owner": "team-b"}})
    assert other["version"] == 3
    assert client.get("/subjects/inh/versions/3").json()["ruleSet"] == rule_set


def test_config_endpoints(client: TestClient) -> None:
    assert client.get("/config").json() == {"compatibilityLevel": "BACKWARD"}
    assert client.put("/config", json={"compatibility": "full"}).json() == {"compatibility": "FULL"}
    assert client.get("/config").json() == {"compatibilityLevel": "FULL"}
    assert error(client.put("/config", json={"compatibility": "SIDEWAYS"})) == (422, 42203)
    r = client.get("/config/s")
    assert error(r) == (404, 40408)
    assert r.json()["message"] == "Subject 's' does not have subject-level compatibility configured"
    assert client.get("/config/s?defaultToGlobal=TRUE").json() == {"compatibilityLevel": "FULL"}
    client.put("/config/s", json={"compatibility": "NONE", "normalize": True})
    assert client.get("/config/s").json() == {"compatibilityLevel": "NONE", "normalize": True}
    assert client.delete("/config/s").json() == {"compatibilityLevel": "NONE", "normalize": True}
    assert error(client.delete("/config/s")) == (404, 40401)
    assert client.delete("/config").json() == {"compatibilityLevel": "FULL"}
    assert client.get("/config").json() == {"compatibilityLevel": "BACKWARD"}
    assert error(client.put("/config/__GLOBAL", json={"compatibility": "NONE"})) == (422, 42208)


def test_mode_endpoints_and_import(client: TestClient) -> None:
    assert client.get("/mode").json() == {"mode": "READWRITE"}
    assert error(client.get("/mode/s")) == (404, 40409)
    assert client.get("/mode/s?defaultToGlobal=true").json() == {"mode": "READWRITE"}
    assert error(client.put("/mode", json={"mode": "SIDEWAYS"})) == (422, 42204)
    assert client.put("/mode", json={"mode": "import"}).json() == {"mode": "IMPORT"}
    # in IMPORT mode every registration names its id; without one it is refused
    assert error(client.post("/subjects/s/versions", json={"schema": USER_V1})) == (422, 42205)
    imported = register(client, "s", USER_V1, id=42, version=3)
    assert (imported["id"], imported["version"]) == (42, 3)
    r = client.post("/subjects/t/versions", json={"schema": USER_V2, "id": 42, "version": 1})
    assert error(r) == (422, 42205)
    assert r.json()["message"] == "Overwrite new schema with id 42 is not permitted."
    assert client.put("/mode", json={"mode": "READWRITE"}).json() == {"mode": "READWRITE"}
    assert error(client.put("/mode", json={"mode": "IMPORT"})) == (422, 42205)  # not empty any more
    assert client.put("/mode?force=true", json={"mode": "IMPORT"}).status_code == 200
    client.put("/mode", json={"mode": "READWRITE"})
    assert register(client, "s", USER_V2)["id"] == 43  # ids continue after the imported one
    assert client.put("/mode/s", json={"mode": "READONLY"}).json() == {"mode": "READONLY"}
    r = client.post("/subjects/s/versions", json={"schema": USER_V2})
    assert error(r) == (422, 42205) and "read-only" in r.json()["message"]
    assert error(client.delete("/subjects/s/versions/1")) == (422, 42205)
    assert client.delete("/mode/s").json() == {"mode": "READONLY"}
    assert error(client.get("/mode/s")) == (404, 40409)


def test_contexts_metadata_and_associations(client: TestClient) -> None:
    register(client, ":.staging:orders-value", USER_V1)
    register(client, "orders-value", USER_V1)
    assert client.get("/contexts").json() == [".", ".staging"]
    assert client.get("/v1/metadata/id").json()["id"] == "kgov-cluster"
    assert "version" in client.get("/v1/metadata/version").json()
    assert client.get("/").json() == {}
    r = client.get("/associations/resources/-/orders?resourceType=topic&associationType=value")
    assert r.status_code == 404


def test_schema_listing(client: TestClient) -> None:
    register(client, "a-value", USER_V1)
    register(client, "a-value", USER_V2)
    register(client, "b-value", USER_V1)
    listed = client.get("/schemas").json()
    assert [(s["subject"], s["version"], s["id"]) for s in listed] == [("a-value", 1, 1), ("a-value", 2, 2),
                                                                        ("b-value", 1, 1)]
    latest = client.get("/schemas?latestOnly=true&subjectPrefix=a-").json()
    assert [(s["subject"], s["version"]) for s in latest] == [("a-value", 2)]
    assert client.get("/subjects?offset=1&limit=1").json() == ["b-value"]


@pytest.mark.parametrize("body,status,code", [
    (b"{not json", 400, 400),
    (b"[1, 2]", 422, 422),
    (b'{"schema": 5}', 422, 422),
    (b'{"schema": ""}', 422, 42201),
    (b'{"schema": "{\\"type\\": \\"nope\\"}"}', 422, 42201),
    (b'{"schema": "{}", "references": {}}', 422, 422),
    (b'{"schema": "{}", "schemaType": "PROTOBUF"}', 422, 42201),
    (b'{"schema": "{}", "references": [{"name": "a", "subject": "s", "version": 1}, '
     b'{"name": "a", "subject": "t", "version": 1}]}', 422, 42201),
    (b"\xff\xfe", 400, 400),
])
def test_bad_input_never_500(client: TestClient, body: bytes, status: int, code: int) -> None:
    r = client.post("/subjects/bad/versions", content=body, headers={"Content-Type": V1})
    assert error(r) == (status, code), r.text


def test_invalid_schema_message_comes_from_the_parser(client: TestClient) -> None:
    r = client.post("/subjects/bad/versions", json={"schema": '{"type": "record", "name": "X"}'})
    assert error(r) == (422, 42201)
    assert "fields" in r.json()["message"]


def test_oversized_body_is_413(registry_app_factory: Callable[..., FastAPI]) -> None:
    app = registry_app_factory(max_body_bytes=1000)
    with TestClient(app, headers=basic("admin")) as client:
        big = record("Big", *[(f"f{i}", "string") for i in range(100)])
        r = client.post("/subjects/big/versions", json={"schema": big})
        assert error(r) == (413, 42209)
        assert r.json()["message"] == "Request body is larger than 1000 bytes (registry.max_body_bytes)"

        def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds for a streamed body too
            yield b'{"schema": "'
            for _ in range(100):
                yield b"x" * 50
            yield b'"}'

        r = client.post("/subjects/big/versions", content=chunks(), headers={"Content-Type": V1})
        assert error(r) == (413, 42209)


def test_invalid_subjects_and_versions(client: TestClient) -> None:
    assert error(client.post("/subjects/__EMPTY/versions", json={"schema": USER_V1})) == (422, 42208)
    assert error(client.post("/subjects/a%01b/versions", json={"schema": USER_V1})) == (422, 42208)
    register(client, "v", USER_V1)
    r = client.get("/subjects/v/versions/abc")
    assert error(r) == (422, 42202)
    assert r.json()["message"] == ("The specified version 'abc' is not a valid version id. Allowed values are "
                                   'between [1, 2^31-1] and the string "latest"')
    assert error(client.get("/schemas/ids/999")) == (404, 40403)
    assert error(client.get("/schemas/ids/x")) == (404, 40403)


@pytest.mark.postgres
def test_register_delete_and_references_on_both_databases(
    registry_app_factory: Callable[..., FastAPI], db_url: str
) -> None:
    app = registry_app_factory(db=db_url)
    with TestClient(app, headers=basic("admin")) as client:
        address = record("Address", ("street", "string"))
        register(client, "address", address)
        person = json.dumps({"type": "record", "name": "Person", "fields": [{"name": "a", "type": "Address"}]})
        refs = [{"name": "Address", "subject": "address", "version": 1}]
        created = register(client, "person", person, references=refs)
        assert error(client.delete("/subjects/address/versions/1")) == (422, 42206)
        assert register(client, "person2", person, references=refs)["id"] == created["id"]
        assert client.get("/subjects/address/versions/1/referencedby").json() == [created["id"]]
        assert client.delete("/subjects/person").json() == [1]
        assert client.delete("/subjects/person?permanent=true").json() == [1]
        assert client.get("/subjects?deleted=true").json() == ["address", "person2"]
        client.put("/config", json={"compatibility": "FULL_TRANSITIVE"})
        assert client.get("/config").json() == {"compatibilityLevel": "FULL_TRANSITIVE"}
        client.put("/mode/person2", json={"mode": "READONLY"})
        assert error(client.delete("/subjects/person2")) == (422, 42205)


@pytest.mark.postgres
def test_confluent_version_rules_on_both_databases(registry_app_factory: Callable[..., FastAPI], db_url: str) -> None:
    # The rules of the tests above (tombstoned soft-deleted versions, latest live, references inlined,
    # inherited metadata, imported defaults) through each database's SQL.
    app = registry_app_factory(db=db_url)
    with TestClient(app, headers=basic("admin")) as client:
        register(client, "v", USER_V1, metadata={"properties": {"owner": "a"}})
        register(client, "v", USER_V2)
        client.delete("/subjects/v/versions/1")
        assert register(client, "v", USER_V1)["version"] == 3
        assert client.get("/subjects/v/versions?deleted=true").json() == [2, 3]
        assert client.get("/subjects/v/versions/3").json()["metadata"] == {"properties": {"owner": "a"}}
        client.delete("/subjects/v/versions/3")
        assert client.get("/subjects/v/versions/latest?deleted=true").json()["version"] == 2
        assert error(client.delete("/subjects/v/versions/latest?permanent=true")) == (404, 40407)
        address = {"type": "record", "name": "Address", "fields": [{"name": "street", "type": "string"}]}
        register(client, "a", json.dumps(address))
        person = json.dumps({"type": "record", "name": "Person", "fields": [{"name": "home", "type": "Address"}]})
        created = register(client, "p", person, references=[{"name": "Address", "subject": "a", "version": 1}])
        inlined = json.dumps({"type": "record", "name": "Person", "fields": [{"name": "home", "type": address}]})
        assert register(client, "p", inlined)["id"] == created["id"]
        bad = json.dumps({"type": "record", "name": "B", "fields": [{"name": "f", "type": "int", "default": "x"}]})
        client.put("/mode?force=true", json={"mode": "IMPORT"})
        assert register(client, "legacy", bad, id=100, version=1)["id"] == 100
        client.put("/mode", json={"mode": "READWRITE"})
        assert register(client, "legacy", bad)["id"] == 100


def test_bad_default_is_refused_at_registration(client: TestClient) -> None:
    # RestApiTest.testRegisterBadDefault
    bad = json.dumps({"type": "record", "name": "R", "fields": [{"name": "f", "type": "string", "default": None}]})
    r = client.post("/subjects/bad-default/versions", json={"schema": bad})
    assert error(r) == (422, 42201)
    assert "default" in r.json()["message"]


def test_imported_schemas_keep_their_invalid_defaults(client: TestClient) -> None:
    # Confluent validates defaults of new schemas only (canonicalizeSchema's isNew: register without an
    # id): an import, a lookup and the re-registration of a stored schema parse without it, so schemas
    # registered before Avro checked defaults migrate, and their producers keep their ids.
    bad = json.dumps({"type": "record", "name": "R", "fields": [{"name": "f", "type": "string", "default": None}]})
    assert client.put("/mode", json={"mode": "IMPORT"}).status_code == 200
    assert register(client, "legacy", bad, id=7, version=1)["id"] == 7
    assert client.put("/mode", json={"mode": "READWRITE"}).status_code == 200
    assert client.post("/subjects/legacy", json={"schema": bad}).json()["id"] == 7
    assert register(client, "legacy", bad) == {"id": 7, "version": 1, "schema": bad.replace(" ", "")}
    # a valid successor is checked against it; the invalid text is still refused as a new schema
    successor = json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "f", "type": "string", "default": None}, {"name": "g", "type": "int", "default": 0}]})
    assert error(client.post("/subjects/legacy/versions", json={"schema": successor})) == (422, 42201)
    valid = json.dumps({"type": "record", "name": "R", "fields": [{"name": "f", "type": ["null", "string"],
                                                                    "default": None}]})
    assert register(client, "legacy", valid)["version"] == 2
    assert error(client.post("/subjects/other/versions", json={"schema": bad})) == (422, 42201)


def test_latest_with_metadata_and_deleted_as_negative(client: TestClient) -> None:
    register(client, "meta", USER_V1, metadata={"properties": {"app": "a", "major": "1"}})
    register(client, "meta", USER_V2, metadata={"properties": {"app": "a", "major": "2"}})
    assert client.get("/subjects/meta/metadata?key=major&value=1").json()["version"] == 1
    assert client.get("/subjects/meta/metadata?key=app&value=a").json()["version"] == 2
    assert client.get("/subjects/meta/metadata").json()["version"] == 2
    assert error(client.get("/subjects/meta/metadata?key=app&value=b")) == (404, 40403)
    assert error(client.get("/subjects/nobody/metadata?key=app&value=a")) == (404, 40401)
    assert error(client.get("/subjects/meta/metadata?key=app")) == (400, 400)
    client.delete("/subjects/meta/versions/1")
    assert client.get("/subjects/meta/versions?deleted=true&deletedAsNegative=true").json() == [-1, 2]
    assert client.get("/subjects/meta/versions?deletedAsNegative=true").json() == [2]


def test_subject_names_with_slashes(client: TestClient) -> None:
    # clients percent-encode subject names; `team/orders-value` must round-trip like any other
    encoded = "team%2Forders-value"
    created = register(client, encoded, USER_V1)
    assert client.get("/subjects").json() == ["team/orders-value"]
    assert client.get(f"/subjects/{encoded}/versions").json() == [1]
    assert client.get(f"/subjects/{encoded}/versions/latest").json()["subject"] == "team/orders-value"
    assert client.post(f"/subjects/{encoded}", json={"schema": USER_V1}).json()["id"] == created["id"]
    assert client.post(f"/compatibility/subjects/{encoded}/versions/latest", json={"schema": USER_V2}).json() == {
        "is_compatible": True}
    assert client.put(f"/config/{encoded}", json={"compatibility": "NONE"}).status_code == 200
    assert client.get(f"/config/{encoded}").json() == {"compatibilityLevel": "NONE"}
    assert client.delete(f"/subjects/{encoded}/versions/1").json() == 1
    assert client.delete(f"/subjects/{encoded}?permanent=true").json() == [1]


def test_re_registration_writes_nothing(app: FastAPI, client: TestClient) -> None:
    from authz.database import read_version

    register(client, "again", USER_V1)
    with app.state.engine.connect() as conn:
        before = read_version(conn, "registry")
    for _ in range(3):
        assert register(client, "again", USER_V1)["version"] == 1
    with app.state.engine.connect() as conn:
        assert read_version(conn, "registry") == before
    assert register(client, "again", USER_V2)["version"] == 2
    with app.state.engine.connect() as conn:
        assert read_version(conn, "registry") == before + 1


def test_a_reference_name_given_twice_is_refused(client: TestClient) -> None:
    register(client, "ref-a", record("A", ("a", "string")))
    register(client, "ref-b", record("B", ("b", "string")))
    refs = [{"name": "dup", "subject": "ref-a", "version": 1}, {"name": "dup", "subject": "ref-b", "version": 1}]
    r = client.post("/subjects/uses-refs/versions", json={"schema": USER_V1, "references": refs})
    assert error(r) == (422, 42201)
    assert "'dup' is given twice" in r.json()["message"]
    assert client.get("/subjects/uses-refs/versions").status_code == 404  # nothing stored


def test_a_reference_to_latest_is_pinned_to_the_version_that_was_latest(client: TestClient) -> None:
    register(client, "dep", record("Dep", ("x", "int")))
    uses = json.dumps({"type": "record", "name": "U", "fields": [{"name": "d", "type": "Dep"}]})
    latest = [{"name": "Dep", "subject": "dep", "version": -1}]
    created = register(client, "uses-dep", uses, references=latest)
    pinned = [{"name": "Dep", "subject": "dep", "version": 1}]
    assert client.get("/subjects/uses-dep/versions/1").json()["references"] == pinned
    dep_v2 = json.dumps({"type": "record", "name": "Dep", "fields": [
        {"name": "x", "type": "int"}, {"name": "y", "type": "int", "default": 0}]})
    register(client, "dep", dep_v2)
    # The stored schema keeps meaning dep version 1 once dep moves on (Confluent pins "latest" too) ...
    assert client.get(f"/schemas/ids/{created['id']}").json()["references"] == pinned
    assert client.post("/subjects/uses-dep", json={"schema": uses, "references": pinned}).status_code == 200
    # ... and "latest" now means version 2: a different schema, not registered under the subject.
    r = client.post("/subjects/uses-dep", json={"schema": uses, "references": latest})
    assert error(r) == (404, 40403)


@pytest.mark.parametrize(("failure", "message"), [
    ("storage", "Error in the backend data store"), ("audit", "Error while writing the audit record")])
def test_a_server_failure_answers_only_the_id_of_its_log_line(app: FastAPI, client: TestClient, failure: str,
                                                              message: str, monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    import re

    from sqlalchemy.exc import OperationalError

    from audit.sinks import AuditWriteError

    def broken(*args: object, **kwargs: object) -> None:
        if failure == "storage":
            raise OperationalError("SELECT subject FROM registry_schemas", {}, Exception("/var/lib/kgov/kgov.db"))
        raise AuditWriteError("cannot write audit record to /var/lib/kgov/audit/events.jsonl")

    monkeypatch.setattr(app.state.schema_registry, "list_subjects", broken)
    r = client.get("/subjects")
    assert r.status_code == 500
    found = re.fullmatch(re.escape(message) + r" \(incident ([0-9a-f]{16})\)", r.json()["message"])
    assert found is not None and r.json()["error_code"] == 50001, r.text
    assert "/var/lib" not in r.text and "SELECT" not in r.text
    logged = [rec for rec in caplog.records if rec.levelname == "ERROR"]
    assert len(logged) == 1 and f"GET '/subjects' (incident {found.group(1)})" in logged[0].getMessage()
    assert logged[0].exc_info is not None and "/var/lib/kgov" in str(logged[0].exc_info[1])


def test_a_large_body_is_parsed_off_the_event_loop(registry_app_factory: Callable[..., FastAPI],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # On the loop, an 8 MiB body of small tokens stalled every other request for its whole parse.
    import asyncio

    import registry.api

    parse = registry.api.parse_large_body
    parsed: list[tuple[int, bool]] = []  # (size, on the event loop)

    def observed(body: bytes) -> Any:
        try:
            asyncio.get_running_loop()
            on_loop = True
        except RuntimeError:
            on_loop = False
        parsed.append((len(body), on_loop))
        return parse(body)

    monkeypatch.setattr(registry.api, "parse_large_body", observed)
    app = registry_app_factory()
    small = record("Small", ("a", "int"))
    large = record("Large", *[(f"field_{i}", "string") for i in range(3000)])
    assert len(large) > registry.api.LARGE_BODY_BYTES
    with TestClient(app, headers=basic("admin")) as client:
        assert client.post("/subjects/small/versions", json={"schema": small}).status_code == 200
        r = client.post("/subjects/large/versions", json={"schema": large})
        assert r.status_code == 200
        assert client.get(f"/schemas/ids/{r.json()['id']}").json()["schema"] == json.dumps(json.loads(large),
                                                                                            separators=(",", ":"))
        r = client.post("/subjects/bad/versions", content=b'{"schema": ' + b" " * 70_000 + b"[",
                        headers={"Content-Type": V1})
        assert error(r)[0] == 400 and "Malformed JSON" in r.json()["message"]
        r = client.post("/subjects/bad/versions", content=b"[" * 40_000 + b" " * 30_000 + b"]" * 40_000,
                        headers={"Content-Type": V1})
        assert error(r) == (400, 400) and "nested too deeply" in r.json()["message"]
    assert [on_loop for _, on_loop in parsed] == [False, False, False]  # the small body never got there
    assert app.state.registry_check_slots.free == app.state.registry_check_slots.limit  # each slot given back


@pytest.mark.parametrize("body", [
    b'{"schema": "\\"int\\"", "references": [{"name": "a", "subject": "s", "version": 1}], "x": [1, 2.5, -3e400]}',
    b'\xef\xbb\xbf{"schema": "\\"string\\"", "normalize": true, "metadata": null}',
    '{"schema": "\u00e9\\ud800", "k": {"nested": [[], {}, "", NaN, Infinity]}}'.encode("utf-16"),
    '{"schema": "é"}'.encode("utf-32"),
])
def test_the_large_body_parser_reads_what_json_loads_reads(body: bytes) -> None:
    import math

    from registry.api import parse_large_body

    def same(a: Any, b: Any) -> bool:  # NaN is not equal to itself
        if isinstance(a, float) and math.isnan(a):
            return isinstance(b, float) and math.isnan(b)
        if isinstance(a, dict):
            return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list):
            return isinstance(b, list) and len(a) == len(b) and all(map(same, a, b))
        return type(a) is type(b) and a == b

    assert same(parse_large_body(body), json.loads(body))


@pytest.mark.parametrize("body", [b'{"a": 1,}', b'{"a" 1}', b"\xff\xfe\xfd", b'{"a": 1} x', b'{"a": "\x01"}', b""])
def test_the_large_body_parser_refuses_what_json_loads_refuses(body: bytes) -> None:
    from registry.api import parse_large_body

    with pytest.raises((ValueError, UnicodeDecodeError)) as theirs:
        json.loads(body)
    with pytest.raises(type(theirs.value)):
        parse_large_body(body)
