"""The `[audit] kafka_*` settings, how they reach each client, and the Kafka sink's logs (audit.kafka_sink),
without a broker."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from pydantic import ValidationError

from audit.kafka_sink import (
    KafkaAuditSettings,
    KafkaSink,
    RateLimitedLog,
    _LibrdkafkaLog,
    parse_bootstrap_servers,
    resolve_client,
)
from kgov.settings import Settings
from tests.support.waiting import wait_for

SECRET = "s3cret-sink-password"


def test_bootstrap_servers_are_host_port_lists() -> None:
    assert parse_bootstrap_servers("a.example:9092, b:9093,[::1]:9094") == ("a.example:9092", "b:9093", "[::1]:9094")
    for bad in ("", " , ", "host", "host:0", "host:65536", "host:port", "::1:9092", "a:9092,b"):
        with pytest.raises(ValueError, match="kafka_bootstrap_servers"):
            parse_bootstrap_servers(bad)


@pytest.mark.parametrize("topic", ["", ".", "..", "a b", "t/x", "x" * 250, "ü"])
def test_an_illegal_topic_name_is_refused(topic: str) -> None:
    with pytest.raises(ValidationError, match="kafka_topic"):
        KafkaAuditSettings(kafka_topic=topic)


def test_defaults_ship_nothing() -> None:
    settings = Settings().audit
    assert settings.kafka_bootstrap_servers is None and settings.kafka_topic == "kgov-audit-log-events"
    assert KafkaSink.from_settings(settings) is None


@pytest.mark.parametrize(("values", "needle"), [
    ({"kafka_security_protocol": "SASL_SSL"}, "set audit.kafka_sasl_username"),
    ({"kafka_security_protocol": "SASL_PLAINTEXT", "kafka_sasl_username": "u"}, "KAFKA_SASL_PASSWORD"),
    ({"kafka_sasl_username": "u", "kafka_sasl_password": SECRET}, "use SASL_SSL"),
    ({"kafka_ssl_ca_file": "/ca.pem"}, "use SSL or SASL_SSL"),
    ({"kafka_security_protocol": "SSL", "kafka_ssl_cert_file": "/c.pem"}, "go together"),
    ({"kafka_security_protocol": "SSL", "kafka_ssl_key_file": "/k.pem"}, "go together"),
    ({"kafka_buffer_bytes": 1024}, "kafka_buffer_bytes"),
    ({"kafka_security_protocol": "SASL_SSL", "kafka_sasl_mechanism": "GSSAPI", "kafka_sasl_username": "u",
      "kafka_sasl_password": SECRET}, "kafka_sasl_mechanism"),
])
def test_inconsistent_settings_are_refused_with_the_fix(values: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(audit={"kafka_bootstrap_servers": "k:9092", **values})
    assert needle in str(caught.value)
    assert SECRET not in str(caught.value)  # inputs are never echoed


def test_the_password_comes_from_the_environment_and_is_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGOV_AUDIT__KAFKA_BOOTSTRAP_SERVERS", "k1:9093,k2:9093")
    monkeypatch.setenv("KGOV_AUDIT__KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("KGOV_AUDIT__KAFKA_SASL_USERNAME", "auditor")
    monkeypatch.setenv("KGOV_AUDIT__KAFKA_SASL_PASSWORD", SECRET)
    settings = Settings()
    audit = settings.audit
    assert audit.kafka_sasl_password is not None and audit.kafka_sasl_password.get_secret_value() == SECRET
    for text in (repr(settings), str(settings), repr(audit), audit.model_dump_json()):
        assert SECRET not in text
    sink = KafkaSink.from_settings(audit, start=False)
    assert sink is not None
    assert repr(sink) == "KafkaSink(bootstrap_servers='k1:9093,k2:9093', topic='kgov-audit-log-events')"


def test_a_missing_ca_file_fails_at_start_not_later(tmp_path: Any) -> None:
    audit = KafkaAuditSettings(kafka_bootstrap_servers="k:9093", kafka_security_protocol="SSL",
                               kafka_ssl_ca_file=tmp_path / "missing.pem")
    with pytest.raises(FileNotFoundError):
        KafkaSink.from_settings(audit, start=False)


def test_the_rate_limited_log_says_how_many_it_left_out(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    limited = RateLimitedLog(logging.getLogger("kgov.test.rate"), interval_s=60, monotonic=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="kgov.test.rate"):
        assert limited.warning("down", "broker %s down", "k:9092")
        assert not limited.warning("down", "broker %s down", "k:9092")
        assert limited.warning("full", "buffer full")  # another kind has its own limit
        now[0] += 59.9
        assert not limited.warning("down", "broker %s down", "k:9092")
        now[0] += 0.1
        assert limited.warning("down", "broker %s down", "k:9092")
        now[0] += 60
        assert limited.warning("down", "broker %s down", "k:9092")
    assert [r.getMessage() for r in caplog.records] == [
        "broker k:9092 down",
        "buffer full",
        "broker k:9092 down (2 more since the last such warning)",
        "broker k:9092 down",
    ]


def test_the_client_is_librdkafka_when_installed_else_kafka_python(monkeypatch: pytest.MonkeyPatch) -> None:
    assert KafkaAuditSettings().kafka_client == "auto"
    assert resolve_client("auto") == "librdkafka"  # confluent-kafka is in dev and kgov[clients]
    assert resolve_client("kafka-python") == "kafka-python"
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "confluent_kafka" else real(name))
    assert resolve_client("auto") == "kafka-python"
    with pytest.raises(ImportError, match=r"needs the confluent-kafka \(kgov\[clients\]\) package"):
        resolve_client("librdkafka")
    with pytest.raises(ValidationError, match="kafka_client"):
        KafkaAuditSettings(kafka_client="rdkafka")  # type: ignore[arg-type]


def test_every_setting_reaches_librdkafka_under_its_own_name(tmp_path: Path) -> None:
    """The SASL and TLS settings as librdkafka names them, accepted by a real confluent-kafka Producer (which
    refuses unknown properties, bad values and unreadable certificate files)."""
    ca, ca_key = _self_signed(tmp_path, "ca")
    settings = KafkaAuditSettings(kafka_bootstrap_servers="k1:9093,k2:9093", kafka_security_protocol="SASL_SSL",
                                  kafka_sasl_mechanism="SCRAM-SHA-256", kafka_sasl_username="auditor",
                                  kafka_sasl_password=SECRET, kafka_ssl_ca_file=ca, kafka_ssl_cert_file=ca,
                                  kafka_ssl_key_file=ca_key, kafka_client="librdkafka")
    configs: list[dict[str, Any]] = []
    sink = KafkaSink.from_settings(settings, producer_factory=configs.append, start=False)
    assert sink is not None and sink.client == "librdkafka"
    config = sink._producer_config
    assert {k: config[k] for k in ("bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.username",
                                   "sasl.password", "ssl.ca.location", "ssl.certificate.location",
                                   "ssl.key.location", "ssl.endpoint.identification.algorithm")} == {
        "bootstrap.servers": "k1:9093,k2:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "auditor", "sasl.password": SECRET, "ssl.ca.location": str(ca),
        "ssl.certificate.location": str(ca), "ssl.key.location": str(ca_key),
        "ssl.endpoint.identification.algorithm": "https"}
    # The guarantees the kafka-python producer had: acks from all in-sync replicas, one request in flight,
    # no idempotent producer, a request at most 1 MiB.
    assert (config["acks"], config["max.in.flight.requests.per.connection"], config["enable.idempotence"],
            config["message.max.bytes"]) == ("all", 1, False, 1024 * 1024)
    Producer(dict(config)).flush(0)  # librdkafka accepts every name and value, and reads the files

    plain = KafkaSink("k:9092", "t", client="librdkafka", start=False)._producer_config
    assert not any(k.startswith(("sasl.", "ssl.")) for k in plain)
    system_store = KafkaSink.from_settings(KafkaAuditSettings(
        kafka_bootstrap_servers="k:9093", kafka_security_protocol="SSL", kafka_client="librdkafka"), start=False)
    assert system_store is not None and system_store._producer_config["ssl.ca.location"] == "probe"
    Producer(dict(system_store._producer_config)).flush(0)


def _self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    import ipaddress
    from datetime import UTC, datetime, timedelta

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(minutes=1))
            .not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = directory / f"{name}.pem", directory / f"{name}-key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


def test_librdkafka_logs_go_to_python_logging_never_to_stderr_and_never_with_the_password(
    refused_port: int, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str],
) -> None:
    """librdkafka writes its log lines to stderr unless given a logger; with every debug context on, its lines
    name the SASL settings. None of them may carry the password."""
    from confluent_kafka import Producer as RealProducer

    def chatty(config: dict[str, Any]) -> Any:
        return RealProducer({**config, "debug": "all"})

    with caplog.at_level(logging.DEBUG, logger="librdkafka"):
        sink = KafkaSink(f"127.0.0.1:{refused_port}", "t", client="librdkafka", security_protocol="SASL_PLAINTEXT",
                         sasl_mechanism="PLAIN", sasl_username="auditor", sasl_password=SECRET, max_block_ms=300,
                         producer_factory=chatty)
        assert sink._producer_config["log_level"] == 7  # the logger's DEBUG as syslog's
        sink.write(_event())
        assert wait_for(lambda: sink.stats().delivery_failures >= 1, 10)
        sink.close(timeout_s=0)
    lines = [r.getMessage() for r in caplog.records if r.name == "librdkafka"]
    assert any("Connection refused" in line for line in lines)
    assert any("sasl.password" in line for line in lines)  # the configuration dump (librdkafka redacts it)
    assert not any(SECRET in r.getMessage() for r in caplog.records)
    out, err = capfd.readouterr()
    assert "rdkafka" not in err and "rdkafka" not in out


def test_the_librdkafka_log_masks_the_password_whatever_it_is_given(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="librdkafka"):
        _LibrdkafkaLog(SECRET).log(logging.WARNING, "%s [%s] %s", "SASL", "rdkafka#producer-1", f"pw={SECRET}!")
    assert [r.getMessage() for r in caplog.records] == ["SASL [rdkafka#producer-1] pw=***!"]


def _event() -> Any:
    from datetime import UTC, datetime

    from audit.model import EventType, change_event

    return change_event(type=EventType.ACL_CHANGE, source="crn:///kafka=a", time=datetime(2026, 11, 22, tzinfo=UTC),
                        principal="User:admin", method_name="CreateAcls", target="topic=t", details={})


@pytest.mark.parametrize(("broker_tls", "handshake"), [("TLSv1_1", "UNSUPPORTED_PROTOCOL"), ("TLSv1_2", "TLSv1.2")])
def test_librdkafka_speaks_tls_1_2_or_later_only(tmp_path: Path, broker_tls: str, handshake: str) -> None:
    """tls_context() gives kafka-python TLS 1.2 at least; librdkafka has no such property, and its OpenSSL 3
    offers no older version at its default security level: a broker that speaks TLS 1.1 at most (and would
    accept it from a client that offers it) gets no handshake."""
    import socket
    import ssl
    import threading
    import warnings

    cert, key = _self_signed(tmp_path, "broker")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # naming TLS 1.0 and 1.1 is deprecated
        server.minimum_version = ssl.TLSVersion.TLSv1
        server.maximum_version = ssl.TLSVersion[broker_tls]
    server.set_ciphers("DEFAULT:@SECLEVEL=0")
    seen: list[str] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        def accept() -> None:
            conn, _ = listener.accept()
            try:
                with server.wrap_socket(conn, server_side=True) as tls:
                    seen.append(str(tls.version()))
            except (ssl.SSLError, OSError) as exc:
                seen.append(str(exc))
                conn.close()

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        settings = KafkaAuditSettings(kafka_bootstrap_servers=f"127.0.0.1:{listener.getsockname()[1]}",
                                      kafka_security_protocol="SSL", kafka_ssl_ca_file=cert, kafka_client="librdkafka")
        sink = KafkaSink.from_settings(settings, max_block_ms=300)
        assert sink is not None
        sink.write(_event())
        thread.join(10)
        sink.close(timeout_s=0)
    assert len(seen) == 1 and handshake in seen[0]


def test_the_seal_key_is_generated_owner_only_beside_the_database_only_when_records_are_shipped(
    tmp_path: Path,
) -> None:
    from audit.kafka_seal import public_key_pem

    assert Settings(data_dir=tmp_path / "a").audit_seal_key() is None  # no topic: no key, no file
    assert not (tmp_path / "a").exists()
    off = Settings(data_dir=tmp_path / "b", audit={"kafka_bootstrap_servers": "h:9092", "kafka_seal": False})
    assert off.audit_seal_key() is None
    settings = Settings(data_dir=tmp_path / "c", audit={"kafka_bootstrap_servers": "h:9092"})
    key = settings.audit_seal_key()
    assert key is not None and settings.audit_seal_key_file == tmp_path / "c" / "audit-seal.key"
    assert settings.audit_seal_key_file.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "c").stat().st_mode & 0o777 == 0o700
    again = settings.audit_seal_key()
    assert again is not None and public_key_pem(again) == public_key_pem(key)
    sink = KafkaSink.from_settings(settings.audit, key, start=False)
    assert sink is not None and sink._sealer is not None and "PRIVATE" not in repr(sink._sealer)


def test_a_configured_seal_key_file_must_exist_and_names_the_setting(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, audit={"kafka_bootstrap_servers": "h:9092",
                                                  "kafka_seal_key_file": tmp_path / "typo.key"})
    with pytest.raises(ValueError, match=r"typo.key does not exist \(\[audit\] kafka_seal_key_file\)"):
        settings.audit_seal_key()
    assert not (tmp_path / "typo.key").exists()


def test_the_seal_writer_defaults_to_the_host_name_and_is_bounded(tmp_path: Path) -> None:
    import socket

    settings = Settings(data_dir=tmp_path, audit={"kafka_bootstrap_servers": "h:9092"})
    sink = KafkaSink.from_settings(settings.audit, settings.audit_seal_key(), start=False)
    assert sink is not None and sink._sealer is not None and sink._sealer.writer == socket.gethostname()[:64]
    for bad in ("x" * 65, "", "node 1"):
        with pytest.raises(ValidationError, match="kafka_seal_writer"):
            KafkaAuditSettings(kafka_seal_writer=bad)
