"""Kafka's audit-relevant log lines across broker generations: writers (for the generator) and patterns.

kgov's own 3.3+ authorizer line and the log4j envelope come from `audit.kafka_format`; the older
generations live here because only the compliance job reads them:

- 0.9-1.x:  `Principal = P is Allowed Operation = Write from host = H on resource = Topic:orders`
- 2.0-2.3:  the resource gains its pattern type, `Topic:LITERAL:orders`
- 2.4-3.x:  `... for request = Produce with resourceRefCount = 1` (ZooKeeper `AclAuthorizer`)
- 3.3+:     lower-case `operation = WRITE` and `... based on rule MatchingAcl(acl=StandardAcl(...))`
- request log 1.0-2.7: `Completed request:RequestHeader(apiKey=FETCH, ...) -- {...},response:{...} from
  connection L-R-i;totalTime:...,principal:User:x,listener:L[,clientInformation:ClientInformation(...)]`
- request log 2.8+:    `Completed request:{...one-line JSON...}` (KIP-673)
- server.log (2.2+):   `Failed authentication with /IP [(channelId=...)] (reason)` from `Selector`

The patterns are Java regular expressions run by Spark's `regexp_extract`; the pure-Python reference
parser (`spark_compliance.reference_parser`) runs the same text through `re`.
Client-chosen text (group and transactional ids) sits in the resource name, so the name is matched
greedily up to the LAST ` for request = ` trailer anchored at the end of the line: a crafted group id
such as `x for request = Produce with resourceRefCount = 9` cannot shift the fields after it. The
principal (a TLS DN contains spaces and commas) is matched lazily up to the first ` is Allowed ` /
` is Denied `.

Kafka prints principal and resource name unescaped, so its line is ambiguous when either contains
` is Allowed|Denied Operation = ... on resource = `: no parser can tell which split Kafka wrote. The
ingest takes the reading that cannot hide a denial: if the first split says Allowed but a later one
says Denied, the LAST Denied split is taken (`AUTHZ_LAST_DENIED`). A crafted principal
(`User:alice is Allowed Operation = Read ... on resource = Topic:LITERAL:x`) therefore cannot turn its
own denial into an allowed access of `User:alice`; and the principal of a real denial always starts
with the real principal. (The price: an allowed access whose names contain a fake ` is Denied ... `
counts as a denial, of a principal that begins with the real one.)

Kafka does not escape line breaks in names either: a group id containing `\n` cuts a line in two. The
first part still starts with the envelope and `Principal = ... is Denied ...`; it is parsed as an
authorizer decision whatever it ends with (`AUTHZ_OLD` also matches a line without the logger suffix),
so a crafted tail such as ` (kafka.server.KafkaServer)` cannot make a denial look like another
logger's line. The second part can be a forged line; nothing in a line tells it from a real one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from audit.kafka_format import RESOURCE_TYPE_DISPLAY, log4j_envelope, resource_display

AUTHORIZER_SUFFIX = " (kafka.authorizer.logger)"
REQUEST_SUFFIX = " (kafka.request.logger)"
SELECTOR_SUFFIX = " (org.apache.kafka.common.network.Selector)"

# --- patterns (Java and Python `re` agree on every construct used here) -------------------------------
# Each full-line pattern is run ONCE per line by `regexp_replace`, which rewrites the line into its
# groups joined by FIELD_SEP; the ingest splits that. (One `regexp_extract` per field would re-run the
# pattern for every field.) The ingest first shows FIELD_SEP inside a line as U+FFFD, so a name holding it
# cannot split the line into too many fields.
FIELD_SEP = "\x01"
# `(?s)`: `.` matches every character. Without it Java's `.` stops at U+0085, U+2028 and U+2029 (Python's
# only at `\n`), so a crafted name containing one would make Spark and the reference parser disagree.
_ENV = r"(?s)^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] ([A-Z]+) "
# Any well-formed log4j line of another logger: counted as ignored, not as bad.
OTHER_LOGGER = r"(?s)^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] [A-Z]+ .* \([\w.$-]+\)$"

# Authorizer decision line, 2.4+ (ZooKeeper and KRaft). Fields: ts, level, principal, verdict, operation,
# host, resource type, pattern type, resource name, request, resourceRefCount, rule.
def _authz(principal: str, verdict: str) -> str:
    return (_ENV + rf"Principal = {principal} is {verdict} [Oo]peration = (\w+) from host = (\S+) "
            r"on resource = (\w+):(?:(LITERAL|PREFIXED):)?(.*) for request = (\w+) with resourceRefCount = (\d+)"
            r"(?: based on rule (.+))? \(kafka\.authorizer\.logger\)$")


# 0.9-2.3: no trailer (same field positions, the last three empty). The logger suffix is optional: a
# line cut by a line break inside a name still names its principal and decision (module docstring).
def _authz_old(principal: str, verdict: str) -> str:
    return (_ENV + rf"Principal = {principal} is {verdict} [Oo]peration = (\w+) from host = (\S+) "
            r"on resource = (\w+):(?:(LITERAL|PREFIXED):)?(.*?)(?: \(kafka\.authorizer\.logger\))?$")


AUTHZ = _authz("(.+?)", "(Allowed|Denied)")
AUTHZ_FIELDS = "$1\x01$2\x01$3\x01$4\x01$5\x01$6\x01$7\x01$8\x01$9\x01$10\x01$11\x01$12"
AUTHZ_OLD = _authz_old("(.+?)", "(Allowed|Denied)")
AUTHZ_OLD_FIELDS = "$1\x01$2\x01$3\x01$4\x01$5\x01$6\x01$7\x01$8\x01$9\x01\x01\x01"
# The reading that cannot hide a denial (module docstring): the principal up to the LAST ` is Denied `.
AUTHZ_LAST_DENIED = _authz("(.+)", "(Denied)")
AUTHZ_OLD_LAST_DENIED = _authz_old("(.+)", "(Denied)")
# A decision line whatever it ends with (told by its first 60 characters).
AUTHZ_HEAD = r"^\[[^\]]+\] [A-Z]+ Principal = "
# ZooKeeper AclAuthorizer DEBUG lines. Fields: ts, level, principal.
AUTHZ_SUPER_USER = (
    _ENV + r"principal = (.+?) is a super user, allowing operation without checking acls\."
    r" \(kafka\.authorizer\.logger\)$"
)
SUPER_USER_FIELDS = "$1\x01$2\x01$3"
# `No acl found for resource <R>, authorized = true`; <R> is `Topic:LITERAL:x` (2.x) or
# `ResourcePattern(resourceType=TOPIC, name=x, patternType=LITERAL)` (3.x). Fields: ts, level, R, authorized.
AUTHZ_NO_ACL = _ENV + r"No acl found for resource (.*), authorized = (true|false) \(kafka\.authorizer\.logger\)$"
NO_ACL_FIELDS = "$1\x01$2\x01$3\x01$4"
NO_ACL_PATTERN_RESOURCE = r"(?s)^ResourcePattern\(resourceType=(\w+), name=(.*), patternType=(\w+)\)$"
NO_ACL_DISPLAY_RESOURCE = r"(?s)^(\w+):(?:(LITERAL|PREFIXED):)?(.*)$"
# The ZooKeeper authorizer's per-ACL DEBUG line names no requester: ignored.
# (`operation = READ on resource = ... based on acl = ...`), told by its first 60 characters.
AUTHZ_ACL_DETAIL_HEAD = r"^\[[^\]]+\] [A-Z]+ operation = \w+ "

# Request log 1.0-2.7. Fields: ts, level, apiKey, apiVersion, clientId, body, connection, protocol,
# principal, listener, softwareName, softwareVersion. The body is client-influenced, so the connection
# is taken from the LAST ` from connection `. The client id is any string too: it runs to the LAST
# `, correlationId=N)` (a client id holding `, correlationId=1) -- {...partitionSizes=[decoy-0=1]}`
# would otherwise start a body of its making, with the topic and bytes of a Produce).
REQUEST_TEXT = (
    _ENV + r"Completed request:RequestHeader\(apiKey=(\w+), apiVersion=(\d+), clientId=(.*), "
    r"correlationId=-?\d+\)(.*) from connection (\S+);totalTime:[^;]*?securityProtocol:(\w+),"
    r"principal:(.*),listener:([\w-]+)"
    r"(?:,clientInformation:ClientInformation\(softwareName=(.*?), softwareVersion=(.*?)\))?"
    r"(?:,temporaryMemoryBytes:\d+)?(?:,messageConversionsTime:[\d.]+)? \(kafka\.request\.logger\)$"
)
REQUEST_TEXT_FIELDS = "$1\x01$2\x01$3\x01$4\x01$5\x01$6\x01$7\x01$8\x01$9\x01$10\x01$11\x01$12"
# Produce bodies at DEBUG: `partitionSizes=[orders-0=15514,orders-1=20]`.
PRODUCE_SIZES = r"^ -- \{[^}]*?partitionSizes=\[([^\]]*)\]"
# Request log 2.8+. Fields: ts, level, JSON object.
REQUEST_JSON = _ENV + r"Completed request:(\{.*\}) \(kafka\.request\.logger\)$"
REQUEST_JSON_FIELDS = "$1\x01$2\x01$3"
# server.log (Selector). Fields: ts, level, re-, client address, reason.
AUTH_FAILURE = (
    _ENV + r".*?Failed (re-)?authentication with [^/ ]*/([0-9A-Fa-f:.]+)(?: \(channelId=[^)]*\))? \((.*)\)"
    r" \(org\.apache\.kafka\.common\.network\.Selector\)$"
)
AUTH_SUCCESS = (
    _ENV + r".*?Successfully (re-)?authenticated with [^/ ]*/([0-9A-Fa-f:.]+)(?: \(channelId=[^)]*\))?()"
    r" \(org\.apache\.kafka\.common\.network\.Selector\)$"
)
AUTH_FIELDS = "$1\x01$2\x01$3\x01$4\x01$5"
SASL_MECHANISM = r"SASL mechanism ([\w-]+)"
CONNECTION_REMOTE_HOST = r"^[^-]+-([^-]+):\d+-\d+$"

# PascalCase (`AlterConfigs`, `TransactionalId`) to Kafka's enum spelling (`ALTER_CONFIGS`).
PASCAL_BOUNDARY = r"([a-z0-9])([A-Z])"


# --- writers for the generations `audit` does not produce ---------------------------------------------
def _pascal(enum_name: str) -> str:
    return "".join(part.capitalize() for part in enum_name.split("_"))


def _type_display(resource_type: str) -> str:
    return RESOURCE_TYPE_DISPLAY.get(resource_type, _pascal(resource_type))


def authorizer_line_v1(*, principal: str, allowed: bool, operation: str, host: str,
                       resource_type: str, resource_name: str) -> str:
    """Kafka 0.9-1.x `SimpleAclAuthorizer` message: PascalCase operation, no pattern type."""
    verdict = "Allowed" if allowed else "Denied"
    return (
        f"Principal = {principal} is {verdict} Operation = {_pascal(operation)} from host = {host} "
        f"on resource = {_type_display(resource_type)}:{resource_name}"
    )


def authorizer_line_v2(*, principal: str, allowed: bool, operation: str, host: str,
                       resource_type: str, pattern_type: str, resource_name: str) -> str:
    """Kafka 2.0-2.3: the resource carries its pattern type."""
    verdict = "Allowed" if allowed else "Denied"
    resource = f"{_type_display(resource_type)}:{pattern_type}:{resource_name}"
    return (
        f"Principal = {principal} is {verdict} Operation = {_pascal(operation)} from host = {host} "
        f"on resource = {resource}"
    )


def authorizer_line_v24(*, principal: str, allowed: bool, operation: str, host: str, resource_type: str,
                        pattern_type: str, resource_name: str, request_name: str, ref_count: int) -> str:
    """Kafka 2.4-3.x ZooKeeper `AclAuthorizer` (KIP-504): adds the request and reference count."""
    head = authorizer_line_v2(principal=principal, allowed=allowed, operation=operation, host=host,
                              resource_type=resource_type, pattern_type=pattern_type,
                              resource_name=resource_name)
    return f"{head} for request = {request_name} with resourceRefCount = {ref_count}"


def super_user_line(principal: str) -> str:
    return f"principal = {principal} is a super user, allowing operation without checking acls."


def no_acl_found_line(resource_type: str, resource_name: str, authorized: bool) -> str:
    """ZooKeeper `AclAuthorizer` 3.x rendering of `allow.everyone.if.no.acl.found`."""
    pattern = f"ResourcePattern(resourceType={resource_type}, name={resource_name}, patternType=LITERAL)"
    return f"No acl found for resource {pattern}, authorized = {str(authorized).lower()}"


def no_acl_found_line_v2(resource_type: str, resource_name: str, authorized: bool) -> str:
    """Kafka 2.x rendering of the same line."""
    return (f"No acl found for resource {resource_display(resource_type, 'LITERAL', resource_name)}, "
            f"authorized = {str(authorized).lower()}")


def connection_id(local: str, remote_host: str, remote_port: int, index: int = 0) -> str:
    """`SocketServer`'s connection id `localHost:localPort-remoteHost:remotePort-index`."""
    return f"{local}-{remote_host}:{remote_port}-{index}"


def request_line_text(*, api_key: str, api_version: int, client_id: str, correlation_id: int,
                      body: str, response: str, connection: str, principal: str, listener: str,
                      security_protocol: str, software: tuple[str, str] | None) -> str:
    """Kafka 1.0-2.7 `Completed request:` line (`software` is only printed from 2.5)."""
    line = (
        f"Completed request:RequestHeader(apiKey={api_key}, apiVersion={api_version}, clientId={client_id}, "
        f"correlationId={correlation_id}) -- {body},response:{response} from connection {connection};"
        f"totalTime:1.2,requestQueueTime:0.1,localTime:0.9,remoteTime:0.0,throttleTime:0,"
        f"responseQueueTime:0.05,sendTime:0.1,securityProtocol:{security_protocol},principal:{principal},"
        f"listener:{listener}"
    )
    if software is not None:
        line += f",clientInformation:ClientInformation(softwareName={software[0]}, softwareVersion={software[1]})"
    return line


def request_line_json(*, api_key_name: str, api_key: int, api_version: int, client_id: str,
                      correlation_id: int, request: Mapping[str, Any], response: Mapping[str, Any],
                      connection: str, principal: str, listener: str, security_protocol: str,
                      software: tuple[str, str]) -> str:
    """Kafka 2.8+ `Completed request:` line with the KIP-673 JSON object."""
    obj = {
        "isForwarded": False,
        "requestHeader": {"requestApiKey": api_key, "requestApiVersion": api_version,
                          "correlationId": correlation_id, "clientId": client_id,
                          "requestApiKeyName": api_key_name},
        "request": dict(request),
        "response": dict(response),
        "connection": connection,
        "totalTimeMs": 1.3, "requestQueueTimeMs": 0.1, "localTimeMs": 1.0, "remoteTimeMs": 0.0,
        "throttleTimeMs": 0, "responseQueueTimeMs": 0.1, "sendTimeMs": 0.1,
        "securityProtocol": security_protocol, "principal": principal, "listener": listener,
        "clientInformation": {"softwareName": software[0], "softwareVersion": software[1]},
    }
    return "Completed request:" + json.dumps(obj, separators=(",", ":"))


def auth_failure_line(*, client_ip: str, client_port: int, local: str, mechanism: str,
                      with_channel_id: bool, node_id: int) -> str:
    """`Selector`'s INFO line (2.2+); `channelId` appears from 3.2."""
    desc = f"/{client_ip}"
    if with_channel_id:
        desc += f" (channelId={connection_id(local, client_ip, client_port)})"
    reason = ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
              f"{mechanism}")
    return f"[SocketServer listenerType=ZK_BROKER, nodeId={node_id}] Failed authentication with {desc} ({reason})"


# Kafka's `[%d] %p %m (%c)`, exactly `audit`'s rendering.
envelope = log4j_envelope
