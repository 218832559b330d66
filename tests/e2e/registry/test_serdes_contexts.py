"""Our serdes resolve schema references where a real `kgov serve` stores them: in the context of the
subject holding them (`registry.model.reference_subject`), whether the client is bound to the context
(`http://host/contexts/.ctx`) or speaks to the root with qualified subjects (`:.ctx:orders-value`).

`customer` exists in the default context and in `.ctx` with different schemas, so a value shaped for one
cannot be written or read with the other: reading the wrong one fails, it does not pass by chance.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka.serialization import MessageField, SerializationContext
from sqlalchemy import Engine

from authz.database import bump_version, open_engine, transaction
from registry import store
from registry.client import RegistryClient
from registry.model import Reference
from registry.serdes import (
    AvroDeserializer,
    AvroSerializer,
    JSONDeserializer,
    JSONSerializer,
    SerializationContextLike,
    SerializationError,
    frame,
    topic_subject_name_strategy,
    unframe,
)
from tests.e2e.registry.kgov_process import PASSWORD, kgov_serve

AUTH = ("admin", PASSWORD)
# The same Avro name, two shapes: `name` in the default context, `id` in `.ctx`.
CUSTOMER_AVRO = {
    ".": {"type": "record", "name": "Customer", "namespace": "com.acme", "fields": [{"name": "name", "type": "string"}]},
    ".ctx": {"type": "record", "name": "Customer", "namespace": "com.acme", "fields": [{"name": "id", "type": "long"}]},
}
ORDER_AVRO = json.dumps({"type": "record", "name": "Order", "namespace": "com.acme",
                         "fields": [{"name": "customer", "type": "com.acme.Customer"}]})
CUSTOMER_JSON = {
    ".": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
    ".ctx": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
}
ORDER_JSON = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
                         "properties": {"customer": {"$ref": "customer.json"}}, "required": ["customer"]})
ORDER = {".": {"customer": {"name": "Ada"}}, ".ctx": {"customer": {"id": 7}}}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Engine]]:
    """The URL of `kgov serve` and an engine on its database, to write what an older kgov node wrote."""
    data = tmp_path_factory.mktemp("kgov-serve")
    with kgov_serve(data) as url:
        engine = open_engine(f"sqlite:///{data / 'kgov.db'}")
        try:
            yield url, engine
        finally:
            engine.dispose()


@pytest.fixture(scope="module")
def kgov_url(served: tuple[str, Engine]) -> str:
    return served[0]


@pytest.fixture(scope="module")
def clients(kgov_url: str) -> Iterator[dict[str, RegistryClient]]:
    """A fresh client per test would do; one per context keeps the test fast. Keys: the context."""
    with RegistryClient(kgov_url, basic_auth=AUTH) as root, \
            RegistryClient(f"{kgov_url}/contexts/.ctx", basic_auth=AUTH) as bound:
        yield {".": root, ".ctx": bound}


def register(url: str, subject: str, schema: dict[str, Any], schema_type: str,
             references: list[tuple[str, str]] | None = None) -> int:
    """Registers `schema`; `references` are (name, subject) pairs, each to version 1."""
    response = httpx.post(f"{url}/subjects/{subject}/versions", auth=AUTH, timeout=10, json={
        "schema": json.dumps(schema), "schemaType": schema_type,
        "references": [{"name": n, "subject": s, "version": 1} for n, s in references or ()]})
    assert response.status_code == 200, response.text
    return int(response.json()["id"])


def qualified_strategy(context: str) -> Callable[[SerializationContextLike, str | None], str]:
    """TopicNameStrategy with the subject qualified: a root client producing into `context`."""
    return lambda ctx, record: f":{context}:{topic_subject_name_strategy(ctx, record)}"


@pytest.fixture(scope="module")
def customers(kgov_url: str) -> dict[str, str]:
    """The referenced subject names, registered in both contexts, for Avro and for JSON."""
    tag = uuid.uuid4().hex[:8]
    names = {"AVRO": f"customer-{tag}", "JSON": f"customer-json-{tag}"}
    for context in (".", ".ctx"):
        prefix = "" if context == "." else f":{context}:"
        register(kgov_url, prefix + names["AVRO"], CUSTOMER_AVRO[context], "AVRO")
        register(kgov_url, prefix + names["JSON"], CUSTOMER_JSON[context], "JSON")
    return names


def serdes(kind: str, client: RegistryClient, customer: str, **kwargs: Any) -> tuple[Any, Any]:
    if kind == "AVRO":
        refs = [Reference("com.acme.Customer", customer, 1)]
        return AvroSerializer(client, ORDER_AVRO, references=refs, **kwargs), AvroDeserializer(client)
    refs = [Reference("customer.json", customer, 1)]
    return JSONSerializer(client, ORDER_JSON, references=refs, **kwargs), JSONDeserializer(client)


# (context written to, client the producer uses, how it names its subject)
PRODUCERS = [
    pytest.param(".ctx", ".ctx", None, id="bound-to-ctx"),
    pytest.param(".ctx", ".", ".ctx", id="root-qualified-subject"),
    pytest.param(".", ".", None, id="default-context"),
]


@pytest.mark.parametrize("kind", ["AVRO", "JSON"])
@pytest.mark.parametrize(("context", "producer", "qualify"), PRODUCERS)
def test_producer_and_consumers_use_the_version_of_the_subjects_context(
        kind: str, context: str, producer: str, qualify: str | None, clients: dict[str, RegistryClient],
        customers: dict[str, str], kgov_url: str) -> None:
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    ctx = SerializationContext(topic, MessageField.VALUE)
    strategy = {"subject_name_strategy": qualified_strategy(qualify)} if qualify else {}
    serializer, _ = serdes(kind, clients[producer], customers[kind], **strategy)
    framed = serializer(ORDER[context], ctx)
    assert framed is not None
    # the registry stored the version under the subject of that context, with the reference as written
    subject = f"{topic}-value" if context == "." else f":{context}:{topic}-value"
    stored = httpx.get(f"{kgov_url}/subjects/{subject}/versions/1", auth=AUTH, timeout=10).json()
    assert stored["id"] == unframe(framed)[0]
    assert stored["references"] == [{"name": "com.acme.Customer" if kind == "AVRO" else "customer.json",
                                     "subject": customers[kind], "version": 1}]
    # consumers through either URL (ids are global) decode with the schema of the writer's context
    for consumer in (".", ".ctx"):
        _, deserializer = serdes(kind, clients[consumer], customers[kind])
        assert deserializer(framed, ctx) == ORDER[context], consumer


@pytest.mark.parametrize("kind", ["AVRO", "JSON"])
def test_a_value_shaped_for_the_other_context_is_refused(kind: str, clients: dict[str, RegistryClient],
                                                         customers: dict[str, str]) -> None:
    ctx = SerializationContext(f"orders-{uuid.uuid4().hex[:8]}", MessageField.VALUE)
    serializer, _ = serdes(kind, clients["."], customers[kind], subject_name_strategy=qualified_strategy(".ctx"))
    with pytest.raises(SerializationError):
        serializer(ORDER["."], ctx)


def test_one_serializer_writes_to_subjects_of_two_contexts(clients: dict[str, RegistryClient],
                                                          customers: dict[str, str]) -> None:
    """The references belong to each subject the strategy names: parsed once per context."""
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    by_topic = {f"{topic}-ctx": f":.ctx:{topic}-ctx-value", f"{topic}-dflt": f"{topic}-dflt-value"}
    serializer = AvroSerializer(clients["."], ORDER_AVRO, references=[Reference("com.acme.Customer",
                                                                                customers["AVRO"], 1)],
                                subject_name_strategy=lambda ctx, _: by_topic[ctx.topic])
    deserializer = AvroDeserializer(clients["."])
    for name, context in ((f"{topic}-ctx", ".ctx"), (f"{topic}-dflt", "."), (f"{topic}-ctx", ".ctx")):
        ctx = SerializationContext(name, MessageField.VALUE)
        framed = serializer(ORDER[context], ctx)
        assert framed is not None
        assert deserializer(framed, ctx) == ORDER[context]


def test_nested_references_resolve_in_the_context_of_the_version_holding_them(
        kgov_url: str, clients: dict[str, RegistryClient]) -> None:
    """`:.ctx:holder` references `customer` (so `:.ctx:customer`), whose own reference `address` is then
    `:.ctx:address`, not the default context's, even for a consumer bound to no context."""
    tag = uuid.uuid4().hex[:8]
    address = {".": {"type": "record", "name": "Address", "namespace": "com.acme",
                     "fields": [{"name": "street", "type": "string"}]},
               ".ctx": {"type": "record", "name": "Address", "namespace": "com.acme",
                        "fields": [{"name": "zip", "type": "int"}]}}
    customer = {"type": "record", "name": "Customer", "namespace": "com.acme",
                "fields": [{"name": "home", "type": "com.acme.Address"}]}
    for context, prefix in ((".", ""), (".ctx", ":.ctx:")):
        register(kgov_url, f"{prefix}address-{tag}", address[context], "AVRO")
        response = httpx.post(f"{kgov_url}/subjects/{prefix}nested-customer-{tag}/versions", auth=AUTH, timeout=10,
                              json={"schema": json.dumps(customer),
                                    "references": [{"name": "com.acme.Address", "subject": f"address-{tag}",
                                                    "version": 1}]})
        assert response.status_code == 200, response.text
    ctx = SerializationContext(f"holder-{tag}", MessageField.VALUE)
    serializer = AvroSerializer(clients[".ctx"], ORDER_AVRO,
                                references=[Reference("com.acme.Customer", f"nested-customer-{tag}", 1)])
    value = {"customer": {"home": {"zip": 12345}}}
    framed = serializer(value, ctx)
    assert framed is not None
    assert AvroDeserializer(clients["."])(framed, ctx) == value
    assert AvroDeserializer(clients[".ctx"])(framed, ctx) == value


def add_as_older_kgov_did(engine: Engine, subject: str, schema_id: int) -> None:
    """Version 1 of `subject` using `schema_id`: an older kgov shared one id between subjects of several
    contexts when the text and the references as written were the same."""
    with transaction(engine) as conn:
        bump_version(conn, store.COMPONENT)
        store.insert_version(conn, subject, 1, schema_id)
        store.set_high_water(conn, subject, 1)


def test_an_id_shared_across_contexts_reads_as_the_clients_context_or_not_at_all(
        served: tuple[str, Engine], kgov_url: str) -> None:
    """An older kgov gave `:.a:orders` and `:.b:orders` one id. Each reads its reference `customer` in its
    own context (the server does too), so a client bound to `.a` decodes with `:.a:customer`, one bound to
    `.b` with `:.b:customer`, and a client bound to neither is told so instead of picking one."""
    tag = uuid.uuid4().hex[:8]
    register(kgov_url, f":.a:customer-{tag}", CUSTOMER_AVRO["."], "AVRO")
    register(kgov_url, f":.b:customer-{tag}", CUSTOMER_AVRO[".ctx"], "AVRO")
    shared = register(kgov_url, f":.a:orders-{tag}", json.loads(ORDER_AVRO), "AVRO",
                      [("com.acme.Customer", f"customer-{tag}")])
    add_as_older_kgov_did(served[1], f":.b:orders-{tag}", shared)
    ctx = SerializationContext(f"orders-{tag}", MessageField.VALUE)
    with RegistryClient(f"{kgov_url}/contexts/.a", basic_auth=AUTH) as in_a, \
            RegistryClient(f"{kgov_url}/contexts/.b", basic_auth=AUTH) as in_b, \
            RegistryClient(kgov_url, basic_auth=AUTH) as root:
        assert AvroDeserializer(in_a)(frame(shared, b"\x06Ada"), ctx) == ORDER["."]
        assert AvroDeserializer(in_b)(frame(shared, b"\x0e"), ctx) == ORDER[".ctx"]
        with pytest.raises(SerializationError, match=f"several contexts .*:.a:orders-{tag}, :.b:orders-{tag}"):
            AvroDeserializer(root)(frame(shared, b"\x06Ada"), ctx)


def test_references_that_loop_are_refused_not_followed(served: tuple[str, Engine], kgov_url: str,
                                                       clients: dict[str, RegistryClient]) -> None:
    """Read in `.ctx`, versions an older kgov stored there loop: `:.ctx:a` -> `b` = `:.ctx:b` -> `a` =
    `:.ctx:a`. Each was registered in the default context, where `a` -> `b` -> nothing."""
    tag = uuid.uuid4().hex[:8]
    leaf = {"type": "record", "name": "Leaf", "namespace": "com.acme", "fields": []}
    register(kgov_url, f"b-{tag}", leaf, "AVRO")
    a = register(kgov_url, f"a-{tag}", {"type": "record", "name": "A", "namespace": "com.acme",
                                        "fields": [{"name": "b", "type": "com.acme.Leaf"}]}, "AVRO",
                 [("com.acme.Leaf", f"b-{tag}")])
    b = register(kgov_url, f"bb-{tag}", {"type": "record", "name": "B", "namespace": "com.acme",
                                         "fields": [{"name": "a", "type": "com.acme.A"}]}, "AVRO",
                 [("com.acme.A", f"a-{tag}")])
    add_as_older_kgov_did(served[1], f":.ctx:a-{tag}", a)
    add_as_older_kgov_did(served[1], f":.ctx:b-{tag}", b)
    ctx = SerializationContext(f"loop-{tag}", MessageField.VALUE)
    with pytest.raises(SerializationError, match=f"cycle through subject ':.ctx:[ab]-{tag}' version 1"):
        AvroDeserializer(clients[".ctx"])(frame(a, b""), ctx)
    assert AvroDeserializer(clients["."])(frame(a, b""), ctx) == {"b": {}}  # in the default context nothing loops
