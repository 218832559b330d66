"""Done-when: confluent-kafka's registry client and serdes against a real `kgov serve`, records
round-tripped through a real Tansu broker, in both directions between Confluent's serdes and ours."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer as ConfluentAvroDeserializer
from confluent_kafka.schema_registry.avro import AvroSerializer as ConfluentAvroSerializer
from confluent_kafka.schema_registry.common.schema_registry_client import (
    Metadata,
    MetadataProperties,
    Rule,
    RuleKind,
    RuleMode,
    RuleSet,
    ServerConfig,
)
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer as ConfluentJSONDeserializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer as ConfluentJSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from registry.client import RegistryClient
from registry.serdes import AvroDeserializer, AvroSerializer, JSONDeserializer, JSONSerializer, unframe
from tests.e2e.registry.kgov_process import PASSWORD, kgov_serve

ORDER_AVRO = json.dumps({"type": "record", "name": "Order", "namespace": "com.acme", "fields": [
    {"name": "id", "type": "string"}, {"name": "amount", "type": "double"},
    {"name": "note", "type": ["null", "string"], "default": None}]})
ORDER_JSON = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
                         "properties": {"id": {"type": "string"}, "amount": {"type": "number"}},
                         "required": ["id", "amount"]})


@pytest.fixture(scope="module")
def kgov_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with kgov_serve(tmp_path_factory.mktemp("kgov-serve")) as url:
        yield url


@pytest.fixture(scope="module")
def confluent_client(kgov_url: str) -> Iterator[SchemaRegistryClient]:
    with SchemaRegistryClient({"url": kgov_url, "basic.auth.user.info": f"admin:{PASSWORD}"}) as client:
        yield client


@pytest.fixture(scope="module")
def our_client(kgov_url: str) -> Iterator[RegistryClient]:
    with RegistryClient(kgov_url, basic_auth=("admin", PASSWORD)) as client:
        yield client


def test_schema_registry_client_api(confluent_client: SchemaRegistryClient) -> None:
    c = confluent_client
    subject = f"api-{uuid.uuid4().hex[:8]}-value"
    v1 = Schema(ORDER_AVRO, "AVRO")
    schema_id = c.register_schema(subject, v1)
    assert c.register_schema(subject, v1) == schema_id
    assert json.loads(c.get_schema(schema_id).schema_str) == json.loads(ORDER_AVRO)
    assert c.get_schema(schema_id).schema_type == "AVRO"
    found = c.lookup_schema(subject, v1)
    assert (found.schema_id, found.version, found.subject) == (schema_id, 1, subject)
    assert subject in c.get_subjects()
    assert c.get_versions(subject) == [1]
    assert c.get_latest_version(subject).schema_id == schema_id
    assert c.get_version(subject, 1).version == 1
    bad = Schema(json.dumps({"type": "record", "name": "Order", "namespace": "com.acme",
                             "fields": [{"name": "id", "type": "int"}]}), "AVRO")
    assert c.test_compatibility(subject, bad) is False
    with pytest.raises(SchemaRegistryError) as err:
        c.register_schema(subject, bad)
    assert err.value.http_status_code == 409
    assert c.set_compatibility(subject, "NONE") == {"compatibility": "NONE"}
    assert c.get_compatibility(subject) == "NONE"
    assert c.test_compatibility(subject, bad) is True
    second = c.register_schema(subject, bad)
    assert c.get_versions(subject) == [1, 2]
    assert c.delete_version(subject, 2) == 2
    assert c.delete_subject(subject) == [1]
    assert c.delete_subject(subject, permanent=True) == [1, 2]
    c.clear_caches()
    with pytest.raises(SchemaRegistryError) as err:
        c.get_latest_version(subject)
    assert (err.value.http_status_code, err.value.error_code) == (404, 40401)
    # every version that used the id is gone for good, and with them the id
    with pytest.raises(SchemaRegistryError) as err:
        c.get_schema(second)
    assert (err.value.http_status_code, err.value.error_code) == (404, 40403)
    assert c.get_global_mode() == "READWRITE"
    assert sorted(c.get_schema_types()) == ["AVRO", "JSON"]
    assert c.get_contexts() == ["."]
    assert c.test_compatibility_all_versions(subject, v1) is True


def test_data_contracts_through_the_client(confluent_client: SchemaRegistryClient) -> None:
    # The config's default metadata and override rule set (set_config/ServerConfig), merged into a
    # registration that brings its own metadata (Schema(metadata=...)), as Confluent merges them.
    c = confluent_client
    subject = f"contract-{uuid.uuid4().hex[:8]}-value"
    rule = Rule(name="positive", doc=None, kind=RuleKind.CONDITION, mode=RuleMode.WRITE, type="CEL", tags=None,
                params=None, expr="message.amount > 0", on_success=None, on_failure=None, disabled=None)
    c.set_config(subject, ServerConfig(
        default_metadata=Metadata(None, MetadataProperties({"owner": "data-team", "tier": "silver"}), None),
        override_rule_set=RuleSet(None, [rule])))
    config = c.get_config(subject)
    assert config.default_metadata is not None and config.default_metadata.properties is not None
    assert config.default_metadata.properties.properties == {"owner": "data-team", "tier": "silver"}
    mine = Metadata(None, MetadataProperties({"tier": "gold"}), None)
    created = c.register_schema_full_response(subject, Schema(ORDER_AVRO, "AVRO", metadata=mine))
    latest = c.get_latest_version(subject)
    assert latest.schema_id == created.schema_id and latest.version == 1
    assert latest.schema.metadata is not None and latest.schema.metadata.properties is not None
    assert latest.schema.metadata.properties.properties == {"owner": "data-team", "tier": "gold"}
    assert latest.schema.rule_set is not None and latest.schema.rule_set.domain_rules is not None
    assert [r.expr for r in latest.schema.rule_set.domain_rules] == ["message.amount > 0"]
    assert c.get_latest_with_metadata(subject, {"tier": "gold"}).version == 1


def test_rule_validation_and_lookup_with_config_defaults_through_the_client(
        confluent_client: SchemaRegistryClient, kgov_url: str) -> None:
    # An invalid rule is the client's SchemaRegistryError with Confluent's code and message; a schema
    # registered under the config's default metadata is found by a lookup sending only its own metadata.
    c = confluent_client
    subject = f"lookup-{uuid.uuid4().hex[:8]}-value"
    bad = Rule(name="bad name", doc=None, kind=RuleKind.CONDITION, mode=RuleMode.WRITE, type="CEL", tags=None,
               params=None, expr="true", on_success=None, on_failure=None, disabled=None)
    with pytest.raises(SchemaRegistryError) as raised:
        c.register_schema(subject, Schema(ORDER_AVRO, "AVRO", rule_set=RuleSet(None, [bad])))
    assert (raised.value.http_status_code, raised.value.error_code) == (422, 42210)
    assert raised.value.error_message == "Illegal character in rule name: bad name"
    c.set_config(subject, ServerConfig(
        default_metadata=Metadata(None, MetadataProperties({"owner": "data-team"}), None)))
    mine = Metadata(None, MetadataProperties({"app": "billing"}), None)
    created = c.register_schema_full_response(subject, Schema(ORDER_AVRO, "AVRO", metadata=mine))
    # A fresh client: the registering one answers lookups of what it registered from its cache.
    with SchemaRegistryClient({"url": kgov_url, "basic.auth.user.info": f"admin:{PASSWORD}"}) as fresh:
        found = fresh.lookup_schema(subject, Schema(ORDER_AVRO, "AVRO", metadata=mine))
    # The client answers the schema it sent ("Ensure the schema matches the input") with the id and
    # version the server found.
    assert (found.schema_id, found.version) == (created.schema_id, 1)


def new_topic(bootstrap: str) -> str:
    topic = f"sr-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        future.result(timeout=30)
    return topic


def through_broker(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    try:
        while len(out) < len(values):
            msg = consumer.poll(10)
            assert msg is not None, f"only {len(out)} of {len(values)} records arrived"
            assert msg.error() is None, msg.error()
            out.append(msg.value())
    finally:
        consumer.close()
    return out


ORDERS = [{"id": f"o-{i}", "amount": i * 1.5, "note": None if i % 2 else f"n{i}"} for i in range(5)]


@pytest.mark.broker
@pytest.mark.slow
def test_avro_records_round_trip_both_ways(kafka_broker: str, confluent_client: SchemaRegistryClient,
                                           our_client: RegistryClient) -> None:
    topic = new_topic(kafka_broker)
    ctx = SerializationContext(topic, MessageField.VALUE)
    # Confluent's serializer with its default (associated) subject strategy: our 404 makes it fall back
    confluent_ser = ConfluentAvroSerializer(confluent_client, ORDER_AVRO)
    ours_ser = AvroSerializer(our_client, ORDER_AVRO)
    sent = [confluent_ser(o, ctx) for o in ORDERS[:3]] + [ours_ser(o, ctx) for o in ORDERS[3:]]
    assert all(isinstance(v, bytes) for v in sent)
    received = through_broker(kafka_broker, topic, [v for v in sent if v is not None])
    ids = {unframe(v)[0] for v in received}
    assert len(ids) == 1  # both registered the same schema under `<topic>-value`: one id
    assert confluent_client.get_latest_version(f"{topic}-value").schema_id == ids.pop()
    confluent_de = ConfluentAvroDeserializer(confluent_client)
    ours_de = AvroDeserializer(our_client)
    assert [confluent_de(v, ctx) for v in received] == ORDERS
    assert [ours_de(v, ctx) for v in received] == ORDERS


@pytest.mark.broker
@pytest.mark.slow
def test_json_records_round_trip_both_ways(kafka_broker: str, confluent_client: SchemaRegistryClient,
                                           our_client: RegistryClient) -> None:
    topic = new_topic(kafka_broker)
    ctx = SerializationContext(topic, MessageField.VALUE)
    orders = [{"id": o["id"], "amount": o["amount"]} for o in ORDERS]
    confluent_ser = ConfluentJSONSerializer(ORDER_JSON, confluent_client)
    ours_ser = JSONSerializer(our_client, ORDER_JSON)
    sent = [confluent_ser(o, ctx) for o in orders[:3]] + [ours_ser(o, ctx) for o in orders[3:]]
    received = through_broker(kafka_broker, topic, [v for v in sent if v is not None])
    assert len({unframe(v)[0] for v in received}) == 1
    confluent_de = ConfluentJSONDeserializer(ORDER_JSON, schema_registry_client=confluent_client)
    ours_de = JSONDeserializer(our_client)
    assert [confluent_de(v, ctx) for v in received] == orders
    assert [ours_de(v, ctx) for v in received] == orders


def test_our_serializers_refuse_bad_values(our_client: RegistryClient) -> None:
    from registry.serdes import SerializationError

    serializers: list[Callable[[Any, SerializationContext], bytes | None]] = [
        AvroSerializer(our_client, ORDER_AVRO), JSONSerializer(our_client, ORDER_JSON)]
    for n, serializer in enumerate(serializers):
        with pytest.raises(SerializationError):
            serializer({"id": 5}, SerializationContext(f"refusals-{n}", MessageField.VALUE))


ADDRESS_AVRO = json.dumps({"type": "record", "name": "Address", "namespace": "com.acme",
                           "fields": [{"name": "street", "type": "string"}]})
PERSON_AVRO = json.dumps({"type": "record", "name": "Person", "namespace": "com.acme",
                          "fields": [{"name": "home", "type": "com.acme.Address"}]})
ADDRESS_JSON = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                           "properties": {"street": {"type": "string"}}, "required": ["street"]})
PERSON_JSON = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Person", "type": "object",
                          "properties": {"home": {"$ref": "address.json"}}, "required": ["home"]})


def test_serdes_with_schema_references(confluent_client: SchemaRegistryClient, our_client: RegistryClient) -> None:
    from confluent_kafka.schema_registry import SchemaReference

    from registry.model import Reference
    from registry.serdes import SerializationError

    tag = uuid.uuid4().hex[:8]
    person = {"home": {"street": "Main St"}}
    # Avro: the Address type comes from another subject
    our_client.register(f"address-{tag}", ADDRESS_AVRO)
    avro_refs = [Reference("com.acme.Address", f"address-{tag}", 1)]
    ctx = SerializationContext(f"people-{tag}", MessageField.VALUE)
    framed = AvroSerializer(our_client, PERSON_AVRO, references=avro_refs)(person, ctx)
    assert framed is not None
    assert AvroDeserializer(our_client)(framed, ctx) == person
    assert ConfluentAvroDeserializer(confluent_client)(framed, ctx) == person
    # JSON Schema: `$ref: address.json` resolves to the referenced subject version
    our_client.register(f"address-json-{tag}", ADDRESS_JSON, "JSON")
    json_refs = [Reference("address.json", f"address-json-{tag}", 1)]
    jctx = SerializationContext(f"people-json-{tag}", MessageField.VALUE)
    serializer = JSONSerializer(our_client, PERSON_JSON, references=json_refs)
    framed = serializer(person, jctx)
    assert framed is not None
    assert JSONDeserializer(our_client)(framed, jctx) == person
    with pytest.raises(SerializationError, match="street"):
        serializer({"home": {}}, jctx)
    registered = confluent_client.get_latest_version(f"people-json-{tag}-value")
    assert registered.schema.references == [SchemaReference("address.json", f"address-json-{tag}", 1)]
