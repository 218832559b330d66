"""Refuses to serve credentials in clear text beyond this host.

The control plane takes HTTP Basic passwords, OAuth client secrets and bearer tokens; `kgov up`'s gateway
takes SASL PLAIN/SCRAM over plain TCP, and dev mode accepts weak admin passwords. On loopback nobody
else can read that traffic; on any other address it needs TLS (here or in a proxy in front), which the
operator must say explicitly.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gateway.config import GatewayConfig, parse_host_port, refuse_weak_admin_password_beyond_loopback
from sasl.config import is_loopback_host

REMOTE_FLAG = "--allow-remote-plaintext"


def check_control_plane_exposure(host: str, tls_cert: Path | None, tls_key: Path | None,
                                 allow_remote_plaintext: bool) -> None:
    if (tls_cert is None) != (tls_key is None):
        raise ValueError("--tls-cert and --tls-key go together: give both, or neither")
    if tls_cert is not None or allow_remote_plaintext or is_loopback_host(host):
        return
    raise ValueError(
        f"refusing to serve the control plane over plain HTTP on {host!r}: passwords, client secrets "
        f"and tokens would cross the network in clear text. Give --tls-cert and --tls-key, keep --host "
        f"on 127.0.0.1, or, when a TLS-terminating proxy fronts it, pass {REMOTE_FLAG}"
    )


def check_dev_gateway_exposure(gateway: GatewayConfig, allow_remote_plaintext: bool) -> None:
    """`kgov up` only: its gateway listener, when plaintext, stays on loopback unless told otherwise."""
    host, _ = parse_host_port(gateway.listen, "gateway.listen")
    if gateway.security_protocol in ("SSL", "SASL_SSL") or allow_remote_plaintext or is_loopback_host(host):
        return
    raise ValueError(
        f"refusing to start the dev-mode gateway with {gateway.security_protocol} on {host!r}: SASL "
        f"passwords would cross the network in clear text. Keep KGOV_GATEWAY__LISTEN on 127.0.0.1, set "
        f"KGOV_GATEWAY__SECURITY_PROTOCOL=SASL_SSL with a certificate, or pass {REMOTE_FLAG}"
    )


def forwarded_header_options(proxies: Sequence[str]) -> dict[str, Any]:
    """uvicorn's options for X-Forwarded-For/-Proto: believed from `proxies` only (settings'
    http_forwarded_allow_ips), never by default, and never from the FORWARDED_ALLOW_IPS variable."""
    return {"proxy_headers": bool(proxies), "forwarded_allow_ips": list(proxies)}


def check_dev_admin_password(weak: bool, control_plane_host: str, gateway: GatewayConfig) -> None:
    """`kgov up` and `kgov serve` in dev mode: a weak KGOV_ADMIN__PASSWORD only while both the control plane
    and the configured gateway listener are on loopback."""
    if weak:  # only then: `kgov serve` runs no gateway, so a malformed gateway.listen must not stop it
        gateway_host, _ = parse_host_port(gateway.listen, "gateway.listen")
        refuse_weak_admin_password_beyond_loopback(weak, [control_plane_host, gateway_host])
