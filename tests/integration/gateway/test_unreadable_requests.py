"""Requests the gateway refuses while it reads them (other than ACL requests naming UNKNOWN, see
test_frame_reading.py): after the login, closed unanswered after the answers to the requests before
them, with Kafka's two ERROR lines (`SocketServer.Processor.processChannelException`), built without
anything the client wrote. Raw sockets through the production assembly, in front of Tansu."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from gateway.codec import SPECS
from tests.integration.gateway.conftest import RawClient, RunningGateway
from tests.integration.gateway.test_frame_reading import closes, connection_id, framed, size_prefix
from tests.integration.gateway.test_sasl_reauth import gateway, logged_in, metadata

pytestmark = [pytest.mark.broker]

SECRET = "client-chosen-secret-text"
INVALID = "org.apache.kafka.common.errors.InvalidRequestException"


def truncated_metadata(raw: RawClient) -> bytes:
    """A Metadata v12 whose body stops inside a topic name the client chose."""
    whole = framed(raw, 3, 12, metadata([SECRET]))[4:]
    body = whole[: len(whole) - len(SECRET) // 2 - 4]
    return size_prefix(len(body)) + body


def header_only(raw: RawClient, api_key: int, version: int) -> bytes:
    """A request header (the client id chosen by the client, then an empty tagged-field section, as
    a flexible version has it) and no body."""
    raw.correlation += 1
    body = (api_key.to_bytes(2, "big", signed=True) + version.to_bytes(2, "big", signed=True)
            + raw.correlation.to_bytes(4, "big") + len(SECRET).to_bytes(2, "big") + SECRET.encode() + b"\x00")
    return size_prefix(len(body)) + body


NOT_ALLOWED = 27  # WriteTxnMarkers: parsed by the codec, neither planned nor answered by the gateway


@pytest.mark.parametrize(("case", "exception"), [
    ("unknown-key", f"{INVALID}: Error parsing request header. Our best guess of the apiKey is: 999"),
    ("short-header", f"{INVALID}: Error parsing request header. Our best guess of the apiKey is: 3"),
    ("version-not-enabled", f"{INVALID}: Received request api key METADATA with version 99 which is not enabled"),
    ("api-not-allowed", f"{INVALID}: Received request api key WRITE_TXN_MARKERS with version "
                        f"{SPECS[NOT_ALLOWED].max_version} which is not enabled"),
    ("malformed-body", f"{INVALID}: Error getting request for apiKey: METADATA, apiVersion: 12, connectionId: "
                       "{conn}, listenerName: ListenerName(EXTERNAL), principal: User:alice; caused by: the body is "
                       "not a valid METADATA v12 request"),
])
def test_a_request_refused_while_read_logs_kafkas_error_lines_after_answering_the_requests_before_it(
    runtime_factory: Callable[..., RunningGateway], caplog: pytest.LogCaptureFixture, case: str, exception: str,
) -> None:
    gw = gateway(runtime_factory)
    caplog.set_level(logging.DEBUG, logger="kgov.gateway")
    raw = logged_in(gw)
    conn = connection_id(gw, raw)
    bad = {
        "unknown-key": lambda: header_only(raw, 999, 0),
        "short-header": lambda: size_prefix(6) + b"\x00\x03\x00\x0c\x00\x00",
        "version-not-enabled": lambda: header_only(raw, 3, 99),
        "api-not-allowed": lambda: header_only(raw, NOT_ALLOWED, SPECS[NOT_ALLOWED].max_version),
        "malformed-body": lambda: truncated_metadata(raw),
    }[case]
    raw.sock.sendall(framed(raw, 3, 12, metadata([])) + bad())
    assert raw.receive(3, 12).brokers  # the request before it is answered first (through the upstream)
    assert closes(raw, timeout=5)
    raw.close()
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    exception = exception.format(conn=conn)
    assert errors == [f"Closing socket for {conn} because of error: {exception}",
                      f"Exception while processing request from {conn}: {exception}"]
    assert SECRET not in caplog.text and SECRET[:8] not in caplog.text


def test_a_malformed_request_during_the_sasl_exchange_is_no_error_line(
    runtime_factory: Callable[..., RunningGateway], caplog: pytest.LogCaptureFixture,
) -> None:
    # Kafka's authenticator reads these (SaslServerAuthenticator), not processCompletedReceives.
    gw = gateway(runtime_factory)
    caplog.set_level(logging.DEBUG, logger="kgov.gateway")
    raw = RawClient(gw.bootstrap)
    assert raw.call(17, 1, SPECS[17].request[1](mechanism="SCRAM-SHA-512")).error_code == 0
    raw.sock.sendall(header_only(raw, 36, 1))  # a SaslAuthenticate without its body
    assert closes(raw, timeout=5)
    raw.close()
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
