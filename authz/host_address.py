"""The client address as Kafka compares it with an ACL's host: `InetAddress.getHostAddress()`.

Kafka matches an ACL host by plain string equality with the Java text form of the client's IP
(StandardAuthorizerData.authorize and the Authorizer.authorizeByResourceType default both call
`clientAddress().getHostAddress()`). Python's sockets give a different text for the same IPv6
address, so without this an ACL written for Kafka (`0:0:0:0:0:0:0:1`) would not match here and one
written as `::1` would match here but never in Kafka. Java's form:

- IPv6: eight groups of lower-case hex without leading zeros and without `::` compression
  (`2001:db8:0:0:0:0:0:1`); a zone suffix (`%eth0`) is kept as given;
- an IPv4-mapped IPv6 address (`::ffff:10.0.0.5`, what a dual-stack socket reports for an IPv4
  client) is an `Inet4Address` in Java, so it reads `10.0.0.5`;
- IPv4 is unchanged. Anything that is not an IP literal is returned unchanged (it cannot be
  produced by a socket; it will simply match only an identical ACL host or `*`).
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from typing import Any


def java_host_address(address: str) -> str:
    """`address` as Java's `InetAddress.getHostAddress()` writes it (see the module docstring)."""
    if ":" not in address:
        return address  # IPv4 (or not an IP): already what Java writes
    return _ipv6_text(address)


@lru_cache(maxsize=4096)
def _ipv6_text(address: str) -> str:
    literal, sep, zone = address.partition("%")
    try:
        ip = ipaddress.IPv6Address(literal)
    except ValueError:
        return address
    mapped = ip.ipv4_mapped
    if mapped is not None:
        return str(mapped)
    packed = ip.packed
    text = ":".join(format(int.from_bytes(packed[i:i + 2], "big"), "x") for i in range(0, 16, 2))
    return text + sep + zone


def peer_host_address(peer: tuple[Any, ...]) -> str:
    """The Java text of a connected peer, from the address tuple Python's accept()/getpeername() give.

    For a scoped IPv6 peer (link-local) Python gives `('fe80::1', port, flowinfo, scope_id)`, the zone
    outside the text, where Java's accepted socket address writes it with the numeric scope id:
    `fe80:0:0:0:0:0:0:1%4` (checked with OpenJDK 17). Kafka compares ACL hosts with that text, so
    dropping the scope would make a host-specific DENY written for Kafka miss the client."""
    host = str(peer[0])
    if len(peer) >= 4 and peer[3] and "%" not in host:
        host = f"{host}%{peer[3]}"
    return java_host_address(host)


def address_group(address: str) -> str:
    """The client address as per-address limits count it: an IPv4 address as it is (an IPv4-mapped IPv6
    address counts as its IPv4 address), an IPv6 address by its /64 network, written `2001:db8:0:7::/64`
    (a zone suffix kept), since one host or one site is routinely given a whole /64 and could otherwise
    take one allowance per address it picks. Clients behind one NAT, or one /64, count as one. Anything
    that is not an IP literal is returned unchanged. Used by the failed-login limit
    (`sasl.service.FailureLimiter`) and the gateway's per-address shares (`gateway.connection_limits`)."""
    key = java_host_address(address)
    if ":" not in key:
        return key  # IPv4 (a mapped one included), or not an IP
    return _ipv6_network(key)


@lru_cache(maxsize=4096)
def _ipv6_network(address: str) -> str:
    literal, sep, zone = address.partition("%")
    try:
        network = ipaddress.IPv6Network(f"{literal}/64", strict=False)
    except ValueError:
        return address
    return f"{network.network_address}/64{sep}{zone}"
