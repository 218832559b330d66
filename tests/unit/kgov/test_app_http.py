"""The assembled control plane's HTTP surface: body size cap, errors, what is open without credentials."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from kgov.app import build_app
from kgov.settings import load_settings

LIMIT = 64 * 1024


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = load_settings(data_dir=tmp_path / "data", dev_mode=True, http_request_max_bytes=LIMIT)
    with TestClient(build_app(settings)) as c:
        yield c


@pytest.mark.parametrize("path", ["/subjects/s/versions", "/oauth/token", "/v1/data/kafka/authz/allow"])
def test_declared_oversized_body_is_refused_before_authentication(client: TestClient, path: str) -> None:
    r = client.post(path, content=b"x" * (LIMIT + 1), headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert r.json() == {"error_code": 413, "message": f"Request body larger than {LIMIT} bytes"}


def test_streamed_oversized_body_is_refused(client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(LIMIT // 1024 + 2):
            yield b"x" * 1024

    # the token endpoint reads its (form) body with no credentials at all
    r = client.post("/oauth/token", content=chunks(),
                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 413
    assert r.json()["error_code"] == 413


def test_body_under_the_cap_reaches_the_route(client: TestClient) -> None:
    r = client.post("/subjects/s/versions", content=b"{}", headers={"Content-Type": "application/json"})
    assert r.status_code == 401
