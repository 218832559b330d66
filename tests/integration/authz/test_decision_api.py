"""The OPA-compatible decision API as brokers running the opa-kafka-plugin use it, through a real server.

What the plugin sends: StyraInc/opa-kafka-plugin, OpaAuthorizer.scala (one `{"input": ...}` per
decision, answer read as `readTree(body).at("/result").asBoolean`, whatever the status).
"""

from __future__ import annotations

import copy
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kgov.app import build_app
from kgov.settings import Settings
from kgov.up import control_plane
from tests.support.ports import free_port
from tests.support.server import serve_app

ADMIN = ("admin", "correct-horse-battery")
ALLOW = "/v1/data/kafka/authz/allow"
BATCH = "/v1/data/kafka/authz/batch"


def document(topic: str, principal: str = "eve", *, address: str = "/10.0.0.5", log_if_denied: bool = True,
             api_key: int = 1) -> dict[str, Any]:
    return {
        "action": {"operation": "READ", "resourceReferenceCount": 1, "logIfAllowed": True,
                   "logIfDenied": log_if_denied,
                   "resourcePattern": {"resourceType": "TOPIC", "name": topic, "patternType": "LITERAL",
                                       "unknown": False}},
        "requestContext": {"clientAddress": address, "principal": {"principalType": "User", "name": principal},
                           "clientInformation": {"softwareName": "apache-kafka-java", "softwareVersion": "3.7.0"},
                           "connectionId": "10.0.0.1:9092-10.0.0.5:51234-7", "listenerName": "SASL_SSL",
                           "securityProtocol": "SASL_SSL",
                           "header": {"name": {"clientId": "billing-consumer", "correlationId": 42,
                                               "requestApiKey": api_key, "requestApiVersion": 13},
                                      "headerVersion": 2}},
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    data = tmp_path_factory.mktemp("kgov")
    settings = Settings(data_dir=data, cluster_id="c1", admin={"user": ADMIN[0], "password": ADMIN[1]},
                        sasl={"failed_authentication_delay_ms": 0})
    with serve_app(build_app(settings)) as url:
        yield url, data / "audit"


def authorizer_log(audit: Path) -> str:
    return (audit / "kafka-authorizer.log").read_text()


def test_a_batch_with_one_bad_document_decides_and_audits_none(server: tuple[str, Path]) -> None:
    """Every document is read before any is decided: a refused batch leaves no audit record of answers
    nobody received."""
    url, audit = server
    bad = copy.deepcopy(document("x"))
    bad["action"]["operation"] = "ANY"
    r = httpx.post(url + BATCH, json={"inputs": [document("batch-topic-one"), bad]})
    assert r.status_code == 400 and "operation must be one of" in r.json()["message"]
    ok = httpx.post(url + BATCH, json={"inputs": [document("batch-topic-two")]})
    assert ok.json() == {"result": [False]}
    log = authorizer_log(audit)
    assert "batch-topic-two" in log
    assert "batch-topic-one" not in log


def test_broker_decisions_are_audited_as_kafka_logs_them(server: tuple[str, Path]) -> None:
    url, audit = server
    assert httpx.post(url + ALLOW, json={"input": document("audited-topic", address="client.example/0:0:0:0:0:0:0:1")}
                      ).json() == {"result": False}
    assert httpx.post(url + ALLOW, json={"input": document("quiet-topic", log_if_denied=False)}).json() == {
        "result": False}
    log = authorizer_log(audit)
    assert ("INFO Principal = User:eve is Denied operation = READ from host = 0:0:0:0:0:0:0:1 on resource = "
            "Topic:LITERAL:audited-topic for request = Fetch with resourceRefCount = 1 based on rule DefaultDeny"
            in log), log[-2000:]
    assert "quiet-topic" not in log  # logIfDenied=false: Kafka does not log it either
    events = [json.loads(line) for line in (audit / "events.jsonl").read_text().splitlines()]
    (event,) = [e for e in events if "audited-topic" in json.dumps(e)]
    assert event["data"]["authenticationInfo"]["principal"] == "User:eve"
    assert event["data"]["requestMetadata"]["clientAddress"] == "0:0:0:0:0:0:0:1"
    assert event["data"]["request"] == {"clientId": "billing-consumer", "correlationId": 42}


LISTED_PROXY = "127.0.0.2"  # loopback addresses other than 127.0.0.1 reach the server too (Linux)


@pytest.fixture(scope="module")
def behind_a_listed_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A reverse proxy at 127.0.0.2 is listed; brokers at 10.0.0.5 (through it) and on loopback may decide."""
    data = tmp_path_factory.mktemp("kgov")
    settings = Settings(data_dir=data, cluster_id="c1", admin={"user": ADMIN[0], "password": ADMIN[1]},
                        sasl={"failed_authentication_delay_ms": 0}, http_forwarded_allow_ips=[LISTED_PROXY],
                        authz={"decision_api_networks": ["10.0.0.5/32", "127.0.0.0/30"]})
    port = free_port()
    with control_plane(build_app(settings), "127.0.0.1", port, forwarded_allow_ips=settings.http_forwarded_allow_ips):
        yield f"http://127.0.0.1:{port}", data / "audit"


@pytest.mark.parametrize(("source", "headers", "path", "caller"), [
    ("127.0.0.1", {}, ALLOW, {"address": "127.0.0.1", "proxy": None}),
    ("127.0.0.3", {}, BATCH, {"address": "127.0.0.3", "proxy": None}),
    # Forwarded by the listed proxy: the address checked (an IPv4-mapped one as IPv4), and the proxy.
    (LISTED_PROXY, {"X-Forwarded-For": "10.0.0.5"}, ALLOW, {"address": "10.0.0.5", "proxy": LISTED_PROXY}),
    (LISTED_PROXY, {"X-Forwarded-For": "::ffff:10.0.0.5"}, BATCH, {"address": "10.0.0.5", "proxy": LISTED_PROXY}),
])
def test_each_audited_decision_names_the_host_that_asked_for_it(
        behind_a_listed_proxy: tuple[str, Path], source: str, headers: dict[str, str], path: str,
        caller: dict[str, str | None]) -> None:
    """Any host on a listed network may ask for decisions: the audit event says which one did, beside the
    broker's client (`clientAddress`), so a decision a broker asked for can be told from anyone else's."""
    url, audit = behind_a_listed_proxy
    topic = f"asked-from-{source}-{len(headers)}-{path.rsplit('/', 1)[1]}"
    body = {"input": document(topic)} if path == ALLOW else {"inputs": [document(topic)]}
    with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=10) as client:
        r = client.post(url + path, json=body, headers=headers)
    assert r.status_code == 200, r.text
    events = [json.loads(line) for line in (audit / "events.jsonl").read_text().splitlines()]
    (event,) = [e for e in events if f"={topic}" in e["subject"]]
    assert event["data"]["requestMetadata"] == {"clientAddress": "10.0.0.5", "decisionApiCaller": caller}


def test_decisions_not_asked_through_the_decision_api_name_no_caller(tmp_path: Path) -> None:
    """The field is the decision API's: a control-plane request's own authorization event has none."""
    settings = Settings(data_dir=tmp_path, cluster_id="c1", admin={"user": ADMIN[0], "password": ADMIN[1]},
                        sasl={"failed_authentication_delay_ms": 0}, authz={"log_allowed": True})
    with serve_app(build_app(settings)) as url:
        assert httpx.get(url + "/v3/clusters/c1/acls", auth=ADMIN).status_code == 200
    events = [json.loads(line) for line in (tmp_path / "audit" / "events.jsonl").read_text().splitlines()]
    authorizations = [e for e in events if e["type"] == "io.kgov.authorization"]
    assert authorizations, [e["type"] for e in events]
    assert all("decisionApiCaller" not in e["data"]["requestMetadata"] for e in authorizations)


@pytest.fixture(scope="module")
def brokers_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("kgov"), cluster_id="c1",
                        admin={"user": ADMIN[0], "password": ADMIN[1]}, sasl={"failed_authentication_delay_ms": 0},
                        authz={"decision_api_networks": ["10.0.0.5/32"]})
    with serve_app(build_app(settings)) as url:
        yield url


def test_an_unlisted_caller_is_refused_before_its_body_is_read(brokers_only: str) -> None:
    """The answer comes while the declared body has not been sent: the route never waited for it."""
    host, port = httpx.URL(brokers_only).host, httpx.URL(brokers_only).port
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(f"POST {ALLOW} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                     "Content-Length: 100000\r\n\r\n".encode())
        answer = b""
        while b"decision_api_networks" not in answer:  # the head and the body may come in two reads
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 403"), answer
    assert b"decision_api_networks" in answer


def test_a_large_batch_does_not_hold_up_other_brokers_decisions(server: tuple[str, Path]) -> None:
    """A batch's decisions run beside the server's event loop: a single decision asked meanwhile (the
    plugin waits 5 s, then denies) is answered before a batch of thousands of audited denials ends."""
    url, audit = server
    docs = [document(f"big-batch-{i}") for i in range(4_000)]
    finished: dict[str, float] = {}

    def big_batch() -> None:
        r = httpx.post(url + BATCH, json={"inputs": docs}, timeout=120)
        assert r.status_code == 200 and r.json()["result"] == [False] * len(docs)
        finished["batch"] = time.monotonic()

    worker = threading.Thread(target=big_batch)
    worker.start()
    deadline = time.monotonic() + 60
    while "big-batch-0 " not in authorizer_log(audit):  # the batch is being decided (and audited)
        assert time.monotonic() < deadline and worker.is_alive()
        time.sleep(0.01)
    assert httpx.post(url + ALLOW, json={"input": document("single")}, timeout=120).json() == {"result": False}
    finished["single"] = time.monotonic()
    worker.join()
    assert finished["single"] < finished["batch"]
