"""`GET /metrics`: who may scrape, and what a scrape tells."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from kgov.app import build_app
from kgov.settings import Settings, load_settings

ADMIN = ("admin", "admin-password-long")
PROM = ("prometheus", "scrape-password-long")
OPS = ("ops", "operator-password-long")
EVE = ("eve", "eve-password-long-enough")


def _client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **metrics: Any) -> TestClient:
    monkeypatch.setenv("KGOV_SASL__FAILED_AUTHENTICATION_DELAY_MS", "0")
    settings = load_settings(data_dir=tmp_path / "data", admin={"user": ADMIN[0], "password": ADMIN[1]},
                             metrics=metrics)
    app = build_app(settings)
    for user, password in (PROM, OPS, EVE):
        app.state.credentials.set_scram_credential(user, "SCRAM-SHA-512", password, actor="test")
    return TestClient(app)


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    with _client(tmp_path, monkeypatch, principals="User:prometheus") as c:
        yield c


def _decisions(text: str, result: str) -> float:
    found = re.search(rf'^kgov_authz_decisions_total{{result="{result}"}} (\S+)$', text, re.M)
    assert found, text
    return float(found.group(1))


def test_scrape_without_credentials_is_refused(client: TestClient) -> None:
    r = client.get("/metrics")
    assert r.status_code == 401
    assert r.json() == {"error_code": 40101, "message": "Unauthorized"}
    assert "Basic" in r.headers["www-authenticate"]
    assert "kgov_authz" not in r.text
    assert client.get("/metrics", auth=(PROM[0], "wrong-password")).status_code == 401


def test_listed_scraper_reads_metrics_and_nothing_else(client: TestClient) -> None:
    r = client.get("/metrics", auth=PROM)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "kgov_authz_acls " in r.text
    # the scrape permission is not cluster DESCRIBE: ACLs, users and groups stay closed to it
    for path in ("/v3/clusters/kgov-cluster/acls", "/v1/scram/users", "/v1/groups", "/v1/quotas"):
        assert client.get(path, auth=PROM).status_code == 403, path


def test_listed_scraper_is_not_counted_as_a_decision(client: TestClient) -> None:
    first = client.get("/metrics", auth=PROM).text
    second = client.get("/metrics", auth=PROM).text
    assert _decisions(second, "allowed") == _decisions(first, "allowed")
    assert _decisions(second, "denied") == _decisions(first, "denied")


def test_other_users_need_cluster_describe(client: TestClient) -> None:
    r = client.get("/metrics", auth=EVE)
    assert r.status_code == 403
    assert r.json()["error_code"] == 40301 and "kgov_authz" not in r.text
    # the Operator role (DESCRIBE on the cluster, no data, no ACL changes) may scrape
    bound = client.post(f"/security/1.0/principals/User:{OPS[0]}/roles/Operator", auth=ADMIN,
                        json={"scope": {"clusters": {"kafka-cluster": "kgov-cluster"}}})
    assert bound.status_code in (200, 204), bound.text
    client.app.state.authorizer.refresh()  # type: ignore[attr-defined]
    assert client.get("/metrics", auth=OPS).status_code == 200
    assert client.get("/metrics", auth=ADMIN).status_code == 200  # super user


def test_wildcard_lets_any_authenticated_user_scrape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _client(tmp_path, monkeypatch, principals="User:*") as c:
        assert c.get("/metrics", auth=EVE).status_code == 200
        assert c.get("/metrics").status_code == 401


def test_public_metrics_need_no_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGOV_METRICS__PUBLIC", "true")
    with _client(tmp_path, monkeypatch) as c:
        r = c.get("/metrics")
        assert r.status_code == 200 and "kgov_authz_acls " in r.text


def test_labels_carry_no_caller_chosen_strings(client: TestClient) -> None:
    """Denied requests name principals and resources; none of that may reach the exposition."""
    client.get("/v3/clusters/kgov-cluster/acls", auth=EVE)  # a denied decision for User:eve
    client.post("/v1/data/kafka/authz/allow", json={"input": {
        "action": {"operation": "READ", "resourcePattern": {"resourceType": "TOPIC", "name": "secret-topic-x",
                                                            "patternType": "LITERAL"},
                   "resourceReferenceCount": 1, "logIfAllowed": True, "logIfDenied": True},
        "requestContext": {"clientAddress": "/10.0.0.9", "principal": {"principalType": "User", "name": "mallory-x"},
                           "listenerName": "L", "securityProtocol": "SASL_SSL",
                           "header": {"name": {"clientId": "c", "correlationId": 1, "requestApiKey": 1,
                                               "requestApiVersion": 12}, "headerVersion": 2}}}})
    text = client.get("/metrics", auth=PROM).text
    assert _decisions(text, "denied") >= 1
    for secret in ("eve", "mallory-x", "secret-topic-x", "10.0.0.9", PROM[1]):
        assert secret not in text
    labels = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            labels.update(re.findall(r'(\w+)="([^"]*)"', line))
    assert labels <= {("result", "allowed"), ("result", "denied")}


@pytest.mark.parametrize("value", ["yes", "1", "on", "maybe"])
def test_public_takes_only_true_or_false(value: str) -> None:
    with pytest.raises(ValidationError, match=r"metrics\.public must be true or false"):
        Settings(metrics={"public": value})


@pytest.mark.parametrize("value", ["Group:ops", "prometheus", "User:a;Role:Operator"])
def test_scrapers_are_user_principals(value: str) -> None:
    with pytest.raises(ValidationError, match=r"metrics\.principals"):
        Settings(metrics={"principals": value})
