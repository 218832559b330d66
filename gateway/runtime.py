"""Assembling a gateway from kgov settings: storage, audit files, authorizer, credentials, quotas.

Used by `kgov gateway` and `kgov up`. `settings` is kgov's Settings object (duck-typed here, since
`gateway` must not import `kgov`). Every node reads users, ACLs, roles, tokens and quotas from the
same database as `kgov serve`; the services poll it for changes made elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.engine import Engine

from audit.kafka_sink import KafkaSink
from audit.sinks import AuditSink, JsonLinesSink, MultiSink, TextLineSink
from authz.database import open_engine
from authz.model import Principal
from authz.service import AuthorizerService
from gateway.admin_apis import admin_handlers
from gateway.config import GatewayConfig, parse_host_port, refuse_weak_admin_password_beyond_loopback
from gateway.proxy import Gateway, GatewayOptions, Services
from gateway.quota_store import QuotaStore
from gateway.quotas import QuotaEnforcer
from gateway.ssl_principal_mapping import parse_rules
from gateway.upstream_login import OAuthBearerLogin
from gateway.upstream_token import RefreshPolicy, UpstreamTokenSource
from sasl.service import CredentialService


@dataclass
class GatewayRuntime:
    gateway: Gateway
    authorizer: AuthorizerService
    credentials: CredentialService
    quotas: QuotaEnforcer
    engine: Engine
    # Ships the gateway's audit events to `[audit] kafka_topic` when configured (audit.kafka_sink).
    audit_kafka: KafkaSink | None = None
    _closers: list[Callable[[], None]] = field(default_factory=list)
    _stopped: bool = False

    @property
    def upstream_tokens(self) -> UpstreamTokenSource | None:
        """The gateway's upstream OAUTHBEARER token source, whose refresher this runtime runs."""
        login = self.gateway.options.upstream_oauth
        return login.tokens if login is not None else None

    async def start(self) -> None:
        """Fetches the upstream token (if the gateway logs in with OAUTHBEARER) and starts its
        background refresher, then opens the listener. A client credential the token endpoint
        refuses raises `UpstreamLoginError`; an endpoint that is down only delays the token (it is
        retried in the background and logins fail meanwhile)."""
        tokens = self.upstream_tokens
        if tokens is not None:
            await tokens.start()
        await self.gateway.start()

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        await self.gateway.close()
        tokens = self.upstream_tokens
        if tokens is not None:
            await tokens.close()
        for close in reversed(self._closers):
            with contextlib.suppress(Exception):
                close()


def server_ssl_context(config: GatewayConfig) -> ssl.SSLContext | None:
    if config.security_protocol not in ("SSL", "SASL_SSL"):
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    assert config.tls_cert_file is not None and config.tls_key_file is not None
    ctx.load_cert_chain(str(config.tls_cert_file), str(config.tls_key_file))
    if config.tls_client_auth != "none":
        assert config.tls_ca_file is not None
        ctx.load_verify_locations(cafile=str(config.tls_ca_file))
        ctx.verify_mode = ssl.CERT_REQUIRED if config.tls_client_auth == "required" else ssl.CERT_OPTIONAL
    return ctx


def upstream_ssl_context(config: GatewayConfig) -> ssl.SSLContext | None:
    if config.upstream_security_protocol not in ("SSL", "SASL_SSL"):
        return None
    ctx = ssl.create_default_context(cafile=str(config.upstream_ca_file) if config.upstream_ca_file else None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def build_runtime(
    settings: Any,
    *,
    listen: str | None = None,
    upstream: str | None = None,
    engine: Engine | None = None,
    clock: Callable[[], datetime] | None = None,
    extra_audit: AuditSink | None = None,
) -> GatewayRuntime:
    config: GatewayConfig = settings.gateway
    # Name where the value came from: an option, or the setting (file or KGOV_GATEWAY__* variable).
    listen_host, listen_port = parse_host_port(listen or config.listen,
                                               "--listen" if listen else "gateway.listen (KGOV_GATEWAY__LISTEN)")
    upstream_text = upstream or config.upstream
    if not upstream_text:
        raise ValueError("the gateway needs an upstream cluster: pass --upstream HOST:PORT or set gateway.upstream")
    # Parsed before anything is opened, so that a refusal leaves no database or thread behind.
    upstream_address = parse_host_port(upstream_text,
                                       "--upstream" if upstream else "gateway.upstream (KGOV_GATEWAY__UPSTREAM)")
    if getattr(settings, "dev_mode", False):
        refuse_weak_admin_password_beyond_loopback(getattr(settings, "weak_admin_password", False), [listen_host])
    enabled = [m.upper() for m in settings.sasl.enabled_mechanisms]
    unknown = [m for m in (config.mechanisms or []) if m.upper() not in enabled]
    if unknown:
        # Offered but refused at every handshake (UNSUPPORTED_SASL_MECHANISM): say so at start instead.
        raise ValueError(f"gateway.mechanisms names {', '.join(unknown)}, which [sasl] enabled_mechanisms "
                         f"({', '.join(enabled) or 'none'}) does not enable")
    sealed = settings.audit_integrity_key()  # before anything is opened: a missing configured key stops here
    seal_key = settings.audit_seal_key()  # (the same for the Kafka sink's seal key)
    now = clock or (lambda: datetime.now(UTC))
    own_engine = engine is None
    engine = engine or open_engine(settings.database_url)
    audit_dir = settings.audit_dir
    events = JsonLinesSink(audit_dir / "gateway-events.jsonl", max_bytes=settings.audit.max_bytes,
                           backups=settings.audit.backups, integrity=sealed)
    lines = TextLineSink(audit_dir / "gateway-kafka-authorizer.log", max_bytes=settings.audit.max_bytes,
                         backups=settings.audit.backups, integrity=sealed)
    request_lines = TextLineSink(audit_dir / "gateway-kafka-request.log", max_bytes=settings.audit.max_bytes,
                                 backups=settings.audit.backups, integrity=sealed)
    kafka = KafkaSink.from_settings(settings.audit, seal_key)
    extra = [s for s in (kafka, extra_audit) if s is not None]
    sink: AuditSink = MultiSink([events, *extra]) if extra else events
    source = f"crn:///kafka={settings.cluster_id}"
    authorizer = AuthorizerService(
        engine, settings.authz, audit=sink, lines=lines, source=source, clock=now,
        extra_super_users=frozenset({Principal("User", settings.admin.user)}),
    )
    authorizer.start(background=True)
    credentials = CredentialService(engine, settings, audit=sink, clock=now, source=source)
    quota_store = QuotaStore(engine)
    quota_store.migrate()
    quotas = QuotaEnforcer(quota_store, window_num=config.quota_window_num,
                           window_size_s=config.quota_window_size_s)
    quotas.start()
    mechanisms = tuple(m.upper() for m in (config.mechanisms or credentials.enabled_mechanisms))
    options = GatewayOptions(
        listen_host=listen_host,
        listen_port=listen_port,
        upstream=upstream_address,
        advertised_host=config.advertised_host,
        address_mode=config.address_mode,
        node_port_base=config.node_port_base,
        listener_name=config.listener_name,
        security_protocol=config.security_protocol,
        ssl_context=server_ssl_context(config),
        ssl_principal_mapper=parse_rules(config.ssl_principal_mapping_rules),
        upstream_ssl=upstream_ssl_context(config),
        sasl_mechanisms=mechanisms,
        mechanism_factory=credentials.server_mechanism,
        max_reauth_ms=settings.sasl.connections_max_reauth_ms,
        max_request_bytes=config.max_request_bytes,
        queued_max_request_bytes=config.queued_max_request_bytes,
        queued_max_request_bytes_per_ip=config.queued_max_request_bytes_per_ip,
        large_request_min_bytes_per_s=config.large_request_min_bytes_per_s,
        idle_timeout_s=config.idle_timeout_s,
        max_connections=config.max_connections,
        max_connections_per_ip=config.max_connections_per_ip,
        max_connections_per_ip_overrides=config.max_connections_per_ip_overrides,
        sasl_failure_delay_s=credentials.failure_delay_s,
        sasl_workers=config.sasl_workers,
        sasl_max_waiting_steps=config.sasl_max_waiting_steps,
        sasl_max_waiting_steps_per_ip=config.sasl_max_waiting_steps_per_ip,
        audit_auth_failures=False,
        source=source,
        upstream_sasl=_upstream_login(config),
        upstream_oauth=upstream_oauth_login(config, now_ms=lambda: int(now().timestamp() * 1000)),
    )
    services = Services(
        authorizer=authorizer,
        audit=sink if config.request_log else None,
        auth_audit=sink,
        clock=now,
        quotas=quotas,
        local_handlers=admin_handlers(authorizer, credentials, quota_store, quotas),
        request_lines=request_lines if config.request_log else None,
    )
    runtime = GatewayRuntime(Gateway(options, services), authorizer, credentials, quotas, engine, kafka)
    if kafka is not None:
        runtime._closers.append(kafka.close)  # closed last: ships what is buffered, within its bounded wait
    runtime._closers.extend([authorizer.close, quotas.close, events.close, lines.close, request_lines.close])
    if own_engine:
        runtime._closers.append(engine.dispose)
    return runtime


def _upstream_login(config: GatewayConfig) -> tuple[str, str, str] | None:
    if config.upstream_login in (None, "OAUTHBEARER"):
        return None
    assert config.upstream_username is not None and config.upstream_password is not None
    return config.upstream_sasl_mechanism, config.upstream_username, config.upstream_password.get_secret_value()


def upstream_oauth_login(config: GatewayConfig, *, now_ms: Callable[[], int]) -> OAuthBearerLogin | None:
    """The gateway's OAUTHBEARER login to its upstream, when configured (`GatewayConfig` validated it)."""
    if config.upstream_login != "OAUTHBEARER":
        return None
    endpoint, client_id = config.upstream_oauth_token_endpoint, config.upstream_oauth_client_id
    secret = config.upstream_oauth_client_secret
    assert endpoint is not None and client_id is not None and secret is not None
    ctx = ssl.create_default_context(
        cafile=str(config.upstream_oauth_ca_file) if config.upstream_oauth_ca_file else None
    )
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    policy = RefreshPolicy(
        window_factor=config.upstream_oauth_refresh_window_factor,
        window_jitter=config.upstream_oauth_refresh_window_jitter,
        min_period_ms=config.upstream_oauth_refresh_min_period_s * 1000,
        buffer_ms=config.upstream_oauth_refresh_buffer_s * 1000,
        retry_backoff_ms=config.upstream_oauth_retry_backoff_ms,
        retry_backoff_max_ms=config.upstream_oauth_retry_backoff_max_ms,
    )
    tokens = UpstreamTokenSource(
        endpoint, client_id, secret.get_secret_value(), scope=config.upstream_oauth_scope,
        urlencode_header=config.upstream_oauth_header_urlencode, ssl_context=ctx, now_ms=now_ms, policy=policy,
    )
    return OAuthBearerLogin(tokens, dict(config.upstream_oauth_extensions))


async def serve(runtime: GatewayRuntime, stop: asyncio.Event) -> None:
    await runtime.start()
    try:
        await stop.wait()
    finally:
        await runtime.stop()
