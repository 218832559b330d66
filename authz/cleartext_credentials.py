"""Refuses to send credentials over plain `http://` beyond this host.

kgov's HTTP clients (the `--url` of `kgov acls`/`roles`/`groups` and `kgov tokens`, and
`registry.client.RegistryClient`) send an HTTP Basic password with every request: over plain http to
another host anyone on the path reads it. They refuse such a URL unless the user says, by a flag
(`ALLOW_PLAIN_HTTP_FLAG`, as `kgov audit classify` spells it) or a parameter, that the path is
trusted; loopback (`localhost`, 127.0.0.0/8, ::1) stays allowed, as the control plane itself serves
plain HTTP there only (kgov.exposure). A URL carrying `user:password@` is refused in any case.
Confluent's clients (`RestService`) send Basic credentials over whatever URL they are given: a
deliberate departure.

Here, in the lowest package with an HTTP client, so that `sasl` and `registry` use the same rule.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

ALLOW_PLAIN_HTTP_FLAG = "--allow-plain-http"


class CleartextCredentials(ValueError):
    """Credentials would go over plain http to a host that is not this one. A ValueError: `kgov` prints
    it as a usage error, not a traceback."""


def is_loopback_hostname(host: str) -> bool:
    """`localhost` or a loopback IP literal (a URL's host, brackets removed): plain http there cannot
    be read by anyone else."""
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    # ::ffff:127.0.0.1 is IPv4 loopback; Python before 3.13 does not say so of the mapped form.
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def refuse_cleartext_credentials(url: str, *, allowed: bool, how_to_allow: str = ALLOW_PLAIN_HTTP_FLAG) -> None:
    """Raises `CleartextCredentials` when credentials sent to `url` would cross the network in clear
    text (plain http to a host other than loopback) and `allowed` is false; ValueError for a URL that
    is not http(s). `how_to_allow` names the user's way out in the message (a flag, a parameter)."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
    except ValueError:
        host = None
        parts = None
    if parts is None or parts.scheme.lower() not in ("http", "https") or not host:
        raise CleartextCredentials(f"{url!r} is not an http:// or https:// URL with a host (e.g. https://kgov.example:8080)")
    if parts.username is not None or parts.password is not None:
        # httpx would send them, and error messages that name the URL would print them.
        raise CleartextCredentials("the URL must not carry credentials (user:password@): give the user with "
                                   "--user and the password through KGOV_PASSWORD or --password-stdin")
    if parts.scheme.lower() == "https" or allowed or is_loopback_hostname(host):
        return
    raise CleartextCredentials(
        f"refusing to send credentials to {url} over plain http: the password would cross the network "
        f"in clear text. Use https:// (kgov serve --tls-cert/--tls-key, or the TLS proxy in front of it), "
        f"or pass {how_to_allow} if the path to {host} is trusted (a private network, a tunnel)"
    )
