"""The gateway's network layer: asyncio Protocols, one upstream connection per client connection,
opened once the client is authenticated (at connect on PLAINTEXT/SSL, after its SASL login otherwise).

Hot path (ARCHITECTURE "data flow of one produce request"): `buffer_updated` -> `FrameReader` ->
hand-parsed request header -> SASL state (`SaslSession.admit`: before authentication only ApiVersions,
SaslHandshake, then SaslAuthenticate; see gateway/README.md) -> quota check -> `request_authz.plan_request` -> forward the original bytes (a consumer
Fetch with its KIP-227 session fields made sessionless, `gateway.fetch_session`; or the trimmed request) upstream -> response patches (denied parts, address rewriting, throttle time) ->
client, in request order -> one request-log event.

Ordering: Kafka clients expect responses in request order on a connection, so every request gets a
`Slot` in a FIFO; locally answered requests complete their slot at once, forwarded ones when the
upstream answers (upstream answers in order too), and slots are flushed from the head only.

SASL: a SaslAuthenticate's mechanism step (a key derivation, a signature check) runs on the gateway's
worker threads (`gateway.sasl_steps`), never on the event loop; its connection is paused until the
outcome is back (`ClientConnection._authenticate`). The security admin APIs the gateway answers itself
(`gateway.admin_apis`: database writes, key derivations) run the same way on threads of their own
(`ClientConnection._serve_admin_request`).

Backpressure: client reads pause while the upstream transport is above its write high-water mark,
while too many requests are in flight, while the upstream is still connecting and a request waits for
it (one at most: its large frame keeps its pool memory), and while the client is muted by a quota;
upstream reads pause while the client cannot take more.

Upstream sessions (KIP-368): when the upstream grants a session lifetime, the gateway re-authenticates
the upstream connection at 85-95% of it: client reads pause, in-flight requests complete, a new
SaslHandshake + SaslAuthenticate runs on the connection, then reads resume
(`ClientConnection._reauthenticate_upstream`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import random
import select
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from audit.request_log import authentication_event, request_event, request_log_entry, request_log_line
from audit.sinks import AuditSink, LineSink
from authz.host_address import java_host_address, peer_host_address
from authz.model import (
    Action,
    Authorizer,
    AuthorizerNotReadyError,
    Operation,
    Principal,
    RequestContext,
    ResourceType,
)
from gateway.addressing import AddressPlan, BrokerMap
from gateway.codec import (
    API_VERSIONS_KEY,
    SPECS,
    ApiSpec,
    CodecError,
    RequestHeader,
    api_name,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    parse_request_header,
    produce_acks,
    request_with_correlation_id,
    response_with_correlation_id,
)
from gateway.connection_limits import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_IP,
    ConnectionLimits,
    share_key,
)
from gateway.fetch_session import sessionless_frame, sessionless_response
from gateway.frame_memory import (
    DEFAULT_LARGE_REQUEST_MIN_BYTES_PER_S,
    DEFAULT_QUEUED_MAX_REQUEST_BYTES,
    LARGE_FRAME_GRACE_S,
    FrameMemoryPool,
    default_share,
    large_frame_deadline_s,
)
from gateway.framing import Frame, FrameError, FrameReader
from gateway.invalid_request import (
    ApiNotEnabledError,
    InvalidRequestError,
    parse_failure_log_lines,
    unreadable_request_log_lines,
)
from gateway.request_authz import ANONYMOUS, PLANNERS, RequestAuthorizer, error_response, plan_request
from gateway.sasl_session import (
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    Admission,
    AuthStep,
    MechanismFactory,
    SaslSession,
    StepOutcome,
)
from gateway.sasl_steps import DEFAULT_MAX_WAITING, Refusal, SaslStepPool
from gateway.ssl_principal_mapping import NoMatchingRule, SslPrincipalMapper, parse_rules
from gateway.topic_ids import (
    BY_ID_SINCE,
    BY_ID_VERSION,
    LISTING_WAIT_S,
    METADATA_WITH_IDS_VERSION,
    ListingGate,
    Miss,
    TopicIds,
    ids_supported,
    refresh_request,
    refresh_version,
    request_ids,
)
from gateway.upstream_ids import UpstreamIds, wire_id
from gateway.upstream_login import (
    Authenticated,
    OAuthBearerExchange,
    OAuthBearerLogin,
    reauthentication_delay_s,
)
from gateway.upstream_token import UpstreamLoginError as UpstreamLoginError  # re-exported
from gateway.x500_name import CertificateNameError, certificate_subject

if TYPE_CHECKING:
    from sasl.scram import SaltedPasswordCache
from gateway.upstream_token import printable

log = logging.getLogger("kgov.gateway")

UNSUPPORTED_VERSION = 35
MAX_IN_FLIGHT = 256
SASL_FAILURE_DELAY_S = 0.2  # Kroxylicious' fixedAuthDelay; a floor against timing side channels
# Kafka's sasl.server.max.receive.size: the largest frame a client may send before it authenticated.
MAX_UNAUTHENTICATED_BYTES = 524_288
UPSTREAM_VERSIONS_TTL_S = 300.0
# After a failed authentication, how long the close waits for answers to requests sent before the
# failing one (still with the upstream) before giving up on them.
FAILED_AUTH_ANSWER_WAIT_S = 30.0
UPSTREAM_LOST = "upstream connection lost"
# Pauses during which what the client sent still waits on the upstream side (the upstream transport
# above its write high-water mark, or frames held while the upstream connects): a large frame served
# meanwhile keeps its frame memory until they end, so the bound covers bytes not yet sent upstream.
_UPSTREAM_BACKLOG: frozenset[str] = frozenset({"upstream", "upstream-connecting"})
# Pauses during which the frame just served is still in use: the upstream side's (above), or an admin
# request's handler reading it on a worker thread (`ClientConnection._serve_admin_request`).
_FRAME_IN_USE: frozenset[str] = _UPSTREAM_BACKLOG | {"admin-request"}
# Pauses during which a request of the connection runs on a worker thread (a SASL step, an admin request):
# in flight, so the connection is not idle (`ClientConnection._check_idle`).
_ON_A_THREAD: frozenset[str] = frozenset({"sasl-step", "admin-request"})
# Pauses the client causes itself: it does not read its answers (`ClientConnection.pause_writing`). A large
# frame's reading time keeps running through them (`ClientConnection._track_large_frame`): otherwise a client
# that sends a large frame's prefix, then stops reading, would hold its frame memory until the idle timeout.
_CLIENTS_OWN: frozenset[str] = frozenset({"client-backlog"})
# Threads for the security admin APIs answered by the gateway (`gateway.admin_apis`). Their work is
# mostly database writes, which one database serialises anyway (SQLite's write lock, the stores'
# component locks), plus a delegation token's two PBKDF2s: two threads keep one client's loop of admin
# requests from holding every other, without letting admin work take every CPU from the event loop.
ADMIN_WORKERS = 2
# How long `Gateway.close` waits for the admin requests and SASL steps still running on their threads
# (Kafka's KafkaRequestHandlerPool.shutdown waits for its handlers without a bound).
SHUTDOWN_WAIT_S = 10.0
# At most one WARN line of each kind this often while logins, connections or reads are refused for load
# (`Gateway._warn_due`); each refusal has its own INFO line or audit event.
REPEATED_WARN_INTERVAL_S = 10.0
# A TLS client's time for its handshake (asyncio's default: 60 s), counted against the connection limits.
TLS_HANDSHAKE_TIMEOUT_S = 10.0
# poll() events that say the peer closed its side (a FIN or a reset), whatever is still unread.
_PEER_GONE = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)


# An API the gateway answers itself (security admin APIs, quotas): returns the response message. Runs on
# one of the gateway's admin threads (`ClientConnection._serve_admin_request`), so what it touches must be
# safe to use from a thread other than the event loop's.
LocalHandler = Callable[[RequestContext, int, Any], Any]


@dataclass
class GatewayOptions:
    listen_host: str
    listen_port: int
    upstream: tuple[str, int]
    advertised_host: str | None = None
    address_mode: str = "per-node"
    node_port_base: int | None = None
    listener_name: str = "EXTERNAL"
    security_protocol: str = "PLAINTEXT"  # PLAINTEXT, SASL_PLAINTEXT, SSL, SASL_SSL
    ssl_context: ssl.SSLContext | None = None
    # Kafka's ssl.principal.mapping.rules, for client certificates on an SSL listener (`_name_by_certificate`).
    ssl_principal_mapper: SslPrincipalMapper = field(default_factory=lambda: parse_rules(None))
    # How long a TLS client has to complete its handshake (asyncio's default is 60 s); the connection
    # counts against the connection limits meanwhile (`ClientConnection._tls_handshake`).
    tls_handshake_timeout_s: float = TLS_HANDSHAKE_TIMEOUT_S
    upstream_ssl: ssl.SSLContext | None = None
    sasl_mechanisms: tuple[str, ...] = ()
    mechanism_factory: MechanismFactory | None = None
    max_reauth_ms: int = 0
    max_request_bytes: int = 100 * 1024 * 1024
    # Kafka's queued.max.request.bytes: large request frames being read or served, all connections
    # together (`gateway.frame_memory`); at least `max_request_bytes`.
    queued_max_request_bytes: int = DEFAULT_QUEUED_MAX_REQUEST_BYTES
    # One client address group's share of those (`gateway.connection_limits.share_key`; None: an eighth,
    # at least max_request_bytes, `frame_memory.default_share`).
    queued_max_request_bytes_per_ip: int | None = None
    # A large frame's body must arrive within `large_request_grace_s` of reading time plus its size at
    # this rate once its memory is granted (`frame_memory.large_frame_deadline_s`), or the connection closes.
    large_request_min_bytes_per_s: int = DEFAULT_LARGE_REQUEST_MIN_BYTES_PER_S
    large_request_grace_s: float = LARGE_FRAME_GRACE_S
    idle_timeout_s: float = 600.0
    # Kafka's max.connections / max.connections.per.ip (/.overrides): `gateway.connection_limits`.
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_ip: int = DEFAULT_MAX_CONNECTIONS_PER_IP
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    sasl_failure_delay_s: float = SASL_FAILURE_DELAY_S
    # Worker threads for SaslAuthenticate steps (0: one per CPU) and how many steps may wait for one
    # before new logins are refused (`gateway.sasl_steps`).
    sasl_workers: int = 0
    sasl_max_waiting_steps: int = DEFAULT_MAX_WAITING
    # One client address's share of those (None: an eighth, `sasl_steps.default_max_waiting_per_source`).
    sasl_max_waiting_steps_per_ip: int | None = None
    # False when the mechanisms audit their own failures (sasl.service.CredentialService does).
    audit_auth_failures: bool = True
    # The gateway's own login to the upstream: (mechanism, username, password), or OAUTHBEARER.
    upstream_sasl: tuple[str, str, str] | None = field(default=None, repr=False)
    upstream_oauth: OAuthBearerLogin | None = field(default=None, repr=False)
    source: str = "kgov-gateway"


@dataclass
class Services:
    authorizer: Authorizer
    audit: AuditSink | None = None  # request-log events (None: no request log)
    auth_audit: AuditSink | None = None  # authentication events (default: `audit`)
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    local_handlers: dict[int, LocalHandler] = field(default_factory=dict)
    quotas: Any = None  # gateway.quotas.QuotaEnforcer
    request_lines: LineSink | None = None  # Kafka's `Completed request:` text lines
    rand: Callable[[], float] = field(default=random.random)  # the jitter of upstream re-authentication


@dataclass(slots=True)
class Slot:
    header: RequestHeader
    spec: ApiSpec | None
    started: float
    request_bytes: int
    patches: list[Callable[[Any], None]] = field(default_factory=list)
    response: tuple[Frame | memoryview, ...] | None = None  # the frame's parts, written with writelines
    forwarded: bool = False
    throttle_ms: int = 0
    records_bytes: int = 0
    raw: bool = False  # a raw SASL v0 token: no Kafka header
    sessionless: bool = False  # a consumer Fetch v7+: its answer's session id is forced to 0
    # A request of the gateway's own on the client's upstream connection: its answer goes here, not
    # to the client (the topic id refresh, `ClientConnection._hold_for_topic_ids`).
    on_answer: Callable[[Frame], None] | None = None
    upstream_seq: int = -1  # its number on the upstream connection (`gateway.upstream_ids`), once sent


def _has_throttle_time(spec: ApiSpec, version: int) -> bool:
    """Whether `spec`'s answer at `version` has a `throttle_time_ms` field (ApiVersions from v1)."""
    fld = spec.response.fields.get("throttle_time_ms")
    return fld is not None and bool(fld.for_version_q(version))


def _sasl_enabled(protocol: str) -> bool:
    return protocol.startswith("SASL_")


class Gateway:
    def __init__(self, options: GatewayOptions, services: Services) -> None:
        self.options = options
        self.services = services
        plan = AddressPlan(
            options.advertised_host or options.listen_host,
            options.listen_port,
            "single" if options.address_mode == "single" else "per-node",
            options.node_port_base,
        )
        self.brokers = BrokerMap(plan, self._open_node_listener)
        self.upstream_versions: dict[int, tuple[int, int]] | None = None
        self._versions_at = 0.0
        self.topic_ids = TopicIds()  # what the upstream's topic ids name (Fetch v13+)
        # The gateway's own SCRAM credential upstream: its salted passwords, so that PBKDF2 runs once, not
        # on the event loop for every client connection's upstream login (`upstream_salted_cache`).
        self._upstream_scram: tuple[str, str, SaltedPasswordCache] | None = None
        # The gateway's listings of the upstream's topics: one at a time, one per second at most.
        self.topic_listing: ListingGate[ClientConnection] = ListingGate()
        self._servers: list[asyncio.base_events.Server] = []
        self._node_ports: dict[int, int] = {}
        self._node_sockets: list[socket.socket] = []  # the per-node listeners' sockets (`_open_node_listener`)
        self._connections: set[ClientConnection] = set()
        # Open client connections per IP and in total, counted from accept to close (`connection_made`).
        self.connection_limits = ConnectionLimits(options.max_connections, options.max_connections_per_ip,
                                                  options.max_connections_per_ip_overrides)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.connection_counter = 0
        # KIP-368 re-authentications of upstream connections (for tests and metrics)
        self.upstream_reauthentications = 0
        self.upstream_reauthentication_failures = 0
        # Client connections closed because their KIP-368 session expired un-renewed (Kafka's
        # expired-connections-killed-count).
        self.expired_connections_killed = 0
        # SaslAuthenticate steps run here, off the event loop (`ClientConnection._authenticate`).
        self.sasl_steps: SaslStepPool[StepOutcome] = SaslStepPool(options.sasl_workers,
                                                                  options.sasl_max_waiting_steps,
                                                                  options.sasl_max_waiting_steps_per_ip)
        # Security admin requests run here, off the event loop (`ClientConnection._serve_admin_request`).
        self.admin_requests: SaslStepPool[tuple[Any, bytes]] = SaslStepPool(ADMIN_WORKERS,
                                                                 thread_name_prefix="kgov-admin-request")
        # Large request frames' buffers, every client connection together (`ClientConnection.memory`).
        if options.queued_max_request_bytes < options.max_request_bytes:
            raise ValueError("queued_max_request_bytes must be at least max_request_bytes: a frame of the largest "
                             "size would never get its memory")
        share = options.queued_max_request_bytes_per_ip
        if share is None:
            share = default_share(options.queued_max_request_bytes, options.max_request_bytes)
        elif not options.max_request_bytes <= share <= options.queued_max_request_bytes:
            raise ValueError("queued_max_request_bytes_per_ip must be between max_request_bytes and "
                             "queued_max_request_bytes")
        # Per client address group (`share_key`), at most `share` (a departure from Kafka's MemoryPool,
        # which has no per-client share: gateway/frame_memory.py).
        self.frame_memory = FrameMemoryPool(options.queued_max_request_bytes, share)
        # Connections closed because a large frame did not arrive in time (`ClientConnection._large_frame_overdue`).
        self.slow_large_requests_closed = 0
        self._warned_at: dict[str, float] = {}  # the last WARN line of each kind (`_warn_due`)

    def _warn_due(self, kind: str) -> bool:
        """Whether a WARN line of `kind` may be written now: one per `REPEATED_WARN_INTERVAL_S` each."""
        now = time.monotonic()
        last = self._warned_at.get(kind)
        if last is not None and now - last < REPEATED_WARN_INTERVAL_S:
            return False
        self._warned_at[kind] = now
        return True

    def warn_logins_refused(self, source: str | None = None) -> None:
        """One WARN line per `REPEATED_WARN_INTERVAL_S` while logins are refused for want of a
        SASL worker thread (each refusal also has its INFO line and audit event): the operator's sign
        that `sasl_workers` or `sasl_max_waiting_steps` is too small for the load, or of a login flood;
        `source`: refused for that address's share (`sasl_max_waiting_steps_per_ip`), with its own line."""
        if not self._warn_due("logins" if source is None else "logins-per-ip"):
            return
        pool = self.sasl_steps
        if source is not None:
            log.warning("refusing new SASL logins from %s: %d of its steps wait (gateway.sasl_max_waiting_steps_per_ip); "
                        "%d refused for their address so far", source, pool.waiting_of(source),
                        pool.refused_per_source)
            return
        log.warning("refusing new SASL logins: %d steps wait for %d worker threads (gateway.sasl_max_waiting_steps, "
                    "gateway.sasl_workers); %d refused so far", pool.waiting, pool.workers,
                    pool.refused - pool.refused_per_source)

    def warn_frame_memory_full(self, source: str | None = None) -> None:
        """One WARN line per `REPEATED_WARN_INTERVAL_S` while connections wait for frame memory:
        their reading is paused, so the operator must hear that `queued_max_request_bytes` is too small
        for the load, or that clients hold large frames (Kafka shows it in its MemoryPool metrics).
        `source`: the connection waits for its address's share (`queued_max_request_bytes_per_ip`), with
        a line of its own."""
        pool = self.frame_memory
        if source is not None:
            if self._warn_due("frame-memory-per-ip"):
                log.warning("pausing reads from %s: its connections hold %d of its %d bytes for large request frames "
                            "(gateway.queued_max_request_bytes_per_ip); %d waits for an address's share so far",
                            source, pool.used_by(source), pool.share, pool.share_waits)
            return
        if not self._warn_due("frame-memory"):
            return
        log.warning("pausing reads: large request frames hold %d of %d bytes (gateway.queued_max_request_bytes); "
                    "%d connections wait for memory", pool.used, pool.capacity, pool.waiting)

    def warn_large_frame_too_slow(self, connection_id: str, size: int, filled: int, seconds: float) -> None:
        """One WARN line per `REPEATED_WARN_INTERVAL_S` while connections are closed because a large
        frame did not arrive in time (each close has its INFO line): a client trickling large frames
        to hold pool memory, or a setting too strict for the clients' links."""
        if not self._warn_due("slow-large-requests"):
            return
        log.warning("closing connections whose large requests arrive too slowly: %s sent %d of %d bytes in %.1f s "
                    "of reading (gateway.large_request_min_bytes_per_s = %d); %d closed so far", connection_id,
                    filled, size, seconds, self.options.large_request_min_bytes_per_s,
                    self.slow_large_requests_closed)

    def warn_full(self) -> None:
        """One WARN line per `REPEATED_WARN_INTERVAL_S` while connections are refused because
        the gateway holds `max_connections` (each refusal has its INFO line): every client is affected,
        so the operator must hear of it."""
        if not self._warn_due("connections"):
            return
        limits = self.connection_limits
        log.warning("refusing new connections: %d are open (gateway.max_connections = %d); %d refused so far",
                    limits.total, limits.max_connections, limits.refused)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Runs `coro` on the gateway's loop, keeping a reference until it finishes."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def port(self) -> int:
        return self.options.listen_port

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        server = await self._loop.create_server(
            # TLS, when on, is started by the connection itself (`ClientConnection._tls_handshake`), so
            # that a connection counts against the limits from its accept, handshake included.
            lambda: ClientConnection(self, None), self.options.listen_host, self.options.listen_port,
            reuse_address=True,
        )
        if self.options.listen_port == 0:
            self.options.listen_port = server.sockets[0].getsockname()[1]
            self.brokers.plan = AddressPlan(
                self.brokers.plan.advertised_host, self.options.listen_port, self.brokers.plan.mode,
                self.options.node_port_base,
            )
        self._servers.append(server)
        # The upstream OAuth token is fetched and kept fresh by its source's background refresher,
        # which `gateway.runtime.GatewayRuntime` starts before this and stops after `close`.
        with contextlib.suppress(OSError):
            await self.refresh_upstream_versions()

    @property
    def logs_in_upstream(self) -> bool:
        return self.options.upstream_sasl is not None or self.options.upstream_oauth is not None

    async def close(self, work_wait_s: float = SHUTDOWN_WAIT_S) -> None:
        """Stops listening, closes every connection, then waits (at most `work_wait_s`) for the admin
        requests and SASL steps still running on their threads before the caller closes the stores
        they use (`_wait_for_running_work`)."""
        for s in self._servers:
            s.close()
        for c in list(self._connections):
            c.abort("gateway shutting down")
        # Before anything is awaited: a step ending meanwhile would hand its thread to a waiting step of a
        # connection closed just now (a login nobody waits for, audited by its mechanism).
        self.sasl_steps.close()
        self.admin_requests.close()
        tasks = [t for t in self._tasks if not t.done()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._wait_for_running_work(work_wait_s)
        for sock in self._node_sockets:  # a node listener whose serving task was cancelled before it ran
            sock.close()
        for s in self._servers:
            with contextlib.suppress(Exception):
                await s.wait_closed()
        self._servers.clear()
        await asyncio.sleep(0)  # let aborted transports run connection_lost before the loop stops

    async def _wait_for_running_work(self, timeout_s: float) -> None:
        """Waits for the admin requests and SASL steps that were running on their threads when the pools
        closed, as Kafka's `KafkaRequestHandlerPool.shutdown` awaits its handler threads: a write under
        way finishes before the runtime closes its store, and a handler's failure is logged, not lost.
        Their connections are closed already, so nothing is answered. Awaited on the loop, which keeps
        running meanwhile (a step that waits for the loop cannot deadlock the close); bounded by
        `timeout_s` in all (Kafka waits without a bound), after which what still runs is named in a
        WARN line and abandoned."""
        pools = (("admin request", self.admin_requests), ("SASL step", self.sasl_steps))
        counts = {kind: pool.still_running() for kind, pool in pools}
        if not any(counts.values()):
            return
        log.info("shutting down: waiting up to %.1f s for %d admin request(s) and %d SASL step(s) still running",
                 timeout_s, counts["admin request"], counts["SASL step"])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        for kind, pool in pools:
            steps = await pool.wait_closed(max(deadline - loop.time(), 0.0))
            for label, exc in steps.failed:
                if not isinstance(exc, InvalidRequestError):  # a refusal of the client's request, not a fault
                    # The type only, as in `_serve_frames`: a message may quote request data.
                    log.error("%s %s failed while the gateway shut down: %s", kind, label, type(exc).__name__)
            for label in steps.abandoned:
                log.warning("shutting down with %s %s still running after %.1f s: abandoned, its outcome unknown",
                            kind, label, timeout_s)

    def _open_node_listener(self, node_id: int, upstream: tuple[str, int]) -> None:
        """Opens the per-node listening socket synchronously (so the advertised port accepts at once)."""
        if node_id in self._node_ports or self._loop is None:
            return
        port = self.brokers.plan.advertised_port(node_id)
        sock = socket.socket(socket.AF_INET6 if ":" in self.options.listen_host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.options.listen_host, port))
            sock.listen(128)
        except OSError as exc:
            sock.close()
            log.error("cannot listen for broker %d on port %d: %s", node_id, port, exc)
            return
        sock.setblocking(False)
        self._node_ports[node_id] = port
        # `close` closes it even when it cancels `serve` before that ran (it owns the socket from here).
        self._node_sockets.append(sock)

        async def serve() -> None:
            assert self._loop is not None
            # Registered before it serves: `create_server` starts serving and then awaits, and a `close`
            # cancelling it there left a server listening that `close` never saw.
            server = await self._loop.create_server(
                lambda: ClientConnection(self, node_id), sock=sock,  # TLS: `ClientConnection._tls_handshake`
                start_serving=False,
            )
            self._servers.append(server)
            await server.start_serving()

        self.spawn(serve())

    def upstream_address(self, node_id: int | None) -> tuple[str, int]:
        if node_id is None or self.brokers.plan.mode == "single":
            return self.options.upstream
        return self.brokers.upstream_of(node_id) or self.options.upstream

    def upstream_salted_cache(self, username: str, password: str) -> SaltedPasswordCache:
        """The salted-password cache of the credential the gateway logs in upstream with; a new one when
        the credential changed (a cache never serves another credential's logins)."""
        held = self._upstream_scram
        from sasl.scram import SaltedPasswordCache

        if held is None or held[0] != username or not hmac.compare_digest(held[1].encode(), password.encode()):
            held = self._upstream_scram = (username, password, SaltedPasswordCache())
        return held[2]

    async def refresh_upstream_versions(self) -> dict[int, tuple[int, int]]:
        """Asks the upstream which API versions it supports (once; clients reuse the answer)."""
        host, port = self.options.upstream
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=self.options.upstream_ssl), timeout=10
        )
        try:
            spec = SPECS[API_VERSIONS_KEY]
            req = spec.request[3](client_software_name="kgov-gateway", client_software_version="1")
            req.with_header(correlation_id=0, client_id="kgov-gateway")
            writer.write(bytes(req.encode(header=True, framed=True)))
            size = int.from_bytes(await reader.readexactly(4), "big")
            frame = await reader.readexactly(size)
            resp = decode_response(spec, 3, frame)
            self.upstream_versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
            self._versions_at = time.monotonic()
            if not self.logs_in_upstream and self.brokers.plan.mode == "per-node":
                with contextlib.suppress(OSError, asyncio.IncompleteReadError, CodecError, KeyError):
                    await self._learn_brokers(reader, writer)
            return self.upstream_versions
        finally:
            writer.close()

    async def _learn_brokers(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Opens the per-node listeners at start, so clients holding cached metadata (a gateway
        restart) reach the right broker before any Metadata request flows through."""
        assert self.upstream_versions is not None
        version = min(12, self.upstream_versions[3][1])
        spec = SPECS[3]
        req = spec.request[version](topics=[], allow_auto_topic_creation=False)
        req.with_header(correlation_id=1, client_id="kgov-gateway")
        writer.write(bytes(req.encode(header=True, framed=True)))
        size = int.from_bytes(await reader.readexactly(4), "big")
        self.brokers.rewrite_metadata(decode_response(spec, version, await reader.readexactly(size)))

    def maybe_refresh_upstream_versions(self) -> None:
        """Re-asks the upstream now and then (a rolling upgrade changes its versions); clients get the
        cached answer meanwhile."""
        if time.monotonic() - self._versions_at > UPSTREAM_VERSIONS_TTL_S:
            self._versions_at = time.monotonic()

            async def refresh() -> None:
                with contextlib.suppress(OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, CodecError):
                    await self.refresh_upstream_versions()

            self.spawn(refresh())

    def api_versions(self) -> list[tuple[int, int, int]]:
        """Intersection of what the upstream supports and what the gateway can parse and authorize,
        plus the APIs the gateway answers itself."""
        out: dict[int, tuple[int, int]] = {}
        for key, (lo, hi) in (self.upstream_versions or {}).items():
            spec = SPECS.get(key)
            if spec is None or key not in PLANNERS:
                continue
            low, high = max(lo, spec.min_version), min(hi, spec.max_version)
            if key in (0, 1) and not ids_supported(self.upstream_versions or {}):
                high = min(high, BY_ID_VERSION - 1)  # ids it cannot name could not be authorized
            if low <= high:
                out[key] = (low, high)
        for key in (API_VERSIONS_KEY, *self._sasl_keys(), *self.services.local_handlers):
            spec = SPECS[key]
            out[key] = (spec.min_version, spec.max_version)
        return sorted((k, lo, hi) for k, (lo, hi) in out.items())

    def _sasl_keys(self) -> tuple[int, ...]:
        return (SASL_HANDSHAKE, SASL_AUTHENTICATE) if _sasl_enabled(self.options.security_protocol) else ()


_CLOSED: Frame = bytearray()  # put in `login_frames` when the upstream closes (compared by identity)


class UpstreamConnection(asyncio.BufferedProtocol):
    def __init__(self, client: ClientConnection) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.reader = FrameReader(1 << 30)
        # While the gateway logs in upstream, frames go here instead of to the client.
        self.login_frames: asyncio.Queue[Frame] | None = None
        self._login_correlation = -1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=1 << 20)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        reader = self.reader
        reader.buffer_updated(nbytes)
        while True:
            try:
                frame = reader.next_frame()
            except FrameError:
                self.client.abort("invalid framing from upstream")
                return
            if frame is None:
                return
            if self.login_frames is not None:
                self.login_frames.put_nowait(frame)
            else:
                self.client.on_upstream_frame(frame)

    async def _login_call(self, key: int, request: Any) -> Any:
        """One SASL request of the gateway's own login (v1, negative correlation ids)."""
        assert self.transport is not None and self.login_frames is not None
        self._login_correlation -= 1
        request.with_header(correlation_id=self._login_correlation, client_id="kgov-gateway")
        self.transport.write(bytes(request.encode(version=1, header=True, framed=True)))
        while True:
            frame = await asyncio.wait_for(self.login_frames.get(), timeout=10)
            if frame is _CLOSED:
                raise UpstreamLoginError("the upstream closed the connection during the SASL exchange",
                                         refused=False)
            correlation = int.from_bytes(frame[:4], "big", signed=True)
            # A re-authentication waits for the awaited answers only: an upstream that answers acks=0
            # produce requests (Tansu) may still send those before the exchange's (they are dropped).
            if not self.client.drops_acks_0_answer(correlation):
                break
        if correlation != self._login_correlation:
            raise UpstreamLoginError("upstream correlation id mismatch during the SASL exchange", refused=False)
        return decode_response(SPECS[key], 1, frame)

    async def _login_handshake(self, mechanism: str) -> None:
        self.login_frames = asyncio.Queue()
        self._login_correlation = -1
        handshake = await self._login_call(SASL_HANDSHAKE, SPECS[SASL_HANDSHAKE].request[1](mechanism=mechanism))
        if handshake.error_code:
            raise UpstreamLoginError(f"upstream refused SASL mechanism {mechanism}")

    async def login(self, mechanism: str, username: str, password: str) -> int:
        """SaslHandshake v1 + SaslAuthenticate v1 with the gateway's own credential; answers the
        session lifetime the upstream granted (KIP-368, 0 = unlimited)."""
        from sasl.scram import MECHANISMS, ScramClient, ScramError

        await self._login_handshake(mechanism)
        auth = SPECS[SASL_AUTHENTICATE].request[1]
        if mechanism == "PLAIN":
            messages = [b"\x00" + username.encode() + b"\x00" + password.encode()]
            response = await self._login_call(SASL_AUTHENTICATE, auth(auth_bytes=messages[0]))
        else:
            client = ScramClient(MECHANISMS[mechanism], username, password,
                                 salted_cache=self.client.gateway.upstream_salted_cache(username, password))
            response = await self._login_call(SASL_AUTHENTICATE, auth(auth_bytes=client.first_message()))
            if not response.error_code:
                try:
                    final = client.final_message(bytes(response.auth_bytes))
                except ScramError as exc:  # the upstream's server-first message: its fault, not ours
                    raise UpstreamLoginError(f"upstream {mechanism} exchange failed: {exc}") from exc
                response = await self._login_call(SASL_AUTHENTICATE, auth(auth_bytes=final))
                if not response.error_code:
                    try:
                        client.verify_server_final(bytes(response.auth_bytes))
                    except ScramError as exc:
                        raise UpstreamLoginError("upstream server signature did not verify") from exc
        if response.error_code:
            detail = ""
            if response.error_message:
                text = response.error_message.replace(password, "***") if password else response.error_message
                detail = ": " + printable(text, 300)
            raise UpstreamLoginError(f"upstream {mechanism} authentication failed (error {response.error_code}){detail}")
        self.login_frames = None
        lifetime: int = response.session_lifetime_ms
        return max(lifetime, 0)

    async def login_oauthbearer(self, token: str, extensions: Mapping[str, str]) -> int:
        """SaslHandshake v1 + SaslAuthenticate v1 with an OAuth bearer token; answers the session
        lifetime the upstream granted (KIP-368, 0 = unlimited)."""
        await self._login_handshake("OAUTHBEARER")
        auth = SPECS[SASL_AUTHENTICATE].request[1]
        exchange = OAuthBearerExchange(token, extensions)
        message = exchange.first_message()
        while True:
            response = await self._login_call(SASL_AUTHENTICATE, auth(auth_bytes=message))
            step = exchange.on_response(response.error_code, response.error_message, bytes(response.auth_bytes),
                                        response.session_lifetime_ms)
            if isinstance(step, Authenticated):
                self.login_frames = None
                return step.session_lifetime_ms
            message = step.data

    def connection_lost(self, exc: Exception | None) -> None:
        if self.login_frames is not None:
            self.login_frames.put_nowait(_CLOSED)  # wakes a SASL exchange waiting for its answer
        self.client.on_upstream_lost(exc)

    def pause_writing(self) -> None:
        self.client.pause("upstream")

    def resume_writing(self) -> None:
        self.client.resume("upstream")


class ClientConnection(asyncio.BufferedProtocol):
    def __init__(self, gateway: Gateway, node_id: int | None) -> None:
        self.gateway = gateway
        self.options = gateway.options
        self.services = gateway.services
        self.node_id = node_id
        self.transport: asyncio.Transport | None = None
        self.upstream: UpstreamConnection | None = None
        self.upstream_started = False  # `_connect_upstream` spawned (at connect, or after a SASL login)
        self.reader = FrameReader(self.options.max_request_bytes)
        # This connection's share of the gateway's frame memory; the reader draws on it once the client
        # is authenticated (at connect without SASL, after its login), as Kafka reads SASL frames outside
        # its MemoryPool.
        self.memory = gateway.frame_memory.connection(lambda: self.resume("memory"))
        self._served_frame_held = False  # the memory held is a served frame's, waiting on the upstream side
        # The large frame being read (its memory granted) must arrive in time (`_track_large_frame`): its
        # reading time left (None: no large frame being read), when it runs out, and the timer.
        self._large_frame_left: float | None = None
        self._large_frame_due = 0.0
        self._large_frame_timer: asyncio.TimerHandle | None = None
        self.slots: deque[Slot] = deque()
        self.awaiting_upstream: deque[Slot] = deque()
        # The correlation ids upstream are the gateway's own numbering (`gateway.upstream_ids`): answers to
        # acks=0 produce requests (Tansu's; Kafka brokers send none) are told from the awaited ones by
        # number, however many are outstanding, and a client reusing an id cannot confuse them.
        self.upstream_ids = UpstreamIds()
        self.pending_frames: list[Frame | memoryview] = []
        self.pending_bytes = 0
        self.paused: set[str] = set()
        self.closed = False
        self.peer = ("", 0)  # as the socket gives it (the per-IP connection quota's key)
        self.counted = False  # counted in `Gateway.connection_limits` (released in `connection_lost`)
        self.client_host = ""  # the peer's IP as Kafka writes it (getHostAddress()): logs, audit, ACL host
        self.client_group = ""  # its per-address shares' key (`share_key`: an IPv6 client by its /64)
        self.sasl: SaslSession | None = None
        self.principal = ANONYMOUS
        self.software = ("unknown", "unknown")
        self.last_activity = time.monotonic()
        self.idle_handle: asyncio.TimerHandle | None = None
        self.connection_id = ""
        self.raw_sasl = False
        self._serve_scheduled = False  # `_serve_frames` is due on the loop (reading resumed with frames unread)
        # A TLS handshake under way (`_tls_handshake`): bytes delivered meanwhile are kept, not served. The
        # TLS layer hands over application data sent with the client's last handshake flight before
        # `start_tls` returns the TLS transport; served then, the answer would leave in plaintext.
        self._tls_pending = False
        self._header_parsed = False  # the request being served got past its header (`_refuse_unreadable`)
        self._last_client_id = ""
        # The request being served was charged to the request quota before its answer, or is exempt
        # (`_answer_api_versions`, the SASL exchange): `_serve_frames` does not charge it after.
        self._request_time_settled = False
        self.muted_until = 0.0
        self.mute_handle: asyncio.TimerHandle | None = None
        self._cut_handle: asyncio.TimerHandle | None = None  # `close_after_flush`'s bound on the client
        # KIP-368: when the upstream session is next re-authenticated, and the wait for in-flight
        # requests to complete before it.
        self.reauth_handle: asyncio.TimerHandle | None = None
        self._upstream_drained: asyncio.Future[None] | None = None
        self.close_reason: str | None = None  # why the gateway closed it (None: the client did, or not closed)
        # A failed authentication's delay has ended: close once every earlier request is answered.
        self.closing_after_answers = False
        # Topic ids (gateway.topic_ids): the request waiting for the gateway's listing (served again,
        # before the reader's next frame, once it ended); and that same request, marked to be planned
        # with what the map then holds.
        self._topic_ids_waiting: Frame | None = None
        self._topic_ids_asked_for: Frame | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Counts the accepted TCP connection (or refuses it), then serves it, after a TLS handshake
        on a TLS listener."""
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername") or ("", 0)
        self.peer = (str(peer[0]), int(peer[1]))
        # With a link-local peer's zone, as Java writes an accepted socket's address (`fe80:...%4`):
        # Kafka compares ACL hosts with that text.
        self.client_host = peer_host_address(tuple(peer))
        self.client_group = share_key(self.client_host)
        self.memory.source = self.client_group  # before it reserves anything
        refusal = self.gateway.connection_limits.admit(self.client_host)
        if refusal is not None:
            # Over max_connections_per_ip or max_connections: closed at once (a FIN, as Kafka's
            # Acceptor closes the channel after its INFO line), before anything is read or opened upstream.
            log.info("%s", refusal)
            if self.gateway.connection_limits.full:
                self.gateway.warn_full()
            self.closed = True
            self.close_reason = "too many connections"
            transport.close()
            return
        self.counted = True
        self.gateway._connections.add(self)
        context = self.options.ssl_context
        if context is not None:
            # Counted from the accept: a handshake in progress holds a slot, and has
            # `tls_handshake_timeout_s` to finish. Nothing is read until `start_tls` takes over.
            transport.pause_reading()
            self._tls_pending = True
            self.gateway.spawn(self._tls_handshake(transport, context))
            return
        self._established(transport)

    async def _tls_handshake(self, transport: asyncio.Transport, context: ssl.SSLContext) -> None:
        """The TLS handshake of a connection already counted (`connection_made`), bounded by
        `tls_handshake_timeout_s`. asyncio's TLS layer does not report a connection lost during the
        handshake to the protocol, so a failed one is released here."""
        if self.closed or transport.is_closing():
            return  # closed before the handshake began (`connection_lost` ran already)
        tls: asyncio.BaseTransport | None = None
        try:
            tls = await asyncio.get_running_loop().start_tls(
                transport, self, context, server_side=True,
                ssl_handshake_timeout=self.options.tls_handshake_timeout_s,
            )
        except (OSError, ssl.SSLError) as exc:  # a timeout is a ConnectionAbortedError
            log.debug("TLS handshake with %s failed: %s", self.client_host, str(exc) or type(exc).__name__)
        except asyncio.CancelledError:
            self._handshake_failed(transport)
            raise
        if self.closed or not isinstance(tls, asyncio.Transport):
            if tls is not None:
                tls.close()
            self._handshake_failed(transport)
            return
        self._established(tls)

    def _name_by_certificate(self, transport: asyncio.Transport) -> bool:
        """On an SSL listener, the principal as Kafka's DefaultKafkaPrincipalBuilder makes it: `User:` and
        the certificate subject (X500Principal.getName(), `gateway.x500_name`) through
        ssl.principal.mapping.rules. No certificate (tls_client_auth none/requested): User:ANONYMOUS; an
        empty subject: `User:` with an empty name, as Kafka. False when no rule maps the subject (Kafka's
        NoMatchingRule fails the authentication): the connection is closed."""
        ssl_object = transport.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if not der:
            return True
        try:
            self.principal = Principal("User", self.options.ssl_principal_mapper.name(certificate_subject(der)))
        except (CertificateNameError, NoMatchingRule) as exc:
            reason = ("no ssl.principal.mapping.rules rule maps the certificate subject"
                      if isinstance(exc, NoMatchingRule) else "unreadable certificate subject")
            log.info("Failed authentication with %s (%s: %s)", self.client_host, reason, exc)
            self._audit_auth(False, "SSL", reason, False)
            self.abort(reason)
            return False
        return True

    def _handshake_failed(self, transport: asyncio.Transport) -> None:
        self.closed = True
        transport.abort()
        self.connection_lost(None)  # releases the slot (once: `counted`)

    def _established(self, transport: asyncio.Transport) -> None:
        """A counted connection ready to serve (its TLS handshake done, on a TLS listener)."""
        self.transport = transport
        early = self._tls_pending  # bytes may have arrived with the handshake's last flight
        self._tls_pending = False
        local = transport.get_extra_info("sockname") or ("", 0)
        self.gateway.connection_counter += 1
        # Kafka's Selector connection id: both addresses as getHostAddress() writes them.
        self.connection_id = (f"{java_host_address(str(local[0]))}:{local[1]}-{self.client_host}:{self.peer[1]}-"
                              f"{self.gateway.connection_counter}")
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=1 << 20)
        if self.options.security_protocol == "SSL" and not self._name_by_certificate(transport):
            return
        if _sasl_enabled(self.options.security_protocol):
            if self.options.mechanism_factory is None:
                self.abort("SASL listener without mechanisms")
                return
            self.sasl = SaslSession(
                enabled=self.options.sasl_mechanisms, factory=self.options.mechanism_factory,
                client_address=self.client_host, max_reauth_ms=self.options.max_reauth_ms,
            )
            self.reader.max_frame_bytes = min(MAX_UNAUTHENTICATED_BYTES, self.options.max_request_bytes)
        quotas = self.services.quotas
        if quotas is not None:
            delay = quotas.connection_delay_s(self.peer[0])
            if delay is not None:
                # KIP-612: over the per-IP connection rate, the connection is closed after the delay.
                self.pause("connection-quota")
                asyncio.get_running_loop().call_later(delay, self.abort, "connection creation rate exceeded")
                return
        if self.sasl is None:
            self.reader.memory = self.memory
            self._start_upstream()
        # else after the client's login (`_after_auth_step`): before it the gateway answers ApiVersions and
        # the SASL exchange itself, and a client that never logs in must not make it open upstream
        # connections and upstream logins (an amplification a broker does not offer).
        self.idle_handle = asyncio.get_running_loop().call_later(self.options.idle_timeout_s, self._check_idle)
        if early:
            self._serve_frames()

    def _start_upstream(self) -> None:
        if not self.upstream_started:
            self.upstream_started = True
            self.gateway.spawn(self._connect_upstream())

    async def _upstream_token(self) -> str | None:
        """The current OAuth token for an upstream OAUTHBEARER login, else None. Answers at once while
        the token is valid (it is refreshed in the background); see `UpstreamTokenSource.token`."""
        oauth = self.options.upstream_oauth
        return await oauth.tokens.token() if oauth is not None else None

    async def _login_upstream(self, proto: UpstreamConnection, token: str | None) -> int:
        """The gateway's own SASL exchange on `proto`, first login and re-authentication alike;
        answers the session lifetime the upstream granted (0: unlimited, or no SASL upstream)."""
        oauth = self.options.upstream_oauth
        if oauth is not None:
            assert token is not None
            return await proto.login_oauthbearer(token, oauth.extensions)
        if self.options.upstream_sasl is not None:
            return await proto.login(*self.options.upstream_sasl)
        return 0

    async def _connect_upstream(self) -> None:
        host, port = self.gateway.upstream_address(self.node_id)
        loop = asyncio.get_running_loop()
        created: list[UpstreamConnection] = []
        try:
            token = await self._upstream_token()  # before connecting: a dead token endpoint opens nothing
            _t, proto = await asyncio.wait_for(
                loop.create_connection(lambda: UpstreamConnection(self), host, port, ssl=self.options.upstream_ssl),
                timeout=10,
            )
            created.append(proto)
            lifetime = await self._login_upstream(proto, token)
        except (TimeoutError, OSError, CodecError) as exc:
            # The client sees a disconnect (a retriable transport error) and reconnects later.
            log.warning("upstream %s:%d unavailable: %s", host, port, exc)
            for p in created:
                if p.transport is not None:
                    p.transport.close()
            self.abort("upstream unavailable")
            return
        if self.closed:
            if proto.transport is not None:
                proto.transport.close()
            return
        self.upstream = proto
        assert proto.transport is not None
        self._schedule_upstream_reauth(lifetime)
        if self.pending_frames:
            proto.transport.writelines(self.pending_frames)
            self.pending_frames = []
            self.pending_bytes = 0
        self.resume("upstream-connecting")

    def _schedule_upstream_reauth(self, lifetime_ms: int) -> None:
        """KIP-368: re-authenticates the upstream session before it ends, as Kafka's clients do."""
        delay = reauthentication_delay_s(lifetime_ms, self.services.rand())
        if delay is None:
            return
        host, port = self.gateway.upstream_address(self.node_id)
        log.debug("upstream %s:%d granted %s a session of %d ms; re-authenticating in %.3f s",
                  host, port, self.connection_id, lifetime_ms, delay)
        self.reauth_handle = asyncio.get_running_loop().call_later(
            delay, lambda: self.gateway.spawn(self._reauthenticate_upstream()))

    async def _reauthenticate_upstream(self) -> None:
        """A new SaslHandshake + SaslAuthenticate on the open upstream connection. Nothing may be
        interleaved with it (the upstream would read our request as the next SASL message, and the
        answers would mix with the exchange's): new requests are held (the client is not read),
        in-flight ones complete, then the exchange runs and the held requests are released. If it
        fails, the upstream connection and its client are closed, as after a failed first login."""
        self.reauth_handle = None
        up = self.upstream
        if self.closed or up is None:
            return
        host, port = self.gateway.upstream_address(self.node_id)
        # Hold first: when no OAuth token is valid, getting one takes a round trip to the endpoint
        # (a valid one is answered at once: it is refreshed in the background), and a request
        # forwarded meanwhile could reach the upstream after the session ended (it would close the
        # connection). In-flight requests complete while the token is fetched.
        self.pause("upstream-reauth")
        try:
            token = await self._upstream_token()
            await self._in_flight_drained()
            if self.closed or self.upstream is not up:
                return
            lifetime = await self._login_upstream(up, token)
        except (TimeoutError, OSError, CodecError) as exc:
            if self.closed and self.close_reason != UPSTREAM_LOST:
                return  # the client left, or the gateway is shutting down
            self.gateway.upstream_reauthentication_failures += 1
            log.warning("re-authentication to upstream %s:%d failed; closing client connection %s: %s",
                        host, port, self.connection_id, str(exc) or type(exc).__name__)
            self.close_after_flush()
            return
        if self.closed or self.upstream is not up:
            return
        self.gateway.upstream_reauthentications += 1
        self._schedule_upstream_reauth(lifetime)
        self.resume("upstream-reauth")

    async def _in_flight_drained(self, timeout_s: float = 30.0) -> None:
        """Returns once every request forwarded upstream has its answer (they come in order)."""
        if not self.awaiting_upstream:
            return
        self._upstream_drained = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(self._upstream_drained, timeout=timeout_s)
        except TimeoutError:
            raise UpstreamLoginError(
                f"requests in flight to the upstream were not answered within {timeout_s:.0f} s"
            ) from None
        finally:
            self._upstream_drained = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._close_upstream()
        self.closed = True
        self._close_memory()
        self.gateway._connections.discard(self)
        if self.counted:
            self.counted = False
            self.gateway.connection_limits.release(self.client_host)
        for handle in (self.idle_handle, self.mute_handle, self._cut_handle, self._large_frame_timer):
            if handle is not None:
                handle.cancel()

    def abort(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
        self._close_memory()
        log.debug("closing %s: %s", self.connection_id, reason)
        if self.transport is not None:
            self.transport.abort()
        self._close_upstream()

    def close_after_flush(self) -> None:
        self.closed = True
        # Nothing more is read or served: the frame memory goes back now, not when the client has taken
        # the last answers (`connection_lost`), which a client that stops reading never does.
        self._close_memory()
        transport = self.transport
        if transport is not None:
            transport.close()
            # asyncio's close waits, without a bound, for the client to read what is still buffered; a
            # client that stops reading would keep the connection (and its slot in the connection limits)
            # for ever, `abort` being a no-op once `closed` is set. Kafka closes a connection that makes no
            # progress after connections.max.idle.ms; here the answers get FAILED_AUTH_ANSWER_WAIT_S, as the
            # answers awaited before the close do (`_close_once_answered`), then the connection is cut.
            if self._cut_handle is None:
                self._cut_handle = asyncio.get_running_loop().call_later(FAILED_AUTH_ANSWER_WAIT_S, transport.abort)
        self._close_upstream()

    def _close_memory(self) -> None:
        """Nothing more is read: the connection's frame memory goes back, but for the served frame an
        admin handler still reads on its thread (`_serve_admin_request`), which stays counted until the
        handler is done, as Kafka releases a request's pool buffer when its handler is done with it, not
        when the channel closes. Released at the close, the frame's bytes would be counted nowhere while
        the handler still held them, and clients closed during admin requests would hold frames beyond
        `queued_max_request_bytes`."""
        self.memory.close(keep_held=self._served_frame_held and "admin-request" in self.paused)

    def _close_upstream(self) -> None:
        # A topic listing under way on this connection will not be answered: its waiters go on.
        for waiter in self.gateway.topic_listing.abandon(self):
            waiter.resume("topic-ids")
        if self.reauth_handle is not None:
            self.reauth_handle.cancel()
            self.reauth_handle = None
        drained = self._upstream_drained
        if drained is not None and not drained.done():
            drained.set_exception(ConnectionError("upstream connection closed"))
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()
        self.upstream = None

    def _peer_gone(self) -> bool:
        """True when the client has closed its side (a FIN or a reset) although reading is paused, so
        asyncio has not seen it: `poll` reports it whatever data is still unread (POLLRDHUP, Linux)."""
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        if sock is None or sock.fileno() < 0:
            return self.transport is None or self.transport.is_closing()
        poller = select.poll()
        poller.register(sock.fileno(), _PEER_GONE)
        return bool(poller.poll(0))

    def _check_idle(self) -> None:
        if self.closed:
            return
        idle = time.monotonic() - self.last_activity
        # Requests in flight (answers due, or an admin request or a SASL step on its thread, whose slot
        # joins `slots` only with its answer) keep a connection from being idle.
        if idle >= self.options.idle_timeout_s and not self.slots and not self.paused & _ON_A_THREAD:
            self.abort("idle timeout")
            return
        self.idle_handle = asyncio.get_running_loop().call_later(
            max(self.options.idle_timeout_s - idle, 0.05), self._check_idle
        )

    # -- flow control ------------------------------------------------------------------------

    def pause(self, reason: str) -> None:
        if not self.paused and self.transport is not None and not self.closed:
            self.transport.pause_reading()
        self.paused.add(reason)
        if self._large_frame_timer is not None and reason not in _CLIENTS_OWN:
            # Time the gateway does not read the connection is not the client's: the large frame's
            # reading time stops until reading resumes, unless the client itself holds reading up.
            self._large_frame_timer.cancel()
            self._large_frame_timer = None
            self._large_frame_left = max(self._large_frame_due - asyncio.get_running_loop().time(), 0.0)

    def resume(self, reason: str) -> None:
        if reason not in self.paused:
            return
        self.paused.discard(reason)
        if reason in _FRAME_IN_USE and self._served_frame_held and not self.paused & _FRAME_IN_USE:
            self._served_frame_held = False
            self.memory.release()
        if self.transport is None or self.closed:
            return
        if self._large_frame_left is not None and self._large_frame_timer is None and self.paused <= _CLIENTS_OWN:
            self._arm_large_frame_timer(self._large_frame_left)
        if self.paused:
            return
        if self.reader.needs_bytes and self._topic_ids_waiting is None:
            self.transport.resume_reading()
        elif not self._serve_scheduled:
            # Frames read before the pause come first; the socket is read again once they are served
            # (`_serve_frames`), so the reader never holds more than its scratch buffer and one frame.
            self._serve_scheduled = True
            asyncio.get_running_loop().call_soon(self._serve_frames)

    def pause_writing(self) -> None:
        # The client does not read its responses: stop reading its requests (locally answered ones
        # would otherwise pile up in our write buffer) and stop reading the upstream's answers.
        self.pause("client-backlog")
        up = self.upstream
        if up is not None and up.transport is not None:
            up.transport.pause_reading()

    def resume_writing(self) -> None:
        self.resume("client-backlog")
        up = self.upstream
        if up is not None and up.transport is not None:
            up.transport.resume_reading()

    # -- requests ----------------------------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.last_activity = time.monotonic()
        self.reader.buffer_updated(nbytes)
        if not self._tls_pending:
            self._serve_frames()

    def _serve_frames(self) -> None:
        """Serves the requests read so far one frame at a time, as Kafka's broker reads them: each
        frame's size is checked when it is reached, under the limit its predecessors left (the login
        raises it to `max_request_bytes`, a re-authentication's SaslHandshake lowers it to 512 KiB), and
        a bad frame fails the connection only after the frames before it were served. Stops as soon as
        the connection is paused (quota mute, backlog, too many in flight): what was read but not served
        waits in the reader, bounded by its scratch buffer and one frame, and the socket is not read
        until it is served. A request that waited for topic ids (`_hold_for_topic_ids`) comes first."""
        self._serve_scheduled = False
        reader = self.reader
        while not self.paused and not self.closed:
            waiting, self._topic_ids_waiting = self._topic_ids_waiting, None
            try:
                frame = waiting if waiting is not None else reader.next_frame()
            except FrameError as exc:
                self._on_frame_error(exc)
                return
            if self._large_frame_left is not None or reader.large_frame_size:
                self._track_large_frame()
            if frame is None:
                if reader.awaiting_memory:
                    # No room for this frame in the gateway's frame memory: stop reading until memory
                    # returns (`FrameMemory.reserve` queued us; its grant resumes us), as Kafka mutes the
                    # channel. The connection stays open.
                    self.pause("memory")
                    self.gateway.warn_frame_memory_full(self.client_group if self.memory.waits_for_share else None)
                break
            started = time.perf_counter()
            try:
                self._on_request(frame)
            except CodecError as exc:
                # A request Kafka refuses while it reads or parses it: closed unanswered, after the
                # answers to the requests before it (Kafka reads the next request only once the
                # previous one is answered).
                self._refuse_unreadable(frame, exc)
                return
            except AuthorizerNotReadyError:
                self.abort("authorizer not ready")
                return
            except Exception as exc:
                # A fault serving one request (a handler's store, a re-encoding) closes this connection
                # only, after the earlier answers, as Kafka's processChannelException does; uncaught, it
                # would leave a connection whose reading is paused (`resume` serves waiting frames from
                # the loop) hanging. The type only: a message may quote request data or a store's
                # parameters.
                log.error("Closing socket for %s because of error: %s", self.connection_id, type(exc).__name__)
                self._close_after_earlier_answers(f"error serving a request: {type(exc).__name__}")
                return
            self._release_served_frame()
            if self._request_time_settled:
                self._request_time_settled = False  # charged before its answer, or exempt (`_on_request`)
            else:
                self._charge_request_time(time.perf_counter() - started)
            if len(self.slots) >= MAX_IN_FLIGHT:
                self.pause("in-flight")
        transport = self.transport
        if not self.paused and not self.closed and transport is not None and not transport.is_reading():
            transport.resume_reading()  # paused while frames waited (`resume`): all are served now

    def _track_large_frame(self) -> None:
        """A large frame's body must arrive within its reading time once its memory is granted
        (`frame_memory.large_frame_deadline_s`: `large_request_grace_s`, plus its size at
        `large_request_min_bytes_per_s`), or the connection is closed (`_large_frame_overdue`): a client
        that sends a size prefix, then a few bytes a second, would otherwise hold pool memory for as long
        as it likes (the idle timeout never fires while bytes trickle in). Reading time: the clock stops
        while the gateway pauses the connection (`pause`), but not while only the client's own unread
        answers hold reading up (`_CLIENTS_OWN`: Kafka's Selector would not even have begun this receive
        before the previous answer was sent, so such a client holds no pool memory there). Called when the reader may have begun or
        finished one. Departure from Kafka, whose Selector puts no deadline on a receive in progress.
        Frames read before the login (up to 512 KiB, outside the pool) are not watched."""
        reader = self.reader
        size = reader.large_frame_size if reader.memory is not None else 0
        if size and self._large_frame_left is None:
            options = self.options
            self._large_frame_left = large_frame_deadline_s(size, options.large_request_min_bytes_per_s,
                                                            options.large_request_grace_s)
            if self.paused <= _CLIENTS_OWN:
                self._arm_large_frame_timer(self._large_frame_left)
        elif not size and self._large_frame_left is not None:
            self._large_frame_left = None
            if self._large_frame_timer is not None:
                self._large_frame_timer.cancel()
                self._large_frame_timer = None

    def _arm_large_frame_timer(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        self._large_frame_due = loop.time() + seconds
        self._large_frame_timer = loop.call_later(seconds, self._large_frame_overdue)

    def _large_frame_overdue(self) -> None:
        """The large frame being read did not arrive within its reading time: the connection is closed
        after the answers to the requests before it, and the frame's memory goes back at once. An INFO
        line per close, a WARN line at most every 10 s (`Gateway.warn_large_frame_too_slow`). Not
        audited: no request was read (the gateway audits requests and logins, not closes)."""
        self._large_frame_timer = None
        reader = self.reader
        size, filled = reader.large_frame_size, reader.large_frame_filled
        if self.closed or not size:
            return
        options = self.options
        seconds = large_frame_deadline_s(size, options.large_request_min_bytes_per_s, options.large_request_grace_s)
        self._large_frame_left = None
        self.gateway.slow_large_requests_closed += 1
        log.info("closing %s (%s): a request of %d bytes was not received within %.1f s of reading, %d bytes "
                 "arrived%s (gateway.large_request_min_bytes_per_s)", self.connection_id, self.principal, size,
                 seconds, filled, ", the client not reading its answers" if self.paused & _CLIENTS_OWN else "")
        self.gateway.warn_large_frame_too_slow(self.connection_id, size, filled, seconds)
        self._close_after_earlier_answers("large request not received in time")

    def _release_served_frame(self) -> None:
        """Returns the memory of the large frame just served (answered, or forwarded to the upstream),
        unless it still waits: for topic ids (it is served again later, and released then), in the
        upstream side's buffers, or for an admin handler on a worker thread (`_FRAME_IN_USE`: released
        by `resume` when that ends)."""
        if not self.memory.held or self._topic_ids_waiting is not None:
            return
        if self.paused & _FRAME_IN_USE:
            self._served_frame_held = True
        else:
            self.memory.release()

    def _on_frame_error(self, exc: FrameError) -> None:
        """A negative size or one over the limit. During an exchange it fails the authentication
        (Kafka's SaslServerAuthenticator: "invalid receive size"); otherwise Kafka's Selector logs
        `Unexpected error from ...; closing connection` with the InvalidReceiveException (WARN) and
        closes the connection; the requests before it were answered (one request at a time)."""
        sasl = self.sasl
        if sasl is not None and sasl.authenticating:
            self._refuse_frame(sasl, str(exc))
            return
        log.warning("Unexpected error from %s; closing connection: %s", self.connection_id, exc.kafka_message)
        self._close_after_earlier_answers(str(exc))

    def _close_after_earlier_answers(self, reason: str) -> None:
        """Stops reading and closes once every request read before is answered (those still with the
        upstream included; at most FAILED_AUTH_ANSWER_WAIT_S), as Kafka's broker, which reads a
        connection's next request only after answering the previous one, closes on a bad request."""
        if self.closed:
            return
        log.debug("closing %s after the answers to earlier requests: %s", self.connection_id, reason)
        self.close_reason = reason
        self.pause("closing")
        if not self._served_frame_held:
            # No frame is read or served any more: the memory of the one refused (or of one being read)
            # goes back now. A served frame still in the upstream side's buffers keeps it until they drain.
            self.memory.close()
        self._close_once_answered(f"earlier requests unanswered before a close ({reason})")

    def _close_once_answered(self, timeout_reason: str) -> None:
        """Closes as soon as every slot is answered (`_flush` writes them in order and closes), or
        aborts with `timeout_reason` if they are not within FAILED_AUTH_ANSWER_WAIT_S."""
        self.closing_after_answers = True
        self._flush()
        if not self.closed:
            asyncio.get_running_loop().call_later(FAILED_AUTH_ANSWER_WAIT_S, self.abort, timeout_reason)

    def _refuse_unreadable(self, frame: Frame, error: CodecError) -> None:
        """Closes the connection, unanswered, after the answers to the requests before it. After the
        login Kafka's `SocketServer.Processor.processCompletedReceives` reads the request and logs the
        close at ERROR (`processChannelException`, `gateway.invalid_request`); during a SASL exchange
        Kafka's authenticator reads it instead, and the close stays a DEBUG line here."""
        sasl = self.sasl
        if not self.raw_sasl and (sasl is None or not sasl.authenticating):
            for line in unreadable_request_log_lines(
                error, frame=frame, parsed_header=self._header_parsed, connection_id=self.connection_id,
                listener=self.options.listener_name, principal=str(self.principal),
            ):
                log.error("%s", line)
        self._close_after_earlier_answers(str(error))

    def _on_request(self, frame: Frame) -> None:
        now = time.perf_counter()
        if self.raw_sasl:
            self._request_time_settled = True  # the SASL exchange is outside the request quota (below)
            self._on_raw_sasl_token(frame, now)
            return
        self._header_parsed = False
        header = parse_request_header(frame)
        self._header_parsed = True
        key, version = header.api_key, header.api_version
        self._last_client_id = header.client_id or ""
        spec = SPECS.get(key)
        sasl = self.sasl
        admission = sasl.admit(key, self._now_ms()) if sasl is not None else Admission.SERVE
        if admission is Admission.SESSION_EXPIRED:
            self._close_expired(api_name(key))
            return
        if admission is Admission.UNAUTHENTICATED:
            raise CodecError(f"{api_name(key)} before authentication")
        if admission is Admission.VERSIONS_ALREADY_ANSWERED:
            # Kafka's IllegalStateException from handleApiVersionsRequest: Selector's "Unexpected error
            # from ...; closing connection", at once and unanswered.
            log.warning("Unexpected error from %s; closing connection: Unexpected ApiVersions request received "
                        "during SASL authentication state HANDSHAKE_REQUEST", self.connection_id)
            self.abort("second ApiVersions before SaslHandshake")
            return
        if key == API_VERSIONS_KEY and admission is Admission.SERVE:
            self._answer_api_versions(header, frame, now)
            return
        if spec is None or not spec.supports(version):
            raise ApiNotEnabledError(key, version, f"unsupported api key {key} version {version}")
        if sasl is not None and sasl.authenticating:
            # Kafka's SaslServerAuthenticator serves the exchange (re-authentications too) on the network
            # thread, outside KafkaApis and its request quota: not charged (the principal is not known yet).
            self._request_time_settled = True
        if admission is Admission.DURING_AUTHENTICATION:
            self._refuse_during_authentication(spec, header, frame, now)
            return
        if admission is Admission.SASL:
            assert sasl is not None
            if key == SASL_HANDSHAKE:
                self._sasl_handshake(spec, header, frame, now)
                if sasl.authenticating:
                    self._request_time_settled = True  # it began a re-authentication: the authenticator's
            else:
                self._sasl_authenticate(spec, header, frame, now)
            # Otherwise (on an authenticated connection, a SaslHandshake that begins no re-authentication,
            # a SaslAuthenticate) Kafka's SocketServer hands it to KafkaApis, which answers
            # ILLEGAL_SASL_STATE through `sendResponseMaybeThrottle`: charged (`_serve_frames`), as any request.
            return
        if key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
            raise ApiNotEnabledError(key, version, "SASL request on a listener without SASL")
        slot = Slot(header, spec, now, len(frame))
        ctx = self._context(header)
        handler = self.services.local_handlers.get(key)
        if handler is not None:
            # Decoded here, so a malformed request is refused as any other (`_serve_frames`).
            self._serve_admin_request(handler, spec, header, slot, ctx, decode_request(spec, header, frame))
            return
        if key not in PLANNERS:
            raise ApiNotEnabledError(key, version, f"{spec.name} is not allowed through the gateway")
        quotas = self.services.quotas
        if key == 0:
            slot.records_bytes = len(frame)
            acks = produce_acks(frame, header)
            if acks == 0:
                # KafkaApis.handleProduceRequest: "the request quota is not enforced if acks == 0"
                # (`requestThrottleTimeMs = if (produceRequest.acks == 0) 0 else
                # quotas.request.maybeRecordAndGetThrottleTimeMs(...)`), and the no-answer goes out through
                # `sendNoOpResponseExemptThrottle`, which records the time as exempt
                # (`quotas.request.maybeRecordExempt`), never against the principal. The produce byte rate
                # still applies and may mute (below). Exempt on every path, held for topic ids too.
                self._request_time_settled = True
        else:
            acks = 1
        if quotas is not None and key == 1:
            throttle = quotas.fetch_throttle_ms(self.principal.name, header.client_id or "")
            if throttle > 0:
                decode_request(spec, header, frame)  # a malformed request still closes the connection
                self._answer_throttled_fetch(spec, slot, max(throttle, self._settle_request_time(now)))
                return
        request = decode_request(spec, header, frame)
        if key in BY_ID_SINCE and version >= BY_ID_SINCE[key] and self._hold_for_topic_ids(key, request, frame):
            return
        authorizer = self.services.authorizer

        def check(actions: list[Action]) -> list[bool]:
            return [d.allowed for d in authorizer.authorize(ctx, actions)]

        def by_type(op: Operation, rtype: ResourceType) -> bool:
            return authorizer.authorize_by_resource_type(ctx, op, rtype).allowed

        topic_ids = self.gateway.topic_ids
        plan = plan_request(RequestAuthorizer(check, by_type, topic_ids.name), key, version, request, spec.response)
        bandwidth = 0
        if quotas is not None and key == 0:
            bandwidth = quotas.record_produce(self.principal.name, header.client_id or "", len(frame))
            if bandwidth > 0:
                self._mute(bandwidth)
        # KafkaApis (handleProduceRequest, handleFetchRequest): the request quota is charged before the
        # answer is decided, and the answer carries the larger of the bandwidth and request throttles; the
        # mute is that larger one (`_mute` keeps the later deadline, the two never add up). The time spent
        # on the upstream's answer is charged when it is back (`on_upstream_frame`). A produce request with
        # acks=0 is exempt from the request quota (above), as in Kafka.
        if quotas is not None:
            slot.throttle_ms = max(bandwidth, 0 if acks == 0 else self._settle_request_time(now))
        if key == 1 and slot.throttle_ms > 0 and plan.forward is not None:
            # Kafka answers a throttled fetch, over either quota, with no data (`getThrottledResponse`).
            self._answer_throttled_fetch(spec, slot, slot.throttle_ms)
            return
        if plan.forward is None:
            if key == 0 and acks == 0:
                self._finish_without_response(slot)
                self._close_after_failed_acks_0(header)
                return
            local = plan.local
            if slot.throttle_ms and "throttle_time_ms" in spec.response.fields:
                local.throttle_time_ms = slot.throttle_ms
            self._complete(slot, encode_response(spec, version, header.correlation_id, local))
            return
        if plan.sessionless:
            slot.sessionless = True
            if not plan.rewritten:
                frame = sessionless_frame(frame, header)
        rewrite = self.gateway.brokers.response_rewriter(key, version)
        # Metadata v10+ answers carry topic ids: learn them before any patch filters topics out.
        learn = [topic_ids.learn_from_metadata] if key == 3 and version >= METADATA_WITH_IDS_VERSION else []
        slot.patches = [*learn, *plan.patches]
        if rewrite is not None:
            slot.patches.append(rewrite)
        slot.forwarded = True
        slot.upstream_seq = seq = self.upstream_ids.assign()
        if plan.rewritten:
            self._send_upstream(encode_request(spec, header, plan.forward, wire_id(seq)))
        else:
            self._send_upstream(*request_with_correlation_id(frame, header, wire_id(seq)))
        if key == 0 and acks == 0:
            self._finish_without_response(slot)
            if plan.patches:  # a denied topic was cut out (its answer would have been patched in)
                self._close_after_failed_acks_0(header)
        else:
            self.slots.append(slot)
            self.awaiting_upstream.append(slot)

    def _answer_throttled_fetch(self, spec: ApiSpec, slot: Slot, throttle_ms: int) -> None:
        """Kafka's answer to a fetch over its consumer byte rate or request quota: no data, the throttle
        time, session id 0 (its SessionlessFetchContext; the gateway keeps no session), then the mute."""
        header = slot.header
        slot.throttle_ms = throttle_ms
        response = spec.response(throttle_time_ms=throttle_ms, responses=[])
        self._complete(slot, encode_response(spec, header.api_version, header.correlation_id, response))
        self._mute(throttle_ms)

    def _serve_admin_request(self, handler: LocalHandler, spec: ApiSpec, header: RequestHeader, slot: Slot,
                             ctx: RequestContext, request: Any) -> None:
        """Runs a security admin API's handler (`gateway.admin_apis`: database writes, a delegation
        token's key derivations) on the gateway's admin threads, never on the event loop, where one
        client sending them in a loop would stall every other client. As for a SASL step
        (`_authenticate`), the connection is paused until the answer is back, so no later request is
        read meanwhile: the answer takes its place in order. Outcomes as when it ran on the loop:
        InvalidRequestError closes the connection unanswered with Kafka's log lines
        (`_refuse_invalid_request`), AuthorizerNotReadyError aborts it, any other error closes this
        connection only, after the earlier answers (`_serve_frames`); an error encoding the answer is
        one of those (it was a CodecError, logged as an unreadable request, when encoded on the loop).
        A connection closed meanwhile gets no answer: a request still waiting for a thread is not run,
        one running finishes and its frame stays counted until then (`_close_memory`).

        Request-time quota: the handler's time on its thread is recorded for the principal when the
        answer is back (on the loop, where every quota sensor is kept), and may mute the connection as
        `_serve_frames` does for the loop's own time; the time waiting for a thread is not counted, as
        Kafka counts a request's handler-thread time, not its queue time (ClientRequestQuotaManager).
        As Kafka's `RequestHandlerHelper.sendResponseMaybeThrottle` does (KIP-219, every request version
        alike), the answer goes out at once with `throttle_time_ms` set to the mute this request brought
        (for its handler's time, or what is left of the one the loop's part of it began:
        `_quota_mute_left_ms`), then the connection is muted; every version of these APIs has the field."""
        version, correlation_id = header.api_version, header.correlation_id
        principal, client_id = self.principal.name, header.client_id or ""
        spent = [0.0]  # written on the worker thread, read after its outcome is handed back

        def run() -> tuple[Any, bytes]:
            """The answer and its encoding (off the loop; encoded again on the loop only when throttled)."""
            if self.closed:
                # Closed before its turn (read across threads: a flag the loop only ever sets): no one
                # will read the answer nor learn whether it ran, so it does not run for nobody (before
                # the admin threads the handler ran at once, while its connection was open).
                return None, b""
            started = time.perf_counter()
            try:
                message = handler(ctx, version, request)
                return message, encode_response(spec, version, correlation_id, message)
            finally:
                spent[0] = time.perf_counter() - started

        def done(future: Future[tuple[Any, bytes]]) -> None:
            if self.closed:
                # Closed meanwhile (upstream lost, a failed upstream re-authentication): a write that ran
                # stays done, unanswered; the frame the handler read goes back now (`_close_memory`).
                self.paused.discard("admin-request")
                if self._served_frame_held:
                    self._served_frame_held = False
                    self.memory.release()
                return
            # Whatever fails here (the handler, or writing the request log before the answer: `_flush`)
            # closes this connection as `_serve_frames` does; the connection is resumed in any case, so
            # it never stays paused, unanswered, for ever.
            try:
                quotas = self.services.quotas
                throttle = 0
                if quotas is not None:
                    throttle = quotas.record_request_time(principal, client_id, spent[0])
                    if throttle > 0:
                        self._mute(throttle)
                try:
                    message, response = future.result()
                except InvalidRequestError as exc:
                    self._refuse_invalid_request(header, exc)
                    message = None
                except AuthorizerNotReadyError:
                    self.abort("authorizer not ready")
                    message = None
                if message is not None:
                    slot.throttle_ms = max(throttle, self._quota_mute_left_ms())
                    if slot.throttle_ms > 0 and _has_throttle_time(spec, version):
                        message.throttle_time_ms = max(message.throttle_time_ms, slot.throttle_ms)
                        response = encode_response(spec, version, correlation_id, message)
                    self._complete(slot, response)
            except Exception as exc:
                # The type only, as in `_serve_frames`: a message may quote request data or a store's parameters.
                log.error("Closing socket for %s because of error: %s", self.connection_id, type(exc).__name__)
                self._close_after_earlier_answers(f"error serving a request: {type(exc).__name__}")
            self.last_activity = time.monotonic()  # the idle time counts from the answer (`_check_idle`)
            self.resume("admin-request")

        # Never refused: this connection has no other admin request running (it is paused meanwhile), so
        # the waiting ones are bounded by the connection limits; the pool serves client addresses in turn.
        label = f"{spec.name} v{version} of {self.connection_id}"
        if self.gateway.admin_requests.submit(run, done, source=self.client_group, may_refuse=False,
                                              label=label) is not None:
            self.abort("gateway shutting down")  # the pool is closed
            return
        self.pause("admin-request")

    def _refuse_invalid_request(self, header: RequestHeader, error: InvalidRequestError) -> None:
        """Kafka's close for a request its parser refuses (ERROR lines, see gateway.invalid_request),
        unanswered, after the answers to the requests before it."""
        for line in parse_failure_log_lines(
            error, api=api_name(header.api_key), api_version=header.api_version, connection_id=self.connection_id,
            listener=self.options.listener_name, principal=str(self.principal),
        ):
            log.error("%s", line)
        self._close_after_earlier_answers(str(error))

    def _hold_for_topic_ids(self, key: int, request: Any, frame: Frame) -> bool:
        """A Fetch or Produce v13+ (or a Metadata v12+) naming an id the gateway has no name for waits
        (reading paused, the frame kept to be served first) for the gateway's listing of the upstream's
        topics, then is served again, ids still unknown answered UNKNOWN_TOPIC_ID. The listing is
        single-flight for the whole gateway (`topic_ids.ListingGate`): the first miss sends it on its own
        upstream connection, misses meanwhile wait for that one (at most `LISTING_WAIT_S`), and within
        `REFRESH_INTERVAL_S` of its start unknown ids are answered at once. Requests after the held one
        wait too, so the upstream still sees the client's requests in order."""
        if self._topic_ids_asked_for is frame:
            self._topic_ids_asked_for = None  # the listing this frame waited for has ended
            return False
        versions = self.gateway.upstream_versions
        if not self.gateway.topic_ids.missing(request_ids(key, request)) or versions is None or not ids_supported(versions):
            return False
        gate = self.gateway.topic_listing
        miss = gate.on_miss(self, time.monotonic())
        if miss is Miss.ANSWER:
            return False
        if miss is Miss.LIST:
            self._list_topics(versions, gate.listings)
        self._topic_ids_waiting = self._topic_ids_asked_for = frame
        self.pause("topic-ids")
        return True

    def _list_topics(self, versions: Mapping[int, tuple[int, int]], token: int) -> None:
        """The gateway's listing `token`: a Metadata request for every topic on this connection's
        upstream connection (as the gateway's upstream identity); its answer replaces the map."""
        gateway = self.gateway
        spec, version = SPECS[3], refresh_version(versions)
        # Numbered as the client's requests are (`gateway.upstream_ids`): no id of the client's can be
        # taken for it, nor its answer for an acks=0 produce's.
        seq = self.upstream_ids.assign()
        header = RequestHeader(3, version, wire_id(seq), "kgov-gateway", 0)

        def end() -> None:
            for waiter in gateway.topic_listing.finish(token):
                waiter.resume("topic-ids")

        def on_answer(answer: Frame) -> None:
            try:
                gateway.topic_ids.replace(
                    (t.topic_id, t.name) for t in decode_response(spec, version, answer).topics if t.error_code == 0)
            except CodecError as exc:
                self.abort(str(exc))
            end()

        asyncio.get_running_loop().call_later(LISTING_WAIT_S, end)
        self.awaiting_upstream.append(Slot(header, spec, time.perf_counter(), 0, on_answer=on_answer,
                                           upstream_seq=seq))
        self._send_upstream(encode_request(spec, header, refresh_request(spec.request, version)))

    def _send_upstream(self, *parts: Frame | memoryview) -> None:
        up = self.upstream
        if up is not None and up.transport is not None:
            up.transport.writelines(parts)
            return
        # The upstream connection is being established (the client's first requests after its login):
        # the request waits here, and nothing more is read until the connection is up, so what waits is
        # one request, whose frame, when large, keeps its pool memory meanwhile (`_release_served_frame`:
        # "upstream-connecting" is an `_UPSTREAM_BACKLOG` pause). Reading on would hold the client's next
        # requests here, outside `queued_max_request_bytes`.
        self.pending_frames.extend(parts)
        self.pending_bytes += sum(len(p) for p in parts)
        self.pause("upstream-connecting")

    def _mute(self, throttle_ms: int) -> None:
        """KIP-219: answer at once, then stop reading this client for the throttle time. Several
        throttles extend one mute to the latest deadline; a single timer lifts it."""
        loop = asyncio.get_running_loop()
        until = loop.time() + throttle_ms / 1000.0
        if until <= self.muted_until:
            return
        self.muted_until = until
        self.pause("quota")
        if self.mute_handle is None:
            self.mute_handle = loop.call_at(until, self._unmute)

    def _charge_request_time(self, seconds: float, client_id: str | None = None) -> int:
        """Records `seconds` of the gateway's time serving this connection's request (sent with
        `client_id`; default: the last request read) to the principal's request quota
        (`request_percentage`), and mutes the connection when it is over; answers the throttle time (0:
        within the quota)."""
        quotas = self.services.quotas
        if quotas is None:
            return 0
        throttle: int = quotas.record_request_time(
            self.principal.name, self._last_client_id if client_id is None else client_id, seconds)
        if throttle > 0:
            self._mute(throttle)
        return throttle

    def _settle_request_time(self, started: float) -> int:
        """Charges the loop's time on the request being served, since `started`, before its answer is
        decided (so the answer can carry the mute it brings), and marks it charged for `_serve_frames`."""
        self._request_time_settled = True
        return self._charge_request_time(time.perf_counter() - started)

    def _quota_mute_left_ms(self) -> int:
        """How long the quota mute (`_mute`) still holds this connection, in whole milliseconds (0: not
        muted). A KIP-219 answer sent now carries at least this: its request's own throttle time, or the
        rest of the mute the loop's part of that request began."""
        if "quota" not in self.paused:
            return 0
        return max(round((self.muted_until - asyncio.get_running_loop().time()) * 1000), 0)

    def _unmute(self) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() < self.muted_until:
            self.mute_handle = loop.call_at(self.muted_until, self._unmute)
            return
        self.mute_handle = None
        self.resume("quota")

    def _context(self, header: RequestHeader) -> RequestContext:
        return RequestContext(
            principal=self.principal,
            client_address=self.client_host,
            listener=self.options.listener_name,
            security_protocol=self.options.security_protocol,
            client_id=header.client_id or "",
            api_key=header.api_key,
            api_version=header.api_version,
            correlation_id=header.correlation_id,
            token_authenticated=bool(self.sasl and self.sasl.token_authenticated),
        )

    def _now_ms(self) -> int:
        return int(self.services.clock().timestamp() * 1000)

    # -- locally answered protocol -------------------------------------------------------------

    def _answer_api_versions(self, header: RequestHeader, frame: Frame, now: float) -> None:
        spec = SPECS[API_VERSIONS_KEY]
        slot = Slot(header, spec, now, len(frame))
        version = header.api_version
        sasl = self.sasl if self.sasl is not None and self.sasl.authenticating else None
        if sasl is not None:
            # Before the login Kafka's SaslServerAuthenticator answers it, outside the request quota.
            self._request_time_settled = True
        if version > spec.max_version or version < 0:
            # KIP-511: answer v0 with UNSUPPORTED_VERSION and the ApiVersions range we support.
            response = spec.response(error_code=UNSUPPORTED_VERSION, api_keys=[
                spec.response.ApiVersion(api_key=API_VERSIONS_KEY, min_version=0, max_version=spec.max_version)])
            self._complete(slot, encode_response(spec, 0, header.correlation_id, response))
            return
        request = decode_request(spec, header, frame)
        if version >= 3:
            self.software = (request.client_software_name or "unknown", request.client_software_version or "unknown")
        if sasl is not None:
            sasl.api_versions_answered()
        else:
            # Kafka's KafkaApis: charged to the request quota before the answer, which carries the mute it
            # brought (KIP-219, `sendResponseMaybeThrottle`; the field exists from v1).
            throttle = self._charge_request_time(time.perf_counter() - now)
            self._request_time_settled = True
            slot.throttle_ms = max(throttle, self._quota_mute_left_ms())
        if self.gateway.upstream_versions is None:
            self.gateway.spawn(self._api_versions_after_refresh(slot))
            self.slots.append(slot)
            return
        self._complete(slot, self._api_versions_frame(header, slot.throttle_ms))
        self.gateway.maybe_refresh_upstream_versions()

    async def _api_versions_after_refresh(self, slot: Slot) -> None:
        try:
            await self.gateway.refresh_upstream_versions()
        except (TimeoutError, OSError, asyncio.IncompleteReadError, CodecError):
            self.abort("upstream unavailable")
            return
        slot.response = (self._api_versions_frame(slot.header, slot.throttle_ms),)
        self._flush()

    def _api_versions_frame(self, header: RequestHeader, throttle_ms: int) -> bytes:
        spec = SPECS[API_VERSIONS_KEY]
        keys = [spec.response.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, lo, hi in self.gateway.api_versions()]
        response = spec.response(error_code=0, api_keys=keys, throttle_time_ms=throttle_ms)
        return encode_response(spec, header.api_version, header.correlation_id, response)

    def _sasl_handshake(self, spec: ApiSpec, header: RequestHeader, frame: Frame, now: float) -> None:
        assert self.sasl is not None
        request = decode_request(spec, header, frame)
        step = self.sasl.handshake(request.mechanism, header.api_version, self._now_ms())
        response = spec.response(error_code=step.error_code, mechanisms=list(self.sasl.enabled))
        slot = Slot(header, spec, now, len(frame))
        encoded = encode_response(spec, header.api_version, header.correlation_id, response)
        if step.error_code == 0:
            # Kafka reads every frame of an exchange, re-authentications too, under
            # sasl.server.max.receive.size (SaslServerAuthenticator.authenticate).
            self.reader.max_frame_bytes = min(MAX_UNAUTHENTICATED_BYTES, self.options.max_request_bytes)
            if header.api_version == 0:
                self.raw_sasl = True  # v0: the SASL tokens follow as raw size-prefixed frames
        self._after_auth_step(step, slot, encoded, mechanism=request.mechanism)

    def _refuse_during_authentication(self, spec: ApiSpec, header: RequestHeader, frame: Frame, now: float) -> None:
        """Kafka's SaslServerAuthenticator.handleSaslToken: a request other than SaslAuthenticate
        during an exchange gets its own error response with ILLEGAL_SASL_STATE, and the exchange fails."""
        assert self.sasl is not None
        step = self.sasl.refuse_during_authentication(spec.name)
        slot = Slot(header, spec, now, len(frame))
        response = b""
        if not step.silent:
            request = decode_request(spec, header, frame)
            message = error_response(spec.key, request, spec.response, step.error_code)
            response = encode_response(spec, header.api_version, header.correlation_id, message)
        self._after_auth_step(step, slot, response)

    def _close_expired(self, api: str) -> None:
        """Kafka's SocketServer: a request on a channel whose KIP-368 session expired, other than a
        SaslHandshake that begins a re-authentication, closes it at once, unanswered."""
        assert self.sasl is not None and self.sasl.session_expires_ms is not None
        self.gateway.expired_connections_killed += 1
        late_ms = self._now_ms() - self.sasl.session_expires_ms
        log.info("closing %s: the session of %s expired %d ms ago without re-authentication (KIP-368); "
                 "%s refused", self.connection_id, self.principal, late_ms, api)
        self.abort("session expired")

    def _sasl_authenticate(self, spec: ApiSpec, header: RequestHeader, frame: Frame, now: float) -> None:
        request = decode_request(spec, header, frame)
        slot = Slot(header, spec, now, len(frame))

        def answer(step: AuthStep) -> None:
            kwargs: dict[str, Any] = {"error_code": step.error_code, "error_message": step.error_message,
                                      "auth_bytes": step.data}
            if header.api_version >= 1:
                kwargs["session_lifetime_ms"] = step.session_lifetime_ms
            response = encode_response(spec, header.api_version, header.correlation_id, spec.response(**kwargs))
            self._after_auth_step(step, slot, response)

        self._authenticate(bytes(request.auth_bytes), answer)

    def _on_raw_sasl_token(self, frame: Frame, now: float) -> None:
        slot = Slot(RequestHeader(SASL_AUTHENTICATE, 0, 0, None, 0), None, now, len(frame), raw=True)

        def answer(step: AuthStep) -> None:
            if step.done:
                self.raw_sasl = False
            response = b"" if step.failed else len(step.data).to_bytes(4, "big") + step.data
            self._after_auth_step(step, slot, response)

        self._authenticate(bytes(frame), answer)

    def _authenticate(self, data: bytes, answer: Callable[[AuthStep], None]) -> None:
        """Runs one SaslAuthenticate: its mechanism step on the gateway's SASL worker threads
        (`gateway.sasl_steps`), the connection paused meanwhile, so the step's answer comes before any
        later request is read and the session never sees two steps at once. When too many steps wait
        already, a first login fails at once as a failed authentication (audited, delayed)."""
        sasl = self.sasl
        assert sasl is not None
        begun = sasl.begin_authenticate(data)
        if isinstance(begun, AuthStep):
            answer(begun)
            return
        pool = self.gateway.sasl_steps

        def done(future: Future[StepOutcome]) -> None:
            if self.closed:
                return  # the client left while its step ran; the mechanism audited its own failure
            try:
                step = sasl.finish_authenticate(future.result(), self._now_ms())
                if step.done and self._peer_gone():
                    # Reading was paused during the step, so the client's close is seen only now: its
                    # login is dropped, neither audited as a success nor followed by an upstream
                    # connection. (A failure goes on as usual: audited, and closed after the delay.)
                    log.info("client %s closed its connection during its SASL step; its login as %s is dropped",
                             self.connection_id, sasl.principal)
                    self.abort("client closed during its SASL step")
                    return
                answer(step)
            except Exception as exc:
                # Outside `_serve_frames`, which would otherwise close the connection for this fault.
                log.error("Closing socket for %s because of error: %s", self.connection_id, type(exc).__name__)
                self._close_after_earlier_answers(f"error answering a SASL step: {type(exc).__name__}")
            self.last_activity = time.monotonic()  # the idle time counts from the answer (`_check_idle`)
            self.resume("sasl-step")

        refusal = pool.submit(begun.run, done, source=self.client_group, may_refuse=not sasl.reauthenticating,
                              label=f"of {self.connection_id}")
        if refusal is None:
            self.pause("sasl-step")
            return
        if refusal is Refusal.SOURCE_FULL:
            reason = (f"too many SASL steps from {self.client_group} waiting at the gateway "
                      f"({pool.max_waiting_per_source} waiting, gateway.sasl_max_waiting_steps_per_ip)")
            self.gateway.warn_logins_refused(self.client_group)
        elif refusal is Refusal.FULL:
            reason = (f"too many SASL steps waiting at the gateway ({pool.max_waiting} waiting for "
                      f"{pool.workers} worker threads, gateway.sasl_max_waiting_steps)")
            self.gateway.warn_logins_refused()
        else:
            reason = "the gateway is shutting down"
        answer(sasl.refuse_step(reason))

    def _after_auth_step(self, step: AuthStep, slot: Slot, response: bytes, *, mechanism: str | None = None) -> None:
        assert self.sasl is not None
        mechanism = mechanism if mechanism is not None else self.sasl.mechanism_name or ""
        if step.done:
            assert self.sasl.principal is not None
            self.principal = self.sasl.principal
            self.reader.max_frame_bytes = self.options.max_request_bytes
            self.reader.memory = self.memory
            self._audit_auth(True, mechanism, None, step.reauthentication, token_id=step.token_id)
            self._complete(slot, response)
            self._start_upstream()
            return
        if not step.failed:
            if step.reason is not None:  # refused, the connection goes on (a re-authentication too early)
                self._audit_auth(False, mechanism, step.reason, step.reauthentication)
            self._complete(slot, response)
            return
        self._fail_authentication(step, mechanism, slot, response)

    def _refuse_frame(self, sasl: SaslSession, detail: str) -> None:
        """A frame over the SASL size limit (or of negative size) during an exchange: a failed
        authentication (Kafka's SaslAuthenticationException "invalid receive size"), not a bare close."""
        self._fail_authentication(sasl.refuse_frame(detail), sasl.mechanism_name or "", None, b"")

    def _fail_authentication(self, step: AuthStep, mechanism: str, slot: Slot | None, response: bytes) -> None:
        """Audits and logs a failed exchange, holds its answer (`slot`, None: nothing to answer) for the
        failure delay, then answers it after every earlier request's answer and closes."""
        self._audit_auth(False, mechanism, step.reason, step.reauthentication, from_mechanism=step.mechanism_failure,
                         token_id=step.token_id)
        # Kafka's Selector log line; the client's error message, never the audit reason (it may tell
        # whether a user exists).
        log.info("Failed %sauthentication with %s (%s)", "re-" if step.reauthentication else "",
                 self.connection_id, step.error_message or f"error code {step.error_code}")
        # Hold the answer for a fixed delay (no timing side channel), then close. A login refused for a
        # busy gateway waits the same delay before its unanswered close (`SaslSession.refuse_step`): a
        # client flooding with logins reconnects no faster than after a wrong password.
        self.pause("sasl-failed")
        if slot is not None:
            self.slots.append(slot)

        def fail() -> None:
            if self.closed:
                return
            if slot is not None:
                slot.response = () if step.silent else (response,)
            # Requests sent before the failing one may still wait on the upstream (pipelined before a
            # re-authentication): the close waits for their answers, which `_flush` writes in order.
            self._close_once_answered("earlier requests unanswered after a failed authentication")

        delay = self.options.sasl_failure_delay_s
        if slot is not None:
            # Counted from the request's arrival, not from the check's end: the check's own time (a
            # PBKDF2 of one hash or another, or the stand-in's for an unknown name) is then hidden in
            # the delay instead of added to it (the HTTP side: sasl.http_auth).
            delay = max(0.0, delay - (time.perf_counter() - slot.started))
        asyncio.get_running_loop().call_later(delay, fail)

    def _audit_auth(self, success: bool, mechanism: str, reason: str | None, reauth: bool,
                    *, from_mechanism: bool = False, token_id: str | None = None) -> None:
        sink = self.services.auth_audit or self.services.audit
        if sink is None or (from_mechanism and not success and not self.options.audit_auth_failures):
            return
        principal = str(self.sasl.principal) if self.sasl and self.sasl.principal else None
        sink.write(authentication_event(
            source=self.options.source, time=self.services.clock(), principal=principal, mechanism=mechanism,
            client_address=self.client_host, success=success, reason=reason, listener=self.options.listener_name,
            reauthentication=reauth, token_id=token_id,
        ))

    # -- responses ---------------------------------------------------------------------------

    def on_upstream_frame(self, frame: Frame) -> None:
        correlation = int.from_bytes(frame[:4], "big", signed=True)
        awaiting = self.awaiting_upstream
        if not awaiting or correlation != wire_id(awaiting[0].upstream_seq):
            if self.drops_acks_0_answer(correlation):
                return
            self.abort("upstream correlation id mismatch" if awaiting else "unexpected response from upstream")
            return
        slot = awaiting.popleft()
        self.upstream_ids.answered(slot.upstream_seq)
        if slot.spec is None:
            self.abort("upstream correlation id mismatch")
            return
        if slot.on_answer is not None:
            slot.on_answer(frame)
            self._signal_drained()
            return
        started = time.perf_counter()
        spec, header = slot.spec, slot.header
        version = header.api_version
        response: Any = None
        try:
            if slot.sessionless:
                frame = sessionless_response(spec, version, frame)
            if slot.patches:
                response = decode_response(spec, version, frame)
                for patch in slot.patches:
                    patch(response)
            quotas = self.services.quotas
            throttle = slot.throttle_ms
            if quotas is not None:
                client_id = header.client_id or ""
                if header.api_key == 1:
                    quotas.record_fetch(self.principal.name, client_id, len(frame))
                # The gateway's time on the answer is charged as its time on the request was (`_on_request`);
                # the answer carries the mute that follows it: the throttle its request brought, this
                # charge's, or what is left of a longer one (a later request's, the client being muted).
                # Departure: a fetch whose answer goes over the request quota here keeps its records (Kafka
                # would have answered it empty); the gateway has them already, and the consumer would only
                # fetch them again.
                charged = self._charge_request_time(time.perf_counter() - started, client_id)
                throttle = max(throttle, charged, self._quota_mute_left_ms())
            if throttle > 0:
                slot.throttle_ms = throttle
                if _has_throttle_time(spec, version):
                    if response is None:
                        response = decode_response(spec, version, frame)
                    response.throttle_time_ms = max(response.throttle_time_ms, throttle)
        except (CodecError, AuthorizerNotReadyError) as exc:
            self.abort(str(exc))
            return
        if response is not None:
            slot.response = (encode_response(spec, version, header.correlation_id, response),)
        else:
            # as the upstream sent it, under the client's correlation id (`gateway.upstream_ids`)
            slot.response = response_with_correlation_id(frame, header.correlation_id)
        self._flush()
        self._signal_drained()

    def _signal_drained(self) -> None:
        drained = self._upstream_drained
        if drained is not None and not self.awaiting_upstream and not drained.done():
            drained.set_result(None)

    def on_upstream_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            # In-flight requests cannot be answered: disconnecting is the retriable signal every
            # client handles (it reconnects, refreshes metadata and retries).
            self.abort(UPSTREAM_LOST)

    def drops_acks_0_answer(self, correlation: int) -> bool:
        """Whether an upstream frame with `correlation` is an answer to a produce request with acks=0,
        which is dropped (also asked during the gateway's own SASL exchange upstream): one numbered
        after the last answer and before the next awaited request (`UpstreamIds.drops`)."""
        awaiting = self.awaiting_upstream
        return self.upstream_ids.drops(correlation, awaiting[0].upstream_seq if awaiting else None)

    def _complete(self, slot: Slot, response: bytes) -> None:
        slot.response = (response,)
        self.slots.append(slot)
        self._flush()

    def _close_after_failed_acks_0(self, header: RequestHeader) -> None:
        """KafkaApis.handleProduceRequest: an acks=0 request has no answer, so when any part of it
        failed (here: a denied topic; the allowed part has been forwarded) the broker closes the
        connection, which is how the producer learns of it, and logs that at INFO. Departure: the client
        id, the client's own choice, is written as printable text of at most 200 characters (Kafka writes
        it as it is; a line break in it would forge log lines)."""
        log.info("Closing connection due to error during produce request with correlation id %d from client "
                 "id %s with ack=0", header.correlation_id, printable(header.client_id))
        self._close_after_earlier_answers("a failed produce request with acks=0")

    def _finish_without_response(self, slot: Slot) -> None:
        slot.response = ()
        self.slots.append(slot)
        self._flush()

    def _flush(self) -> None:
        transport = self.transport
        if transport is None:
            return
        slots = self.slots
        while slots and slots[0].response is not None:
            slot = slots.popleft()
            # Audit first: once a client has seen an answer, its request-log event exists.
            self._log_request(slot)
            if slot.response and not self.closed:
                transport.writelines(slot.response)
        if self.closing_after_answers and not slots and not self.closed:
            self.close_after_flush()
            return
        if "in-flight" in self.paused and len(slots) < MAX_IN_FLIGHT // 2:
            self.resume("in-flight")

    def _log_request(self, slot: Slot) -> None:
        sink = self.services.audit
        if sink is None:
            return
        h = slot.header
        entry = request_log_entry(
            api_key=h.api_key, api_version=h.api_version,
            api_name=slot.spec.name if slot.spec else "SASL_AUTHENTICATE",
            correlation_id=h.correlation_id, client_id=h.client_id, connection=self.connection_id,
            principal=str(self.principal), listener=self.options.listener_name,
            security_protocol=self.options.security_protocol,
            software_name=self.software[0], software_version=self.software[1],
            total_time_ms=(time.perf_counter() - slot.started) * 1000, throttle_time_ms=slot.throttle_ms,
            request_bytes=slot.request_bytes + 4, response_bytes=sum(map(len, slot.response or ())),
            records_bytes=slot.records_bytes, forwarded=slot.forwarded,
        )
        now = self.services.clock()
        sink.write(request_event(source=self.options.source, time=now, entry=entry))
        lines = self.services.request_lines
        if lines is not None:
            lines.write_line(request_log_line(now, entry))


async def serve_forever(gateway: Gateway, stop: asyncio.Event) -> None:
    await gateway.start()
    try:
        await stop.wait()
    finally:
        await gateway.close()
