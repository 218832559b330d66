"""Wire format, subject-name strategies and the client's contexts of registry.serdes and registry.client.

Reference resolution against a real registry is in tests/e2e/registry/test_serdes_contexts.py."""

from __future__ import annotations

import json
from typing import Any

import fastavro
import pytest
from confluent_kafka.serialization import MessageField, SerializationContext
from hypothesis import given
from hypothesis import strategies as st

from registry.client import FetchedSchema, RegistryClient, _bound_context
from registry.model import Reference
from registry.serdes import (
    AvroSerializer,
    SerializationError,
    frame,
    id_referrer,
    record_subject_name_strategy,
    topic_record_subject_name_strategy,
    topic_subject_name_strategy,
    unframe,
)


def test_frame_layout_is_magic_zero_then_big_endian_id() -> None:
    assert frame(1, b"payload") == b"\x00\x00\x00\x00\x01payload"
    assert frame(0x01020304, b"") == b"\x00\x01\x02\x03\x04"
    assert unframe(b"\x00\x00\x00\x01\x00rest") == (256, b"rest")


@given(st.integers(min_value=0, max_value=2**31 - 1), st.binary(max_size=64))
def test_frame_round_trips(schema_id: int, payload: bytes) -> None:
    assert unframe(frame(schema_id, payload)) == (schema_id, payload)


@given(st.binary(max_size=16))
def test_unframe_refuses_anything_else_with_one_error(data: bytes) -> None:
    try:
        schema_id, payload = unframe(data)
    except SerializationError:
        assert len(data) < 5 or data[0] != 0 or data[1] >= 0x80  # short, foreign, or a negative id
    else:
        assert data[0] == 0 and frame(schema_id, payload) == data


@pytest.mark.parametrize("bad", [b"", b"\x00\x00\x00\x01", b"\x01\x00\x00\x00\x01x", b"\x00\xff\xff\xff\xff"])
def test_unframe_messages(bad: bytes) -> None:
    with pytest.raises(SerializationError, match=r"too small|magic byte|Invalid schema id"):
        unframe(bad)


def test_frame_refuses_ids_outside_the_format() -> None:
    with pytest.raises(SerializationError):
        frame(-1, b"")
    with pytest.raises(SerializationError):
        frame(2**31, b"")


def test_subject_name_strategies_match_confluent() -> None:
    value = SerializationContext("orders", MessageField.VALUE)
    key = SerializationContext("orders", MessageField.KEY)
    assert topic_subject_name_strategy(value, "com.acme.Order") == "orders-value"
    assert topic_subject_name_strategy(key, None) == "orders-key"
    assert record_subject_name_strategy(value, "com.acme.Order") == "com.acme.Order"
    assert topic_record_subject_name_strategy(key, "com.acme.Order") == "orders-com.acme.Order"
    with pytest.raises(SerializationError):
        record_subject_name_strategy(value, None)
    # the same answers as confluent-kafka's own strategies
    from confluent_kafka.schema_registry import (
        record_subject_name_strategy as c_record,
    )
    from confluent_kafka.schema_registry import (
        topic_record_subject_name_strategy as c_topic_record,
    )
    from confluent_kafka.schema_registry import (
        topic_subject_name_strategy as c_topic,
    )

    for ctx in (value, key):
        assert topic_subject_name_strategy(ctx, "a.B") == c_topic(ctx, "a.B")
        assert record_subject_name_strategy(ctx, "a.B") == c_record(ctx, "a.B")
        assert topic_record_subject_name_strategy(ctx, "a.B") == c_topic_record(ctx, "a.B")


# Nothing listens here: a test that reached the network would fail, not pass.
NOWHERE = "http://127.0.0.1:9"


@pytest.mark.parametrize(("url", "context", "root"), [
    ("http://h:8081", ".", "http://h:8081"),
    ("http://h:8081/contexts/.ctx", ".ctx", "http://h:8081"),
    ("http://h:8081/contexts/ctx", ".ctx", "http://h:8081"),  # the leading dot is optional, as in Confluent
    ("https://h/registry/contexts/.staging", ".staging", "https://h/registry"),
    ("http://h/contexts/.", ".", "http://h"),
    ("http://h/contexts/.a/b", ".", "http://h/contexts/.a/b"),  # not a context base URL
])
def test_a_context_base_url_binds_the_client_to_its_context(url: str, context: str, root: str) -> None:
    assert _bound_context(url) == (context, root)


def test_the_client_names_subjects_as_the_registry_reads_them_through_its_url() -> None:
    with RegistryClient(NOWHERE) as root, RegistryClient(NOWHERE + "/contexts/.ctx/") as bound:
        assert (root.context, bound.context) == (".", ".ctx")
        assert [root.qualified(s) for s in ("x", ":.ctx:x", "")] == ["x", ":.ctx:x", ""]
        assert [bound.qualified(s) for s in ("x", ":.other:x", ":.:x", "")] == [
            ":.ctx:x", ":.other:x", ":.:x", ":.ctx:"]


def test_an_ids_references_resolve_where_the_registry_says_without_asking_again() -> None:
    refs = (Reference("com.acme.Customer", "customer", 1),)
    with RegistryClient(NOWHERE + "/contexts/.ctx") as bound:
        # Confluent's newer servers name the subject an id was found under: it is the referrer
        assert id_referrer(bound, 5, FetchedSchema("{}", references=refs, subject=":.other:orders")) == ":.other:orders"
        # nothing to resolve: the client's own context, and no request made
        assert id_referrer(bound, 5, FetchedSchema("{}")) == ":.ctx:"


@pytest.mark.parametrize("schema", [
    {"type": "record", "name": "Order", "namespace": "com.acme", "fields": []},
    {"type": "record", "name": "Order", "fields": []},
    {"type": "record", "name": "x.y.Order", "namespace": "com.acme", "fields": []},
    {"type": "enum", "name": "Colour", "namespace": "a", "symbols": ["RED"]},
    {"type": "fixed", "name": "Hash", "size": 16},
    {"type": "array", "items": "string"},
    {"type": "string"},
    ["null", "string"],
])
def test_the_record_name_given_to_subject_strategies_is_fastavros(schema: Any) -> None:
    parsed = fastavro.parse_schema(schema)
    expected = parsed.get("name") if isinstance(parsed, dict) else None
    with RegistryClient(NOWHERE) as client:
        assert AvroSerializer(client, json.dumps(schema))._record_name == expected
