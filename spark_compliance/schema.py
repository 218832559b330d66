"""The normalised event table and the explicit JSON schemas the ingest reads with.

Every source (Kafka authorizer lines of each generation, request logs, server.log authentication
lines, kgov's and Confluent's CloudEvents) becomes rows of `EVENT_COLUMNS`; times are UTC; `dt` is
the UTC date the table is partitioned by. Enumerated values use Kafka's enum spelling
(`ALTER_CONFIGS`, `TRANSACTIONAL_ID`, `CREATE_ACLS`) whatever the source generation printed.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

# event_type values
AUTHORIZATION: Final = "AUTHORIZATION"
REQUEST: Final = "REQUEST"
AUTHENTICATION: Final = "AUTHENTICATION"
CHANGE: Final = "CHANGE"
SUPER_USER_NOTICE: Final = "SUPER_USER_NOTICE"  # ZooKeeper authorizer's "is a super user" DEBUG line
NO_ACL_NOTICE: Final = "NO_ACL_NOTICE"  # "No acl found for resource ..., authorized = true|false"

# stream values: which audit trail of a source the event came from (for gap detection)
STREAM_AUTHORIZER: Final = "authorizer"
STREAM_REQUEST: Final = "request"
STREAM_SERVER: Final = "server"
STREAM_EVENTS: Final = "events"

EVENT_SCHEMA: Final = StructType([
    StructField("ts", TimestampType()),
    StructField("source", StringType()),  # broker / gateway node: the parent directory of the file
    StructField("stream", StringType()),
    StructField("fmt", StringType()),  # e.g. kafka-authz-1.x, kafka-authz-3.3, kafka-request-json, kgov-event
    StructField("level", StringType()),
    StructField("event_type", StringType()),
    StructField("principal", StringType()),
    StructField("host", StringType()),
    StructField("decision", StringType()),  # ALLOWED / DENIED
    StructField("operation", StringType()),
    StructField("resource_type", StringType()),
    StructField("pattern_type", StringType()),  # null before Kafka 2.0
    StructField("resource_name", StringType()),
    StructField("api", StringType()),  # request name: PRODUCE, CREATE_ACLS, ...
    StructField("ref_count", IntegerType()),
    StructField("rule", StringType()),  # SuperUser, DefaultAllow, DefaultDeny, MatchingAcl, RoleBinding
    StructField("rule_detail", StringType()),
    StructField("logged", BooleanType()),  # False for TRACE filter checks (logIfAllowed/logIfDenied off)
    StructField("client_id", StringType()),
    StructField("software_name", StringType()),
    StructField("software_version", StringType()),
    StructField("bytes", LongType()),  # record bytes produced or fetched (request logs)
    StructField("auth_result", StringType()),  # SUCCESS / FAILURE for AUTHENTICATION events
    StructField("mechanism", StringType()),
    StructField("dt", DateType()),
])
EVENT_COLUMNS: Final = [f.name for f in EVENT_SCHEMA.fields]


def _s(*names: str) -> list[StructField]:
    return [StructField(n, StringType()) for n in names]


_SIZES = ArrayType(StructType([StructField("recordsSizeInBytes", LongType())]))

# The 2.8+ request-log object (KIP-673), only the fields the reports need. kgov's `io.kgov.request`
# events carry the same object as their `data`, so one schema reads both.
REQUEST_LOG_FIELDS: Final[list[StructField]] = [
    StructField("requestHeader", StructType([*_s("requestApiKeyName", "clientId"), StructField("requestApiVersion", IntegerType())])),
    StructField("request", StructType([
        # clientId/client_id: kgov's and Confluent's authorization events put the client id here.
        *_s("clientId", "client_id"),
        StructField("replicaId", IntegerType()),
        StructField("replicaState", StructType([StructField("replicaId", IntegerType())])),
        StructField("topicData", ArrayType(StructType([*_s("name"), StructField("partitionData", _SIZES)]))),
    ])),
    StructField("response", StructType([
        StructField("responses", ArrayType(StructType([*_s("topic", "topicId"), StructField("partitions", _SIZES)]))),
        StructField("topics", ArrayType(StructType(_s("name", "topicId")))),
    ])),
    StructField("connection", StringType()),
    StructField("principal", StringType()),
    StructField("clientInformation", StructType(_s("softwareName", "softwareVersion"))),
]

# CloudEvents `data` of kgov's events and of Confluent's audit log (fields of both spellings).
EVENT_DATA_SCHEMA: Final = StructType([
    *_s("methodName", "resourceName", "mechanism"),
    StructField("granted", BooleanType()),
    # kgov's authentication events (audit.request_log.authentication_event): result.success;
    # Confluent's: result.status.
    StructField("result", StructType([StructField("success", BooleanType()), *_s("status", "reason")])),
    StructField("authenticationInfo", StructType(_s("principal", "mechanism"))),
    StructField("authorizationInfo", StructType([
        *_s("operation", "resourceType", "resourceName", "patternType", "rule"),
        StructField("granted", BooleanType()),
        StructField("superUserAuthorization", BooleanType()),
    ])),
    # Confluent Cloud organisation events use a list of {"ip": ...}: read as raw JSON text then.
    StructField("requestMetadata", StructType(_s("clientAddress", "client_address"))),
    *REQUEST_LOG_FIELDS,
])
# The request-log line parsed with the same struct type, so both feed one set of expressions.
CLOUD_EVENT_SCHEMA: Final = StructType([
    *_s("specversion", "id", "source", "type", "time", "subject"),
    StructField("data", EVENT_DATA_SCHEMA),
])


def field_type(schema: StructType, name: str) -> DataType:
    return schema[name].dataType
