"""Connection counting (Kafka's ConnectionQuotas): per IP, per-IP overrides, gateway-wide; settings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.config import GatewayConfig
from gateway.connection_limits import ConnectionLimits, share_key


def test_an_address_gets_its_limit_and_the_refusal_is_not_counted() -> None:
    limits = ConnectionLimits(max_connections=100, max_connections_per_ip=2)
    assert limits.admit("10.0.0.1") is None and limits.admit("10.0.0.1") is None
    assert limits.admit("10.0.0.1") == (
        "Rejected connection from 10.0.0.1, address already has the configured maximum of 2 connections.")
    assert (limits.count("10.0.0.1"), limits.total, limits.refused) == (2, 2, 1)
    limits.release("10.0.0.1")
    assert limits.admit("10.0.0.1") is None


def test_one_ipv6_address_in_any_spelling_and_ipv4_mapped_addresses_share_a_count() -> None:
    limits = ConnectionLimits(max_connections=100, max_connections_per_ip=2)
    assert limits.admit("::ffff:10.0.0.1") is None and limits.admit("10.0.0.1") is None
    assert limits.admit("::ffff:10.0.0.1") is not None
    assert limits.admit("2001:db8::1") is None and limits.admit("2001:db8:0:0:0:0:0:1") is None
    refusal = limits.admit("2001:0db8::0001")
    assert refusal is not None and "2001:db8:0:0:0:0:0:1" in refusal  # Java's getHostAddress() form


def test_the_gateway_wide_limit_comes_first_and_releases_free_slots() -> None:
    limits = ConnectionLimits(max_connections=2, max_connections_per_ip=5)
    assert limits.admit("10.0.0.1") is None and limits.admit("10.0.0.2") is None
    refusal = limits.admit("10.0.0.3")
    assert refusal is not None and "configured maximum of 2 connections (gateway.max_connections)" in refusal
    assert limits.count("10.0.0.3") == 0
    limits.release("10.0.0.2")
    assert limits.admit("10.0.0.3") is None and limits.total == 2


def test_overrides_set_an_addresss_own_limit_zero_included() -> None:
    limits = ConnectionLimits(max_connections=100, max_connections_per_ip=1,
                              overrides={"10.0.0.9": 3, "::1": 0, "[2001:db8::7]": 2})
    assert [limits.admit("10.0.0.9") is None for _ in range(4)] == [True, True, True, False]
    assert limits.admit("::1") is not None and limits.admit("0:0:0:0:0:0:0:1") is not None
    assert [limits.admit("2001:db8::7") is None for _ in range(3)] == [True, True, False]


def test_a_link_local_clients_zone_does_not_escape_its_addresss_override_or_count() -> None:
    """A link-local client's host carries its zone (`authz.host_address.peer_host_address`, for ACLs), but
    Kafka's ConnectionQuotas keys counts and overrides by `InetAddress`, whose equality ignores the scope:
    an override naming fe80::1 applies to fe80::1 on any interface."""
    from authz.host_address import peer_host_address

    host = peer_host_address(("fe80::1", 9092, 0, 4))
    assert host == "fe80:0:0:0:0:0:0:1%4"
    limits = ConnectionLimits(max_connections=100, max_connections_per_ip=5, overrides={"fe80::1": 0})
    assert limits.admit(host) is not None
    limits = ConnectionLimits(max_connections=100, max_connections_per_ip=1)
    assert limits.admit(host) is None
    assert limits.admit("fe80::1%eth0") is not None and limits.count("fe80::1") == 1
    limits.release(host)
    assert limits.count("fe80::1") == 0


def test_settings_defaults_and_refusals() -> None:
    config = GatewayConfig()
    assert (config.max_connections, config.max_connections_per_ip) == (10_000, 1_000)
    assert config.max_connections_per_ip_overrides == {}
    with pytest.raises(ValidationError, match="not an IP address"):
        GatewayConfig(max_connections_per_ip_overrides={"broker.example.com": 5})
    with pytest.raises(ValidationError, match="refuses every client"):
        GatewayConfig(max_connections_per_ip=0)
    assert GatewayConfig(max_connections_per_ip=0, max_connections_per_ip_overrides={"10.0.0.1": 5})
    with pytest.raises(ValidationError):
        GatewayConfig(max_connections=0)
    with pytest.raises(ValidationError, match="0 or more"):
        GatewayConfig(max_connections_per_ip_overrides={"10.0.0.1": -1})


def test_a_share_is_an_ipv4_address_or_an_ipv6_slash_64() -> None:
    assert share_key("10.0.0.1") == share_key("::ffff:10.0.0.1") == "10.0.0.1"
    # One /64 in any spelling is one share: a host given a /64 cannot take one share per address.
    assert share_key("2001:db8:0:7::1") == share_key("2001:0DB8:0:7:ffff:1:2:3") == "2001:db8:0:7::/64"
    assert share_key("2001:db8:0:8::1") == "2001:db8:0:8::/64"  # the next /64 is another share
    assert share_key("fe80::1%eth0") == "fe80::/64%eth0" != share_key("fe80::1%eth1")
    assert share_key("not-an-address") == "not-an-address"
    # The connection limits stay per address, as Kafka's ConnectionQuotas count.
    limits = ConnectionLimits(max_connections=100, max_connections_per_ip=1)
    assert limits.admit("2001:db8:0:7::1") is None and limits.admit("2001:db8:0:7::2") is None
