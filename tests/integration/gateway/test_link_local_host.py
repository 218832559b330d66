"""A link-local IPv6 client is the host Kafka would name: Java writes an accepted scoped address with
its numeric zone (`fe80:0:0:0:fc:ff:fe00:1%4`), and a host-specific ACL written that way must apply
to the client through the gateway, as it would on a broker."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from authz.host_address import java_host_address
from authz.model import Acl, Operation, PatternType, Permission, ResourceType
from gateway.codec import SPECS
from gateway.proxy import Services
from tests.integration.gateway.conftest import AuthzFixture, RawClient, RunningGateway

pytestmark = [pytest.mark.broker]

ANON = "User:ANONYMOUS"
UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED = 3, 29


def link_local_address() -> tuple[str, int] | None:
    """A link-local address of this host and its interface index, from /proc/net/if_inet6."""
    try:
        rows = Path("/proc/net/if_inet6").read_text().splitlines()
    except OSError:
        return None
    for row in rows:
        hex_address, index, _prefix, scope, *_ = row.split()
        if int(scope, 16) == 0x20:  # IPV6_ADDR_LINKLOCAL
            return str(ipaddress.IPv6Address(bytes.fromhex(hex_address))), int(index, 16)
    return None


def metadata_error(client: RawClient, topic: str) -> int:
    metadata = SPECS[3].request[12]
    request = metadata(topics=[metadata.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False)
    (only,) = client.call(3, 12, request).topics
    return int(only.error_code)


def test_a_host_deny_written_with_the_zone_applies_to_a_link_local_client(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway],
) -> None:
    found = link_local_address()
    if found is None:
        pytest.skip("this host has no link-local IPv6 address to connect from")
    address, index = found
    authz = authz_factory()
    kafka_host = f"{java_host_address(address)}%{index}"  # as Java writes the accepted client
    authz.allow(Acl(ResourceType.TOPIC, "*", PatternType.LITERAL, ANON, "*", Operation.DESCRIBE, Permission.ALLOW),
                Acl(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, ANON, "*", Operation.DESCRIBE,
                    Permission.ALLOW),
                Acl(ResourceType.TOPIC, "secret", PatternType.LITERAL, ANON, kafka_host, Operation.DESCRIBE,
                    Permission.DENY))
    gw = gateway_factory(Services(authz.service, audit=authz.audit), listen_host="::")
    scoped = RawClient.__new__(RawClient)
    scoped.sock = socket.create_connection((f"{address}%{index}", gw.gateway.port), timeout=10)
    scoped.correlation = 0
    try:
        loopback = RawClient(f"::1:{gw.gateway.port}")  # asyncio listens on "::" for IPv6 only
    except BaseException:
        scoped.close()
        raise
    try:
        assert metadata_error(scoped, "secret") == TOPIC_AUTHORIZATION_FAILED
        assert metadata_error(loopback, "secret") == UNKNOWN_TOPIC_OR_PARTITION  # the DENY names one host
        assert metadata_error(scoped, "other") == UNKNOWN_TOPIC_OR_PARTITION
    finally:
        scoped.close()
        loopback.close()
