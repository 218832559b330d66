"""The JSON serdes against a real `kgov serve`: a schema anyone with WRITE on one subject registers
with a catastrophic pattern, or with `$ref`s that fan out, cannot stall a producer or a consumer (it
is fetched by the id a record carries), and a pattern the serdes cannot evaluate in linear time is
refused by name."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from registry.client import RegistryClient
from registry.json_validation import WorkBudget
from registry.model import Reference
from registry.serdes import AvroSerializer, JSONDeserializer, JSONSerializer, SerializationError, frame
from tests.e2e.registry.kgov_process import PASSWORD, kgov_serve

# Generous for a loaded, shared machine; with Python's `re` each refusal below would take millennia.
FAST_S = 2.0
DRAFT7 = "http://json-schema.org/draft-07/schema#"
EVIL = "^(a+)+$"
HOSTILE = "a" * 5_000 + "!"
ACCOUNT = json.dumps({"$schema": DRAFT7, "title": "Account", "type": "object",
                      "properties": {"handle": {"type": "string", "pattern": EVIL}},
                      "patternProperties": {EVIL: {"type": "integer"}}, "additionalProperties": False})


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryClient]:
    with kgov_serve(tmp_path_factory.mktemp("kgov-serve")) as url, \
            RegistryClient(url, basic_auth=("admin", PASSWORD)) as registry_client:
        yield registry_client


def refused_quickly(call: object, *args: object) -> str:
    assert callable(call)
    started = time.perf_counter()
    with pytest.raises(SerializationError) as refused:
        call(*args)
    assert time.perf_counter() - started < FAST_S
    return str(refused.value)


def test_serializer_refuses_hostile_values_quickly(client: RegistryClient) -> None:
    ctx = SerializationContext(f"accounts-{uuid.uuid4().hex[:8]}", MessageField.VALUE)
    serializer = JSONSerializer(client, ACCOUNT)
    framed = serializer({"handle": "a" * 5_000, "a" * 5_000: 7}, ctx)
    assert framed is not None
    assert 'at $.handle, pattern "^(a+)+$" is not met' in refused_quickly(serializer, {"handle": HOSTILE}, ctx)
    assert "at $, additionalProperties false is not met" in refused_quickly(serializer, {HOSTILE: 7}, ctx)


def test_deserializer_by_id_refuses_hostile_records_quickly(client: RegistryClient) -> None:
    tag = uuid.uuid4().hex[:8]
    schema_id = client.register(f"accounts-{tag}-value", ACCOUNT, "JSON")
    deserializer = JSONDeserializer(client)
    ctx = SerializationContext(f"accounts-{tag}", MessageField.VALUE)
    good = {"handle": "a" * 5_000}
    assert deserializer(frame(schema_id, json.dumps(good).encode()), ctx) == good
    hostile = frame(schema_id, json.dumps({"handle": HOSTILE}).encode())
    assert 'at $.handle, pattern "^(a+)+$" is not met' in refused_quickly(deserializer, hostile, ctx)
    hostile_name = frame(schema_id, json.dumps({HOSTILE: 1}).encode())
    assert "at $, additionalProperties false is not met" in refused_quickly(deserializer, hostile_name, ctx)


def test_deserializer_follows_references_in_linear_time(client: RegistryClient) -> None:
    tag = uuid.uuid4().hex[:8]
    handle = json.dumps({"$schema": DRAFT7, "type": "string", "pattern": EVIL})
    client.register(f"handle-{tag}", handle, "JSON")
    person = json.dumps({"$schema": DRAFT7, "type": "object", "properties": {"handle": {"$ref": "handle.json"}}})
    schema_id = client.register(f"people-{tag}-value", person, "JSON", [Reference("handle.json", f"handle-{tag}", 1)])
    record = frame(schema_id, json.dumps({"handle": HOSTILE}).encode())
    assert "does not match" in refused_quickly(JSONDeserializer(client), record, None)


def test_unevaluable_patterns_are_refused_by_name(client: RegistryClient) -> None:
    tag = uuid.uuid4().hex[:8]
    twice = json.dumps({"$schema": DRAFT7, "type": "string", "pattern": "^(a)\\1$"})
    schema_id = client.register(f"twice-{tag}-value", twice, "JSON")
    record = frame(schema_id, json.dumps("aa").encode())
    expected = 'JSON Schema pattern "^(a)\\\\1$" cannot be evaluated: the linear-time engine (RE2) rejects it'
    assert refused_quickly(JSONDeserializer(client), record, None).startswith(expected)
    with pytest.raises(SerializationError) as refused:
        JSONSerializer(client, twice)
    assert str(refused.value).startswith(expected)
    assert "validate=False" in str(refused.value)
    # The escape hatch: no validation, so no pattern to evaluate.
    assert JSONDeserializer(client, validate=False)(record, None) == "aa"
    ctx = SerializationContext(f"twice-{tag}", MessageField.VALUE)
    assert JSONSerializer(client, twice, validate=False)("ab", ctx) == frame(schema_id, b'"ab"')


def fan_out(depth: int) -> str:
    """`allOf` of two references to a definition that does the same, `depth` levels deep: 2**depth
    subschema applications for any object (hours at 30 levels without the work budget)."""
    defs: dict[str, object] = {"d0": {"type": "object"}}
    for level in range(1, depth + 1):
        defs[f"d{level}"] = {"allOf": [{"$ref": f"#/definitions/d{level - 1}"}] * 2}
    return json.dumps({"$schema": DRAFT7, "title": "Stall", "definitions": defs, "$ref": f"#/definitions/d{depth}"})


BUDGET_EXCEEDED = "JSON Schema validation exceeded its work budget of 50024 steps"


@pytest.mark.timeout(60)
def test_serializer_refuses_a_fan_out_schema_within_its_budget(client: RegistryClient) -> None:
    ctx = SerializationContext(f"stall-{uuid.uuid4().hex[:8]}", MessageField.VALUE)
    schema = fan_out(30)
    assert len(schema) < 3_000
    serializer = JSONSerializer(client, schema)
    assert refused_quickly(serializer, {"a": 1}, ctx).startswith(BUDGET_EXCEEDED)
    # Configurable: a smaller budget refuses what the default lets through.
    shallow = fan_out(8)
    assert JSONSerializer(client, shallow)({}, ctx) == frame(client.register(ctx.topic + "-value", shallow, "JSON"),
                                                             b"{}")
    small = JSONSerializer(client, shallow, work_budget=WorkBudget(base=100, per_node=0))
    assert "work budget of 100 steps" in refused_quickly(small, {}, ctx)


@pytest.mark.timeout(60)
def test_deserializer_by_id_refuses_a_fan_out_schema_within_its_budget(client: RegistryClient) -> None:
    tag = uuid.uuid4().hex[:8]
    stall_id = client.register(f"stall-{tag}-value", fan_out(30), "JSON")
    account_id = client.register(f"accounts-{tag}-value", ACCOUNT, "JSON")
    deserializer = JSONDeserializer(client)
    for _ in range(2):  # each record has its own budget: a refusal leaves nothing behind
        assert refused_quickly(deserializer, frame(stall_id, b'{"a":1}'), None).startswith(BUDGET_EXCEEDED)
        assert deserializer(frame(account_id, b'{"handle":"aaa"}'), None) == {"handle": "aaa"}
    assert JSONDeserializer(client, validate=False)(frame(stall_id, b'{"a":1}'), None) == {"a": 1}
    shallow = frame(client.register(f"shallow-{tag}-value", fan_out(8), "JSON"), b"{}")
    assert deserializer(shallow, None) == {}
    small = JSONDeserializer(client, work_budget=WorkBudget(base=100, per_node=0))
    assert "work budget of 100 steps" in refused_quickly(small, shallow, None)


def test_refusals_never_quote_the_refused_value(client: RegistryClient) -> None:
    """What a producer logs when it is refused must not carry the record's content (fastavro's union and
    enum refusals, and jsonschema's messages, quote the value)."""
    ctx = SerializationContext(f"people-{uuid.uuid4().hex[:8]}", MessageField.VALUE)
    avro = AvroSerializer(client, json.dumps({
        "type": "record", "name": "Person", "fields": [
            {"name": "ssn", "type": ["null", "int"]},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["CUSTOMER"]}},
            {"name": "age", "type": "int"}]}))
    refusals = []
    for value in ({"ssn": "SECRET-123-45-6789", "kind": "CUSTOMER", "age": 1},
                  {"ssn": None, "kind": "SECRET-KIND", "age": 1},
                  {"ssn": None, "kind": "CUSTOMER", "age": "SECRET-AGE"}):
        with pytest.raises(SerializationError) as refused:
            avro(value, ctx)
        refusals.append(str(refused.value))
    assert refusals[0] == "value does not match the Avro schema: ValueError on field ssn (the value is not quoted)"
    assert refusals[2] == "value does not match the Avro schema: an integer is required on field age"
    assert not any("SECRET" in r for r in refusals)
    json_ctx = SerializationContext(f"accounts-{uuid.uuid4().hex[:8]}", MessageField.VALUE)
    assert "SECRET" not in refused_quickly(JSONSerializer(client, ACCOUNT), {"handle": "SECRET-HANDLE"}, json_ctx)
