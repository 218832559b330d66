"""Each report on a ten-row table, and the findings drawn from it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_compliance import findings as FD
from spark_compliance import reports as R
from spark_compliance import schema as S

pytestmark = pytest.mark.spark

MON = datetime(2024, 4, 1)  # a Monday; naive datetimes are UTC (the session time zone)


def ev(ts: datetime, **kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {c: None for c in S.EVENT_COLUMNS}
    row.update(ts=ts, source="broker-1", stream="authorizer", event_type=S.AUTHORIZATION, logged=True,
               resource_type="TOPIC", decision="ALLOWED", operation="READ", dt=ts.date())
    row.update(kw)
    return row


def frame(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    return spark.createDataFrame([tuple(r[c] for c in S.EVENT_COLUMNS) for r in rows], S.EVENT_SCHEMA)


def h(hours: float) -> datetime:
    return MON + timedelta(hours=hours)


def test_sensitive_access_and_its_findings(spark: SparkSession) -> None:
    events = frame(spark, [
        ev(h(10), principal="User:alice", host="h1", resource_name="customers"),
        ev(h(11), principal="User:alice", host="h2", resource_name="customers"),
        ev(h(12), principal="User:crm", host="h3", resource_name="customers"),
        ev(h(12), principal="User:bob", host="h4", resource_name="customers", operation="DESCRIBE"),
        ev(h(13), principal="User:carol", host="h5", resource_name="payments.eu", operation="WRITE"),
        ev(h(13), principal="User:dave", host="h6", resource_name="orders"),
        ev(h(14), principal="User:eve", host="h7", resource_name="customers", decision="DENIED"),
        ev(h(14), principal="User:eve", host="h7", resource_name="customers", logged=False),
        ev(h(15), principal="User:crm", host="h3", resource_name="customers", resource_type="GROUP"),
        ev(h(40), principal="User:alice", host="h1", resource_name="customers"),
    ])
    classification = spark.createDataFrame(
        [("customers", "LITERAL", ["PII"], ["User:crm"]), ("payments.", "PREFIXED", ["PCI"], [])],
        "name string, pattern_type string, classes array<string>, approved_principals array<string>")
    report = R.sensitive_access(events, classification).cache()
    got = sorted((r["principal"], r["resource_name"], r["operation"], str(r["day"]), r["count"], r["hosts"], r["classes"],
                  r["approved"]) for r in report.collect())
    assert got == [
        ("User:alice", "customers", "READ", "2024-04-01", 2, ["h1", "h2"], ["PII"], False),
        ("User:alice", "customers", "READ", "2024-04-02", 1, ["h1"], ["PII"], False),
        ("User:carol", "payments.eu", "WRITE", "2024-04-01", 1, ["h5"], ["PCI"], False),
        ("User:crm", "customers", "READ", "2024-04-01", 1, ["h3"], ["PII"], True),
    ]
    found = sorted((f["principal"], f["resource"], f["severity"], f["count"], f["host"], f["regulations"][0])
                   for f in FD.sensitive_access(report).collect())
    assert found == [("User:alice", "Topic:customers", "MEDIUM", 3, None, "GDPR Art. 30/32"),
                     ("User:carol", "Topic:payments.eu", "HIGH", 1, "h5", "PCI DSS 10.2.1.1")]


def test_denied_summary_and_spikes(spark: SparkSession) -> None:
    rows = [ev(h(0), principal="User:start", host="x", decision="ALLOWED")]
    rows += [ev(h(hr, ) + timedelta(minutes=m), principal="User:p", host="hp", decision="DENIED", resource_name="t")
             for hr in range(8) for m in (1, 2)]
    rows += [ev(h(8) + timedelta(seconds=s), principal="User:p", host="hp", decision="DENIED", resource_name="pay")
             for s in range(30)]
    rows += [ev(h(8) + timedelta(seconds=s), principal="User:q", host="hq", decision="DENIED", logged=False)
             for s in range(25)]
    rows += [ev(h(2) + timedelta(seconds=s), principal="User:r", host="hr", decision="DENIED") for s in range(25)]
    events = frame(spark, rows)
    summary = {(r["principal"], r["resource_name"]): r["count"] for r in R.denied_summary(events).collect()}
    assert summary == {("User:p", "t"): 16, ("User:p", "pay"): 30, ("User:r", None): 25}
    spikes = R.denied_spikes(events, R.Params()).cache()
    flagged = [(r["principal"], r["hour"], r["count"], r["baseline_mean"], r["resource"])
               for r in spikes.filter("is_spike").collect()]
    # User:r's 25 denials come two hours into the period: too little history to call it a spike.
    assert flagged == [("User:p", h(8), 30, 2.0, "Topic:pay")]
    (f,) = FD.denied_spike(spikes).collect()
    assert (f["rule"], f["principal"], f["host"], f["resource"], f["count"]) == (
        "DENIED_SPIKE", "User:p", "hp", "Topic:pay", 30)


def test_brute_force_per_source_address_and_success_after(spark: SparkSession) -> None:
    auth = {"event_type": S.AUTHENTICATION, "stream": "server", "decision": None, "operation": None,
            "resource_type": None, "mechanism": "SCRAM-SHA-512"}
    rows = [ev(h(9) + timedelta(seconds=10 * i), host="10.6.6.6", auth_result="FAILURE", **auth) for i in range(25)]
    rows.append(ev(h(9) + timedelta(minutes=6), host="10.6.6.6", auth_result="SUCCESS", principal="User:x",
                   **{**auth, "mechanism": None}))
    rows += [ev(h(9) + timedelta(seconds=i), host="10.7.7.7", auth_result="FAILURE", **auth) for i in range(10)]
    rows += [ev(h(1) + timedelta(minutes=8 * i), host="10.8.8.8", auth_result="FAILURE", **auth) for i in range(25)]
    report = R.brute_force(frame(spark, rows), R.Params()).cache()
    assert {r["host"] for r in report.collect()} == {"10.6.6.6"}
    (f,) = FD.brute_force(report).collect()
    assert (f["host"], f["principal"], f["severity"], f["count"]) == ("10.6.6.6", "User:x", "CRITICAL", 25)


def test_privileged_operations(spark: SparkSession) -> None:
    events = frame(spark, [
        ev(h(10), principal="User:alice", host="h1", api="CREATE_ACLS", operation="ALTER", resource_type="CLUSTER",
           resource_name="kafka-cluster"),
        ev(h(10), principal="User:bob", host="h2", api="DELETE_TOPICS", operation="DELETE", resource_name="orders",
           decision="DENIED"),
        ev(h(11), principal="User:carol", host="h3", operation="ALTER", resource_type="CLUSTER",
           resource_name="kafka-cluster"),  # a 1.x line: no request name
        ev(h(11), principal="User:dave", host="h4", api="FETCH", resource_name="orders"),
        ev(h(12), principal="User:erin", host="h5", api="ALTER_CONFIGS", operation="ALTER_CONFIGS",
           resource_name="orders", logged=False),
        ev(h(12), principal="User:frank", host="h6", event_type=S.CHANGE, api="ALTER_USER_SCRAM_CREDENTIALS",
           operation=None, resource_type=None, resource_name="user=bob", stream="events"),
    ])
    report = R.privileged_operations(events).cache()
    got = sorted((r["principal"], r["action"], r["decision"], r["resource"]) for r in report.collect())
    assert got == [("User:alice", "CREATE_ACLS", "ALLOWED", "Cluster:kafka-cluster"),
                   ("User:bob", "DELETE_TOPICS", "DENIED", "Topic:orders"),
                   ("User:carol", "ALTER", "ALLOWED", "Cluster:kafka-cluster"),
                   ("User:frank", "ALTER_USER_SCRAM_CREDENTIALS", "ALLOWED", "user=bob")]
    assert sorted(f["principal"] for f in FD.privileged_operation(report).collect()) == [
        "User:alice", "User:carol", "User:frank"]


def test_super_user_activity(spark: SparkSession) -> None:
    events = frame(spark, [
        ev(h(10), principal="User:admin", event_type=S.SUPER_USER_NOTICE, resource_type=None, operation=None),
        ev(h(10), principal="User:admin", host="h1", resource_name="orders"),
        ev(h(11), principal="User:root", host="h2", resource_name="orders", rule="SuperUser"),
        ev(h(12), principal="User:ops", host="h3", resource_name="inventory"),
        ev(h(12), principal="User:bob", host="h4", resource_name="orders", rule="MatchingAcl"),
        ev(h(13), principal="User:ops", host="h3", resource_name="inventory", logged=False),
    ])
    report = R.super_user_activity(events, ["User:ops"]).cache()
    assert sorted((r["principal"], r["host"], r["count"]) for r in report.collect()) == [
        ("User:admin", "h1", 1), ("User:ops", "h3", 1), ("User:root", "h2", 1)]
    assert len(FD.super_user_activity(report).collect()) == 3


def test_default_allow(spark: SparkSession) -> None:
    events = frame(spark, [
        ev(h(1), principal="User:a", host="h1", resource_name="scratch", rule="DefaultAllow"),
        ev(h(2), principal="User:a", host="h1", resource_name="scratch", rule="DefaultAllow"),
        ev(h(3), event_type=S.NO_ACL_NOTICE, resource_name="scratch", rule="DefaultAllow", operation=None),
        ev(h(3), event_type=S.NO_ACL_NOTICE, resource_name="locked", decision="DENIED", rule="DefaultDeny"),
        ev(h(4), principal="User:b", host="h2", resource_name="orders", rule="MatchingAcl"),
    ])
    report = R.default_allow(events).cache()
    (row,) = report.collect()
    assert (row["resource"], row["count"], row["principals"]) == ("Topic:scratch", 3, ["User:a"])
    (f,) = FD.default_allow(report).collect()
    assert (f["principal"], f["host"], f["resource"]) == ("User:a", "h1", "Topic:scratch")


def test_acl_usage_dormant_and_excessive(spark: SparkSession) -> None:
    sales_rule = ("MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=sales, patternType=LITERAL, "
                  "principal=Group:sales, host=*, operation=READ, permissionType=ALLOW))")
    binding_rule = ("RoleBinding(principal=User:crm, role=DeveloperRead, resourceType=TOPIC, resourceName=customers, "
                    "patternType=LITERAL)")
    events = frame(spark, [
        ev(h(24 * 34), principal="User:alice", host="h1", resource_name="orders"),
        ev(h(24 * 34), principal="User:bob", host="h2", resource_name="metrics-daily"),
        ev(h(24 * 34), principal="User:bob", host="h2", resource_name="metrics-daily", operation="DESCRIBE"),
        ev(h(24 * 34), principal="User:carol", host="h3", resource_name="logs-app", operation="WRITE"),
        ev(h(24 * 34), principal="User:eve", host="10.0.0.8", resource_name="orders"),
        ev(h(24 * 34), principal="User:zed", host="h9", resource_name="sales", rule="MatchingAcl", rule_detail=sales_rule),
        ev(h(24 * 34), principal="User:crm", host="h8", resource_name="customers", rule="RoleBinding",
           rule_detail=binding_rule),
        ev(h(10), principal="User:frank", host="h4", resource_name="old"),
        ev(h(24 * 35), principal="User:alice", host="h1", resource_name="orders"),
        ev(h(24 * 34 + 1), principal="User:bob", host="h2", resource_name="other", decision="DENIED"),
    ])
    acls = spark.createDataFrame([
        ("TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW"),
        ("TOPIC", "metrics-", "PREFIXED", "User:bob", "*", "ALL", "ALLOW"),
        ("TOPIC", "logs-", "PREFIXED", "User:carol", "*", "WRITE", "ALLOW"),
        ("TOPIC", "legacy", "LITERAL", "User:legacy", "*", "READ", "ALLOW"),
        ("TOPIC", "orders", "LITERAL", "User:eve", "10.0.0.9", "READ", "ALLOW"),
        ("TOPIC", "sales", "LITERAL", "Group:sales", "*", "READ", "ALLOW"),
        ("TOPIC", "old", "LITERAL", "User:frank", "*", "READ", "ALLOW"),
        ("TOPIC", "other", "LITERAL", "User:bob", "*", "READ", "DENY"),
    ], "resource_type string, resource_name string, pattern_type string, principal string, host string, "
       "operation string, permission string")
    bindings = spark.createDataFrame([("User:crm", "DeveloperRead", "TOPIC", "customers", "LITERAL"),
                                      ("Group:x", "DeveloperWrite", None, None, None)],
                                     "principal string, role string, resource_type string, resource_name string, "
                                     "pattern_type string")
    report = R.acl_usage(events, acls, bindings, R.Params(dormant_days=30)).cache()
    got = sorted((r["principal"], r["resource"], r["uses"], r["used_operations"], r["dormant"], r["excessive"])
                 for r in report.collect())
    assert got == [
        ("Group:sales", "Topic:LITERAL:sales", 1, ["READ"], False, False),
        ("Group:x", "Cluster:*", 0, [], True, False),
        ("User:alice", "Topic:LITERAL:orders", 2, ["READ"], False, False),
        ("User:bob", "Topic:PREFIXED:metrics-", 2, ["DESCRIBE", "READ"], False, True),
        ("User:carol", "Topic:PREFIXED:logs-", 1, ["WRITE"], False, False),
        ("User:crm", "Topic:LITERAL:customers", 1, ["READ"], False, False),
        ("User:eve", "Topic:LITERAL:orders", 0, [], True, False),  # the grant is for another host
        ("User:frank", "Topic:LITERAL:old", 1, ["READ"], True, False),  # last used 34.6 days before the end
        ("User:legacy", "Topic:LITERAL:legacy", 0, [], True, False),
    ]
    dormant = {f["principal"]: f["evidence"][0] for f in FD.dormant_acl(report).collect()}
    assert sorted(dormant) == ["Group:x", "User:eve", "User:frank", "User:legacy"]
    assert "(used: none, 0 use(s), last never)" in dormant["User:legacy"]  # never an empty "used: ,"
    assert "(used: READ, 1 use(s), last " in dormant["User:frank"]
    assert [f["resource"] for f in FD.excessive_grant(report).collect()] == ["Topic:PREFIXED:metrics-"]


def test_off_hours_access(spark: SparkSession) -> None:
    rows = [ev(h(10) + timedelta(minutes=i), principal="User:human", host="h1", resource_name="t") for i in range(25)]
    rows.append(ev(MON + timedelta(days=5, hours=3), principal="User:human", host="h1", resource_name="t"))
    rows += [ev(h(hr), principal="User:svc", host="h2", resource_name="t") for hr in range(0, 24)]
    rows += [ev(h(10 + i), principal="User:few", host="h3", resource_name="t") for i in range(4)]
    rows.append(ev(h(23), principal="User:few", host="h3", resource_name="t"))
    report = R.off_hours_access(frame(spark, rows), R.Params()).cache()
    got = {r["principal"]: (r["count"], r["anomalous"]) for r in report.collect()}
    assert got == {"User:human": (1, True), "User:svc": (14, False), "User:few": (1, False)}
    (f,) = FD.off_hours_access(report).collect()
    assert (f["principal"], f["host"], f["resource"]) == ("User:human", "h1", "Topic:t")


def test_first_seen_principals_and_hosts(spark: SparkSession) -> None:
    events = frame(spark, [
        ev(h(0), principal="User:p1", host="h1"),
        ev(h(5), principal="User:p1", host="h1"),
        ev(h(50), principal="User:p1", host="h2"),
        ev(h(51), principal="User:p1", host="h2"),
        ev(h(60), principal="User:p2", host="h7"),
        ev(h(61), principal="User:p2", host="h8"),
        ev(h(70), principal="User:p3", host="h9", event_type=S.AUTHENTICATION, auth_result="FAILURE"),
        ev(h(12), principal="User:p4", host="h4", event_type=S.REQUEST),
        ev(h(72), principal="User:p4", host="h4", event_type=S.REQUEST),
    ])
    report = R.first_seen(events, R.Params(baseline_days=1)).cache()
    assert sorted((r["kind"], r["principal"], r["host"], r["count"]) for r in report.collect()) == [
        ("HOST", "User:p1", "h2", 2), ("PRINCIPAL", "User:p2", "h7", 2)]
    assert sorted((f["rule"], f["principal"]) for f in FD.first_seen(report).collect()) == [
        ("NEW_HOST", "User:p1"), ("NEW_PRINCIPAL", "User:p2")]


def test_volume_baseline_and_exfiltration(spark: SparkSession) -> None:
    req = {"event_type": S.REQUEST, "stream": "request", "decision": None, "operation": None}
    rows = [ev(h(hr), principal="User:a", host="ha", api="FETCH", resource_name="pii", bytes=1_000_000, **req)
            for hr in range(8)]
    rows.append(ev(h(8), principal="User:a", host="ha", api="FETCH", resource_name="pii", bytes=200_000_000, **req))
    rows += [ev(h(hr), principal="User:b", host="hb", api="FETCH", resource_name="pii", bytes=1_000, **req)
             for hr in (6, 7)]
    rows.append(ev(h(8), principal="User:b", host="hb", api="FETCH", resource_name="pii", bytes=200_000_000, **req))
    rows.append(ev(h(8), principal="User:a", host="ha", api="PRODUCE", resource_name="pii", bytes=900_000_000, **req))
    report = R.volume(frame(spark, rows), R.Params(volume_min_bytes=50_000_000)).cache()
    spikes = [(r["principal"], r["hour"], r["bytes"], r["baseline_mean"]) for r in report.filter("is_spike").collect()]
    assert spikes == [("User:a", h(8), 200_000_000, 1_000_000.0)]
    (f,) = FD.exfiltration_volume(report).collect()
    assert (f["principal"], f["resource"], f["host"]) == ("User:a", "Topic:pii", "ha")


def test_client_inventory(spark: SparkSession) -> None:
    req = {"event_type": S.REQUEST, "stream": "request", "api": "FETCH"}
    events = frame(spark, [
        ev(h(1), principal="User:a", host="h1", software_name="apache-kafka-java", software_version="2.6.0", **req),
        ev(h(2), principal="User:a", host="h2", software_name="apache-kafka-java", software_version="2.6.0", **req),
        ev(h(1), principal="User:b", host="h3", software_name="apache-kafka-java", software_version="3.6.1", **req),
        ev(h(1), principal="User:c", host="h4", software_name="librdkafka", software_version="1.9.2", **req),
        ev(h(1), principal="User:d", host="h5", software_name="apache-kafka-java", software_version="3.0.0-SNAPSHOT",
           **req),
        ev(h(1), principal="User:e", host="h6", software_name="homegrown", software_version="0.1", **req),
        ev(h(1), principal="User:f", host="h7", **req),
    ])
    report = R.client_inventory(events, R.Params()).cache()
    assert sorted((r["principal"], r["software_version"], r["outdated"]) for r in report.collect()) == [
        ("User:a", "2.6.0", True), ("User:b", "3.6.1", False), ("User:c", "1.9.2", True),
        ("User:d", "3.0.0-SNAPSHOT", False), ("User:e", "0.1", False)]
    assert sorted((f["principal"], f["resource"], f["host"]) for f in FD.outdated_client(report).collect()) == [
        ("User:a", "apache-kafka-java/2.6.0", None), ("User:c", "librdkafka/1.9.2", "h4")]


def test_audit_gaps(spark: SparkSession) -> None:
    m = MON
    rows = [ev(m + timedelta(minutes=x), source="broker-1", stream="authorizer") for x in (0, 10, 20, 200, 210)]
    rows += [ev(m + timedelta(minutes=x), source="broker-2", stream="request") for x in (0, 30, 60, 90)]
    rows += [ev(m + timedelta(minutes=x), source="broker-2", stream="server") for x in (0, 500)]
    report = R.audit_gaps(frame(spark, rows), R.Params(gap_minutes=60)).cache()
    assert [(r["source"], r["stream"], r["gap_start"], r["gap_end"], r["gap_minutes"]) for r in report.collect()] == [
        ("broker-1", "authorizer", m + timedelta(minutes=20), m + timedelta(minutes=200), 180.0)]
    (f,) = FD.audit_gap(report).collect()
    assert (f["resource"], f["count"], f["principal"]) == ("broker-1/authorizer", 1, None)
