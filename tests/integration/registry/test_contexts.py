"""Context base URLs (`/contexts/.staging/...`) as Confluent's ContextFilter serves them."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from registry.contexts import rewrite

V1 = json.dumps({"type": "record", "name": "C", "fields": [{"name": "a", "type": "string"}]})
INCOMPATIBLE = json.dumps({"type": "record", "name": "C", "fields": [{"name": "a", "type": "int"}]})


@pytest.mark.parametrize(("path", "query", "expected"), [
    ("/contexts/.staging/subjects/s/versions", "", ("/subjects/:.staging:s/versions", "")),
    ("/contexts/staging/config/s", "", ("/config/:.staging:s", "")),
    ("/contexts/.staging/config", "", ("/config/:.staging:", "")),
    ("/contexts/./config", "", ("/config", "")),
    ("/contexts/.staging/compatibility/subjects/s/versions/latest", "verbose=true",
     ("/compatibility/subjects/:.staging:s/versions/latest", "verbose=true")),
    ("/contexts/.staging/subjects", "deleted=true", ("/subjects", "deleted=true&subjectPrefix=%3A.staging%3A")),
    ("/contexts/.staging/schemas/ids/3", "", ("/schemas/ids/3", "")),
    ("/contexts/.staging/subjects/:.other:s/versions", "", ("/subjects/:.other:s/versions", "")),
    ("/contexts/.staging", "", None),
    ("/contexts/.staging/unknown", "", None),
    ("/subjects", "", None),
])
def test_rewrite(path: str, query: str, expected: tuple[str, str] | None) -> None:
    assert rewrite(path, query) == expected


def test_a_client_pointed_at_a_context(client: TestClient) -> None:
    base = "/contexts/.staging"
    created = client.post(f"{base}/subjects/orders-value/versions", json={"schema": V1}).json()
    assert client.get("/subjects").json() == [":.staging:orders-value"]
    assert client.get(f"{base}/subjects").json() == [":.staging:orders-value"]
    assert client.get(f"{base}/subjects/orders-value/versions/latest").json()["id"] == created["id"]
    assert client.get(f"{base}/schemas/ids/{created['id']}").status_code == 200
    assert client.get("/contexts").json() == [".", ".staging"]
    # the context's own level applies to its subjects only
    assert client.put(f"{base}/config", json={"compatibility": "NONE"}).status_code == 200
    assert client.post(f"{base}/subjects/orders-value/versions", json={"schema": INCOMPATIBLE}).status_code == 200
    client.post("/subjects/orders-value/versions", json={"schema": V1})
    r = client.post("/subjects/orders-value/versions", json={"schema": INCOMPATIBLE})
    assert r.status_code == 409
    assert client.get(f"{base}/config/orders-value?defaultToGlobal=true").json() == {"compatibilityLevel": "NONE"}
    assert client.get("/config/orders-value?defaultToGlobal=true").json() == {"compatibilityLevel": "BACKWARD"}
