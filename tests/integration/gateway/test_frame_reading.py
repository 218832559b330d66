"""The gateway reads a client's frames one at a time, as Kafka's broker does (`NetworkReceive` per
channel, `SocketServer.Processor.processCompletedReceives`): frames that share a TCP read with a bad one
are served and answered in order before it fails the connection; each frame is held to the limit in
force when it is reached (512 KiB during an exchange, `max_request_bytes` after the login), even when
it arrived in the same read as the SaslAuthenticate or SaslHandshake that changed the limit; and a
request Kafka's parser refuses is logged as Kafka logs it. Raw sockets through the production assembly,
in front of Tansu; every bad frame is sent in the same `sendall` as the frames before it."""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from gateway.codec import SPECS
from sasl.scram import MECHANISMS, ScramClient
from tests.integration.gateway.conftest import RawClient, RunningGateway
from tests.integration.gateway.test_broker_conformance import _creation, grant_admin
from tests.integration.gateway.test_sasl import PASSWORD
from tests.integration.gateway.test_sasl_reauth import DELAY_MS, auth_events, gateway, logged_in, metadata

pytestmark = [pytest.mark.broker]

PRE_AUTH_LIMIT = 524_288  # Kafka's sasl.server.max.receive.size
DEFAULT_LIMIT = 100 * 1024 * 1024  # [gateway] max_request_bytes (Kafka's socket.request.max.bytes)


def framed(raw: RawClient, api_key: int, version: int, request: Any) -> bytes:
    """One request as `raw.send` would write it, for writing several in one `sendall`."""
    raw.correlation += 1
    request.with_header(correlation_id=raw.correlation, client_id="raw")
    return bytes(request.encode(version=version, header=True, framed=True))


def size_prefix(size: int) -> bytes:
    return size.to_bytes(4, "big", signed=True)


def api_versions(software: str = "raw") -> Any:
    return SPECS[18].request[3](client_software_name=software, client_software_version="1")


def closes(raw: RawClient, timeout: float) -> bool:
    """True when the gateway closes the connection, sending nothing more, within `timeout`."""
    raw.sock.settimeout(timeout)
    try:
        return raw.sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def ends(raw: RawClient, timeout: float) -> bool:
    """True when the connection ends (whatever is still sent before) within `timeout`."""
    raw.sock.settimeout(timeout)
    try:
        while raw.sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def connection_id(gw: RunningGateway, raw: RawClient) -> str:
    port = raw.sock.getsockname()[1]
    deadline = time.monotonic() + 30
    while not (found := [c for c in list(gw.gateway._connections) if c.peer[1] == port]):
        assert time.monotonic() < deadline, "the gateway did not accept the connection"
        time.sleep(0.01)
    return str(found[0].connection_id)


def assert_failed_for_frame_size(gw: RunningGateway, raw: RawClient, started: float, *, reauthentication: bool) -> None:
    """The exchange failed on a frame over 512 KiB: audited, closed after the failure delay, unanswered."""
    assert closes(raw, timeout=5)
    assert time.monotonic() - started >= DELAY_MS / 1000 * 0.9
    raw.close()
    assert auth_events(gw)[-1]["result"] == {
        "success": False, "reauthentication": reauthentication,
        "reason": "Failing SASL authentication due to invalid receive size: "
                  f"frame of {PRE_AUTH_LIMIT + 1} bytes exceeds the maximum of {PRE_AUTH_LIMIT}"}


# -- 1. frames before a bad one, in the same read, are served and answered first ------------------


def test_requests_read_with_an_oversized_frame_are_answered_in_order_before_the_warned_close(
    runtime_factory: Callable[..., RunningGateway], caplog: pytest.LogCaptureFixture,
) -> None:
    gw = gateway(runtime_factory)
    caplog.set_level(logging.DEBUG, logger="kgov.gateway")
    raw = logged_in(gw)
    conn_id = connection_id(gw, raw)
    # A Metadata the upstream answers, an ApiVersions the gateway answers, then a size over the limit.
    raw.sock.sendall(framed(raw, 3, 12, metadata(None)) + framed(raw, 18, 3, api_versions())
                     + size_prefix(DEFAULT_LIMIT + 1))
    assert raw.receive(3, 12).brokers
    assert raw.receive(18, 3).error_code == 0
    assert closes(raw, timeout=5)
    raw.close()
    # Kafka's Selector: WARN "Unexpected error from ...; closing connection" with the
    # InvalidReceiveException (not an authentication failure: no audit event).
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING and "Invalid receive" in r.getMessage()]
    assert warning.getMessage() == (f"Unexpected error from {conn_id}; closing connection: "
                                    f"Invalid receive (size = {DEFAULT_LIMIT + 1} larger than {DEFAULT_LIMIT})")


def test_requests_read_with_an_oversized_frame_before_the_login_are_answered_then_the_login_fails(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    gw = gateway(runtime_factory)
    raw = RawClient(gw.bootstrap)
    started = time.monotonic()
    raw.sock.sendall(framed(raw, 18, 3, api_versions())
                     + framed(raw, 17, 1, SPECS[17].request[1](mechanism="SCRAM-SHA-512"))
                     + size_prefix(PRE_AUTH_LIMIT + 1))
    assert raw.receive(18, 3).error_code == 0
    assert raw.receive(17, 1).error_code == 0
    assert_failed_for_frame_size(gw, raw, started, reauthentication=False)


# -- 2. the limit applies per frame, as the exchange leaves it ------------------------------------


def test_a_frame_read_with_the_final_sasl_authenticate_has_the_limit_of_an_authenticated_connection(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    gw = gateway(runtime_factory)
    raw = RawClient(gw.bootstrap)
    assert raw.call(17, 1, SPECS[17].request[1](mechanism="SCRAM-SHA-512")).error_code == 0
    client = ScramClient(MECHANISMS["SCRAM-SHA-512"], "alice", PASSWORD)
    auth = SPECS[36].request[1]
    first = raw.call(36, 1, auth(auth_bytes=client.first_message()))
    assert first.error_code == 0
    # The SaslAuthenticate that completes the login and, in the same write, a request over 512 KiB
    # (allowed once authenticated, as on a broker).
    final_frame = framed(raw, 36, 1, auth(auth_bytes=client.final_message(bytes(first.auth_bytes))))
    big_frame = framed(raw, 18, 3, api_versions("a" * (PRE_AUTH_LIMIT + 1000)))
    assert len(big_frame) - 4 > PRE_AUTH_LIMIT
    raw.sock.sendall(final_frame + big_frame)
    final = raw.receive(36, 1)
    assert final.error_code == 0
    client.verify_server_final(bytes(final.auth_bytes))
    answer = raw.receive(18, 3)
    assert answer.error_code == 0 and answer.api_keys
    assert raw.call(3, 12, metadata([])).brokers  # the connection goes on
    raw.close()
    assert auth_events(gw)[-1]["result"]["success"] is True


def test_a_frame_read_with_a_reauthentication_handshake_is_held_to_the_exchange_limit(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    gw = gateway(runtime_factory)
    raw = logged_in(gw)
    started = time.monotonic()
    raw.sock.sendall(framed(raw, 17, 1, SPECS[17].request[1](mechanism="SCRAM-SHA-512"))
                     + size_prefix(PRE_AUTH_LIMIT + 1))
    assert raw.receive(17, 1).error_code == 0  # the re-authentication begins
    assert_failed_for_frame_size(gw, raw, started, reauthentication=True)
    assert auth_events(gw)[-1]["authenticationInfo"]["principal"] == "User:alice"


def test_memory_before_authentication_stays_within_the_scratch_buffer_and_one_exchange_frame(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    from gateway.framing import SCRATCH_BYTES

    gw = gateway(runtime_factory)
    raw = RawClient(gw.bootstrap)
    port = raw.sock.getsockname()[1]
    # A refused mechanism pauses reading for the failure delay; the client keeps writing requests
    # (4 MiB of ApiVersions) that the gateway must not take in meanwhile.
    flood = framed(raw, 18, 3, api_versions()) * (4 * 1024 * 1024 // len(framed(raw, 18, 3, api_versions())))
    raw.sock.sendall(framed(raw, 17, 1, SPECS[17].request[1](mechanism="GSSAPI")))
    raw.sock.settimeout(DELAY_MS / 1000 * 3)
    writer = threading.Thread(target=lambda: _send_quietly(raw, flood), daemon=True)
    writer.start()
    held: list[int] = []
    deadline = time.monotonic() + DELAY_MS / 1000 * 0.8
    while time.monotonic() < deadline:
        held += [c.reader.held_bytes for c in list(gw.gateway._connections) if c.peer[1] == port]
        time.sleep(0.01)
    assert held and max(held) <= SCRATCH_BYTES + PRE_AUTH_LIMIT
    assert ends(raw, timeout=5)  # the delayed answer (33), then the close
    raw.close()
    writer.join(timeout=5)


def _send_quietly(raw: RawClient, data: bytes) -> None:
    with contextlib.suppress(OSError):  # the gateway closed the connection: the rest is moot
        raw.sock.sendall(data)


# -- 3. a request Kafka's parser refuses: Kafka's ERROR lines -------------------------------------


def test_create_acls_naming_unknown_logs_kafkas_errors_after_answering_the_requests_before_it(
    runtime_factory: Callable[..., RunningGateway], caplog: pytest.LogCaptureFixture,
) -> None:
    gw = gateway(runtime_factory)
    grant_admin(gw)
    caplog.set_level(logging.DEBUG, logger="kgov.gateway")
    raw = logged_in(gw)
    conn_id = connection_id(gw, raw)
    raw.sock.sendall(framed(raw, 3, 12, metadata(None))
                     + framed(raw, 30, 3, SPECS[30].request[3](creations=[_creation(operation=0)])))
    assert raw.receive(3, 12).brokers  # the upstream's answer to the request before it still comes
    assert closes(raw, timeout=5)
    raw.close()
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    exception = ("org.apache.kafka.common.errors.InvalidRequestException: Error getting request for apiKey: "
                 f"CREATE_ACLS, apiVersion: 3, connectionId: {conn_id}, listenerName: ListenerName(EXTERNAL), "
                 "principal: User:alice; caused by java.lang.IllegalArgumentException: "
                 "CreatableAcls contain unknown elements")
    assert errors == [f"Closing socket for {conn_id} because of error: {exception}",
                      f"Exception while processing request from {conn_id}: {exception}"]
    # The request's own text (principals, hosts, resource names) stays out of the log.
    assert not re.search("User:carol|unknown-acl", caplog.text)


# -- 4. a fault serving one request closes that connection only -----------------------------------


def test_a_fault_serving_a_request_read_while_paused_closes_its_connection_with_an_error_line(
    authz_factory: Callable[..., Any], gateway_factory: Callable[..., RunningGateway],
    caplog: pytest.LogCaptureFixture,
) -> None:
    from gateway.proxy import MAX_IN_FLIGHT, Services

    def broken(ctx: Any, version: int, request: Any) -> Any:
        raise RuntimeError("store said: password=hunter2")

    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    gw = gateway_factory(Services(authz.service, local_handlers={29: broken}))
    caplog.set_level(logging.DEBUG, logger="kgov.gateway")
    other = RawClient(gw.bootstrap)
    raw = RawClient(gw.bootstrap)
    conn_id = connection_id(gw, raw)
    # More requests than may be in flight: reading pauses, and the broken one is served from the
    # loop once the upstream has answered enough of them.
    batch = b"".join(framed(raw, 3, 12, metadata([])) for _ in range(MAX_IN_FLIGHT + 10))
    raw.sock.sendall(batch + framed(raw, 29, 3, SPECS[29].request[3](
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
        host_filter=None, operation=1, permission_type=1)))
    for _ in range(MAX_IN_FLIGHT + 10):
        assert raw.receive(3, 12).brokers
    assert closes(raw, timeout=5)
    raw.close()
    assert f"Closing socket for {conn_id} because of error: RuntimeError" in caplog.text
    assert "hunter2" not in caplog.text
    assert other.call(3, 12, metadata([])).brokers  # another client goes on
    other.close()
