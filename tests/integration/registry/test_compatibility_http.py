"""Done-when: the transcribed compatibility cases pass through the HTTP API.

The case tables are the ones `tests/unit/registry/compat` transcribed from Apache Avro's
TestSchemaCompatibility*, Confluent's AvroCompatibilityTest and Confluent's JSON Schema diff
examples; here each case is registered and checked through REST, as a client would.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

import tests.unit.registry.compat.json_diff_cases as json_cases
import tests.unit.registry.compat.test_avro_reader_writer as avro_pairs
import tests.unit.registry.compat.test_levels as levels
from tests.integration.registry.conftest import basic, build_registry_app

_subjects = itertools.count()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    app = build_registry_app(f"sqlite:///{tmp_path_factory.mktemp('compat') / 'kgov.db'}")
    with TestClient(app, headers=basic("admin")) as c:
        yield c
    app.state.engine.dispose()


def fresh_subject() -> str:
    return f"case-{next(_subjects)}"


def register(client: TestClient, subject: str, schema: str, schema_type: str = "AVRO") -> None:
    r = client.post(f"/subjects/{subject}/versions", json={"schema": schema, "schemaType": schema_type})
    assert r.status_code == 200, r.text


def verdict(client: TestClient, subject: str, schema: str, schema_type: str = "AVRO") -> dict[str, Any]:
    r = client.post(f"/compatibility/subjects/{subject}/versions?verbose=true",
                    json={"schema": schema, "schemaType": schema_type})
    assert r.status_code == 200, r.text
    return dict(r.json())


def text(schema: Any) -> str:
    return json.dumps(schema)


@pytest.mark.parametrize(("reader", "writer"), avro_pairs.COMPATIBLE)
def test_avro_compatible_pairs(client: TestClient, reader: Any, writer: Any) -> None:
    # BACKWARD: the new schema reads what the registered one wrote
    subject = fresh_subject()
    register(client, subject, text(writer))
    assert verdict(client, subject, text(reader)) == {"is_compatible": True, "messages": []}
    register(client, subject, text(reader))


@pytest.mark.parametrize(("reader", "writer", "kind", "message", "location"), avro_pairs.INCOMPATIBLE)
def test_avro_incompatible_pairs(client: TestClient, reader: Any, writer: Any, kind: Any, message: str,
                                 location: str) -> None:
    subject = fresh_subject()
    register(client, subject, text(writer))
    found = verdict(client, subject, text(reader))
    assert found["is_compatible"] is False
    assert any(kind.name in m and location in m for m in found["messages"]), found["messages"]
    r = client.post(f"/subjects/{subject}/versions", json={"schema": text(reader)})
    assert (r.status_code, r.json()["error_code"]) == (409, 409)


@pytest.mark.parametrize(("what", "level", "new", "previous", "compatible"), levels.CASES,
                         ids=[c[0] for c in levels.CASES])
def test_confluent_levels(client: TestClient, what: str, level: Any, new: Any, previous: list[Any],
                          compatible: bool) -> None:
    subject = fresh_subject()
    client.put(f"/config/{subject}", json={"compatibility": "NONE"})
    for old in previous:
        register(client, subject, old.canonical, old.schema_type.value)
    assert client.put(f"/config/{subject}", json={"compatibility": level.value}).status_code == 200
    assert verdict(client, subject, new.canonical, new.schema_type.value)["is_compatible"] is compatible
    r = client.post(f"/subjects/{subject}/versions", json={"schema": new.canonical,
                                                           "schemaType": new.schema_type.value})
    assert r.status_code == (200 if compatible else 409), r.text


JSON_CASES = json_cases.CASES + json_cases.COMBINED_CASES


@pytest.mark.parametrize(("description", "original", "update", "changes", "compatible"), JSON_CASES,
                         ids=[c[0] for c in JSON_CASES])
def test_confluent_json_schema_diff_examples(client: TestClient, description: str, original: Any, update: Any,
                                             changes: list[str], compatible: bool) -> None:
    subject = fresh_subject()
    register(client, subject, text(original), "JSON")
    found = verdict(client, subject, text(update), "JSON")
    assert found["is_compatible"] is compatible, found["messages"]
    r = client.post(f"/subjects/{subject}/versions", json={"schema": text(update), "schemaType": "JSON"})
    assert r.status_code == (200 if compatible else 409), r.text

