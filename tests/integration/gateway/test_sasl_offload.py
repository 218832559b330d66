"""Login work off the event loop (`gateway.sasl_steps`): real sockets, the gateway in front of Tansu.

A slow login (a PLAIN verification of a SCRAM-SHA-512 credential at 16,384 iterations, the most the
store accepts) must not stall the other clients of the gateway, and the logins waiting for a worker
thread are bounded."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from audit.sinks import MemorySink
from authz.model import Principal
from gateway.codec import SPECS
from gateway.proxy import Services
from sasl.mechanism import Failure, Step, Success, UnsupportedMechanismError
from sasl.scram import MAX_ITERATIONS
from tests.integration.gateway.conftest import (
    AuthzFixture,
    RawClient,
    RunningGateway,
    metadata_round_trips,
    wait_until,
)
from tests.integration.gateway.test_frame_reading import framed
from tests.integration.gateway.test_sasl import PASSWORD, scram_login

pytestmark = [pytest.mark.broker]

ADMIN = Principal("User", "admin")
AUTH = SPECS[36].request[1]
DELAY_MS = 50


def plain_handshake(raw: RawClient) -> None:
    assert raw.call(17, 1, SPECS[17].request[1](mechanism="PLAIN")).error_code == 0


def plain_token(user: str, password: str) -> bytes:
    return b"\x00" + user.encode() + b"\x00" + password.encode()


def metadata() -> Any:
    return SPECS[3].request[12](topics=[], allow_auto_topic_creation=False)


def one_derivation_s() -> float:
    """What one PLAIN verification of the slow credential costs on this machine now."""
    started = time.perf_counter()
    for _ in range(3):
        hashlib.pbkdf2_hmac("sha512", b"wrong password", b"s" * 24, MAX_ITERATIONS)
    return (time.perf_counter() - started) / 3


def test_other_clients_are_answered_promptly_during_a_storm_of_slow_logins(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    # One worker thread: the storm keeps one core busy and leaves the other to the loop and Tansu. The
    # storm comes from one address: it may hold every waiting place (up to 400 logins here; by default
    # one address holds at most an eighth of them, 64).
    gw = runtime_factory(
        sasl={"failed_authentication_delay_ms": DELAY_MS, "plain_cache_size": 0,
              "max_failed_attempts_per_source": 100_000, "max_failed_attempts_per_address": 100_000},
        gateway={"sasl_workers": 1, "sasl_max_waiting_steps_per_ip": 512},
    )
    creds = gw.runtime.credentials
    creds.set_scram_credential("alice", "SCRAM-SHA-256", PASSWORD, actor=ADMIN)
    creds.set_scram_credential("slow", "SCRAM-SHA-512", "slow-secret", iterations=MAX_ITERATIONS, actor=ADMIN)
    other = RawClient(gw.bootstrap)
    assert scram_login(other, "SCRAM-SHA-256", "alice", PASSWORD).error_code == 0
    # Enough logins for about 2 s of derivations: what the old gateway ran on its event loop, holding every
    # other client for as long (at least 1 s even if the measure below was twice too high).
    storm = max(20, min(400, math.ceil(2.0 / one_derivation_s())))
    clients = [RawClient(gw.bootstrap) for _ in range(storm)]
    for raw in clients:
        plain_handshake(raw)

    with metadata_round_trips(other) as latencies:  # (sent at, seconds to the answer)
        time.sleep(0.2)  # the other client's latency before the storm
        storm_started = time.monotonic()
        for n, raw in enumerate(clients):
            raw.send(36, 1, AUTH(auth_bytes=plain_token("slow", f"wrong-{n}")))
        answers = [raw.receive(36, 1) for raw in clients]
        storm_ended = time.monotonic()
        time.sleep(0.1)
    for raw in clients:
        raw.close()
    other.close()

    assert [a.error_code for a in answers] == [58] * storm  # every slow login was verified and failed
    during = [lat for sent, lat in latencies if storm_started <= sent <= storm_ended]
    # The storm took at least the derivations' time (a real slow credential, not a short cut) ...
    assert storm_ended - storm_started >= 0.6
    assert len(during) >= 5
    # ... while the other client's Metadata round trips (through the gateway to Tansu) stayed short.
    # On the event loop the derivations held every other client for their whole sum (~2 s); the bound
    # leaves a loaded machine's pauses room below it.
    assert max(during) < 0.6, (storm, storm_ended - storm_started, sorted(during)[-5:])
    failures = [e for e in gw.memory.events if str(e.type) == "io.kgov.authentication"
                and e.data["result"]["success"] is False]
    assert len(failures) == storm
    assert {e.data["result"]["reason"] for e in failures} == {"Authentication failed: Invalid username or password"}


class GatedPlain:
    """PLAIN whose step for a user named `slow*` blocks until the test opens the gate: the steps
    waiting for the pool's thread can be counted exactly (the one fault injection of this file)."""

    name = "PLAIN"

    def __init__(self, gate: threading.Event) -> None:
        self._gate = gate

    def step(self, received: bytes) -> Step:
        user = received.split(b"\x00")[1].decode()
        if user.startswith("slow"):
            assert self._gate.wait(30)
        return Success(Principal("User", user))


def test_logins_beyond_the_waiting_bound_are_closed_unanswered_and_reauthentications_wait(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kgov.gateway")
    gate = threading.Event()

    def factory(name: str, client_address: str, *, reauthenticating: Principal | None = None) -> GatedPlain:
        if name != "PLAIN":
            raise UnsupportedMechanismError(name)
        return GatedPlain(gate)

    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    audit = MemorySink()
    gw = gateway_factory(
        Services(authz.service, auth_audit=audit), security_protocol="SASL_PLAINTEXT", sasl_mechanisms=("PLAIN",),
        mechanism_factory=factory, sasl_workers=1, sasl_max_waiting_steps=2, sasl_max_waiting_steps_per_ip=2,
        sasl_failure_delay_s=DELAY_MS / 1000, max_reauth_ms=60_000,
    )
    pool = gw.gateway.sasl_steps
    fast = RawClient(gw.bootstrap)
    admitted = [RawClient(gw.bootstrap) for _ in range(3)]
    refused = [RawClient(gw.bootstrap) for _ in range(2)]
    try:
        plain_handshake(fast)
        assert fast.call(36, 1, AUTH(auth_bytes=plain_token("fast", "pw"))).error_code == 0
        for raw in admitted + refused:
            plain_handshake(raw)
        for n, raw in enumerate(admitted):
            raw.send(36, 1, AUTH(auth_bytes=plain_token(f"slow{n}", "pw")))
        deadline = time.monotonic() + 10
        while pool.pending < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (pool.pending, pool.waiting) == (3, 2)  # one running (held by the gate), two waiting
        for n, raw in enumerate(refused):
            started = time.monotonic()
            raw.send(36, 1, AUTH(auth_bytes=plain_token(f"slow-late{n}", "pw")))
            # Closed without an answer (recv reads the end of the stream, not a response), as a broker
            # that went away: the client reconnects after its backoff. After the failure delay, as any
            # failed login.
            assert raw.closed_by_peer()
            assert time.monotonic() - started >= DELAY_MS / 1000 * 0.9
        assert pool.refused == 2
        # One WARN line for the operator, not one per refusal (those are INFO, as any failed login).
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warnings == ["refusing new SASL logins: 2 steps wait for 1 worker threads "
                            "(gateway.sasl_max_waiting_steps, gateway.sasl_workers); 1 refused so far"]
        infos = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Failed authentication")]
        assert len(infos) == 2 and all(line.endswith(
            "(closed unanswered: the gateway is busy authenticating other clients; the client retries)")
            for line in infos)
        # A re-authentication of an established session waits for the thread instead of being refused.
        plain_handshake(fast)
        fast.send(36, 1, AUTH(auth_bytes=plain_token("fast", "pw")))
        deadline = time.monotonic() + 10
        while pool.pending < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.pending == 4 and pool.refused == 2
        gate.set()
        reauth = fast.receive(36, 1)
        assert reauth.error_code == 0 and reauth.session_lifetime_ms == 60_000
        assert fast.call(3, 12, metadata()).brokers  # the connection goes on
        for raw in admitted:
            assert raw.receive(36, 1).error_code == 0
            assert raw.call(3, 12, metadata()).brokers
    finally:
        gate.set()
        for raw in (fast, *admitted, *refused):
            raw.close()
    events = [e.data for e in audit.events if str(e.type) == "io.kgov.authentication"]
    busy = [e for e in events if not e["result"]["success"]]
    assert len(busy) == 2
    assert all(e["result"]["reason"] == ("too many SASL steps waiting at the gateway (2 waiting for 1 worker "
                                         "threads, gateway.sasl_max_waiting_steps)") for e in busy)
    assert all(e["authenticationInfo"]["principal"] is None for e in busy)
    assert sum(e["result"]["success"] for e in events) == 5  # fast, its re-authentication, slow0-2
    assert [e["result"]["reauthentication"] for e in events if e["result"]["success"]].count(True) == 1


def test_one_address_flooding_slow_logins_does_not_refuse_or_hold_up_another_addresss_login(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """127.0.0.1 opens more slow logins than its share of the waiting places; 127.0.0.2's login is let
    in, and runs after one of the flood's steps, not after all of them."""
    caplog.set_level(logging.INFO, logger="kgov.gateway")
    gate = threading.Event()
    ran: list[str] = []

    class Recorded(GatedPlain):
        def step(self, data: bytes) -> Step:
            outcome = super().step(data)
            ran.append(data.split(b"\x00")[1].decode())
            return outcome

    audit = MemorySink()
    gw = gateway_factory(
        Services(authz_factory(allow_everyone_if_no_acl_found=True).service, auth_audit=audit),
        security_protocol="SASL_PLAINTEXT", sasl_mechanisms=("PLAIN",),
        mechanism_factory=lambda name, address, *, reauthenticating=None: Recorded(gate),
        sasl_workers=1, sasl_max_waiting_steps=8, sasl_max_waiting_steps_per_ip=3,
        sasl_failure_delay_s=DELAY_MS / 1000,
    )
    pool = gw.gateway.sasl_steps
    flood = [RawClient(gw.bootstrap, source="127.0.0.1") for _ in range(6)]
    victim = RawClient(gw.bootstrap, source="127.0.0.2")
    try:
        for raw in (*flood, victim):
            plain_handshake(raw)
        for n, raw in enumerate(flood[:4]):  # one runs (held by the gate), three wait: the address's share
            raw.send(36, 1, AUTH(auth_bytes=plain_token(f"slow-flood{n}", "pw")))
            deadline = time.monotonic() + 10
            while pool.pending < n + 1 and time.monotonic() < deadline:
                time.sleep(0.01)
        assert (pool.pending, pool.waiting, pool.waiting_of("127.0.0.1")) == (4, 3, 3)
        for raw in flood[4:]:  # over the share: closed unanswered, though 5 places are free
            raw.send(36, 1, AUTH(auth_bytes=plain_token("flood-late", "pw")))
            assert raw.closed_by_peer()
        assert (pool.refused, pool.refused_per_source) == (2, 2)
        victim.send(36, 1, AUTH(auth_bytes=plain_token("victim", "pw")))
        while pool.pending < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.waiting_of("127.0.0.2") == 1
        gate.set()
        assert victim.receive(36, 1).error_code == 0
        assert victim.call(3, 12, metadata()).brokers
        for raw in flood[:4]:
            assert raw.receive(36, 1).error_code == 0
    finally:
        gate.set()
        for raw in (*flood, victim):
            raw.close()
    # Round robin between the addresses: the victim's step ran second, not fifth.
    assert ran == ["slow-flood0", "slow-flood1", "victim", "slow-flood2", "slow-flood3"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["refusing new SASL logins from 127.0.0.1: 3 of its steps wait "
                        "(gateway.sasl_max_waiting_steps_per_ip); 1 refused for their address so far"]
    refusals = [e.data for e in audit.events if not e.data["result"]["success"]]
    assert [(e["result"]["reason"], e["requestMetadata"]["clientAddress"]) for e in refusals] == [
        ("too many SASL steps from 127.0.0.1 waiting at the gateway (3 waiting, "
         "gateway.sasl_max_waiting_steps_per_ip)", "127.0.0.1")] * 2


def test_a_request_sent_with_the_login_is_served_only_after_the_steps_outcome(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
) -> None:
    gate = threading.Event()
    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    gw = gateway_factory(
        Services(authz.service), security_protocol="SASL_PLAINTEXT", sasl_mechanisms=("PLAIN",),
        mechanism_factory=lambda name, address, *, reauthenticating=None: GatedPlain(gate), sasl_workers=1,
    )
    raw = RawClient(gw.bootstrap)
    try:
        plain_handshake(raw)
        raw.sock.sendall(framed(raw, 36, 1, AUTH(auth_bytes=plain_token("slow", "pw")))
                         + framed(raw, 3, 12, metadata()))
        deadline = time.monotonic() + 10
        while gw.gateway.sasl_steps.pending < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        raw.sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            raw.sock.recv(1)  # neither the login's answer nor the Metadata's while the step runs
        gate.set()
        raw.sock.settimeout(10)
        assert raw.receive(36, 1).error_code == 0
        assert raw.receive(3, 12).brokers  # served after the login, as the authenticated principal
    finally:
        gate.set()
        raw.close()


def test_a_failure_from_a_worker_thread_still_waits_the_fixed_failure_delay(
    runtime_factory: Callable[..., RunningGateway],
) -> None:
    gw = runtime_factory(sasl={"failed_authentication_delay_ms": 300, "plain_cache_size": 0})
    gw.runtime.credentials.set_scram_credential("slow", "SCRAM-SHA-512", "slow-secret", iterations=MAX_ITERATIONS,
                                                actor=ADMIN)
    raw = RawClient(gw.bootstrap)
    try:
        plain_handshake(raw)
        started = time.monotonic()
        answer = raw.call(36, 1, AUTH(auth_bytes=plain_token("slow", "wrong")))
        elapsed = time.monotonic() - started
        assert answer.error_code == 58
        assert elapsed >= 0.3 * 0.95  # the delay, counted from the step's outcome
        assert raw.closed_by_peer()
    finally:
        raw.close()


def test_a_client_gone_while_its_step_runs_leaves_nothing_behind(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
    caplog: pytest.LogCaptureFixture,
) -> None:
    audit, gate = MemorySink(), threading.Event()
    caplog.set_level(logging.INFO, logger="kgov.gateway")
    gw = gateway_factory(
        Services(authz_factory(allow_everyone_if_no_acl_found=True).service, auth_audit=audit),
        security_protocol="SASL_PLAINTEXT", sasl_mechanisms=("PLAIN",), sasl_workers=1, sasl_max_waiting_steps=0,
        mechanism_factory=lambda name, address, *, reauthenticating=None: GatedPlain(gate),
    )
    pool = gw.gateway.sasl_steps
    gone = RawClient(gw.bootstrap)
    later: RawClient | None = None
    try:
        plain_handshake(gone)
        gone.send(36, 1, AUTH(auth_bytes=plain_token("slow-gone", "pw")))
        deadline = time.monotonic() + 10
        while pool.pending < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.pending == 1
        (conn,) = gw.gateway._connections
        gone.close()
        # Its reading is paused while the step runs, so asyncio learns of the close only after it: the
        # gateway asks the socket when the step succeeds, and drops the login.
        async def fin_arrived() -> bool:
            return bool(conn._peer_gone())

        wait_until(lambda: bool(gw.call(fin_arrived())))  # the FIN reached the gateway's socket
        gate.set()
        deadline = time.monotonic() + 10
        while (pool.pending or gw.gateway._connections) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.pending == 0  # the slot is free again (the bound is one step: a leak would refuse the next)
        assert not gw.gateway._connections  # and the departed connection is gone
        assert conn.close_reason == "client closed during its SASL step"
        assert not conn.upstream_started and conn.upstream is None  # no upstream connection was opened
        later = RawClient(gw.bootstrap)
        plain_handshake(later)
        assert later.call(36, 1, AUTH(auth_bytes=plain_token("later", "pw"))).error_code == 0
        assert later.call(3, 12, metadata()).brokers
    finally:
        gate.set()
        gone.close()
        if later is not None:
            later.close()
    assert pool.refused == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    successes = [e.data["authenticationInfo"]["principal"] for e in audit.events
                 if str(e.type) == "io.kgov.authentication" and e.data["result"]["success"]]
    # The departed client's step succeeded (its credentials were good) but it never had the answer:
    # not audited as a success. Only the INFO line records it.
    assert successes == ["User:later"]
    assert [r.getMessage() for r in caplog.records if "during its SASL step" in r.getMessage()] == [
        f"client {conn.connection_id} closed its connection during its SASL step; its login as User:slow-gone "
        "is dropped"]


def test_a_connection_whose_sasl_step_runs_is_not_idle(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
) -> None:
    # The idle timeout closes a connection with nothing in flight; a SASL step on its thread (its answer not
    # yet due, the client not read meanwhile) is in flight, as an admin request on its thread is.
    gate = threading.Event()
    gw = gateway_factory(
        Services(authz_factory(allow_everyone_if_no_acl_found=True).service), security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms=("PLAIN",), mechanism_factory=lambda name, address, *, reauthenticating=None: GatedPlain(gate),
        sasl_workers=1,
    )
    raw = RawClient(gw.bootstrap)
    try:
        plain_handshake(raw)
        raw.send(36, 1, AUTH(auth_bytes=plain_token("slow", "pw")))
        wait_until(lambda: gw.gateway.sasl_steps.pending == 1)
        (conn,) = gw.gateway._connections

        async def idle_check(*, step_ran_past_the_timeout: bool) -> bool:
            """The idle check, run now (as its timer would), after the step ran past the idle timeout."""
            if step_ran_past_the_timeout:
                conn.last_activity -= 2 * conn.options.idle_timeout_s
            conn._check_idle()
            return conn.closed

        assert not gw.call(idle_check(step_ran_past_the_timeout=True)), conn.close_reason
        gate.set()
        assert raw.receive(36, 1).error_code == 0
        # The idle time counts from the step's answer, not from the request before it.
        assert not gw.call(idle_check(step_ran_past_the_timeout=False)), conn.close_reason
        assert raw.call(3, 12, metadata()).brokers
    finally:
        gate.set()
        raw.close()


def test_a_step_still_waiting_for_a_thread_when_the_gateway_closes_never_runs(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
) -> None:
    # The close has closed its connection: run, its mechanism would look up (and audit) a login nobody waits
    # for, and the close would wait for it. Here the running step ends while the close awaits the gateway's
    # tasks (one of them takes a moment to end when cancelled), which must not hand the thread to the next.
    gate = threading.Event()
    ran: list[str] = []

    class NotedPlain(GatedPlain):
        def step(self, received: bytes) -> Step:
            ran.append(received.split(b"\x00")[1].decode())
            return super().step(received)

    gw = gateway_factory(
        Services(authz_factory(allow_everyone_if_no_acl_found=True).service), security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms=("PLAIN",), mechanism_factory=lambda name, address, *, reauthenticating=None: NotedPlain(gate),
        sasl_workers=1,
    )
    pool = gw.gateway.sasl_steps
    running, waiting = RawClient(gw.bootstrap), RawClient(gw.bootstrap)
    try:
        for raw in (running, waiting):
            plain_handshake(raw)
        running.send(36, 1, AUTH(auth_bytes=plain_token("slow-running", "pw")))
        wait_until(lambda: ran == ["slow-running"])
        waiting.send(36, 1, AUTH(auth_bytes=plain_token("slow-waiting", "pw")))
        wait_until(lambda: pool.waiting == 1)

        async def lingering() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                gate.set()  # the running step ends now, while the close awaits this task
                while pool._running:  # until its end (and whatever it started) is handed back to the loop
                    await asyncio.sleep(0.005)
                raise

        async def spawn() -> None:
            gw.gateway.spawn(lingering())

        gw.call(spawn())
        gw.call(gw.gateway.close())
        assert ran == ["slow-running"]
        assert running.closed_by_peer() and waiting.closed_by_peer()
    finally:
        gate.set()
        running.close()
        waiting.close()


class SlowFailingPlain:
    """PLAIN whose every step fails after `seconds` of work: a check whose cost depends on the name (a
    PBKDF2 of one hash or another, or none) stands in for it, fixed and large enough to measure."""

    name = "PLAIN"

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds

    def step(self, received: bytes) -> Step:
        time.sleep(self._seconds)
        return Failure("Authentication failed: Invalid username or password")


def test_a_failed_login_is_answered_the_failure_delay_after_its_request_not_after_its_check(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
) -> None:
    """Counting the delay from the end of the check added the check's time to the answer's, so how long
    the answer took told which credential (or none) the name has: a SCRAM-SHA-256 user's PBKDF2 is
    cheaper than the SHA-512 stand-in an unknown name gets (the HTTP side answers the same way)."""
    delay_s, check_s = 1.0, 0.8

    def factory(name: str, client_address: str, *, reauthenticating: Principal | None = None) -> SlowFailingPlain:
        if name != "PLAIN":
            raise UnsupportedMechanismError(name)
        return SlowFailingPlain(check_s)

    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    gw = gateway_factory(Services(authz.service), security_protocol="SASL_PLAINTEXT", sasl_mechanisms=("PLAIN",),
                         mechanism_factory=factory, sasl_failure_delay_s=delay_s)
    raw = RawClient(gw.bootstrap)
    try:
        plain_handshake(raw)
        started = time.monotonic()
        answer = raw.call(36, 1, AUTH(auth_bytes=plain_token("bob", "wrong")))
        took = time.monotonic() - started
    finally:
        raw.close()
    assert answer.error_code == 58
    # Counted from the check's end it took delay + check (1.8 s); from the request, the delay: the bound
    # leaves a loaded machine half the check's time.
    assert delay_s * 0.95 <= took < delay_s + check_s / 2, took
