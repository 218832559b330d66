"""Ingest: every line generation parses to the normalised columns; bad lines are counted, never fatal."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from pyspark.sql import DataFrame, SparkSession

from audit.kafka_format import authorizer_log_line
from audit.model import EventType, authorization_event, change_event
from audit.request_log import authentication_event
from spark_compliance import ingest
from spark_compliance import kafka_lines as K

pytestmark = pytest.mark.spark

TS = datetime(2024, 5, 1, 10, 0, 0, 123000, tzinfo=UTC)
DN = "User:CN=alice,OU=Payments,O=Acme Inc,C=GB"
CRAFTED = "x for request = Produce with resourceRefCount = 9"
Rows = list[dict[str, object]]


def _authz(level: str, message: str) -> str:
    return K.envelope(TS, level, message, "kafka.authorizer.logger")


def _req(message: str) -> str:
    return K.envelope(TS, "DEBUG", message, "kafka.request.logger")


# Every test's lines are registered here; one Spark job parses them all (a query per test would
# dominate the suite's time). The file name carries the case, the directory the source.
_CASES: dict[str, tuple[str, list[str]]] = {}


def case(name: str, lines: list[str], source: str = "broker-1") -> str:
    _CASES[name] = (source, lines)
    return name


@pytest.fixture(scope="module")
def parsed_df(spark: SparkSession) -> DataFrame:
    data = [(line, f"file:/logs/{source}/{name}.log") for name, (source, lines) in _CASES.items() for line in lines]
    df = spark.createDataFrame(data, "value string, file_path string")
    return ingest.parse_lines(df, source_zones={"broker-9": "Europe/Berlin"}).cache()


@pytest.fixture(scope="module")
def parsed(parsed_df: DataFrame) -> dict[str, Rows]:
    out: dict[str, Rows] = {name: [] for name in _CASES}
    for r in parsed_df.collect():
        out[str(r["file_path"]).rsplit("/", 1)[1][:-4]].append(r.asDict())
    return out


GENERATIONS = case("generations", [
    _authz("DEBUG", K.authorizer_line_v1(principal="User:bob", allowed=True, operation="ALTER_CONFIGS",
                                         host="10.0.0.2", resource_type="TOPIC", resource_name="orders")),
    _authz("INFO", K.authorizer_line_v2(principal="User:bob", allowed=False, operation="DESCRIBE", host="10.0.0.2",
                                        resource_type="TRANSACTIONAL_ID", pattern_type="LITERAL", resource_name="tx-1")),
    _authz("DEBUG", K.authorizer_line_v24(principal=DN, allowed=True, operation="WRITE", host="10.0.0.3",
                                          resource_type="TOPIC", pattern_type="LITERAL", resource_name="orders",
                                          request_name="Produce", ref_count=2)),
    _authz("INFO", authorizer_log_line(principal=DN, allowed=False, operation="READ", host="10.0.0.1",
                                       resource_type="GROUP", pattern_type="LITERAL", resource_name=CRAFTED,
                                       request_name="JoinGroup", resource_ref_count=1, rule="DefaultDeny")),
])


def test_authorizer_lines_of_every_generation(parsed: dict[str, Rows]) -> None:
    rows = parsed[GENERATIONS]
    got = [(r["fmt"], r["principal"], r["decision"], r["operation"], r["host"], r["resource_type"], r["pattern_type"],
            r["resource_name"], r["api"], r["ref_count"], r["rule"]) for r in rows]
    assert got == [
        ("kafka-authz-1.x", "User:bob", "ALLOWED", "ALTER_CONFIGS", "10.0.0.2", "TOPIC", None, "orders", None, None,
         None),
        ("kafka-authz-2.0", "User:bob", "DENIED", "DESCRIBE", "10.0.0.2", "TRANSACTIONAL_ID", "LITERAL", "tx-1", None,
         None, None),
        ("kafka-authz-2.4", DN, "ALLOWED", "WRITE", "10.0.0.3", "TOPIC", "LITERAL", "orders", "PRODUCE", 2, None),
        # The crafted group id stays whole; the real trailer (JoinGroup, 1, DefaultDeny) is the last one.
        ("kafka-authz-3.3", DN, "DENIED", "READ", "10.0.0.1", "GROUP", "LITERAL", CRAFTED, "JOIN_GROUP", 1,
         "DefaultDeny"),
    ]
    assert all(r["kind"] == "event" and r["ts"] == datetime(2024, 5, 1, 10, 0, 0, 123000) for r in rows)
    assert {str(r["dt"]) for r in rows} == {"2024-05-01"}


RULE = ("MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=alp, patternType=PREFIXED, "
        "principal=User:bob, host=*, operation=READ, permissionType=DENY))")
KRAFT_RULE = case("kraft_rule", [
    "[2024-05-01 10:00:00,000] INFO Principal = User:bob is Denied operation = READ from host = 127.0.0.1 "
    f"on resource = Topic:LITERAL:alpha for request = Fetch with resourceRefCount = 1 based on rule {RULE} "
    "(kafka.authorizer.logger)"])


def test_kraft_matching_acl_rule_is_kept_whole(parsed: dict[str, Rows]) -> None:
    (row,) = parsed[KRAFT_RULE]
    assert (row["rule"], row["rule_detail"], row["resource_name"]) == ("MatchingAcl", RULE, "alpha")


_FILTER_CHECK = authorizer_log_line(principal="User:a", allowed=False, operation="DESCRIBE", host="1.2.3.4",
                                    resource_type="TOPIC", pattern_type="LITERAL", resource_name="t",
                                    request_name="Metadata", resource_ref_count=1, rule="DefaultDeny")
TRACE = case("trace", [_authz("TRACE", _FILTER_CHECK), _authz("INFO", _FILTER_CHECK)])


def test_trace_filter_checks_are_marked_not_logged(parsed: dict[str, Rows]) -> None:
    assert [r["logged"] for r in parsed[TRACE]] == [False, True]


ZK = case("zk_notices", [_authz("DEBUG", K.super_user_line("User:admin")),
                         _authz("DEBUG", K.no_acl_found_line("TOPIC", "scratch", True)),
                         _authz("DEBUG", K.no_acl_found_line_v2("GROUP", "g1", False)),
                         _authz("DEBUG", "operation = READ on resource = Topic:LITERAL:t from host = h is Allow based "
                                         "on acl = (principal=User:x, host=*, operation=READ, permissionType=ALLOW)")])


def test_zookeeper_super_user_and_no_acl_lines(parsed: dict[str, Rows]) -> None:
    assert [(r["kind"], r["event_type"], r["principal"], r["resource_type"], r["resource_name"], r["decision"],
             r["rule"]) for r in parsed[ZK]] == [
        ("event", "SUPER_USER_NOTICE", "User:admin", None, None, "ALLOWED", "SuperUser"),
        ("event", "NO_ACL_NOTICE", None, "TOPIC", "scratch", "ALLOWED", "DefaultAllow"),
        ("event", "NO_ACL_NOTICE", None, "GROUP", "g1", "DENIED", "DefaultDeny"),
        ("ignored", None, None, None, None, None, None),  # the per-ACL DEBUG line names no requester
    ]


# Client-chosen names that spell other line shapes: the line is still the decision it is. (Before the
# shape was read from the first 60 characters, ` based on acl = ` in a group id filed the whole line as
# an ignored per-ACL detail line: a client could hide its own access from the audit.)
HIDING = case("hiding", [
    _authz("INFO", authorizer_log_line(principal="User:mallory", allowed=True, operation="READ", host="10.6.6.6",
                                       resource_type="GROUP", pattern_type="LITERAL", resource_name=name,
                                       request_name="JoinGroup", resource_ref_count=1, rule="DefaultAllow"))
    for name in ("g based on acl = (principal=User:x, host=*)", "g No acl found for resource x, authorized = true",
                 "g is a super user, allowing operation without checking acls.")
] + [_req(K.request_line_text(
    api_key="FETCH", api_version=8, client_id="Completed request:{}", correlation_id=1, body="{}",
    response="{}", connection="10.0.0.1:9092-10.6.6.6:5000-0", principal="User:mallory", listener="PLAIN",
    security_protocol="SASL_PLAINTEXT", software=None))])


def test_client_chosen_names_cannot_change_a_line_shape(parsed: dict[str, Rows]) -> None:
    rows = parsed[HIDING]
    assert [(r["kind"], r["event_type"], r["principal"]) for r in rows] == [
        ("event", "AUTHORIZATION", "User:mallory")] * 3 + [("event", "REQUEST", "User:mallory")]
    assert rows[0]["resource_name"] == "g based on acl = (principal=User:x, host=*)"
    assert rows[3]["client_id"] == "Completed request:{}"


_FETCH = _req(K.request_line_json(
    api_key_name="FETCH", api_key=1, api_version=13, client_id="c1", correlation_id=2, request={"replicaId": -1},
    response={"responses": [{"topicId": "AAA", "partitions": [{"recordsSizeInBytes": 100},
                                                              {"recordsSizeInBytes": 50}]}]},
    connection="10.0.0.9:9092-10.1.1.1:5555-3", principal="User:svc", listener="SASL_SSL",
    security_protocol="SASL_SSL", software=("librdkafka", "2.3.0")))
REQUESTS = case("requests", [
    _req(K.request_line_text(
        api_key="PRODUCE", api_version=8, client_id="producer-1", correlation_id=6,
        body="{acks=-1,timeout=30000,partitionSizes=[customerOrders-0=15514,customerOrders-1=6]}",
        response="{responses=[]} from connection evil", connection="127.0.0.1:9094-10.9.0.1:61040-0",
        principal="User:CN=x, O=y", listener="SASL_SSL", security_protocol="SASL_SSL",
        software=("apache-kafka-java", "2.7.0"))),
    _req(K.request_line_json(
        api_key_name="METADATA", api_key=3, api_version=12, client_id="c1", correlation_id=1, request={},
        response={"topics": [{"name": "payments", "topicId": "AAA"}]}, connection="10.0.0.9:9092-10.1.1.1:5555-3",
        principal="User:svc", listener="SASL_SSL", security_protocol="SASL_SSL", software=("librdkafka", "2.3.0"))),
    _FETCH,
    _FETCH.replace('"replicaId":-1', '"replicaId":2'),  # a follower fetch
], source="broker-4")


def test_request_log_text_and_json(parsed: dict[str, Rows], parsed_df: DataFrame) -> None:
    assert [r["kind"] for r in parsed[REQUESTS]] == ["event", "event", "event", "excluded"]
    events = {(r["api"], r["resource_name"]): r.asDict()
              for r in ingest.events_of(parsed_df).filter("source = 'broker-4'").collect()}
    produce = events[("PRODUCE", "customerOrders")]
    assert (produce["principal"], produce["host"], produce["bytes"], produce["client_id"], produce["software_name"],
            produce["software_version"]) == ("User:CN=x, O=y", "10.9.0.1", 15520, "producer-1",
                                             "apache-kafka-java", "2.7.0")
    # Fetch v13 names the topic by id; the id is resolved from the Metadata response.
    fetch = events[("FETCH", "payments")]
    assert (fetch["bytes"], fetch["host"], fetch["software_name"]) == (150, "10.1.1.1", "librdkafka")


AUTH_FAILURES = case("auth_failures", [
    K.envelope(TS, "INFO", K.auth_failure_line(client_ip=ip, client_port=5000, local="10.0.0.1:9093",
                                               mechanism="SCRAM-SHA-512", with_channel_id=chan, node_id=1),
               "org.apache.kafka.common.network.Selector")
    for ip, chan in (("203.0.113.5", True), ("198.51.100.7", False))])


def test_authentication_failures_from_server_log(parsed: dict[str, Rows]) -> None:
    assert [(r["event_type"], r["host"], r["auth_result"], r["mechanism"], r["principal"])
            for r in parsed[AUTH_FAILURES]] == [
        ("AUTHENTICATION", "203.0.113.5", "FAILURE", "SCRAM-SHA-512", None),
        ("AUTHENTICATION", "198.51.100.7", "FAILURE", "SCRAM-SHA-512", None),
    ]


EVENTS = case("events", [
    authorization_event(source="kgov://gw", time=TS, principal=DN, granted=True, operation="READ",
                        resource_type="TOPIC", resource_name="orders", pattern_type="LITERAL",
                        client_address="10.2.0.1:40001", method_name="kafka.Fetch", rule="SuperUser",
                        client_id="cli", correlation_id=3).to_json(),
    change_event(type=EventType.CREDENTIAL_CHANGE, source="kgov://gw", time=TS, principal="User:alice",
                 method_name="kgov.AlterUserScramCredentials", target="user=bob", details={"n": 1},
                 client_address="10.2.0.9").to_json(),
    # kgov's authentication event, from the one builder the gateway and sasl use.
    authentication_event(source="kgov://gw", time=TS, principal="User:dave", mechanism="PLAIN",
                         client_address="/203.0.113.9", success=True).to_json(),
    # Confluent Platform's event, verbatim shape (shared/reference/audit.md A2).
    '{"data":{"methodName":"kafka.CreateTopics","authenticationInfo":{"principal":"User:producer"},'
    '"authorizationInfo":{"granted":true,"operation":"Create","resourceType":"Topic","resourceName":"bar",'
    '"patternType":"LITERAL","superUserAuthorization":true},"request":{"correlation_id":"4",'
    '"client_id":"adminclient-1"},"requestMetadata":{"client_address":"/172.27.0.3"}},"id":"b1",'
    '"source":"crn:///kafka=S","specversion":"0.3","type":"io.confluent.kafka.server/authorization",'
    '"time":"2020-05-12T12:24:37.838Z"}',
], source="gateway-1")


def test_kgov_and_confluent_events(parsed: dict[str, Rows]) -> None:
    rows = parsed[EVENTS]
    got = [(r["fmt"], r["event_type"], r["principal"], r["host"], r["decision"], r["operation"], r["resource_type"],
            r["resource_name"], r["api"], r["rule"], r["auth_result"], r["client_id"]) for r in rows]
    assert got == [
        ("kgov-event", "AUTHORIZATION", DN, "10.2.0.1", "ALLOWED", "READ", "TOPIC", "orders", "FETCH", "SuperUser",
         None, "cli"),
        ("kgov-event", "CHANGE", "User:alice", "10.2.0.9", "ALLOWED", None, None, "user=bob",
         "ALTER_USER_SCRAM_CREDENTIALS", None, None, None),
        ("kgov-event", "AUTHENTICATION", "User:dave", "203.0.113.9", None, None, None, None, "AUTHENTICATE", None,
         "SUCCESS", None),
        ("confluent-event", "AUTHORIZATION", "User:producer", "172.27.0.3", "ALLOWED", "CREATE", "TOPIC", "bar",
         "CREATE_TOPICS", "SuperUser", None, "adminclient-1"),
    ]
    assert rows[3]["ts"] == datetime(2020, 5, 12, 12, 24, 37, 838000)
    assert rows[0]["stream"] == "events"


_GOOD = _authz("INFO", K.authorizer_line_v1(principal="User:a", allowed=False, operation="READ", host="h",
                                           resource_type="TOPIC", resource_name="t"))
BAD = case("bad", [
    _GOOD, "garbage", "[2024-05-01 10:00:00,000] INFO Principal = broken (kafka.authorizer.logger)", "{not json",
    "[2024-05-01 10:00:00,000] INFO [KafkaServer id=1] started (kafka.server.KafkaServer)",
    "\tat org.apache.kafka.Foo.bar(Foo.java:1)", _GOOD.replace(" is Denied ", " is Maybe "),
    "[2024-13-45 99:00:00,000] INFO Principal = User:a is Denied Operation = Read from host = h on resource"
    " = Topic:t (kafka.authorizer.logger)",
], source="broker-2")


def test_bad_lines_are_counted_and_sampled_never_fatal(parsed: dict[str, Rows], parsed_df: DataFrame) -> None:
    assert [r["kind"] for r in parsed[BAD]] == ["event", "bad", "bad", "bad", "ignored", "ignored", "bad", "bad"]
    quality = {(r["source"], r["kind"]): r["lines"] for r in ingest.line_quality(parsed_df).collect()}
    assert (quality[("broker-2", "event")], quality[("broker-2", "bad")], quality[("broker-2", "ignored")]) == (1, 5, 2)
    sample = ingest.bad_line_sample(parsed_df, 3).collect()
    assert len(sample) == 3 and all(r["raw"] and r["reason"] for r in sample)


ZONED = case("zoned", [_GOOD], source="broker-9")
UTC_SOURCE = case("utc_source", [_GOOD], source="broker-1")


def test_broker_local_time_is_moved_to_utc_per_source(parsed: dict[str, Rows]) -> None:
    assert parsed[ZONED][0]["ts"] == datetime(2024, 5, 1, 8, 0, 0, 123000)  # CEST is UTC+2 in May
    assert parsed[UTC_SOURCE][0]["ts"] == datetime(2024, 5, 1, 10, 0, 0, 123000)


INTER_BROKER = case("inter_broker", [_authz("DEBUG", K.authorizer_line_v1(
    principal="User:kafka", allowed=True, operation="CLUSTER_ACTION", host="h", resource_type="CLUSTER",
    resource_name="kafka-cluster"))])


def test_inter_broker_principal_is_excluded(parsed: dict[str, Rows]) -> None:
    assert [r["kind"] for r in parsed[INTER_BROKER]] == ["excluded"]


_MSG = authorizer_log_line(principal=DN, allowed=False, operation="READ", host="10.0.0.1", resource_type="TOPIC",
                           pattern_type="LITERAL", resource_name="orders", request_name="Fetch", resource_ref_count=1,
                           rule="DefaultDeny")
LOG4J2 = case("log4j2_json", [
    # Log4j2 JsonLayout (compact) and the ECS JSON template: Kafka 4.0 logs through Log4j2.
    json.dumps({"instant": {"epochSecond": 1714557600, "nanoOfSecond": 123456789}, "thread": "data-plane-1",
                "level": "INFO", "loggerName": "kafka.authorizer.logger", "message": _MSG, "endOfBatch": False}),
    json.dumps({"@timestamp": "2024-05-01T10:00:00.250Z", "log.level": "INFO", "message": "started",
                "log.logger": "kafka.server.KafkaServer"}),
    json.dumps({"timeMillis": 1714557600500, "level": "INFO", "loggerName": "kafka.authorizer.logger",
                "message": "Principal = (truncated"}),
], source="broker-9")


def test_log4j2_json_layout_lines(parsed: dict[str, Rows]) -> None:
    rows = parsed[LOG4J2]
    assert [r["kind"] for r in rows] == ["event", "ignored", "bad"]
    first = rows[0]
    assert (first["principal"], first["decision"], first["resource_name"], first["fmt"]) == (
        DN, "DENIED", "orders", "kafka-authz-3.3")
    # An absolute instant: broker-9's configured zone (Europe/Berlin) does not shift it.
    assert first["ts"] == datetime(2024, 5, 1, 10, 0, 0, 123456)  # microseconds kept


def test_within_period(spark: SparkSession) -> None:
    df = spark.createDataFrame([(datetime(2024, 5, 1, h),) for h in (8, 9, 10, 11)], "ts timestamp")
    got = ingest.within_period(df, datetime(2024, 5, 1, 11, tzinfo=ZoneInfo("Europe/Berlin")),
                               datetime(2024, 5, 1, 11))
    assert [r["ts"].hour for r in got.collect()] == [9, 10]

