"""Reencryptor: records rewritten under the current KEK version keep their meaning and form."""

from __future__ import annotations

import pytest
from confluent_kafka.serialization import MessageField, SerializationContext
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from encryption import (
    DecryptingDeserializer,
    DecryptionError,
    EncryptingSerializer,
    EncryptionError,
    LocalKms,
    RecordKeyDeserializer,
    RecordKeySerializer,
    Signer,
)
from encryption.envelope import HEADER, KEY_HEADER, MAGIC, RECORD_HEADER, parse_header
from encryption.fields import FieldDecryptingDeserializer, FieldEncryptingSerializer, FieldPolicy
from encryption.reencrypt import FieldReencryptor, Reencryptor
from encryption.serdes import RecordContext
from tests.unit.encryption.field_format_1 import V1_ALICE, V1_SCHEMA


def produce(kms: LocalKms, key: bytes, value: bytes, *, headers: list | None, **options: object) -> tuple:
    ctx = SerializationContext("orders", MessageField.KEY, headers)
    hash_keys = options.pop("hash_keys", False)
    wire_key = RecordKeySerializer(kms, "orders", hash_keys=hash_keys)(key, ctx)  # type: ignore[arg-type]
    ctx.field = MessageField.VALUE
    return wire_key, EncryptingSerializer(kms, "orders", **options)(value, ctx), headers  # type: ignore[arg-type]


def consume(kms: LocalKms, key: bytes | None, value: bytes | None, headers: list | None, **options: object) -> tuple:
    ctx = SerializationContext("orders", MessageField.KEY, headers)
    plain_key = RecordKeyDeserializer(kms)(key, ctx)
    ctx.field = MessageField.VALUE
    return plain_key, DecryptingDeserializer(kms, **options)(value, ctx)  # type: ignore[arg-type]


def versions(headers: list | None, value: bytes) -> list[int]:
    parts = [v for n, v in headers or [] if n in (HEADER, KEY_HEADER)]
    if value.startswith(MAGIC):
        parts.append(value[len(MAGIC):])
    return [parse_header(part)[0].wrapped.version for part in parts]


@pytest.mark.parametrize("options", [
    {},
    {"compress": True},
    {"hash_keys": True},
    {"hash_keys": "kek"},
    {"hash_keys": "topic"},
    {"bind_key": False},
])
def test_rewrite_moves_records_to_the_current_version(kms: LocalKms, options: dict) -> None:
    key, value, headers = produce(kms, b"alice", b"secret " * 20, headers=[("trace", b"t1")], **options)
    kms.rotate_key("orders")
    reencryptor = Reencryptor(kms, "orders")
    assert not reencryptor.is_current(headers, value)
    record = reencryptor.rewrite("orders", key, value, headers)
    assert record.key == key  # hashed keys hash the same: compaction supersedes the old record
    assert record.value is not None and record.value != value
    assert set(versions(record.headers, record.value)) == {2}
    assert ("trace", b"t1") in record.headers
    assert reencryptor.is_current(record.headers, record.value)
    assert consume(kms, record.key, record.value, record.headers) == (b"alice", b"secret " * 20)
    old_flags = parse_header(dict(headers)[HEADER])[0].flags
    assert parse_header(dict(record.headers)[HEADER])[0].flags == old_flags


def test_envelope_form_is_kept(kms: LocalKms) -> None:
    key, value, _ = produce(kms, b"alice", b"secret", headers=None)
    kms.rotate_key("orders")
    record = Reencryptor(kms, "orders").rewrite("orders", key, value, None)
    assert record.value is not None and record.value.startswith(MAGIC)
    assert versions(None, record.value) == [2]
    assert consume(kms, key, record.value, None) == (b"alice", b"secret")


def test_signed_records_are_resigned_or_refused(kms: LocalKms) -> None:
    private = Ed25519PrivateKey.generate()
    signer = Signer("p1", private)
    trusted = {"p1": private.public_key()}
    key, value, headers = produce(kms, b"alice", b"secret", headers=[], signer=signer)
    kms.rotate_key("orders")
    with pytest.raises(EncryptionError, match="signer="):
        Reencryptor(kms, "orders").rewrite("orders", key, value, headers)
    record = Reencryptor(kms, "orders", signer=signer, trusted_signers=trusted).rewrite("orders", key, value, headers)
    assert consume(kms, key, record.value, record.headers, trusted_signers=trusted) == (b"alice", b"secret")


def test_plaintext_records_are_not_current_and_refused(kms: LocalKms) -> None:
    reencryptor = Reencryptor(kms, "orders")
    assert not reencryptor.is_current([("trace", b"t")], b"plain value")
    with pytest.raises(DecryptionError, match="not encrypted"):
        reencryptor.rewrite("orders", b"k", b"plain value", [("trace", b"t")])
    assert reencryptor.is_current([], None)  # a tombstone has nothing to re-encrypt


def test_records_under_another_kek_are_not_rewrapped_under_ours(kms: LocalKms) -> None:
    kms.create_key("payroll")
    ctx = SerializationContext("orders", MessageField.KEY, [])
    wire_key = RecordKeySerializer(kms, "payroll")(b"bob", ctx)
    ctx.field = MessageField.VALUE
    value = EncryptingSerializer(kms, "payroll")(b"salary", ctx)
    reencryptor = Reencryptor(kms, "orders")  # this operator can read both, but "orders" has more readers
    assert not reencryptor.is_current(ctx.headers, value)
    with pytest.raises(EncryptionError, match="under KEK 'payroll', not 'orders'"):
        reencryptor.rewrite("orders", wire_key, value, ctx.headers)
    assert Reencryptor(kms, "payroll").rewrite("orders", wire_key, value, ctx.headers).value != value


# -- field-level records: format version 1 to 2, and KEK rotations ------------------------------------


def test_field_records_of_format_1_are_rewritten_bound_to_their_record(fixed_kms: LocalKms) -> None:
    policy = FieldPolicy.from_json_schema(V1_SCHEMA)
    reencryptor = FieldReencryptor(fixed_kms, "orders", policy)
    headers = [("trace", b"t1")]
    assert not reencryptor.is_current(headers, V1_ALICE)
    record = reencryptor.rewrite("customers", b"alice", V1_ALICE, headers)
    assert record.key == b"alice" and ("trace", b"t1") in record.headers
    assert [name for name, _ in record.headers].count(RECORD_HEADER) == 1
    assert record.value["name"] == "Alice" and record.value["ssn"] != V1_ALICE["ssn"]
    assert reencryptor.is_current(record.headers, record.value)
    # The default consumer, which refuses format version 1, reads the rewrite.
    reader = FieldDecryptingDeserializer(fixed_kms, policy, kek_names=["orders"])
    ctx = SerializationContext("customers", MessageField.VALUE, record.headers)
    assert reader(record.value, ctx) == {"ssn": "alice-ssn", "name": "Alice", "phones": ["555-0100", "555-0101"]}
    # Rewritten again after a rotation (by a reencryptor made after it, whose data keys are wrapped by the
    # new version): the current KEK version, a new record identifier.
    fixed_kms.rotate_key("orders")
    assert not reencryptor.is_current(record.headers, record.value)
    reencryptor = FieldReencryptor(fixed_kms, "orders", policy)
    again = reencryptor.rewrite("customers", b"alice", record.value, record.headers)
    assert reencryptor.is_current(again.headers, again.value)
    assert dict(again.headers)[RECORD_HEADER] != dict(record.headers)[RECORD_HEADER]
    assert reader(again.value, SerializationContext("customers", MessageField.VALUE, again.headers))["ssn"] == "alice-ssn"


def test_field_records_under_another_kek_or_signed_are_not_rewritten(fixed_kms: LocalKms) -> None:
    policy = FieldPolicy.from_json_schema(V1_SCHEMA)
    fixed_kms.create_key("payments")
    sent = SerializationContext("customers", MessageField.VALUE, [])
    foreign = FieldEncryptingSerializer(fixed_kms, "payments", policy)({"ssn": "x", "name": "M"}, sent)
    reencryptor = FieldReencryptor(fixed_kms, "orders", policy)
    with pytest.raises(DecryptionError, match="'payments', which this consumer does not accept"):
        reencryptor.rewrite("customers", None, foreign, sent.headers)
    with pytest.raises(EncryptionError, match="record is signed"):
        reencryptor.rewrite("customers", None, V1_ALICE, [("kgov.sig", b"x")])


def test_key_bound_field_records_stay_key_bound(kms: LocalKms) -> None:
    policy = FieldPolicy.from_json_schema(V1_SCHEMA)
    sent = RecordContext("customers", MessageField.VALUE, [], key=b"alice")
    written = FieldEncryptingSerializer(kms, "orders", policy, bind_key=True)({"ssn": "alice-ssn"}, sent)
    kms.rotate_key("orders")
    reencryptor = FieldReencryptor(kms, "orders", policy)
    assert not reencryptor.is_current(sent.headers, written)
    record = reencryptor.rewrite("customers", b"alice", written, sent.headers)
    assert reencryptor.is_current(record.headers, record.value)
    reader = FieldDecryptingDeserializer(kms, policy, kek_names=["orders"])
    assert reader(record.value, RecordContext("customers", MessageField.VALUE, record.headers, key=b"alice")) == {
        "ssn": "alice-ssn"}
    with pytest.raises(DecryptionError, match="authentication failed"):
        reader(record.value, RecordContext("customers", MessageField.VALUE, record.headers, key=b"mallory"))
    # A hostile non-bytes value where bytes are expected is not allocated while checking currency.
    blob_policy = FieldPolicy.from_avro({"type": "record", "name": "R", "fields": [
        {"name": "blob", "type": "bytes", "confluent:tags": ["PII"]}]})
    assert not FieldReencryptor(kms, "orders", blob_policy).is_current([(RECORD_HEADER, b"x" * 16)], {"blob": 10**13})
