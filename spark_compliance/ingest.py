"""Ingest: every input line becomes one classified, parsed row; events are normalised to `EVENT_SCHEMA`.

`parse_lines` is pure (DataFrame of `value`, `file_path` -> DataFrame with `kind`); everything runs in
the JVM with anchored `regexp_extract`s and `from_json` with explicit schemas, no Python UDFs.

Line kinds: `event` (normalised), `ignored` (well-formed lines of other loggers, stack-trace
continuations, blank lines, TRACE-free notices we do not use), `excluded` (inter-broker principals and
follower fetches) and `bad` (anything that claims to be an audit line but does not parse, or no
known shape at all). Bad lines are counted per source and sampled; they never fail the job.

The source of a line is the name of the directory holding its file (`logs/broker-3/server.log` ->
`broker-3`), which is how brokers' logs are usually collected. Kafka's log4j `%d` has no zone: each
source's zone is given by `source_zones` (default `default_zone`, UTC).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark_compliance import kafka_lines as K
from spark_compliance import schema as S

KIND_EVENT = "event"
KIND_IGNORED = "ignored"
KIND_EXCLUDED = "excluded"
KIND_BAD = "bad"

# Files in an input directory that are not logs.
NON_LOG_FILES = ("inventory.json", "classification.json", "planted.json", "_SUCCESS")



def read_lines(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """Every line of every file under `paths` (recursively; .gz read transparently) with its file path."""
    df = (spark.read.option("recursiveFileLookup", "true").text(list(paths))
          .select("value", F.col("_metadata.file_path").alias("file_path"),
                  F.col("_metadata.file_name").alias("file_name")))
    return df.filter(~F.col("file_name").isin(*NON_LOG_FILES)).drop("file_name")


def enum_spelling(c: Column) -> Column:
    """`AlterConfigs` / `kafka.AlterConfigs` / `ALTER_CONFIGS` -> `ALTER_CONFIGS`."""
    c = F.regexp_replace(c, r"^[a-z]+\.", "")  # `kafka.CreateTopics`, `kgov.AlterUserScramCredentials`
    return F.upper(F.regexp_replace(c, K.PASCAL_BOUNDARY, "$1_$2"))


def client_host(c: Column) -> Column:
    """`/10.0.0.1`, `host/10.0.0.1`, `10.0.0.1:5555` -> `10.0.0.1`; IPv6 kept as is."""
    c = F.regexp_replace(F.trim(c), r"^[^/\[]*/", "")
    return F.regexp_replace(c, r"^(\d+\.\d+\.\d+\.\d+):\d+$", "$1")


def _null(type_name: str) -> Column:
    return F.lit(None).cast(type_name)


def _nonempty(c: Column) -> Column:
    return F.when(c == "", _null("string")).otherwise(c)


def _sum_sizes(arr: Column) -> Column:
    return F.aggregate(F.transform(arr, lambda p: F.coalesce(p["recordsSizeInBytes"], F.lit(0).cast("long"))),
                       F.lit(0).cast("long"), lambda a, b: a + b)


def _topics(d: Column, api: Column) -> Column:
    """Per request-log object: array of (name, topic_id, bytes), one element per topic touched."""
    elem = "struct<name:string,topic_id:string,bytes:bigint>"
    fetch = F.transform(d["response"]["responses"], lambda t: F.struct(
        t["topic"].alias("name"), t["topicId"].alias("topic_id"), _sum_sizes(t["partitions"]).alias("bytes")))
    produce = F.transform(d["request"]["topicData"], lambda t: F.struct(
        t["name"].alias("name"), _null("string").alias("topic_id"), _sum_sizes(t["partitionData"]).alias("bytes")))
    metadata = F.transform(d["response"]["topics"], lambda t: F.struct(
        t["name"].alias("name"), t["topicId"].alias("topic_id"), _null("long").alias("bytes")))
    none = F.array(F.struct(_null("string").alias("name"), _null("string").alias("topic_id"), _null("long").alias("bytes")))
    arr = (F.when(api == "FETCH", fetch).when(api == "PRODUCE", produce)
           .when(api == "METADATA", metadata).otherwise(none))
    # An empty list still yields one row for the request itself.
    return F.when(F.size(arr) > 0, arr).otherwise(none).cast(f"array<{elem}>")


# Small integers: the shape is compared in every output column's CASE.
_JSON, _AUTHZ, _SU, _NOACL, _DETAIL, _REQ_TEXT, _REQ_JSON, _AUTH_FAIL, _AUTH_OK, _OTHER = range(10)
# Fields each pattern's rewrite splits into (more would mean a FIELD_SEP in the line: bad, a second net).
_FIELD_COUNTS = {_AUTHZ: 12, _SU: 3, _NOACL: 4, _REQ_TEXT: 12, _REQ_JSON: 3, _AUTH_FAIL: 5, _AUTH_OK: 5}
# Every message shape is told by the first 60 characters (the envelope is at most 32): client-chosen text
# (resource names, client ids) comes later in the line, so it cannot change how a line is classified.
_HEAD = 60


# Log4j2 JSON layouts (Kafka 4.0 moved to Log4j2; operators may log JSON): JsonLayout and the ECS template.
_LOG4J2_JSON = StructType([
    StructField("instant", StructType([StructField("epochSecond", LongType()),
                                       StructField("nanoOfSecond", LongType())])),
    StructField("timeMillis", LongType()),
    StructField("@timestamp", StringType()),
    StructField("level", StringType()), StructField("log.level", StringType()),
    StructField("loggerName", StringType()), StructField("log.logger", StringType()),
    StructField("message", StringType()),
])


def log4j2_json_as_text(lines: DataFrame) -> DataFrame:
    """Rewrites Log4j2 JSON-layout lines as Kafka's classic `[%d] %p %m (%c)` text (time in UTC) and
    marks them with `instant` (their time is absolute, so no source zone applies). Other lines pass."""
    v = F.col("value")
    # (CloudEvents, the bulk of JSON lines, name their `specversion` first: one short search rules them out.)
    is_layout = (v.startswith("{") & ~v.contains('"specversion"')
                 & (v.contains('"loggerName"') | v.contains('"log.logger"')))
    # Parsed once into its own column: built from `from_json(...)` directly, the fields below let Spark's
    # JSON optimisation split it into one narrowed `from_json` per field read, each parsing the whole line
    # again (22 parses of every Log4j2 JSON line, measured in the optimised plan).
    lines = lines.withColumn("_l4j", F.from_json(F.when(is_layout, v), _LOG4J2_JSON))
    j = F.col("_l4j")
    instant = F.coalesce(
        F.timestamp_micros(j["instant"]["epochSecond"] * 1_000_000 + F.floor(j["instant"]["nanoOfSecond"] / 1000)),
        F.timestamp_millis(j["timeMillis"]), F.try_to_timestamp(j["@timestamp"]))
    level = F.coalesce(j["level"], j["log.level"])
    logger = F.coalesce(j["loggerName"], j["log.logger"])
    text = F.concat(F.lit("["), F.date_format(instant, "yyyy-MM-dd HH:mm:ss,SSS"), F.lit("] "), F.upper(level),
                    F.lit(" "), j["message"], F.lit(" ("), logger, F.lit(")"))
    ok = instant.isNotNull() & level.isNotNull() & logger.isNotNull() & j["message"].isNotNull()
    staged = lines.withColumn("_j", F.when(is_layout, F.struct(text.alias("text"), instant.alias("at"), ok.alias("ok"))))
    jj = F.col("_j")
    return staged.select(
        *[F.when(jj["ok"], jj["text"]).otherwise(v).alias("value") if c == "value" else F.col(c)
          for c in lines.columns if c != "_l4j"],
        F.when(jj["ok"], jj["at"]).alias("instant"))


def parse_lines(lines: DataFrame, *, default_zone: str = "UTC", source_zones: Mapping[str, str] | None = None,
                exclude_principals: Iterable[str] = ("User:kafka",)) -> DataFrame:
    """Classify and parse every line. Returns `EVENT_COLUMNS` + `kind`, `reason`, `raw` (bad lines only),
    `file_path`, `topic_id`, `line_weight` (1 on the first row of each input line, else 0).

    Needs the session time zone to be UTC (`session.build_session` sets it): log4j stamps are read as
    wall-clock time and then moved from each source's zone to UTC.
    """
    lines = log4j2_json_as_text(lines)
    v = F.col("value")
    # The rewrite below joins a line's fields with FIELD_SEP: a name containing that character (a group
    # or client id is any string) would split into too many fields and make a denial a bad line. It is
    # shown as U+FFFD instead, the rest of the line parsed as usual.
    lines = lines.withColumn("value", F.when(v.contains(K.FIELD_SEP), F.replace(v, F.lit(K.FIELD_SEP),
                                                                                F.lit("\ufffd"))).otherwise(v))
    hd = F.col("_head")
    # A decision line is one by its head, whatever it ends with: a line break inside a name cuts the
    # line, and the name's text before it could end the first part like another logger's line.
    authz_head = hd.contains(" Principal = ") & hd.rlike(K.AUTHZ_HEAD)
    shape = (F.when(v.startswith("{"), F.lit(_JSON))
             .when(v.endswith(K.AUTHORIZER_SUFFIX),
                   F.when(hd.contains(" Principal = "), F.lit(_AUTHZ))
                   .when(hd.contains("] DEBUG principal = ") | hd.contains("] TRACE principal = "), F.lit(_SU))
                   .when(hd.contains(" No acl found for resource "), F.lit(_NOACL))
                   .when(hd.rlike(K.AUTHZ_ACL_DETAIL_HEAD), F.lit(_DETAIL))
                   .otherwise(F.lit(_AUTHZ)))
             .when(authz_head, F.lit(_AUTHZ))
             .when(v.endswith(K.REQUEST_SUFFIX),
                   F.when(hd.contains("Completed request:{"), F.lit(_REQ_JSON)).otherwise(F.lit(_REQ_TEXT)))
             .when(v.endswith(K.SELECTOR_SUFFIX) & v.contains("Failed "), F.lit(_AUTH_FAIL))
             .when(v.endswith(K.SELECTOR_SUFFIX) & v.contains("Successfully "), F.lit(_AUTH_OK))
             .otherwise(F.lit(_OTHER)))
    sh = F.col("shape")
    # Each full-line pattern runs once per line: `r` is its own projection (referenced several times, so
    # Spark does not inline it), and a pattern is only tried on lines of its shape.
    rewritten = (F.when(sh == _AUTHZ, F.regexp_replace(v, K.AUTHZ, K.AUTHZ_FIELDS))
                 .when(sh == _SU, F.regexp_replace(v, K.AUTHZ_SUPER_USER, K.SUPER_USER_FIELDS))
                 .when(sh == _NOACL, F.regexp_replace(v, K.AUTHZ_NO_ACL, K.NO_ACL_FIELDS))
                 .when(sh == _REQ_TEXT, F.regexp_replace(v, K.REQUEST_TEXT, K.REQUEST_TEXT_FIELDS))
                 .when(sh == _REQ_JSON, F.regexp_replace(v, K.REQUEST_JSON, K.REQUEST_JSON_FIELDS))
                 .when(sh == _AUTH_FAIL, F.regexp_replace(v, K.AUTH_FAILURE, K.AUTH_FIELDS))
                 .when(sh == _AUTH_OK, F.regexp_replace(v, K.AUTH_SUCCESS, K.AUTH_FIELDS)))
    r = F.col("r")
    # Kafka's text is ambiguous when a name holds a second ` is Allowed|Denied Operation = ...` (see
    # `kafka_lines`): if the first reading is Allowed and the line says ` is Denied ` anywhere, the last
    # Denied reading is taken, so a crafted name cannot hide a denial. (Rare lines: the extra patterns
    # only run on them.)
    # (FIELD_SEP is no longer in any line: only the verdict field can read `<SEP>Allowed<SEP>`.)
    denial_hidden = ((sh == _AUTHZ) & v.contains(" is Denied ") & r.contains(f"{K.FIELD_SEP}Allowed{K.FIELD_SEP}"))
    last_denied_new = F.regexp_replace(v, K.AUTHZ_LAST_DENIED, K.AUTHZ_FIELDS)
    last_denied = F.when(last_denied_new != v, last_denied_new).otherwise(
        F.regexp_replace(v, K.AUTHZ_OLD_LAST_DENIED, K.AUTHZ_OLD_FIELDS))
    expected: Column = F.lit(0)
    for code, n in _FIELD_COUNTS.items():
        expected = F.when(sh == code, F.lit(n)).otherwise(expected)
    stage1 = (lines.withColumn("_head", F.when(~v.startswith("{"), F.substring(v, 1, _HEAD)))
              .withColumn("shape", shape).drop("_head").withColumn("r", rewritten)
              # 0.9-2.3 authorizer lines: the 2.4+ pattern left them unchanged.
              .withColumn("r", F.when((sh == _AUTHZ) & (r == v),
                                      F.regexp_replace(v, K.AUTHZ_OLD, K.AUTHZ_OLD_FIELDS)).otherwise(r))
              .withColumn("r", F.when(denial_hidden, last_denied).otherwise(r))
              .withColumn("f", F.when(r != v, F.split(r, K.FIELD_SEP)))
              .withColumn("ctl", F.col("f").isNotNull() & (F.size("f") != expected))
              .withColumn("f", F.when(~F.col("ctl"), F.col("f")))
              .withColumn("ev", F.from_json(F.when(sh == _JSON, v), S.CLOUD_EVENT_SCHEMA))
              .withColumn("rj", F.from_json(F.when(sh == _REQ_JSON, F.col("f")[2]), S.EVENT_DATA_SCHEMA))
              .drop("r"))
    f = F.col("f")
    ev = F.col("ev")
    # String functions, not regular expressions, on the per-row hot path where they suffice.
    source0 = _nonempty(F.substring_index(F.substring_index(F.col("file_path"), "/", -2), "/", 1))
    zone: Column = F.lit(default_zone)
    for src, z in (source_zones or {}).items():
        zone = F.when(F.col("source") == src, F.lit(z)).otherwise(zone)
    # `2024-05-01 10:00:00,123` -> a cast (Spark's own fast parser) rather than a DateTimeFormatter.
    wall_clock = F.replace(f[0], F.lit(","), F.lit(".")).try_cast("timestamp")
    utc_only = default_zone.upper() in ("UTC", "Z", "ETC/UTC") and not source_zones
    ev_type0 = ev["type"]
    ev_kind0 = (F.when(ev_type0.isin("io.kgov.authorization", "io.confluent.kafka.server/authorization"),
                       F.lit(S.AUTHORIZATION))
                .when(ev_type0 == "io.kgov.request", F.lit(S.REQUEST))
                .when(ev_type0 == "io.kgov.authentication", F.lit(S.AUTHENTICATION))
                .when(ev_type0.startswith("io.kgov.") & ev_type0.endswith("_change"), F.lit(S.CHANGE)))
    # Stage 2: the values many output columns share, each computed once.
    stage2 = stage1.select(
        "value", "file_path", "instant", "shape", "f", "ctl", "ev", "rj", source0.alias("source"),
        F.when(sh != _JSON, wall_clock).alias("wall_clock"), ev_type0.alias("ev_type"),
        F.try_to_timestamp(ev["time"]).alias("ev_ts"), ev_kind0.alias("ev_kind"))
    stage2 = stage2.withColumn("log_ts", F.coalesce(F.col("instant"), F.col("wall_clock") if utc_only
                                                    else F.to_utc_timestamp(F.col("wall_clock"), zone)))
    # Not a column: copying the nested struct into every row costs more than reading through the CASE.
    d = F.when(sh == _JSON, ev["data"]).otherwise(F.col("rj"))
    source = F.col("source")
    log_ts = F.col("log_ts")
    ev_type = F.col("ev_type")
    ev_ts = F.col("ev_ts")
    ev_kind = F.col("ev_kind")
    az = d["authorizationInfo"]
    req_api = F.upper(d["requestHeader"]["requestApiKeyName"])
    json_principal = F.coalesce(d["authenticationInfo"]["principal"], d["principal"])
    json_host = F.coalesce(
        client_host(F.coalesce(d["requestMetadata"]["clientAddress"], d["requestMetadata"]["client_address"])),
        _nonempty(F.regexp_extract(d["connection"], K.CONNECTION_REMOTE_HOST, 1)))

    parsed_ok = f.isNotNull() & log_ts.isNotNull()
    is_event = (F.when(sh == _JSON, ev_kind.isNotNull() & ev_ts.isNotNull())
                .when(sh == _REQ_JSON, parsed_ok & F.col("rj").isNotNull() & req_api.isNotNull())
                .when(sh.isin(_AUTHZ, _SU, _NOACL, _REQ_TEXT, _AUTH_FAIL, _AUTH_OK), parsed_ok)
                .otherwise(F.lit(False)))
    ignored = (F.when(sh == _JSON, ev_type.isNotNull() & ev_ts.isNotNull() & ev_kind.isNull())
               .when(sh == _DETAIL, F.lit(True))
               .when(sh == _OTHER, v.rlike(K.OTHER_LOGGER) | v.rlike(r"^(\s|Caused by: |$)")
                     | v.rlike(r"^[\w.$]+(Exception|Error)(: |$)"))
               .otherwise(F.lit(False)))
    reason = (F.when((sh == _JSON) & ev.isNull(), F.lit("malformed JSON"))
              .when(sh == _JSON, F.lit("JSON without a known type or time"))
              .when(F.col("ctl"), F.lit("control character in line"))
              .when(sh.isin(_AUTHZ, _SU, _NOACL), F.lit("unparseable kafka.authorizer.logger line"))
              .when(sh.isin(_REQ_TEXT, _REQ_JSON), F.lit("unparseable kafka.request.logger line"))
              .otherwise(F.lit("unknown line format")))

    def by_shape(json_c: Column, authz: Column, su: Column, noacl: Column, req_text: Column,
                 req_json: Column, auth: Column) -> Column:
        return (F.when(sh == _JSON, json_c).when(sh == _AUTHZ, authz).when(sh == _SU, su)
                .when(sh == _NOACL, noacl).when(sh == _REQ_TEXT, req_text).when(sh == _REQ_JSON, req_json)
                .when(sh.isin(_AUTH_FAIL, _AUTH_OK), auth))

    fmt = by_shape(F.when(ev_type.startswith("io.confluent."), F.lit("confluent-event"))
                   .otherwise(F.lit("kgov-event")),
                   F.when(~v.endswith(K.AUTHORIZER_SUFFIX), F.lit("kafka-authz-cut"))  # a name's line break
                   .when(F.upper(f[4]) == f[4], F.lit("kafka-authz-3.3"))  # `operation = READ`
                   .when(f[9] != "", F.lit("kafka-authz-2.4"))
                   .when(f[7] != "", F.lit("kafka-authz-2.0")).otherwise(F.lit("kafka-authz-1.x")),
                   F.lit("kafka-authz-zk-superuser"), F.lit("kafka-authz-zk-noacl"),
                   F.lit("kafka-request-text"), F.lit("kafka-request-json"), F.lit("kafka-server-auth"))
    event_type = by_shape(ev_kind, F.lit(S.AUTHORIZATION), F.lit(S.SUPER_USER_NOTICE), F.lit(S.NO_ACL_NOTICE),
                          F.lit(S.REQUEST), F.lit(S.REQUEST), F.lit(S.AUTHENTICATION))
    stream = by_shape(F.lit(S.STREAM_EVENTS), F.lit(S.STREAM_AUTHORIZER), F.lit(S.STREAM_AUTHORIZER),
                      F.lit(S.STREAM_AUTHORIZER), F.lit(S.STREAM_REQUEST), F.lit(S.STREAM_REQUEST),
                      F.lit(S.STREAM_SERVER))
    principal = F.trim(by_shape(json_principal, f[2], f[2], _null("string"), f[8], d["principal"], _null("string")))
    host = by_shape(json_host, f[5], _null("string"), _null("string"),
                    _nonempty(F.regexp_extract(f[6], K.CONNECTION_REMOTE_HOST, 1)), json_host, f[3])
    granted = F.coalesce(az["granted"], d["granted"])
    decision = by_shape(
        F.when(ev_kind == S.AUTHORIZATION, F.when(granted, F.lit("ALLOWED")).otherwise(F.lit("DENIED")))
        .when(ev_kind == S.CHANGE, F.lit("ALLOWED")),
        F.when(f[3] == "Allowed", F.lit("ALLOWED")).when(f[3] == "Denied", F.lit("DENIED")), F.lit("ALLOWED"),
        F.when(f[3] == "true", F.lit("ALLOWED")).otherwise(F.lit("DENIED")),
        _null("string"), _null("string"), _null("string"))
    operation = enum_spelling(by_shape(az["operation"], f[4], _null("string"), _null("string"), _null("string"),
                                       _null("string"), _null("string")))
    na = f[2]
    na_is_pattern = na.startswith("ResourcePattern(")

    def no_acl(pattern_group: int, display_group: int) -> Column:
        return F.when(na_is_pattern, F.regexp_extract(na, K.NO_ACL_PATTERN_RESOURCE, pattern_group)).otherwise(
            F.regexp_extract(na, K.NO_ACL_DISPLAY_RESOURCE, display_group))

    body = f[5]
    sizes = F.when((sh == _REQ_TEXT) & (f[2] == "PRODUCE"), F.regexp_extract(body, K.PRODUCE_SIZES, 1))
    text_topic = _nonempty(F.regexp_extract(sizes, r"^([^=,]*?)-\d+=", 1))
    text_bytes = F.when(sizes != "", F.aggregate(
        F.transform(F.split(sizes, ","), lambda x: F.coalesce(
            F.substring_index(x, "=", -1).try_cast("long"), F.lit(0).cast("long"))),
        F.lit(0).cast("long"), lambda a, b: a + b))
    resource_type = enum_spelling(by_shape(az["resourceType"], f[6], _null("string"), no_acl(1, 1),
                                           F.when(text_topic.isNotNull(), F.lit("TOPIC")), _null("string"),
                                           _null("string")))
    pattern_type = _nonempty(by_shape(az["patternType"], f[7], _null("string"), no_acl(3, 2), _null("string"), _null("string"), _null("string")))
    resource_name = by_shape(F.coalesce(az["resourceName"], F.when(ev_kind == S.CHANGE, d["resourceName"])),
                             f[8], _null("string"), no_acl(2, 3), text_topic, _null("string"), _null("string"))
    api = enum_spelling(_nonempty(by_shape(F.coalesce(d["methodName"], d["requestHeader"]["requestApiKeyName"]),
                                           f[9], _null("string"), _null("string"), f[2], req_api, _null("string"))))
    # (An empty field is skipped: Spark's try_cast builds, then drops, an exception for each one it refuses.)
    ref_count = F.when((sh == _AUTHZ) & (f[10] != ""), f[10].try_cast("int"))
    rule_detail = _nonempty(by_shape(
        F.coalesce(az["rule"], F.when(az["superUserAuthorization"], F.lit("SuperUser"))),
        f[11], F.lit("SuperUser"),
        F.when(f[3] == "true", F.lit("DefaultAllow")).otherwise(F.lit("DefaultDeny")),
        _null("string"), _null("string"), _null("string")))
    client_id = by_shape(F.coalesce(d["request"]["clientId"], d["request"]["client_id"],
                                    d["requestHeader"]["clientId"]),
                         _null("string"), _null("string"), _null("string"), f[4], d["requestHeader"]["clientId"], _null("string"))
    software_name = by_shape(d["clientInformation"]["softwareName"], _null("string"), _null("string"), _null("string"), f[10],
                             d["clientInformation"]["softwareName"], _null("string"))
    software_version = by_shape(d["clientInformation"]["softwareVersion"], _null("string"), _null("string"), _null("string"), f[11],
                                d["clientInformation"]["softwareVersion"], _null("string"))
    auth_result = by_shape(
        F.when(ev_kind == S.AUTHENTICATION, F.upper(F.coalesce(
            F.when(d["result"]["success"], F.lit("SUCCESS")).when(~d["result"]["success"], F.lit("FAILURE")),
            d["result"]["status"],
            F.when(d["granted"], F.lit("SUCCESS")).when(~d["granted"], F.lit("FAILURE"))))),
        _null("string"), _null("string"), _null("string"), _null("string"), _null("string"),
        F.when(sh == _AUTH_FAIL, F.lit("FAILURE")).otherwise(F.lit("SUCCESS")))
    mechanism = by_shape(F.coalesce(d["authenticationInfo"]["mechanism"], d["mechanism"]), _null("string"), _null("string"), _null("string"), _null("string"), _null("string"),
                         _nonempty(F.regexp_extract(f[4], K.SASL_MECHANISM, 1)))
    level = F.when(sh != _JSON, _nonempty(f[1]))
    has_topics = (sh == _REQ_JSON) | ((sh == _JSON) & (ev_kind == S.REQUEST))
    replica = F.coalesce(d["request"]["replicaId"], d["request"]["replicaState"]["replicaId"])
    excluded = (principal.isin(*list(exclude_principals))
                | (has_topics & (req_api == "FETCH") & F.coalesce(replica >= 0, F.lit(False))))
    ts = F.when(sh == _JSON, ev_ts).otherwise(log_ts)

    stage3 = stage2.select(
        ts.alias("ts"), source.alias("source"), stream.alias("stream"), fmt.alias("fmt"), level.alias("level"),
        event_type.alias("event_type"), principal.alias("principal"), host.alias("host"),
        decision.alias("decision"), operation.alias("operation"), resource_type.alias("resource_type"),
        pattern_type.alias("pattern_type"), resource_name.alias("resource_name"), api.alias("api"),
        ref_count.alias("ref_count"), F.substring_index(rule_detail, "(", 1).alias("rule"),
        rule_detail.alias("rule_detail"), (F.coalesce(level, F.lit("")) != "TRACE").alias("logged"),
        _nonempty(client_id).alias("client_id"), _nonempty(software_name).alias("software_name"),
        _nonempty(software_version).alias("software_version"), text_bytes.alias("bytes"),
        auth_result.alias("auth_result"), mechanism.alias("mechanism"),
        is_event.alias("_is_event"), excluded.alias("_excluded"), ignored.alias("_ignored"), reason.alias("_reason"),
        "value", F.col("file_path"),
        F.when(has_topics, _topics(d, req_api)).alias("topics"),
    )
    ie = F.col("_is_event")
    kind = (F.when(ie & F.col("_excluded"), F.lit(KIND_EXCLUDED)).when(ie, F.lit(KIND_EVENT))
            .when(F.col("_ignored"), F.lit(KIND_IGNORED)).otherwise(F.lit(KIND_BAD)))
    stage4 = stage3.withColumn("kind", kind)
    k = F.col("kind")
    stage2 = stage4.select(
        *[c for c in stage3.columns if not c.startswith("_") and c not in ("value", "topics")], "kind",
        F.when(k == KIND_BAD, F.col("_reason")).alias("reason"),
        F.when(k == KIND_BAD, F.substring(F.col("value"), 1, 500)).alias("raw"),
        F.when(k == KIND_EVENT, F.col("topics")).alias("topics"))
    exploded = stage2.select("*", F.posexplode_outer("topics").alias("pos", "topic")).drop("topics")
    t = F.col("topic")
    keep = [c for c in stage2.columns if c not in ("topics", "resource_type", "resource_name", "bytes", "rule")]
    return exploded.select(
        *keep,
        _nonempty(F.col("rule")).alias("rule"),
        F.when(t.isNotNull(), F.when(t["name"].isNotNull() | t["topic_id"].isNotNull(), F.lit("TOPIC")))
        .otherwise(F.col("resource_type")).alias("resource_type"),
        F.when(t.isNotNull(), t["name"]).otherwise(F.col("resource_name")).alias("resource_name"),
        t["topic_id"].alias("topic_id"),
        F.when(t.isNotNull(), t["bytes"]).otherwise(F.col("bytes")).alias("bytes"),
        F.when(F.coalesce(F.col("pos"), F.lit(0)) == 0, F.lit(1)).otherwise(F.lit(0)).alias("line_weight"),
        F.to_date(F.col("ts")).alias("dt"),
    )


def within_period(events: DataFrame, since: datetime | None, until: datetime | None) -> DataFrame:
    """Events at or after `since` and before `until` (aware datetimes; naive ones are taken as UTC)."""
    def utc(ts: datetime) -> datetime:
        # Aware: PySpark reads a naive datetime literal in the Python process's local zone (`time.mktime`).
        return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)

    if since is not None:
        events = events.filter(F.col("ts") >= F.lit(utc(since)))
    if until is not None:
        events = events.filter(F.col("ts") < F.lit(utc(until)))
    return events


def resolve_topic_ids(parsed: DataFrame) -> DataFrame:
    """Fetch v13+ names topics by id: map ids to names learnt from Metadata responses in the same logs."""
    names = (parsed.filter((F.col("api") == "METADATA") & F.col("topic_id").isNotNull()
                           & F.col("resource_name").isNotNull())
             .groupBy("topic_id").agg(F.max("resource_name").alias("_name")))
    joined = parsed.join(F.broadcast(names), on="topic_id", how="left")
    return joined.withColumn("resource_name", F.coalesce("resource_name", "_name", "topic_id")).drop("_name")


def compact(parsed: DataFrame) -> DataFrame:
    """What the job keeps of `parse_lines`' rows: the file path of bad lines only (for the sample)."""
    return parsed.withColumn("file_path", F.when(F.col("kind") == KIND_BAD, F.col("file_path")))


def events_of(parsed: DataFrame) -> DataFrame:
    """The normalised event table (kind `event`), columns in `EVENT_COLUMNS` order."""
    return resolve_topic_ids(parsed.filter(F.col("kind") == KIND_EVENT)).select(*S.EVENT_COLUMNS)


def line_quality(parsed: DataFrame) -> DataFrame:
    """Lines per source and kind (one row each)."""
    return parsed.groupBy("source", "kind").agg(F.sum("line_weight").alias("lines"))


def bad_line_sample(parsed: DataFrame, n: int = 20) -> DataFrame:
    return parsed.filter(F.col("kind") == KIND_BAD).select("source", "file_path", "reason", "raw").limit(n)
