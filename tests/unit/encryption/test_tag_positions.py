"""Where a `confluent:tags` tag may be written, and what field-level encryption does with it.

Every selected tag is either honoured (the values it describes are encrypted and decrypt back) or the
policy is refused with `EncryptionError` naming where the tag is; it never leaves a value in plaintext.
Confluent's `JsonSchema`/`AvroSchema` transforms read a field's tags from the property or field itself
and carry them through unions, array items (and Avro map values); docs/encryption.md says which
positions kgov honours beyond that and which it refuses.
"""

from __future__ import annotations

import base64
import copy
import io
import json
from typing import Any

import fastavro
import jsonschema
import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from encryption import EncryptionError, LocalKms
from encryption.envelope import MAGIC
from encryption.fields import FieldDecryptingDeserializer, FieldEncryptingSerializer, FieldPolicy

PII = ["PII"]


def ctx() -> SerializationContext:
    return SerializationContext("people", MessageField.VALUE, [])


def is_field_ciphertext(value: Any) -> bool:
    raw = base64.b64decode(value, validate=True) if isinstance(value, str) else value
    return isinstance(raw, bytes) and raw.startswith(MAGIC)


def json_round_trip(kms: LocalKms, schema: dict[str, Any], record: dict[str, Any],
                    sent: SerializationContext | None = None, **policy: Any) -> Any:
    """Encrypts `record` (with `sent`, which then holds the record's headers), checks the wire text still
    validates against `schema` and holds no secret value of the record, decrypts it back; returns the
    encrypted record."""
    built = FieldPolicy.from_json_schema(json.dumps(schema), **policy)
    sent = sent or ctx()
    wire = FieldEncryptingSerializer(kms, "orders", built, lambda obj, _: json.dumps(obj).encode())(record, sent)
    encrypted = json.loads(wire)
    jsonschema.validate(encrypted, schema)
    back = FieldDecryptingDeserializer(kms, built, lambda data, _: json.loads(data))(wire, sent)
    assert back == record
    return encrypted


def avro_round_trip(kms: LocalKms, schema: dict[str, Any], record: dict[str, Any],
                    sent: SerializationContext | None = None, **policy: Any) -> tuple[Any, bytes]:
    parsed = fastavro.parse_schema(copy.deepcopy(schema))

    def write(obj: Any, _: Any) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, obj)
        return out.getvalue()

    def read(data: bytes, _: Any) -> Any:
        return fastavro.schemaless_reader(io.BytesIO(data), parsed)

    built = FieldPolicy.from_avro(json.dumps(schema), **policy)
    sent = sent or ctx()
    wire = FieldEncryptingSerializer(kms, "orders", built, write)(record, sent)
    assert FieldDecryptingDeserializer(kms, built, read)(wire, sent) == record
    return read(wire, None), wire


# -- JSON Schema: positions kgov honours ------------------------------------------------------------


def test_json_nullable_field_written_with_one_of_is_encrypted(kms: LocalKms) -> None:
    schema = {"type": "object", "properties": {
        "name": {"type": "string"},
        "ssn": {"oneOf": [{"type": "null"}, {"type": "string", "confluent:tags": PII}]},
        "phone": {"anyOf": [{"$ref": "#/$defs/phone"}, {"type": "null"}]},
    }, "$defs": {"phone": {"type": "string", "confluent:tags": PII}}}
    record = {"name": "Alice", "ssn": "078-05-1120", "phone": "+33 6 12 34 56 78"}
    encrypted = json_round_trip(kms, schema, record)
    assert encrypted["name"] == "Alice"
    assert is_field_ciphertext(encrypted["ssn"]) and is_field_ciphertext(encrypted["phone"])
    # null stays null (and valid), a present value never goes out in plaintext
    assert json_round_trip(kms, schema, {"name": "Bob", "ssn": None, "phone": None})["ssn"] is None


def test_json_tag_on_items_encrypts_each_item(kms: LocalKms) -> None:
    schema = {"type": "object", "properties": {
        "emails": {"type": "array", "items": {"type": "string", "confluent:tags": PII}},
        # Confluent's transform carries an array property's own tags to its items
        "phones": {"type": "array", "items": {"type": "string"}, "confluent:tags": PII},
        "aliases": {"type": ["array", "null"], "items": {"$ref": "#/$defs/alias"}},
    }, "$defs": {"alias": {"type": "string", "confluent:tags": PII}}}
    record = {"emails": ["a@example.com", "b@example.com"], "phones": ["+1 555 0100"], "aliases": ["Al"]}
    encrypted = json_round_trip(kms, schema, record)
    assert len(encrypted["emails"]) == 2
    assert all(is_field_ciphertext(v) for key in record for v in encrypted[key])
    assert "example.com" not in json.dumps(encrypted) and "555 0100" not in json.dumps(encrypted)
    assert {rule.name for rule in FieldPolicy.from_json_schema(schema).rules} == {
        "emails.[]", "phones.[]", "aliases.[]"}


def test_json_tag_on_additional_properties_encrypts_the_undeclared_values(kms: LocalKms) -> None:
    schema = {"type": "object", "properties": {
        "attributes": {"type": "object", "properties": {"kind": {"type": "string"}},
                       "additionalProperties": {"type": "string", "confluent:tags": PII}},
    }}
    record = {"attributes": {"kind": "person", "passport": "X1234567", "maiden name": "Smith"}}
    encrypted = json_round_trip(kms, schema, record)
    assert encrypted["attributes"]["kind"] == "person"  # declared: not an additional property
    assert is_field_ciphertext(encrypted["attributes"]["passport"])
    assert is_field_ciphertext(encrypted["attributes"]["maiden name"])
    assert "X1234567" not in json.dumps(encrypted) and "Smith" not in json.dumps(encrypted)


def test_json_tag_in_a_conditional_on_a_declared_string_property_encrypts_it_always(kms: LocalKms) -> None:
    schema = {"type": "object",
              "properties": {"kind": {"type": "string"}, "id": {"type": "string"}},
              "if": {"properties": {"kind": {"const": "person"}}},
              "then": {"properties": {"id": {"minLength": 5, "confluent:tags": PII}}}}
    for kind in ("person", "company"):
        encrypted = json_round_trip(kms, schema, {"kind": kind, "id": "FR-123456"})
        assert encrypted["kind"] == kind and is_field_ciphertext(encrypted["id"])


# -- JSON Schema: positions kgov refuses --------------------------------------------------------------


@pytest.mark.parametrize(("properties", "where", "says"), [
    ({"notes": {"type": "object", "patternProperties": {"^n": {"type": "string", "confluent:tags": PII}}}},
     "#/properties/notes/patternProperties/^n", "tag additionalProperties"),
    ({"pair": {"type": "array", "prefixItems": [{"type": "string", "confluent:tags": PII}]}},
     "#/properties/pair/prefixItems/0", "one items schema"),
    ({"pair": {"type": "array", "items": [{"type": "string", "confluent:tags": PII}]}},
     "#/properties/pair/items/0", "one items schema"),
    ({"doc": {"type": "object", "then": {"properties": {"secret": {"type": "string", "confluent:tags": PII}}}}},
     "#/properties/doc/then/properties/secret", "declared under properties"),
    ({"index": {"type": "object", "propertyNames": {"type": "string", "confluent:tags": PII}}},
     "#/properties/index/propertyNames", "never encrypted"),
])
def test_json_tags_kgov_does_not_walk_are_refused(properties: dict[str, Any], where: str, says: str) -> None:
    schema = {"type": "object", "properties": {"id": {"type": "string"}, **properties}}
    with pytest.raises(EncryptionError, match="cannot be honoured") as refused:
        FieldPolicy.from_json_schema(schema)
    assert where in str(refused.value) and says in str(refused.value)
    # A tag that is not selected for encryption is no reason to refuse.
    relabelled = json.loads(json.dumps(schema).replace('"PII"', '"INTERNAL"'))
    relabelled["properties"]["id"]["confluent:tags"] = PII
    assert [rule.name for rule in FieldPolicy.from_json_schema(relabelled).rules] == ["id"]
    rule_set = {"domainRules": [{"name": "e", "type": "ENCRYPT", "kind": "TRANSFORM", "tags": PII}]}
    assert [rule.name for rule in FieldPolicy.from_json_schema(relabelled, rule_set=rule_set).rules] == ["id"]


@pytest.mark.parametrize(("schema", "where"), [
    ({"type": "object", "confluent:tags": PII, "properties": {"a": {"type": "string"}}}, "at #,"),
    ({"type": "object", "properties": {"counts": {
        "type": "object", "additionalProperties": {"type": "string"}, "confluent:tags": PII}}},
     "at #/properties/counts "),
    ({"type": "object", "properties": {"either": {
        "anyOf": [{"type": "string", "confluent:tags": PII}, {"type": "integer"}]}}},
     "at #/properties/either/anyOf/0 "),
    ({"type": "object", "properties": {"people": {
        "type": "array", "items": {"type": "object", "confluent:tags": PII, "properties": {"n": {"type": "string"}}}}}},
     "at #/properties/people/items "),
])
def test_json_tags_on_what_cannot_be_a_string_are_refused(schema: dict[str, Any], where: str) -> None:
    with pytest.raises(EncryptionError, match=r"only string and bytes|whole record") as refused:
        FieldPolicy.from_json_schema(schema)
    assert where in str(refused.value)


def test_json_metadata_tag_on_an_unwalked_value_is_refused() -> None:
    schema = {"type": "object", "properties": {
        "id": {"type": "string", "confluent:tags": PII},
        "contacts": {"type": "object", "patternProperties": {"^c": {
            "type": "object", "properties": {"ssn": {"type": "string"}}}}}}}
    with pytest.raises(EncryptionError, match=r"'contacts.ssn' is tagged \['PII'\] by the schema's metadata"):
        FieldPolicy.from_json_schema(schema, metadata={"tags": {"**.ssn": PII}})
    assert [rule.name for rule in FieldPolicy.from_json_schema(schema).rules] == ["id"]


# -- Avro --------------------------------------------------------------------------------------------


def record(fields: list[dict[str, Any]], name: str = "Person", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "com.acme", "fields": fields, **extra}


def test_avro_field_tags_reach_array_items_and_map_values(kms: LocalKms) -> None:
    schema = record([
        {"name": "name", "type": "string"},
        {"name": "emails", "type": {"type": "array", "items": "string"}, "confluent:tags": PII},
        {"name": "documents", "type": {"type": "map", "values": "bytes"}, "confluent:tags": PII},
        {"name": "aliases", "type": ["null", {"type": "array", "items": "string"}], "default": None,
         "confluent:tags": PII},
    ])
    person = {"name": "Alice", "emails": ["a@example.com", "b@example.com"],
              "documents": {"passport": b"X1234567"}, "aliases": ["Al"]}
    keyless, wire = avro_round_trip(kms, schema, person)
    assert keyless["name"] == "Alice"
    assert all(is_field_ciphertext(v) for v in [*keyless["emails"], *keyless["documents"].values(), *keyless["aliases"]])
    assert b"example.com" not in wire and b"X1234567" not in wire
    assert avro_round_trip(kms, schema, {**person, "aliases": None})[0]["aliases"] is None


def test_avro_tags_written_on_the_type_are_honoured(kms: LocalKms) -> None:
    schema = record([
        {"name": "ssn", "type": ["null", {"type": "string", "confluent:tags": PII}], "default": None},
        {"name": "phones", "type": {"type": "array", "items": {"type": "string", "confluent:tags": PII}}},
        {"name": "notes", "type": {"type": "map", "values": {"type": "string", "confluent:tags": PII}}},
        {"name": "card", "type": {"type": "bytes", "confluent:tags": PII}},
    ])
    person = {"ssn": "078-05-1120", "phones": ["+1 555 0100"], "notes": {"a": "allergic to nuts"}, "card": b"4111"}
    keyless, wire = avro_round_trip(kms, schema, person)
    assert is_field_ciphertext(keyless["ssn"]) and is_field_ciphertext(keyless["card"])
    assert is_field_ciphertext(keyless["phones"][0]) and is_field_ciphertext(keyless["notes"]["a"])
    for secret in (b"078-05-1120", b"555 0100", b"nuts", b"4111"):
        assert secret not in wire


def test_avro_union_branch_record_used_by_name_keeps_its_tagged_fields(kms: LocalKms) -> None:
    address = {"type": "record", "name": "Address", "namespace": "com.acme",
               "fields": [{"name": "street", "type": "string", "confluent:tags": PII}]}
    schema = record([
        {"name": "home", "type": address},
        {"name": "work", "type": ["null", "Address"], "default": None},
        {"name": "previous", "type": {"type": "array", "items": ["null", "com.acme.Address"]}},
    ])
    person = {"home": {"street": "1 Main St"}, "work": {"street": "2 Side St"},
              "previous": [None, {"street": "3 Old Rd"}]}
    _, wire = avro_round_trip(kms, schema, person)
    assert b"Main St" not in wire and b"Side St" not in wire and b"Old Rd" not in wire


@pytest.mark.parametrize(("fields", "where", "says"), [
    # a record's own tags: Confluent's transform does not read them, kgov cannot encrypt a record
    ([{"name": "home", "type": record([{"name": "street", "type": "string"}], "Address",
                                      **{"confluent:tags": PII})}],
     "com.acme.Person.home/type", "only string and bytes"),
    # the same record reached through a name in a union branch
    ([{"name": "home", "type": record([{"name": "street", "type": "string"}], "Address")},
      {"name": "work", "type": ["null", "Address"], "confluent:tags": PII}],
     "com.acme.Person.work", "only string and bytes"),
    ([{"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A"], "confluent:tags": PII}}],
     "com.acme.Person.kind/type", "only string and bytes"),
    ([{"name": "orders", "type": {"type": "array", "items": record([{"name": "sku", "type": "string"}], "Order")},
       "confluent:tags": PII}],
     "com.acme.Person.orders", "only string and bytes"),
    ([{"name": "either", "type": ["null", "string", "int"], "confluent:tags": PII}],
     "com.acme.Person.either", "only string and bytes"),
    ([{"name": "id", "type": {"type": "string", "logicalType": "uuid", "confluent:tags": PII}}],
     "com.acme.Person.id/type", "only string and bytes"),
])
def test_avro_tags_that_cannot_be_honoured_are_refused(fields: list[dict[str, Any]], where: str, says: str) -> None:
    schema = record([{"name": "name", "type": "string"}, *fields])
    with pytest.raises(EncryptionError, match=says) as refused:
        FieldPolicy.from_avro(schema)
    assert f"at {where} " in str(refused.value)
    # not selected: no refusal
    relabelled = json.loads(json.dumps(schema).replace('"PII"', '"INTERNAL"'))
    policy = FieldPolicy.from_avro(relabelled, metadata={"tags": {"com.acme.Person.name": PII}})
    assert [rule.name for rule in policy.rules] == ["name"]


def test_avro_tag_on_the_root_record_is_refused() -> None:
    schema = record([{"name": "ssn", "type": "string", "confluent:tags": PII}], **{"confluent:tags": ["PII"]})
    with pytest.raises(EncryptionError, match=r"the record is tagged \['PII'\] at com.acme.Person.*whole record"):
        FieldPolicy.from_avro(schema)
    assert [rule.name for rule in FieldPolicy.from_avro(schema, tags=["SECRET"],
                                                        metadata={"tags": {"**.ssn": ["SECRET"]}}).rules] == ["ssn"]


# -- what was encrypted before keeps its rule paths (they are in every field's associated data) ---------


def test_fields_encrypted_before_keep_their_rule_paths() -> None:
    """Pinned from the walker before tags in branches/items were read: the same rules, modes,
    exclusions, so records written before still decrypt."""
    pii = {"type": "string", "confluent:tags": PII}
    json_schema = {"type": "object", "properties": {
        "ssn": pii, "email": {"type": ["string", "null"], "confluent:tags": PII}, "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "orders": {"type": "array", "items": {"type": "object", "properties": {"note": pii, "sku": {"type": "string"}}}},
        "labels": {"type": "object", "properties": {"id": {"type": "string"}},
                   "additionalProperties": {"$ref": "#/$defs/label"}},
    }, "$defs": {"address": {"type": "object", "properties": {"street": pii}},
                 "label": {"type": "object", "properties": {"text": pii}}}}
    avro = record([
        {"name": "ssn", "type": "string", "confluent:tags": PII},
        {"name": "card", "type": ["null", "bytes"], "default": None, "confluent:tags": PII},
        {"name": "billing", "type": record([{"name": "street", "type": "string", "confluent:tags": PII},
                                            {"name": "city", "type": "string"}], "Address")},
        {"name": "shipping", "type": ["null", "Address"], "default": None},
        {"name": "contacts", "type": {"type": "map", "values": "com.acme.Address"}},
        {"name": "lines", "type": {"type": "array", "items": record(
            [{"name": "note", "type": "string", "confluent:tags": PII}], "Line")}},
        {"name": "name", "type": "string"},
    ])
    metadata = {"tags": {"**.name": ["JOIN"], "com.acme.Address.city": PII}}
    rule_set = {"domainRules": [
        {"name": "p", "type": "ENCRYPT", "tags": PII},
        {"name": "j", "type": "ENCRYPT", "tags": ["JOIN"], "params": {"encrypt.dek.algorithm": "AES256_SIV"}}]}

    def rules(policy: FieldPolicy) -> list[tuple[str, str, bool]]:
        return sorted((rule.name, rule.kind, rule.deterministic) for rule in policy.rules)

    json_policy = FieldPolicy.from_json_schema(json_schema, metadata=metadata, rule_set=rule_set)
    assert rules(json_policy) == [("address.street", "string", False), ("email", "string", False),
                                  ("labels.{}.text", "string", False), ("orders.[].note", "string", False),
                                  ("ssn", "string", False)]
    assert json_policy.exclusions == {("labels", "{}"): frozenset({"id"})}
    assert rules(FieldPolicy.from_avro(avro, metadata=metadata, rule_set=rule_set)) == [
        ("billing.city", "string", False), ("billing.street", "string", False), ("card", "bytes", False),
        ("contacts.{}.city", "string", False), ("contacts.{}.street", "string", False),
        ("lines.[].note", "string", False), ("name", "string", True), ("shipping.city", "string", False),
        ("shipping.street", "string", False), ("ssn", "string", False)]


def test_schemas_that_unroll_too_far_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("encryption.fields.MAX_POSITIONS", 500)
    # five object types, each referring to all five: unrolled MAX_RECURSION times per path, 5**20 positions
    defs = {f"d{i}": {"type": "object", "properties": {
        "secret": {"type": "string", "confluent:tags": PII}, **{f"p{j}": {"$ref": f"#/$defs/d{j}"} for j in range(5)}}}
        for i in range(5)}
    with pytest.raises(EncryptionError, match="more than 500 fields"):
        FieldPolicy.from_json_schema({"$ref": "#/$defs/d0", "$defs": defs})
    # one record referring to itself five times: 5**4 records unrolled
    tree = record([{"name": "secret", "type": "string", "confluent:tags": PII},
                   *({"name": f"p{j}", "type": ["null", "Tree"], "default": None} for j in range(5))], "Tree")
    assert len(FieldPolicy.from_avro(record([{"name": "secret", "type": "string", "confluent:tags": PII}])).rules) == 1
    with pytest.raises(EncryptionError, match="more than 500 fields"):
        FieldPolicy.from_avro(tree)


def test_tags_that_are_not_a_list_of_strings_are_refused() -> None:
    """`"confluent:tags": "PII"` once read as the tags P and I: the field was silently left in plaintext."""
    with pytest.raises(EncryptionError, match="confluent:tags at #/properties/ssn must be a list of strings"):
        FieldPolicy.from_json_schema({"type": "object", "properties": {"ssn": {"type": "string", "confluent:tags": "PII"}}})
    with pytest.raises(EncryptionError, match=r"confluent:tags at com\.acme\.Person\.ssn must be a list"):
        FieldPolicy.from_avro(record([{"name": "ssn", "type": "string", "confluent:tags": "PII"}]))


def test_additional_properties_of_several_all_of_parts_leave_no_key_in_plaintext(kms: LocalKms) -> None:
    """`extra` is declared by the second part only, so the first part's tagged additionalProperties
    applies to it (JSON Schema: allOf parts all apply, each with its own declared properties)."""
    schema = {"type": "object", "allOf": [
        {"properties": {"id": {"type": "string"}}, "additionalProperties": {"type": "string", "confluent:tags": PII}},
        {"properties": {"id": {"type": "string"}, "extra": {"type": "string"}}, "additionalProperties": {"type": "string"}},
    ]}
    encrypted = json_round_trip(kms, schema, {"id": "r1", "extra": "secret one", "other": "secret two"})
    assert encrypted["id"] == "r1"
    assert is_field_ciphertext(encrypted["extra"]) and is_field_ciphertext(encrypted["other"])


def test_avro_tags_on_a_referenced_named_type() -> None:
    """A schema registry reference (`references=`): tags written on its string-typed fields are
    honoured where it is used; a tag on the referenced record itself is refused, naming it."""
    address = {"type": "record", "name": "Address", "namespace": "com.acme", "confluent:tags": ["PII"],
               "fields": [{"name": "street", "type": "string", "confluent:tags": PII}]}
    person = record([{"name": "name", "type": "string"}, {"name": "homes", "type": {
        "type": "array", "items": "com.acme.Address"}}])
    with pytest.raises(EncryptionError, match=r"'homes' is tagged \['PII'\] at com\.acme\.Person\.homes/type/items "
                                              r"\(the named type com\.acme\.Address\)"):
        FieldPolicy.from_avro(person, references=[json.dumps(address)])
    untagged_record = {**address, "confluent:tags": ["INTERNAL"]}
    policy = FieldPolicy.from_avro(person, references=[json.dumps(untagged_record)])
    assert [rule.name for rule in policy.rules] == ["homes.[].street"]


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"[]": {"type": "string", "confluent:tags": PII}}},
    {"type": "object", "properties": {"a": {"type": "object", "properties": {
        "{}": {"type": "object", "properties": {"ssn": {"type": "string", "confluent:tags": PII}}}}}}},
    # beside items at the same field path, which would otherwise take the property's tag for theirs
    {"type": "object", "properties": {"a": {"type": ["array", "object"], "items": {"type": "string"},
                                            "properties": {"[]": {"type": "string", "confluent:tags": PII}}}}},
], ids=["top-level", "nested-under-braces", "beside-items"])
def test_json_properties_named_like_path_markers_are_refused_when_tagged(schema: dict[str, Any]) -> None:
    # The field path ("a", "[]") reads as a's array items: {"a": {"[]": "secret"}} was written as is.
    with pytest.raises(EncryptionError, match=r"a property named '\[\]' or '\{\}' cannot be told apart"):
        FieldPolicy.from_json_schema(schema)


def test_json_properties_named_like_path_markers_are_fine_untagged(kms: LocalKms) -> None:
    schema = {"type": "object", "properties": {"[]": {"type": "string"}, "ssn": {"type": "string",
                                                                              "confluent:tags": PII}}}
    policy = FieldPolicy.from_json_schema(schema)
    record = {"[]": "plain", "ssn": "078-05-1120"}
    sent = ctx()
    encrypted = FieldEncryptingSerializer(kms, "orders", policy)(record, sent)
    assert encrypted["[]"] == "plain" and "078-05-1120" not in json.dumps(encrypted)
    assert FieldDecryptingDeserializer(kms, policy)(encrypted, sent) == record


@pytest.mark.parametrize("beside_items", [
    {"prefixItems": [{"type": "string", "confluent:tags": PII}]},
    {"contains": {"type": "string", "confluent:tags": PII}},
    {"if": True, "then": {"items": {"type": "string", "confluent:tags": PII}}},
    {"unevaluatedItems": {"type": "string", "confluent:tags": PII}},
], ids=["prefixItems", "contains", "then-items", "unevaluatedItems"])
def test_json_tags_beside_an_array_items_schema_are_not_skipped(kms: LocalKms, beside_items: dict[str, Any]) -> None:
    # The walk went into an array's `items` and no further: the tag beside it was never seen, and the
    # item it describes was written in plaintext. Now it is honoured with the items (the same values).
    schema = {"type": "object", "properties": {
        "a": {"type": "array", "items": {"type": "string"}, **beside_items}}}
    policy = FieldPolicy.from_json_schema(schema)
    record = {"a": ["078-05-1120", "other"]}
    sent = ctx()
    encrypted = FieldEncryptingSerializer(kms, "orders", policy)(record, sent)
    assert "078-05-1120" not in json.dumps(encrypted)
    assert FieldDecryptingDeserializer(kms, policy)(encrypted, sent) == record
    # Beside items that are not strings, it is refused instead.
    schema["properties"]["a"]["items"] = {"type": "integer"}
    with pytest.raises(EncryptionError, match="cannot be honoured"):
        FieldPolicy.from_json_schema(schema)


DRAFT2020 = "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize(("schema", "says"), [
    # "#/$defs/x" under an embedded $id means that resource's x (tagged), not the root's
    ({"$schema": DRAFT2020, "type": "object", "$defs": {"x": {"type": "string"}}, "properties": {
        "p": {"$id": "https://example.com/sub", "$defs": {"x": {"type": "string", "confluent:tags": PII}},
              "type": "object", "properties": {"q": {"$ref": "#/$defs/x"}}}}},
     r"embedded \$id at #/properties/p"),
    ({"$schema": DRAFT2020, "type": "object", "$dynamicAnchor": "node", "properties": {
        "ssn": {"type": "string", "confluent:tags": PII}, "child": {"$dynamicRef": "#node"}}},
     r"uses \$dynamicRef at #/properties/child"),
    ({"$schema": "https://json-schema.org/draft/2019-09/schema", "type": "object", "$recursiveAnchor": True,
      "properties": {"ssn": {"type": "string", "confluent:tags": PII}, "child": {"$recursiveRef": "#"}}},
     r"uses \$recursiveRef at #/properties/child"),
    ({"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
      "definitions": {"x": {"type": "string"}}, "properties": {
          "p": {"id": "https://example.com/sub", "definitions": {"x": {"type": "string", "confluent:tags": PII}},
                "type": "object", "properties": {"q": {"$ref": "#/definitions/x"}}}}},
     r"embedded id at #/properties/p"),
], ids=["embedded-id", "dynamicRef", "recursiveRef", "draft-04-id"])
def test_json_references_the_walk_cannot_follow_are_refused(schema: dict[str, Any], says: str) -> None:
    # Each left a tagged value in plaintext: the walk resolved the $ref against the root (an untagged
    # x) or did not follow the reference at all (child.ssn).
    with pytest.raises(EncryptionError, match=says):
        FieldPolicy.from_json_schema(schema)


def test_json_pattern_tag_matching_a_declared_property_is_not_skipped(kms: LocalKms) -> None:
    # patternProperties describe every matching key, declared ones too; the additionalProperties rule
    # that honours the pattern's tag skips the declared ones, so "ssn_x" was written in plaintext.
    tagged = {"type": "string", "confluent:tags": PII}
    schema = {"type": "object", "properties": {"ssn_x": {"type": "string"}},
              "patternProperties": {"^ssn": tagged}, "additionalProperties": tagged}
    with pytest.raises(EncryptionError, match="may also describe the declared property 'ssn_x', which is not"):
        FieldPolicy.from_json_schema(schema)
    nested = {"type": "object", "properties": {"ssn_x": {"type": "object", "properties": {"v": {"type": "string"}}}},
              "patternProperties": {"^ssn": {"type": "object", "properties": {"v": tagged}}},
              "additionalProperties": {"type": "object", "properties": {"v": tagged}}}
    with pytest.raises(EncryptionError, match=r"declared property 'ssn_x\.v'"):
        FieldPolicy.from_json_schema(nested)
    # With the declared property tagged too, every value the pattern describes is encrypted.
    schema["properties"]["ssn_x"] = tagged
    policy = FieldPolicy.from_json_schema(schema)
    record = {"ssn_x": "078-05-1120", "ssn_y": "219-09-9999"}
    sent = ctx()
    encrypted = FieldEncryptingSerializer(kms, "orders", policy)(record, sent)
    assert "078-05-1120" not in json.dumps(encrypted) and "219-09-9999" not in json.dumps(encrypted)
    assert FieldDecryptingDeserializer(kms, policy)(encrypted, sent) == record


@pytest.mark.parametrize("conditional", [
    {"if": True, "then": {"additionalProperties": {"type": "string", "confluent:tags": PII}}},
    {"dependentSchemas": {"k": {"additionalProperties": {"type": "string", "confluent:tags": PII}}}},
], ids=["then", "dependentSchemas"])
def test_json_conditional_additional_properties_tag_covering_a_declared_property_is_refused(
    conditional: dict[str, Any],
) -> None:
    # The conditional's additionalProperties describe "k" (it declares no properties of its own); the
    # root's additionalProperties rule that honoured its tag skipped "k", written in plaintext.
    schema = {"type": "object", "properties": {"k": {"type": "string"}},
              "additionalProperties": {"type": "string", "confluent:tags": PII}, **conditional}
    with pytest.raises(EncryptionError, match="may also describe the declared property 'k', which is not encrypted"):
        FieldPolicy.from_json_schema(schema)


# -- one path, several positions: encrypted once ------------------------------------------------------


def test_a_field_described_by_two_union_branches_is_encrypted_once(kms: LocalKms) -> None:
    # Two records in one union, each with a tagged `ssn`: the values at `holder.ssn` used to be sealed
    # once per branch, so a consumer decrypting once got ciphertext back.
    tagged = {"name": "ssn", "type": "string", "confluent:tags": PII}
    schema = record([{"name": "holder", "type": [record([tagged], "Person"), record([tagged], "Company")]}],
                    "Account")
    policy = FieldPolicy.from_avro(schema)
    assert [rule.name for rule in policy.rules] == ["holder.ssn"]
    sent = ctx()
    keyless, _ = avro_round_trip(kms, schema, {"holder": {"ssn": "078-05-1120"}}, sent)
    # One seal: the envelope's plaintext is the value itself.
    single = FieldPolicy.from_json_schema({"type": "object", "properties": {"holder": {
        "type": "object", "properties": {"ssn": {"type": "string", "confluent:tags": PII}}}}})
    opened = FieldDecryptingDeserializer(kms, single)(keyless, sent)
    assert opened == {"holder": {"ssn": "078-05-1120"}}


def test_a_property_tagged_in_two_all_of_parts_is_encrypted_once(kms: LocalKms) -> None:
    tagged = {"type": "string", "confluent:tags": PII}
    schema = {"type": "object", "properties": {"ssn": tagged}, "allOf": [{"properties": {"ssn": tagged}}]}
    sent = ctx()
    encrypted = json_round_trip(kms, schema, {"ssn": "078-05-1120"}, sent)
    single = FieldPolicy.from_json_schema({"type": "object", "properties": {"ssn": tagged}})
    assert FieldDecryptingDeserializer(kms, single)(encrypted, sent) == {"ssn": "078-05-1120"}


def test_one_path_under_two_tags_takes_the_union_of_their_rules(kms: LocalKms) -> None:
    # One position tagged PII, the other SSN (deterministic): the one rule is deterministic.
    schema = {"type": "object", "properties": {"ssn": {"type": "string", "confluent:tags": ["PII"]}},
              "allOf": [{"properties": {"ssn": {"type": "string", "confluent:tags": ["SSN"]}}}]}
    policy = FieldPolicy.from_json_schema(schema, tags=["PII"], deterministic_tags=["SSN"])
    assert [(rule.name, rule.deterministic) for rule in policy.rules] == [("ssn", True)]


def test_one_path_that_is_a_string_in_one_branch_and_bytes_in_another_is_refused() -> None:
    schema = record([{"name": "holder", "type": [
        record([{"name": "ssn", "type": "string", "confluent:tags": PII}], "Person"),
        record([{"name": "ssn", "type": "bytes", "confluent:tags": PII}], "Company")]}], "Account")
    with pytest.raises(EncryptionError, match="string in one part of the schema and bytes in another"):
        FieldPolicy.from_avro(schema)
