"""Fuzzed inputs only ever raise DecryptionError; concurrent producers never reuse a nonce."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from confluent_kafka.serialization import MessageField, SerializationContext
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from encryption import DataKeyPolicy, DecryptingDeserializer, DecryptionError, EncryptingSerializer, LocalKms
from encryption.envelope import HEADER, MAGIC, parse_header
from encryption.fields import FieldDecryptingDeserializer, FieldEncryptingSerializer, FieldPolicy

_RING: dict[str, LocalKms] = {}


def ring(factory: pytest.TempPathFactory) -> LocalKms:
    if "kms" not in _RING:
        kms = LocalKms(factory.mktemp("fuzz") / "ring.json")
        kms.create_key("orders")
        _RING["kms"] = kms
    return _RING["kms"]


def valid_record(kms: LocalKms) -> tuple[bytes, bytes]:
    headers: list[tuple[str, bytes]] = []
    value = EncryptingSerializer(kms, "orders", bind_key=False)(b"payload", SerializationContext("t", MessageField.VALUE, headers))
    assert value is not None
    return value, headers[0][1]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_headers_and_values_raise_only_decryption_error(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    kms = ring(tmp_path_factory)
    value, header = valid_record(kms)
    mode = data.draw(st.sampled_from(["random", "mutate-header", "mutate-value", "envelope", "truncate"]))
    if mode == "random":
        header = data.draw(st.binary(max_size=200))
        value = data.draw(st.binary(max_size=200))
    elif mode == "mutate-header":
        position = data.draw(st.integers(0, len(header) - 1))
        header = header[:position] + bytes([header[position] ^ data.draw(st.integers(1, 255))]) + header[position + 1:]
    elif mode == "mutate-value":
        position = data.draw(st.integers(0, len(value) - 1))
        value = value[:position] + bytes([value[position] ^ data.draw(st.integers(1, 255))]) + value[position + 1:]
    elif mode == "truncate":
        header = header[: data.draw(st.integers(0, len(header) - 1))]
    else:  # a self-contained envelope cut short, maybe with other bytes after the cut
        envelope = MAGIC + header + value
        broken = envelope[: data.draw(st.integers(0, len(envelope) - 1))] + data.draw(st.binary(max_size=3))
        assume(broken != envelope)
        with pytest.raises(DecryptionError):
            DecryptingDeserializer(kms)(broken, SerializationContext("t", MessageField.VALUE, None))
        return
    with pytest.raises(DecryptionError):
        DecryptingDeserializer(kms)(value, SerializationContext("t", MessageField.VALUE, [(HEADER, header)]))


@settings(max_examples=200, deadline=None)
@given(blob=st.binary(max_size=300), start=st.integers(0, 5))
def test_parse_header_raises_only_decryption_error(blob: bytes, start: int) -> None:
    try:
        parsed, end = parse_header(blob, start)
    except DecryptionError:
        return
    assert end <= len(blob) and len(parsed.nonce) == 12


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=80))
def test_fuzzed_encrypted_fields_raise_only_decryption_error(tmp_path_factory: pytest.TempPathFactory,
                                                            text: str) -> None:
    kms = ring(tmp_path_factory)
    policy = FieldPolicy.from_avro({"type": "record", "name": "R", "fields": [
        {"name": "secret", "type": "string", "confluent:tags": ["PII"]}]})
    with pytest.raises(DecryptionError):
        FieldDecryptingDeserializer(kms, policy)({"secret": text}, SerializationContext("t", MessageField.VALUE, []))


def test_concurrent_producers_never_reuse_a_nonce(tmp_path: Path) -> None:
    kms = LocalKms(tmp_path / "ring.json")
    kms.create_key("orders")
    serializer = EncryptingSerializer(kms, "orders", policy=DataKeyPolicy(max_records=500), bind_key=False)
    produced: list[list[tuple[bytes, bytes]]] = [[] for _ in range(4)]

    def produce(slot: int) -> None:
        for i in range(1500):
            headers: list[tuple[str, bytes]] = []
            value = serializer(b"%d-%d" % (slot, i), SerializationContext("t", MessageField.VALUE, headers))
            assert value is not None
            produced[slot].append((value, headers[0][1]))

    threads = [threading.Thread(target=produce, args=(slot,)) for slot in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    pairs = [(parse_header(h)[0].wrapped.blob, parse_header(h)[0].nonce) for records in produced for _, h in records]
    assert len(pairs) == 6000 and len(set(pairs)) == 6000
    data_keys = {blob for blob, _ in pairs}
    assert 12 <= len(data_keys) <= 4 * 12 + 4  # 6000 / 500 records per key, plus races at replacement
    deserializer = DecryptingDeserializer(kms)
    for slot, records in enumerate(produced):
        for i, (value, header) in enumerate(records):
            ctx = SerializationContext("t", MessageField.VALUE, [(HEADER, header)])
            assert deserializer(value, ctx) == b"%d-%d" % (slot, i)


def test_a_forked_child_never_reuses_the_parents_data_key(tmp_path: Path) -> None:
    kms = LocalKms(tmp_path / "ring.json")
    kms.create_key("orders")
    serializer = EncryptingSerializer(kms, "orders", bind_key=False)

    def header_of(payload: bytes) -> bytes:
        headers: list[tuple[str, bytes]] = []
        serializer(payload, SerializationContext("t", MessageField.VALUE, headers))
        return headers[0][1]

    before = parse_header(header_of(b"parent 1"))[0]
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: encrypt once, report the header, leave at once
        try:
            os.write(write_end, header_of(b"child"))
        finally:
            os._exit(0)
    os.close(write_end)
    child_header = os.read(read_end, 4096)
    os.close(read_end)
    os.waitpid(pid, 0)
    after = parse_header(header_of(b"parent 2"))[0]
    child = parse_header(child_header)[0]
    assert after.wrapped.blob == before.wrapped.blob  # the parent keeps its key
    assert child.wrapped.blob != before.wrapped.blob  # the child made its own
    assert (child.wrapped.blob, child.nonce) != (after.wrapped.blob, after.nonce)


_PROPERTY_SCHEMA = {"type": "record", "name": "P", "fields": [
    {"name": "plain", "type": "string"},
    {"name": "secret", "type": ["null", "string"], "default": None, "confluent:tags": ["PII"]},
    {"name": "blob", "type": "bytes", "confluent:tags": ["PII"]},
    {"name": "join", "type": "string", "confluent:tags": ["JOIN"]},
    {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "I", "fields": [
        {"name": "note", "type": "string", "confluent:tags": ["PII"]}]}}},
]}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    plain=st.text(max_size=30), secret=st.none() | st.text(max_size=30), blob=st.binary(max_size=40),
    join=st.text(max_size=30), notes=st.lists(st.text(max_size=20), max_size=4),
)
def test_field_level_round_trip_property(tmp_path_factory: pytest.TempPathFactory, plain: str,
                                         secret: str | None, blob: bytes, join: str, notes: list[str]) -> None:
    kms = ring(tmp_path_factory)
    policy = FieldPolicy.from_avro(_PROPERTY_SCHEMA, tags=["PII"], deterministic_tags=["JOIN"])
    record = {"plain": plain, "secret": secret, "blob": blob, "join": join, "items": [{"note": n} for n in notes]}
    ctx = SerializationContext("t", MessageField.VALUE, [])
    encrypted = FieldEncryptingSerializer(kms, "orders", policy)(record, ctx)
    assert encrypted["plain"] == plain and (secret is None) == (encrypted["secret"] is None)
    assert encrypted["blob"] != blob and encrypted["join"] != join
    again = FieldEncryptingSerializer(kms, "orders", policy)(record, SerializationContext("t", MessageField.VALUE, []))
    assert encrypted["join"] == again["join"]
    assert FieldDecryptingDeserializer(kms, policy)(encrypted, ctx) == record
