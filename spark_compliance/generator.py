"""Synthetic audit logs for tests and benchmarks: `kgov audit generate --lines N --seed S --out DIR`.

Writes a week (from Monday 2024-04-01 UTC) of mixed-generation logs for one cluster fronted by a kgov
gateway, plus the inventory, the classification and `planted.json`, the incidents planted on purpose:

    DIR/logs/broker-1/kafka-authorizer.log   Kafka 1.1 (0.9-1.x format)
    DIR/logs/broker-2/kafka-authorizer.log   Kafka 2.3 (pattern types)           + kafka-request.log (text),
                                                                                   server.log
    DIR/logs/broker-3/kafka-authorizer.log   Kafka 2.7 ZooKeeper (request trailer, super-user and no-ACL
                                             DEBUG lines)                         + kafka-request.log (text with
                                                                                   clientInformation), server.log
    DIR/logs/broker-4/kafka-authorizer.log   Kafka 3.6 KRaft (kgov's `audit.kafka_format` line, with rules)
                                                                                  + kafka-request.log (2.8+ JSON,
                                                                                   Fetch by topic id), server.log
    DIR/logs/gateway-1/events.jsonl          kgov CloudEvents (authorization, request, authentication, changes)
    DIR/inventory.json  DIR/classification.json  DIR/planted.json

The background is benign by construction (approved access to classified topics, steady service
volumes, people active in business hours only, every grant used, every (principal, host) pair seen in
the first day), so a correct run reports exactly the planted incidents. Same seed, same files.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from audit.kafka_format import authorizer_log_line, standard_acl_display
from audit.model import AuditEvent, EventType, authorization_event, change_event
from audit.request_log import authentication_event
from spark_compliance import kafka_lines as K

START = datetime(2024, 4, 1, tzinfo=UTC)  # a Monday
DAYS = 7
MIN_LINES = 5000
CLUSTER = "kafka-cluster"
GATEWAY_SOURCE = "kgov://gateway-1"

AUTHZ, REQ, SERVER, EVENTS = "kafka-authorizer.log", "kafka-request.log", "server.log", "events.jsonl"


@dataclass(frozen=True, slots=True)
class Action:
    operation: str
    resource_type: str
    resource_name: str
    api: str
    allowed: bool = True
    # The granting ACL (operation, pattern type, name) if not the action's own literal one.
    acl: tuple[str, str, str] | None = None


@dataclass(frozen=True, slots=True)
class Actor:
    principal: str
    hosts: tuple[str, ...]
    human: bool
    actions: tuple[Action, ...]
    software: tuple[str, str] = ("apache-kafka-java", "3.6.1")
    fetches: tuple[str, ...] = ()  # topics it consumes (request logs)
    produces: tuple[str, ...] = ()
    binding: tuple[str, str] | None = None  # (role, topic): the gateway authorizes it by role binding


CRAFTED_GROUP = "audit-x for request = Produce with resourceRefCount = 9"
ETL = "User:CN=etl,OU=Data,O=Acme Inc,C=GB"
MALLORY = "User:CN=mallory,OU=Contractors,O=Example Corp,L=Berlin,C=DE"

ACTORS: tuple[Actor, ...] = (
    Actor("User:orders-svc", ("10.1.0.11", "10.1.0.12"), False, (
        Action("WRITE", "TOPIC", "orders", "Produce"), Action("DESCRIBE", "TOPIC", "orders", "Metadata"),
        Action("IDEMPOTENT_WRITE", "CLUSTER", CLUSTER, "InitProducerId")), produces=("orders",)),
    Actor("User:billing-svc", ("10.1.0.21",), False, (
        Action("READ", "TOPIC", "payments", "Fetch"), Action("READ", "GROUP", "billing", "OffsetCommit")),
        software=("librdkafka", "2.3.0"), fetches=("payments",)),
    Actor("User:analytics-svc", ("10.1.0.31", "10.1.0.32"), False, (
        Action("READ", "TOPIC", "customers", "Fetch"), Action("READ", "GROUP", "analytics", "OffsetCommit")),
        fetches=("customers",)),
    Actor("User:crm", ("10.1.0.41",), False, (
        Action("READ", "TOPIC", "customers", "Fetch"), Action("WRITE", "TOPIC", "customers", "Produce")),
        software=("confluent-kafka-python", "2.3.0"), fetches=("customers",), produces=("customers",),
        binding=("DeveloperRead", "customers")),
    Actor(ETL, ("10.1.0.51",), False, (
        Action("READ", "TOPIC", "orders", "Fetch"), Action("READ", "GROUP", CRAFTED_GROUP, "JoinGroup"),
        Action("READ", "TOPIC", "inventory", "Fetch")), fetches=("orders", "inventory")),
    Actor("User:inventory-svc", ("10.1.0.61",), False, (
        Action("WRITE", "TOPIC", "inventory", "Produce"), Action("READ", "TOPIC", "inventory", "Fetch"),
        Action("DESCRIBE", "TOPIC", "payments", "Metadata", allowed=False)),
        software=("apache-kafka-java", "2.6.0"), fetches=("inventory",), produces=("inventory",)),
    Actor("User:reporting-svc", ("10.1.0.71",), False, (
        Action("READ", "TOPIC", "metrics-daily", "Fetch", acl=("ALL", "PREFIXED", "metrics-")),
        Action("DESCRIBE", "TOPIC", "metrics-daily", "Metadata", acl=("ALL", "PREFIXED", "metrics-"))),
        fetches=("metrics-daily",)),
    Actor("User:alice", ("10.2.0.1",), True, (
        Action("READ", "TOPIC", "orders", "Fetch"), Action("DESCRIBE", "TOPIC", "inventory", "Metadata",
                                                           acl=("READ", "LITERAL", "inventory")))),
    Actor("User:bob", ("10.2.0.2",), True, (Action("READ", "TOPIC", "orders", "Fetch"),)),
    Actor("User:carol", ("10.2.0.3",), True, (Action("READ", "TOPIC", "inventory", "Fetch"),)),
    Actor("User:dave", ("10.2.0.4",), True, (Action("READ", "TOPIC", "orders", "Fetch"),)),
    Actor("User:frank", ("10.2.0.6",), True, (Action("READ", "TOPIC", "metrics-daily", "Fetch"),)),
)
TOPICS = ("orders", "payments", "customers", "inventory", "metrics-daily", "scratch", "legacy-orders")


def topic_id(name: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(name.encode()).digest()[:16]).decode().rstrip("=")


def _acl_of(actor: Actor, action: Action) -> dict[str, str]:
    op, pattern, name = action.acl or (action.operation, "LITERAL", action.resource_name)
    return {"resource_type": action.resource_type, "resource_name": name, "pattern_type": pattern,
            "principal": actor.principal, "host": "*", "operation": op, "permission": "ALLOW"}


def _binding_rule(actor: Actor) -> str | None:
    if actor.binding is None:
        return None
    return (f"RoleBinding(principal={actor.principal}, role={actor.binding[0]}, resourceType=TOPIC, "
            f"resourceName={actor.binding[1]}, patternType=LITERAL)")


def _by_binding(actor: Actor, action: Action) -> bool:
    return actor.binding is not None and action.resource_name == actor.binding[1] and action.operation == "READ"


def _business(ts: datetime) -> bool:
    return ts.weekday() < 5 and 8 <= ts.hour < 18


@dataclass
class Plan:
    """Lines planted into each (source, file), and the incidents they make."""
    lines: dict[tuple[str, str], list[tuple[datetime, str]]] = field(default_factory=dict)
    incidents: list[dict[str, str | None]] = field(default_factory=list)
    silences: dict[tuple[str, str], tuple[datetime, datetime]] = field(default_factory=dict)
    extra_acls: list[dict[str, str]] = field(default_factory=list)

    def add(self, source: str, file: str, ts: datetime, line: str) -> None:
        self.lines.setdefault((source, file), []).append((ts, line))

    def incident(self, rule: str, principal: str | None = None, host: str | None = None,
                 resource: str | None = None) -> None:
        self.incidents.append({"rule": rule, "principal": principal, "host": host, "resource": resource})


class _Writer:
    """Renders one event in each source's format."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.n = 0

    def _env(self, ts: datetime, level: str, msg: str, logger: str = "kafka.authorizer.logger") -> str:
        return K.envelope(ts, level, msg, logger)

    def authz(self, source: str, ts: datetime, actor_principal: str, host: str, action: Action,
              acl: dict[str, str] | None, *, rule: str | None = None, trace: bool = False) -> str:
        allowed = action.allowed
        level = "TRACE" if trace else ("DEBUG" if allowed else "INFO")
        kw: dict[str, Any] = {"principal": actor_principal, "allowed": allowed, "operation": action.operation,
                              "host": host, "resource_type": action.resource_type}
        if source == "broker-1":
            msg = K.authorizer_line_v1(resource_name=action.resource_name, **kw)
        elif source == "broker-2":
            msg = K.authorizer_line_v2(pattern_type="LITERAL", resource_name=action.resource_name, **kw)
        elif source == "broker-3":
            msg = K.authorizer_line_v24(pattern_type="LITERAL", resource_name=action.resource_name,
                                        request_name=action.api, ref_count=1, **kw)
        else:
            if rule is None:
                rule = (f"MatchingAcl(acl={standard_acl_display(**acl)})" if acl is not None and allowed
                        else "DefaultDeny")
            msg = authorizer_log_line(pattern_type="LITERAL", resource_name=action.resource_name,
                                      request_name=action.api, resource_ref_count=1, rule=rule, **kw)
        return self._env(ts, level, msg)

    def request(self, source: str, ts: datetime, principal: str, host: str, software: tuple[str, str],
                api: str, topic: str | None, nbytes: int, *, replica: int = -1) -> str:
        self.n += 1
        port = 40000 + self.n % 20000
        conn = K.connection_id("10.0.0.4:9093", host, port, self.n % 7)
        if source == "broker-4":
            if api == "FETCH":
                req: dict[str, Any] = {"replicaId": replica, "maxWaitMs": 500, "sessionId": 0,
                                       "topics": [{"topicId": topic_id(topic or ""), "partitions": [
                                           {"partition": 0, "fetchOffset": self.n}]}]}
                resp: dict[str, Any] = {"errorCode": 0, "sessionId": 0, "responses": [
                    {"topicId": topic_id(topic or ""), "partitions": [
                        {"partitionIndex": 0, "errorCode": 0, "highWatermark": self.n,
                         "recordsSizeInBytes": nbytes}]}]}
                key, version = 1, 13
            elif api == "PRODUCE":
                req = {"acks": -1, "timeoutMs": 30000, "topicData": [
                    {"name": topic, "partitionData": [{"index": 0, "recordsSizeInBytes": nbytes}]}]}
                resp = {"responses": [{"name": topic, "partitionResponses": [{"index": 0, "errorCode": 0}]}]}
                key, version = 0, 9
            else:
                req = {"topics": None, "allowAutoTopicCreation": False}
                resp = {"brokers": [], "clusterId": "c1", "topics": [
                    {"errorCode": 0, "name": t, "topicId": topic_id(t), "isInternal": False} for t in TOPICS]}
                key, version = 3, 12
            return self._env(ts, "DEBUG", K.request_line_json(
                api_key_name=api, api_key=key, api_version=version, client_id=f"{principal[5:12]}-{self.n % 3}",
                correlation_id=self.n, request=req, response=resp, connection=conn, principal=principal,
                listener="SASL_SSL", security_protocol="SASL_SSL", software=software), "kafka.request.logger")
        if api == "PRODUCE":
            body = f"{{acks=-1,timeout=30000,partitionSizes=[{topic}-0={nbytes}]}}"
        elif api == "FETCH":
            body = f"{{replica_id={replica},max_wait_time=500,min_bytes=1,topics=[{{topic={topic}}}]}}"
        else:
            body = "{topics=null,allow_auto_topic_creation=false}"
        return self._env(ts, "DEBUG", K.request_line_text(
            api_key=api, api_version=8, client_id=f"{principal[5:12]}-{self.n % 3}", correlation_id=self.n,
            body=body, response="{throttle_time_ms=0}", connection=conn, principal=principal, listener="SASL_SSL",
            security_protocol="SASL_SSL", software=software if source == "broker-3" else None),
            "kafka.request.logger")

    def auth_failure(self, source: str, ts: datetime, ip: str) -> str:
        self.n += 1
        return self._env(ts, "INFO", K.auth_failure_line(
            client_ip=ip, client_port=50000 + self.n % 10000, local="10.0.0.4:9093", mechanism="SCRAM-SHA-512",
            with_channel_id=source == "broker-4", node_id=int(source[-1])), "org.apache.kafka.common.network.Selector")

    def server_noise(self, ts: datetime) -> str:
        return self.rng.choice((
            self._env(ts, "INFO", "[GroupCoordinator 3]: Stabilized group analytics generation 12 (__consumer_offsets-7)",
                      "kafka.coordinator.group.GroupCoordinator"),
            self._env(ts, "INFO", "[Log partition=orders-0, dir=/var/lib/kafka] Rolled new log segment",
                      "kafka.log.Log"),
            self._env(ts, "INFO", "[ReplicaFetcher replicaId=3, leaderId=1, fetcherId=0] Truncating partition",
                      "kafka.server.ReplicaFetcherThread"),
        ))

    def event(self, ev: AuditEvent) -> str:
        return ev.to_json()

    def gw_authz(self, ts: datetime, actor: Actor, host: str, action: Action, acl: dict[str, str] | None,
                 rule: str | None = None) -> str:
        self.n += 1
        if rule is None:
            if _by_binding(actor, action):
                rule = _binding_rule(actor) or "DefaultDeny"
            elif acl is not None and action.allowed:
                rule = f"MatchingAcl(acl={standard_acl_display(**acl)})"
            else:
                rule = "DefaultDeny"
        ev = authorization_event(
            source=GATEWAY_SOURCE, time=ts, principal=actor.principal, granted=action.allowed,
            operation=action.operation, resource_type=action.resource_type, resource_name=action.resource_name,
            pattern_type="LITERAL", client_address=f"{host}:{40000 + self.n % 20000}",
            method_name=f"kafka.{action.api}", rule=rule, client_id="gw-client", correlation_id=self.n)
        return AuditEvent(ev.type, ev.source, ev.subject, ev.time, ev.data, id=f"e{self.n}").to_json()

    def gw_request(self, ts: datetime, actor: Actor, host: str, api: str, topic: str, nbytes: int) -> str:
        self.n += 1
        line = self.request("broker-4", ts, actor.principal, host, actor.software, api, topic, nbytes)
        data = json.loads(line[line.index("Completed request:") + 18: -len(K.REQUEST_SUFFIX)])
        # kgov's gateway names topics in Fetch too (it decodes the request before forwarding).
        for r in (data.get("response") or {}).get("responses") or []:
            r["topic"] = topic
        return AuditEvent(EventType.REQUEST, GATEWAY_SOURCE, f"{GATEWAY_SOURCE}/topic={topic}", ts, data,
                          id=f"e{self.n}").to_json()

    def gw_auth(self, ts: datetime, principal: str | None, host: str, ok: bool) -> str:
        self.n += 1
        event = authentication_event(source=GATEWAY_SOURCE, time=ts, principal=principal, mechanism="SCRAM-SHA-512",
                                     client_address=host, success=ok,
                                     reason=None if ok else "Authentication failed: invalid credentials")
        return AuditEvent(event.type, event.source, event.subject, ts, event.data, id=f"e{self.n}").to_json()


def _at(day: int, hour: int, minute: int = 0, second: float = 0.0) -> datetime:
    return START + timedelta(days=day, hours=hour, minutes=minute, seconds=second)


def _actor(principal: str) -> Actor:
    return next(a for a in ACTORS if a.principal == principal)


def _plant(w: _Writer, rng: random.Random, expected_fetch_bytes_per_hour: float) -> Plan:
    p = Plan()
    # SUPER_USER_ACTIVITY: an administrator reads data on a Tuesday afternoon (inside the baseline days).
    admin_host = "10.0.0.250"
    for i in range(4):
        ts = _at(1, 14, 5 + i)
        p.add("broker-3", AUTHZ, ts, K.envelope(ts, "DEBUG", K.super_user_line("User:admin"), "kafka.authorizer.logger"))
        p.add("broker-3", AUTHZ, ts, w.authz("broker-3", ts, "User:admin", admin_host,
                                             Action("READ", "TOPIC", "inventory", "Fetch"), None))
        p.add("broker-4", AUTHZ, ts, w.authz("broker-4", ts, "User:admin", admin_host,
                                             Action("DESCRIBE", "TOPIC", "orders", "Metadata"), None, rule="SuperUser"))
    p.incident("SUPER_USER_ACTIVITY", "User:admin", admin_host)
    # DEFAULT_ALLOW: topic `scratch` has no ACL and allow.everyone.if.no.acl.found=true.
    orders = _actor("User:orders-svc")
    for i in range(3):
        ts = _at(2, 2, 10 + i)
        act = Action("WRITE", "TOPIC", "scratch", "Produce")
        p.add("broker-3", AUTHZ, ts, K.envelope(ts, "DEBUG", K.no_acl_found_line("TOPIC", "scratch", True),
                                                "kafka.authorizer.logger"))
        p.add("broker-3", AUTHZ, ts, w.authz("broker-3", ts, orders.principal, orders.hosts[0], act, None))
        p.add("broker-4", AUTHZ, ts, w.authz("broker-4", ts, orders.principal, orders.hosts[0], act, None,
                                             rule="DefaultAllow"))
    p.incident("DEFAULT_ALLOW", "User:orders-svc", None, "Topic:scratch")
    # PRIVILEGED_OPERATION: alice creates ACLs (KRaft broker) and resets a SCRAM credential (kgov).
    alice = _actor("User:alice")
    cluster_alter = {"resource_type": "CLUSTER", "resource_name": CLUSTER, "pattern_type": "LITERAL",
                     "principal": "User:alice", "host": "*", "operation": "ALTER", "permission": "ALLOW"}
    p.extra_acls.append(cluster_alter)
    for i in range(2):
        ts = _at(2, 11, 20 + i)
        p.add("broker-4", AUTHZ, ts, w.authz("broker-4", ts, alice.principal, alice.hosts[0],
                                             Action("ALTER", "CLUSTER", CLUSTER, "CreateAcls"), cluster_alter))
    p.incident("PRIVILEGED_OPERATION", "User:alice", alice.hosts[0], f"Cluster:{CLUSTER}")
    ts = _at(2, 11, 30)
    ce = change_event(
        type=EventType.CREDENTIAL_CHANGE, source=GATEWAY_SOURCE, time=ts, principal="User:alice",
        method_name="kgov.AlterUserScramCredentials", target="user=billing-svc",
        details={"mechanism": "SCRAM-SHA-512", "action": "upsert"}, client_address=alice.hosts[0])
    # A fixed id instead of a random one: the same seed writes the same bytes.
    p.add("gateway-1", EVENTS, ts, AuditEvent(ce.type, ce.source, ce.subject, ce.time, ce.data, id="e-change-1").to_json())
    p.incident("PRIVILEGED_OPERATION", "User:alice", alice.hosts[0], "user=billing-svc")
    # BRUTE_FORCE with a success, which is also a NEW_HOST for dave; and one without success.
    bad_ip = "203.0.113.50"
    for i in range(40):
        ts = _at(2, 9, 0, 7.0 * i)
        p.add("broker-4", SERVER, ts, w.auth_failure("broker-4", ts, bad_ip))
    dave = _actor("User:dave")
    ts = _at(2, 9, 6)
    p.add("gateway-1", EVENTS, ts, w.gw_auth(ts, dave.principal, bad_ip, True))
    for i in range(3):
        ts = _at(2, 9, 7 + i)
        p.add("gateway-1", EVENTS, ts, w.gw_authz(ts, dave, bad_ip, dave.actions[0], _acl_of(dave, dave.actions[0])))
    p.incident("BRUTE_FORCE", dave.principal, bad_ip)
    p.incident("NEW_HOST", dave.principal, bad_ip)
    for i in range(30):
        ts = _at(3, 13, 0, 9.0 * i)
        p.add("broker-3", SERVER, ts, w.auth_failure("broker-3", ts, "198.51.100.7"))
    p.incident("BRUTE_FORCE", None, "198.51.100.7")
    # DENIED_SPIKE: bob hammers the PCI topic he has no grant for.
    bob = _actor("User:bob")
    for i in range(150):
        ts = _at(3, 10, 0, 20.0 * i)
        src = ("broker-1", "broker-2", "broker-3", "broker-4")[i % 4]
        p.add(src, AUTHZ, ts, w.authz(src, ts, bob.principal, bob.hosts[0],
                                      Action("READ", "TOPIC", "payments", "Fetch", allowed=False), None))
    p.incident("DENIED_SPIKE", bob.principal, bob.hosts[0], "Topic:payments")
    # SENSITIVE_ACCESS: frank reads the PCI topic through a grant nobody reviewed.
    frank = _actor("User:frank")
    read_payments = Action("READ", "TOPIC", "payments", "Fetch")
    frank_acl = _acl_of(frank, read_payments)
    p.extra_acls.append(frank_acl)
    for i in range(5):
        ts = _at(3, 15, 2 * i)
        p.add("broker-4", AUTHZ, ts, w.authz("broker-4", ts, frank.principal, frank.hosts[0], read_payments, frank_acl))
    p.incident("SENSITIVE_ACCESS", frank.principal, frank.hosts[0], "Topic:payments")
    # NEW_PRINCIPAL: a contractor's certificate (a DN with spaces and commas) appears on Friday.
    mallory_acl = {"resource_type": "TOPIC", "resource_name": "orders", "pattern_type": "LITERAL",
                   "principal": MALLORY, "host": "*", "operation": "READ", "permission": "ALLOW"}
    p.extra_acls.append(mallory_acl)
    for i in range(10):
        ts = _at(4, 11, 3 * i)
        p.add("broker-4", AUTHZ, ts, w.authz("broker-4", ts, MALLORY, "10.3.3.3",
                                             Action("READ", "TOPIC", "orders", "Fetch"), mallory_acl))
    p.incident("NEW_PRINCIPAL", MALLORY, None)
    # NEW_HOST: the ETL certificate is used from a machine it never used before.
    etl = _actor(ETL)
    for i in range(4):
        ts = _at(4, 14, 5 * i)
        p.add("broker-3", AUTHZ, ts, w.authz("broker-3", ts, ETL, "10.8.8.8", etl.actions[0], None))
    p.incident("NEW_HOST", ETL, "10.8.8.8")
    # OFF_HOURS_ACCESS: carol, who works office hours, reads at 02:00 on Saturday. Her office hours are
    # planted too (12 reads a weekday): the rule needs `off_hours_min_events` of hers and an off-hours share
    # of at most `off_hours_max_share`, which her share of the background alone gives only in larger runs
    # (at MIN_LINES she had about 50 events, 6 of them off hours: 12%, and the incident went unreported).
    carol = _actor("User:carol")
    for day in range(5):
        for i in range(12):
            ts = _at(day, 10 + i // 3, 13 * (i % 3) + 5)
            p.add("broker-4", AUTHZ, ts, w.authz("broker-4", ts, carol.principal, carol.hosts[0], carol.actions[0],
                                                 _acl_of(carol, carol.actions[0])))
    for i in range(6):
        ts = _at(5, 2, 4 * i)
        p.add("broker-4", AUTHZ, ts, w.authz("broker-4", ts, carol.principal, carol.hosts[0], carol.actions[0],
                                             _acl_of(carol, carol.actions[0])))
    p.incident("OFF_HOURS_ACCESS", carol.principal, carol.hosts[0], "Topic:inventory")
    # EXFILTRATION_VOLUME: analytics pulls the whole PII topic at 03:00 on Saturday.
    analytics = _actor("User:analytics-svc")
    total = max(160 * 1024 * 1024, int(40 * expected_fetch_bytes_per_hour))
    for i in range(30):
        ts = _at(5, 3, i)
        p.add("broker-4", REQ, ts, w.request("broker-4", ts, analytics.principal, analytics.hosts[0],
                                             analytics.software, "FETCH", "customers", total // 30))
    # (host left open: with big inputs the background from its second host may outnumber the burst)
    p.incident("EXFILTRATION_VOLUME", analytics.principal, None, "Topic:customers")
    # OUTDATED_CLIENT: inventory-svc still runs a 2.6 Java client (background traffic shows it).
    p.incident("OUTDATED_CLIENT", "User:inventory-svc", None, "apache-kafka-java/2.6.0")
    # DORMANT_ACL and EXCESSIVE_GRANT: see `inventory()`.
    p.incident("DORMANT_ACL", "User:legacy-etl", None, "Topic:LITERAL:legacy-orders")
    p.incident("DORMANT_ACL", "Group:sales", None, "Topic:PREFIXED:orders-")
    p.incident("EXCESSIVE_GRANT", "User:reporting-svc", None, "Topic:PREFIXED:metrics-")
    # AUDIT_GAP: broker-2's authorizer log is silent for three hours.
    p.silences[("broker-2", AUTHZ)] = (_at(3, 1), _at(3, 4))
    p.incident("AUDIT_GAP", None, None, "broker-2/authorizer")
    for lines in p.lines.values():
        lines.sort(key=lambda x: x[0])
    return p


def inventory(extra_acls: list[dict[str, str]]) -> dict[str, Any]:
    acls: list[dict[str, str]] = []
    for actor in ACTORS:
        for action in actor.actions:
            if action.allowed and not _by_binding(actor, action):
                acl = _acl_of(actor, action)
                if acl not in acls:
                    acls.append(acl)
    acls.extend(a for a in extra_acls if a not in acls)
    acls.append({"resource_type": "TOPIC", "resource_name": "legacy-orders", "pattern_type": "LITERAL",
                 "principal": "User:legacy-etl", "host": "*", "operation": "READ", "permission": "ALLOW"})
    acls.append({"resource_type": "TOPIC", "resource_name": "payments", "pattern_type": "LITERAL",
                 "principal": "User:*", "host": "*", "operation": "WRITE", "permission": "DENY"})
    bindings = [{"principal": "User:crm", "role": "DeveloperRead", "resource_type": "TOPIC",
                 "resource_name": "customers", "pattern_type": "LITERAL"},
                {"principal": "Group:sales", "role": "DeveloperRead", "resource_type": "TOPIC",
                 "resource_name": "orders-", "pattern_type": "PREFIXED"}]
    return {"exported_at": (START + timedelta(days=DAYS)).strftime("%Y-%m-%dT%H:%M:%SZ"), "cluster_id": "c1",
            "acls": acls, "role_bindings": bindings, "super_users": ["User:admin", "User:kafka"]}


def classification() -> dict[str, Any]:
    return {"topics": [
        {"name": "payments", "pattern_type": "LITERAL", "classes": ["PCI"], "approved_principals": ["User:billing-svc"]},
        {"name": "customers", "pattern_type": "LITERAL", "classes": ["PII"],
         "approved_principals": ["User:analytics-svc", "User:crm"]},
    ], "subjects": [{"subject": "patients-value", "tags": ["PHI"], "approved_principals": []}]}


# Share of the lines per (source, file).
SHARES: dict[tuple[str, str], float] = {
    ("broker-1", AUTHZ): 0.12, ("broker-2", AUTHZ): 0.12, ("broker-3", AUTHZ): 0.12, ("broker-4", AUTHZ): 0.14,
    ("broker-2", REQ): 0.08, ("broker-3", REQ): 0.08, ("broker-4", REQ): 0.12,
    ("broker-2", SERVER): 0.03, ("broker-3", SERVER): 0.03, ("broker-4", SERVER): 0.03,
    ("gateway-1", EVENTS): 0.13,
}
_SERVICES = tuple(a for a in ACTORS if not a.human)
_CONSUMERS = tuple(a for a in ACTORS if a.fetches or a.produces)


def _grid(n: int, rng: random.Random) -> Iterator[datetime]:
    """`n` increasing times over the week, evenly spread with jitter (no silence longer than 2 slots)."""
    slot = DAYS * 86400.0 / n
    for i in range(n):
        yield START + timedelta(seconds=(i + rng.random()) * slot)


def _background(source: str, file: str, n: int, w: _Writer, rng: random.Random,
                silence: tuple[datetime, datetime] | None) -> Iterator[tuple[datetime, str]]:
    # Every (principal, host) pair, and every grant, shows up on Monday morning.
    if (source, file) == ("broker-4", AUTHZ):
        for k, actor in enumerate(ACTORS):
            for j, host in enumerate(actor.hosts):
                for m, action in enumerate(actor.actions):
                    ts = _at(0, 8, k * 3 + j, m)
                    if action.allowed:
                        yield ts, w.authz(source, ts, actor.principal, host, action, _acl_of(actor, action),
                                          rule=_binding_rule(actor) if _by_binding(actor, action) else None)
    if (source, file) == ("broker-4", REQ):
        yield START, w.request(source, START, "User:analytics-svc", "10.1.0.31", ("apache-kafka-java", "3.6.1"),
                               "METADATA", None, 0)
    for ts in _grid(n, rng):
        if silence is not None and silence[0] <= ts < silence[1]:
            continue
        pool = ACTORS if _business(ts) else _SERVICES
        if file == AUTHZ:
            actor = rng.choice(pool)
            action = rng.choice(actor.actions)
            host = rng.choice(actor.hosts)
            if actor.human and rng.random() < 0.05:  # filter checks (logIfDenied=false) are TRACE
                yield ts, w.authz(source, ts, actor.principal, host,
                                  Action("DESCRIBE", "TOPIC", "payments", "Metadata", allowed=False), None, trace=True)
            elif _by_binding(actor, action):
                yield ts, w.authz(source, ts, actor.principal, host, action, None, rule=_binding_rule(actor))
            else:
                yield ts, w.authz(source, ts, actor.principal, host, action, _acl_of(actor, action))
        elif file == REQ:
            if rng.random() < 0.02:
                # A follower fetch (dropped by the ingest) comes on top of the slot's client request, so the
                # stream has no silence the audit-gap rule would rightly report.
                yield ts, w.request(source, ts, "User:kafka", "10.0.0.2", ("apache-kafka-java", "3.6.1"),
                                    "FETCH", "orders", 900_000, replica=2)
            r = rng.random()
            actor = rng.choice(_CONSUMERS)
            host = rng.choice(actor.hosts)
            if r < 0.07:
                yield ts, w.request(source, ts, actor.principal, host, actor.software, "METADATA", None, 0)
            elif actor.fetches and (not actor.produces or r < 0.6):
                yield ts, w.request(source, ts, actor.principal, host, actor.software, "FETCH",
                                    rng.choice(actor.fetches), rng.randint(50_000, 500_000))
            else:
                yield ts, w.request(source, ts, actor.principal, host, actor.software, "PRODUCE",
                                    rng.choice(actor.produces), rng.randint(1_000, 100_000))
        elif file == SERVER:
            r = rng.random()
            if r < 0.03:
                yield ts, w.auth_failure(source, ts, f"192.0.2.{rng.randint(1, 254)}")
            elif r < 0.035:
                yield ts, "java.io.IOException: Connection reset by peer"
            elif r < 0.04:
                yield ts, "\tat org.apache.kafka.common.network.Selector.poll(Selector.java:481)"
            elif r < 0.042:
                yield ts, "[2024-04-01 10:00:00,000] INFO Principal = User:trunc"  # a truncated line: bad
            else:
                yield ts, w.server_noise(ts)
        else:  # the gateway's CloudEvents
            actor = rng.choice(pool)
            host = rng.choice(actor.hosts)
            r = rng.random()
            if r < 0.1:
                yield ts, w.gw_auth(ts, actor.principal, host, True)
            elif r < 0.4 and (actor.fetches or actor.produces):
                if actor.fetches:
                    yield ts, w.gw_request(ts, actor, host, "FETCH", rng.choice(actor.fetches),
                                           rng.randint(50_000, 500_000))
                else:
                    yield ts, w.gw_request(ts, actor, host, "PRODUCE", rng.choice(actor.produces),
                                           rng.randint(1_000, 100_000))
            else:
                action = rng.choice(actor.actions)
                yield ts, w.gw_authz(ts, actor, host, action, _acl_of(actor, action))


def generate(out: Path, lines: int, seed: int, progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Writes the logs, inventory, classification and planted incidents; returns the incidents."""
    if lines < MIN_LINES:
        raise ValueError(f"--lines must be at least {MIN_LINES} (a week of logs from 11 files)")
    rng = random.Random(seed)  # noqa: S311 - synthetic test data, reproducible by seed
    w = _Writer(rng)
    req4 = lines * SHARES[("broker-4", REQ)]
    # analytics-svc's expected Fetch bytes per hour on broker-4 (1/6 of consumers, 55% fetch, 275 kB).
    expected = req4 / (DAYS * 24) * (1 / len(_CONSUMERS)) * 0.55 * 275_000
    plan = _plant(w, rng, expected)
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for (source, file), share in SHARES.items():
        path = out / "logs" / source / file
        path.parent.mkdir(parents=True, exist_ok=True)
        n = int(lines * share)
        planted = plan.lines.get((source, file), [])
        merged = heapq.merge(_background(source, file, max(1, n - len(planted)), w, rng,
                                         plan.silences.get((source, file))),
                             iter(planted), key=lambda x: x[0])
        with open(path, "w", encoding="utf-8") as fh:
            fh.writelines(line + "\n" for _, line in merged)
        written += n
        if progress is not None:
            progress(f"wrote {path}")
    (out / "inventory.json").write_text(json.dumps(inventory(plan.extra_acls), indent=2) + "\n")
    (out / "classification.json").write_text(json.dumps(classification(), indent=2) + "\n")
    (out / "planted.json").write_text(json.dumps(plan.incidents, indent=2) + "\n")
    return plan.incidents
