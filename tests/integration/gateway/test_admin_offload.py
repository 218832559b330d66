"""Security admin requests off the event loop (`ClientConnection._serve_admin_request`): real sockets,
the production gateway (SQLite) in front of Tansu.

A client pipelining admin requests between Metadata requests gets every answer in order, and a client
sending CreateDelegationToken (two PBKDF2s and a SQLite write each) in bulk no longer holds the other
clients of the gateway."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from audit.model import AuditEvent
from audit.sinks import AuditWriteError
from authz.model import Principal
from gateway.admin_apis import AclApis
from gateway.codec import SPECS, decode_response
from gateway.framing import SCRATCH_BYTES
from gateway.proxy import Services
from gateway.quota_model import REQUEST_PERCENTAGE
from tests.integration.gateway.conftest import (
    AuthzFixture,
    RawClient,
    RunningGateway,
    metadata_round_trips,
    recv_exactly,
    wait_until,
)
from tests.integration.gateway.test_frame_memory import LIMIT
from tests.integration.gateway.test_frame_reading import framed
from tests.integration.gateway.test_sasl import scram_login
from tests.integration.gateway.test_sasl_offload import AUTH, GatedPlain, plain_handshake, plain_token

pytestmark = [pytest.mark.broker]

ADMIN = Principal("User", "admin")
ADMIN_PW = "admin-password-0123"
ALICE_PW = "alice-password-0123"
CREATE_TOKEN = SPECS[38].request[3]
CREATE_ACLS = SPECS[30].request[3]
DESCRIBE_ACLS = SPECS[29].request[3]


def metadata() -> Any:
    return SPECS[3].request[12](topics=[], allow_auto_topic_creation=False)


def new_token() -> Any:
    return CREATE_TOKEN(owner_principal_type=None, owner_principal_name=None, max_lifetime_ms=-1, renewers=[])


def acl_creation(topic: str, resource_type: int = 2) -> Any:
    return CREATE_ACLS(creations=[CREATE_ACLS.AclCreation(
        resource_type=resource_type, resource_name=topic, resource_pattern_type=3, principal="User:bob", host="*",
        operation=3, permission_type=3)])  # TOPIC, LITERAL, READ, ALLOW


def answer(raw: RawClient, api_key: int, version: int) -> tuple[int, Any]:
    """The next answer's correlation id and message."""
    frame = recv_exactly(raw.sock, int.from_bytes(recv_exactly(raw.sock, 4, "closed"), "big"), "closed")
    return int.from_bytes(frame[:4], "big", signed=True), decode_response(SPECS[api_key], version, frame)


@pytest.fixture
def gw(runtime_factory: Callable[..., RunningGateway]) -> RunningGateway:
    gw = runtime_factory(sasl={"failed_authentication_delay_ms": 0,
                               "delegation_token_secret_key": "admin-offload-token-secret"})
    creds = gw.runtime.credentials
    creds.set_scram_credential("admin", "SCRAM-SHA-512", ADMIN_PW, actor=ADMIN)
    creds.set_scram_credential("alice", "SCRAM-SHA-512", ALICE_PW, actor=ADMIN)
    return gw


def login(gw: RunningGateway, user: str, password: str) -> RawClient:
    raw = RawClient(gw.bootstrap)
    assert scram_login(raw, "SCRAM-SHA-512", user, password).error_code == 0
    return raw


def test_admin_requests_pipelined_between_metadata_requests_are_answered_in_order(gw: RunningGateway) -> None:
    admin = login(gw, "admin", ADMIN_PW)
    # Sent in one go: each admin request runs on a worker thread while the Metadata requests around it
    # go to Tansu, and the answers still come back in request order.
    sent = [
        (3, 12, metadata()), (30, 3, acl_creation("offload-topic")), (3, 12, metadata()),
        (29, 3, DESCRIBE_ACLS(resource_type_filter=2, resource_name_filter="offload-topic", pattern_type_filter=3,
                              principal_filter=None, host_filter=None, operation=1, permission_type=1)),
        (38, 3, new_token()), (3, 12, metadata()), (38, 3, new_token()),
    ]
    ids = [admin.send(key, version, request) for key, version, request in sent]
    answers = [answer(admin, key, version) for key, version, _ in sent]
    admin.close()

    assert [cid for cid, _ in answers] == ids
    messages = [m for _, m in answers]
    assert [m.throttle_time_ms for m in (messages[0], messages[2], messages[5])] == [0, 0, 0]
    assert [r.error_code for r in messages[1].results] == [0]
    assert messages[3].error_code == 0
    assert [(r.resource_name, [(a.principal, a.operation) for a in r.acls]) for r in messages[3].resources] == [
        ("offload-topic", [("User:bob", 3)])]
    tokens = [messages[4], messages[6]]
    assert [t.error_code for t in tokens] == [0, 0]
    assert tokens[0].token_id != tokens[1].token_id and all(len(t.hmac) > 0 for t in tokens)
    # The request log has one event per request, in the same order.
    wait_until(lambda: len([e for e in gw.memory.events if str(e.type) == "io.kgov.request"]) >= len(sent))
    logged = [e.data for e in gw.memory.events if str(e.type) == "io.kgov.request"]
    assert [(d["requestHeader"]["requestApiKey"], d["requestHeader"]["correlationId"]) for d in logged][-len(sent):] == [
        (key, cid) for (key, _, _), cid in zip(sent, ids, strict=True)]


def test_an_invalid_admin_request_still_closes_after_the_earlier_answers(
    gw: RunningGateway, caplog: pytest.LogCaptureFixture,
) -> None:
    admin = login(gw, "admin", ADMIN_PW)
    caplog.set_level(logging.ERROR, logger="kgov.gateway")
    first = admin.send(3, 12, metadata())
    admin.send(30, 3, acl_creation("never-created", resource_type=0))  # UNKNOWN: Kafka's parser refuses it
    admin.send(3, 12, metadata())
    cid, message = answer(admin, 3, 12)
    assert cid == first and message.throttle_time_ms == 0
    assert admin.closed_by_peer()  # neither the CreateAcls nor the Metadata after it is answered
    admin.close()
    assert any("CreatableAcls contain unknown elements" in r.getMessage() for r in caplog.records)
    again = login(gw, "admin", ADMIN_PW)  # and nothing was created
    described = again.call(29, 3, DESCRIBE_ACLS(
        resource_type_filter=1, resource_name_filter="never-created", pattern_type_filter=1, principal_filter=None,
        host_filter=None, operation=1, permission_type=1))  # ANY of each
    again.close()
    assert (described.error_code, described.resources) == (0, [])


def test_other_clients_metadata_stays_fast_while_one_client_floods_create_delegation_token(
    gw: RunningGateway,
) -> None:
    alice = login(gw, "alice", ALICE_PW)
    # What one CreateDelegationToken costs the gateway now (two PBKDF2s, a SQLite write with its fsync, a
    # snapshot reload), measured over a few pipelined ones (one at a time would add the round trips).
    started = time.perf_counter()
    for _ in range(5):
        alice.send(38, 3, new_token())
    assert [alice.receive(38, 3).error_code for _ in range(5)] == [0] * 5
    one_create_s = (time.perf_counter() - started) / 5
    # Enough of them for about 2 s of work: what the old gateway ran on its event loop in one go (every
    # pipelined request of a read served back to back), holding every other client for as long.
    flood = max(20, min(600, math.ceil(2.0 / one_create_s)))
    other = login(gw, "admin", ADMIN_PW)

    with metadata_round_trips(other) as latencies:  # (sent at, seconds to the answer)
        time.sleep(0.2)
        flood_started = time.monotonic()
        for _ in range(flood):
            alice.send(38, 3, new_token())
        created = [alice.receive(38, 3) for _ in range(flood)]
        flood_ended = time.monotonic()
        time.sleep(0.1)
    alice.close()
    other.close()

    assert [c.error_code for c in created] == [0] * flood
    assert len({c.token_id for c in created}) == flood  # every one was really created
    during = [lat for sent, lat in latencies if flood_started <= sent <= flood_ended]
    assert flood_ended - flood_started >= 0.6, (flood, one_create_s)
    # On the event loop the creations held the other client for their whole sum (~2 s); the bound leaves a
    # loaded machine's pauses room below it.
    assert during and max(during) < 0.5, (flood, one_create_s, flood_ended - flood_started, sorted(during)[-5:])
    assert len(during) >= 5
    print(f"{flood} CreateDelegationToken in {flood_ended - flood_started:.2f} s; the other client's Metadata: "
          f"{len(during)} round trips, max {max(during) * 1000:.1f} ms")


def test_an_admin_handlers_time_on_its_thread_counts_toward_the_request_quota(gw: RunningGateway) -> None:
    admin = login(gw, "admin", ADMIN_PW)
    alter = SPECS[49].request[1]
    entry = alter.EntryData
    # 0.1 % of a thread over the padded 10 s window: 10 ms of handler time, so the second or third
    # CreateDelegationToken (two PBKDF2s and a write each) is over it and alice is muted for up to one
    # 1 s window. Counting only the loop's part (decoding, handing over: well under 1 ms each) it never is.
    quota = alter(entries=[entry(entity=[entry.EntityData(entity_type="user", entity_name="alice")],
                                 ops=[entry.OpData(key=REQUEST_PERCENTAGE, value=0.1, remove=False)])],
                  validate_only=False)
    assert [e.error_code for e in admin.call(49, 1, quota).entries] == [0]
    alice = login(gw, "alice", ALICE_PW)
    started = time.monotonic()
    for _ in range(4):
        assert alice.call(38, 3, new_token()).error_code == 0
    muted_s = time.monotonic() - started
    # The admin client (no quota) meanwhile is not held.
    started = time.monotonic()
    for _ in range(4):
        assert admin.call(38, 3, new_token()).error_code == 0
    free_s = time.monotonic() - started
    alice.close()
    admin.close()
    assert muted_s >= 0.8, (muted_s, free_s)
    assert free_s < 0.5, (muted_s, free_s)


def test_a_large_admin_request_keeps_its_frame_memory_until_its_handler_is_done(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
) -> None:
    # A CreateAcls handler that waits for the test (the one fault injection of this file): while it runs
    # on its thread, the request's decoded fields still point into its frame, so the frame stays counted
    # in the gateway's frame memory, and the connection reads nothing more.
    gated, gate, entered = gated_create_acls()
    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    gw = gateway_factory(Services(authz.service, local_handlers={30: gated}), max_request_bytes=LIMIT,
                         queued_max_request_bytes=LIMIT)
    pool = gw.gateway.frame_memory
    raw = RawClient(gw.bootstrap)
    try:
        frame = large_create_acls(raw)
        after = framed(raw, 3, 12, metadata())
        raw.sock.sendall(frame + after)
        assert entered.wait(30)
        (conn,) = gw.gateway._connections
        time.sleep(0.1)
        assert pool.used == len(frame) - 4 and "admin-request" in conn.paused
        gate.set()
        assert [r.error_code for r in raw.receive(30, 3).results] == [0] * 1_500
        assert raw.receive(3, 12).throttle_time_ms == 0  # read and answered only after the admin request
        wait_until(lambda: pool.used == 0)
    finally:
        gate.set()
        raw.close()


def gated_create_acls() -> tuple[Callable[..., Any], threading.Event, threading.Event]:
    """A CreateAcls handler that waits for the test: (handler, gate, entered)."""
    gate, entered = threading.Event(), threading.Event()
    response = SPECS[30].response
    result = response.fields["results"].data_class

    def gated(ctx: Any, version: int, request: Any) -> Any:
        entered.set()
        assert gate.wait(30)
        return response(results=[result(error_code=0, error_message=None) for _ in request.creations])

    return gated, gate, entered


def large_create_acls(raw: RawClient) -> bytes:
    """A framed CreateAcls of 1,500 creations: larger than the reader's scratch buffer, so it takes pool
    memory, and smaller than LIMIT."""
    creations = CREATE_ACLS(creations=[CREATE_ACLS.AclCreation(
        resource_type=2, resource_name=f"t-{n:05d}-".ljust(240, "x"), resource_pattern_type=3,
        principal="User:bob", host="*", operation=3, permission_type=3) for n in range(1_500)])
    frame = framed(raw, 30, 3, creations)
    assert SCRATCH_BYTES < len(frame) - 4 < LIMIT
    return frame


def test_a_connection_closed_while_its_admin_handler_runs_keeps_the_frame_counted_until_the_handler_is_done(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
) -> None:
    # The gateway closes the connection (here: its upstream connection is lost) while a large CreateAcls
    # is still on its thread. The handler still reads the request's fields, which point into the frame:
    # the frame's bytes stay counted in the frame memory until it is done, or clients closing during
    # their admin requests would hold frames beyond `queued_max_request_bytes`.
    gated, gate, entered = gated_create_acls()
    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    gw = gateway_factory(Services(authz.service, local_handlers={30: gated}), max_request_bytes=LIMIT,
                         queued_max_request_bytes=LIMIT)
    pool = gw.gateway.frame_memory
    raw = RawClient(gw.bootstrap)
    try:
        frame = large_create_acls(raw)
        wait_until(lambda: len(gw.gateway._connections) == 1)  # accepted on the loop thread
        (conn,) = gw.gateway._connections
        wait_until(lambda: conn.upstream is not None and conn.upstream.transport is not None)
        raw.sock.sendall(frame)
        assert entered.wait(30)
        gw.loop.call_soon_threadsafe(lambda: conn.upstream.transport.close())  # the upstream is lost
        wait_until(lambda: conn.closed)
        time.sleep(0.1)
        assert pool.used == len(frame) - 4  # the handler still holds the frame
        gate.set()
        wait_until(lambda: pool.used == 0)  # and gives it back once done, once
        time.sleep(0.1)
        assert pool.used == 0
        assert raw.closed_by_peer()  # unanswered
    finally:
        gate.set()
        raw.close()


def test_a_connection_whose_admin_handler_runs_is_not_idle(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
) -> None:
    # The idle timeout closes a connection with nothing in flight; an admin request on its thread (its
    # answer not yet due, the client not read meanwhile) is in flight like a forwarded request.
    gated, gate, entered = gated_create_acls()
    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    gw = gateway_factory(Services(authz.service, local_handlers={30: gated}), idle_timeout_s=0.3)
    raw = RawClient(gw.bootstrap)
    try:
        cid = raw.send(30, 3, acl_creation("idle-topic"))
        assert entered.wait(30)
        (conn,) = gw.gateway._connections
        time.sleep(0.8)  # more than twice the idle timeout
        assert not conn.closed, conn.close_reason
        gate.set()
        got, message = answer(raw, 30, 3)
        assert (got, [r.error_code for r in message.results]) == (cid, [0])
    finally:
        gate.set()
        raw.close()


def test_an_admin_request_whose_connection_closed_before_its_turn_is_not_run(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
) -> None:
    # Both admin threads are busy; a third connection's CreateAcls waits for one, and the gateway closes
    # that connection meanwhile (its upstream connection is lost). Nobody will read its answer and its
    # client cannot learn whether it ran: it is dropped, not run later for nobody (a client made to
    # reconnect and resend would otherwise pile up work, each request run once per attempt).
    gated, gate, _ = gated_create_acls()
    runs: list[str] = []

    def counted(ctx: Any, version: int, request: Any) -> Any:
        runs.append(request.creations[0].resource_name)
        return gated(ctx, version, request)

    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    gw = gateway_factory(Services(authz.service, local_handlers={30: counted}))
    pool = gw.gateway.admin_requests
    clients = [RawClient(gw.bootstrap) for _ in range(3)]
    try:
        wait_until(lambda: len(gw.gateway._connections) == 3 and all(
            c.upstream is not None and c.upstream.transport is not None for c in gw.gateway._connections))
        for n, raw in enumerate(clients[:2]):
            raw.send(30, 3, acl_creation(f"busy-{n}"))
        wait_until(lambda: len(runs) == 2)
        before = set(gw.gateway._connections)
        clients[2].send(30, 3, acl_creation("dropped"))
        wait_until(lambda: pool.waiting == 1)
        (late,) = [c for c in before if "admin-request" in c.paused and c.peer[1] == clients[2].sock.getsockname()[1]]
        gw.loop.call_soon_threadsafe(lambda: late.upstream.transport.close())  # the upstream is lost
        wait_until(lambda: late.closed)
        gate.set()
        for raw in clients[:2]:
            assert [r.error_code for r in raw.receive(30, 3).results] == [0]
        wait_until(lambda: pool.pending == 0)
        assert sorted(runs) == ["busy-0", "busy-1"]
        assert clients[2].closed_by_peer()
    finally:
        gate.set()
        for raw in clients:
            raw.close()


class UnwritableRequestLog:
    """A request log whose every write fails (a full disk): the audit trail is unavailable."""

    def write(self, event: AuditEvent) -> None:
        raise AuditWriteError("cannot write audit record to requests.jsonl: No space left on device")


def test_an_admin_answer_whose_request_log_cannot_be_written_closes_the_connection(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The request log is written before an answer is sent (once a client has seen an answer, its event
    # exists). When it cannot be, the answer is not sent and the connection is closed, as for any fault
    # serving a request; the connection must not stay paused for ever, unanswered and never idle.
    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    gw = gateway_factory(Services(authz.service, audit=UnwritableRequestLog(),
                                  local_handlers={30: AclApis(authz.service).create}))
    caplog.set_level(logging.ERROR, logger="kgov.gateway")
    raw = RawClient(gw.bootstrap)
    try:
        raw.send(30, 3, acl_creation("unlogged-topic"))
        assert raw.closed_by_peer()  # unanswered, closed
        assert any("because of error: AuditWriteError" in r.getMessage() for r in caplog.records)
        wait_until(lambda: not gw.gateway._connections)
    finally:
        raw.close()


def test_close_waits_for_the_running_admin_request_and_sasl_step_and_logs_the_handlers_failure(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # As Kafka's KafkaRequestHandlerPool.shutdown waits for its handler threads, the gateway's close waits
    # for the work on its threads (then the runtime closes the stores they write): here a CreateAcls whose
    # handler fails once released, and a login's SASL step.
    caplog.set_level(logging.INFO, logger="kgov.gateway")
    admin_gate, admin_entered = threading.Event(), threading.Event()
    step_gate = threading.Event()
    finished: list[str] = []

    def failing_create(ctx: Any, version: int, request: Any) -> Any:
        admin_entered.set()
        assert admin_gate.wait(30)
        # The close waits on the loop, not blocking it: work that needs the loop still gets it (a blocked
        # loop would time this out, and the failure logged would be a TimeoutError).
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), gw.loop).result(5)
        finished.append("admin request")
        raise RuntimeError("the store was closed under it: secret-detail")

    class NotedPlain(GatedPlain):
        def step(self, received: bytes) -> Any:
            outcome = super().step(received)
            if received.split(b"\x00")[1].startswith(b"slow"):
                finished.append("SASL step")
            return outcome

    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    gw = gateway_factory(
        Services(authz.service, local_handlers={30: failing_create}), security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms=("PLAIN",), mechanism_factory=lambda name, address, *, reauthenticating=None: NotedPlain(
            step_gate),
    )
    admin, login = RawClient(gw.bootstrap), RawClient(gw.bootstrap)
    try:
        for raw in (admin, login):
            plain_handshake(raw)
        assert admin.call(36, 1, AUTH(auth_bytes=plain_token("admin", "pw"))).error_code == 0
        admin.send(30, 3, acl_creation("closing-topic"))
        assert admin_entered.wait(30)
        login.send(36, 1, AUTH(auth_bytes=plain_token("slow-login", "pw")))
        wait_until(lambda: gw.gateway.sasl_steps.pending == 1)
        conn_ids = sorted(c.connection_id for c in gw.gateway._connections)

        async def close() -> None:
            await gw.gateway.close()
            finished.append("closed")

        closing = asyncio.run_coroutine_threadsafe(close(), gw.loop)
        # Until the close says it waits (or, not waiting, has returned): then the work is let finish.
        wait_until(lambda: closing.done() or any(r.getMessage().startswith("shutting down: waiting")
                                                 for r in caplog.records))
        admin_gate.set()
        step_gate.set()
        closing.result(30)
        assert sorted(finished[:-1]) == ["SASL step", "admin request"] and finished[-1] == "closed"
        messages = [r.getMessage() for r in caplog.records]
        assert "shutting down: waiting up to 10.0 s for 1 admin request(s) and 1 SASL step(s) still running" in messages
        # The handler's failure is logged (its type only: a message may quote request data), not lost.
        failures = [m for m in messages if "failed while the gateway shut down" in m]
        assert len(failures) == 1 and failures[0].startswith("admin request CREATE_ACLS v3 of ")
        assert failures[0].endswith(": RuntimeError") and failures[0].split(" of ")[1].split(" failed")[0] in conn_ids
        assert not any("secret-detail" in m for m in messages)
        assert admin.closed_by_peer() and login.closed_by_peer()  # closed, unanswered
    finally:
        admin_gate.set()
        step_gate.set()
        admin.close()
        login.close()


def test_close_abandons_what_still_runs_after_its_bound_and_says_so(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kgov.gateway")
    gated, gate, entered = gated_create_acls()
    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    gw = gateway_factory(Services(authz.service, local_handlers={30: gated}))
    raw = RawClient(gw.bootstrap)
    try:
        raw.send(30, 3, acl_creation("stuck-topic"))
        assert entered.wait(30)
        (conn,) = gw.gateway._connections
        started = time.monotonic()
        gw.call(gw.gateway.close(work_wait_s=0.3))  # returns although the handler still runs
        waited = time.monotonic() - started
        assert 0.3 * 0.9 <= waited < 10, waited
        assert not gate.is_set()
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warnings == [f"shutting down with admin request CREATE_ACLS v3 of {conn.connection_id} still running "
                            "after 0.3 s: abandoned, its outcome unknown"]
    finally:
        gate.set()
        raw.close()
