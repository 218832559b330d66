"""TLS listeners (SSL and SASL_SSL) with Python's ssl, verified by librdkafka against our CA."""

from __future__ import annotations

import datetime
import ipaddress
import logging
import re
import socket
import ssl
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from authz.model import Principal
from gateway.codec import SPECS, decode_response
from gateway.proxy import Services
from tests.integration.gateway.conftest import (
    AuthzFixture,
    RawClient,
    RunningGateway,
    upstream_of,
    wait_until,
)
from tests.integration.gateway.test_connection_limits import served
from tests.integration.gateway.test_proxy import create_topics
from tests.integration.gateway.test_sasl import grant_prefix

pytestmark = [pytest.mark.broker]


def self_signed(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kgov-gateway-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp / "gateway.pem", tmp / "gateway.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


def test_sasl_ssl_listener(runtime_factory: Callable[..., RunningGateway], kafka_broker: str, tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    gw = runtime_factory(gateway={"security_protocol": "SASL_SSL", "tls_cert_file": str(cert),
                                  "tls_key_file": str(key)}, sasl={"failed_authentication_delay_ms": 0})
    gw.runtime.credentials.set_scram_credential("alice", "SCRAM-SHA-512", "alice-password-0123",
                                                actor=Principal("User", "admin"))
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    grant_prefix(gw, "User:alice", "tls-")
    results: list[object] = []
    p = Producer({"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": str(cert),
                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "alice-password-0123"})
    p.produce(topic, b"over tls", on_delivery=lambda err, msg: results.append(err))
    assert p.flush(20) == 0 and results == [None]
    requests = [e.data for e in gw.memory.events if str(e.type) == "io.kgov.request"]
    assert {r["securityProtocol"] for r in requests} == {"SASL_SSL"}


def wait_for_error(producer: Producer, errors: list[object]) -> None:
    """Serves `producer`'s callbacks until its error callback has reported something."""
    def reported() -> bool:
        producer.poll(0.1)
        return bool(errors)

    wait_until(reported)


def test_plaintext_client_cannot_talk_to_a_tls_listener(runtime_factory: Callable[..., RunningGateway],
                                                         tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    gw = runtime_factory(gateway={"security_protocol": "SSL", "tls_cert_file": str(cert), "tls_key_file": str(key)})
    errors: list[object] = []
    p = Producer({"bootstrap.servers": gw.bootstrap, "error_cb": errors.append, "message.timeout.ms": 3000})
    p.produce("x", b"y")
    wait_for_error(p, errors)  # the TLS listener refuses plaintext Kafka


def test_tls_settings_are_required_for_tls_listeners() -> None:
    from gateway.config import GatewayConfig

    with pytest.raises(ValueError, match="tls_cert_file"):
        GatewayConfig(security_protocol="SASL_SSL")
    with pytest.raises(ValueError, match="upstream_username"):
        GatewayConfig(upstream_security_protocol="SASL_PLAINTEXT")


def _issue_client_cert(tmp: Path, attributes: list[x509.NameAttribute] | None = None,
                       prefix: str = "client") -> tuple[Path, Path, Path]:
    """A CA and a client certificate it signed (subject O=kgov, OU=payments, CN=alice unless given)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kgov test CA"),
                         x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, prefix)])
    now = datetime.datetime.now(datetime.UTC)
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(attributes if attributes is not None else [
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kgov"),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "payments"),
        x509.NameAttribute(NameOID.COMMON_NAME, "alice")])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1)).sign(ca_key, hashes.SHA256()))
    ca_file, cert_file, key_file = tmp / f"{prefix}-ca.pem", tmp / f"{prefix}.pem", tmp / f"{prefix}.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return ca_file, cert_file, key_file


def mtls_gateway(runtime_factory: Callable[..., RunningGateway],
                 tmp_path: Path) -> tuple[RunningGateway, Path, Path, Path]:
    """A gateway with an SSL listener that requires client certificates; with its certificate and a
    client's certificate and key (subject CN=alice,OU=payments,O=kgov)."""
    server_cert, server_key = self_signed(tmp_path)
    ca, client_cert, client_key = _issue_client_cert(tmp_path)
    gw = runtime_factory(gateway={"security_protocol": "SSL", "tls_cert_file": str(server_cert),
                                  "tls_key_file": str(server_key), "tls_client_auth": "required",
                                  "tls_ca_file": str(ca)})
    return gw, server_cert, client_cert, client_key


def test_ssl_listener_with_client_certificates_uses_the_subject_as_principal(
    runtime_factory: Callable[..., RunningGateway], kafka_broker: str, tmp_path: Path,
) -> None:
    gw, server_cert, client_cert, client_key = mtls_gateway(runtime_factory, tmp_path)
    principal = "User:CN=alice,OU=payments,O=kgov"
    topic = f"mtls-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    grant_prefix(gw, principal, "mtls-")
    results: list[object] = []
    p = Producer({"bootstrap.servers": gw.bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(server_cert),
                  "ssl.certificate.location": str(client_cert), "ssl.key.location": str(client_key)})
    p.produce(topic, b"mutual tls", on_delivery=lambda err, msg: results.append(err))
    assert p.flush(20) == 0 and results == [None]
    produced = [e.data for e in gw.memory.events if str(e.type) == "io.kgov.request"
                and e.data["requestHeader"]["requestApiKey"] == 0]
    assert produced and {r["principal"] for r in produced} == {principal}
    # without a client certificate the handshake fails
    errors: list[object] = []
    anonymous = Producer({"bootstrap.servers": gw.bootstrap, "security.protocol": "SSL",
                          "ssl.ca.location": str(server_cert), "error_cb": errors.append})
    anonymous.produce(topic, b"x")
    wait_for_error(anonymous, errors)


def test_ssl_principal_mapping_rules_name_the_client_as_kafka_would(
    runtime_factory: Callable[..., RunningGateway], kafka_broker: str, tmp_path: Path,
) -> None:
    """librdkafka with a client certificate whose subject (with an emailAddress, written by its OID as the
    JDK does) a Kafka rule maps to `alice`; an ACL for User:alice decides; a subject no rule maps is refused."""
    server_cert, server_key = self_signed(tmp_path)
    ca, client_cert, client_key = _issue_client_cert(tmp_path, [
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kgov"),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "payments"),
        x509.NameAttribute(NameOID.COMMON_NAME, "Alice"),
        x509.NameAttribute(NameOID.EMAIL_ADDRESS, "alice@kgov.example"),
    ])
    other_ca, other_cert, other_key = _issue_client_cert(tmp_path, [
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kgov"), x509.NameAttribute(NameOID.COMMON_NAME, "mallory"),
    ], prefix="other")
    both = tmp_path / "cas.pem"
    both.write_bytes(ca.read_bytes() + other_ca.read_bytes())
    gw = runtime_factory(gateway={
        "security_protocol": "SSL", "tls_cert_file": str(server_cert), "tls_key_file": str(server_key),
        "tls_client_auth": "required", "tls_ca_file": str(both),
        "ssl_principal_mapping_rules": "RULE:^[0-9.]+=#[0-9a-f]+,CN=([^,]+),OU=payments,O=kgov$/$1/L"})
    allowed, denied = f"mtls-map-{uuid.uuid4().hex[:8]}", f"other-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, allowed, denied)
    grant_prefix(gw, "User:alice", "mtls-map-")
    results: dict[str, KafkaError | None] = {}
    p = Producer({"bootstrap.servers": gw.bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(server_cert),
                  "ssl.certificate.location": str(client_cert), "ssl.key.location": str(client_key),
                  "message.timeout.ms": 10000})
    for topic in (allowed, denied):
        p.produce(topic, b"mapped?", on_delivery=lambda err, msg: results.update({msg.topic(): err}))
    assert p.flush(20) == 0
    assert results[allowed] is None
    refused = results[denied]
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    produced = [e.data for e in gw.memory.events if str(e.type) == "io.kgov.request"
                and e.data["requestHeader"]["requestApiKey"] == 0]
    assert produced and {r["principal"] for r in produced} == {"User:alice"}
    # a certificate the CA signed, but whose subject no rule maps: Kafka's NoMatchingRule, the connection closes
    errors: list[object] = []
    unmapped = Producer({"bootstrap.servers": gw.bootstrap, "security.protocol": "SSL",
                         "ssl.ca.location": str(server_cert), "ssl.certificate.location": str(other_cert),
                         "ssl.key.location": str(other_key), "error_cb": errors.append})
    unmapped.produce(allowed, b"x")
    wait_for_error(unmapped, errors)
    failures = [e.data for e in gw.memory.events if str(e.type) == "io.kgov.authentication"]
    assert failures and failures[-1]["authenticationInfo"]["principal"] is None
    assert "no ssl.principal.mapping.rules rule maps" in str(failures[-1])
    assert {r["principal"] for r in (e.data for e in gw.memory.events if str(e.type) == "io.kgov.request")} == {
        "User:alice"}


def test_a_certificate_with_an_empty_subject_is_user_with_an_empty_name_as_in_kafka(
    runtime_factory: Callable[..., RunningGateway], kafka_broker: str, tmp_path: Path,
) -> None:
    server_cert, server_key = self_signed(tmp_path)
    ca, client_cert, client_key = _issue_client_cert(tmp_path, [])
    gw = runtime_factory(gateway={"security_protocol": "SSL", "tls_cert_file": str(server_cert),
                                  "tls_key_file": str(server_key), "tls_client_auth": "required",
                                  "tls_ca_file": str(ca)})
    topic = f"mtls-empty-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_broker, topic)
    results: list[KafkaError | None] = []
    p = Producer({"bootstrap.servers": gw.bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(server_cert),
                  "ssl.certificate.location": str(client_cert), "ssl.key.location": str(client_key),
                  "message.timeout.ms": 10000})
    p.produce(topic, b"who?", on_delivery=lambda err, msg: results.append(err))
    assert p.flush(20) == 0
    refused = results[0]
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED  # no ACL for `User:`
    principals = {e.data["principal"] for e in gw.memory.events if str(e.type) == "io.kgov.request"}
    assert principals == {"User:"}  # Kafka's KafkaPrincipal("User", ""), not User:ANONYMOUS


def test_bad_mapping_rules_are_refused_at_start_with_kafkas_message() -> None:
    from gateway.config import GatewayConfig

    with pytest.raises(ValueError, match=re.escape("gateway.ssl_principal_mapping_rules: Invalid rule: `DEFAULT/L`")):
        GatewayConfig(ssl_principal_mapping_rules="DEFAULT/L")
    with pytest.raises(ValueError, match="inline flags"):
        GatewayConfig(ssl_principal_mapping_rules="RULE:(?i)cn=(.*)/$1/")


class TlsClient(RawClient):
    """A RawClient over TLS, verifying the gateway's certificate."""

    def __init__(self, bootstrap: str, ca: Path) -> None:
        context = ssl.create_default_context(cafile=str(ca))
        self.sock = context.wrap_socket(socket.create_connection(upstream_of(bootstrap), timeout=10),
                                        server_hostname="127.0.0.1")
        self.correlation = 0


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the gateway closes `sock` (a FIN or a reset) within `seconds`."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_tls_handshakes_in_progress_count_against_the_connection_limits_and_time_out(
    authz_factory: Callable[..., AuthzFixture], gateway_factory: Callable[..., RunningGateway], tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cert, key = self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    # Long enough that what must happen before it (a wait, two connects, the refusal) fits with margin on
    # a loaded machine: the refusal is bounded by half of it, the checks of the silent ones by all of it.
    timeout_s = 4.0
    gw = gateway_factory(Services(authz_factory(allow_everyone_if_no_acl_found=True).service),
                         security_protocol="SSL", ssl_context=context, max_connections_per_ip=3,
                         tls_handshake_timeout_s=timeout_s)
    limits = gw.gateway.connection_limits
    caplog.set_level(logging.INFO, logger="kgov.gateway")
    # TCP connections that never send a ClientHello: each holds a slot from its accept.
    silent = [socket.create_connection(upstream_of(gw.bootstrap), timeout=10) for _ in range(3)]
    try:
        opened = time.monotonic()
        wait_until(lambda: limits.total == 3)
        extra = socket.create_connection(upstream_of(gw.bootstrap), timeout=10)
        try:
            assert closed_within(extra, timeout_s / 2)  # over the limit: closed at once, not after the handshake timeout
        finally:
            extra.close()
        assert time.monotonic() - opened < timeout_s
        assert caplog.messages.count("Rejected connection from 127.0.0.1, address already has the configured "
                                     "maximum of 3 connections.") == 1
        for sock in silent:
            assert not closed_within(sock, 0.01)  # still open, within their handshake time
        for sock in silent:  # then closed by the handshake timeout, and their slots freed
            assert closed_within(sock, timeout_s + 5)
        assert time.monotonic() - opened >= timeout_s * 0.9
        wait_until(lambda: limits.total == 0)
    finally:
        for sock in silent:
            sock.close()
    clients = [TlsClient(gw.bootstrap, cert) for _ in range(3)]  # a completed handshake is served as before
    try:
        assert all(served(c) for c in clients)
        assert limits.total == 3
    finally:
        for c in clients:
            c.close()
    wait_until(lambda: limits.total == 0)


class EagerTlsClient(RawClient):
    """A TLS client that sends its first request in the same TCP write as its handshake's last flight
    (TLS 1.3 allows it; librdkafka's ApiVersions often arrives so), so the gateway's TLS layer has
    application data in hand the moment the handshake completes."""

    def __init__(self, bootstrap: str, ca: Path, first: bytes) -> None:
        context = ssl.create_default_context(cafile=str(ca))
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        self.sock = socket.create_connection(upstream_of(bootstrap), timeout=10)
        self.correlation = 0
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname="127.0.0.1")
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.sock.sendall(self.outgoing.read())
                self._feed()
        self.tls.write(first)  # the client Finished is still in `outgoing`: both leave together
        self.sock.sendall(self.outgoing.read())

    def _feed(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("closed by the gateway")
        self.incoming.write(data)

    def _exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            try:
                out += self.tls.read(n - len(out))
            except ssl.SSLWantReadError:
                self._feed()
        return out


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
def test_a_request_sent_with_the_handshakes_last_flight_is_answered_over_tls(
    runtime_factory: Callable[..., RunningGateway], tmp_path: Path, protocol: str,
) -> None:
    # The request reaches the gateway before its handshake coroutine resumes: it used to be served
    # before the connection knew its TLS transport, and the answer went out in plaintext
    # (librdkafka: "SSL routines::bad record type" in state APIVERSION_QUERY).
    cert, key = self_signed(tmp_path)
    gw = runtime_factory(gateway={"security_protocol": protocol, "tls_cert_file": str(cert),
                                  "tls_key_file": str(key)})
    request = SPECS[18].request[3](client_software_name="t", client_software_version="1")
    request.with_header(correlation_id=7, client_id="eager")
    for _ in range(5):
        client = EagerTlsClient(gw.bootstrap, cert, bytes(request.encode(version=3, header=True, framed=True)))
        try:
            size = int.from_bytes(client._exactly(4), "big")
            response = decode_response(SPECS[18], 3, client._exactly(size))
            assert response.error_code == 0
            assert len(response.api_keys) > 10
        finally:
            client.close()
