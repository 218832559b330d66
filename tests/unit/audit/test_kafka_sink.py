"""audit.kafka_sink.KafkaSink's handling of answers a test broker cannot give (Tansu enforces no topic
max.message.bytes), with either client: a producer with kafka-python's interface, its futures kafka-python's
own, or with confluent-kafka's (librdkafka), its errors confluent-kafka's own KafkaError."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from audit.kafka_sink import CONTENT_TYPE, MAX_REQUEST_BYTES, KafkaSink
from audit.model import EventType, change_event

T0 = datetime(2026, 11, 22, 7, 0, tzinfo=UTC)
LIMIT = 10_000  # the topic's max.message.bytes, in this test


CLIENTS = pytest.mark.parametrize("client", ["kafka-python", "librdkafka"])


class TopicWithSmallMaxMessageBytes:
    """A producer whose records above LIMIT are refused: by the broker (MESSAGE_TOO_LARGE in the record's
    future, once kafka-python has split the batch down to that record) or by the client's own
    max_request_size check in send()."""

    def __init__(self, refused_by: str) -> None:
        self.refused_by = refused_by
        self.delivered: list[bytes] = []

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None,
             headers: list[tuple[str, bytes]] | None = None) -> Any:
        from kafka.errors import MessageSizeTooLargeError  # imported once the sink has (its warning quieted)
        from kafka.future import Future

        assert value is not None
        if len(value) > LIMIT:
            if self.refused_by == "client":
                raise MessageSizeTooLargeError(f"The message is {len(value)} bytes when serialized")
            return Future().failure(MessageSizeTooLargeError())
        self.delivered.append(value)
        return Future().success(None)

    def flush(self, timeout: float | None = None) -> None: ...

    def close(self, timeout: float | None = None) -> None: ...


@CLIENTS
@pytest.mark.parametrize("refused_by", ["broker", "client"])
def test_an_event_too_large_for_the_topic_is_skipped_not_retried_forever(refused_by: str, client: str) -> None:
    """Kafka's producer fails such a record for good (RecordTooLargeException is not retriable); retrying it
    re-sent it with every attempt, counted a failure and rebuilt the producer each time, backing off up to
    5 s between attempts, so the other events slowed to one attempt per backoff."""
    producers: list[Any] = []

    def factory(config: dict[str, Any]) -> Any:
        fake = TopicWithSmallMaxMessageBytes if client == "kafka-python" else RdTopicWithSmallMaxMessageBytes
        producers.append(fake(refused_by))
        return producers[-1]

    events = [change_event(type=EventType.ACL_CHANGE, source="crn:///kafka=a", time=T0, principal="User:admin",
                           method_name="CreateAcls", target=f"topic=t{i}",
                           details={"blob": "x" * (2 * LIMIT if i == 1 else 10)}) for i in range(3)]
    sink = KafkaSink("k:9092", "t", client=client, producer_factory=factory, start=False)  # type: ignore[arg-type]
    for event in events:
        sink.write(event)
    sink._thread.start()
    sink.close(timeout_s=2)
    stats = sink.stats()
    assert (stats.shipped, stats.too_large, stats.delivery_failures, stats.unshipped_at_close) == (2, 1, 0, 0)
    assert len(producers) == 1
    assert producers[0].delivered == [events[0].to_json().encode(), events[2].to_json().encode()]


class BrokerThatCannotSplit(TopicWithSmallMaxMessageBytes):
    """Each flush's records form one batch, refused whole with MESSAGE_TOO_LARGE when above LIMIT: what
    kafka-python reports for a batch it may no longer split (its delivery timeout reached)."""

    def __init__(self) -> None:
        super().__init__("broker")
        self.pending: list[tuple[bytes, Any]] = []

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None,
             headers: list[tuple[str, bytes]] | None = None) -> Any:
        from kafka.future import Future

        assert value is not None
        self.pending.append((value, Future()))
        return self.pending[-1][1]

    def flush(self, timeout: float | None = None) -> None:
        from kafka.errors import MessageSizeTooLargeError

        too_large = sum(len(v) for v, _ in self.pending) > LIMIT
        for value, future in self.pending:
            if too_large:
                future.failure(MessageSizeTooLargeError())
            else:
                self.delivered.append(value)
                future.success(None)
        self.pending = []


class RdTopicWithSmallMaxMessageBytes:
    """TopicWithSmallMaxMessageBytes with confluent-kafka's Producer interface: librdkafka refuses a record
    above message.max.bytes in produce() (KafkaException MSG_SIZE_TOO_LARGE), the broker in the delivery
    report."""

    def __init__(self, refused_by: str) -> None:
        self.refused_by = refused_by
        self.delivered: list[bytes] = []
        self.pending: list[tuple[bytes, Any]] = []

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                headers: list[tuple[str, bytes]] | None = None, on_delivery: Any = None) -> None:
        assert value is not None and headers == [CONTENT_TYPE]
        if len(value) > LIMIT and self.refused_by == "client":
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        self.pending.append((value, on_delivery))

    def refuses(self, value: bytes) -> bool:
        return len(value) > LIMIT

    def flush(self, timeout: float = -1) -> int:
        for value, on_delivery in self.pending:
            if self.refuses(value):
                on_delivery(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), None)
            else:
                self.delivered.append(value)
                on_delivery(None, None)
        self.pending = []
        return 0

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        self.pending = []


class RdBrokerThatCannotSplit(RdTopicWithSmallMaxMessageBytes):
    """BrokerThatCannotSplit for librdkafka, which never splits a batch the broker refused as too large."""

    def __init__(self) -> None:
        super().__init__("broker")

    def refuses(self, value: bytes) -> bool:
        return sum(len(v) for v, _ in self.pending) > LIMIT  # the whole batch


@CLIENTS
def test_records_refused_together_as_too_large_are_tried_one_by_one_before_any_is_dropped(client: str) -> None:
    """Several records refused in one attempt may be one batch too large as a whole, each of them fine:
    they are sent one per attempt, and only one refused on its own is dropped."""
    producers: list[Any] = []

    def factory(config: dict[str, Any]) -> Any:
        producers.append(BrokerThatCannotSplit() if client == "kafka-python" else RdBrokerThatCannotSplit())
        return producers[-1]

    sizes = [10, LIMIT * 6 // 10, LIMIT * 6 // 10, 2 * LIMIT, 10]
    events = [change_event(type=EventType.ACL_CHANGE, source="crn:///kafka=a", time=T0, principal="User:admin",
                           method_name="CreateAcls", target=f"topic=t{i}", details={"blob": "x" * size})
              for i, size in enumerate(sizes)]
    sink = KafkaSink("k:9092", "t", client=client, producer_factory=factory, retry_backoff_s=0.01,  # type: ignore[arg-type]
                     start=False)
    for event in events:
        sink.write(event)
    sink._thread.start()
    sink.close(timeout_s=5)
    stats = sink.stats()
    assert (stats.shipped, stats.too_large, stats.unshipped_at_close) == (4, 1, 0)
    delivered = [v for p in producers for v in p.delivered]
    assert delivered == [e.to_json().encode() for i, e in enumerate(events) if i != 3]


@CLIENTS
def test_a_failure_quoting_the_password_near_the_cut_leaks_no_part_of_it(
        client: str, caplog: pytest.LogCaptureFixture) -> None:
    """The failure text is cut to 300 characters for the log; cut before the password was masked, a password
    straddling the cut was left in part (its first characters, unmasked) in the WARNING."""
    password = "S3cretPassw0rd-0123456789"
    sink = KafkaSink("localhost:9092", security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                     sasl_username="audit", sasl_password=password, client=client, start=False)
    for filler in range(270, 300):
        caplog.clear()
        sink._warn.interval_s = 0.0
        with caplog.at_level("WARNING", logger="kgov"):
            sink._failed_attempt(1, RuntimeError("x" * filler + password))
        text = caplog.text
        assert "shipping 1 audit event(s)" in text
        assert password[:8] not in text, filler


class FailsFirstAttempt:
    """A topic whose first attempt gets no answer (every record fails, retriable) and whose later attempts
    are delivered; what each attempt sent (value, headers) is kept, with either client's interface."""

    def __init__(self, attempts: list[list[tuple[bytes, list[tuple[str, bytes]]]]]) -> None:
        self.attempts = attempts
        attempts.append([])
        self.pending: list[Any] = []

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None,
             headers: list[tuple[str, bytes]] | None = None) -> Any:
        from kafka.future import Future

        assert value is not None and headers is not None
        self.attempts[-1].append((value, list(headers)))
        self.pending.append(Future())
        return self.pending[-1]

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                headers: list[tuple[str, bytes]] | None = None, on_delivery: Any = None) -> None:
        assert value is not None and headers is not None
        self.attempts[-1].append((value, list(headers)))
        self.pending.append(on_delivery)

    def flush(self, timeout: float | None = None) -> int:
        from kafka.errors import KafkaTimeoutError

        first = len(self.attempts) == 1
        for answer in self.pending:
            if callable(answer):  # librdkafka's on_delivery
                answer(KafkaError(KafkaError._MSG_TIMED_OUT) if first else None, None)
            else:
                answer.failure(KafkaTimeoutError()) if first else answer.success(None)
        self.pending = []
        return 0

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        self.pending = []

    def close(self, timeout: float | None = None) -> None: ...


@CLIENTS
def test_a_record_sent_again_keeps_its_seal_and_an_event_refused_by_a_full_buffer_takes_no_seq(client: str) -> None:
    """The verifier sees a resent record as a duplicate only if it is the same bytes; a seq taken by an event
    that never left the process would be a gap in the chain (audit.kafka_seal)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from audit.kafka_seal import SEAL_HEADER, Sealer, key_id, parse_seal, verify_records
    from audit.kafka_seal import TopicRecord as Rec

    key = Ed25519PrivateKey.generate()
    attempts: list[list[tuple[bytes, list[tuple[str, bytes]]]]] = []
    events = [change_event(type=EventType.ACL_CHANGE, source="crn:///kafka=a", time=T0, principal="User:admin",
                           method_name="CreateAcls", target=f"topic=t{i}",
                           details={"blob": "x" * (70_000 if i == 2 else 10)}) for i in range(5)]
    sink = KafkaSink("k:9092", "t", client=client,  # type: ignore[arg-type]
                     producer_factory=lambda config: FailsFirstAttempt(attempts), sealer=Sealer(key, "n"),
                     buffer_bytes=64 * 1024, retry_backoff_s=0.01, start=False)
    for event in events:
        sink.write(event)  # the third does not fit in the buffer beside the others
    sink._thread.start()
    sink.close(timeout_s=5)
    assert (sink.stats().shipped, sink.stats().buffer_full) == (4, 1)
    assert len(attempts) == 2 and attempts[0] == attempts[1]  # the retry: the same values, the same seals
    seals = [dict(headers)[SEAL_HEADER] for _, headers in attempts[1]]
    assert [parse_seal(s).seq for s in seals] == [0, 1, 2, 3]
    topic = [Rec(0, i, v, tuple(h)) for i, (v, h) in enumerate(attempts[0] + attempts[1])]
    report = verify_records(topic, {key_id(key.public_key()): key.public_key()})
    assert report.ok and (report.chains[0].verified, report.chains[0].duplicates) == (4, 4)


class RefusesAboveRequestSize(FailsFirstAttempt):
    """Delivers at once, but refuses in send()/produce() a record above the producer's request size, as
    kafka-python (MessageSizeTooLargeError) and librdkafka (MSG_SIZE_TOO_LARGE) do."""

    def __init__(self, attempts: list[list[tuple[bytes, list[tuple[str, bytes]]]]]) -> None:
        super().__init__(attempts)
        attempts.append([])  # not the first attempt: delivered

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None,
             headers: list[tuple[str, bytes]] | None = None) -> Any:
        from kafka.errors import MessageSizeTooLargeError

        if value is not None and len(value) > MAX_REQUEST_BYTES:
            raise MessageSizeTooLargeError("too large")
        return super().send(topic, value, key, headers)

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                headers: list[tuple[str, bytes]] | None = None, on_delivery: Any = None) -> None:
        if value is not None and len(value) > MAX_REQUEST_BYTES:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        super().produce(topic, value, key, headers, on_delivery)


@CLIENTS
def test_an_event_too_large_for_any_request_takes_no_seq_so_it_leaves_no_gap(client: str) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from audit.kafka_seal import SEAL_HEADER, Sealer, key_id, parse_seal, verify_records
    from audit.kafka_seal import TopicRecord as Rec

    key = Ed25519PrivateKey.generate()
    attempts: list[list[tuple[bytes, list[tuple[str, bytes]]]]] = []
    sink = KafkaSink("k:9092", "t", client=client,  # type: ignore[arg-type]
                     producer_factory=lambda config: RefusesAboveRequestSize(attempts), sealer=Sealer(key, "n"),
                     start=False)
    for i, size in enumerate((10, MAX_REQUEST_BYTES + 10, 10)):
        sink.write(change_event(type=EventType.ACL_CHANGE, source="crn:///kafka=a", time=T0, principal="User:admin",
                                method_name="CreateAcls", target=f"topic=t{i}", details={"blob": "x" * size}))
    sink._thread.start()
    sink.close(timeout_s=5)
    assert (sink.stats().shipped, sink.stats().too_large) == (2, 1)
    sent = [r for attempt in attempts for r in attempt]
    assert [parse_seal(dict(headers)[SEAL_HEADER]).seq for _, headers in sent] == [0, 1]
    report = verify_records([Rec(0, i, v, tuple(h)) for i, (v, h) in enumerate(sent)],
                            {key_id(key.public_key()): key.public_key()})
    assert report.ok and report.chains[0].verified == 2


@CLIENTS
def test_the_sink_signs_the_last_record_before_its_buffer_runs_empty_and_links_the_others(client: str) -> None:
    """Seal version 2: a signature per checkpoint, not per record (audit.kafka_seal). Five events in one
    attempt after which the buffer is empty: the last is signed, the four before it carry only their link;
    with a checkpoint every 2 records, so are seq 1 and 3 (as under sustained load)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from audit.kafka_seal import SEAL_HEADER, Sealer, key_id, parse_seal, verify_records
    from audit.kafka_seal import TopicRecord as Rec

    key = Ed25519PrivateKey.generate()
    for every, signed in ((1000, [4]), (2, [1, 3, 4])):
        attempts: list[list[tuple[bytes, list[tuple[str, bytes]]]]] = []
        sink = KafkaSink("k:9092", "t", client=client,  # type: ignore[arg-type]
                         producer_factory=lambda config: RefusesAboveRequestSize(attempts),  # noqa: B023
                         sealer=Sealer(key, "n", checkpoint_records=every), start=False)
        for i in range(5):
            sink.write(change_event(type=EventType.ACL_CHANGE, source="crn:///kafka=a", time=T0,
                                    principal="User:admin", method_name="CreateAcls", target=f"topic=t{i}", details={}))
        sink._thread.start()
        sink.close(timeout_s=5)
        sent = [r for attempt in attempts for r in attempt]
        seals = [parse_seal(dict(headers)[SEAL_HEADER]) for _, headers in sent]
        assert [s.seq for s in seals] == [0, 1, 2, 3, 4]
        assert [s.seq for s in seals if s.signature is not None] == signed
        report = verify_records([Rec(0, i, v, tuple(h)) for i, (v, h) in enumerate(sent)],
                                {key_id(key.public_key()): key.public_key()})
        assert report.ok and (report.chains[0].verified, report.pending) == (5, 0)
