"""Every consumer Fetch leaves the gateway sessionless (KIP-227), byte-identical otherwise."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from authz.model import Operation, ResourceType
from gateway.codec import (
    SPECS,
    CodecError,
    RequestHeader,
    decode_request,
    encode_request,
    encode_response,
    parse_request_header,
)
from gateway.fetch_session import (
    SESSIONS_SINCE,
    make_sessionless,
    session_fields_offset,
    sessionless_frame,
    sessionless_response,
)
from tests.unit.gateway.test_request_authz import Rules, plan

FETCH = SPECS[1]
SESSION_VERSIONS = range(SESSIONS_SINCE, FETCH.max_version + 1)
TOPIC_ID = uuid.UUID("6f2b0a3e-94c1-4f6e-9d0e-2d1b7c1f0a11")
OTHER_ID = uuid.UUID("0c8f6c2d-3a51-4b7e-8f6e-5a4d3c2b1a09")


def fetch(version: int, *, session_id: int = 1234567, epoch: int = 5, topics: tuple[str, ...] = ("a",),
          forgotten: tuple[str, ...] = (), replica_id: int = -1) -> Any:
    cls = FETCH.request[version]
    t = cls.FetchTopic
    by_id = version >= 13

    def topic(name: str) -> dict[str, Any]:
        return {"topic_id": TOPIC_ID if name == "a" else OTHER_ID} if by_id else {"topic": name}

    values: dict[str, Any] = {}
    if version >= 15:
        values["replica_state"] = cls.ReplicaState(replica_id=replica_id, replica_epoch=-1)
    else:
        values["replica_id"] = replica_id
    if version >= 11:
        values["rack_id"] = "rack-1"
    if version >= 12:
        values["cluster_id"] = "cluster-x"
    f = cls.ForgottenTopic
    return cls(max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=1, session_id=session_id,
               session_epoch=epoch, forgotten_topics_data=[f(**topic(n), partitions=[1, 2]) for n in forgotten],
               topics=[t(**topic(n), partitions=[t.FetchPartition(partition=0, fetch_offset=42, partition_max_bytes=99)])
                       for n in topics], **values)


def frame_of(version: int, request: Any) -> tuple[Any, bytes]:
    """The request as a client writes it (without the size prefix) and its parsed header."""
    framed = encode_request(FETCH, RequestHeader(1, version, 7, "cli", 0), request)
    body = framed[4:]
    return parse_request_header(body), body


@pytest.mark.parametrize("version", SESSION_VERSIONS)
def test_the_session_fields_are_patched_and_every_other_byte_is_the_clients(version: int) -> None:
    header, original = frame_of(version, fetch(version, session_id=1234567, epoch=5))
    patched = sessionless_frame(original, header)
    _, expected = frame_of(version, fetch(version, session_id=0, epoch=-1))
    assert bytes(patched) == expected
    pos = header.body_offset + session_fields_offset(version)
    differing = [i for i, (x, y) in enumerate(zip(original, patched, strict=True)) if x != y]
    assert differing and min(differing) >= pos and max(differing) < pos + 8
    decoded = decode_request(FETCH, header, patched)
    assert (decoded.session_id, decoded.session_epoch, decoded.rack_id if version >= 11 else None) == (
        0, -1, "rack-1" if version >= 11 else None)


@pytest.mark.parametrize("version", SESSION_VERSIONS)
def test_an_initial_fetch_asking_for_a_session_is_made_sessionless(version: int) -> None:
    # What Java and kafka-python send first: session 0, epoch 0 (INITIAL), which creates a session.
    header, original = frame_of(version, fetch(version, session_id=0, epoch=0))
    decoded = decode_request(FETCH, header, sessionless_frame(original, header))
    assert (decoded.session_id, decoded.session_epoch) == (0, -1)


def test_a_frame_already_sessionless_is_forwarded_without_a_copy() -> None:
    header, original = frame_of(12, fetch(12, session_id=0, epoch=-1))
    assert sessionless_frame(original, header) is original


def test_a_truncated_frame_is_a_codec_error() -> None:
    header, original = frame_of(15, fetch(15))
    cut = original[: header.body_offset + session_fields_offset(15) + 7]
    with pytest.raises(CodecError):
        sessionless_frame(cut, header)


def test_versions_without_sessions_have_no_offset_and_are_left_alone() -> None:
    with pytest.raises(ValueError):
        session_fields_offset(6)
    request = FETCH.request[6](replica_id=-1, max_wait_ms=1, min_bytes=1, topics=[])
    assert make_sessionless(6, request) is False


@pytest.mark.parametrize("version", SESSION_VERSIONS)
def test_an_allowed_incremental_fetch_is_forwarded_as_a_full_sessionless_fetch(version: int) -> None:
    rules = Rules((ResourceType.TOPIC, "a", Operation.READ))
    p = plan_fetch(rules, version, fetch(version, session_id=99, epoch=7))
    assert p.forward is not None and p.sessionless and not p.rewritten
    assert (p.forward.session_id, p.forward.session_epoch) == (0, -1)


@pytest.mark.parametrize("version", SESSION_VERSIONS)
def test_forgotten_topics_are_dropped_and_the_request_re_encoded(version: int) -> None:
    rules = Rules((ResourceType.TOPIC, "a", Operation.READ))
    p = plan_fetch(rules, version, fetch(version, session_id=99, epoch=7, forgotten=("b",)))
    assert p.rewritten and p.sessionless
    header, body = frame_of(version, p.forward)
    decoded = decode_request(FETCH, header, body)
    assert (decoded.session_id, decoded.session_epoch, decoded.forgotten_topics_data) == (0, -1, [])
    # Forgotten topics are not read: nothing was asked about b.
    assert [a.resource_name for a in rules.asked] == ["a"]


@pytest.mark.parametrize("version", SESSION_VERSIONS)
def test_a_trimmed_fetch_is_re_encoded_sessionless(version: int) -> None:
    rules = Rules((ResourceType.TOPIC, "a", Operation.READ))
    p = plan_fetch(rules, version, fetch(version, session_id=99, epoch=7, topics=("a", "b")))
    assert p.rewritten and p.sessionless and len(p.forward.topics) == 1
    header, body = frame_of(version, p.forward)
    decoded = decode_request(FETCH, header, body)
    assert (decoded.session_id, decoded.session_epoch) == (0, -1)


@pytest.mark.parametrize("version", SESSION_VERSIONS)
def test_an_incremental_fetch_naming_nothing_forwards_nothing_but_a_sessionless_empty_fetch(version: int) -> None:
    p = plan_fetch(Rules(), version, fetch(version, session_id=99, epoch=7, topics=()))
    assert p.sessionless and p.forward.topics == [] and (p.forward.session_id, p.forward.session_epoch) == (0, -1)


def test_a_fetch_denied_entirely_is_answered_with_session_id_0() -> None:
    p = plan_fetch(Rules(), 12, fetch(12, session_id=99, epoch=7))
    assert p.forward is None and p.local.session_id == 0


@pytest.mark.parametrize("version", [12, 15])
def test_follower_fetches_keep_their_session(version: int) -> None:
    rules = Rules((ResourceType.CLUSTER, "kafka-cluster", Operation.CLUSTER_ACTION))
    p = plan_fetch(rules, version, fetch(version, session_id=99, epoch=7, replica_id=2))
    assert p.forward is not None and not p.sessionless and not p.rewritten
    assert (p.forward.session_id, p.forward.session_epoch) == (99, 7)


def test_fetches_before_v7_have_no_session_to_remove() -> None:
    cls = FETCH.request[6]
    t = cls.FetchTopic
    request = cls(replica_id=-1, max_wait_ms=1, min_bytes=1, topics=[
        t(topic="a", partitions=[t.FetchPartition(partition=0, fetch_offset=0)])])
    p = plan_fetch(Rules((ResourceType.TOPIC, "a", Operation.READ)), 6, request)
    assert p.forward is request and not p.sessionless and not p.rewritten


def plan_fetch(rules: Rules, version: int, request: Any) -> Any:
    if version >= 13:
        az = rules.authorizer()
        names = {TOPIC_ID: "a", OTHER_ID: "b"}
        az.topic_name = names.get
        from gateway.request_authz import plan_request

        return plan_request(az, 1, version, request, FETCH.response)
    return plan(rules, 1, version, request)


@pytest.mark.parametrize("version", SESSION_VERSIONS)
def test_an_upstream_answer_carrying_a_session_id_is_answered_with_0(version: int) -> None:
    cls = FETCH.response[version]
    t = cls.FetchableTopicResponse
    topic = {"topic_id": TOPIC_ID} if version >= 13 else {"topic": "a"}
    response = cls(throttle_time_ms=3, error_code=0, session_id=424242, responses=[
        t(**topic, partitions=[t.PartitionData(partition_index=0, high_watermark=9, records=b"")])])
    framed = encode_response(FETCH, version, 11, response)[4:]
    patched = sessionless_response(FETCH, version, framed)
    response.session_id = 0
    assert bytes(patched) == encode_response(FETCH, version, 11, response)[4:]
    assert sessionless_response(FETCH, version, patched) is patched
