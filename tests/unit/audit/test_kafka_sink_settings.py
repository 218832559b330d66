"""The `[audit] kafka_*` settings and the Kafka sink's rate-limited log (audit.kafka_sink), without a broker."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pydantic import ValidationError

from audit.kafka_sink import KafkaAuditSettings, KafkaSink, RateLimitedLog, parse_bootstrap_servers
from kgov.settings import Settings

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
