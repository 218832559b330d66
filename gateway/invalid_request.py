"""A request Kafka's broker refuses while it parses it, and the lines Kafka logs for that close.

Kafka's `RequestContext.parseRequest` wraps whatever the request class throws while it is built (an
`IllegalArgumentException` from `CreateAclsRequest.validate`, say) in an `InvalidRequestException`
"Error getting request for apiKey: ..."; `SocketServer.Processor.processCompletedReceives` catches it
and `processChannelException` logs two ERROR lines, `Closing socket for <connection id> because of
error` and `Exception while processing request from <connection id>`, each with the exception, then
closes the connection without an answer.

Departure: Kafka's cause message ends with the request data's `toString` (the ACL creations or
filters: principals, hosts, resource names, all client-chosen text). The gateway logs the cause
without it, so a client cannot write arbitrary text into the operator's log.
"""

from __future__ import annotations

from gateway.codec import SPECS, CodecError

INVALID_REQUEST_EXCEPTION = "org.apache.kafka.common.errors.InvalidRequestException"


class InvalidRequestError(CodecError):
    """Kafka's InvalidRequestException at parse time: the connection is closed, unanswered.
    `cause` is the message of the exception behind it (Kafka's IllegalArgumentException)."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


class ApiNotEnabledError(CodecError):
    """An API key or version the listener does not enable (Kafka's `SocketServer.parseRequestHeader`),
    the gateway's listener: not advertised in its ApiVersions, or not allowed through it."""

    def __init__(self, api_key: int, api_version: int, detail: str) -> None:
        super().__init__(detail)
        self.api_key = api_key
        self.api_version = api_version


def channel_exception_log_lines(connection_id: str, exception: str) -> tuple[str, str]:
    """Kafka's two ERROR lines (`processChannelException`), each with the exception on the same line."""
    return (f"Closing socket for {connection_id} because of error: {exception}",
            f"Exception while processing request from {connection_id}: {exception}")


def _getting_request(api: str, api_version: int, connection_id: str, listener: str, principal: str) -> str:
    # RequestContext.parseRequest's message
    return (f"{INVALID_REQUEST_EXCEPTION}: Error getting request for apiKey: {api}, apiVersion: {api_version}, "
            f"connectionId: {connection_id}, listenerName: ListenerName({listener}), principal: {principal}")


def parse_failure_log_lines(
    error: InvalidRequestError, *, api: str, api_version: int, connection_id: str, listener: str, principal: str
) -> tuple[str, str]:
    """Kafka's two ERROR lines for the close, each with the exception on the same line."""
    exception = (f"{_getting_request(api, api_version, connection_id, listener, principal)}; caused by "
                 f"java.lang.IllegalArgumentException: {error.cause}")
    return channel_exception_log_lines(connection_id, exception)


def unreadable_request_log_lines(
    error: CodecError, *, frame: bytes | bytearray, parsed_header: bool, connection_id: str, listener: str,
    principal: str,
) -> tuple[str, str]:
    """Kafka's ERROR lines for any other request refused while it is read (after the login): a header
    that does not parse or names an API key Kafka does not know (`RequestHeader.parse`), an API or
    version not enabled (`SocketServer.parseRequestHeader`), a body that does not parse
    (`RequestContext.parseRequest`). Built from the header's numbers and fixed text only: nothing the
    client wrote reaches the log. Departure: Kafka's cause (a BufferUnderflowException, a
    SchemaException naming a field) is the gateway's fixed "the body is not a valid ... request"."""
    api_key = int.from_bytes(frame[:2], "big", signed=True) if len(frame) >= 2 else -1
    api_version = int.from_bytes(frame[2:4], "big", signed=True) if len(frame) >= 4 else -1
    spec = SPECS.get(api_key)
    if not parsed_header or spec is None:
        exception = f"{INVALID_REQUEST_EXCEPTION}: Error parsing request header. Our best guess of the apiKey is: {api_key}"
    elif isinstance(error, ApiNotEnabledError):
        exception = (f"{INVALID_REQUEST_EXCEPTION}: Received request api key {spec.name} with version {api_version} "
                     "which is not enabled")
    else:
        exception = (f"{_getting_request(spec.name, api_version, connection_id, listener, principal)}; caused by: "
                     f"the body is not a valid {spec.name} v{api_version} request")
    return channel_exception_log_lines(connection_id, exception)
