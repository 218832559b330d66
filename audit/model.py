"""The audit event: a CloudEvents 1.0 envelope whose `data` follows Confluent's audit-log shape.

The format is a contract (STYLE 11): fields are only ever added, with defaults, and every event
carries `kgovformatversion` so readers can tell generations apart.
"""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

AUDIT_FORMAT_VERSION = 1
SPEC_VERSION = "1.0"


class EventType(enum.StrEnum):
    AUTHORIZATION = "io.kgov.authorization"
    REQUEST = "io.kgov.request"
    AUTHENTICATION = "io.kgov.authentication"
    CREDENTIAL_CHANGE = "io.kgov.credential_change"
    ACL_CHANGE = "io.kgov.acl_change"
    ROLE_BINDING_CHANGE = "io.kgov.role_binding_change"
    CONFIG_CHANGE = "io.kgov.config_change"
    SCHEMA_CHANGE = "io.kgov.schema_change"


def _utc_iso(ts: datetime) -> str:
    ts = ts.astimezone(UTC)
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


@dataclass(frozen=True, slots=True)
class AuditEvent:
    type: EventType
    source: str
    subject: str
    time: datetime
    data: Mapping[str, Any]
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    # `to_json`'s text, made once: every sink of a MultiSink (the file, the Kafka topic) writes the same
    # text, and the gateway writes an event per request. Not a field of the event (`replace` starts anew).
    _json: str | None = field(default=None, init=False, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "specversion": SPEC_VERSION,
            "id": self.id,
            "source": self.source,
            "type": str(self.type),
            "datacontenttype": "application/json",
            "subject": self.subject,
            "time": _utc_iso(self.time),
            "kgovformatversion": AUDIT_FORMAT_VERSION,
            "data": dict(self.data),
        }

    def to_json(self) -> str:
        text = self._json
        if text is None:
            text = json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=False, default=str)
            object.__setattr__(self, "_json", text)  # a cache of the frozen event's own text
        return text


def authorization_event(
    *,
    source: str,
    time: datetime,
    principal: str,
    granted: bool,
    operation: str,
    resource_type: str,
    resource_name: str,
    pattern_type: str,
    client_address: str,
    method_name: str,
    rule: str,
    client_id: str | None = None,
    correlation_id: int | None = None,
    token_authenticated: bool = False,
    decision_api_caller: Mapping[str, str | None] | None = None,
) -> AuditEvent:
    """One authorization decision, in the field layout of Confluent's audit log.

    `decision_api_caller` (`{"address": ..., "proxy": ...}`) is a kgov field, added to
    `requestMetadata` only for decisions asked through the decision API: `clientAddress` there is the
    broker's client, and this names the host that asked on its behalf."""
    subject = f"{source}/{resource_type.lower()}={resource_name}"
    data: dict[str, Any] = {
        "serviceName": source,
        "methodName": method_name,
        "resourceName": subject,
        "authenticationInfo": {"principal": principal, "tokenAuthenticated": token_authenticated},
        "authorizationInfo": {
            "granted": granted,
            "operation": operation,
            "resourceType": resource_type,
            "resourceName": resource_name,
            "patternType": pattern_type,
            "rule": rule,
        },
        "requestMetadata": {"clientAddress": client_address},
    }
    if decision_api_caller is not None:
        data["requestMetadata"]["decisionApiCaller"] = dict(decision_api_caller)
    if client_id is not None or correlation_id is not None:
        data["request"] = {"clientId": client_id, "correlationId": correlation_id}
    return AuditEvent(EventType.AUTHORIZATION, source, subject, time, data)


def change_event(
    *,
    type: EventType,
    source: str,
    time: datetime,
    principal: str,
    method_name: str,
    target: str,
    details: Mapping[str, Any],
    client_address: str | None = None,
) -> AuditEvent:
    """An administrative change (credentials, ACLs, role bindings, configuration).

    `details` must never contain secrets: callers pass names, mechanisms and counts only.
    """
    data: dict[str, Any] = {
        "serviceName": source,
        "methodName": method_name,
        "resourceName": target,
        "authenticationInfo": {"principal": principal},
        "details": dict(details),
        "requestMetadata": {"clientAddress": client_address},
    }
    return AuditEvent(type, source, f"{source}/{target}", time, data)
