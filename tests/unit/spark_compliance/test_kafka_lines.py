"""The line writers reproduce Kafka's templates; the patterns survive DNs and crafted names (pure Python)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from audit.kafka_format import authorizer_log_line
from spark_compliance import kafka_lines as K
from spark_compliance.reference_parser import enum_spelling, parse_line

TS = datetime(2024, 5, 1, 10, 0, 0, 7000, tzinfo=UTC)


def test_writers_match_kafkas_templates() -> None:
    # Kafka: The Definitive Guide's examples and SimpleAclAuthorizer's 1.x text.
    assert K.authorizer_line_v24(principal="User:Alice", allowed=True, operation="WRITE", host="127.0.0.1",
                                 resource_type="TOPIC", pattern_type="LITERAL", resource_name="customerOrders",
                                 request_name="Produce", ref_count=1) == (
        "Principal = User:Alice is Allowed Operation = Write from host = 127.0.0.1 on resource = "
        "Topic:LITERAL:customerOrders for request = Produce with resourceRefCount = 1")
    assert K.authorizer_line_v1(principal="User:Mallory", allowed=False, operation="IDEMPOTENT_WRITE",
                                host="10.0.0.13", resource_type="TRANSACTIONAL_ID", resource_name="tx") == (
        "Principal = User:Mallory is Denied Operation = IdempotentWrite from host = 10.0.0.13 on resource = "
        "TransactionalId:tx")
    assert K.envelope(TS, "INFO", "m", "kafka.authorizer.logger") == (
        "[2024-05-01 10:00:00,007] INFO m (kafka.authorizer.logger)")
    assert K.connection_id("127.0.0.1:9094", "127.0.0.1", 61040) == "127.0.0.1:9094-127.0.0.1:61040-0"
    assert K.auth_failure_line(client_ip="10.1.1.1", client_port=5, local="10.0.0.1:9093", mechanism="PLAIN",
                               with_channel_id=False, node_id=1).endswith(
        "Failed authentication with /10.1.1.1 (Authentication failed during authentication due to invalid "
        "credentials with SASL mechanism PLAIN)")


def test_the_definitive_guides_request_line_parses() -> None:
    line = ("[2024-05-01 10:00:00,000] DEBUG Completed request:RequestHeader(apiKey=PRODUCE, apiVersion=8, "
            "clientId=producer-1, correlationId=6) -- {acks=-1,timeout=30000,partitionSizes=[customerOrders-0=15514]},"
            "response:{responses=[{topic=customerOrders,partition_responses=[{partition=0,error_code=0,base_offset=13,"
            "log_append_time=-1,log_start_offset=0,record_errors=[],error_message=null}]}],throttle_time_ms=0} from "
            "connection 127.0.0.1:9094-127.0.0.1:61040-0;totalTime:2.42,requestQueueTime:0.112,localTime:2.15,"
            "remoteTime:0.0,throttleTime:0,responseQueueTime:0.04,sendTime:0.118,securityProtocol:SASL_SSL,"
            "principal:User:Alice,listener:SASL_SSL,clientInformation:ClientInformation(softwareName="
            "apache-kafka-java, softwareVersion=2.7.0-SNAPSHOT) (kafka.request.logger)")
    m = re.match(K.REQUEST_TEXT, line)
    assert m is not None
    assert (m.group(3), m.group(7), m.group(9), m.group(11), m.group(12)) == (
        "PRODUCE", "127.0.0.1:9094-127.0.0.1:61040-0", "User:Alice", "apache-kafka-java", "2.7.0-SNAPSHOT")
    assert re.match(K.PRODUCE_SIZES, m.group(6)).group(1) == "customerOrders-0=15514"  # type: ignore[union-attr]


def test_kafkas_own_kraft_example_parses() -> None:
    line = ("[2024-05-01 10:00:00,000] INFO Principal = User:bob is Denied operation = READ from host = 127.0.0.1 on "
            "resource = Topic:LITERAL:alpha for request = Fetch with resourceRefCount = 1 based on rule MatchingAcl("
            "acl=StandardAcl(resourceType=TOPIC, resourceName=alp, patternType=PREFIXED, principal=User:bob, host=*, "
            "operation=READ, permissionType=DENY)) (kafka.authorizer.logger)")
    m = re.match(K.AUTHZ, line)
    assert m is not None and m.group(9) == "alpha" and m.group(12).startswith("MatchingAcl(acl=StandardAcl(")


names = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40)


@given(principal_name=names, resource=names)
def test_any_principal_and_resource_name_survive(principal_name: str, resource: str) -> None:
    """Property: whatever a client puts in a group id (even a fake trailer), the real fields come back."""
    principal = f"User:{principal_name}"
    if " is Allowed " in principal or " is Denied " in principal:
        return  # an operator-chosen principal containing the verdict keyword is ambiguous by construction
    msg = authorizer_log_line(principal=principal, allowed=False, operation="READ", host="10.0.0.1",
                              resource_type="GROUP", pattern_type="LITERAL", resource_name=resource,
                              request_name="JoinGroup", resource_ref_count=3, rule="DefaultDeny")
    p = parse_line(K.envelope(TS, "INFO", msg, "kafka.authorizer.logger"))
    assert (p.kind, p.principal, p.resource_name, p.api, p.decision) == (
        "event", principal, resource, "JOIN_GROUP", "DENIED")


def test_enum_spelling() -> None:
    assert [enum_spelling(x) for x in ("AlterConfigs", "kafka.CreateTopics", "ALTER_CONFIGS", "TransactionalId",
                                       "kgov.AlterUserScramCredentials")] == [
        "ALTER_CONFIGS", "CREATE_TOPICS", "ALTER_CONFIGS", "TRANSACTIONAL_ID", "ALTER_USER_SCRAM_CREDENTIALS"]


def test_reference_parser_kinds() -> None:
    assert parse_line("garbage").kind == "bad"
    assert parse_line("{nope").kind == "bad"
    assert parse_line("[2024-05-01 10:00:00,000] INFO started (kafka.server.KafkaServer)").kind == "ignored"
    assert parse_line("\tat x.y(Z.java:1)").kind == "ignored"
