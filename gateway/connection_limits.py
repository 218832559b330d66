"""How many client connections the gateway keeps open: Kafka's `max.connections.per.ip` (with
`max.connections.per.ip.overrides`) and `max.connections` (`SocketServer.ConnectionQuotas`).

A connection counts from its accept to its close, whatever it does meanwhile (a SASL exchange, a
connection-rate throttle's delay, a request waiting upstream). A connection over a limit is refused at
once, before it is counted, so it never opens an upstream connection:
- per IP: as Kafka's `ConnectionQuotas.inc` (a `TooManyConnectionsException`, which the acceptor
  answers with an INFO line and a close);
- in total: Kafka's acceptor stops accepting until a slot frees (`waitForConnectionSlot`); the
  gateway closes the new connection instead (deliberate departure, gateway/README.md "Connection
  limits").

The counts are plain dicts touched only from the event loop (no locks); the limits are fixed at start.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Final

from authz.host_address import address_group, java_host_address
from gateway.quota_model import ip_lookup_key

# Defaults (Kafka's are unlimited): see gateway/README.md "Connection limits" for why these.
DEFAULT_MAX_CONNECTIONS: Final = 10_000
DEFAULT_MAX_CONNECTIONS_PER_IP: Final = 1_000


def ip_key(address: str) -> str:
    """One key per client address, as Java's `InetAddress` compares them (`::ffff:10.0.0.1` is
    10.0.0.1; an IPv6 address in any spelling is one address; a link-local client's zone, which its
    host text carries for ACLs, is not part of it: `Inet6Address.equals` ignores the scope, so an
    override naming fe80::1 applies on every interface, as Kafka's ConnectionQuotas)."""
    return ip_lookup_key(address) or java_host_address(address)


def share_key(address: str) -> str:
    """The key of a client's per-address share (the SASL step queue's `sasl_max_waiting_steps_per_ip`,
    the frame memory pool's `queued_max_request_bytes_per_ip`): `authz.host_address.address_group`, an
    IPv6 client by its /64. Not used for `max_connections_per_ip`, which counts per address exactly as
    Kafka's `ConnectionQuotas` does (its overrides name addresses)."""
    return address_group(address)


def parse_overrides(overrides: Mapping[str, int]) -> dict[str, int]:
    """`max_connections_per_ip_overrides` keyed as `ip_key` keys them. Kafka resolves host names in
    them when the broker starts; the gateway takes IP addresses only (a name could resolve to
    something else later), and says so."""
    parsed: dict[str, int] = {}
    for address, limit in overrides.items():
        try:
            ipaddress.ip_address(address.strip("[]"))
        except ValueError:
            raise ValueError(
                f"gateway.max_connections_per_ip_overrides: {address!r} is not an IP address (host names "
                "are not resolved; write the address, e.g. \"10.0.0.7\" or \"2001:db8::7\")"
            ) from None
        if limit < 0:
            raise ValueError(f"gateway.max_connections_per_ip_overrides: the limit of {address} must be 0 or more")
        parsed[ip_key(address.strip("[]"))] = limit
    return parsed


class ConnectionLimits:
    def __init__(self, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 max_connections_per_ip: int = DEFAULT_MAX_CONNECTIONS_PER_IP,
                 overrides: Mapping[str, int] | None = None) -> None:
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self._overrides = parse_overrides(overrides or {})
        self._counts: dict[str, int] = {}
        self.total = 0
        self.refused = 0  # connections refused so far (both limits)

    @property
    def full(self) -> bool:
        """No connection can be admitted from any address (`max_connections` reached)."""
        return self.total >= self.max_connections

    def limit_of(self, key: str) -> int:
        return self._overrides.get(key, self.max_connections_per_ip)

    def count(self, address: str) -> int:
        return self._counts.get(ip_key(address), 0)

    def admit(self, address: str) -> str | None:
        """Counts a new connection from `address` and answers None, or answers the log line of its
        refusal (Kafka's for the per-IP limit) without counting it."""
        key = ip_key(address)
        if self.full:
            self.refused += 1
            return (f"Rejected connection from {key}, the gateway already has the configured maximum of "
                    f"{self.max_connections} connections (gateway.max_connections).")
        count = self._counts.get(key, 0)
        limit = self.limit_of(key)
        if count >= limit:
            self.refused += 1
            return f"Rejected connection from {key}, address already has the configured maximum of {limit} connections."
        self._counts[key] = count + 1
        self.total += 1
        return None

    def release(self, address: str) -> None:
        """A connection `admit` counted has closed."""
        key = ip_key(address)
        count = self._counts.get(key, 0)
        if count <= 1:
            self._counts.pop(key, None)
        else:
            self._counts[key] = count - 1
        self.total = max(self.total - 1, 0)
