"""Gateway settings (section `[gateway]`, environment `KGOV_GATEWAY__*`)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from gateway.connection_limits import DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS_PER_IP, parse_overrides
from gateway.frame_memory import DEFAULT_LARGE_REQUEST_MIN_BYTES_PER_S, DEFAULT_QUEUED_MAX_REQUEST_BYTES
from gateway.ssl_principal_mapping import DEFAULT_RULES, SslPrincipalMappingError, parse_rules
from sasl.config import is_loopback_host

SecurityProtocol = Literal["PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL"]
UpstreamMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
# KIP-342 SASL extensions (Kafka's OAuthBearerClientInitialResponse): names are letters only and
# `auth` is reserved; values are printable ASCII, space, tab, CR or LF.
_EXTENSION_NAME = re.compile(r"[A-Za-z]+")
_EXTENSION_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")


class GatewayConfig(BaseModel):
    # A validation error would otherwise echo the whole section, upstream secrets included.
    model_config = ConfigDict(hide_input_in_errors=True)

    listen: str = "127.0.0.1:9192"
    upstream: str | None = None
    # The client-facing listener. Default: SASL over plain TCP with every enabled mechanism.
    security_protocol: SecurityProtocol = "SASL_PLAINTEXT"
    listener_name: str = "EXTERNAL"
    # None: the credential service's `[sasl] enabled_mechanisms`.
    mechanisms: list[str] | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    # Kafka's ssl.client.auth: with `required`/`requested`, client certificates are verified against
    # tls_ca_file and, on an SSL listener, the principal is User:<subject DN as Java writes it>, through
    # ssl_principal_mapping_rules (`gateway.x500_name`, `gateway.ssl_principal_mapping`).
    tls_client_auth: Literal["none", "requested", "required"] = "none"
    tls_ca_file: Path | None = None
    # Kafka's ssl.principal.mapping.rules (KIP-371): how a client certificate's subject DN becomes the
    # principal name on an SSL listener; parsed at start (`gateway.ssl_principal_mapping`).
    ssl_principal_mapping_rules: str = DEFAULT_RULES
    # How brokers are advertised: `per-node` (broker n on node_port_base + n) or `single` (all on
    # the listener; right for a one-node upstream such as Tansu, or a load-balanced endpoint).
    address_mode: Literal["per-node", "single"] = "per-node"
    advertised_host: str | None = None
    node_port_base: int | None = Field(default=None, ge=1, le=65535)
    # Upstream connection: optional TLS (CA file, or the system store) and a service credential.
    upstream_security_protocol: SecurityProtocol = "PLAINTEXT"
    upstream_ca_file: Path | None = None
    upstream_sasl_mechanism: UpstreamMechanism = "SCRAM-SHA-512"
    upstream_username: str | None = None
    upstream_password: SecretStr | None = Field(default=None, repr=False)
    # OAUTHBEARER upstream (librdkafka's sasl.oauthbearer.method=oidc): an OIDC client-credentials
    # token from this endpoint, the client secret sent in HTTP Basic, refreshed in the background.
    upstream_oauth_token_endpoint: str | None = None
    upstream_oauth_client_id: str | None = None
    upstream_oauth_client_secret: SecretStr | None = Field(default=None, repr=False)
    upstream_oauth_scope: str | None = None
    # CA (PEM) for an https token endpoint; default: the system store.
    upstream_oauth_ca_file: Path | None = None
    # Kafka's sasl.oauthbearer.header.urlencode: form-encode client id and secret inside HTTP Basic.
    upstream_oauth_header_urlencode: bool = False
    # KIP-342 SASL extensions sent with the token (e.g. Confluent Cloud's logicalCluster, identityPoolId).
    upstream_oauth_extensions: dict[str, str] = {}
    # When the token is refreshed in the background, and how failed fetches are retried: Kafka's
    # sasl.login.refresh.window.factor/.window.jitter/.min.period.seconds/.buffer.seconds and
    # sasl.login.retry.backoff.ms/.max.ms, with Kafka's defaults and legal ranges.
    upstream_oauth_refresh_window_factor: float = Field(default=0.8, ge=0.5, le=1.0)
    upstream_oauth_refresh_window_jitter: float = Field(default=0.05, ge=0.0, le=0.25)
    upstream_oauth_refresh_min_period_s: int = Field(default=60, ge=0, le=900)
    upstream_oauth_refresh_buffer_s: int = Field(default=300, ge=0, le=3600)
    upstream_oauth_retry_backoff_ms: int = Field(default=100, ge=1, le=3_600_000)
    upstream_oauth_retry_backoff_max_ms: int = Field(default=10_000, ge=1, le=3_600_000)
    max_request_bytes: int = Field(default=100 * 1024 * 1024, gt=0)
    # Kafka's queued.max.request.bytes (Kafka: unbounded): the bytes of large request frames being read
    # or served, all client connections together; a connection that cannot get memory for its next frame
    # stops being read until memory returns (gateway/README.md "Reading frames"). At least max_request_bytes.
    queued_max_request_bytes: int = Field(default=DEFAULT_QUEUED_MAX_REQUEST_BYTES, gt=0)
    # One client address's share of those (an IPv6 client by its /64; clients behind one NAT share one):
    # unset, an eighth of queued_max_request_bytes but at least max_request_bytes. Kafka has no such
    # share: a deliberate departure, so that one client's large frames cannot hold the whole pool.
    queued_max_request_bytes_per_ip: int | None = Field(default=None, gt=0)
    # A large frame (over 256 KiB) whose memory is granted must arrive within 30 s of reading time plus
    # its size at this rate, or its connection is closed (Kafka has no such deadline: a departure).
    large_request_min_bytes_per_s: int = Field(default=DEFAULT_LARGE_REQUEST_MIN_BYTES_PER_S, gt=0)
    # SaslAuthenticate steps (key derivations, signature checks) run on this many worker threads, off
    # the event loop; 0 = one per CPU. At most `sasl_max_waiting_steps` may wait for a thread: beyond
    # that a new login fails as a failed authentication (gateway/README.md, "Login work").
    sasl_workers: int = Field(default=0, ge=0, le=256)
    sasl_max_waiting_steps: int = Field(default=512, ge=0, le=100_000)
    # One client address's share of those waiting places (unset: an eighth of sasl_max_waiting_steps), so
    # that one address flooding the gateway with slow logins does not refuse everyone else's.
    sasl_max_waiting_steps_per_ip: int | None = Field(default=None, ge=0, le=100_000)
    idle_timeout_s: float = Field(default=600.0, gt=0)
    # Kafka's max.connections / max.connections.per.ip (/.overrides): client connections over them are
    # refused at once (gateway/README.md "Connection limits"). Kafka's defaults are unlimited.
    max_connections: int = Field(default=DEFAULT_MAX_CONNECTIONS, ge=1, le=2**31 - 1)
    max_connections_per_ip: int = Field(default=DEFAULT_MAX_CONNECTIONS_PER_IP, ge=0, le=2**31 - 1)
    max_connections_per_ip_overrides: dict[str, int] = {}
    # One request-log event per request (Kafka's kafka.request.logger, JSON shape).
    request_log: bool = True
    # Quota windows (Kafka's quota.window.num / quota.window.size.seconds).
    quota_window_num: int = Field(default=11, ge=2, le=100)
    quota_window_size_s: float = Field(default=1.0, gt=0, le=60)

    @model_validator(mode="after")
    def _consistent(self) -> GatewayConfig:
        if self.security_protocol in ("SSL", "SASL_SSL") and (self.tls_cert_file is None or self.tls_key_file is None):
            raise ValueError(
                f"gateway.security_protocol={self.security_protocol} needs a certificate: set "
                "gateway.tls_cert_file and gateway.tls_key_file (PEM files)"
            )
        if self.tls_client_auth != "none" and self.tls_ca_file is None:
            raise ValueError(
                f"gateway.tls_client_auth={self.tls_client_auth} needs gateway.tls_ca_file: the CA (PEM) that "
                "signs client certificates"
            )
        try:
            parse_rules(self.ssl_principal_mapping_rules)
        except SslPrincipalMappingError as exc:
            raise ValueError(f"gateway.ssl_principal_mapping_rules: {exc}") from None
        parse_overrides(self.max_connections_per_ip_overrides)
        if self.queued_max_request_bytes < self.max_request_bytes:
            # Kafka's KafkaConfig check (queued.max.request.bytes against socket.request.max.bytes).
            raise ValueError(
                f"gateway.queued_max_request_bytes ({self.queued_max_request_bytes}) must be at least "
                f"gateway.max_request_bytes ({self.max_request_bytes}): a request of the largest size would never "
                "be read"
            )
        share = self.queued_max_request_bytes_per_ip
        if share is not None and not self.max_request_bytes <= share <= self.queued_max_request_bytes:
            raise ValueError(
                f"gateway.queued_max_request_bytes_per_ip ({share}) must be between gateway.max_request_bytes "
                f"({self.max_request_bytes}) and gateway.queued_max_request_bytes ({self.queued_max_request_bytes}): "
                "it is one client address's share of the pool, and must hold a request of the largest size"
            )
        if (self.sasl_max_waiting_steps_per_ip is not None
                and self.sasl_max_waiting_steps_per_ip > self.sasl_max_waiting_steps):
            raise ValueError(
                f"gateway.sasl_max_waiting_steps_per_ip ({self.sasl_max_waiting_steps_per_ip}) must not exceed "
                f"gateway.sasl_max_waiting_steps ({self.sasl_max_waiting_steps}): it is one address's share of them"
            )
        if self.max_connections_per_ip == 0 and not self.max_connections_per_ip_overrides:
            # Kafka's KafkaConfig check: 0 only makes sense for the addresses an override lets in.
            raise ValueError(
                "gateway.max_connections_per_ip = 0 refuses every client: set a limit, or list the addresses "
                "allowed to connect in gateway.max_connections_per_ip_overrides"
            )
        login = self.upstream_login
        if login == "OAUTHBEARER":
            self._check_upstream_oauth()
        elif login is not None and (not self.upstream_username or self.upstream_password is None):
            raise ValueError(
                "gateway.upstream_security_protocol uses SASL: set gateway.upstream_username and "
                "KGOV_GATEWAY__UPSTREAM_PASSWORD (the gateway's own service credential)"
            )
        elif self.upstream_oauth_token_endpoint is not None or self.upstream_oauth_client_id is not None:
            raise ValueError(
                "gateway.upstream_oauth_* is set but the gateway does not log in upstream with OAUTHBEARER: set "
                "gateway.upstream_sasl_mechanism = \"OAUTHBEARER\" and gateway.upstream_security_protocol = "
                "\"SASL_SSL\" (or SASL_PLAINTEXT), or remove the upstream_oauth_* settings"
            )
        return self

    @property
    def upstream_login(self) -> UpstreamMechanism | None:
        """The mechanism of the gateway's own login to the upstream; None when the upstream is not SASL."""
        return self.upstream_sasl_mechanism if self.upstream_security_protocol.startswith("SASL_") else None

    def _check_upstream_oauth(self) -> None:
        missing = [name for name, value in (
            ("gateway.upstream_oauth_token_endpoint", self.upstream_oauth_token_endpoint),
            ("gateway.upstream_oauth_client_id", self.upstream_oauth_client_id),
            ("KGOV_GATEWAY__UPSTREAM_OAUTH_CLIENT_SECRET", self.upstream_oauth_client_secret),
        ) if not value]
        if missing:
            raise ValueError(
                "gateway.upstream_sasl_mechanism=OAUTHBEARER fetches its token with the OIDC client-credentials "
                f"grant: set {', '.join(missing)}"
            )
        if self.upstream_oauth_retry_backoff_max_ms < self.upstream_oauth_retry_backoff_ms:
            raise ValueError(
                "gateway.upstream_oauth_retry_backoff_max_ms must be at least gateway.upstream_oauth_retry_backoff_ms "
                f"({self.upstream_oauth_retry_backoff_max_ms} < {self.upstream_oauth_retry_backoff_ms})"
            )
        assert self.upstream_oauth_token_endpoint is not None
        check_token_endpoint(self.upstream_oauth_token_endpoint)
        for name, value in self.upstream_oauth_extensions.items():
            if name == "auth" or not _EXTENSION_NAME.fullmatch(name):
                raise ValueError(
                    f"gateway.upstream_oauth_extensions: invalid extension name {name!r} (letters only; "
                    "`auth` is reserved)"
                )
            if not _EXTENSION_VALUE.fullmatch(value):
                raise ValueError(
                    f"gateway.upstream_oauth_extensions: the value of {name!r} must be printable ASCII"
                )


def check_token_endpoint(url: str) -> None:
    """An http(s) URL; plain http only to a loopback address (the client secret travels in the
    request, so it must not cross a network in clear text)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        host = None
    if host is None:
        raise ValueError("gateway.upstream_oauth_token_endpoint must be an https:// URL with a host name")
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            "gateway.upstream_oauth_token_endpoint must not carry credentials: set "
            "gateway.upstream_oauth_client_id and KGOV_GATEWAY__UPSTREAM_OAUTH_CLIENT_SECRET instead"
        )
    if parts.scheme not in ("https", "http"):
        raise ValueError(
            "gateway.upstream_oauth_token_endpoint must be an https:// URL (other schemes are refused), "
            f"got scheme {parts.scheme!r}"
        )
    if parts.scheme == "http" and not is_loopback_host(host):
        raise ValueError(
            "gateway.upstream_oauth_token_endpoint uses http:// to a non-loopback host, which would send "
            "the client secret in clear text: use https:// (with gateway.upstream_oauth_ca_file for a private CA)"
        )


def parse_host_port(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{what} must be HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def refuse_weak_admin_password_beyond_loopback(weak: bool, hosts: Iterable[str]) -> None:
    """Dev mode admits a weak bootstrap admin password (`Settings.weak_admin_password`) only while every
    listener that takes it is on loopback: beyond, TLS or not, anyone who reaches a port could guess a
    super user's password. The one check behind `kgov up`, `kgov serve` (kgov/exposure.py) and the
    gateway (gateway/runtime.py); it lives here because the gateway must not import `kgov`."""
    if not weak:
        return
    exposed = [h for h in hosts if not is_loopback_host(h)]
    if exposed:
        raise ValueError(
            f"refusing a weak admin password on {exposed[0]!r} in dev mode (under 12 characters, or a common "
            f"one): the bootstrap admin is a super user. Set KGOV_ADMIN__PASSWORD to at least 12 characters "
            f"(`kgov up` generates one when it is unset)"
        )
