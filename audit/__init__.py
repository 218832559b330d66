"""Audit events, Kafka's log-line formats and sinks. Imports nothing else of kgov's."""

from audit.kafka_format import authorizer_log_line, log4j_envelope
from audit.model import AUDIT_FORMAT_VERSION, AuditEvent, EventType
from audit.sinks import (
    AuditSink,
    AuditWriteError,
    JsonLinesSink,
    LineSink,
    MemorySink,
    MultiSink,
    TextLineSink,
)

__all__ = [
    "AUDIT_FORMAT_VERSION",
    "AuditEvent",
    "AuditSink",
    "AuditWriteError",
    "EventType",
    "JsonLinesSink",
    "LineSink",
    "MemorySink",
    "MultiSink",
    "TextLineSink",
    "authorizer_log_line",
    "log4j_envelope",
]
