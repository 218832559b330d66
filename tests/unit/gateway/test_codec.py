"""Header parsing against kafka-python's encoder, version caps, and fuzzing of the parsers."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.codec import (
    SPECS,
    CodecError,
    api_name,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    parse_request_header,
    produce_acks,
    read_uvarint,
    request_with_correlation_id,
    response_with_correlation_id,
    write_uvarint,
)


def _produce(version: int, acks: int, txn: str | None = None) -> bytes:
    cls = SPECS[0].request[version]
    topic = cls.TopicProduceData
    req = cls(transactional_id=txn, acks=acks, timeout_ms=1000,
              topic_data=[topic(name="t", partition_data=[topic.PartitionProduceData(index=0, records=b"r")])])
    req.with_header(correlation_id=42, client_id="cid")
    return bytes(req.encode(header=True))


@pytest.mark.parametrize("version", [3, 7, 9, 12])
def test_header_of_classic_and_flexible_requests(version: int) -> None:
    frame = _produce(version, acks=-1, txn="tx")
    h = parse_request_header(frame)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (0, version, 42, "cid")
    msg = decode_request(SPECS[0], h, frame)
    assert msg.transactional_id == "tx" and msg.topic_data[0].name == "t"
    assert produce_acks(frame, h) == -1


@pytest.mark.parametrize(("version", "acks"), [(0, 0), (3, 1), (9, 0), (12, -1)])
def test_produce_acks_without_decoding_records(version: int, acks: int) -> None:
    frame = _produce(version, acks)
    assert produce_acks(frame, parse_request_header(frame)) == acks


def test_request_reencoding_keeps_the_header_and_body() -> None:
    metadata = SPECS[3].request[12]
    req = metadata(topics=[metadata.MetadataRequestTopic(name="a")],
                              allow_auto_topic_creation=False)
    req.with_header(correlation_id=7, client_id=None)
    frame = bytes(req.encode(header=True))
    h = parse_request_header(frame)
    assert h.client_id is None
    msg = decode_request(SPECS[3], h, frame)
    out = encode_request(SPECS[3], h, msg)
    assert out[4:] == frame


def test_response_roundtrip_with_flexible_header() -> None:
    spec = SPECS[3]
    resp = spec.response(brokers=[], topics=[], cluster_id="c", controller_id=1)
    frame = encode_response(spec, 12, 9, resp)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert int.from_bytes(frame[4:8], "big") == 9
    assert decode_response(spec, 12, frame[4:]).cluster_id == "c"


def test_api_versions_response_header_is_never_flexible() -> None:
    spec = SPECS[18]
    frame = encode_response(spec, 3, 5, spec.response(error_code=0, api_keys=[]))
    assert decode_response(spec, 3, frame[4:]).error_code == 0
    assert frame[8:10] == b"\x00\x00"  # error code right after the correlation id: no tag buffer


def test_versions_the_gateway_cannot_authorize_or_rewrite_are_capped() -> None:
    assert SPECS[0].max_version == 13 and SPECS[0].min_version == 0  # Produce v13 names topics by id
    assert SPECS[1].max_version == 15  # Fetch v16+ answers KIP-951 node endpoints the gateway would have to rewrite
    assert api_name(0) == "PRODUCE" and api_name(36) == "SASL_AUTHENTICATE" and api_name(999) == "UNKNOWN_999"


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**28 - 1])
def test_uvarint_roundtrip(value: int) -> None:
    assert read_uvarint(write_uvarint(value), 0) == (value, len(write_uvarint(value)))


def test_truncated_and_overlong_varints() -> None:
    with pytest.raises(CodecError):
        read_uvarint(b"\x80", 0)
    with pytest.raises(CodecError):
        read_uvarint(b"\xff\xff\xff\xff\xff\x01", 0)


def test_short_and_malformed_headers() -> None:
    with pytest.raises(CodecError):
        parse_request_header(b"\x00\x03\x00")
    with pytest.raises(CodecError):
        parse_request_header(b"\x00\x03\x00\x01\x00\x00\x00\x01\x00\x09ab")  # client id longer than frame
    with pytest.raises(CodecError):
        parse_request_header(b"\x00\x03\x00\x01\x00\x00\x00\x01\xff\xf0")  # negative length other than -1


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_fuzzed_requests_raise_only_codec_errors(data: bytes) -> None:
    try:
        h = parse_request_header(data)
    except CodecError:
        return
    spec = SPECS.get(h.api_key)
    if spec is None or not spec.supports(h.api_version):
        return
    with contextlib.suppress(CodecError):
        decode_request(spec, h, data)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([0, 3, 9, 10, 12]), st.integers(min_value=0, max_value=12), st.binary(max_size=120))
def test_fuzzed_bodies_after_a_valid_header(key: int, version: int, body: bytes) -> None:
    spec = SPECS[key]
    if not spec.supports(version):
        return
    head = key.to_bytes(2, "big") + version.to_bytes(2, "big") + b"\x00\x00\x00\x01\xff\xff"
    if spec.request_flexible(version):
        head += b"\x00"
    frame = head + body
    h = parse_request_header(frame)
    with contextlib.suppress(CodecError):
        decode_request(spec, h, frame)


@pytest.mark.parametrize("body_size", [10, 4096, 70_000])
def test_a_frame_with_another_correlation_id_differs_in_that_id_only(body_size: int) -> None:
    """The gateway's own ids upstream (`gateway.upstream_ids`): a request goes out, and its answer comes
    back, with only the correlation id changed; small frames copied, large ones viewed."""
    req = SPECS[3].request[12](topics=[SPECS[3].request[12].MetadataRequestTopic(name="t" * body_size)],
                               allow_auto_topic_creation=False)
    req.with_header(correlation_id=-7, client_id="app")
    framed = bytes(req.encode(version=12, header=True, framed=True))
    frame = framed[4:]
    out = b"".join(request_with_correlation_id(frame, parse_request_header(frame), 2**31 - 1))
    assert out == framed[:8] + (2**31 - 1).to_bytes(4, "big") + framed[12:]
    assert parse_request_header(out[4:]).client_id == "app"
    answer = (12345).to_bytes(4, "big") + bytes(range(256)) * (body_size // 256 + 1)
    back = b"".join(response_with_correlation_id(answer, -7))
    assert back == len(answer).to_bytes(4, "big") + (-7).to_bytes(4, "big", signed=True) + answer[4:]
