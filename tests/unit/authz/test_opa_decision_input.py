"""The OPA-compatible decision API reads the opa-kafka-plugin's input document and fails closed.

The plugin (StyraInc/opa-kafka-plugin, OpaAuthorizer.scala, RequestContextSerializer) writes
`clientAddress` with Java's `InetAddress.toString()`: `/10.0.0.5`, or `name/10.0.0.5` once the
broker has resolved the client's name. Any answer other than `{"result": true}` (here: a 400) is a
denial for the plugin (`readTree(body).at("/result").asBoolean`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from authz.api import OpaInputError, _opa_decide
from authz.config import AuthzConfig
from authz.database import open_engine
from authz.model import Acl, Operation, PatternType, Permission, Principal, ResourceType
from authz.service import AuthorizerService

ADMIN = Principal("User", "admin")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthorizerService]:
    engine = open_engine(f"sqlite:///{tmp_path_factory.mktemp('opa')}/kgov.db")
    node = AuthorizerService(engine, AuthzConfig())
    node.start(background=False)
    node.create_acls([
        Acl(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:*", "*", Operation.READ, Permission.ALLOW),
        Acl(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:bob", "10.0.0.5", Operation.READ,
            Permission.DENY),
        Acl(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:bob", "0:0:0:0:0:0:0:1", Operation.READ,
            Permission.DENY),
    ], actor=ADMIN)
    yield node
    node.close()
    engine.dispose()


def document(address: Any = "/10.0.0.9", principal: str = "bob") -> dict[str, Any]:
    return {
        "action": {"operation": "READ", "resourceReferenceCount": 1, "logIfAllowed": True, "logIfDenied": True,
                   "resourcePattern": {"resourceType": "TOPIC", "name": "orders", "patternType": "LITERAL",
                                       "unknown": False}},
        "requestContext": {"clientAddress": address, "principal": {"principalType": "User", "name": principal},
                           "listenerName": "SASL_SSL", "securityProtocol": "SASL_SSL", "connectionId": "x",
                           "header": {"name": {"clientId": "c", "correlationId": 1, "requestApiKey": 1,
                                               "requestApiVersion": 12}, "headerVersion": 2}},
    }


@pytest.mark.parametrize("address", ["/10.0.0.5", "client.example/10.0.0.5", "/0:0:0:0:0:0:0:1",
                                     "localhost/0:0:0:0:0:0:0:1"])
def test_host_specific_deny_applies_whatever_the_java_rendering(service: AuthorizerService, address: str) -> None:
    assert _opa_decide(service, document(address)) is False


def test_other_hosts_are_allowed(service: AuthorizerService) -> None:
    assert _opa_decide(service, document("client.example/10.0.0.9")) is True


def _without(path: tuple[str, ...]) -> dict[str, Any]:
    doc = document()
    parent: Any = doc
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    return doc


def _with(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(document())
    parent: Any = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return doc


@pytest.mark.parametrize("doc", [
    _without(("requestContext", "clientAddress")),  # used to decide as host "" (no host DENY matched)
    _with(("requestContext", "clientAddress"), ""),
    _with(("requestContext", "clientAddress"), "client.example"),
    _with(("requestContext", "clientAddress"), 167772165),
    _with(("requestContext", "principal", "principalType"), None),  # used to become principal "None:bob"
    _with(("requestContext", "principal", "name"), ["bob"]),
    _with(("action", "operation"), 3),
    _with(("action", "logIfDenied"), "false"),
    _with(("action", "resourceReferenceCount"), True),
    _with(("action", "resourcePattern", "resourceType"), None),
    _without(("action", "resourcePattern", "name")),
    _with(("action", "resourcePattern", "patternType"), "MATCH"),
    _with(("requestContext", "header"), {"name": "not-an-object"}),
])
def test_malformed_documents_are_refused(service: AuthorizerService, doc: dict[str, Any]) -> None:
    with pytest.raises(OpaInputError):
        _opa_decide(service, doc)


@pytest.mark.parametrize(("doc", "message"), [
    ({"action": {}}, "'requestContext' is required"),
    (_without(("action", "resourcePattern", "name")), "'name' is required"),
    (_with(("requestContext", "principal"), "User:bob"), "'principal' must be a JSON object"),
    (_with(("requestContext", "principal", "principalType"), None), "'principalType' must be a string"),
    (_with(("action", "resourceReferenceCount"), True), "'resourceReferenceCount' must be an integer"),
    (_with(("action", "logIfDenied"), "false"), "'logIfDenied' must be true or false"),
])
def test_refusals_name_the_field_and_what_it_must_be(service: AuthorizerService, doc: dict[str, Any],
                                                     message: str) -> None:
    with pytest.raises(OpaInputError) as refused:
        _opa_decide(service, doc)
    assert str(refused.value) == message
