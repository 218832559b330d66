"""Gateway settings (section `[gateway]`, environment `KGOV_GATEWAY__*`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, model_validator

SecurityProtocol = Literal["PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL"]


class GatewayConfig(BaseModel):
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
    # tls_ca_file and, on an SSL listener, the principal is User:<subject DN> (RFC 2253, as Kafka).
    tls_client_auth: Literal["none", "requested", "required"] = "none"
    tls_ca_file: Path | None = None
    # How brokers are advertised: `per-node` (broker n on node_port_base + n) or `single` (all on
    # the listener; right for a one-node upstream such as Tansu, or a load-balanced endpoint).
    address_mode: Literal["per-node", "single"] = "per-node"
    advertised_host: str | None = None
    node_port_base: int | None = Field(default=None, ge=1, le=65535)
    # Upstream connection: optional TLS (CA file, or the system store) and a service credential.
    upstream_security_protocol: SecurityProtocol = "PLAINTEXT"
    upstream_ca_file: Path | None = None
    upstream_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "SCRAM-SHA-512"
    upstream_username: str | None = None
    upstream_password: SecretStr | None = Field(default=None, repr=False)
    max_request_bytes: int = Field(default=100 * 1024 * 1024, gt=0)
    idle_timeout_s: float = Field(default=600.0, gt=0)
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
        if self.upstream_security_protocol.startswith("SASL_") and (
            not self.upstream_username or self.upstream_password is None
        ):
            raise ValueError(
                "gateway.upstream_security_protocol uses SASL: set gateway.upstream_username and "
                "KGOV_GATEWAY__UPSTREAM_PASSWORD (the gateway's own service credential)"
            )
        return self


def parse_host_port(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{what} must be HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)
