"""How many requests the serdes make of a real registry: the registry app over uvicorn, each request
it receives counted, read through `registry.client.RegistryClient` (no mock client).

Deserializers sharing a client ask about an id once: its schema, the subject whose context its
references resolve in (`GET /schemas/ids/{id}/versions`) and the versions those references name are
kept by the client, as Confluent's `CachedSchemaRegistryClient` keeps them."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request, Response

from registry.client import RegistryClient
from registry.model import Reference
from registry.serdes import AvroDeserializer, AvroSerializer, JSONDeserializer, JSONSerializer
from tests.integration.registry.conftest import USERS
from tests.support.server import serve_app

AUTH = ("admin", USERS["admin"])
CUSTOMER_JSON = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
ORDER_JSON = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
              "properties": {"customer": {"$ref": "customer.json"}}, "required": ["customer"]}
CUSTOMER_AVRO = {"type": "record", "name": "Customer", "namespace": "com.acme",
                 "fields": [{"name": "name", "type": "string"}]}
ORDER_AVRO = {"type": "record", "name": "Order", "namespace": "com.acme",
              "fields": [{"name": "customer", "type": "com.acme.Customer"}]}


class Ctx:
    topic = "orders"
    field = "value"


class Counted:
    """The registry's URL and the requests it has received, by method and path."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.received: Counter[tuple[str, str]] = Counter()

    def taken(self) -> Counter[tuple[str, str]]:
        """The requests received since the last call."""
        taken, self.received = self.received, Counter()
        return taken


@pytest.fixture
def registry(registry_app_factory: Callable[..., FastAPI]) -> Iterator[Counted]:
    app = registry_app_factory()
    counted: Counted | None = None

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        assert counted is not None
        counted.received[(request.method, request.url.path)] += 1
        return await call_next(request)

    with serve_app(app) as url:
        counted = Counted(url)
        yield counted


def register(url: str, subject: str, schema: Any, schema_type: str, references: list[Reference] = ()) -> int:
    answer = httpx.post(f"{url}/subjects/{subject}/versions", auth=AUTH, timeout=10, json={
        "schema": json.dumps(schema), "schemaType": schema_type, "references": [r.to_json() for r in references]})
    assert answer.status_code == 200, answer.text
    return int(answer.json()["id"])


@pytest.mark.parametrize("schema_type", ["JSON", "AVRO"])
def test_deserializers_sharing_a_client_ask_about_an_id_once(registry: Counted, schema_type: str) -> None:
    customer, order = (CUSTOMER_JSON, ORDER_JSON) if schema_type == "JSON" else (CUSTOMER_AVRO, ORDER_AVRO)
    name = "customer.json" if schema_type == "JSON" else "com.acme.Customer"
    references = [Reference(name, "customer", 1)]
    register(registry.url, "customer", customer, schema_type)
    schema_id = register(registry.url, "orders-value", order, schema_type, references)
    serdes: dict[str, tuple[Any, Any]] = {"JSON": (JSONSerializer, JSONDeserializer),
                                         "AVRO": (AvroSerializer, AvroDeserializer)}
    serializer, deserializer = serdes[schema_type]
    with RegistryClient(registry.url, basic_auth=AUTH) as producing:
        data = serializer(producing, json.dumps(order), references=references, auto_register_schemas=False)(
            {"customer": {"name": "Ada"}}, Ctx())
        assert registry.taken()[("GET", "/subjects/customer/versions/1")] == 1
        # Another serializer on the client looks its schema up (as before), the referenced version no more.
        assert serializer(producing, json.dumps(order), references=references, auto_register_schemas=False)(
            {"customer": {"name": "Ada"}}, Ctx()) == data
        assert registry.taken() == Counter({("POST", "/subjects/orders-value"): 1})

    with RegistryClient(registry.url, basic_auth=AUTH) as client:
        assert deserializer(client)(data, Ctx()) == {"customer": {"name": "Ada"}}
        assert registry.taken() == Counter({
            ("GET", f"/schemas/ids/{schema_id}"): 1,
            ("GET", f"/schemas/ids/{schema_id}/versions"): 1,  # where its references resolve
            ("GET", "/subjects/customer/versions/1"): 1})
        # A second deserializer on the same client (another consumer of the application, a restarted
        # poll loop) asks nothing: the old code asked for the usages and the referenced version again.
        for _ in range(3):
            assert deserializer(client)(data, Ctx()) == {"customer": {"name": "Ada"}}
        assert registry.taken() == Counter()
    # Another client asks again: the cache is the client's.
    with RegistryClient(registry.url, basic_auth=AUTH) as other:
        assert deserializer(other)(data, Ctx()) == {"customer": {"name": "Ada"}}
        assert sum(registry.taken().values()) == 3


def test_latest_is_asked_every_time(registry: Counted) -> None:
    register(registry.url, "customer", CUSTOMER_JSON, "JSON")
    registry.taken()
    with RegistryClient(registry.url, basic_auth=AUTH) as client:
        assert client.version("customer", 1).id == client.version("customer", 1).id
        assert client.version("customer", "latest").version == 1
        assert client.version("customer", -1).version == 1
        assert registry.taken() == Counter({("GET", "/subjects/customer/versions/1"): 1,
                                            ("GET", "/subjects/customer/versions/latest"): 1,
                                            ("GET", "/subjects/customer/versions/-1"): 1})
        register(registry.url, "customer", {**CUSTOMER_JSON, "title": "v2"}, "JSON")
        assert client.version("customer", "latest").version == 2
