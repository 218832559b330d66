"""ACL hosts are compared with Java's text of the client IP (`InetAddress.getHostAddress()`).

StandardAuthorizerData.authorize passes `requestContext.clientAddress().getHostAddress()` to
`findResult`, which compares it with the ACL host by `String.equals`; the Authorizer's
authorizeByResourceType default does the same. Java writes IPv6 uncompressed without leading zeros
(`0:0:0:0:0:0:0:1`) and an IPv4-mapped address as the IPv4 address, whereas Python's sockets say
`::1` and `::ffff:10.0.0.5`.
"""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

import pytest

from audit.sinks import MemorySink
from authz.config import AuthzConfig
from authz.database import open_engine
from authz.decide import AuthorizerData
from authz.host_address import java_host_address, peer_host_address
from authz.model import Operation, PatternType, Permission, Principal, ResourceType
from authz.service import AuthorizerService
from tests.unit.authz.reference_model import acl, action, ctx

TOPIC, LITERAL = ResourceType.TOPIC, PatternType.LITERAL
READ, ALLOW, DENY = Operation.READ, Permission.ALLOW, Permission.DENY


@pytest.mark.parametrize(("python", "java"), [
    ("::1", "0:0:0:0:0:0:0:1"),
    ("::", "0:0:0:0:0:0:0:0"),
    ("2001:db8::1", "2001:db8:0:0:0:0:0:1"),
    ("2001:0DB8:0000:0000:0000:ff00:0042:8329", "2001:db8:0:0:0:ff00:42:8329"),
    ("fe80::1%eth0", "fe80:0:0:0:0:0:0:1%eth0"),
    ("::ffff:10.0.0.5", "10.0.0.5"),  # IPv4-mapped: an Inet4Address in Java
    ("::1.2.3.4", "0:0:0:0:0:0:102:304"),  # IPv4-compatible stays IPv6
    ("10.0.0.5", "10.0.0.5"),
    ("*", "*"),
    ("not:an-ip", "not:an-ip"),
])
def test_java_host_address(python: str, java: str) -> None:
    assert java_host_address(python) == java


def test_host_specific_deny_written_in_kafkas_form_applies_to_an_ipv6_client() -> None:
    data = AuthorizerData.build([
        acl(TOPIC, "t", LITERAL, "User:*", "*", READ, ALLOW),
        acl(TOPIC, "t", LITERAL, "User:bob", "0:0:0:0:0:0:0:1", READ, DENY),
    ])
    (decision,) = data.authorize(ctx("User:bob", "::1"), [action(READ, TOPIC, "t")])
    assert not decision.allowed
    (other,) = data.authorize(ctx("User:bob", "::2"), [action(READ, TOPIC, "t")])
    assert other.allowed


def test_compressed_ipv6_acl_host_never_matches_as_in_kafka() -> None:
    """Kafka compares strings: an ACL host `::1` matches no client, whatever its address."""
    data = AuthorizerData.build([acl(TOPIC, "t", LITERAL, "User:bob", "::1", READ, ALLOW)])
    (decision,) = data.authorize(ctx("User:bob", "::1"), [action(READ, TOPIC, "t")])
    assert not decision.allowed
    assert not data.authorize_by_resource_type(ctx("User:bob", "::1"), READ, TOPIC).allowed


def test_ipv4_client_on_a_dual_stack_socket_matches_its_ipv4_acl() -> None:
    data = AuthorizerData.build([
        acl(TOPIC, "t", LITERAL, "User:*", "*", READ, ALLOW),
        acl(TOPIC, "t", LITERAL, "User:bob", "10.0.0.5", READ, DENY),
    ])
    (decision,) = data.authorize(ctx("User:bob", "::ffff:10.0.0.5"), [action(READ, TOPIC, "t")])
    assert not decision.allowed


def test_authorize_by_resource_type_uses_the_same_host_text() -> None:
    data = AuthorizerData.build([acl(TOPIC, "t", LITERAL, "User:bob", "2001:db8:0:0:0:0:0:1", READ, ALLOW)])
    assert data.authorize_by_resource_type(ctx("User:bob", "2001:db8::1"), READ, TOPIC).allowed
    assert not data.authorize_by_resource_type(ctx("User:bob", "2001:db8::2"), READ, TOPIC).allowed


def test_authorizer_log_line_names_the_host_as_kafka_does() -> None:
    """StandardAuthorizerData.buildAuditMessage: `from host = <getHostAddress()>`."""
    with tempfile.TemporaryDirectory() as tmp:
        engine = open_engine(f"sqlite:///{tmp}/kgov.db")
        lines = MemorySink()
        service = AuthorizerService(engine, AuthzConfig(), lines=lines)
        try:
            service.start(background=False)
            service.authorize(ctx("User:bob", "::1"), [action(READ, TOPIC, "t", log_if_denied=True)])
        finally:
            service.close()
            engine.dispose()
    assert len(lines.lines) == 1
    assert "from host = 0:0:0:0:0:0:0:1 on resource = Topic:LITERAL:t" in lines.lines[0]


def test_super_user_over_ipv6_is_still_a_super_user() -> None:
    data = AuthorizerData.build([acl(TOPIC, "t", LITERAL, "User:root", "0:0:0:0:0:0:0:1", READ, DENY)],
                                super_users=[Principal("User", "root")])
    (decision,) = data.authorize(ctx("User:root", "::1"), [action(READ, TOPIC, "t")])
    assert decision.allowed


def _link_local_peer() -> tuple[str, tuple[object, ...]]:
    """A real link-local connection when the machine has such an address (the peer tuple Python's
    accept() gives), else the tuple it gives on this project's build machine."""
    try:
        rows = Path("/proc/net/if_inet6").read_text().split()
    except OSError:
        rows = []
    for i in range(0, len(rows) - 5, 6):
        if rows[i].startswith("fe80"):
            address = ":".join(rows[i][j:j + 4] for j in range(0, 32, 4))
            with socket.socket(socket.AF_INET6) as server:
                server.bind(("::", 0))
                server.listen()
                with socket.create_connection((f"{address}%{rows[i + 5]}", server.getsockname()[1])):
                    accepted, peer = server.accept()
                    accepted.close()
            return address, peer
    return "fe80:0:0:0:fc:ff:fe00:1", ("fe80::fc:ff:fe00:1", 55580, 0, 4)


def test_a_link_local_peer_keeps_its_numeric_scope_as_java_writes_it() -> None:
    """Python's accept() gives a link-local peer as `('fe80::...', port, flowinfo, scope_id)`, the
    zone outside the text; Java's accepted socket address writes it as `fe80:0:0:0:...%4`
    (getHostAddress with the numeric scope id, checked with OpenJDK 17 on this machine). Kafka
    compares ACL hosts with that text, so a host-specific DENY written for a Kafka cluster must
    apply to the same client here."""
    address, peer = _link_local_peer()
    scope = peer[3]
    assert isinstance(scope, int) and scope > 0
    expected = f"{java_host_address(address)}%{scope}"
    assert peer_host_address(peer) == expected
    assert peer_host_address(("::1", 9092, 0, 0)) == "0:0:0:0:0:0:0:1"
    assert peer_host_address(("10.0.0.5", 9092)) == "10.0.0.5"
    assert peer_host_address(("::ffff:10.0.0.5", 9092, 0, 0)) == "10.0.0.5"
    data = AuthorizerData.build([
        acl(TOPIC, "t", LITERAL, "User:*", "*", READ, ALLOW),
        acl(TOPIC, "t", LITERAL, "User:bob", expected, READ, DENY),
    ])
    (decision,) = data.authorize(ctx("User:bob", peer_host_address(peer)), [action(READ, TOPIC, "t")])
    assert not decision.allowed
