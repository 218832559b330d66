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

from gateway.codec import CodecError


class InvalidRequestError(CodecError):
    """Kafka's InvalidRequestException at parse time: the connection is closed, unanswered.
    `cause` is the message of the exception behind it (Kafka's IllegalArgumentException)."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


def parse_failure_log_lines(
    error: InvalidRequestError, *, api: str, api_version: int, connection_id: str, listener: str, principal: str
) -> tuple[str, str]:
    """Kafka's two ERROR lines for the close, each with the exception on the same line."""
    exception = (
        f"org.apache.kafka.common.errors.InvalidRequestException: Error getting request for apiKey: {api}, "
        f"apiVersion: {api_version}, connectionId: {connection_id}, listenerName: ListenerName({listener}), "
        f"principal: {principal}; caused by java.lang.IllegalArgumentException: {error.cause}"
    )
    return (f"Closing socket for {connection_id} because of error: {exception}",
            f"Exception while processing request from {connection_id}: {exception}")
