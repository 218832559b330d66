"""Kafka's request log (logger `kafka.request.logger`, Kafka 2.8+ JSON shape) and kgov request events.

A broker logs `Completed request:{json}` per request at DEBUG; the JSON has `requestHeader`,
`connection`, the timing fields, `securityProtocol`, `principal`, `listener` and
`clientInformation` (`RequestChannel.Request.requestLog`/`RequestConvertToJson`). The gateway builds
the same object from plain values and adds the sizes a proxy knows (`requestBytes`,
`responseBytes`, `recordsBytes`). Authentication outcomes get their own event type.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from audit.kafka_format import REQUEST_LOGGER, log4j_envelope
from audit.model import AuditEvent, EventType

# The longest delegation token id there is (the credential store's column): a longer named id is cut.
MAX_TOKEN_ID_LENGTH = 64


def request_log_entry(
    *,
    api_key: int,
    api_version: int,
    api_name: str,
    correlation_id: int,
    client_id: str | None,
    connection: str,
    principal: str,
    listener: str,
    security_protocol: str,
    software_name: str,
    software_version: str,
    total_time_ms: float,
    throttle_time_ms: int,
    request_bytes: int,
    response_bytes: int,
    records_bytes: int = 0,
    forwarded: bool = True,
    error: str | None = None,
) -> dict[str, Any]:
    """The JSON object of Kafka's `Completed request:` line, plus the gateway's size fields."""
    entry: dict[str, Any] = {
        "isForwarded": False,
        "requestHeader": {
            "requestApiKey": api_key,
            "requestApiVersion": api_version,
            "correlationId": correlation_id,
            "clientId": client_id,
            "requestApiKeyName": api_name,
        },
        "connection": connection,
        "totalTimeMs": round(total_time_ms, 3),
        "throttleTimeMs": throttle_time_ms,
        "securityProtocol": security_protocol,
        "principal": principal,
        "listener": listener,
        "clientInformation": {"softwareName": software_name, "softwareVersion": software_version},
        "requestBytes": request_bytes,
        "responseBytes": response_bytes,
        "recordsBytes": records_bytes,
        "forwardedUpstream": forwarded,
    }
    if error is not None:
        entry["error"] = error
    return entry


def request_log_line(ts: datetime, entry: dict[str, Any]) -> str:
    """Kafka's text line for the request logger, in the default log4j layout."""
    return log4j_envelope(ts, "DEBUG", "Completed request:" + json.dumps(entry, separators=(",", ":")),
                          REQUEST_LOGGER)


def request_event(*, source: str, time: datetime, entry: dict[str, Any]) -> AuditEvent:
    name = entry["requestHeader"]["requestApiKeyName"]
    return AuditEvent(EventType.REQUEST, source, f"{source}/request={name}", time, entry)


def authentication_event(
    *,
    source: str,
    time: datetime,
    principal: str | None,
    mechanism: str,
    client_address: str,
    success: bool,
    reason: str | None = None,
    listener: str = "",
    reauthentication: bool = False,
    token_id: str | None = None,
) -> AuditEvent:
    """One SASL outcome. `principal` is None when the client never proved an identity; `reason`
    is for the operator (never sent to the client) and must not contain secrets. `token_id`: the
    delegation token the login used or named (never its HMAC), as `authenticationInfo.delegationTokenId`,
    a kgov field (Confluent's events have none for it); left out of logins without a token."""
    info: dict[str, Any] = {"principal": principal, "mechanism": mechanism}
    if token_id is not None:
        if len(token_id) > MAX_TOKEN_ID_LENGTH:
            # A name no token has (a SCRAM `tokenauth` user name, up to the SASL frame limit): whole, every
            # unauthenticated attempt could write half a megabyte and rotate the audit trail out.
            token_id = f"{token_id[:MAX_TOKEN_ID_LENGTH]}... ({len(token_id)} characters)"
        info["delegationTokenId"] = token_id
    data: dict[str, Any] = {
        "serviceName": source,
        "methodName": "kafka.Authenticate",
        "authenticationInfo": info,
        "result": {"success": success, "reason": reason, "reauthentication": reauthentication},
        "requestMetadata": {"clientAddress": client_address, "listener": listener},
    }
    return AuditEvent(EventType.AUTHENTICATION, source, f"{source}/authentication={mechanism}", time, data)
