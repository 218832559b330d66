"""Findings: the rows of each report that an auditor must look at, in one shape.

A finding is `rule, severity, principal, host, resource, count, first_seen, last_seen, evidence,
regulations`; `resource` is `Type:name` for accessed resources (`Topic:orders`), `Type:PATTERN:name`
for grants (`Topic:PREFIXED:orders-`), `software/version` for clients and `source/stream` for audit
gaps. `evidence` is a short sample of what was seen (never secrets: the event table holds none).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

RULES: Final = (
    "SENSITIVE_ACCESS", "DENIED_SPIKE", "BRUTE_FORCE", "PRIVILEGED_OPERATION", "SUPER_USER_ACTIVITY",
    "DEFAULT_ALLOW", "DORMANT_ACL", "EXCESSIVE_GRANT", "OFF_HOURS_ACCESS", "NEW_PRINCIPAL", "NEW_HOST",
    "EXFILTRATION_VOLUME", "OUTDATED_CLIENT", "AUDIT_GAP",
)
SEVERITY_ORDER: Final = ("CRITICAL", "HIGH", "MEDIUM", "LOW")
FINDING_COLUMNS: Final = ("rule", "severity", "principal", "host", "resource", "count", "first_seen",
                          "last_seen", "evidence", "regulations")

REGULATIONS: Final[Mapping[str, tuple[str, ...]]] = {
    "DENIED_SPIKE": ("PCI DSS 10.2.1.4", "SOC 2 CC7.2"),
    "BRUTE_FORCE": ("PCI DSS 10.2.1.4", "SOC 2 CC6.1", "SOC 2 CC7.2"),
    "PRIVILEGED_OPERATION": ("PCI DSS 10.2.1.2", "PCI DSS 10.2.1.5", "PCI DSS 10.2.1.7", "SOX change management"),
    "SUPER_USER_ACTIVITY": ("PCI DSS 10.2.1.2", "SOC 2 CC6.3"),
    "DEFAULT_ALLOW": ("PCI DSS 7.2.1", "SOC 2 CC6.1"),
    "DORMANT_ACL": ("SOC 2 CC6.2", "SOC 2 CC6.3", "SOX user access review"),
    "EXCESSIVE_GRANT": ("PCI DSS 7.2.2", "SOC 2 CC6.3", "SOX user access review"),
    "OFF_HOURS_ACCESS": ("PCI DSS 10.2 (anomalies)", "SOC 2 CC7.2"),
    "NEW_PRINCIPAL": ("PCI DSS 10.2 (anomalies)", "SOC 2 CC6.2"),
    "NEW_HOST": ("PCI DSS 10.2 (anomalies)", "SOC 2 CC7.2"),
    "EXFILTRATION_VOLUME": ("GDPR Art. 33(3)(a)", "SOC 2 CC7.2"),
    "OUTDATED_CLIENT": ("PCI DSS 6.3.3", "SOC 2 CC7.1"),
    "AUDIT_GAP": ("PCI DSS 10.2.1.6", "PCI DSS 10.3", "HIPAA 164.312(b)"),
}
# SENSITIVE_ACCESS depends on the data classes touched.
CLASS_REGULATIONS: Final[Mapping[str, str]] = {
    "PCI": "PCI DSS 10.2.1.1", "PII": "GDPR Art. 30/32", "PHI": "HIPAA 164.312(b)",
}


def _regs(rule: str) -> Column:
    return F.array(*[F.lit(r) for r in REGULATIONS[rule]])


def _ts(c: str | Column) -> Column:
    return F.date_format(c, "yyyy-MM-dd'T'HH:mm:ss'Z'")


def _single(arr: Column) -> Column:
    """The only element of a set, else null (several hosts: see the report table)."""
    return F.when(F.size(arr) == 1, F.element_at(arr, 1))


def _shape(df: DataFrame, rule: str, severity: Column | str, principal: Column, host: Column, resource: Column,
           count: Column, first_seen: Column, last_seen: Column, evidence: Column,
           regulations: Column | None = None) -> DataFrame:
    sev = F.lit(severity) if isinstance(severity, str) else severity
    return df.select(
        F.lit(rule).alias("rule"), sev.alias("severity"), principal.cast("string").alias("principal"),
        host.cast("string").alias("host"), resource.cast("string").alias("resource"),
        count.cast("long").alias("count"), first_seen.cast("timestamp").alias("first_seen"),
        last_seen.cast("timestamp").alias("last_seen"),
        F.filter(evidence.cast("array<string>"), lambda x: x.isNotNull()).alias("evidence"),
        (regulations if regulations is not None else _regs(rule)).alias("regulations"))


def sensitive_access(report: DataFrame) -> DataFrame:
    g = (report.filter(~F.col("approved"))
         .groupBy("principal", "resource_name")
         .agg(F.sum("count").alias("n"), F.min("first_seen").alias("f"), F.max("last_seen").alias("l"),
              F.array_sort(F.array_distinct(F.flatten(F.collect_list("hosts")))).alias("hosts"),
              F.array_sort(F.array_distinct(F.flatten(F.collect_list("classes")))).alias("classes"),
              F.array_sort(F.collect_set("operation")).alias("ops"), F.countDistinct("day").alias("days")))
    regs = F.array_compact(F.array(*[F.when(F.array_contains("classes", c), F.lit(r))
                                     for c, r in CLASS_REGULATIONS.items()], F.lit("SOC 2 CC6.1")))
    sev = F.when(F.arrays_overlap("classes", F.array(F.lit("PCI"), F.lit("PHI"))), "HIGH").otherwise("MEDIUM")
    evidence = F.array(
        F.format_string("%s on %s data by a principal not approved for it", F.array_join("ops", "/"),
                        F.array_join("classes", "/")),
        F.format_string("%d accesses over %d day(s) from %s", "n", "days", F.array_join("hosts", ", ")))
    return _shape(g, "SENSITIVE_ACCESS", sev, F.col("principal"), _single(F.col("hosts")),
                  F.concat(F.lit("Topic:"), F.col("resource_name")), F.col("n"), F.col("f"), F.col("l"),
                  evidence, regs)


def denied_spike(report: DataFrame) -> DataFrame:
    s = report.filter("is_spike")
    g = s.groupBy("principal").agg(
        F.sum("count").alias("n"), F.min("first_seen").alias("f"), F.max("last_seen").alias("l"),
        F.mode("host").alias("host"), F.mode("resource").alias("resource"),
        F.max_by(F.format_string("%d denials in the hour from %s against a baseline of %.1f/h",
                                 F.col("count"), _ts("hour"), F.coalesce("baseline_mean", F.lit(0.0))),
                 "count").alias("e1"),
        F.count(F.lit(1)).alias("hours"))
    evidence = F.array(F.col("e1"), F.format_string("%d spike hour(s)", "hours"))
    return _shape(g, "DENIED_SPIKE", "HIGH", F.col("principal"), F.col("host"), F.col("resource"), F.col("n"),
                  F.col("f"), F.col("l"), evidence)


def brute_force(report: DataFrame) -> DataFrame:
    g = report.groupBy("host").agg(
        F.max("failures").alias("peak"), F.min("first_seen").alias("f"), F.max("last_seen").alias("l"),
        F.min("success_at").alias("ok_at"), F.min_by("success_principal", "success_at").alias("p"),
        F.array_sort(F.array_distinct(F.flatten(F.collect_list("mechanisms")))).alias("mech"),
        F.array_sort(F.array_distinct(F.flatten(F.collect_list("sources")))).alias("sources"))
    sev = F.when(F.col("ok_at").isNotNull(), "CRITICAL").otherwise("HIGH")
    evidence = F.array(
        F.format_string("up to %d failed authentications per window (%s) at %s", "peak",
                        F.array_join("mech", ", "), F.array_join("sources", ", ")),
        F.when(F.col("ok_at").isNotNull(), F.format_string("then authenticated as %s at %s", "p", _ts("ok_at"))))
    return _shape(g, "BRUTE_FORCE", sev, F.col("p"), F.col("host"), F.lit(None), F.col("peak"), F.col("f"),
                  F.coalesce("ok_at", "l"), evidence)


def privileged_operation(report: DataFrame) -> DataFrame:
    g = (report.filter(F.col("decision") == "ALLOWED")
         .groupBy("principal", "host", "resource")
         .agg(F.sum("count").alias("n"), F.min("first_seen").alias("f"), F.max("last_seen").alias("l"),
              F.array_sort(F.collect_set("action")).alias("actions")))
    evidence = F.array(F.format_string("%s allowed %d time(s)", F.array_join("actions", ", "), "n"))
    return _shape(g, "PRIVILEGED_OPERATION", "MEDIUM", F.col("principal"), F.col("host"), F.col("resource"),
                  F.col("n"), F.col("f"), F.col("l"), evidence)


def super_user_activity(report: DataFrame) -> DataFrame:
    g = report.groupBy("principal", "host").agg(
        F.sum("count").alias("n"), F.min("first_seen").alias("f"), F.max("last_seen").alias("l"),
        F.array_sort(F.collect_set("resource")).alias("res"), F.array_sort(F.collect_set("operation")).alias("ops"))
    evidence = F.array(F.format_string("%s on %s without ACL checks", F.array_join("ops", "/"),
                                       F.array_join(F.slice("res", 1, 5), ", ")))
    return _shape(g, "SUPER_USER_ACTIVITY", "HIGH", F.col("principal"), F.col("host"), _single(F.col("res")),
                  F.col("n"), F.col("f"), F.col("l"), evidence)


def default_allow(report: DataFrame) -> DataFrame:
    evidence = F.array(F.format_string("%d decision(s) allowed because no ACL exists (allow.everyone.if.no.acl.found)",
                                       "count"),
                       F.format_string("principals: %s", F.array_join(F.slice("principals", 1, 5), ", ")))
    return _shape(report, "DEFAULT_ALLOW", "HIGH", _single(F.col("principals")), _single(F.col("hosts")),
                  F.col("resource"), F.col("count"), F.col("first_seen"), F.col("last_seen"), evidence)


def _grant_evidence(prefix: str) -> Column:
    return F.format_string(prefix + " %s %s on %s (used: %s, %d use(s), last %s)", F.coalesce("operation", "role"),
                           F.col("kind"), F.col("resource"),
                           F.when(F.size("used_operations") > 0, F.array_join("used_operations", "/"))
                           .otherwise(F.lit("none")), F.col("uses"),
                           F.coalesce(_ts("last_used"), F.lit("never")))


def dormant_acl(report: DataFrame) -> DataFrame:
    r = report.filter("dormant")
    return _shape(r, "DORMANT_ACL", "MEDIUM", F.col("principal"), F.when(F.col("host") != "*", F.col("host")),
                  F.col("resource"), F.col("uses"), F.col("last_used"), F.col("last_used"),
                  F.array(_grant_evidence("unused grant:")))


def excessive_grant(report: DataFrame) -> DataFrame:
    r = report.filter("excessive")
    return _shape(r, "EXCESSIVE_GRANT", "MEDIUM", F.col("principal"), F.when(F.col("host") != "*", F.col("host")),
                  F.col("resource"), F.col("uses"), F.lit(None), F.col("last_used"),
                  F.array(_grant_evidence("broad grant used read-only:")))


def off_hours_access(report: DataFrame) -> DataFrame:
    g = (report.filter("anomalous").groupBy("principal")
         .agg(F.sum("count").alias("n"), F.min("first_seen").alias("f"), F.max("last_seen").alias("l"),
              F.array_sort(F.collect_set("host")).alias("hosts"), F.array_sort(F.collect_set("resource")).alias("res"),
              F.max("off_hours_share").alias("share")))
    evidence = F.array(F.format_string("%d access(es) outside business hours to %s; usual off-hours share %.1f%%",
                                       "n", F.array_join(F.slice("res", 1, 5), ", "), F.col("share") * 100))
    return _shape(g, "OFF_HOURS_ACCESS", "MEDIUM", F.col("principal"), _single(F.col("hosts")), _single(F.col("res")),
                  F.col("n"), F.col("f"), F.col("l"), evidence)


def first_seen(report: DataFrame) -> DataFrame:
    p = report.filter(F.col("kind") == "PRINCIPAL")
    h = report.filter(F.col("kind") == "HOST")
    ev = F.array(F.format_string("first seen %s, %d event(s) since", _ts("first_seen"), "count"))
    return _shape(p, "NEW_PRINCIPAL", "MEDIUM", F.col("principal"), F.col("host"), F.lit(None), F.col("count"),
                  F.col("first_seen"), F.col("last_seen"), ev).unionByName(
        _shape(h, "NEW_HOST", "LOW", F.col("principal"), F.col("host"), F.lit(None), F.col("count"),
               F.col("first_seen"), F.col("last_seen"), ev))


def exfiltration_volume(report: DataFrame) -> DataFrame:
    g = (report.filter("is_spike").groupBy("principal", "topic")
         .agg(F.sum("bytes").alias("b"), F.min("first_seen").alias("f"), F.max("last_seen").alias("l"),
              F.mode("host").alias("host"), F.max("baseline_mean").alias("base"), F.count(F.lit(1)).alias("hours"),
              F.sum("requests").alias("n")))
    evidence = F.array(F.format_string("%d bytes fetched in %d hour(s); baseline %.0f bytes/hour", "b", "hours",
                                       "base"))
    return _shape(g, "EXFILTRATION_VOLUME", "HIGH", F.col("principal"), F.col("host"),
                  F.concat(F.lit("Topic:"), F.col("topic")), F.col("n"), F.col("f"), F.col("l"), evidence)


def outdated_client(report: DataFrame) -> DataFrame:
    r = report.filter("outdated")
    evidence = F.array(F.format_string("%s %s is older than the minimum %s; client ids %s", "software_name",
                                       "software_version", "min_version", F.array_join(F.slice("client_ids", 1, 5), ", ")))
    return _shape(r, "OUTDATED_CLIENT", "LOW", F.col("principal"), _single(F.col("hosts")),
                  F.concat_ws("/", "software_name", "software_version"), F.col("count"), F.col("first_seen"),
                  F.col("last_seen"), evidence)


def audit_gap(report: DataFrame) -> DataFrame:
    g = report.groupBy("source", "stream").agg(
        F.count(F.lit(1)).alias("gaps"), F.min("gap_start").alias("f"), F.max("gap_end").alias("l"),
        F.max_by(F.format_string("no %s events from %s to %s (%.0f minutes)", F.col("stream"), _ts("gap_start"),
                                 _ts("gap_end"), F.col("gap_minutes")), "gap_minutes").alias("e"))
    return _shape(g, "AUDIT_GAP", "MEDIUM", F.lit(None), F.lit(None), F.concat_ws("/", "source", "stream"),
                  F.col("gaps"), F.col("f"), F.col("l"), F.array(F.col("e")))
