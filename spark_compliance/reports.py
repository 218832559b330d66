"""The compliance reports: each a pure function from the event table (and inventory) to one DataFrame.

Inputs are DataFrames with `schema.EVENT_COLUMNS`; the ACL inventory (`inventory.acls_frame`), role
bindings and topic classification come from `spark_compliance.inventory`. Every report uses built-in
Spark functions only. Hours and days are UTC; business hours are judged in `Params.business_zone`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_compliance import schema as S
from spark_compliance.inventory import local_frame

# Administrative requests (PCI DSS 10.2.1.2 / .5 / .7); kgov's own change events are privileged too.
PRIVILEGED_APIS: Final = (
    "CREATE_ACLS", "DELETE_ACLS", "ALTER_CONFIGS", "INCREMENTAL_ALTER_CONFIGS", "CREATE_TOPICS",
    "DELETE_TOPICS", "CREATE_PARTITIONS", "ALTER_USER_SCRAM_CREDENTIALS", "CREATE_DELEGATION_TOKEN",
    "RENEW_DELEGATION_TOKEN", "EXPIRE_DELEGATION_TOKEN", "ALTER_CLIENT_QUOTAS", "DELETE_GROUPS",
    "ALTER_PARTITION_REASSIGNMENTS",
)
# Operations that read or change data (DESCRIBE-only checks are metadata, not data access).
DATA_OPERATIONS: Final = ("READ", "WRITE", "DELETE", "ALTER", "ALL")
# What an ALLOW of each operation implies (Kafka's StandardAuthorizerData.findResult).
_IMPLIES_DESCRIBE: Final = ("READ", "WRITE", "DELETE", "ALTER")

DEFAULT_MIN_CLIENT_VERSIONS: Final[Mapping[str, str]] = {
    "apache-kafka-java": "3.0.0",
    "librdkafka": "2.0.0",
    "confluent-kafka-python": "2.0.0",
    "confluent-kafka-go": "2.0.0",
    "confluent-kafka-dotnet": "2.0.0",
    "kafka-python": "2.0.2",
    "sarama": "1.38.0",
}


@dataclass(frozen=True, slots=True)
class Params:
    business_zone: str = "UTC"
    business_start_hour: int = 8
    business_end_hour: int = 18  # exclusive; Saturday and Sunday are outside business hours
    baseline_days: float = 2.0  # new principals/hosts: first seen after the first N days of the period
    baseline_hours: int = 168  # trailing window for denial and volume baselines
    denied_spike_min: int = 20
    denied_spike_factor: float = 5.0
    denied_spike_z: float = 3.0
    denied_min_baseline_hours: float = 6.0  # a principal's first hours have no baseline to compare with
    brute_force_window_minutes: int = 10
    brute_force_threshold: int = 20
    brute_force_success_within_minutes: int = 60
    off_hours_max_share: float = 0.1  # a principal is "business-hours only" below this off-hours share
    off_hours_min_events: int = 20
    dormant_days: int = 30
    volume_min_bytes: int = 100 * 1024 * 1024
    volume_factor: float = 10.0
    volume_min_baseline_hours: int = 6
    gap_minutes: int = 60
    gap_streams: tuple[str, ...] = (S.STREAM_AUTHORIZER, S.STREAM_REQUEST, S.STREAM_EVENTS)
    min_client_versions: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_MIN_CLIENT_VERSIONS))


def resource_label(resource_type: Column, resource_name: Column) -> Column:
    """`Topic:orders`: Kafka's display type (PascalCase) and the name."""
    pascal = F.regexp_replace(F.initcap(F.regexp_replace(F.lower(resource_type), "_", " ")), " ", "")
    return F.concat_ws(":", pascal, resource_name)


def _decisions(events: DataFrame) -> DataFrame:
    return events.filter(F.col("event_type") == S.AUTHORIZATION)


def _span(df: DataFrame, *keys: str | Column) -> DataFrame:
    """count, first_seen, last_seen per key."""
    return df.groupBy(*keys).agg(F.count(F.lit(1)).alias("count"), F.min("ts").alias("first_seen"),
                                 F.max("ts").alias("last_seen"))


# 1. Sensitive-data access (PCI DSS 10.2.1.1, HIPAA 164.312(b), GDPR) --------------------------------------
def sensitive_access(events: DataFrame, classification: DataFrame) -> DataFrame:
    """principal x topic x operation x day over classified topics, with first/last seen and approval."""
    acc = _decisions(events).filter(
        (F.col("decision") == "ALLOWED") & F.col("logged") & (F.col("resource_type") == "TOPIC")
        & F.col("operation").isin(*DATA_OPERATIONS))
    c = classification.alias("c")
    match = ((F.col("c.pattern_type") == "LITERAL") & (F.col("resource_name") == F.col("c.name"))) | (
        (F.col("c.pattern_type") == "PREFIXED") & F.col("resource_name").startswith(F.col("c.name")))
    joined = acc.join(F.broadcast(c), match, "inner")
    return (joined.groupBy(F.col("dt").alias("day"), "principal", "resource_name", "operation")
            .agg(F.count(F.lit(1)).alias("count"), F.min("ts").alias("first_seen"),
                 F.max("ts").alias("last_seen"), F.array_sort(F.collect_set("host")).alias("hosts"),
                 F.array_sort(F.array_distinct(F.flatten(F.collect_list("c.classes")))).alias("classes"),
                 F.max(F.array_contains(F.col("c.approved_principals"), F.col("principal")).cast("int"))
                 .alias("_approved"))
            .withColumn("approved", F.col("_approved") == 1).drop("_approved"))


# 2. Denied access: summary and spikes (PCI DSS 10.2.1.4) --------------------------------------------------
def _denials(events: DataFrame) -> DataFrame:
    # TRACE lines are filter checks (logIfDenied=false), not access attempts.
    return _decisions(events).filter((F.col("decision") == "DENIED") & F.col("logged"))


def denied_summary(events: DataFrame) -> DataFrame:
    return _span(_denials(events), "principal", "host", "resource_type", "resource_name", "operation")


def _trailing_baseline(hourly: DataFrame, keys: Sequence[str], value: str, hours: int) -> DataFrame:
    """Mean and standard deviation of `value` over the previous `hours` hours, counting silent hours as 0.
    History starts at `period_start` (a column of `hourly`): an hour early in the period has little of it."""
    epoch = F.col("hour").cast("long")
    w = Window.partitionBy(*keys).orderBy(epoch).rangeBetween(-hours * 3600, -1)
    n = F.least(F.lit(float(hours)), (epoch - F.col("period_start").cast("long")) / 3600.0)
    total = F.coalesce(F.sum(value).over(w), F.lit(0)).cast("double")
    squares = F.coalesce(F.sum(F.col(value).cast("double") ** 2).over(w), F.lit(0.0))
    mean = F.when(n > 0, total / n)
    var = F.when(n > 0, squares / n - (total / n) ** 2)
    return (hourly.withColumn("baseline_hours", n).withColumn("baseline_mean", mean)
            .withColumn("baseline_std", F.sqrt(F.greatest(var, F.lit(0.0)))).drop("period_start"))


def denied_spikes(events: DataFrame, params: Params) -> DataFrame:
    """Denials per principal per hour against its trailing baseline; `is_spike` marks the anomalies."""
    hourly = (_denials(events).withColumn("hour", F.date_trunc("hour", "ts"))
              .groupBy("principal", "hour")
              .agg(F.count(F.lit(1)).alias("count"), F.mode("host").alias("host"),
                   F.mode(resource_label(F.col("resource_type"), F.col("resource_name"))).alias("resource"),
                   F.min("ts").alias("first_seen"), F.max("ts").alias("last_seen"))
              .crossJoin(F.broadcast(events.agg(F.date_trunc("hour", F.min("ts")).alias("period_start")))))
    b = _trailing_baseline(hourly, ["principal"], "count", params.baseline_hours)
    mean = F.coalesce(F.col("baseline_mean"), F.lit(0.0))
    std = F.coalesce(F.col("baseline_std"), F.lit(0.0))
    spike = ((F.col("count") >= params.denied_spike_min)
             & (F.col("baseline_hours") >= params.denied_min_baseline_hours)
             & (F.col("count") >= params.denied_spike_factor * mean)
             & (F.col("count") - mean >= params.denied_spike_z * std))
    return b.withColumn("is_spike", spike)


# 3. Brute-force authentication (per source address: Kafka never logs the user name) ---------------------
def brute_force(events: DataFrame, params: Params) -> DataFrame:
    auth = events.filter(F.col("event_type") == S.AUTHENTICATION)
    width = f"{params.brute_force_window_minutes} minutes"
    slide = f"{max(1, params.brute_force_window_minutes // 2)} minutes"
    windows = (auth.filter(F.col("auth_result") == "FAILURE")
               .groupBy("host", F.window("ts", width, slide).alias("w"))
               .agg(F.count(F.lit(1)).alias("failures"), F.min("ts").alias("first_seen"),
                    F.max("ts").alias("last_seen"), F.array_sort(F.collect_set("mechanism")).alias("mechanisms"),
                    F.array_sort(F.collect_set("source")).alias("sources"))
               .filter(F.col("failures") >= params.brute_force_threshold))
    ok = auth.filter(F.col("auth_result") == "SUCCESS").select(
        F.col("host").alias("_h"), F.col("ts").alias("_ok_ts"), F.col("principal").alias("_ok_p"))
    within = F.expr(f"INTERVAL {params.brute_force_success_within_minutes} MINUTES")
    joined = windows.join(ok, (F.col("_h") == F.col("host")) & (F.col("_ok_ts") > F.col("first_seen"))
                          & (F.col("_ok_ts") <= F.col("last_seen") + within), "left")
    return (joined.groupBy("host", "w", "failures", "first_seen", "last_seen", "mechanisms", "sources")
            .agg(F.min("_ok_ts").alias("success_at"), F.min_by("_ok_p", "_ok_ts").alias("success_principal"))
            .select("host", F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
                    "failures", "first_seen", "last_seen", "mechanisms", "sources", "success_at",
                    "success_principal"))


# 4. Privileged operations (PCI DSS 10.2.1.2, 10.2.1.5, 10.2.1.7) -------------------------------------------
def privileged_operations(events: DataFrame) -> DataFrame:
    op, rt = F.col("operation"), F.col("resource_type")
    # Pre-2.4 lines name no request: infer from the operation the administrative requests check.
    inferred = F.col("api").isNull() & (
        ((op == "ALTER") & (rt == "CLUSTER")) | (op == "ALTER_CONFIGS") | (op == "CREATE")
        | ((op == "DELETE") & (rt == "TOPIC")))
    authz = _decisions(events).filter(F.col("logged") & (F.col("api").isin(*PRIVILEGED_APIS) | inferred))
    changes = events.filter(F.col("event_type") == S.CHANGE)
    both = authz.unionByName(changes)
    return (_span(both, "principal", "host", F.coalesce("api", "operation").alias("action"), "decision",
                  "resource_type", "resource_name")
            .withColumn("resource", resource_label(F.col("resource_type"), F.col("resource_name"))))


# 5. Super-user activity (PCI DSS 10.2.1.2) ----------------------------------------------------------------
def super_user_activity(events: DataFrame, super_users: Sequence[str]) -> DataFrame:
    """Decisions made for super users: by rule SuperUser, or for a principal the inventory or a ZooKeeper
    `is a super user` line names as one."""
    noticed = events.filter(F.col("event_type") == S.SUPER_USER_NOTICE).select("principal").distinct()
    listed = local_frame(events.sparkSession, [(p,) for p in super_users], "principal string")
    supers = noticed.unionByName(listed).distinct().withColumn("_su", F.lit(True))
    d = _decisions(events).filter((F.col("decision") == "ALLOWED") & F.col("logged"))
    joined = d.join(F.broadcast(supers), "principal", "left")
    su = joined.filter((F.col("rule") == "SuperUser") | F.col("_su").isNotNull())
    return (_span(su, "principal", "host", "operation", "resource_type", "resource_name", "api")
            .withColumn("resource", resource_label(F.col("resource_type"), F.col("resource_name"))))


# 6. Default-allow exposure (allow.everyone.if.no.acl.found) -----------------------------------------------
def default_allow(events: DataFrame) -> DataFrame:
    hit = events.filter(((F.col("event_type") == S.AUTHORIZATION) & (F.col("rule") == "DefaultAllow")
                         & (F.col("decision") == "ALLOWED"))
                        | ((F.col("event_type") == S.NO_ACL_NOTICE) & (F.col("decision") == "ALLOWED")))
    return (hit.groupBy("resource_type", "resource_name")
            .agg(F.count(F.lit(1)).alias("count"), F.min("ts").alias("first_seen"), F.max("ts").alias("last_seen"),
                 F.array_sort(F.collect_set("principal")).alias("principals"),
                 F.array_sort(F.collect_set("host")).alias("hosts"))
            .withColumn("resource", resource_label(F.col("resource_type"), F.col("resource_name"))))


# 7. Dormant ACLs and least-privilege drift (SOC 2 CC6.2/6.3, SOX access review) ---------------------------
_ACL_RULE = (r"^MatchingAcl\(acl=StandardAcl\(resourceType=(\w+), resourceName=(.*), patternType=(\w+), "
             r"principal=(.*), host=(\S*), operation=(\w+), permissionType=(\w+)\)\)$")
_BINDING_RULE = r"^RoleBinding\(principal=(.*), role=(\w+), resourceType=(\w+), resourceName=(.*), patternType=(\w+)\)$"


def acl_usage(events: DataFrame, acls: DataFrame, role_bindings: DataFrame, params: Params) -> DataFrame:
    """One row per inventory ALLOW ACL and role binding: uses, last use, operations used, and the verdicts
    `dormant` (no use in the last `dormant_days` of the period) and `excessive` (a broad grant, ALL or a
    PREFIXED/`*` pattern beyond READ, through which only READ/DESCRIBE was used).

    Usage is re-evaluated with Kafka's matching rules (principal or User:*, host or *, operation or ALL
    or implied DESCRIBE, literal/`*`/prefix names), because ZooKeeper-era lines do not name the ACL;
    KRaft lines naming `MatchingAcl(...)` also count for exactly that ACL (group principals included).
    """
    allowed = _decisions(events).filter(F.col("decision") == "ALLOWED")
    period_end = events.agg(F.max("ts").alias("period_end"))
    uses = (allowed.groupBy("principal", "host", "operation", "resource_type", "resource_name")
            .agg(F.count(F.lit(1)).alias("n"), F.max("ts").alias("last")))
    a = acls.filter(F.col("permission") == "ALLOW").withColumn("acl_id", F.monotonically_increasing_id())
    ua = uses.alias("u")
    aa = a.alias("a")
    op_ok = ((F.col("a.operation") == "ALL") | (F.col("a.operation") == F.col("u.operation"))
             | ((F.col("u.operation") == "DESCRIBE") & F.col("a.operation").isin(*_IMPLIES_DESCRIBE))
             | ((F.col("u.operation") == "DESCRIBE_CONFIGS") & (F.col("a.operation") == "ALTER_CONFIGS")))
    name_ok = (((F.col("a.pattern_type") == "LITERAL")
                & ((F.col("a.resource_name") == F.col("u.resource_name")) | (F.col("a.resource_name") == "*")))
               | ((F.col("a.pattern_type") == "PREFIXED")
                  & F.col("u.resource_name").startswith(F.col("a.resource_name"))))
    cond = ((F.col("a.resource_type") == F.col("u.resource_type"))
            & ((F.col("a.principal") == F.col("u.principal")) | (F.col("a.principal") == "User:*"))
            & ((F.col("a.host") == "*") | (F.col("a.host") == F.col("u.host"))) & op_ok & name_ok)
    evaluated = ua.join(F.broadcast(aa), cond, "inner").select(
        "a.acl_id", F.col("u.operation").alias("used_op"), F.col("u.n").alias("n"), F.col("u.last").alias("last"))
    # Parsed after the aggregation: `counted(...)` depends on the count, so the filters Spark infers from
    # the join (`isnotnull(regexp_extract(rule_detail, ...))`) cannot be pushed below it onto every event
    # (they were: 7 regular expressions per allowed decision, most of this report's time).
    r = F.col("rule_detail")

    def counted(c: Column) -> Column:
        return F.when(F.col("n") > 0, c)

    named = (allowed.filter(F.col("rule") == "MatchingAcl")
             .groupBy("rule_detail", F.col("operation").alias("used_op"))
             .agg(F.count(F.lit(1)).alias("n"), F.max("ts").alias("last"))
             .select(*[counted(F.regexp_extract(r, _ACL_RULE, i)).alias(n) for i, n in enumerate(
                 ["resource_type", "resource_name", "pattern_type", "principal", "host", "operation",
                  "permission"], start=1)], "used_op", "n", "last"))
    named_ids = named.join(F.broadcast(a), on=["resource_type", "resource_name", "pattern_type", "principal",
                                                "host", "operation", "permission"], how="inner"
                           ).select("acl_id", "used_op", "n", "last")
    # The same decision may be counted by both paths: keep the larger count per (ACL, operation).
    per_op = (evaluated.unionByName(named_ids).groupBy("acl_id", "used_op")
              .agg(F.max("n").alias("n"), F.max("last").alias("last")))
    per_acl = per_op.groupBy("acl_id").agg(F.sum("n").alias("uses"), F.max("last").alias("last_used"),
                                           F.array_sort(F.collect_set("used_op")).alias("used_operations"))
    acl_rows = (a.join(per_acl, "acl_id", "left").select(
        F.lit("ACL").alias("kind"), "principal", "host", "resource_type", "resource_name", "pattern_type",
        "operation", F.lit(None).cast("string").alias("role"), F.coalesce("uses", F.lit(0)).alias("uses"),
        "last_used", F.coalesce("used_operations", F.array().cast("array<string>")).alias("used_operations")))

    b = role_bindings.withColumn("binding_id", F.monotonically_increasing_id())
    bound = (allowed.filter(F.col("rule") == "RoleBinding")
             .groupBy("rule_detail", F.col("operation").alias("used_op"))
             .agg(F.count(F.lit(1)).alias("n"), F.max("ts").alias("last"))
             .select(counted(F.regexp_extract(r, _BINDING_RULE, 1)).alias("_p"),
                     counted(F.regexp_extract(r, _BINDING_RULE, 2)).alias("_r"),
                     counted(F.regexp_extract(r, _BINDING_RULE, 4)).alias("_n"), "used_op", "n", "last"))
    b_used = (bound.join(F.broadcast(b), (F.col("_p") == F.col("principal")) & (F.col("_r") == F.col("role"))
                         & ((F.col("_n") == F.coalesce(F.col("resource_name"), F.lit("null")))
                            | F.col("resource_name").isNull()), "inner")
              .groupBy("binding_id").agg(F.sum("n").alias("uses"), F.max("last").alias("last_used"),
                                         F.array_sort(F.collect_set("used_op")).alias("used_operations")))
    binding_rows = b.join(b_used, "binding_id", "left").select(
        F.lit("ROLE_BINDING").alias("kind"), "principal", F.lit("*").alias("host"), "resource_type",
        "resource_name", "pattern_type", F.lit(None).cast("string").alias("operation"), "role",
        F.coalesce("uses", F.lit(0)).alias("uses"), "last_used",
        F.coalesce("used_operations", F.array().cast("array<string>")).alias("used_operations"))

    rows = acl_rows.unionByName(binding_rows).crossJoin(period_end)
    cutoff = F.col("period_end") - F.expr(f"INTERVAL {params.dormant_days} DAYS")
    dormant = F.col("last_used").isNull() | (F.col("last_used") < cutoff)
    broad = (F.col("kind") == "ACL") & ((F.col("operation") == "ALL") | (
        ((F.col("pattern_type") == "PREFIXED") | (F.col("resource_name") == "*"))
        & ~F.col("operation").isin("READ", "DESCRIBE")))
    read_only = F.size(F.array_except(F.col("used_operations"), F.array(F.lit("READ"), F.lit("DESCRIBE")))) == 0
    return (rows.withColumn("dormant", dormant)
            .withColumn("excessive", ~dormant & broad & read_only)
            .withColumn("resource", F.when(F.col("resource_type").isNull(), F.lit("Cluster:*"))  # cluster-wide binding
                        .otherwise(F.concat_ws(":", resource_label(F.col("resource_type"), F.lit(None)),
                                               F.coalesce("pattern_type", F.lit("LITERAL")),
                                               F.coalesce("resource_name", F.lit("*"))))))


# 8. Out-of-hours access ------------------------------------------------------------------------------------
def _off_hours(ts: Column, params: Params) -> Column:
    local = F.from_utc_timestamp(ts, params.business_zone)
    h = F.hour(local)
    return (F.dayofweek(local).isin(1, 7) | (h < params.business_start_hour) | (h >= params.business_end_hour))


def off_hours_access(events: DataFrame, params: Params) -> DataFrame:
    """Off-hours access per principal, host and resource. A principal is `anomalous` when it normally
    works business hours (off-hours share at most `off_hours_max_share`): service accounts that run
    around the clock are not flagged for it."""
    acc = _decisions(events).filter((F.col("decision") == "ALLOWED") & F.col("logged")).withColumn(
        "off", _off_hours(F.col("ts"), params))
    per_principal = acc.groupBy("principal").agg(
        F.count(F.lit(1)).alias("principal_events"), F.sum(F.col("off").cast("int")).alias("principal_off"))
    off = acc.filter("off")
    rows = (off.withColumn("resource", resource_label(F.col("resource_type"), F.col("resource_name")))
            .groupBy("principal", "host", "resource", "operation")
            .agg(F.count(F.lit(1)).alias("count"), F.min("ts").alias("first_seen"), F.max("ts").alias("last_seen")))
    share = F.col("principal_off") / F.col("principal_events")
    return (rows.join(per_principal, "principal").withColumn("off_hours_share", share)
            .withColumn("anomalous", (share <= params.off_hours_max_share)
                        & (F.col("principal_events") >= params.off_hours_min_events)))


# 9. First-seen principals and hosts ----------------------------------------------------------------------
def first_seen(events: DataFrame, params: Params) -> DataFrame:
    """Principals and (principal, host) pairs first seen after the baseline (the first `baseline_days` of
    the period). `kind` is PRINCIPAL or HOST; a new principal's hosts are not reported again as HOST."""
    act = events.filter(F.col("principal").isNotNull() & F.col("event_type").isin(
        S.AUTHORIZATION, S.REQUEST, S.AUTHENTICATION) & (F.coalesce(F.col("auth_result"), F.lit("")) != "FAILURE"))
    start = events.agg(F.min("ts").alias("period_start"))
    baseline_end = F.col("period_start") + F.expr(f"INTERVAL {int(params.baseline_days * 86400)} SECONDS")
    # One pass over the events, per (principal, host); the principals are rolled up from that.
    pairs = act.groupBy("principal", "host").agg(F.min("ts").alias("first_seen"), F.max("ts").alias("last_seen"),
                                                 F.count(F.lit(1)).alias("count"))
    p = (pairs.groupBy("principal").agg(F.min("first_seen").alias("first_seen"), F.max("last_seen").alias("last_seen"),
                                        F.sum("count").alias("count"), F.min_by("host", "first_seen").alias("host"))
         .crossJoin(start).withColumn("new", F.col("first_seen") >= baseline_end))
    new_p = p.filter("new").select("principal", F.lit("PRINCIPAL").alias("kind"), "host", "first_seen",
                                   "last_seen", "count")
    old_p = p.filter(~F.col("new")).select("principal", "period_start")
    h = (pairs.filter(F.col("host").isNotNull())
         .join(old_p, "principal").filter(F.col("first_seen") >= baseline_end)
         .select("principal", F.lit("HOST").alias("kind"), "host", "first_seen", "last_seen", "count"))
    return new_p.unionByName(h)


# 10. Data volume by principal and topic per hour (GDPR Art. 33 scoping, exfiltration) -------------------
def volume(events: DataFrame, params: Params) -> DataFrame:
    """Record bytes per principal, topic, direction and hour, with the trailing baseline of that triple.
    `is_spike`: a FETCH hour of at least `volume_min_bytes` and `volume_factor` times the baseline mean,
    judged only once `volume_min_baseline_hours` of history exist."""
    req = events.filter((F.col("event_type") == S.REQUEST) & F.col("bytes").isNotNull()
                        & F.col("api").isin("FETCH", "PRODUCE") & F.col("resource_name").isNotNull())
    hourly = (req.withColumn("hour", F.date_trunc("hour", "ts"))
              .groupBy("principal", F.col("resource_name").alias("topic"), F.col("api").alias("direction"), "hour")
              .agg(F.sum("bytes").alias("bytes"), F.count(F.lit(1)).alias("requests"), F.mode("host").alias("host"),
                   F.min("ts").alias("first_seen"), F.max("ts").alias("last_seen")))
    epoch = F.col("hour").cast("long")
    w = (Window.partitionBy("principal", "topic", "direction").orderBy(epoch)
         .rangeBetween(-params.baseline_hours * 3600, -1))
    b = (hourly.withColumn("baseline_mean", F.avg("bytes").over(w))
         .withColumn("baseline_hours", F.count(F.lit(1)).over(w)))
    spike = ((F.col("direction") == "FETCH") & (F.col("bytes") >= params.volume_min_bytes)
             & (F.col("baseline_hours") >= params.volume_min_baseline_hours)
             & (F.col("bytes") >= params.volume_factor * F.col("baseline_mean")))
    return b.withColumn("is_spike", F.coalesce(spike, F.lit(False)))


# 11. Client software inventory --------------------------------------------------------------------------
def _version_key(v: Column) -> Column:
    parts = [F.coalesce(F.regexp_extract(v, r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", i).try_cast("int"), F.lit(0))
             for i in (1, 2, 3)]
    return F.array(*parts)


def client_inventory(events: DataFrame, params: Params) -> DataFrame:
    req = events.filter((F.col("event_type") == S.REQUEST) & F.col("software_name").isNotNull())
    inv = (req.groupBy("principal", "software_name", "software_version")
           .agg(F.count(F.lit(1)).alias("count"), F.min("ts").alias("first_seen"), F.max("ts").alias("last_seen"),
                F.array_sort(F.collect_set("host")).alias("hosts"),
                F.array_sort(F.collect_set("client_id")).alias("client_ids")))
    mins = local_frame(events.sparkSession, sorted(params.min_client_versions.items()),
                       "software_name string, min_version string")
    joined = inv.join(F.broadcast(mins), "software_name", "left")
    outdated = F.col("min_version").isNotNull() & (
        _version_key(F.col("software_version")) < _version_key(F.col("min_version")))
    return joined.withColumn("outdated", outdated)


# 12. Gaps in the audit trail per source ------------------------------------------------------------------
def audit_gaps(events: DataFrame, params: Params) -> DataFrame:
    """Silences longer than `gap_minutes` inside each source's stream (minute resolution)."""
    minutes = (events.filter(F.col("stream").isin(*params.gap_streams))
               .select("source", "stream", F.date_trunc("minute", "ts").alias("m")).distinct())
    w = Window.partitionBy("source", "stream").orderBy("m")
    lagged = minutes.withColumn("gap_start", F.lag("m").over(w))
    gap = (F.col("m").cast("long") - F.col("gap_start").cast("long")) / 60.0
    return (lagged.withColumn("gap_minutes", gap)
            .filter(F.col("gap_minutes") > params.gap_minutes)
            .select("source", "stream", "gap_start", F.col("m").alias("gap_end"), "gap_minutes"))
