"""The OPA-compatible decision API reads the opa-kafka-plugin's input document and fails closed.

The plugin (StyraInc/opa-kafka-plugin, OpaAuthorizer.scala, RequestContextSerializer) writes
`clientAddress` with Java's `InetAddress.toString()`: `/10.0.0.5`, or `name/10.0.0.5` once the
broker has resolved the client's name. Any answer other than `{"result": true}` (here: a 400) is a
denial for the plugin (`readTree(body).at("/result").asBoolean`).
"""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Iterator
from typing import Any

import pytest

from authz.api import OpaInputError, _networks, _opa_decide, _plain_address
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


# Every field as the plugin writes it, and nothing else (OpaAuthorizer.scala's serializers): Java's
# enum `name()`s, the header's shorts and ints, the flags Kafka's `Action` carries, `InetAddress.toString()`.
@pytest.mark.parametrize(("doc", "message"), [
    (_with(("requestContext", "listenerName"), {"name": "SASL_SSL"}), "'listenerName' must be a string"),
    (_without(("requestContext", "listenerName")), "'listenerName' is required"),
    (_with(("requestContext", "securityProtocol"), 3), "'securityProtocol' must be a string"),
    (_with(("requestContext", "securityProtocol"), "HTTPS"), "securityProtocol must be one of"),
    (_without(("requestContext", "header")), "'header' is required"),
    (_with(("requestContext", "header"), {"data": {"clientId": "c", "correlationId": 1, "requestApiKey": 1,
                                                   "requestApiVersion": 12}}), "'name' is required"),
    (_without(("requestContext", "header", "name", "requestApiKey")), "'requestApiKey' is required"),
    (_with(("requestContext", "header", "name", "requestApiKey"), 99_999), "'requestApiKey' must be"),
    (_with(("requestContext", "header", "name", "requestApiKey"), -1), "'requestApiKey' must be"),
    (_with(("requestContext", "header", "name", "requestApiVersion"), 1 << 16), "'requestApiVersion' must be"),
    (_with(("requestContext", "header", "name", "correlationId"), 1 << 31), "'correlationId' must be"),
    (_with(("requestContext", "header", "name", "clientId"), 7), "'clientId' must be a string or null"),
    (_with(("requestContext", "clientAddress"), "10.0.0.9"), "clientAddress must be"),
    (_with(("requestContext", "connectionId"), 5), "'connectionId' must be a string"),
    (_with(("action", "resourceReferenceCount"), -5), "'resourceReferenceCount' must be"),
    (_without(("action", "resourceReferenceCount")), "'resourceReferenceCount' is required"),
    (_without(("action", "logIfAllowed")), "'logIfAllowed' is required"),
    (_without(("action", "logIfDenied")), "'logIfDenied' is required"),
    (_without(("action", "resourcePattern", "patternType")), "'patternType' is required"),
    (_with(("action", "operation"), "ANY"), "operation must be one of"),
    (_with(("action", "operation"), "UNKNOWN"), "operation must be one of"),
    (_with(("action", "operation"), "read"), "operation must be one of"),
    (_with(("action", "resourcePattern", "resourceType"), "ANY"), "resourceType must be one of"),
    (_with(("action", "resourcePattern", "resourceType"), "UNKNOWN"), "resourceType must be one of"),
    (_with(("action", "resourcePattern", "resourceType"), "Topic"), "resourceType must be one of"),
    (_with(("action", "resourcePattern", "unknown"), True), "'unknown' must be false"),
    (_with(("action", "resourcePattern", "name"), "orders\ud800"), "lone surrogate"),
    (_with(("requestContext", "principal", "name"), "bob\udfff"), "lone surrogate"),
    (_with(("requestContext", "header", "name", "clientId"), "c\ud800"), "lone surrogate"),
])
def test_only_what_the_plugin_writes_is_read(service: AuthorizerService, doc: dict[str, Any], message: str) -> None:
    with pytest.raises(OpaInputError) as refused:
        _opa_decide(service, doc)
    assert message in str(refused.value)


@pytest.mark.parametrize("doc", [
    _with(("requestContext", "header", "name", "clientId"), None),  # header v0 has no client id
    _with(("requestContext", "securityProtocol"), "PLAINTEXT"),
    _with(("requestContext", "clientAddress"), "/fe80:0:0:0:0:0:0:1%eth0"),
    _without(("requestContext", "connectionId")),  # not read, so not required
    _with(("requestContext", "clientInformation"), {"softwareName": "apache-kafka-java", "softwareVersion": "3.7.0"}),
    _with(("action", "resourcePattern", "unknown"), False),
    _with(("extra",), {"a future field": 1}),  # fields the plugin may add later are not read
])
def test_what_the_plugin_writes_is_answered(service: AuthorizerService, doc: dict[str, Any]) -> None:
    assert _opa_decide(service, doc) is True


@pytest.mark.parametrize(("entry", "caller", "admitted"), [
    ("10.0.0.5/32", "::ffff:10.0.0.5", True),  # a dual-stack listener's view of an IPv4 broker
    ("::ffff:10.0.0.0/104", "10.0.0.9", True),  # the same network written as IPv4-mapped IPv6
    ("::ffff:10.0.0.0/104", "::ffff:10.0.0.9", True),
    ("::ffff:10.0.0.0/104", "11.0.0.9", False),
    ("10.0.0.5/32", "::ffff:10.0.0.6", False),
    ("::/0", "10.0.0.5", False),  # IPv6 everywhere is not IPv4
    ("2001:db8::/32", "2001:db8::7", True),
])
def test_decision_api_networks_read_ipv4_mapped_addresses_as_ipv4(entry: str, caller: str, admitted: bool) -> None:
    addr = _plain_address(ipaddress.ip_address(caller))
    assert any(addr in net for net in _networks((entry,))) is admitted
