"""The authz REST APIs through a real server and a real HTTP client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from kgov.app import build_app
from kgov.settings import Settings
from kgov.up import control_plane
from tests.support.ports import free_port
from tests.support.server import serve_app

ADMIN = ("admin", "correct-horse-battery")
ACL = {
    "resource_type": "TOPIC", "resource_name": "orders-", "pattern_type": "PREFIXED", "principal": "User:alice",
    "host": "*", "operation": "READ", "permission": "ALLOW",
}


def opa_input(name: str, operation: str = "READ", principal: str = "alice", pattern: str = "LITERAL",
              address: str = "/10.0.0.5") -> dict[str, object]:
    """The document the opa-kafka-plugin sends (issue 2's interface)."""
    return {"input": {
        "action": {"operation": operation, "resourcePattern": {"resourceType": "TOPIC", "name": name,
                                                               "patternType": pattern},
                   "resourceReferenceCount": 1, "logIfAllowed": True, "logIfDenied": True},
        "requestContext": {"clientAddress": address, "principal": {"principalType": "User", "name": principal},
                           "listenerName": "SASL_SSL", "securityProtocol": "SASL_SSL",
                           "header": {"name": {"clientId": "c", "correlationId": 1, "requestApiKey": 1,
                                               "requestApiVersion": 12}, "headerVersion": 2}}}}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("kgov")
    settings = Settings(data_dir=data, cluster_id="c1", admin={"user": ADMIN[0], "password": ADMIN[1]},
                        sasl={"failed_authentication_delay_ms": 0})
    with serve_app(build_app(settings)) as url:
        yield url


@pytest.fixture
def admin(base: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base, auth=ADMIN, timeout=10) as client:
        yield client


def test_health_and_cluster_listing(admin: httpx.Client) -> None:
    assert admin.get("/health").json() == {"status": "UP"}
    clusters = admin.get("/v3/clusters").json()
    assert clusters["kind"] == "KafkaClusterList"
    assert clusters["data"][0]["cluster_id"] == "c1"
    assert admin.get("/v3/clusters/nope").status_code == 404


def test_add_list_delete_acls(admin: httpx.Client) -> None:
    assert admin.post("/v3/clusters/c1/acls", json=ACL).status_code == 201
    batch = {"data": [dict(ACL, resource_name="audit", pattern_type="LITERAL", operation="WRITE"),
                      dict(ACL, principal="User:bob")]}
    assert admin.post("/v3/clusters/c1/acls:batch", json=batch).status_code == 201
    listed = admin.get("/v3/clusters/c1/acls", params={"principal": "User:alice"}).json()
    assert listed["kind"] == "KafkaAclList"
    rows = sorted((d["resource_name"], d["operation"]) for d in listed["data"])
    assert rows == [("audit", "WRITE"), ("orders-", "READ")]
    assert all(d["kind"] == "KafkaAcl" and d["cluster_id"] == "c1" for d in listed["data"])
    matched = admin.get("/v3/clusters/c1/acls", params={"resource_type": "TOPIC", "resource_name": "orders-eu",
                                                        "pattern_type": "MATCH"}).json()["data"]
    assert sorted(d["principal"] for d in matched) == ["User:alice", "User:bob"]
    deleted = admin.delete("/v3/clusters/c1/acls", params={"resource_type": "TOPIC", "principal": "User:bob"})
    assert deleted.status_code == 200
    assert [d["principal"] for d in deleted.json()["data"]] == ["User:bob"]
    assert admin.get("/v3/clusters/c1/acls", params={"principal": "User:bob"}).json()["data"] == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (dict(ACL, resource_name=""), "Resource name should not be empty"),
        (dict(ACL, resource_type="CLUSTER", resource_name="x"), "The only valid name for the CLUSTER resource is kafka-cluster"),
        (dict(ACL, operation="FLY"), "Unknown operation: 'FLY'"),
        (dict(ACL, pattern_type="MATCH"), "Invalid patternType MATCH"),
        ({k: v for k, v in ACL.items() if k != "principal"}, "data.1.principal: Field required"),
    ],
)
def test_bad_acls_get_kafka_wording_and_write_nothing(admin: httpx.Client, body: dict[str, str], message: str
                                                      ) -> None:
    before = admin.get("/v3/clusters/c1/acls").json()["data"]
    resp = admin.post("/v3/clusters/c1/acls:batch", json={"data": [dict(ACL, resource_name="fine"), body]})
    assert resp.status_code == 400
    assert resp.json() == {"error_code": 400, "message": message}
    assert admin.get("/v3/clusters/c1/acls").json()["data"] == before


@pytest.mark.parametrize("field", ["resource_name", "principal", "host"])
def test_a_lone_surrogate_is_a_400_and_writes_nothing(admin: httpx.Client, field: str) -> None:
    """JSON can escape half a UTF-16 surrogate pair (`\\ud800`), which no database can store as
    text; Kafka never sees one (its strings arrive as UTF-8)."""
    before = admin.get("/v3/clusters/c1/acls").json()["data"]
    value = {"resource_name": "orders-", "principal": "User:alice", "host": "*"}[field] + "\\ud800"
    body = json.dumps({"data": [dict(ACL, resource_name="fine")]})[:-2] + ", " + json.dumps(ACL)[:-1]
    body += f', "{field}": "{value}"}}]}}'
    resp = admin.post("/v3/clusters/c1/acls:batch", content=body, headers={"content-type": "application/json"})
    assert resp.status_code == 400, resp.text
    assert "surrogate" in resp.json()["message"]
    assert admin.get("/v3/clusters/c1/acls").json()["data"] == before
    binding = '{"resourcePatterns": [{"resourceType": "TOPIC", "name": "t\\udc00", "patternType": "LITERAL"}]}'
    resp = admin.post("/security/1.0/principals/User:frodo/roles/DeveloperRead/bindings", content=binding,
                      headers={"content-type": "application/json"})
    assert resp.status_code == 400 and "surrogate" in resp.json()["message"]


def test_malformed_json_is_a_400(admin: httpx.Client) -> None:
    resp = admin.post("/v3/clusters/c1/acls", content=b"{bad", headers={"content-type": "application/json"})
    assert resp.status_code == 400 and resp.json()["message"].startswith("Malformed JSON body")


def test_delete_without_resource_type_is_refused(admin: httpx.Client) -> None:
    resp = admin.delete("/v3/clusters/c1/acls")
    assert resp.status_code == 400 and "resource_type is required" in resp.json()["message"]


def test_authentication_and_authorization(base: str, admin: httpx.Client) -> None:
    anonymous = httpx.get(base + "/v3/clusters")
    assert anonymous.status_code == 401
    assert "Basic" in anonymous.headers["www-authenticate"]
    wrong = httpx.get(base + "/v3/clusters", auth=("admin", "nope"))
    unknown = httpx.get(base + "/v3/clusters", auth=("mallory", "nope"))
    # Same answer for a wrong password and an unknown user: no enumeration.
    assert wrong.status_code == unknown.status_code == 401
    assert wrong.json() == unknown.json() == {"error_code": 40101, "message": "Unauthorized"}


def test_opa_decision_api(base: str, admin: httpx.Client) -> None:
    admin.post("/v3/clusters/c1/acls", json=ACL)
    allow = httpx.post(base + "/v1/data/kafka/authz/allow", json=opa_input("orders-eu"))
    assert allow.status_code == 200 and allow.json() == {"result": True}
    assert httpx.post(base + "/v1/data/kafka/authz/allow", json=opa_input("orders-eu", "WRITE")).json() == {
        "result": False}
    assert httpx.post(base + "/v1/data/kafka/authz/allow", json=opa_input("payments")).json() == {"result": False}
    # READ implies DESCRIBE, as in Kafka.
    assert httpx.post(base + "/v1/data/kafka/authz/allow", json=opa_input("orders-eu", "DESCRIBE")).json() == {
        "result": True}
    # The plugin's authorizeByResourceType mapping: PREFIXED with an empty name.
    assert httpx.post(base + "/v1/data/kafka/authz/allow", json=opa_input("", pattern="PREFIXED")).json() == {
        "result": True}
    batch = httpx.post(base + "/v1/data/kafka/authz/batch",
                       json={"inputs": [opa_input("orders-x")["input"], opa_input("other")["input"]]})
    assert batch.json() == {"result": [True, False]}
    # The body is read as JSON whatever the Content-Type says.
    raw = httpx.post(base + "/v1/data/kafka/authz/allow", content=httpx.Request(
        "POST", "/", json=opa_input("orders-eu")).content, headers={"content-type": "text/plain"})
    assert raw.json() == {"result": True}


@pytest.mark.parametrize("body", [b"{", b"[]", b'{"input": 3}', b'{"input": {"action": {}}}',
                                  b'{"input": {"action": {"operation": "READ"}, "requestContext": {}}}',
                                  # deeper than Python's json goes: a RecursionError, not a ValueError
                                  b'{"input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"])
def test_opa_malformed_documents_are_400(base: str, body: bytes) -> None:
    resp = httpx.post(base + "/v1/data/kafka/authz/allow", content=body)
    assert resp.status_code == 400 and resp.json()["error_code"] == 400 and resp.json()["message"]


def test_role_bindings_api(base: str, admin: httpx.Client) -> None:
    roles = admin.get("/security/1.0/roles").json()
    assert {r["name"] for r in roles} >= {"SystemAdmin", "DeveloperRead", "ResourceOwner", "AuditAdmin"}
    pattern = {"resourceType": "Topic", "name": "shire-", "patternType": "PREFIXED"}
    scope = {"clusters": {"kafka-cluster": "c1"}}
    assert admin.put("/v1/groups/Group:hobbits/members/User:frodo").status_code == 204
    resp = admin.post("/security/1.0/principals/Group:hobbits/roles/DeveloperWrite/bindings",
                      json={"scope": scope, "resourcePatterns": [pattern]})
    assert resp.status_code == 204
    assert admin.post("/security/1.0/principals/User:frodo/roles/Operator", json={"scope": scope}).status_code == 204
    lookup = admin.post("/security/1.0/lookup/principal/User:frodo/resources", json={"scope": scope}).json()
    assert lookup == {
        "User:frodo": {"Operator": [{"resourceType": "CLUSTER", "name": "kafka-cluster", "patternType": "LITERAL"}]},
        "Group:hobbits": {"DeveloperWrite": [{"resourceType": "TOPIC", "name": "shire-", "patternType": "PREFIXED"}]},
    }
    holders = admin.get("/security/1.0/lookup/role/DeveloperWrite/resource/Topic/name/shire-parties").json()
    assert holders == ["Group:hobbits"]
    assert admin.get("/security/1.0/lookup/role/DeveloperRead/resource/Topic/name/shire-parties").json() == []
    # The binding decides: frodo may now write shire- topics through his group.
    frodo_write = opa_input("shire-parties", "WRITE", principal="frodo")
    assert httpx.post(base + "/v1/data/kafka/authz/allow", json=frodo_write).json() == {"result": True}
    bad = admin.post("/security/1.0/principals/User:x/roles/SystemAdmin/bindings",
                     json={"scope": scope, "resourcePatterns": [pattern]})
    assert bad.status_code == 400 and "cluster scope" in bad.json()["message"]
    assert admin.post("/security/1.0/principals/User:x/roles/Nope", json={}).status_code == 400
    assert admin.post("/security/1.0/principals/User:x/roles/Operator",
                      json={"scope": {"clusters": {"kafka-cluster": "other"}}}).status_code == 404


def test_metrics_count_decisions(base: str, admin: httpx.Client) -> None:
    httpx.post(base + "/v1/data/kafka/authz/allow", json=opa_input("denied-topic", principal="eve"))
    metrics = admin.get("/metrics").text
    assert 'kgov_authz_decisions_total{result="denied"}' in metrics
    assert "kgov_authz_acls " in metrics


def test_cli_talks_to_the_control_plane_over_http(base: str, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from kgov.cli import main

    monkeypatch.setenv("KGOV_PASSWORD", ADMIN[1])
    common = ["--url", base, "--user", ADMIN[0]]
    assert main(["acls", *common, "--add", "--allow-principal", "User:cli", "--operation", "Write",
                 "--topic", "cli-topic"]) == 0
    assert main(["acls", *common, "--list", "--topic", "cli-topic"]) == 0
    assert "(principal=User:cli, host=*, operation=WRITE, permissionType=ALLOW)" in capsys.readouterr().out
    assert main(["acls", *common, "--remove", "--force", "--topic", "cli-topic"]) == 0
    assert "Removed 1 ACLs" in capsys.readouterr().out
    monkeypatch.setenv("KGOV_PASSWORD", "wrong")
    assert main(["acls", *common, "--list"]) == 1
    assert "HTTP 401" in capsys.readouterr().err


def test_role_binding_and_group_changes_are_audited_with_the_callers_address(tmp_path: Path) -> None:
    """As ACL changes are: an auditor asks who changed access from where."""
    settings = Settings(data_dir=tmp_path, cluster_id="c1", admin={"user": ADMIN[0], "password": ADMIN[1]},
                        sasl={"failed_authentication_delay_ms": 0})
    app = build_app(settings)
    with TestClient(app, client=("192.0.2.7", 40000)) as client:
        client.auth = ADMIN
        assert client.post("/security/1.0/principals/User:frodo/roles/Operator", json={}).status_code == 204
        assert client.delete("/security/1.0/principals/User:frodo/roles/Operator").status_code == 204
        bind = {"resourcePatterns": [{"resourceType": "Topic", "name": "shire-", "patternType": "PREFIXED"}]}
        assert client.post("/security/1.0/principals/User:frodo/roles/DeveloperRead/bindings",
                           json=bind).status_code == 204
        assert client.request("DELETE", "/security/1.0/principals/User:frodo/roles/DeveloperRead/bindings",
                              json=bind).status_code == 204
        assert client.put("/v1/groups/Group:hobbits/members/User:frodo").status_code == 204
        assert client.delete("/v1/groups/Group:hobbits/members/User:frodo").status_code == 204
    events = [json.loads(line) for line in (tmp_path / "audit" / "events.jsonl").read_text().splitlines()]
    changes = [e for e in events if e["type"] in ("io.kgov.role_binding_change", "io.kgov.group_change")]
    assert len(changes) == 6, [e["type"] for e in events]
    assert {e["data"]["requestMetadata"]["clientAddress"] for e in changes} == {"192.0.2.7"}


@pytest.mark.parametrize("forwarded", [{"X-Forwarded-For": "203.0.113.9"}, {"Forwarded": "for=203.0.113.9"},
                                       {"X-Real-IP": "203.0.113.9"}])
def test_the_decision_api_refuses_what_came_through_an_unlisted_proxy(base: str, forwarded: dict[str, str]) -> None:
    """A reverse proxy on kgov's host, not listed in http_forwarded_allow_ips, makes every client it
    forwards look like loopback, which the default decision_api_networks admit. A request that says it
    was forwarded, by headers nobody believed, is not taken for the proxy's own."""
    r = httpx.post(base + "/v1/data/kafka/authz/allow", json=opa_input("orders-eu"), headers=forwarded)
    assert (r.status_code, r.json()["error_code"]) == (403, 40301), r.text
    assert "http_forwarded_allow_ips" in r.json()["message"]


LISTED_PROXY = "127.0.0.2"  # loopback addresses other than 127.0.0.1 reach the server too (Linux)


@pytest.fixture(scope="module")
def behind_a_listed_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A reverse proxy at 127.0.0.2 is listed; brokers at 10.0.0.5 (through it) and on loopback may decide."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("kgov"), cluster_id="c1",
                        admin={"user": ADMIN[0], "password": ADMIN[1]}, sasl={"failed_authentication_delay_ms": 0},
                        http_forwarded_allow_ips=[LISTED_PROXY],
                        authz={"decision_api_networks": ["10.0.0.5/32", "127.0.0.0/30"]})
    port = free_port()
    with control_plane(build_app(settings), "127.0.0.1", port, forwarded_allow_ips=settings.http_forwarded_allow_ips):
        yield f"http://127.0.0.1:{port}"


def _decide_from(base: str, source: str, headers: dict[str, str]) -> httpx.Response:
    with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=10) as client:
        return client.post(base + "/v1/data/kafka/authz/allow", json=opa_input("orders-eu"), headers=headers)


@pytest.mark.parametrize(("source", "headers", "refusal"), [
    # A broker calling directly, and one a listed proxy forwards: answered.
    ("127.0.0.1", {}, None),
    (LISTED_PROXY, {"X-Forwarded-For": "10.0.0.5"}, None),
    # A proxy on a dual-stack listener names an IPv4 client as IPv4-mapped IPv6: the same broker.
    (LISTED_PROXY, {"X-Forwarded-For": "::ffff:10.0.0.5"}, None),
    (LISTED_PROXY, {"X-Forwarded-For": "::ffff:10.0.0.6"}, "decision_api_networks"),
    # A client naming a broker in its own X-Forwarded-For, which the proxy extends with the real peer:
    # the server takes the last address its listed proxies did not add, the peer's.
    (LISTED_PROXY, {"X-Forwarded-For": "10.0.0.5, 203.0.113.9"}, "decision_api_networks"),
    # Forwarded by an address that is not a listed proxy: refused as with no proxy listed. Ignoring the
    # headers would check the sender's own address (loopback, admitted here) for whoever it forwards.
    ("127.0.0.1", {"X-Forwarded-For": "10.0.0.5"}, "http_forwarded_allow_ips"),
    ("127.0.0.1", {"X-Real-IP": "10.0.0.5"}, "http_forwarded_allow_ips"),
    ("127.0.0.1", {"Forwarded": "for=10.0.0.5"}, "http_forwarded_allow_ips"),
    # A listed proxy forwarding for an address the decision API does not admit.
    (LISTED_PROXY, {"X-Forwarded-For": "203.0.113.9"}, "decision_api_networks"),
    # A listed proxy naming the caller only in headers the server does not read: the address would be its own.
    (LISTED_PROXY, {"Forwarded": "for=10.0.0.5"}, "X-Forwarded-For"),
])
def test_the_decision_api_behind_a_listed_proxy_believes_only_that_proxy(
        behind_a_listed_proxy: str, source: str, headers: dict[str, str], refusal: str | None) -> None:
    r = _decide_from(behind_a_listed_proxy, source, headers)
    if refusal is None:
        assert (r.status_code, r.json()) == (200, {"result": False}), r.text
    else:
        assert (r.status_code, r.json()["error_code"]) == (403, 40301), r.text
        assert refusal in r.json()["message"]
