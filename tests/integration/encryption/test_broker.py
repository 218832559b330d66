"""Encrypting serdes through real confluent-kafka clients and a real Tansu broker (issue 6, done-when)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.deserializing_consumer import DeserializingConsumer
from confluent_kafka.error import ValueDeserializationError, ValueSerializationError
from confluent_kafka.serialization import StringDeserializer, StringSerializer
from confluent_kafka.serializing_producer import SerializingProducer

from encryption import (
    DecryptingDeserializer,
    DecryptionError,
    EncryptingSerializer,
    LocalKms,
    RecordKeyDeserializer,
    RecordKeySerializer,
)
from encryption.reencrypt import ReencryptionReport, Reencryptor, reencrypt_topic

pytestmark = pytest.mark.broker

SECRETS = [f"iban DE89-3704-0044-0532-0130-{i:02d}" for i in range(10)]


def new_topic(bootstrap: str) -> str:
    topic = f"enc-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        future.result(timeout=30)
    return topic


def read_raw(bootstrap: str, topic: str, count: int) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    messages = []
    try:
        while len(messages) < count:
            msg = consumer.poll(10)
            assert msg is not None, f"only {len(messages)} of {count} records arrived"
            assert msg.error() is None, msg.error()
            messages.append(msg)
    finally:
        consumer.close()
    return messages


def read_decrypted(bootstrap: str, topic: str, kms: LocalKms, count: int) -> list[tuple[str, str | None]]:
    consumer = DeserializingConsumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"dec-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "key.deserializer": RecordKeyDeserializer(kms, StringDeserializer()),
        "value.deserializer": DecryptingDeserializer(kms, StringDeserializer()),
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    records = []
    try:
        while len(records) < count:
            msg = consumer.poll(10)
            assert msg is not None, f"only {len(records)} of {count} records arrived"
            records.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return records


def produce(bootstrap: str, topic: str, kms: LocalKms, items: list[tuple[str, str | None]], **options: bool) -> None:
    producer = SerializingProducer({
        "bootstrap.servers": bootstrap,
        "key.serializer": RecordKeySerializer(kms, "orders", StringSerializer(),
                                              hash_keys=options.pop("hash_keys", False)),
        "value.serializer": EncryptingSerializer(kms, "orders", StringSerializer(), **options),
    })
    for key, value in items:
        producer.produce(topic, key=key, value=value, headers=[])
    assert producer.flush(30) == 0


def test_produce_encrypted_read_raw_then_decrypt_across_rotation(kafka_broker: str, tmp_path: Path) -> None:
    kms = LocalKms(tmp_path / "ring.json")
    kms.create_key("orders")
    topic = new_topic(kafka_broker)
    produce(kafka_broker, topic, kms, [(f"customer-{i}", SECRETS[i]) for i in range(5)])
    kms.rotate_key("orders")
    produce(kafka_broker, topic, kms, [(f"customer-{i}", SECRETS[i]) for i in range(5, 10)])
    produce(kafka_broker, topic, kms, [("customer-0", None)])  # a tombstone

    raw = read_raw(kafka_broker, topic, 11)
    for msg in raw[:10]:
        assert b"DE89" not in msg.value() and b"iban" not in msg.value()
        assert all(b"DE89" not in (value or b"") for _, value in msg.headers())
    assert raw[10].value() is None
    versions = []
    for msg in raw[:10]:
        header = dict(msg.headers())["kgov.enc"]
        versions.append(int.from_bytes(header[3 + len("orders") : 7 + len("orders")], "big"))
    assert versions == [1] * 5 + [2] * 5

    decrypted = read_decrypted(kafka_broker, topic, kms, 11)
    assert decrypted == [(f"customer-{i}", SECRETS[i]) for i in range(10)] + [("customer-0", None)]


def test_bind_key_without_record_key_serializer_stores_nothing(kafka_broker: str, tmp_path: Path) -> None:
    kms = LocalKms(tmp_path / "ring.json")
    kms.create_key("orders")
    topic = new_topic(kafka_broker)
    encrypting = EncryptingSerializer(kms, "orders", StringSerializer())
    unpaired = SerializingProducer({"bootstrap.servers": kafka_broker, "key.serializer": StringSerializer(),
                                    "value.serializer": encrypting})
    with pytest.raises(ValueSerializationError, match="RecordKeySerializer"):
        unpaired.produce(topic, key="alice", value=SECRETS[0], headers=[])
    assert unpaired.flush(30) == 0
    produce(kafka_broker, topic, kms, [("bob", SECRETS[1])])  # paired: the only record in the topic
    raw = read_raw(kafka_broker, topic, 1)
    assert raw[0].key() == b"bob" and raw[0].offset() == 0
    consumer = Consumer({"bootstrap.servers": kafka_broker, "group.id": f"end-{uuid.uuid4().hex}"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    assert (low, high) == (0, 1)


def test_tampered_record_fails_with_decryption_error(kafka_broker: str, tmp_path: Path) -> None:
    kms = LocalKms(tmp_path / "ring.json")
    kms.create_key("orders")
    topic = new_topic(kafka_broker)
    produce(kafka_broker, topic, kms, [("k", SECRETS[0])])
    original = read_raw(kafka_broker, topic, 1)[0]
    tampered = bytearray(original.value())
    tampered[3] ^= 0x40
    producer = Producer({"bootstrap.servers": kafka_broker})
    producer.produce(topic, key=original.key(), value=bytes(tampered), headers=original.headers())
    assert producer.flush(30) == 0

    consumer = DeserializingConsumer({
        "bootstrap.servers": kafka_broker, "group.id": f"t-{uuid.uuid4().hex}",
        "key.deserializer": RecordKeyDeserializer(kms, StringDeserializer()),
        "value.deserializer": DecryptingDeserializer(kms, StringDeserializer()),
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        first = consumer.poll(10)
        assert first is not None and first.value() == SECRETS[0]
        with pytest.raises(ValueDeserializationError) as info:
            consumer.poll(10)
    finally:
        consumer.close()
    assert isinstance(info.value.exception, DecryptionError)
    assert info.value.exception.topic == topic

    # On raw messages, the error also names partition and offset.
    raw = read_raw(kafka_broker, topic, 2)
    deserializer = DecryptingDeserializer(kms, StringDeserializer())
    assert deserializer.decrypt_message(raw[0]) == SECRETS[0]
    with pytest.raises(DecryptionError, match=f"topic={topic} partition=0 offset=1"):
        deserializer.decrypt_message(raw[1])


def test_hashed_keys_keep_partitioning_and_hide_the_original(kafka_broker: str, tmp_path: Path) -> None:
    kms = LocalKms(tmp_path / "ring.json")
    kms.create_key("orders")
    topic = new_topic(kafka_broker)
    items: list[tuple[str, str | None]] = [("alice@example.com", "v1"), ("bob@example.com", "v2"),
                                          ("alice@example.com", "v3")]
    produce(kafka_broker, topic, kms, items, hash_keys=True, compress=True)
    raw = read_raw(kafka_broker, topic, 3)
    assert all(b"example" not in msg.key() and len(msg.key()) == 32 for msg in raw)
    assert raw[0].key() == raw[2].key() != raw[1].key()
    assert all(b"example" not in (v or b"") for msg in raw for _, v in msg.headers())
    assert read_decrypted(kafka_broker, topic, kms, 3) == items


def test_reencrypt_compacted_topic_after_rotation(kafka_broker: str, tmp_path: Path) -> None:
    kms = LocalKms(tmp_path / "ring.json")
    kms.create_key("orders")
    topic = new_topic(kafka_broker)
    produce(kafka_broker, topic, kms, [("a", "a-old"), ("b", "b-only"), ("a", "a-latest"), ("c", None)],
            hash_keys=True)
    kms.rotate_key("orders")

    report = reencrypt_topic({"bootstrap.servers": kafka_broker}, topic, Reencryptor(kms, "orders"))
    assert report == ReencryptionReport(read=4, rewritten=2, already_current=0, tombstones=1)

    raw = read_raw(kafka_broker, topic, 6)
    rewritten = raw[4:]
    for msg in rewritten:
        header = dict(msg.headers())["kgov.enc"]
        assert int.from_bytes(header[3 + len("orders") : 7 + len("orders")], "big") == 2
    # Same hashed keys as the records they supersede, so compaction drops the old ones.
    assert {msg.key() for msg in rewritten} == {raw[1].key(), raw[2].key()}
    decrypted = read_decrypted(kafka_broker, topic, kms, 6)
    assert sorted(decrypted[4:]) == [("a", "a-latest"), ("b", "b-only")]
    # Nothing left to do on a second run.
    again = reencrypt_topic({"bootstrap.servers": kafka_broker}, topic, Reencryptor(kms, "orders"))
    assert (again.rewritten == 2 and again.already_current == 0) or again.already_current == 2


def test_reencrypt_command(kafka_broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kgov.cli import main

    ring = tmp_path / "ring.json"
    kms = LocalKms(ring)
    kms.create_key("orders")
    topic = new_topic(kafka_broker)
    produce(kafka_broker, topic, kms, [("a", "one"), ("b", "two")])
    assert main(["encryption", "keys", "rotate", "orders", "--key-ring", str(ring)]) == 0
    conf = tmp_path / "client.properties"
    conf.write_text("# settings kept off the command line\nclient.id=kgov-test\n")
    assert main(["encryption", "reencrypt", "--bootstrap", kafka_broker, "--topic", topic, "--key", "orders",
                 "--key-ring", str(ring), "--command-config", str(conf),
                 "--client-property", "socket.timeout.ms=30000"]) == 0
    assert "read 2 records; rewrote 2, 0 already current, 0 tombstones" in capsys.readouterr().out
    assert sorted(read_decrypted(kafka_broker, topic, kms, 4)[2:]) == [("a", "one"), ("b", "two")]
    assert main(["encryption", "reencrypt", "--bootstrap", kafka_broker, "--topic", "no-such-topic-x",
                 "--key", "orders", "--key-ring", str(ring), "--timeout", "5"]) == 1
    assert "no-such-topic-x" in capsys.readouterr().err


def test_reencrypt_stopped_by_a_bad_record_delivers_the_rewrites_before_it(
    kafka_broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record that cannot be decrypted stops the run; what was rewritten before it is delivered (and
    said), not left in the producer's queue to be dropped with it."""
    from kgov.cli import main

    kms = LocalKms(tmp_path / "ring.json")
    kms.create_key("orders")
    topic = new_topic(kafka_broker)
    produce(kafka_broker, topic, kms, [(f"k{i}", f"v{i}") for i in range(20)])
    planted = Producer({"bootstrap.servers": kafka_broker})
    planted.produce(topic, key=b"zz", value=b"plaintext someone wrote")
    assert planted.flush(10) == 0
    kms.rotate_key("orders")
    with pytest.raises(DecryptionError, match=r"offset=20.*not encrypted") as info:
        reencrypt_topic({"bootstrap.servers": kafka_broker}, topic, Reencryptor(kms, "orders"))
    assert len(read_raw(kafka_broker, topic, 41)) == 41
    assert "20 records rewritten before" in str(info.value.__notes__)
    # The command says it too; the second run finds the first 20 current and stops at the same record.
    assert main(["encryption", "reencrypt", "--bootstrap", kafka_broker, "--topic", topic, "--key", "orders",
                 "--key-ring", str(tmp_path / "ring.json")]) == 1
    err = capsys.readouterr().err
    assert "offset=20" in err and "0 records rewritten before the failure, all delivered" in err
