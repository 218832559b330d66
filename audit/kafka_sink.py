"""Ships the audit trail's CloudEvents to a Kafka topic, as Confluent Platform ships its audit log to
`confluent-audit-log-events` on a cluster of the operator's choice (its `destinations.bootstrap_servers`).

The file sink (`audit.sinks.JsonLinesSink`) stays the record of truth; this sink is a copy for a SIEM or
a Spark job, and it never fails or slows down the request that wrote the event:
- `write` puts the serialized event into a bounded buffer (bytes, as the Java producer's `buffer.memory`)
  and returns; one shipper thread sends the buffer in order through a producer: confluent-kafka's
  (librdkafka) when it is importable, else kafka-python's (`[audit] kafka_client`). Nothing raises: an
  event that does not fit in the buffer is counted (`buffer_full`) and logged, rate-limited.
- Records are keyed by the event's `source`, so one source's events land in one partition, in the order
  written. A failed attempt (broker down, no metadata, not authorized, ...) is counted
  (`delivery_failures`), logged rate-limited, and the undelivered events stay at the head of the buffer
  and are sent again after a backoff, ahead of everything written since. Delivery is at least once: after
  an attempt whose answer was lost, a reader may see an event twice (same CloudEvents `id`, by which
  the spec says to deduplicate).
- An event larger than the producer's `max_request_size`, or refused by the broker as larger than the
  topic's `max.message.bytes`, can never be sent: counted (`too_large`), logged, and skipped (it is in the
  file); the events around it are shipped.
- Shutdown (`close`): nothing new is accepted, the shipper keeps sending for at most `close_timeout_s`,
  then what is left is counted (`unshipped_at_close`) and logged; those events are only in the file.

Records are the CloudEvents Kafka protocol binding's structured mode: the value is the event's JSON
(`AuditEvent.to_json()`), header `content-type: application/cloudevents+json; charset=UTF-8`, key the
event's `source`. With a `Sealer` (`[audit] kafka_seal`), each record also carries a header `kgov-seal`:
its link in a hash chain per writer epoch, signed (Ed25519) on checkpoints (audit.kafka_seal): the last
record handed to the client before the buffer runs empty, and under sustained load every 1000 records or
second. Made on the shipper thread the first time the record is sent (`_sealed`) and kept for every resend.

Why librdkafka by default: kafka-python is pure Python, and its sender holds the interpreter lock while it
encodes and sends, so every thread that writes audit events (the gateway writes one per request) waits for
it; librdkafka's I/O threads are C and do not hold it (docs/benchmarks.md, audit_kafka_sink_bench). The
shipper drives either client the same way: an attempt is produced, then flushed, and its answers decide
what leaves the buffer. librdkafka's own log lines go to the Python logger `librdkafka` (not stderr),
with the SASL password masked.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import socket
import ssl
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from functools import partial
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from audit.kafka_seal import SEAL_HEADER, Sealer
from audit.model import AuditEvent

log = logging.getLogger("kgov.audit.kafka")

DEFAULT_TOPIC = "kgov-audit-log-events"
CONTENT_TYPE = ("content-type", b"application/cloudevents+json; charset=UTF-8")
# The Java producer's buffer.memory default.
DEFAULT_BUFFER_BYTES = 32 * 1024 * 1024
# Kafka's topic name rule (org.apache.kafka.common.internals.Topic.validate).
_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_HOST_PORT = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9._-]+)):(?P<port>\d{1,5})")

KafkaSecurityProtocol = Literal["PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL"]
KafkaSaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
KafkaClientChoice = Literal["auto", "librdkafka", "kafka-python"]
KafkaClient = Literal["librdkafka", "kafka-python"]
# kafka-python's max_request_size default, which the sink has always used: the largest event shipped.
MAX_REQUEST_BYTES = 1024 * 1024
# librdkafka's log lines (through confluent-kafka's `logger`), silenced unless logging configures it.
LIBRDKAFKA_LOGGER = "librdkafka"


def resolve_client(choice: KafkaClientChoice) -> KafkaClient:
    """`auto`: librdkafka when confluent-kafka is importable, else kafka-python. A client named but not
    installed fails here, at start, not on the shipper thread."""
    if choice == "auto":
        return "librdkafka" if importlib.util.find_spec("confluent_kafka") is not None else "kafka-python"
    module, package = ("confluent_kafka", "confluent-kafka (kgov[clients])") if choice == "librdkafka" \
        else ("kafka", "kafka-python")
    if importlib.util.find_spec(module) is None:
        raise ImportError(f"audit.kafka_client = {choice!r} needs the {package} package; install it or use 'auto'")
    return choice


def parse_bootstrap_servers(text: str) -> tuple[str, ...]:
    """`host:port,host:port` (Kafka's bootstrap.servers) as a tuple; ValueError naming the bad entry."""
    servers = tuple(part.strip() for part in text.split(",") if part.strip())
    if not servers:
        raise ValueError("audit.kafka_bootstrap_servers is empty: give host:port[,host:port...]")
    for server in servers:
        match = _HOST_PORT.fullmatch(server)
        if match is None or not 1 <= int(match["port"]) <= 65535:
            raise ValueError(f"audit.kafka_bootstrap_servers: {server!r} is not host:port")
    return servers


class KafkaAuditSettings(BaseModel):
    """The `[audit] kafka_*` settings (README's settings table). Shipping is off unless
    `kafka_bootstrap_servers` is set."""

    # A validation error would otherwise echo the section, the SASL password included.
    model_config = ConfigDict(hide_input_in_errors=True)

    kafka_bootstrap_servers: str | None = None
    kafka_topic: str = DEFAULT_TOPIC
    kafka_security_protocol: KafkaSecurityProtocol = "PLAINTEXT"
    kafka_sasl_mechanism: KafkaSaslMechanism = "SCRAM-SHA-512"
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = Field(default=None, repr=False)
    # CA bundle (PEM) that signs the brokers' certificates; unset: the system store.
    kafka_ssl_ca_file: Path | None = None
    # Client certificate and its unencrypted key (PEM), for brokers that require TLS client auth.
    kafka_ssl_cert_file: Path | None = None
    kafka_ssl_key_file: Path | None = None
    kafka_buffer_bytes: int = Field(default=DEFAULT_BUFFER_BYTES, ge=64 * 1024)
    kafka_close_timeout_s: float = Field(default=5.0, ge=0, le=300)
    # auto: librdkafka (confluent-kafka) when installed, else kafka-python.
    kafka_client: KafkaClientChoice = "auto"
    # Seal each record (header kgov-seal, audit.kafka_seal): a hash chain per writer, signed with an Ed25519
    # key at checkpoints.
    kafka_seal: bool = True
    # None: `<data_dir>/audit-seal.key`, generated (0600) on first start. Set: the file must exist.
    kafka_seal_key_file: Path | None = None
    # Who the seals say wrote the records; None: the host name.
    kafka_seal_writer: str | None = Field(default=None, pattern=r"^\S{1,64}$")  # no spaces: `verify` prints it

    @field_validator("kafka_bootstrap_servers")
    @classmethod
    def _servers(cls, v: str | None) -> str | None:
        if v is not None:
            parse_bootstrap_servers(v)
        return v

    @field_validator("kafka_topic")
    @classmethod
    def _topic(cls, v: str) -> str:
        if not _TOPIC.fullmatch(v) or v in (".", ".."):
            raise ValueError(f"audit.kafka_topic {v!r} is not a legal Kafka topic name "
                             "(1-249 of a-z A-Z 0-9 . _ -)")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> KafkaAuditSettings:
        sasl = self.kafka_security_protocol.startswith("SASL_")
        tls = self.kafka_security_protocol.endswith("SSL")
        if sasl and (not self.kafka_sasl_username or self.kafka_sasl_password is None):
            raise ValueError(f"audit.kafka_security_protocol={self.kafka_security_protocol} logs in: set "
                             "audit.kafka_sasl_username and KGOV_AUDIT__KAFKA_SASL_PASSWORD")
        if not sasl and (self.kafka_sasl_username or self.kafka_sasl_password is not None):
            # Would be ignored: the operator believes the sink authenticates when it does not.
            raise ValueError("audit.kafka_sasl_username/password are set but audit.kafka_security_protocol is "
                             f"{self.kafka_security_protocol}: use SASL_SSL (or SASL_PLAINTEXT), or remove them")
        files = (self.kafka_ssl_ca_file, self.kafka_ssl_cert_file, self.kafka_ssl_key_file)
        if not tls and any(f is not None for f in files):
            raise ValueError("audit.kafka_ssl_* files are set but audit.kafka_security_protocol is "
                             f"{self.kafka_security_protocol}: use SSL or SASL_SSL, or remove them")
        if (self.kafka_ssl_cert_file is None) != (self.kafka_ssl_key_file is None):
            raise ValueError("audit.kafka_ssl_cert_file and audit.kafka_ssl_key_file go together (client certificate "
                             "and its key)")
        return self


@dataclass(frozen=True, slots=True)
class KafkaSinkStats:
    """Counters since start (`kgov_audit_kafka_*` on /metrics). `delivery_failures` counts failed
    attempts (their events stay buffered and are retried); the other failure counts are events that
    will never reach the topic (they are in the file sink)."""

    shipped: int
    delivery_failures: int
    buffer_full: int
    too_large: int
    unshipped_at_close: int
    buffered_events: int
    buffered_bytes: int


class _Producer(Protocol):
    """What the sink uses of kafka-python's KafkaProducer."""

    def send(self, topic: str, value: bytes | None = ..., key: bytes | None = ...,
             headers: list[tuple[str, bytes]] | None = ...) -> Any: ...
    def flush(self, timeout: float | None = ...) -> None: ...
    def close(self, timeout: float | None = ...) -> None: ...


class _RdProducer(Protocol):
    """What the sink uses of confluent-kafka's Producer."""

    def produce(self, topic: str, value: bytes | None = ..., key: bytes | None = ...,
                headers: list[tuple[str, bytes]] | None = ..., on_delivery: Callable[[Any, Any], None] = ...) -> None: ...
    def flush(self, timeout: float = ...) -> int: ...
    def purge(self, in_queue: bool = ..., in_flight: bool = ..., blocking: bool = ...) -> None: ...
    def list_topics(self, topic: str | None = ..., timeout: float = ...) -> Any: ...


class _Outcome(Enum):
    """What became of one record of an attempt."""

    DELIVERED = "delivered"
    OVERSIZED = "oversized"  # refused by the client itself: larger than a request may be
    REFUSED_TOO_LARGE = "refused_too_large"  # refused by the broker (MESSAGE_TOO_LARGE), alone or with its batch
    FAILED = "failed"  # retriable: no answer, broker down, not authorized, ...


class _LibrdkafkaLog:
    """confluent-kafka's `logger`: librdkafka's lines to the `librdkafka` Python logger, the SASL password
    masked (librdkafka redacts its sensitive properties itself; this is the second lock)."""

    def __init__(self, password: str | None) -> None:
        self.logger = logging.getLogger(LIBRDKAFKA_LOGGER)
        self.password = password

    def log(self, level: int, msg: str, *args: object) -> None:
        if not self.logger.isEnabledFor(level):
            return
        try:
            text = msg % args if args else msg
        except (TypeError, ValueError):  # never let a log line fail the flush that served it
            text = " ".join(str(part) for part in (msg, *args))
        if self.password:
            text = text.replace(self.password, "***")
        self.logger.log(level, "%s", text)


class RateLimitedLog:
    """A WARNING per kind of problem at most every `interval_s`, saying how many were not logged since."""

    def __init__(self, logger: logging.Logger, interval_s: float = 60.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.monotonic = monotonic
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._lock = threading.Lock()

    def warning(self, kind: str, message: str, *args: object) -> bool:
        """Logs unless `kind` was logged less than `interval_s` ago; whether it logged."""
        now = self.monotonic()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self.interval_s:
                self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
                return False
            self._last[kind] = now
            suppressed = self._suppressed.pop(kind, 0)
        if suppressed:
            message += f" ({suppressed} more since the last such warning)"
        self.logger.warning(message, *args)
        return True


class _Record(NamedTuple):
    key: bytes
    value: bytes
    size: int  # key and value, counted against the buffer (computed once: the shipper reads it often)
    # The kgov-seal header, set by the shipper the first time the record is sent; _NOT_SEALED: too large
    # to be sent at all.
    seal: bytes | None = None


_NOT_SEALED = b""
# A record's size in a produce request beyond its key, value and seal, generously (headers' names, the
# content type, varints, the record and batch headers): a record above MAX_REQUEST_BYTES with it is
# refused by the client whatever it holds.
_RECORD_OVERHEAD = 200


def _headers(record: _Record) -> list[tuple[str, bytes]]:
    return [CONTENT_TYPE, (SEAL_HEADER, record.seal)] if record.seal else [CONTENT_TYPE]


def tls_context(settings: KafkaAuditSettings) -> ssl.SSLContext | None:
    if not settings.kafka_security_protocol.endswith("SSL"):
        return None
    ca = settings.kafka_ssl_ca_file
    ctx = ssl.create_default_context(cafile=str(ca) if ca is not None else None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings.kafka_ssl_cert_file is not None and settings.kafka_ssl_key_file is not None:
        ctx.load_cert_chain(str(settings.kafka_ssl_cert_file), str(settings.kafka_ssl_key_file))
    return ctx


def kafka_python_connection(security_protocol: KafkaSecurityProtocol, sasl_mechanism: KafkaSaslMechanism | None,
                            sasl_username: str | None, sasl_password: str | None,
                            ssl_context: ssl.SSLContext | None) -> dict[str, Any]:
    """How kafka-python's clients reach and log in to the cluster (the sink's producer, the verifier's
    consumer: audit.kafka_topic_reader)."""
    return {
        "security_protocol": security_protocol,
        "ssl_context": ssl_context,
        "sasl_mechanism": sasl_mechanism if security_protocol.startswith("SASL_") else None,
        "sasl_plain_username": sasl_username,
        "sasl_plain_password": sasl_password,
    }


def librdkafka_connection(security_protocol: KafkaSecurityProtocol, sasl_mechanism: KafkaSaslMechanism | None,
                          sasl_username: str | None, sasl_password: str | None,
                          ssl_files: tuple[Path | None, Path | None, Path | None]) -> dict[str, Any]:
    """The same under librdkafka's names (CONFIGURATION.md), its log lines to the `librdkafka` logger."""
    # librdkafka's TLS is OpenSSL's, configured by file: the ssl_context (kafka-python's) is not used.
    # Without a CA file it verifies against the system store, so it never trusts more than the context.
    ca_file, cert_file, key_file = ssl_files
    config: dict[str, Any] = {"security.protocol": security_protocol, "logger": _LibrdkafkaLog(sasl_password)}
    if security_protocol.startswith("SASL_"):
        config.update({"sasl.mechanism": sasl_mechanism, "sasl.username": sasl_username,
                       "sasl.password": sasl_password})
    if security_protocol.endswith("SSL"):
        # As tls_context(): the CA file or the system store ("probe": the wheels link OpenSSL
        # statically), host names checked. librdkafka has no minimum-version property; its OpenSSL 3
        # offers nothing older than TLS 1.2 at the default security level (a unit test holds it to it).
        config.update({"ssl.ca.location": str(ca_file) if ca_file is not None else "probe",
                       "ssl.endpoint.identification.algorithm": "https"})
        if cert_file is not None and key_file is not None:
            config.update({"ssl.certificate.location": str(cert_file), "ssl.key.location": str(key_file)})
    return config


class KafkaSink:
    """`AuditSink` that ships events to `topic` in the background (see the module docstring).

    Timeouts are the producer's (milliseconds, as kafka-python names them): `delivery_timeout_ms` bounds
    one attempt, `max_block_ms` a wait for the topic's metadata. `retry_backoff_s` doubles after each failed
    attempt up to `retry_backoff_max_s`. Before an attempt that would not be full, the shipper waits
    `linger_s` for more events (Kafka 4.0's linger.ms default, 5 ms).

    `client` picks the producer (`resolve_client`). TLS: kafka-python uses `ssl_context`, librdkafka the
    `ssl_*_file`s (from_settings gives both).
    """

    # One attempt sends at most this much, so each partition's share fits in one producer batch (below):
    # a produce request's batch is written or refused whole, so an attempt fails per source all or nothing.
    MAX_ATTEMPT_EVENTS = 1000
    MAX_ATTEMPT_BYTES = 512 * 1024

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str = DEFAULT_TOPIC,
        *,
        security_protocol: KafkaSecurityProtocol = "PLAINTEXT",
        sasl_mechanism: KafkaSaslMechanism | None = None,
        sasl_username: str | None = None,
        sasl_password: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        ssl_ca_file: Path | None = None,
        ssl_cert_file: Path | None = None,
        ssl_key_file: Path | None = None,
        client: KafkaClientChoice = "auto",
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        close_timeout_s: float = 5.0,
        delivery_timeout_ms: int = 30_000,
        max_block_ms: int = 1_000,
        retry_backoff_s: float = 0.1,
        retry_backoff_max_s: float = 5.0,
        linger_s: float = 0.005,
        log_interval_s: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
        producer_factory: Callable[[dict[str, Any]], Any] | None = None,
        sealer: Sealer | None = None,
        start: bool = True,
    ) -> None:
        self.bootstrap_servers = parse_bootstrap_servers(bootstrap_servers)
        self.client = resolve_client(client)
        self.topic = topic
        self.buffer_bytes = buffer_bytes
        self.close_timeout_s = close_timeout_s
        self.delivery_timeout_ms = delivery_timeout_ms
        self.retry_backoff_s = retry_backoff_s
        self.retry_backoff_max_s = retry_backoff_max_s
        self.linger_s = linger_s
        self.monotonic = monotonic
        self._password = sasl_password
        self._sealer = sealer
        self.max_block_ms = max_block_ms
        request_timeout_ms = max(1, delivery_timeout_ms // 3)
        linger_ms = max(0, min(500, delivery_timeout_ms - request_timeout_ms - 1))
        self._last_client_error: str | None = None  # librdkafka's error_cb, read by the shipper
        if self.client == "librdkafka":
            self._producer_config = self._librdkafka_config(
                security_protocol, sasl_mechanism, sasl_username, sasl_password,
                (ssl_ca_file, ssl_cert_file, ssl_key_file), linger_ms, request_timeout_ms, delivery_timeout_ms,
                retry_backoff_max_s)
            self._producer_factory = producer_factory or _librdkafka_producer
            quiet = logging.getLogger(LIBRDKAFKA_LOGGER)
        else:
            self._producer_config = self._kafka_python_config(
                security_protocol, sasl_mechanism, sasl_username, sasl_password, ssl_context, linger_ms,
                request_timeout_ms, delivery_timeout_ms, max_block_ms, retry_backoff_max_s)
            self._producer_factory = producer_factory or _kafka_producer
            import_kafka_python()  # here, not on the shipper thread: catch_warnings is process-wide
            quiet = logging.getLogger("kafka")
        if quiet.level == logging.NOTSET:
            # kafka-python logs an ERROR per reconnect attempt while the broker is down (librdkafka a
            # FAIL line); this sink says the same once a minute. Unless logging configures the logger.
            quiet.setLevel(logging.CRITICAL)
        if self.client == "librdkafka":
            # Lines below the logger's level are not even formatted by librdkafka (syslog levels).
            self._producer_config["log_level"] = _syslog_level(quiet.getEffectiveLevel())
        self._warn = RateLimitedLog(log, log_interval_s, monotonic)
        self._cond = threading.Condition()
        self._buffer: deque[_Record] = deque()
        self._buffered_bytes = 0
        self._closing = False
        self._close_deadline = float("inf")
        self._finished = False  # the shipper has counted what was left; nothing changes after
        self._shipped = 0
        self._delivery_failures = 0
        self._buffer_full = 0
        self._too_large = 0
        self._unshipped_at_close = 0
        self._one_by_one = 0  # records at the head to send one per attempt (refused together as too large)
        self._thread = threading.Thread(target=self._run, name=f"kgov-audit-kafka-{topic}", daemon=True)
        if start:
            self._thread.start()

    def _kafka_python_config(
        self, security_protocol: KafkaSecurityProtocol, sasl_mechanism: KafkaSaslMechanism | None,
        sasl_username: str | None, sasl_password: str | None, ssl_context: ssl.SSLContext | None, linger_ms: int,
        request_timeout_ms: int, delivery_timeout_ms: int, max_block_ms: int, retry_backoff_max_s: float,
    ) -> dict[str, Any]:
        return {
            "bootstrap_servers": list(self.bootstrap_servers),
            "client_id": "kgov-audit",
            "acks": "all",
            # Order per partition without the idempotent producer: a broker that lost its producer
            # state (a restart, Tansu's memory storage) would otherwise refuse every later batch
            # with UnknownProducerId. One request in flight keeps a retried batch ahead of the next.
            "enable_idempotence": False,
            "max_in_flight_requests_per_connection": 1,
            # Each attempt is flushed at once; the linger only keeps an attempt's records of one
            # partition in one batch while they are appended.
            "linger_ms": linger_ms,
            "batch_size": 2 * self.MAX_ATTEMPT_BYTES,
            "delivery_timeout_ms": delivery_timeout_ms,
            "request_timeout_ms": request_timeout_ms,
            "max_block_ms": max_block_ms,
            "bootstrap_timeout_ms": max(max_block_ms, 1_000),
            "reconnect_backoff_max_ms": int(retry_backoff_max_s * 1000),
            "max_request_size": MAX_REQUEST_BYTES,
            **kafka_python_connection(security_protocol, sasl_mechanism, sasl_username, sasl_password, ssl_context),
        }

    def _librdkafka_config(
        self, security_protocol: KafkaSecurityProtocol, sasl_mechanism: KafkaSaslMechanism | None,
        sasl_username: str | None, sasl_password: str | None,
        ssl_files: tuple[Path | None, Path | None, Path | None], linger_ms: int, request_timeout_ms: int,
        delivery_timeout_ms: int, retry_backoff_max_s: float,
    ) -> dict[str, Any]:
        """The kafka-python settings above under librdkafka's names (CONFIGURATION.md)."""
        config: dict[str, Any] = {
            "bootstrap.servers": ",".join(self.bootstrap_servers),
            "client.id": "kgov-audit",
            "acks": "all",
            # As above: no idempotent producer, one request in flight. Checked with Tansu restarted behind
            # the same address (memory storage: its producer state gone): librdkafka's idempotent producer
            # had every later record time out, the plain one delivered them at once (the integration test
            # test_a_broker_that_lost_its_producer_state_takes_the_next_events_at_once).
            "enable.idempotence": False,
            "max.in.flight.requests.per.connection": 1,
            # flush() sends at once whatever the linger (librdkafka >= 1.5): the linger only keeps an
            # attempt's records of one partition in one batch while they are produced.
            "linger.ms": linger_ms,
            "batch.size": 2 * self.MAX_ATTEMPT_BYTES,
            "batch.num.messages": 2 * self.MAX_ATTEMPT_EVENTS,
            "message.max.bytes": MAX_REQUEST_BYTES,
            "message.timeout.ms": delivery_timeout_ms,  # delivery.timeout.ms's librdkafka name
            "request.timeout.ms": request_timeout_ms,
            "reconnect.backoff.max.ms": int(retry_backoff_max_s * 1000),
            # TCP connect and TLS/SASL handshake (default 30 s): kafka-python's bootstrap_timeout_ms.
            "socket.connection.setup.timeout.ms": max(1000, request_timeout_ms),
            "error_cb": self._client_error,
            **librdkafka_connection(security_protocol, sasl_mechanism, sasl_username, sasl_password, ssl_files),
        }
        return config

    def _client_error(self, error: Any) -> None:
        """librdkafka's error_cb (on the shipper thread, from flush): the latest, to explain a timeout."""
        self._last_client_error = str(error)

    @classmethod
    def from_settings(cls, settings: KafkaAuditSettings, seal_key: Ed25519PrivateKey | None = None,
                      **options: Any) -> KafkaSink | None:
        """The sink `settings` describe, sealing with `seal_key` when given (`kgov.settings.Settings.
        audit_seal_key`); None when `kafka_bootstrap_servers` is not set."""
        if settings.kafka_bootstrap_servers is None:
            return None
        if seal_key is not None:
            options.setdefault("sealer", Sealer(seal_key, settings.kafka_seal_writer or socket.gethostname()[:64]))
        sasl = settings.kafka_security_protocol.startswith("SASL_")
        password = settings.kafka_sasl_password
        return cls(
            settings.kafka_bootstrap_servers,
            settings.kafka_topic,
            security_protocol=settings.kafka_security_protocol,
            sasl_mechanism=settings.kafka_sasl_mechanism if sasl else None,
            sasl_username=settings.kafka_sasl_username if sasl else None,
            sasl_password=password.get_secret_value() if sasl and password is not None else None,
            ssl_context=tls_context(settings),  # also loads the files now: a missing one fails at start
            ssl_ca_file=settings.kafka_ssl_ca_file,
            ssl_cert_file=settings.kafka_ssl_cert_file,
            ssl_key_file=settings.kafka_ssl_key_file,
            client=settings.kafka_client,
            buffer_bytes=settings.kafka_buffer_bytes,
            close_timeout_s=settings.kafka_close_timeout_s,
            **options,
        )

    def __repr__(self) -> str:
        return f"KafkaSink(bootstrap_servers={','.join(self.bootstrap_servers)!r}, topic={self.topic!r})"

    # ------------------------------------------------------------------ the request path

    def write(self, event: AuditEvent) -> None:
        """Queues `event` for shipping; never raises and never waits for the network."""
        key, value = event.source.encode("utf-8"), event.to_json().encode("utf-8")
        record = _Record(key, value, len(key) + len(value))
        with self._cond:
            if self._closing or self._finished:
                refused = "closed"
            elif self._buffered_bytes + record.size > self.buffer_bytes:
                self._buffer_full += 1
                refused = "full"
            else:
                self._buffer.append(record)
                self._buffered_bytes += record.size
                if len(self._buffer) == 1:
                    self._cond.notify()  # the shipper waits only for an empty buffer (or a backoff)
                return
        if refused == "full":
            self._warn.warning("buffer_full", "audit events not shipped to Kafka topic %s: the %d-byte buffer is full "
                               "(the broker is unreachable or slow); they are in the audit file only",
                               self.topic, self.buffer_bytes)
        else:
            with self._cond:
                self._unshipped_at_close += 1
            self._warn.warning("closed", "audit event written after the Kafka sink for %s closed: in the audit file "
                               "only", self.topic)

    def stats(self) -> KafkaSinkStats:
        with self._cond:
            return KafkaSinkStats(self._shipped, self._delivery_failures, self._buffer_full, self._too_large,
                                  self._unshipped_at_close, len(self._buffer), self._buffered_bytes)

    # ------------------------------------------------------------------ shutdown

    def close(self, timeout_s: float | None = None) -> None:
        """Stops accepting events, ships what is buffered for at most `timeout_s` (default
        `close_timeout_s`), then counts and logs what is left. Returns within about that bound."""
        timeout = self.close_timeout_s if timeout_s is None else timeout_s
        with self._cond:
            if not self._closing:
                self._closing = True
                self._close_deadline = self.monotonic() + timeout
            self._cond.notify_all()
        if self._thread.is_alive():
            # The shipper checks the deadline between steps; a step waits at most max_block_ms for
            # metadata, or until the deadline for a flush.
            self._thread.join(timeout + self.max_block_ms / 1000 + 2.0)
        self._finish()

    def _finish(self) -> None:
        with self._cond:
            if self._finished:
                return
            self._finished = True
            left = len(self._buffer)
            self._unshipped_at_close += left
            self._buffer.clear()
            self._buffered_bytes = 0
        if left:
            log.warning("%d audit event(s) not shipped to Kafka topic %s before shutdown; they are in the audit "
                        "file only", left, self.topic)

    # ------------------------------------------------------------------ the shipper thread

    def _run(self) -> None:
        producer: Any = None
        backoff = self.retry_backoff_s
        try:
            while True:
                attempt = self._next_attempt()
                if attempt is None:
                    break
                attempt = self._sealed(attempt)
                if producer is None:
                    try:
                        producer = self._producer_factory(dict(self._producer_config))
                    except Exception as exc:
                        self._failed_attempt(len(attempt), exc)
                        backoff = self._back_off(backoff)
                        continue
                if all(self._send(producer, attempt)):
                    backoff = self.retry_backoff_s
                else:
                    # A new producer for the retry: fresh metadata and connections, and no state left
                    # from a failure the client may not recover from (every answer of the attempt is in).
                    self._dispose(producer)
                    producer = None
                    backoff = self._back_off(backoff)
        except Exception:
            log.exception("the audit Kafka shipper for %s stopped; events are no longer shipped", self.topic)
        finally:
            if producer is not None:
                self._dispose(producer)
            self._finish()

    def _next_attempt(self) -> list[_Record] | None:
        """The records at the head of the buffer to send next (left in it until delivered); None once
        closing and empty or past the close deadline."""
        with self._cond:
            while not self._buffer and not self._closing:
                self._cond.wait()
            if len(self._buffer) < self.MAX_ATTEMPT_EVENTS and not self._closing and self.linger_s > 0:
                # As a producer's linger.ms: an attempt of many events costs this thread (and the
                # interpreter the writers share) far less per event than one per event. Writes do not
                # wake it (the buffer is not empty); close() does.
                self._cond.wait(self.linger_s)
            if self._finished or not self._buffer or (self._closing and self.monotonic() >= self._close_deadline):
                return None
            attempt: list[_Record] = []
            size = 0
            most = 1 if self._one_by_one else self.MAX_ATTEMPT_EVENTS
            for record in self._buffer:
                if attempt and (len(attempt) >= most or size + record.size > self.MAX_ATTEMPT_BYTES):
                    break
                attempt.append(record)
                size += record.size
            return attempt

    def _sealed(self, attempt: list[_Record]) -> list[_Record]:
        """`attempt` with every record sealed. Sealed here, on the shipper thread, not in `write`: the seal
        stays off the request path, and records refused by a full buffer or left at shutdown take no seq, so
        they leave no gap. A record is sealed once, the first time it is sent, and keeps its seal in the
        buffer: one sent again is the same bytes (a duplicate to the verifier, not a second record). A record
        too large for any produce request is not sealed: the client refuses it (`too_large`), and a seq it
        took would show as a record deleted from the topic.

        Each record gets its link; the last one sealed here is a signed checkpoint when nothing waits in the
        buffer behind the attempt (an idle sink leaves no unsigned tail), others when the `Sealer` says
        (every `checkpoint_records` records or `checkpoint_s` under sustained load)."""
        sealer = self._sealer
        if sealer is None or attempt[-1].seal is not None:  # sealed in order: the last tells
            return attempt
        with self._cond:
            drains = len(self._buffer) <= len(attempt)  # the attempt is the head of the buffer
        fits = [r.seal is None and r.size + _RECORD_OVERHEAD + sealer.size <= MAX_REQUEST_BYTES for r in attempt]
        last = max((i for i, fit in enumerate(fits) if fit), default=-1)
        sealed = [_Record(r.key, r.value, r.size, sealer.seal(r.value, last=drains and i == last)) if fits[i]
                  else r if r.seal is not None else r._replace(seal=_NOT_SEALED) for i, r in enumerate(attempt)]
        with self._cond:
            if not self._finished:  # only the shipper takes records off the head, so it is still `attempt`
                for i, record in enumerate(sealed):
                    if attempt[i].seal is None:
                        self._buffer[i] = record
        return sealed

    def _send(self, producer: Any, attempt: list[_Record]) -> list[bool]:
        """Sends `attempt` and waits for the answers; removes what was delivered (or can never be: too
        large) from the buffer. Returns which records left it."""
        if self.client == "librdkafka":
            outcomes, failure = self._attempt_librdkafka(producer, attempt)
        else:
            outcomes, failure = self._attempt_kafka_python(producer, attempt)
        refused = [i for i, o in enumerate(outcomes) if o is _Outcome.REFUSED_TOO_LARGE]
        # A batch is refused whole: one record refused was alone in its batch, too large by itself. Several
        # may be one batch too large only together (kafka-python splits such a batch, unless its delivery
        # timeout has passed; librdkafka never does): they are kept and sent one per attempt before any
        # is dropped.
        together = len(refused) > 1 and len(attempt) > 1
        if together and failure is None:
            failure = ValueError(f"{len(refused)} events refused together as larger than the topic's "
                                 "max.message.bytes: sent one per attempt next")
        too_large = {i for i, o in enumerate(outcomes)
                     if o is _Outcome.OVERSIZED or (not together and o is _Outcome.REFUSED_TOO_LARGE)}
        delivered = [i in too_large or o is _Outcome.DELIVERED for i, o in enumerate(outcomes)]
        kept = [r for r, ok in zip(attempt, delivered, strict=True) if not ok]
        with self._cond:
            if self._finished:  # close() gave up waiting and counted the buffer as unshipped
                return delivered
            for _ in attempt:
                self._buffered_bytes -= self._buffer.popleft().size
            self._buffer.extendleft(reversed(kept))
            self._buffered_bytes += sum(r.size for r in kept)
            self._shipped += sum(delivered) - len(too_large)
            self._too_large += len(too_large)
            if together:
                self._one_by_one = len(refused)
            elif len(attempt) == 1 and self._one_by_one and delivered[0]:
                self._one_by_one -= 1
        for i in sorted(too_large):
            self._warn.warning("too_large", "an audit event of %d bytes is larger than a produce request may be "
                               "or than the topic's max.message.bytes: not shipped to Kafka topic %s (it is in the "
                               "audit file)", attempt[i].size, self.topic)
        if not all(delivered) and failure is not None:
            self._failed_attempt(len(kept), failure)
        return delivered

    def _attempt_kafka_python(self, producer: _Producer,
                              attempt: list[_Record]) -> tuple[list[_Outcome], Exception | None]:
        from kafka.errors import MessageSizeTooLargeError

        futures: list[Any] = []  # None: refused by send() itself as larger than max_request_size
        failure: Exception | None = None
        for record in attempt:
            try:
                futures.append(producer.send(self.topic, value=record.value, key=record.key, headers=_headers(record)))
            except MessageSizeTooLargeError:
                futures.append(None)  # the others of the attempt still go
            except Exception as exc:  # no metadata within max_block_ms, a closed producer, ...
                failure = exc
                break
        if any(f is not None for f in futures):
            try:
                producer.flush(timeout=self._flush_timeout())
            except Exception as exc:
                failure = failure or exc
        outcomes: list[_Outcome] = []
        for future in futures:
            if future is None:
                outcomes.append(_Outcome.OVERSIZED)
            elif _too_large(future):
                outcomes.append(_Outcome.REFUSED_TOO_LARGE)
            elif _succeeded(future):
                outcomes.append(_Outcome.DELIVERED)
            else:
                outcomes.append(_Outcome.FAILED)
            if outcomes[-1] is _Outcome.FAILED:
                failure = failure or _failure(future)
        outcomes += [_Outcome.FAILED] * (len(attempt) - len(futures))
        return outcomes, failure

    def _attempt_librdkafka(self, producer: _RdProducer,
                            attempt: list[_Record]) -> tuple[list[_Outcome], Exception | None]:
        from confluent_kafka import KafkaError, KafkaException

        answers: list[Any] = [_PENDING] * len(attempt)  # the delivery report's error (None: delivered)
        outcomes = [_Outcome.FAILED] * len(attempt)
        failure: Exception | None = None
        self._last_client_error = None
        produce, topic, unsealed = producer.produce, self.topic, [CONTENT_TYPE]  # copied by produce()
        for i, record in enumerate(attempt):
            try:
                produce(topic, value=record.value, key=record.key,
                        headers=_headers(record) if record.seal else unsealed,
                        on_delivery=partial(_answer, answers, i))
            except KafkaException as exc:
                if _error_code(exc) == KafkaError.MSG_SIZE_TOO_LARGE:  # above message.max.bytes
                    answers[i] = None
                    outcomes[i] = _Outcome.OVERSIZED
                    continue
                failure = exc
                break
            except Exception as exc:  # BufferError (its queue full), ...
                failure = exc
                break
        # Flushed in slices so that close() can cut the wait short. librdkafka does not wait for metadata
        # in produce() as kafka-python's send() does (max_block_ms): a cluster that is down would show only
        # as no answer within message.timeout.ms (30 s). So after max_block_ms without an answer, one
        # metadata request, bounded by max_block_ms, tells an unreachable cluster from a slow one.
        started = self.monotonic()
        deadline = started + self._flush_timeout()
        checked = failure is not None
        while any(a is _PENDING for a in answers):
            left = min(deadline - self.monotonic(), self._flush_timeout())
            if left <= 0:
                break
            try:
                producer.flush(min(left, 0.1))
                if not checked and self.monotonic() - started >= self.max_block_ms / 1000 and all(
                        a is _PENDING or o is _Outcome.OVERSIZED for a, o in zip(answers, outcomes, strict=True)):
                    checked = True
                    producer.list_topics(self.topic, timeout=self.max_block_ms / 1000)
            except Exception as exc:  # KafkaException: no metadata (_TRANSPORT, _TIMED_OUT, ...)
                failure = failure or exc
                break
        for i, answer in enumerate(answers):
            if outcomes[i] is _Outcome.OVERSIZED or answer is _PENDING:
                continue
            if answer is None:
                outcomes[i] = _Outcome.DELIVERED
            elif answer.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                outcomes[i] = _Outcome.REFUSED_TOO_LARGE
            else:
                failure = failure or KafkaException(answer)
        if failure is None and any(a is _PENDING for a in answers):
            failure = TimeoutError("no answer from the broker")
        if failure is not None and self._last_client_error:
            failure = type(failure)(f"{failure}; last client error: {self._last_client_error}")
        return outcomes, failure

    def _dispose(self, producer: Any) -> None:
        """Drops a producer after a failed attempt or at the end: its unanswered records are purged (they
        are still in the buffer, and go with the next producer), so none of them is sent later, out of
        order."""
        try:
            if self.client == "librdkafka":
                producer.purge()
                producer.flush(0)  # serves the purged records' delivery reports
            else:
                producer.close(timeout=0)
        except Exception as exc:  # the buffer is what matters; a failed close only frees sockets
            log.debug("closing the audit Kafka producer failed: %s", type(exc).__name__)

    def _flush_timeout(self) -> float:
        """A flush waits for every answer (the producer expires a batch after delivery_timeout_ms), or
        until the close deadline."""
        full = self.delivery_timeout_ms / 1000 + 1.0
        with self._cond:
            if self._closing:
                return max(0.0, min(full, self._close_deadline - self.monotonic()))
        return full

    def _failed_attempt(self, events: int, exc: BaseException) -> None:
        with self._cond:
            self._delivery_failures += 1
        self._warn.warning("delivery", "shipping %d audit event(s) to Kafka topic %s at %s failed (%s); they stay "
                           "buffered and are retried", events, self.topic, ",".join(self.bootstrap_servers),
                           self._describe(exc))

    def _describe(self, exc: BaseException) -> str:
        text = f"{type(exc).__name__}: {exc}"
        if self._password:
            text = text.replace(self._password, "***")  # defensive: no client error is known to quote it
        return text[:300]  # cut after masking: a cut through the password would leave its first characters

    def _back_off(self, backoff: float) -> float:
        """Waits `backoff` seconds (less once closing would pass the deadline); the next backoff."""
        with self._cond:
            wait = backoff
            if self._closing:
                wait = min(wait, max(0.0, self._close_deadline - self.monotonic()))
            deadline = self.monotonic() + wait
            was_closing = self._closing
            while True:
                left = deadline - self.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
                if self._closing and not was_closing:
                    # close() was called: retry now, then within its deadline
                    break
        return min(backoff * 2, self.retry_backoff_max_s)


def _succeeded(future: Any) -> bool:
    return bool(future.is_done and future.succeeded())


def _too_large(future: Any) -> bool:
    """The broker refused the record as larger than the topic's max.message.bytes (kafka-python splits a
    refused batch first, so this is the record itself): it can never be sent, as for Kafka's producer,
    whose RecordTooLargeException is not retriable."""
    from kafka.errors import MessageSizeTooLargeError, RecordListTooLargeError

    return bool(future.is_done and not future.succeeded()
                and isinstance(future.exception, (MessageSizeTooLargeError, RecordListTooLargeError)))


_PENDING = object()


def _answer(answers: list[Any], i: int, error: Any, message: Any) -> None:
    """confluent-kafka's on_delivery for record `i` of an attempt."""
    answers[i] = error


def _error_code(exc: BaseException) -> Any:
    error: Any = exc.args[0] if exc.args else None
    code = getattr(error, "code", None)
    return code() if callable(code) else None


def _syslog_level(level: int) -> int:
    """A Python logging level as librdkafka's log_level (syslog: 7 debug ... 2 critical)."""
    for python, syslog in ((logging.DEBUG, 7), (logging.INFO, 6), (logging.WARNING, 4), (logging.ERROR, 3)):
        if level <= python:
            return syslog
    return 2


def _failure(future: Any) -> Exception | None:
    if not future.is_done:
        return TimeoutError("no answer from the broker")
    exc = future.exception
    return exc if isinstance(exc, Exception) else None


def import_kafka_python() -> None:
    """Imports kafka-python, which loads its protocol schemas through a deprecated importlib.resources
    call (a DeprecationWarning; gateway/codec.py does the same). The imports are lazy so that `audit`
    stays light for readers of its formats (spark_compliance)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka
        import kafka.errors  # noqa: F401


def _kafka_producer(config: dict[str, Any]) -> _Producer:
    from kafka import KafkaProducer

    producer: _Producer = KafkaProducer(**config)
    return producer


def _librdkafka_producer(config: dict[str, Any]) -> _RdProducer:
    from confluent_kafka import Producer

    producer: Any = Producer(config)  # its stubs type headers wider than _RdProducer does
    return producer  # type: ignore[no-any-return]
