"""The gateway-wide bound on large request frames (`[gateway] queued_max_request_bytes`, Kafka's
queued.max.request.bytes): real sockets, the gateway in front of Tansu. Several connections send
frames larger than the scratch buffer, slowly, into a pool that holds one at a time: the pool never
exceeds its bound, a connection that cannot get memory is paused (not closed) and served once memory
returns, and a connection that dies mid-frame gives its bytes back."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gateway.codec import SPECS, decode_response
from gateway.framing import SCRATCH_BYTES
from gateway.proxy import Services
from tests.integration.gateway.conftest import AuthzFixture, RawClient, RunningGateway, upstream_of
from tests.integration.gateway.test_frame_reading import framed
from tests.integration.gateway.test_sasl_reauth import metadata

pytestmark = [pytest.mark.broker]

LIMIT = 1024 * 1024  # max_request_bytes, and the pool's capacity: one large frame fits at a time
TOPICS = 2_600  # names of 240 characters: a Metadata request of about 640 KiB


def big_metadata(raw: RawClient, tag: str) -> tuple[bytes, list[str]]:
    names = [f"{tag}-{n:05d}-".ljust(240, "x") for n in range(TOPICS)]
    frame = framed(raw, 3, 12, metadata(names))
    assert SCRATCH_BYTES < len(frame) - 4 < LIMIT
    return frame, names


def send_slowly(raw: RawClient, data: bytes, *, chunk: int = 64 * 1024, pause_s: float = 0.01) -> None:
    for start in range(0, len(data), chunk):
        raw.sock.sendall(data[start:start + chunk])
        time.sleep(pause_s)


def receive_metadata(raw: RawClient) -> Any:
    raw.sock.settimeout(30)
    size = int.from_bytes(raw._exactly(4), "big")
    return decode_response(SPECS[3], 12, raw._exactly(size))


def receive_metadata_after(raw: RawClient, rest: bytes) -> Any:
    sender = threading.Thread(target=raw.sock.sendall, args=(rest,))
    sender.start()
    try:
        return receive_metadata(raw)
    finally:
        sender.join(30)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


@pytest.fixture
def gateway(authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway]) -> RunningGateway:
    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    return gateway_factory(Services(authz.service), max_request_bytes=LIMIT, queued_max_request_bytes=LIMIT)


def test_large_frames_from_several_connections_share_the_bound_and_all_are_served(
    gateway: RunningGateway, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="kgov.gateway")
    pool = gateway.gateway.frame_memory
    clients = [RawClient(gateway.bootstrap) for _ in range(4)]
    frames = [big_metadata(raw, f"t{n}") for n, raw in enumerate(clients)]
    most: list[int] = [0]
    sampling = threading.Event()

    def sample() -> None:  # what the pool holds, seen from outside, while the frames arrive
        while not sampling.is_set():
            most[0] = max(most[0], pool.used)
            time.sleep(0.001)

    sampler = threading.Thread(target=sample)
    senders = [threading.Thread(target=send_slowly, args=(raw, frame))
               for raw, (frame, _) in zip(clients, frames, strict=True)]
    sampler.start()
    try:
        for t in senders:
            t.start()
        answers = [receive_metadata(raw) for raw in clients]
        for t in senders:
            t.join(30)
    finally:
        sampling.set()
        sampler.join()
        for raw in clients:
            raw.close()
    for answer, (_, names) in zip(answers, frames, strict=True):
        assert [t.name for t in answer.topics] == names  # every request was served whole
        assert {t.error_code for t in answer.topics} == {3}  # UNKNOWN_TOPIC_OR_PARTITION, from Tansu
    assert pool.waits >= 1  # some connection had to wait: it was paused, not closed
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # one line per 10 s for the operator, not one per wait
    assert re.fullmatch(r"pausing reads: large request frames hold \d+ of 1048576 bytes "
                        r"\(gateway.queued_max_request_bytes\); [1-3] connections wait for memory", warnings[0])
    assert 0 < most[0] <= pool.peak <= pool.capacity == LIMIT
    wait_for(lambda: pool.used == 0 and pool.waiting == 0, "the pool was not emptied")


def test_a_connection_that_dies_mid_frame_returns_its_memory_to_the_one_waiting(gateway: RunningGateway) -> None:
    pool = gateway.gateway.frame_memory
    dying, waiting, later = (RawClient(gateway.bootstrap) for _ in range(3))
    try:
        frame, _ = big_metadata(dying, "dying")
        dying.sock.sendall(frame[: len(frame) // 2])  # its size is read: the pool holds the whole frame
        wait_for(lambda: pool.used == len(frame) - 4, "the first frame's memory was not reserved")
        frame2, names2 = big_metadata(waiting, "waiting")
        waiting.sock.sendall(frame2[:100_000])
        wait_for(lambda: pool.waiting == 1, "the second connection did not wait for memory")
        assert pool.used == len(frame) - 4  # never both
        dying.close()  # a reset or a FIN, mid-frame
        answer = receive_metadata_after(waiting, frame2[100_000:])
        assert [t.name for t in answer.topics] == names2
        wait_for(lambda: pool.used == 0, "the memory of the dead connection or the served frame was not returned")
        # The connection that waited goes on as usual, and so does everyone else.
        assert waiting.call(3, 12, metadata()).brokers
        assert later.call(3, 12, metadata()).brokers
        assert pool.peak <= pool.capacity
    finally:
        for raw in (dying, waiting, later):
            raw.close()


def test_a_gateway_whose_pool_is_smaller_than_one_request_is_refused(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
) -> None:
    with pytest.raises(ValueError, match="queued_max_request_bytes must be at least max_request_bytes"):
        gateway_factory(Services(authz_factory().service), max_request_bytes=LIMIT, queued_max_request_bytes=LIMIT - 1)


class StallingRelay:
    """A TCP relay in front of Tansu that can stop reading what the gateway sends (`stalled`): an
    upstream that does not keep up. Its sockets take little into the kernel (a small receive buffer), so
    what it does not read piles up in the gateway's upstream transport."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.stalled = threading.Event()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # inherited by accepted sockets
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            up = socket.create_connection(self.upstream, timeout=30)
            self._sockets += [conn, up]
            threading.Thread(target=self._pump, args=(conn, up, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, conn, False), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, stallable: bool) -> None:
        source.settimeout(None)
        while True:
            while stallable and self.stalled.is_set():
                time.sleep(0.005)
            try:
                data = source.recv(64 * 1024)
                if not data:
                    break
                target.sendall(data)
            except OSError:
                break
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.sock.close()
        for sock in self._sockets:
            sock.close()


@pytest.fixture
def relay(kafka_broker: str) -> Iterator[StallingRelay]:
    relay = StallingRelay(upstream_of(kafka_broker))
    yield relay
    relay.close()


def test_a_forwarded_frame_keeps_its_memory_until_the_upstream_has_taken_it(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway], relay: StallingRelay,
) -> None:
    from tests.integration.gateway.test_proxy import _one_record_batch

    limit = 16 * 1024 * 1024
    gw = gateway_factory(Services(authz_factory(allow_everyone_if_no_acl_found=True).service),
                         upstream=upstream_of(relay.address), address_mode="single",
                         max_request_bytes=limit, queued_max_request_bytes=limit)
    pool = gw.gateway.frame_memory
    produce = SPECS[0].request[9]
    topic = produce.TopicProduceData
    request = produce(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[topic(
        name=f"absent-{uuid.uuid4().hex[:8]}",
        partition_data=[topic.PartitionProduceData(index=0, records=_one_record_batch(b"v" * (12 << 20)))])])
    raw = RawClient(gw.bootstrap)
    try:
        assert raw.call(3, 12, metadata()).brokers  # the upstream connection is open (through the relay)
        relay.stalled.set()
        frame = framed(raw, 0, 9, request)
        sender = threading.Thread(target=raw.sock.sendall, args=(frame,))
        sender.start()
        (conn,) = gw.gateway._connections
        wait_for(lambda: bool(conn.awaiting_upstream), "the produce request was not forwarded")
        # Forwarded, but most of it still in the gateway's upstream transport: still counted.
        time.sleep(0.2)
        assert "upstream" in conn.paused and pool.used == len(frame) - 4
        relay.stalled.clear()
        answer = raw.receive(0, 9)
        assert [p.error_code for t in answer.responses for p in t.partition_responses] == [0]  # Tansu took it
        sender.join(30)
        wait_for(lambda: pool.used == 0, "the forwarded frame's memory was not returned")
        assert raw.call(3, 12, metadata()).brokers
    finally:
        relay.stalled.clear()
        raw.close()


class NonReadingClient(RawClient):
    """A client whose socket takes little into the kernel (a small receive buffer) and that reads nothing
    while the test wants it so: the gateway's answers to it pile up in the gateway's transport."""

    def __init__(self, bootstrap: str) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.settimeout(10)
        self.sock.connect(upstream_of(bootstrap))
        self.correlation = 0


def bad_large_metadata(raw: RawClient) -> bytes:
    """A Metadata v12 of about 300 KiB (a large frame: it takes pool memory) whose body stops inside a
    topic name: refused once read, the connection closed after the answers to the requests before it."""
    names = [f"bad-{n:05d}-".ljust(240, "x") for n in range(1_250)]
    whole = framed(raw, 3, 12, metadata(names))[4:]
    body = whole[:-100]
    assert SCRATCH_BYTES < len(body) < LIMIT
    return len(body).to_bytes(4, "big") + body


def refused_while_answers_pile_up(gw: RunningGateway) -> tuple[NonReadingClient, Any, int]:
    """A connection the gateway closes for a bad large request while the answers to two earlier requests
    (about 40 KiB, from Tansu) wait in its transport, the client reading nothing: the close waits for the
    client to take them. Answers (the client, its ClientConnection, the bad frame's size)."""
    raw = NonReadingClient(gw.bootstrap)
    wait_for(lambda: len(gw.gateway._connections) == 1, "the gateway did not take the connection")
    (conn,) = gw.gateway._connections
    # The gateway's side of the socket takes little into the kernel too (a slow network, as it were).
    conn.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    earlier = b"".join(framed(raw, 3, 12, metadata([f"early-{k}-{n:03d}-".ljust(200, "y") for n in range(100)]))
                       for k in range(2))
    bad = bad_large_metadata(raw)
    sender = threading.Thread(target=raw.sock.sendall, args=(earlier + bad,))
    sender.start()
    sender.join(30)
    wait_for(lambda: conn.closed, "the gateway did not close the connection after the bad request")
    return raw, conn, len(bad) - 4


def test_a_connection_closed_for_a_bad_large_request_returns_its_memory_though_its_client_reads_nothing(
    gateway: RunningGateway,
) -> None:
    pool = gateway.gateway.frame_memory
    raw, conn, _ = refused_while_answers_pile_up(gateway)
    try:
        assert conn.transport.get_write_buffer_size() > 0  # the close waits for the client to read
        # The refused frame was served (refused): its bytes are not waited for any more. Held until the
        # client reads, six such connections of one user would stall every large request of the gateway.
        wait_for(lambda: pool.used == 0, "a closing connection kept the memory of its refused frame", timeout=2)
        assert conn in gateway.gateway._connections  # still closing: the memory came back before the close
    finally:
        raw.close()


def test_a_closing_connection_whose_client_reads_nothing_is_cut_after_the_answer_wait(
    gateway: RunningGateway, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gateway import proxy

    monkeypatch.setattr(proxy, "FAILED_AUTH_ANSWER_WAIT_S", 0.5)
    raw, conn, _ = refused_while_answers_pile_up(gateway)
    try:
        assert conn.transport.get_write_buffer_size() > 0  # the close waits for the client to read
        # Kafka closes a connection that makes no progress after connections.max.idle.ms; a close that
        # waited for the client for ever would hold its connection slot (max_connections_per_ip) for ever.
        wait_for(lambda: conn not in gateway.gateway._connections, "the closing connection was never cut", timeout=5)
        assert gateway.gateway.connection_limits.count(conn.client_host) == 0
    finally:
        raw.close()


def test_slow_senders_of_one_address_hold_its_share_not_the_pool(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Five connections of 127.0.0.1 each send the size prefix of a large frame and a little of its
    body, then nothing (a client trickling its requests): together they would hold more than the pool.
    127.0.0.1's share (default: an eighth of the pool, at least max_request_bytes: 1 MiB here) holds
    one of them; the others wait for their own address's memory, and 127.0.0.2's large request is
    served meanwhile."""
    caplog.set_level(logging.WARNING, logger="kgov.gateway")
    gw = gateway_factory(Services(authz_factory(allow_everyone_if_no_acl_found=True).service),
                         max_request_bytes=LIMIT, queued_max_request_bytes=3 * LIMIT)
    pool = gw.gateway.frame_memory
    assert pool.share == LIMIT
    slow = [RawClient(gw.bootstrap, source="127.0.0.1") for _ in range(5)]
    victim = RawClient(gw.bootstrap, source="127.0.0.2")
    try:
        for n, raw in enumerate(slow):
            frame, _ = big_metadata(raw, f"slow{n}")
            raw.sock.sendall(frame[:100_000])
        wait_for(lambda: pool.used + sum(c.memory.wanted for c in gw.gateway._connections) == 5 * (len(frame) - 4),
                 "the slow senders' frames were not all reserved or waiting")
        frame, names = big_metadata(victim, "victim")
        answer = receive_metadata_after(victim, frame)
        assert [t.name for t in answer.topics] == names  # served though 127.0.0.1 trickles five large frames
        assert pool.used_by("127.0.0.1") == len(frame) - 4  # one of its frames: its share holds no second
        assert pool.waiting == 4 and pool.share_waits == 4
        assert victim.call(3, 12, metadata()).brokers
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warnings == [f"pausing reads from 127.0.0.1: its connections hold {len(frame) - 4} of its {LIMIT} bytes "
                            "for large request frames (gateway.queued_max_request_bytes_per_ip); 1 waits for an "
                            "address's share so far"]  # one line per 10 s, at the first wait
    finally:
        for raw in (*slow, victim):
            raw.close()
    wait_for(lambda: pool.used == 0 and pool.waiting == 0, "the slow senders' memory was not returned")


def test_an_ipv6_client_draws_on_the_share_of_its_slash_64(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
) -> None:
    gw = gateway_factory(Services(authz_factory(allow_everyone_if_no_acl_found=True).service), listen_host="::1",
                         max_request_bytes=LIMIT, queued_max_request_bytes=LIMIT)
    pool = gw.gateway.frame_memory
    raw = RawClient(f"::1:{gw.gateway.port}")
    try:
        frame, _ = big_metadata(raw, "v6")
        raw.sock.sendall(frame[:100_000])
        wait_for(lambda: pool.used_by("::/64") == len(frame) - 4, "the frame was not counted to the client's /64")
        (conn,) = gw.gateway._connections
        # Kafka's text of the address for logs, audit and ACLs; its /64 for the shares (the SASL queue's too).
        assert (conn.client_host, conn.client_group) == ("0:0:0:0:0:0:0:1", "::/64")
    finally:
        raw.close()
    wait_for(lambda: pool.used == 0, "the frame's memory was not returned")


def test_a_large_frame_that_does_not_arrive_in_time_closes_its_connection_and_returns_its_memory(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Reading time for a frame of about 640 KiB: 0.3 s plus its size at 1 MiB/s, about 0.9 s. A client
    that sends its prefix and 100 kB, then nothing, is closed once that has passed; one that sends at
    about 6 MB/s (64 KiB every 10 ms) is served."""
    caplog.set_level(logging.INFO, logger="kgov.gateway")
    gw = gateway_factory(Services(authz_factory(allow_everyone_if_no_acl_found=True).service),
                         max_request_bytes=LIMIT, queued_max_request_bytes=LIMIT,
                         large_request_min_bytes_per_s=1024 * 1024, large_request_grace_s=0.3)
    pool = gw.gateway.frame_memory
    stalled, steady = RawClient(gw.bootstrap), RawClient(gw.bootstrap)
    try:
        frame, _ = big_metadata(stalled, "stalled")
        stalled.sock.sendall(frame[:100_000])
        wait_for(lambda: pool.used == len(frame) - 4, "the stalled frame's memory was not reserved")
        assert stalled.closed_by_peer(timeout=10)
        wait_for(lambda: pool.used == 0, "the stalled frame's memory was not returned")
        assert gw.gateway.slow_large_requests_closed == 1
        (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and "was not received" in
                   r.getMessage()]
        assert re.fullmatch(rf"closing \S+ \(User:ANONYMOUS\): a request of {len(frame) - 4} bytes was not received "
                            r"within 0\.9 s of reading, 99996 bytes arrived \(gateway.large_request_min_bytes_per_s\)",
                            line)
        (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert re.fullmatch(r"closing connections whose large requests arrive too slowly: \S+ sent 99996 of "
                            rf"{len(frame) - 4} bytes in 0\.9 s of reading \(gateway.large_request_min_bytes_per_s = "
                            r"1048576\); 1 closed so far", warning)
        frame2, names2 = big_metadata(steady, "steady")
        sender = threading.Thread(target=send_slowly, args=(steady, frame2))
        sender.start()
        answer = receive_metadata(steady)
        sender.join(30)
        assert [t.name for t in answer.topics] == names2
        assert gw.gateway.slow_large_requests_closed == 1
    finally:
        stalled.close()
        steady.close()


def test_the_reading_time_of_a_large_frame_stops_while_the_gateway_does_not_read_the_connection(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
) -> None:
    """Paused by the gateway (here as a quota mute would pause it) for longer than the frame's reading
    time, then read again: the frame is served, its client not closed. The pause begins on the loop as
    soon as the reading time starts, and the rest of the frame is sent meanwhile: no step of the test
    thread races the reading time (a loaded machine could otherwise use it up before the pause or
    after the resume)."""
    gw = gateway_factory(Services(authz_factory(allow_everyone_if_no_acl_found=True).service),
                         max_request_bytes=LIMIT, queued_max_request_bytes=LIMIT,
                         large_request_min_bytes_per_s=1024 * 1024, large_request_grace_s=0.3)
    raw = RawClient(gw.bootstrap)
    sender: threading.Thread | None = None
    try:
        frame, names = big_metadata(raw, "paused")
        raw.sock.sendall(frame[:100_000])
        wait_for(lambda: len(gw.gateway._connections) == 1, "the gateway did not take the connection")
        (conn,) = gw.gateway._connections

        async def pause_once_reading_time_runs() -> float | None:
            while conn._large_frame_timer is None:
                await asyncio.sleep(0.001)  # the timer cannot fire first: its due time is later
            conn.pause("quota")
            return conn._large_frame_left

        left = gw.call(pause_once_reading_time_runs())
        assert conn._large_frame_timer is None and left is not None and 0 < left <= 0.3 + (len(frame) - 4) / (1 << 20)
        sender = threading.Thread(target=raw.sock.sendall, args=(frame[100_000:],))
        sender.start()  # what the kernel's buffers take waits there until the gateway reads again
        time.sleep(1.5)  # the time under test: longer than the whole reading time, all of it paused
        assert not conn.closed

        async def resume() -> None:
            conn.resume("quota")

        gw.call(resume())
        answer = receive_metadata(raw)
        assert [t.name for t in answer.topics] == names
        assert gw.gateway.slow_large_requests_closed == 0 and conn._large_frame_left is None
    finally:
        raw.close()
        if sender is not None:
            sender.join(30)


class SilentUpstream:
    """A listening socket that never accepts: connections to it are established (by the kernel) and
    nothing is ever answered, so a gateway logging in upstream through it waits for its login."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.address = self.sock.getsockname()

    def close(self) -> None:
        self.sock.close()


def test_a_request_waiting_for_the_upstream_connection_keeps_its_memory_and_nothing_more_is_read(
    gateway: RunningGateway,
) -> None:
    pool = gateway.gateway.frame_memory
    silent = SilentUpstream()
    # Connections from now on go to an upstream that never answers the gateway's login (set after the
    # start, whose ApiVersions went to Tansu): every client's upstream connection stays "connecting".
    gateway.gateway.options.upstream = silent.address
    gateway.gateway.options.upstream_sasl = ("PLAIN", "gateway", "secret")
    raw = RawClient(gateway.bootstrap)
    try:
        frame, _ = big_metadata(raw, "early")
        raw.sock.sendall(frame + framed(raw, 3, 12, metadata()))  # a large request, then a small one
        wait_for(lambda: len(gateway.gateway._connections) == 1, "the gateway did not take the connection")
        (conn,) = gateway.gateway._connections
        wait_for(lambda: "upstream-connecting" in conn.paused, "the gateway did not stop reading for the upstream")
        # The large request waits for the upstream, counted in the pool; the small one was not taken in.
        assert conn.pending_bytes == len(frame) and pool.used == len(frame) - 4
        assert len(conn.slots) == 1
    finally:
        raw.close()
        silent.close()
    wait_for(lambda: pool.used == 0, "the waiting request's memory was not returned when its client left")


def test_the_settings_reach_the_gateway(runtime_factory: Callable[..., RunningGateway]) -> None:
    mib = 1024 * 1024
    gw = runtime_factory(gateway={"max_request_bytes": mib, "queued_max_request_bytes": 16 * mib,
                                  "queued_max_request_bytes_per_ip": 3 * mib,
                                  "large_request_min_bytes_per_s": 100_000})
    assert (gw.gateway.frame_memory.capacity, gw.gateway.frame_memory.share) == (16 * mib, 3 * mib)
    assert gw.gateway.options.large_request_min_bytes_per_s == 100_000
    default = runtime_factory(name="default", gateway={"max_request_bytes": mib, "queued_max_request_bytes": 16 * mib})
    assert default.gateway.frame_memory.share == 2 * mib  # an eighth


def test_a_client_that_stops_reading_its_answers_does_not_stop_its_large_frames_clock(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway], kafka_broker: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A raw client pipelines fetches whose answers (megabytes) it never reads, then the prefix and the
    first 100 kB of a large frame, and nothing more. The gateway stops reading it once its answers back up
    (`pause_writing`), but that pause is the client's own doing: the frame's reading time (4 s plus its
    size at 1 MiB/s) runs on, and the connection is closed and its memory returned then, not held until
    the idle timeout. (Kafka's Selector would not have begun that receive before sending the answers.)"""
    from confluent_kafka import Producer

    from tests.integration.gateway.test_proxy import create_topics
    from tests.integration.gateway.test_request_quota_answers import fetch_from_start

    caplog.set_level(logging.INFO, logger="kgov.gateway")
    topic = f"unread-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    direct = Producer({"bootstrap.servers": kafka_broker})
    for _ in range(8):
        direct.produce(topic, b"u" * 500_000, partition=0)
    assert direct.flush(30) == 0
    gw = gateway_factory(Services(authz_factory(allow_everyone_if_no_acl_found=True).service),
                         max_request_bytes=LIMIT, queued_max_request_bytes=LIMIT,
                         large_request_min_bytes_per_s=1024 * 1024, large_request_grace_s=4.0)
    pool = gw.gateway.frame_memory
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window stays small
    sock.connect(upstream_of(gw.bootstrap))
    raw = RawClient.__new__(RawClient)
    raw.sock, raw.correlation = sock, 0
    try:
        fetches = b"".join(framed(raw, 1, 12, fetch_from_start(topic, 8_000_000)) for _ in range(4))
        frame, _ = big_metadata(raw, "unread")
        sock.sendall(fetches + frame[:100_000])  # the fetches, then the large frame's beginning; never read
        wait_for(lambda: len(gw.gateway._connections) == 1, "the gateway did not take the connection")
        (conn,) = gw.gateway._connections
        # well within the frame's reading time (4.6 s), with room for a loaded machine's broker
        wait_for(lambda: "client-backlog" in conn.paused, "the unread answers did not back up", timeout=3.5)
        assert conn.reader.large_frame_size == len(frame) - 4 and pool.used == len(frame) - 4
        assert conn._large_frame_timer is not None  # the clock runs on through the client's own pause
        wait_for(lambda: gw.gateway.slow_large_requests_closed == 1, "the frame's reading time did not run out",
                 timeout=10)
        wait_for(lambda: pool.used == 0, "the frame's memory was not returned")
        assert conn.closed or "closing" in conn.paused
        (line,) = [r.getMessage() for r in caplog.records if "was not received" in r.getMessage()]
        assert line.endswith("99996 bytes arrived, the client not reading its answers "
                             "(gateway.large_request_min_bytes_per_s)"), line
    finally:
        sock.close()
