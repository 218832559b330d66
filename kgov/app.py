"""Assembles the control plane: storage, audit trail, authorizer, authentication, and every
package's routes. No domain logic here.

Each package installs its routes with `<package>.api.install(app)` and reads what it needs from
`app.state`: `settings`, `engine`, `authorizer`, `authenticator`, `audit`, `clock`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import authz.api
import gateway.api
import registry.api
import sasl.api
from audit.kafka_sink import KafkaSink
from audit.sinks import JsonLinesSink, MultiSink, TextLineSink
from authz.database import open_engine
from authz.http import (
    PEER_SCOPE_KEY,
    ApiError,
    api_error_response,
    authenticated_principal,
    authorize_http,
    listed_proxy,
    logged_incident,
)
from authz.model import CLUSTER_RESOURCE_NAME, USER_WILDCARD, Operation, Principal, ResourceType
from authz.service import AuthorizerService
from kgov import __version__
from kgov.private_files import private_dir, private_file, sqlite_file
from kgov.settings import Settings, web_origin
from sasl.http_auth import build_authenticator

log = logging.getLogger("kgov")

Clock = Callable[[], datetime]


class _AuthzCollector:
    """Prometheus metrics read from the services at scrape time (nothing is counted twice)."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def collect(self) -> Any:
        service: AuthorizerService = self.app.state.authorizer
        decisions = CounterMetricFamily("kgov_authz_decisions", "Audited authorization decisions", labels=["result"])
        decisions.add_metric(["allowed"], service.decisions_allowed)
        decisions.add_metric(["denied"], service.decisions_denied)
        yield decisions
        yield CounterMetricFamily("kgov_audit_write_failures", "Audit records that could not be written",
                                  value=service.audit_failures)
        yield from _audit_kafka_metrics(self.app.state.audit_kafka)
        yield GaugeMetricFamily("kgov_authz_acls", "ACLs in the live snapshot", value=len(service.data))
        state = service.snapshot_state()
        yield GaugeMetricFamily("kgov_authz_snapshot_age_seconds",
                                "Seconds since the database last confirmed the ACL snapshot current",
                                value=state.age_s or 0.0)
        yield GaugeMetricFamily("kgov_authz_snapshot_stale",
                                "1 while the ACL snapshot is older than authz.max_snapshot_age_s (all but super "
                                "users denied)", value=1.0 if state.stale else 0.0)
        credentials = getattr(self.app.state, "credentials", None)  # set by sasl.api.install
        if credentials is not None:
            creds = credentials.snapshot_state()
            yield GaugeMetricFamily("kgov_sasl_snapshot_age_seconds",
                                    "Seconds since the database last confirmed the credential snapshot current",
                                    value=creds.age_s)
            yield GaugeMetricFamily("kgov_sasl_snapshot_stale",
                                    "1 while the credential snapshot is older than sasl.max_snapshot_age_s (logins "
                                    "fail closed)", value=1.0 if creds.stale else 0.0)
            yield CounterMetricFamily("kgov_sasl_store_outages",
                                      "Times the credential store stopped answering this node's checks",
                                      value=creds.outages)


def _audit_kafka_metrics(sinks: dict[str, KafkaSink]) -> Any:
    """The Kafka audit sinks' counters (audit.kafka_sink), by component; nothing when none is configured."""
    if not sinks:
        return
    labels = ["component"]
    shipped = CounterMetricFamily("kgov_audit_kafka_shipped_events", "Audit events delivered to the Kafka topic",
                                  labels=labels)
    failures = CounterMetricFamily("kgov_audit_kafka_delivery_failures",
                                   "Failed attempts to ship audit events to Kafka (the events are retried)",
                                   labels=labels)
    unshipped = CounterMetricFamily("kgov_audit_kafka_unshipped_events",
                                    "Audit events that will not reach the Kafka topic (they are in the audit "
                                    "file): buffer full, too large, left at shutdown", labels=[*labels, "reason"])
    buffered = GaugeMetricFamily("kgov_audit_kafka_buffered_events", "Audit events waiting to be shipped to Kafka",
                                 labels=labels)
    for component, sink in sorted(sinks.items()):
        stats = sink.stats()
        shipped.add_metric([component], stats.shipped)
        failures.add_metric([component], stats.delivery_failures)
        unshipped.add_metric([component, "buffer_full"], stats.buffer_full)
        unshipped.add_metric([component, "too_large"], stats.too_large)
        unshipped.add_metric([component, "shutdown"], stats.unshipped_at_close)
        buffered.add_metric([component], stats.buffered_events)
    yield from (shipped, failures, unshipped, buffered)


def _private_storage(settings: Settings) -> None:
    """Owner-only modes on the data directory, the SQLite file and the audit directory (see
    private_files); the audit files themselves are made private where their sinks are built."""
    private_dir(settings.data_dir)
    db_file = sqlite_file(settings.database_url)
    if db_file is not None and db_file.parent.is_dir():
        private_file(db_file)
    private_dir(settings.audit_dir)


class _BodyTooLarge(Exception):
    pass


class RequestBodyLimit:
    """Answers 413 to a request whose body passes `max_bytes`, declared or streamed (chunked), and stops
    reading it there. Whatever the app answers after the cap tripped (FastAPI turns the failed read into
    a 400) is replaced by the 413."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(scope, receive, send)
            return
        received = 0
        exceeded = started = False

        async def limited_receive() -> Message:
            nonlocal received, exceeded
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    exceeded = True
                    raise _BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            # _BodyTooLarge itself, or whatever a handler made of it (an exception group, ...)
            if not exceeded:
                raise
        if exceeded and not started:
            await self._too_large(scope, receive, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = JSONResponse(status_code=413, headers={"Connection": "close"}, content={
            "error_code": 413, "message": f"Request body larger than {self.max_bytes} bytes (http_request_max_bytes)"})
        await response(scope, receive, send)


class TrailingSlashTolerance:
    """Answers a route under both spellings, `/subjects` and `/subjects/`, as Confluent's servers do (Jersey
    matches a resource path with or without one trailing slash), instead of Starlette's redirect, whose
    `Location` was built from the client-chosen Host header and this server's own scheme (`http://` behind
    a TLS proxy): a redirect to wherever the client's Host said, or a downgrade. One literal trailing slash
    of the request target is dropped before routing (`redirect_slashes` is off); an encoded one (`%2F`, a
    subject name ending in `/`) is part of a name and stays."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw: bytes = scope.get("raw_path") or scope["path"].encode()
            path: str = scope["path"]
            if len(raw) > 1 and raw.endswith(b"/") and path.endswith("/"):
                scope = {**scope, "path": path[:-1], "raw_path": raw[:-1]}
        await self.app(scope, receive, send)


class SecurityHeaders:
    """Headers every answer carries, whichever layer wrote it (a route, an error handler, the registry's
    fast path, RequestBodyLimit's 413; the unhandled-error 500 through `harden`), unless that layer set its
    own. uvicorn's own refusals of requests no route sees (400, and kgov.http_server's 408/431) carry none:

    - `Cache-Control: no-store`: answers hold secrets (a delegation token's HMAC, `/oauth/token`'s token)
      or what a caller's ACLs let it read; no browser or proxy cache may keep them. A route that wants
      caching says so (the JWKS: `public, max-age=300`).
    - `X-Content-Type-Options: nosniff` and a CSP that loads nothing and may not be framed: an answer that
      echoes a subject name or schema text can never be run as a page. Not on the dev-mode Swagger UI
      (`docs_paths`), which loads its scripts from a CDN.
    - `Strict-Transport-Security` on HTTPS (served with --tls-cert, or a listed proxy's X-Forwarded-Proto).

    No CORS headers: no route answers a browser on another origin."""

    CONTENT_SECURITY_POLICY = "default-src 'none'; frame-ancestors 'none'"

    def __init__(self, app: ASGIApp, docs_paths: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.docs_paths = docs_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def hardened_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.harden(MutableHeaders(scope=message), scope, csp=scope["path"] not in self.docs_paths)
            await send(message)

        await self.app(scope, receive, hardened_send)

    @classmethod
    def harden(cls, headers: MutableHeaders, scope: Scope, *, csp: bool = True) -> None:
        """Adds the headers to an answer's own. Also called by the unhandled-error handler: Starlette
        answers those from ServerErrorMiddleware, which wraps every middleware the app adds."""
        headers.setdefault("cache-control", "no-store")
        headers.setdefault("x-content-type-options", "nosniff")
        if csp:
            headers.setdefault("content-security-policy", cls.CONTENT_SECURITY_POLICY)
        if scope.get("scheme") == "https":
            headers.setdefault("strict-transport-security", "max-age=31536000")


class CrossSiteWriteGuard:
    """Refuses (403, 40301) a request that may change something when a browser says it comes from a page of
    another site: a `Sec-Fetch-Site` other than same-origin/none, or an `Origin` whose host is not this one.

    Browsers keep the Basic credentials typed at the prompt our 401 challenge raises and attach them to
    requests any site makes; a POST without a body (binding a cluster role such as SystemAdmin), or with a
    JSON body but no Content-Type (the registry reads it as JSON, as Confluent's does: registering a
    schema), needs no CORS preflight, so the other site cannot read the answer but the change is made. API clients (Java, Python, librdkafka's
    and Confluent's, curl) send neither header. Reads stay open: the browser keeps their answers from the
    other site. A departure from Confluent's REST servers, which have no such check; callers without a
    browser's headers see no difference.

    Behind a reverse proxy that rewrites Host, a page of kgov's own public address sends an Origin whose
    host is not the Host this server sees: `http_public_origins` lists such origins (exactly, scheme and
    port included), which are then this site too. Empty by default: only the Host seen here."""

    SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

    def __init__(self, app: ASGIApp, public_origins: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.public_origins = public_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in self.SAFE_METHODS and self._from_another_site(scope):
            response = JSONResponse(status_code=403, content={
                "error_code": 40301,
                "message": "Requests from a web page of another site may not change anything here"})
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _from_another_site(self, scope: Scope) -> bool:
        headers = Headers(scope=scope)
        site = headers.get("sec-fetch-site")
        if site is not None and site.lower() not in ("same-origin", "none"):
            return True
        origin = headers.get("origin")
        # Hosts only: behind a TLS-terminating proxy the scheme this server sees may differ from the page's.
        if origin is None or urlsplit(origin).netloc.lower() == headers.get("host", "").lower():
            return False
        try:
            return web_origin(origin) not in self.public_origins
        except ValueError:  # "null" (a sandboxed or file: page), or anything no browser sends for a site
            return True


class UnlistedProxyWarning:
    """Logs one warning, the first time a request carries `X-Forwarded-For` from a peer that is not in
    `http_forwarded_allow_ips` (whose forwarded addresses are therefore not believed). If that peer is a
    reverse proxy in front of kgov, every client behind it has the proxy's address: one failed-login
    allowance for all of them (`sasl.max_failed_attempts_per_address` bad passwords from anyone, and every
    login through that proxy, the admin's included, is refused for `sasl.failed_attempts_window_s`), one
    host for ACL host rules, one address in the audit trail. Any client can send the header itself, so
    this warns, once per process, and refuses nothing; after that it costs one attribute test."""

    def __init__(self, app: ASGIApp, proxies: Sequence[str]) -> None:
        self.app = app
        self.proxies = tuple(proxies)
        self.warned = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.warned and scope["type"] == "http":
            peer = scope.get(PEER_SCOPE_KEY) or scope.get("client")
            address = str(peer[0]) if peer else None
            if (any(name == b"x-forwarded-for" for name, _ in scope["headers"])
                    and not listed_proxy(address, self.proxies)):
                self.warned = True
                log.warning("a request from %s carried X-Forwarded-For, and %s is not in http_forwarded_allow_ips: "
                            "if it is a reverse proxy in front of kgov, list it there, or every client behind it "
                            "shares its address: one failed-login allowance (sasl.max_failed_attempts_per_address "
                            "bad passwords from anyone refuse every login through it for "
                            "sasl.failed_attempts_window_s, the admin's too), "
                            "one host for ACL host rules, one address in the audit trail", address, address)
        await self.app(scope, receive, send)


def build_app(settings: Settings, *, clock: Clock | None = None) -> FastAPI:
    _private_storage(settings)
    if settings.oauth.signing_key_secret is None and not settings.dev_mode:
        # Whoever reads the database (a backup, a replica) could then sign tokens for any principal.
        log.warning("oauth.signing_key_secret is not set: the token issuer's private keys are stored unencrypted "
                    "in the database; set KGOV_OAUTH__SIGNING_KEY_SECRET to a long random value")
    engine = open_engine(settings.database_url)
    audit_dir = settings.audit_dir
    sealed = settings.audit_integrity_key()
    seal_key = settings.audit_seal_key()
    events = JsonLinesSink(private_file(audit_dir / "events.jsonl"), max_bytes=settings.audit.max_bytes,
                           backups=settings.audit.backups, integrity=sealed)
    lines = TextLineSink(private_file(audit_dir / "kafka-authorizer.log"), max_bytes=settings.audit.max_bytes,
                         backups=settings.audit.backups, integrity=sealed)
    # A copy of the events for a Kafka topic, when `[audit] kafka_bootstrap_servers` is set; the file stays
    # the record of truth (audit.kafka_sink).
    kafka = KafkaSink.from_settings(settings.audit, seal_key)
    audit = MultiSink([events] if kafka is None else [events, kafka])
    now = clock or (lambda: datetime.now(UTC))
    authorizer = AuthorizerService(
        engine,
        settings.authz,
        audit=audit,
        lines=lines,
        source=f"crn:///kafka={settings.cluster_id}",
        clock=now,
        # The bootstrap admin is a super user, so a fresh install can grant everything else.
        extra_super_users=frozenset({Principal("User", settings.admin.user)}),
    )
    authorizer.start(background=False)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        authorizer.start(background=True)
        try:
            yield
        finally:
            authorizer.close()
            events.close()
            lines.close()
            if kafka is not None:
                kafka.close()  # ships what is buffered for at most `[audit] kafka_close_timeout_s`
            engine.dispose()

    # Swagger UI pulls its scripts from a CDN into the page where an admin types credentials: a dev-mode
    # convenience only. /openapi.json stays (the contract is public, as openapi.yaml in the repository).
    app = FastAPI(title="kgov control plane", version=__version__, lifespan=lifespan,
                  docs_url="/docs" if settings.dev_mode else None, redoc_url=None)
    app.state.settings = settings
    app.state.engine = engine
    app.state.authorizer = authorizer
    app.state.audit = audit
    # Kafka audit sinks by component, for /metrics; `kgov up` adds its gateway's.
    app.state.audit_kafka = {"control_plane": kafka} if kafka is not None else {}
    app.state.clock = now
    # More reasons for /health to answer 503: each returns None when fine, else what is wrong (no secrets).
    # `kgov up` adds its embedded broker's (kgov.broker_supervisor).
    app.state.health_checks = []
    app.state.authenticator = build_authenticator(app.state)

    app.router.redirect_slashes = False  # TrailingSlashTolerance: no Location built from the Host header
    app.add_middleware(RequestBodyLimit, max_bytes=settings.http_request_max_bytes)
    app.add_middleware(TrailingSlashTolerance)
    _install_error_handlers(app)
    _install_operations(app)
    authz.api.install(app)
    sasl.api.install(app)
    registry.api.install(app)
    gateway.api.install(app)
    app.add_middleware(CrossSiteWriteGuard, public_origins=frozenset(settings.http_public_origins))
    app.add_middleware(UnlistedProxyWarning, proxies=settings.http_forwarded_allow_ips)
    # Last, so outermost: it also sees the answers of the middlewares the packages installed.
    docs = (app.docs_url, app.swagger_ui_oauth2_redirect_url) if app.docs_url else ()
    app.add_middleware(SecurityHeaders, docs_paths=frozenset(path for path in docs if path))
    _warn_when_nobody_can_log_in(settings, app.state.credentials)
    return app


def _warn_when_nobody_can_log_in(settings: Settings, credentials: Any) -> None:
    """A first `kgov serve` without `[admin] password` starts fine, yet no one can use it: say how
    to get a first user (tokens of an external identity provider, `[oauth] jwks_url`, need none)."""
    if settings.oauth.jwks_url is None and not credentials.describe_scram_users():
        log.warning("no user has credentials yet, so no one can log in: set KGOV_ADMIN__PASSWORD (creates the "
                    "super user User:%s at start) or add users with `kgov users add NAME --password-stdin`",
                    settings.admin.user)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return api_error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for err in exc.errors():
            if err.get("type") == "json_invalid":
                problems.append(f"Malformed JSON body: {err.get('ctx', {}).get('error', 'cannot parse')}")
                continue
            where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
            problems.append(f"{where}: {err.get('msg', 'invalid')}" if where else str(err.get("msg", "invalid")))
        return JSONResponse(status_code=400, content={"error_code": 400, "message": "; ".join(problems)})

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(status_code=exc.status_code, headers=getattr(exc, "headers", None),
                            content={"error_code": exc.status_code, "message": str(exc.detail)})

    @app.exception_handler(ClientDisconnect)
    async def _client_gone(_: Request, __: ClientDisconnect) -> Response:
        # The client left before its body was read (or kgov.http_server cut off one that did not arrive
        # in time): nobody to answer, nothing wrong here, so not the 500 and traceback below, which a
        # client could have written to the log at will.
        return Response(status_code=400)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # The detail goes to the log (never secrets: handlers do not put them in exceptions), not the client,
        # which gets the id of the log line.
        incident = logged_incident(log, "unhandled error", request, exc)
        response = JSONResponse(status_code=500, content={"error_code": 50001,
                                                          "message": f"Internal server error (incident {incident})"})
        SecurityHeaders.harden(response.headers, request.scope)  # sent from outside SecurityHeaders
        return response


def _install_operations(app: FastAPI) -> None:
    registry = CollectorRegistry()
    registry.register(_AuthzCollector(app))
    settings: Settings = app.state.settings
    scrapers = settings.metrics.principal_set

    async def may_scrape(request: Request) -> None:
        """401 without valid credentials; 403 unless the caller is a listed scraper or may DESCRIBE the
        cluster. Listed scrapers are let through without an authorizer call, so a scrape every few
        seconds neither counts as a decision in the metrics it reads nor writes to the audit trail."""
        principal = await authenticated_principal(request)
        if principal in scrapers or USER_WILDCARD in scrapers:
            return
        authorize_http(request, principal, ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, Operation.DESCRIBE,
                       method_name="metrics.Scrape")

    @app.get("/health", tags=["operations"])
    def health() -> dict[str, str]:
        authorizer: AuthorizerService = app.state.authorizer
        authorizer.data  # raises (500) until the first ACL load completed  # noqa: B018
        if authorizer.snapshot_state().stale:
            # Out of the load balancer: this node denies every request but super users' (authz.max_snapshot_age_s).
            raise StarletteHTTPException(503, "ACL snapshot older than authz.max_snapshot_age_s: database unreachable")
        for check in app.state.health_checks:
            if (problem := check()) is not None:
                raise StarletteHTTPException(503, problem)
        return {"status": "UP"}

    @app.get("/metrics", tags=["operations"], response_class=PlainTextResponse)
    async def metrics(request: Request) -> PlainTextResponse:
        """Prometheus metrics. Needs credentials unless `[metrics] public = true` (see kgov.settings.MetricsConfig)."""
        if not settings.metrics.public:
            await may_scrape(request)
        return PlainTextResponse(generate_latest(registry).decode(), media_type="text/plain; version=0.0.4")
