"""Whatever a client sends, the registry answers with a Confluent error body, never a 500."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.registry.conftest import basic, build_registry_app

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
FIELDS = st.fixed_dictionaries({}, optional={
    "schema": st.one_of(st.text(max_size=40), JSON_VALUES.map(json.dumps), JSON_VALUES),
    "schemaType": st.sampled_from(["AVRO", "JSON", "PROTOBUF", "avro", "XML", 3]),
    "references": st.one_of(JSON_VALUES, st.lists(st.fixed_dictionaries(
        {"name": st.text(max_size=8), "subject": st.text(max_size=8), "version": st.integers(-2, 3)}), max_size=2)),
    "metadata": JSON_VALUES, "ruleSet": JSON_VALUES, "id": JSON_VALUES, "version": JSON_VALUES,
})
PATHS = ["/subjects/fuzz/versions", "/subjects/fuzz", "/compatibility/subjects/fuzz/versions/latest",
         "/compatibility/subjects/fuzz/versions?verbose=true", "/config/fuzz", "/mode/fuzz"]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    app = build_registry_app(f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'kgov.db'}")
    with TestClient(app, headers=basic("admin")) as c:
        c.post("/subjects/fuzz/versions", json={"schema": '"string"'})
        yield c
    app.state.engine.dispose()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(PATHS), body=st.one_of(FIELDS, JSON_VALUES))
def test_json_bodies_never_500(client: TestClient, path: str, body: Any) -> None:
    method = client.put if path.startswith(("/config", "/mode")) else client.post
    r = method(path, content=json.dumps(body), headers={"Content-Type": "application/json"})
    assert r.status_code < 500, r.text
    if r.status_code >= 400:
        assert set(r.json()) == {"error_code", "message"}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=64))
def test_raw_bytes_never_500(client: TestClient, body: bytes) -> None:
    r = client.post("/subjects/fuzz/versions", content=body, headers={"Content-Type": "application/octet-stream"})
    assert r.status_code < 500, r.text


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("body", [
    "[" * 100_000 + "]" * 100_000,  # Python's json gives up with a RecursionError, not a ValueError
    '{"schema": "\\"string\\"", "metadata": {"properties": ' + '{"a":' * 50_000 + "1" + "}" * 50_000 + "}}",
])
def test_deeply_nested_json_is_malformed_not_a_server_error(client: TestClient, path: str, body: str) -> None:
    method = client.put if path.startswith(("/config", "/mode")) else client.post
    r = method(path, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json() == {"error_code": 400, "message": "Malformed JSON in request body: nested too deeply"}
