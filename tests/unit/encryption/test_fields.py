"""Field-level encryption of Avro and JSON records selected by schema tags."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import fastavro
import jsonschema
import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from encryption import DecryptionError, EncryptionError, LocalKms
from encryption.envelope import FIELD_FORMAT_VERSION, MAGIC, parse_header
from encryption.fields import FieldDecryptingDeserializer, FieldEncryptingSerializer, FieldPolicy

CUSTOMER = {
    "type": "record",
    "name": "Customer",
    "namespace": "com.acme",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "ssn", "type": "string", "confluent:tags": ["PII"]},
        {"name": "email", "type": ["null", "string"], "default": None},
        {"name": "card", "type": ["null", "bytes"], "default": None, "confluent:tags": ["PII"]},
        {"name": "address", "type": {
            "type": "record", "name": "Address",
            "fields": [
                {"name": "city", "type": "string"},
                {"name": "street", "type": "string", "confluent:tags": ["PII"]},
            ],
        }},
        {"name": "orders", "type": {"type": "array", "items": {
            "type": "record", "name": "Order",
            "fields": [
                {"name": "sku", "type": "string"},
                {"name": "note", "type": "string", "confluent:tags": ["PII"]},
            ],
        }}},
    ],
}

ALICE: dict[str, Any] = {
    "id": 7,
    "name": "Alice",
    "ssn": "078-05-1120",
    "email": "alice@example.com",
    "card": b"4111111111111111",
    "address": {"city": "Lyon", "street": "12 rue Secrete"},
    "orders": [{"sku": "A1", "note": "gift for Bob"}, {"sku": "B2", "note": "leave at door"}],
}

PARSED = fastavro.parse_schema(CUSTOMER)


def avro_writer(obj: Any, ctx: SerializationContext | None) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, PARSED, obj)
    return out.getvalue()


def avro_reader(data: bytes, ctx: SerializationContext | None) -> Any:
    return fastavro.schemaless_reader(io.BytesIO(data), PARSED)


def ctx(topic: str = "customers") -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE, [])


def test_tagged_avro_fields_are_encrypted_and_the_rest_stays_readable(kms: LocalKms) -> None:
    policy = FieldPolicy.from_avro(json.dumps(CUSTOMER))
    assert {rule.name for rule in policy.rules} == {"ssn", "card", "address.street", "orders.[].note"}
    sent = ctx()
    data = FieldEncryptingSerializer(kms, "orders", policy, avro_writer)(ALICE, sent)
    for secret in (b"078-05-1120", b"4111111111111111", b"rue Secrete", b"gift for Bob"):
        assert secret not in data

    without_keys = avro_reader(data, None)  # a consumer with the schema but no keys
    assert without_keys["name"] == "Alice" and without_keys["id"] == 7
    assert without_keys["email"] == "alice@example.com"
    assert without_keys["address"]["city"] == "Lyon" and without_keys["orders"][1]["sku"] == "B2"
    assert without_keys["ssn"] != ALICE["ssn"] and base64.b64decode(without_keys["ssn"])
    assert without_keys["card"] != ALICE["card"]

    with_keys = FieldDecryptingDeserializer(kms, policy, avro_reader)(data, sent)
    assert with_keys == ALICE


def test_metadata_tags_and_deterministic_rules(kms: LocalKms) -> None:
    policy = FieldPolicy.from_avro(
        CUSTOMER,
        metadata={"tags": {"**.email": ["PII"], "com.acme.Customer.name": ["JOIN"]}},
        rule_set={"domainRules": [
            {"name": "encryptPII", "kind": "TRANSFORM", "type": "ENCRYPT", "mode": "WRITEREAD", "tags": ["PII"],
             "params": {"encrypt.kek.name": "orders"}},
            {"name": "joinable", "kind": "TRANSFORM", "type": "ENCRYPT", "mode": "WRITEREAD", "tags": ["JOIN"],
             "params": {"encrypt.kek.name": "orders", "encrypt.dek.algorithm": "AES256_SIV"}},
        ]},
    )
    modes = {rule.name: rule.deterministic for rule in policy.rules}
    assert modes == {"name": True, "ssn": False, "email": False, "card": False, "address.street": False,
                     "orders.[].note": False}
    serializer = FieldEncryptingSerializer(kms, "orders", policy)
    first_sent, elsewhere_sent = ctx("customers"), ctx("payments")
    first = serializer(ALICE, first_sent)
    second = serializer(ALICE, ctx("customers"))
    elsewhere = serializer(ALICE, elsewhere_sent)
    assert first["name"] == second["name"] == elsewhere["name"] != "Alice"  # joinable, across topics too
    assert first["ssn"] != second["ssn"]  # randomized
    kms.rotate_key("orders")
    assert FieldEncryptingSerializer(kms, "orders", policy)(ALICE, ctx())["name"] == first["name"]
    deserializer = FieldDecryptingDeserializer(kms, policy)
    assert deserializer(first, first_sent) == ALICE
    assert deserializer(elsewhere, elsewhere_sent) == ALICE
    # A randomized field is bound to its topic.
    with pytest.raises(DecryptionError, match="topic=payments"):
        deserializer(first, ctx("payments"))


def test_json_schema_fields_and_schema_validity(kms: LocalKms) -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "ssn": {"type": "string", "confluent:tags": ["PII"]},
            "email": {"type": ["string", "null"], "confluent:tags": ["PII"]},
            "address": {"$ref": "#/$defs/address"},
        },
        "$defs": {"address": {"type": "object", "properties": {
            "street": {"type": "string", "confluent:tags": ["PII"]}, "zip": {"type": "string"}}}},
    }
    record = {"name": "Alice", "ssn": "078-05-1120", "email": None, "address": {"street": "12 rue", "zip": "69001"}}
    policy = FieldPolicy.from_json_schema(json.dumps(schema))
    assert {rule.name for rule in policy.rules} == {"ssn", "email", "address.street"}
    sent = ctx()
    wire = FieldEncryptingSerializer(kms, "orders", policy, lambda obj, _: json.dumps(obj).encode())(record, sent)
    visible = json.loads(wire)
    jsonschema.validate(visible, schema)
    assert visible["name"] == "Alice" and visible["email"] is None and visible["address"]["zip"] == "69001"
    assert "078-05" not in wire.decode() and "12 rue" not in wire.decode()
    back = FieldDecryptingDeserializer(kms, policy, lambda data, _: json.loads(data))(wire, sent)
    assert back == record


def test_tampered_or_swapped_fields_fail(kms: LocalKms) -> None:
    policy = FieldPolicy.from_avro(CUSTOMER)
    sent = ctx()
    encrypted = FieldEncryptingSerializer(kms, "orders", policy)(ALICE, sent)
    deserializer = FieldDecryptingDeserializer(kms, policy)
    swapped = {**encrypted, "address": {**encrypted["address"], "street": encrypted["ssn"]}}
    with pytest.raises(DecryptionError, match="authentication failed"):
        deserializer(swapped, sent)
    raw = bytearray(base64.b64decode(encrypted["ssn"]))
    raw[-1] ^= 1
    with pytest.raises(DecryptionError):
        deserializer({**encrypted, "ssn": base64.b64encode(bytes(raw)).decode()}, sent)
    with pytest.raises(DecryptionError, match="not encrypted"):
        deserializer({**encrypted, "ssn": "078-05-1120"}, sent)


def test_policy_errors() -> None:
    bad = {"type": "record", "name": "R", "fields": [{"name": "age", "type": "int", "confluent:tags": ["PII"]}]}
    with pytest.raises(EncryptionError, match="only string and bytes"):
        FieldPolicy.from_avro(bad)
    untagged = {"type": "record", "name": "R", "fields": [{"name": "x", "type": "string"}]}
    with pytest.raises(EncryptionError, match="nothing would be encrypted"):
        FieldPolicy.from_avro(untagged)
    assert FieldPolicy.from_avro(untagged, tags=["SECRET"], metadata={"tags": {"R.x": ["SECRET"]}}).rules[0].name == "x"


def test_wrong_field_types_are_refused(kms: LocalKms) -> None:
    policy = FieldPolicy.from_avro(CUSTOMER)
    with pytest.raises(EncryptionError, match="should be a string"):
        FieldEncryptingSerializer(kms, "orders", policy)({**ALICE, "ssn": 12}, ctx())


def test_policy_from_a_registry_answer() -> None:
    json_schema = {"type": "object", "properties": {"email": {"type": "string"}, "age": {"type": "integer"}}}
    document = {"subject": "s-value", "version": 1, "id": 3, "schemaType": "JSON",
                "schema": json.dumps(json_schema), "metadata": {"tags": {"email": ["PII"]}}}
    assert [rule.name for rule in FieldPolicy.from_registered_schema(document).rules] == ["email"]
    avro = {"schema": json.dumps(CUSTOMER)}  # schemaType absent means AVRO
    assert "ssn" in {rule.name for rule in FieldPolicy.from_registered_schema(avro).rules}
    with pytest.raises(EncryptionError, match="not PROTOBUF"):
        FieldPolicy.from_registered_schema({"schemaType": "PROTOBUF", "schema": "syntax = 'proto3';"})


def test_named_type_references_maps_and_recursion(kms: LocalKms) -> None:
    schema = {
        "type": "record", "name": "Order", "namespace": "shop",
        "fields": [
            {"name": "billing", "type": {"type": "record", "name": "Address", "fields": [
                {"name": "street", "type": "string", "confluent:tags": ["PII"]},
                {"name": "city", "type": "string"}]}},
            {"name": "shipping", "type": ["null", "Address"], "default": None},
            {"name": "contacts", "type": {"type": "map", "values": "shop.Address"}},
            {"name": "parent", "type": ["null", "Order"], "default": None},
        ],
    }
    policy = FieldPolicy.from_avro(schema)
    names = {rule.name for rule in policy.rules}
    assert {"billing.street", "shipping.street", "contacts.{}.street", "parent.billing.street",
            "parent.parent.parent.contacts.{}.street"} <= names
    assert "parent.parent.parent.parent.billing.street" not in names  # unrolled 4 times
    assert policy.cutoffs == (("parent", "parent", "parent", "parent"),)
    order = {
        "billing": {"street": "1 Main St", "city": "Oslo"},
        "shipping": {"street": "2 Side St", "city": "Oslo"},
        "contacts": {"home": {"street": "3 Home Rd", "city": "Bergen"}},
        "parent": None,
    }
    out = io.BytesIO()
    sent = ctx()
    encrypted = FieldEncryptingSerializer(kms, "orders", policy)(order, sent)
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), encrypted)
    assert b"Main St" not in out.getvalue() and b"Home Rd" not in out.getvalue() and b"Bergen" in out.getvalue()
    assert FieldDecryptingDeserializer(kms, policy)(encrypted, sent) == order
    nested = {**order, "parent": {**order, "parent": {**order, "parent": order}}}
    sent = ctx()
    twice = FieldEncryptingSerializer(kms, "orders", policy)(nested, sent)
    assert twice["parent"]["parent"]["parent"]["billing"]["street"] != "1 Main St"
    too_deep = {**order, "parent": nested}
    with pytest.raises(EncryptionError, match="recursive type"):
        FieldEncryptingSerializer(kms, "orders", policy)(too_deep, ctx())


def test_avro_schema_references_must_be_given() -> None:
    address = {"type": "record", "name": "Address", "namespace": "shop", "fields": [
        {"name": "street", "type": "string", "confluent:tags": ["PII"]}]}
    customer = {"type": "record", "name": "Customer", "namespace": "shop", "fields": [
        {"name": "ssn", "type": "string", "confluent:tags": ["PII"]},
        {"name": "home", "type": "shop.Address"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "other", "type": "Kind"}]}
    with pytest.raises(EncryptionError, match="references="):
        FieldPolicy.from_avro(customer)
    policy = FieldPolicy.from_avro(customer, references=[json.dumps(address)])
    assert {rule.name for rule in policy.rules} == {"ssn", "home.street"}
    document = {"schema": json.dumps(customer), "references": [{"name": "shop.Address", "subject": "a", "version": 1}]}
    assert len(FieldPolicy.from_registered_schema(document, references=[address]).rules) == 2


def test_recursive_and_external_json_schemas(kms: LocalKms) -> None:
    tree = {"type": "object", "properties": {
        "secret": {"type": "string", "confluent:tags": ["PII"]},
        "children": {"type": "array", "items": {"$ref": "#"}},
        "labels": {"type": "object", "additionalProperties": {"$ref": "#/$defs/label"}}},
        "$defs": {"label": {"type": "object", "properties": {
            "note": {"type": "string", "confluent:tags": ["PII"]}}}}}
    policy = FieldPolicy.from_json_schema(tree)
    names = {rule.name for rule in policy.rules}
    assert {"secret", "children.[].secret", "labels.{}.note", "children.[].labels.{}.note"} <= names
    assert policy.cutoffs  # the self-reference is unrolled a bounded number of times
    # Plaintexts with a space: base64 ciphertext can contain "s2" by chance (it did), never "secret 2".
    leaf = {"secret": "secret 3", "children": [], "labels": {"x": {"note": "note 1"}}}
    record = {"secret": "secret 1", "children": [{"secret": "secret 2", "children": [leaf]}], "labels": {}}
    sent = ctx()
    encrypted = FieldEncryptingSerializer(kms, "orders", policy)(record, sent)
    text = json.dumps(encrypted)
    assert not any(p in text for p in ("secret 1", "secret 2", "secret 3", "note 1"))
    assert FieldDecryptingDeserializer(kms, policy)(encrypted, sent) == record
    deep: dict = {"secret": "x", "children": []}
    for _ in range(6):
        deep = {"secret": "x", "children": [deep]}
    with pytest.raises(EncryptionError, match="recursive type"):
        FieldEncryptingSerializer(kms, "orders", policy)(deep, ctx())
    external = {"type": "object", "properties": {"a": {"$ref": "other.json#/x"}}}
    with pytest.raises(EncryptionError, match="inlined"):
        FieldPolicy.from_json_schema(external)


def test_each_encrypt_rule_uses_its_own_kek(kms: LocalKms) -> None:
    kms.create_key("pii-kek")
    kms.create_key("join-kek")
    rule_set = {"domainRules": [
        {"name": "a", "kind": "TRANSFORM", "type": "ENCRYPT", "tags": ["PII"], "params": {"encrypt.kek.name": "pii-kek"}},
        {"name": "b", "kind": "TRANSFORM", "type": "ENCRYPT", "tags": ["JOIN"],
         "params": {"encrypt.kek.name": "join-kek", "encrypt.dek.algorithm": "AES256_SIV"}},
    ]}
    policy = FieldPolicy.from_avro(CUSTOMER, metadata={"tags": {"**.name": ["JOIN"]}}, rule_set=rule_set)
    assert {(rule.name, rule.kek) for rule in policy.rules if rule.name in ("ssn", "name")} == {
        ("ssn", "pii-kek"), ("name", "join-kek")}
    sent = ctx()
    encrypted = FieldEncryptingSerializer(kms, "orders", policy)(ALICE, sent)
    ssn_envelope = base64.b64decode(encrypted["ssn"])
    assert parse_header(ssn_envelope, len(MAGIC), (FIELD_FORMAT_VERSION,))[0].wrapped.key_name == "pii-kek"
    assert b"join-kek" in base64.b64decode(encrypted["name"])
    assert FieldDecryptingDeserializer(kms, policy)(encrypted, sent) == ALICE
    clash = {"domainRules": [*rule_set["domainRules"], {"name": "c", "type": "ENCRYPT", "tags": ["PII"],
                                                        "params": {"encrypt.kek.name": "join-kek"}}]}
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "x", "type": "string", "confluent:tags": ["PII", "JOIN"]}]}
    with pytest.raises(EncryptionError, match="different KEKs for tag 'PII'"):
        FieldPolicy.from_avro(schema, rule_set=clash)
    with pytest.raises(EncryptionError, match="selected by ENCRYPT rules naming different KEKs"):
        FieldPolicy.from_avro(schema, rule_set=rule_set)


def test_json_objects_with_declared_and_additional_properties(kms: LocalKms) -> None:
    schema = {"type": "object",
              "properties": {"id": {"type": "string"}, "meta": {"type": "object"}},
              "additionalProperties": {"type": "object", "properties": {
                  "note": {"type": "string", "confluent:tags": ["PII"]}}}}
    policy = FieldPolicy.from_json_schema(schema)
    record = {"id": "r1", "meta": {"note": "not sensitive, declared"}, "extra": {"note": "secret"}}
    sent = ctx()
    encrypted = FieldEncryptingSerializer(kms, "orders", policy)(record, sent)
    assert encrypted["id"] == "r1" and encrypted["meta"] == {"note": "not sensitive, declared"}
    assert encrypted["extra"]["note"] != "secret"
    assert FieldDecryptingDeserializer(kms, policy)(encrypted, sent) == record


def test_a_value_two_rules_reach_decrypts_to_what_was_written(kms: LocalKms) -> None:
    # "ssn" is declared (and tagged) by one allOf part; the other part's tagged additionalProperties
    # applies to every key, "ssn" included, so both rules seal it: decryption peels them in reverse.
    schema = {"type": "object", "allOf": [
        {"properties": {"ssn": {"type": "string", "confluent:tags": ["PII"]}}},
        {"additionalProperties": {"type": "string", "confluent:tags": ["PII"]}},
    ]}
    policy = FieldPolicy.from_json_schema(schema)
    record = {"ssn": "078-05-1120", "note": "call after six"}
    sent = ctx()
    encrypted = FieldEncryptingSerializer(kms, "orders", policy)(record, sent)
    assert "078-05-1120" not in json.dumps(encrypted) and "call after six" not in json.dumps(encrypted)
    assert FieldDecryptingDeserializer(kms, policy)(encrypted, sent) == record


AVRO_UNION = {"type": "record", "name": "R", "fields": [
    {"name": "u", "type": ["null", {"type": "record", "name": "In", "fields": [
        {"name": "x", "type": "string", "confluent:tags": ["PII"]}]}]},
    {"name": "a", "type": {"type": "array", "items": "string"}, "confluent:tags": ["PII"]},
]}


def _union_writer(obj: Any, _ctx: SerializationContext | None) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(AVRO_UNION), obj)
    return out.getvalue()


@pytest.mark.parametrize("record", [
    {"u": ("In", {"x": "SECRET-1"}), "a": []},  # fastavro's union tuple notation
    {"u": None, "a": ("SECRET-1", "SECRET-2")},  # a tuple fastavro writes as an array
], ids=["union-tuple-notation", "tuple-array"])
def test_containers_the_walk_cannot_see_into_are_refused_not_written_in_plaintext(
    kms: LocalKms, record: dict[str, Any]
) -> None:
    assert b"SECRET-1" in _union_writer(record, ctx())  # the writer takes it as it is
    policy = FieldPolicy.from_avro(AVRO_UNION)
    with pytest.raises(EncryptionError, match="tuple, which field-level encryption cannot look into"):
        FieldEncryptingSerializer(kms, "orders", policy, _union_writer)(record, ctx())


def test_objects_on_a_tagged_path_are_refused_and_any_mapping_is_encrypted(kms: LocalKms) -> None:
    import types

    policy = FieldPolicy.from_avro(AVRO_UNION)
    serializer = FieldEncryptingSerializer(kms, "orders", policy, _union_writer)

    class Customer:  # what an inner serializer's to_dict hook would turn into a dict
        u = None
        a = ["SECRET-1"]

    with pytest.raises(EncryptionError, match="Customer, which field-level encryption cannot look into"):
        serializer(Customer(), ctx())
    sent = ctx()
    wire = serializer(types.MappingProxyType({"u": types.MappingProxyType({"x": "SECRET-1"}), "a": ["SECRET-2"]}),
                      sent)
    assert b"SECRET" not in wire
    decrypted = FieldDecryptingDeserializer(kms, policy, lambda data, _: fastavro.schemaless_reader(
        io.BytesIO(data), fastavro.parse_schema(AVRO_UNION)))(wire, sent)
    assert decrypted == {"u": {"x": "SECRET-1"}, "a": ["SECRET-2"]}
