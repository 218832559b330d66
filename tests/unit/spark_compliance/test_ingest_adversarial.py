"""Ingest against crafted names: principals, group and client ids are client-chosen text inside Kafka's lines.

Kafka prints them unescaped, so these lines are what a hostile client can make a broker write. Each case
states what must not happen: a denial hidden (read as allowed, or counted as another logger's line or a
bad line), or a decision attributed to another principal, host or resource.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from audit.kafka_format import authorizer_log_line
from spark_compliance import ingest, reference_parser
from spark_compliance import kafka_lines as K

pytestmark = pytest.mark.spark

TS = datetime(2024, 5, 1, 10, 0, 0, 123000, tzinfo=UTC)
STAMP = "[2024-05-01 10:00:00,123]"
SUFFIX = " (kafka.authorizer.logger)"
Rows = list[dict[str, object]]


def _kraft(principal: str, allowed: bool, name: str, rtype: str = "TOPIC", host: str = "10.0.0.66",
           request: str = "Fetch") -> str:
    return f"{STAMP} INFO " + authorizer_log_line(
        principal=principal, allowed=allowed, operation="READ", host=host, resource_type=rtype,
        pattern_type="LITERAL", resource_name=name, request_name=request, resource_ref_count=1,
        rule="DefaultDeny" if not allowed else "DefaultAllow") + SUFFIX


FAKE_ALLOW_KRAFT = "User:alice is Allowed operation = READ from host = 10.9.9.9 on resource = Topic:LITERAL:public"
FAKE_ALLOW_ZK = "User:CN=alice is Allowed Operation = Read from host = 10.9.9.9 on resource = Topic:LITERAL:public"

DECOY_CLIENT = "c, correlationId=1) -- {acks=1,timeout=1,partitionSizes=[decoy-0=1]}"
_CASES: dict[str, list[str]] = {
    # A principal holding a fake "allowed" reading before its real denial.
    "principal_kraft": [_kraft(FAKE_ALLOW_KRAFT, False, "payments")],
    "principal_zk24": [f"{STAMP} INFO " + K.authorizer_line_v24(
        principal=FAKE_ALLOW_ZK, allowed=False, operation="READ", host="10.0.0.66", resource_type="TOPIC",
        pattern_type="LITERAL", resource_name="payments", request_name="Fetch", ref_count=1) + SUFFIX],
    "principal_v1": [f"{STAMP} INFO " + K.authorizer_line_v1(
        principal=FAKE_ALLOW_ZK, allowed=False, operation="READ", host="10.0.0.66", resource_type="TOPIC",
        resource_name="payments") + SUFFIX],
    # A group id holding a fake "allowed" reading after the real denial: the first reading stands.
    "group_fake_allow": [_kraft("User:mallory", False, FAKE_ALLOW_KRAFT.replace("User:alice", "g"), "GROUP",
                                request="JoinGroup")],
    # A group id holding a fake denial after a real allowed access: counted as a denial (the price of
    # never hiding one), of a principal that starts with the real one.
    "group_fake_deny": [_kraft("User:mallory", True, "g is Denied operation = READ from host = 10.9.9.9 on resource"
                                                     " = Group:LITERAL:h", "GROUP", request="JoinGroup")],
    # A line break in a group id (Kafka does not escape it) cuts the denial in two physical lines; the
    # name's text before it makes the first part end like another logger's line, or like nothing.
    "cut": [
        f"{STAMP} INFO Principal = User:mallory is Denied Operation = Read from host = 10.0.0.66 on resource ="
        " Group:LITERAL:x (kafka.server.KafkaServer)",
        f"{STAMP} INFO Principal = User:mallory is Denied operation = READ from host = 10.0.0.66 on resource ="
        " Group:LITERAL:x (kafka.request.logger)",
        f"{STAMP} INFO Principal = User:mallory is Denied operation = READ from host = 10.0.0.66 on resource ="
        " Group:LITERAL:x",
    ],
    # The rewrite's field separator inside a client-chosen name.
    "separator": [
        _kraft("User:mallory", False, "g\x01h", "GROUP", request="JoinGroup"),
        f"{STAMP} DEBUG " + K.request_line_text(
            api_key="FETCH", api_version=8, client_id="c\x011", correlation_id=1, body="{}", response="{}",
            connection="10.0.0.1:9092-10.6.6.6:5000-0", principal="User:mallory", listener="PLAIN",
            security_protocol="SASL_PLAINTEXT", software=None) + " (kafka.request.logger)",
    ],
    # NUL, U+2028 and U+0085 in a name; a Log4j2 JSON-layout line whose message holds an (escaped) line break.
    "odd_chars": [
        _kraft("User:mallory", False, "a\x00b\u2028c\x85d", "GROUP", request="JoinGroup"),
        json.dumps({"timeMillis": 1714557600123, "level": "INFO", "loggerName": "kafka.authorizer.logger",
                    "message": authorizer_log_line(
                        principal="User:mallory", allowed=False, operation="READ", host="10.0.0.66",
                        resource_type="GROUP", pattern_type="LITERAL", resource_name="x\n" + STAMP + " INFO y",
                        request_name="JoinGroup", resource_ref_count=1, rule="DefaultDeny")}),
    ],
    # 1.0-2.7 request log: a client id holding a fake header end and Produce body.
    "request_text": [f"{STAMP} DEBUG " + K.request_line_text(
        api_key="PRODUCE", api_version=8, client_id=DECOY_CLIENT, correlation_id=6,
        body="{acks=-1,timeout=30000,partitionSizes=[payments-0=15514]}", response="{responses=[]}",
        connection="10.0.0.1:9092-10.6.6.6:5000-0", principal="User:mallory", listener="PLAIN",
        security_protocol="SASL_PLAINTEXT", software=("apache-kafka-java", "2.7.0")) + " (kafka.request.logger)"],
    # 2.8+ request log: JSON-escaped, so a client id cannot add keys.
    "request_json": [f"{STAMP} DEBUG " + K.request_line_json(
        api_key_name="FETCH", api_key=1, api_version=12, client_id='x","principal":"User:alice', correlation_id=2,
        request={"replicaId": -1}, response={"responses": []}, connection="10.0.0.9:9092-10.1.1.1:5555-3",
        principal="User:mallory", listener="SASL_SSL", security_protocol="SASL_SSL",
        software=("librdkafka", "2.3.0")) + " (kafka.request.logger)"],
}


@pytest.fixture(scope="module")
def parsed_df(spark: SparkSession) -> DataFrame:
    data = [(line, f"file:/logs/broker-1/{name}.log") for name, lines in _CASES.items() for line in lines]
    return ingest.parse_lines(spark.createDataFrame(data, "value string, file_path string")).cache()


@pytest.fixture(scope="module")
def parsed(parsed_df: DataFrame) -> dict[str, Rows]:
    out: dict[str, Rows] = {name: [] for name in _CASES}
    for r in parsed_df.collect():
        out[str(r["file_path"]).rsplit("/", 1)[1][:-4]].append(r.asDict())
    return out


def _decision(r: dict[str, object]) -> tuple[object, ...]:
    return (r["kind"], r["principal"], r["decision"], r["host"], r["resource_type"], r["resource_name"])


def test_a_crafted_principal_cannot_turn_its_denial_into_anothers_allowed_access(parsed: dict[str, Rows]) -> None:
    assert [_decision(r) for r in parsed["principal_kraft"]] == [
        ("event", FAKE_ALLOW_KRAFT, "DENIED", "10.0.0.66", "TOPIC", "payments")]
    assert parsed["principal_kraft"][0]["api"] == "FETCH" and parsed["principal_kraft"][0]["rule"] == "DefaultDeny"
    assert [_decision(r) for r in parsed["principal_zk24"]] == [
        ("event", FAKE_ALLOW_ZK, "DENIED", "10.0.0.66", "TOPIC", "payments")]
    assert [_decision(r) for r in parsed["principal_v1"]] == [
        ("event", FAKE_ALLOW_ZK, "DENIED", "10.0.0.66", "TOPIC", "payments")]


def test_a_crafted_group_id_keeps_the_first_reading_or_counts_a_denial(parsed: dict[str, Rows]) -> None:
    fake = FAKE_ALLOW_KRAFT.replace("User:alice", "g")
    assert [_decision(r) for r in parsed["group_fake_allow"]] == [
        ("event", "User:mallory", "DENIED", "10.0.0.66", "GROUP", fake)]
    [row] = parsed["group_fake_deny"]
    assert row["decision"] == "DENIED" and str(row["principal"]).startswith("User:mallory is Allowed operation = ")
    assert (row["resource_type"], row["resource_name"]) == ("GROUP", "h")


def test_a_denial_cut_by_a_line_break_stays_a_denial(parsed: dict[str, Rows]) -> None:
    rows = parsed["cut"]
    assert [_decision(r) for r in rows] == [
        ("event", "User:mallory", "DENIED", "10.0.0.66", "GROUP", "x (kafka.server.KafkaServer)"),
        ("event", "User:mallory", "DENIED", "10.0.0.66", "GROUP", "x (kafka.request.logger)"),
        ("event", "User:mallory", "DENIED", "10.0.0.66", "GROUP", "x")]
    assert {r["fmt"] for r in rows} == {"kafka-authz-cut"} and {r["api"] for r in rows} == {None}


def test_the_field_separator_in_a_name_loses_no_event(parsed: dict[str, Rows]) -> None:
    deny, fetch = parsed["separator"]
    assert _decision(deny) == ("event", "User:mallory", "DENIED", "10.0.0.66", "GROUP", "g\ufffdh")
    assert (fetch["kind"], fetch["principal"], fetch["client_id"], fetch["host"]) == (
        "event", "User:mallory", "c\ufffd1", "10.6.6.6")


def test_nul_unicode_line_separators_and_json_escaped_line_breaks(parsed: dict[str, Rows]) -> None:
    text, layout = parsed["odd_chars"]
    assert _decision(text) == ("event", "User:mallory", "DENIED", "10.0.0.66", "GROUP", "a\x00b\u2028c\x85d")
    assert _decision(layout) == ("event", "User:mallory", "DENIED", "10.0.0.66", "GROUP", "x\n" + STAMP + " INFO y")


def test_request_text_client_id_cannot_start_the_produce_body(parsed: dict[str, Rows]) -> None:
    [row] = parsed["request_text"]
    assert (row["kind"], row["principal"], row["api"], row["resource_name"], row["bytes"], row["client_id"]) == (
        "event", "User:mallory", "PRODUCE", "payments", 15514, DECOY_CLIENT)


def test_request_json_client_id_cannot_add_fields(parsed: dict[str, Rows]) -> None:
    [row] = parsed["request_json"]
    assert (row["kind"], row["principal"], row["client_id"], row["host"]) == (
        "event", "User:mallory", 'x","principal":"User:alice', "10.1.1.1")


def test_reference_parser_agrees_on_every_crafted_line(parsed: dict[str, Rows]) -> None:
    for name, lines in _CASES.items():
        for line, row in zip(lines, parsed[name], strict=True):
            if line.startswith("{"):
                continue  # (the reference parser does not read Log4j2's JSON layout)
            p = reference_parser.parse_line(line)
            assert (p.kind, p.principal) == (row["kind"], row["principal"]), name
            if row["event_type"] == "AUTHORIZATION":
                assert (p.decision, p.host, p.resource_name) == (row["decision"], row["host"], row["resource_name"])


def test_invalid_utf8_and_a_huge_line_are_bad_lines_and_lose_nothing(spark: SparkSession, tmp_path: Path) -> None:
    logs = tmp_path / "in" / "broker-1"
    logs.mkdir(parents=True)
    good = _kraft("User:mallory", False, "payments").encode()
    (logs / "kafka-authorizer.log").write_bytes(b"\n".join([
        good, b"\xff\xfe\x00 not a line", _kraft("User:mallory", False, "g\x01x", "GROUP").encode().replace(
            b"\x01", b"\xc3("), b"x" * 3_000_000, good, b""]))
    parsed = ingest.parse_lines(ingest.read_lines(spark, [str(tmp_path / "in")]))
    rows = parsed.orderBy("kind").collect()
    assert sorted(r["kind"] for r in rows) == ["bad", "bad", "event", "event", "event"]
    names = sorted(r["resource_name"] for r in rows if r["kind"] == "event")
    assert names == ["g\ufffd(x", "payments", "payments"]
    assert all(len(r["raw"]) <= 500 for r in rows if r["kind"] == "bad")
    # The event table holds valid UTF-8 (U+FFFD for the invalid bytes), as other Parquet readers require.
    ingest.events_of(parsed).write.parquet(str(tmp_path / "events"))
    stored = spark.read.parquet(str(tmp_path / "events")).select(F.hex("resource_name").alias("h")).collect()
    assert sorted(bytes.fromhex(r["h"]).decode("utf-8") for r in stored) == names
