"""Kafka's own log-line formats, built from plain values so that `audit` imports nothing of ours.

The authorizer line is the one `StandardAuthorizerData.buildAuditMessage` writes since Kafka 3.3
(logger `kafka.authorizer.logger`), wrapped in Kafka's default log4j layout `[%d] %p %m (%c)%n`.
"""

from __future__ import annotations

from datetime import datetime

AUTHORIZER_LOGGER = "kafka.authorizer.logger"
REQUEST_LOGGER = "kafka.request.logger"

# SecurityUtils.resourceTypeName: the camel-case names Kafka prints in `on resource = ...`.
RESOURCE_TYPE_DISPLAY = {
    "TOPIC": "Topic",
    "GROUP": "Group",
    "CLUSTER": "Cluster",
    "TRANSACTIONAL_ID": "TransactionalId",
    "DELEGATION_TOKEN": "DelegationToken",
    "USER": "User",
    "SUBJECT": "Subject",
}


def resource_display(resource_type: str, pattern_type: str, name: str) -> str:
    """`Topic:LITERAL:alpha`, as Kafka prints a resource pattern in the audit line."""
    return f"{RESOURCE_TYPE_DISPLAY.get(resource_type, resource_type)}:{pattern_type}:{name}"


def standard_acl_display(
    *,
    resource_type: str,
    resource_name: str,
    pattern_type: str,
    principal: str,
    host: str,
    operation: str,
    permission: str,
) -> str:
    """`StandardAcl.toString()`."""
    return (
        f"StandardAcl(resourceType={resource_type}, resourceName={resource_name}, "
        f"patternType={pattern_type}, principal={principal}, host={host}, "
        f"operation={operation}, permissionType={permission})"
    )


def authorizer_log_line(
    *,
    principal: str,
    allowed: bool,
    operation: str,
    host: str,
    resource_type: str,
    pattern_type: str,
    resource_name: str,
    request_name: str,
    resource_ref_count: int,
    rule: str,
) -> str:
    """The message of Kafka 3.3+'s authorizer audit line (without the log4j envelope)."""
    verdict = "Allowed" if allowed else "Denied"
    return (
        f"Principal = {principal} is {verdict} operation = {operation} from host = {host} "
        f"on resource = {resource_display(resource_type, pattern_type, resource_name)} "
        f"for request = {request_name} with resourceRefCount = {resource_ref_count} based on rule {rule}"
    )


def authorizer_log_level(*, allowed: bool, log_if_allowed: bool, log_if_denied: bool) -> str:
    """Kafka's levels: a denial asked to be logged is INFO, an allow asked to be logged DEBUG, else TRACE."""
    if allowed:
        return "DEBUG" if log_if_allowed else "TRACE"
    return "INFO" if log_if_denied else "TRACE"


def log4j_envelope(ts: datetime, level: str, message: str, logger: str) -> str:
    """Kafka's default layout `[%d] %p %m (%c)`; `%d` is `yyyy-MM-dd HH:mm:ss,SSS` with no zone.

    The message is written as Log4j2's `%enc{%m}{CRLF}` writes it: CR and LF as the two characters `\r`
    and `\n`. Client-chosen names (group and transactional ids) reach the authorizer line, and a name
    holding a line break would otherwise start a line of the client's making in the audit trail (a
    forged decision, say), which log readers and the compliance job would take as genuine."""
    stamp = ts.strftime("%Y-%m-%d %H:%M:%S") + f",{ts.microsecond // 1000:03d}"
    return f"[{stamp}] {level} {one_line(message)} ({logger})"


def one_line(message: str) -> str:
    """CR and LF as `\\r` and `\\n` (Log4j2's `%enc{...}{CRLF}`), so a message stays one log line."""
    if "\n" in message or "\r" in message:
        return message.replace("\r", "\\r").replace("\n", "\\n")
    return message
