"""Wire format and subject-name strategies of registry.serdes."""

from __future__ import annotations

import pytest
from confluent_kafka.serialization import MessageField, SerializationContext
from hypothesis import given
from hypothesis import strategies as st

from registry.serdes import (
    SerializationError,
    frame,
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
