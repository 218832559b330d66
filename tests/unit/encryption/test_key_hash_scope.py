"""Hashed keys (`RecordKeySerializer(hash_keys=...)`): per topic for new topics, per KEK (the hash of
builds before 2026-11-22) for topics already written that way, and `True` keeps meaning per KEK (with
a warning) so that no existing topic's hashes change under compaction."""

from __future__ import annotations

import hashlib
import hmac
import logging

import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from encryption import (
    EncryptingSerializer,
    EncryptionError,
    LocalKms,
    RecordKeyDeserializer,
    RecordKeySerializer,
)
from encryption.datakeys import DataKeyIssuer
from encryption.envelope import FIELD_KEY, FLAG_KEY_BOUND, KEY_HEADER
from encryption.reencrypt import Reencryptor
from encryption.serdes import PayloadSealer, RecordContext


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("encryption.serdes._WARNED", set())


def wire_key(kms: LocalKms, topic: str, key: bytes, hash_keys: object) -> tuple[bytes, list]:
    headers: list = []
    hashed = RecordKeySerializer(kms, "orders", hash_keys=hash_keys)(  # type: ignore[arg-type]
        key, SerializationContext(topic, MessageField.KEY, headers))
    assert hashed is not None
    return hashed, headers


def test_per_topic_hashes_differ_between_topics_and_survive_rotation(kms: LocalKms) -> None:
    orders, _ = wire_key(kms, "orders", b"alice", "topic")
    invoices, _ = wire_key(kms, "invoices", b"alice", "topic")
    assert orders != invoices  # not linkable across topics by the key
    assert wire_key(kms, "orders", b"alice", "topic")[0] == orders  # stable: same partition, compaction
    assert wire_key(kms, "orders", b"bob", "topic")[0] != orders
    kms.rotate_key("orders")
    assert wire_key(kms, "orders", b"alice", "topic")[0] == orders
    # Length-prefixed topic: topic "ab" + key "c" is not topic "a" + key "bc".
    assert wire_key(kms, "ab", b"c", "topic")[0] != wire_key(kms, "a", b"bc", "topic")[0]


def test_per_kek_hashes_are_the_ones_written_before(kms: LocalKms) -> None:
    before = hmac.new(kms.derived_secret("orders", b"key-hash"), b"alice", hashlib.sha256).digest()
    assert wire_key(kms, "orders", b"alice", "kek")[0] == before
    assert wire_key(kms, "invoices", b"alice", "kek")[0] == before  # the same on every topic, as before
    assert wire_key(kms, "orders", b"alice", "topic")[0] != before


def test_true_keeps_the_per_kek_hash_and_warns_once(kms: LocalKms, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "encryption")
    assert wire_key(kms, "orders", b"alice", True)[0] == wire_key(kms, "orders", b"alice", "kek")[0]
    wire_key(kms, "orders", b"bob", True)
    warnings = [r.getMessage() for r in caplog.records if r.name == "encryption"]
    assert len(warnings) == 1 and "hash_keys='topic' for new topics" in warnings[0]
    assert "alice" not in warnings[0]
    with pytest.raises(EncryptionError, match="hash_keys takes 'topic', 'kek' or False"):
        RecordKeySerializer(kms, "orders", hash_keys="per-topic")  # type: ignore[arg-type]


@pytest.mark.parametrize("scope", ["topic", "kek"])
def test_consumers_read_either_scope(kms: LocalKms, scope: str) -> None:
    hashed, headers = wire_key(kms, "orders", b"alice", scope)
    reader = RecordKeyDeserializer(kms, hashed_keys=True, kek_names=["orders"])
    assert reader(hashed, SerializationContext("orders", MessageField.KEY, headers)) == b"alice"


def test_rewriting_keeps_each_records_scope_and_refuses_a_foreign_hash(kms: LocalKms) -> None:
    reencryptor = Reencryptor(kms, "orders")
    for scope in ("topic", "kek"):
        ctx = SerializationContext("orders", MessageField.KEY, [])
        key = RecordKeySerializer(kms, "orders", hash_keys=scope)(b"alice", ctx)  # type: ignore[arg-type]
        ctx.field = MessageField.VALUE
        value = EncryptingSerializer(kms, "orders")(b"v", ctx)
        kms.rotate_key("orders")
        assert reencryptor.rewrite("orders", key, value, ctx.headers).key == key
    # A protected original whose wire key is no hash of it in either scope (written by hand under the
    # KEK): rewriting it with either hash would change its key, so it is refused.
    sealer = PayloadSealer(DataKeyIssuer(kms), "orders")
    not_a_hash = b"\x01" * 32
    header, ciphertext = sealer.seal(FLAG_KEY_BOUND, FIELD_KEY, "orders", not_a_hash, b"alice")
    headers = [(KEY_HEADER, header + ciphertext)]
    value = EncryptingSerializer(kms, "orders")(b"v", RecordContext(
        "orders", MessageField.VALUE, headers, key=not_a_hash))
    with pytest.raises(EncryptionError, match="not the per-topic or per-KEK hash of its protected original"):
        reencryptor.rewrite("orders", not_a_hash, value, headers)
