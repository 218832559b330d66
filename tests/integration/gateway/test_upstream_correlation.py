"""Answers to acks=0 produce requests and reused correlation ids (`gateway.upstream_ids`).

Kafka brokers never answer a produce request with acks=0; Tansu does. The upstream here is a small
scripted Kafka server on a real socket, so that both behaviours can be had on demand, and a slow one:
`ScriptedUpstream.mode` is "kafka" (acks=0 produce requests are not answered) or "late" (as Tansu, but
their answers are held back until the next other request arrives, as a busy Tansu behind a fast
producer would). It records the correlation ids it received. The real-Tansu cases are at the end.
"""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from gateway.codec import API_VERSIONS_KEY, SPECS, decode_response, encode_response, parse_request_header
from gateway.proxy import GatewayOptions, Services
from tests.integration.gateway import test_upstream_reauth_order as reauth_order
from tests.integration.gateway.conftest import AuthzFixture, RawClient, RunningGateway
from tests.integration.gateway.test_proxy import _one_record_batch, create_topics
from tests.support.sockets import recv_exactly, recv_frame

PRODUCE, METADATA = 0, 3
TOPIC = "metrics"


class ScriptedUpstream(reauth_order.ScriptedUpstream):
    """Its listener, threads and close are the re-authentication tests' scripted upstream's; what it
    answers is its own."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.received: list[tuple[int, int]] = []  # (api key, correlation id) of the clients' connections
        self.metadata_answers = 1  # 2: a misbehaving upstream that answers Metadata twice
        super().__init__(threading.Event())

    def _serve(self, conn: socket.socket) -> None:
        held: list[bytes] = []  # answers to acks=0 produce requests, in "late" mode
        try:
            while True:
                frame = recv_frame(conn)
                h = parse_request_header(frame)
                spec = SPECS[h.api_key]
                if h.api_key == API_VERSIONS_KEY:
                    keys = [spec.response.ApiVersion(api_key=k, min_version=0, max_version=v)
                            for k, v in ((PRODUCE, 9), (METADATA, 12))]
                    conn.sendall(encode_response(spec, h.api_version,  h.correlation_id,
                                                 spec.response(error_code=0, api_keys=keys, throttle_time_ms=0)))
                    continue
                self.received.append((h.api_key, h.correlation_id))
                if h.api_key == PRODUCE:
                    if self.mode == "late":
                        part = spec.response.TopicProduceResponse.PartitionProduceResponse
                        held.append(encode_response(spec, h.api_version, h.correlation_id, spec.response(
                            throttle_time_ms=0, responses=[spec.response.TopicProduceResponse(
                                name=TOPIC, partition_responses=[part(index=0, error_code=0, base_offset=0,
                                                                      log_append_time_ms=-1, log_start_offset=0)])])))
                    continue
                assert h.api_key == METADATA
                topic = spec.response.MetadataResponseTopic(error_code=0, name=TOPIC, topic_id=uuid.UUID(int=7),
                                                            is_internal=False, partitions=[])
                answer = encode_response(spec, h.api_version, h.correlation_id, spec.response(
                    throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1, topics=[topic]))
                conn.sendall(b"".join([*held, *[answer] * self.metadata_answers]))  # in the order of the requests
                held = []
        except (ConnectionError, OSError):
            pass
        finally:
            conn.close()


@pytest.fixture
def scripted() -> Iterator[Callable[[str], ScriptedUpstream]]:
    made: list[ScriptedUpstream] = []

    def make(mode: str) -> ScriptedUpstream:
        made.append(ScriptedUpstream(mode))
        return made[-1]

    yield make
    for server in made:
        server.close()


def _gateway(upstream: ScriptedUpstream, authz: AuthzFixture) -> RunningGateway:
    options = GatewayOptions("127.0.0.1", 0, ("127.0.0.1", upstream.port), address_mode="single")
    return RunningGateway(options, Services(authz.service))


def acks_0_frame(correlation: int, value: bytes = b"m", topic: str = TOPIC) -> bytes:
    cls = SPECS[PRODUCE].request[9]
    data = cls.TopicProduceData
    request = cls(transactional_id=None, acks=0, timeout_ms=5000, topic_data=[
        data(name=topic, partition_data=[data.PartitionProduceData(index=0, records=_one_record_batch(value))])])
    request.with_header(correlation_id=correlation, client_id="acks0")
    return bytes(request.encode(version=9, header=True, framed=True))


def metadata_frame(correlation: int, *topics: str) -> bytes:
    cls = SPECS[METADATA].request[12]
    request = cls(topics=[cls.MetadataRequestTopic(name=t) for t in topics], allow_auto_topic_creation=False)
    request.with_header(correlation_id=correlation, client_id="acks0")
    return bytes(request.encode(version=12, header=True, framed=True))


def receive_metadata(raw: RawClient) -> tuple[int, Any]:
    """The next answer on `raw`: its correlation id and the decoded Metadata v12 answer."""
    frame = recv_exactly(raw.sock, int.from_bytes(recv_exactly(raw.sock, 4, "closed by the gateway"), "big"),
                         "closed by the gateway")
    return int.from_bytes(frame[:4], "big", signed=True), decode_response(SPECS[METADATA], 12, frame)


def test_more_acks_0_produce_requests_outstanding_than_any_bound_keep_the_connection(
    scripted: Callable[[str], ScriptedUpstream], authz_factory: Callable[..., AuthzFixture],
) -> None:
    """A fast acks=0 producer in front of a slower upstream that answers them (Tansu): 5,000 produce
    requests are outstanding when their answers come, all ahead of the Metadata answer. They are all
    dropped; the Metadata answer reaches the client with its own correlation id, and the connection
    stays open. (It used to remember the last 1,024 only: the older answers looked unsolicited and the
    client lost its connection.)"""
    upstream = scripted("late")
    with _gateway(upstream, authz_factory(allow_everyone_if_no_acl_found=True)) as gw:
        raw = RawClient(gw.bootstrap)
        raw.sock.settimeout(10)
        raw.sock.sendall(b"".join(acks_0_frame(i) for i in range(5000)) + metadata_frame(5000, TOPIC))
        correlation, answer = receive_metadata(raw)
        assert correlation == 5000 and [t.name for t in answer.topics] == [TOPIC]
        raw.sock.sendall(metadata_frame(5001, TOPIC))  # the connection still works
        assert receive_metadata(raw)[0] == 5001
        raw.close()
    assert [k for k, _ in upstream.received] == [PRODUCE] * 5000 + [METADATA] * 2


@pytest.mark.parametrize("mode", ["kafka", "late"])
def test_a_correlation_id_reused_across_an_acks_0_produce_and_another_request_is_harmless(
    scripted: Callable[[str], ScriptedUpstream], authz_factory: Callable[..., AuthzFixture], mode: str,
) -> None:
    """Kafka's broker does not look at correlation ids (it answers in order), so a client may reuse one.
    An acks=0 produce and a Metadata request with the same id, in both orders: the Metadata answers come
    back, in order, with the client's ids, whether the upstream answers acks=0 (Tansu) or not (Kafka).
    (Against a Kafka broker the Metadata answer used to be taken for the produce's, dropped, and the
    client waited for ever.) The upstream sees the gateway's own, distinct ids."""
    upstream = scripted(mode)
    with _gateway(upstream, authz_factory(allow_everyone_if_no_acl_found=True)) as gw:
        raw = RawClient(gw.bootstrap)
        raw.sock.settimeout(5)
        raw.sock.sendall(acks_0_frame(7) + metadata_frame(7, TOPIC) + metadata_frame(8, TOPIC) + acks_0_frame(8)
                         + metadata_frame(8, TOPIC))
        assert [receive_metadata(raw)[0] for _ in range(3)] == [7, 8, 8]
        raw.close()
    ids = [c for _, c in upstream.received]
    assert [k for k, _ in upstream.received] == [PRODUCE, METADATA, METADATA, PRODUCE, METADATA]
    assert len(set(ids)) == 5


def test_an_upstream_answer_no_request_is_waiting_for_still_closes_the_connection(
    scripted: Callable[[str], ScriptedUpstream], authz_factory: Callable[..., AuthzFixture],
) -> None:
    """Dropping answers to acks=0 produce requests does not make the gateway take any answer: one
    carrying an id the gateway never sent (here: the client's own, answered twice) closes the client."""
    upstream = scripted("kafka")
    upstream.metadata_answers = 2
    with _gateway(upstream, authz_factory(allow_everyone_if_no_acl_found=True)) as gw:
        raw = RawClient(gw.bootstrap)
        raw.sock.settimeout(5)
        raw.sock.sendall(acks_0_frame(1) + metadata_frame(2, TOPIC))
        assert receive_metadata(raw)[0] == 2
        assert raw.closed_by_peer()
        raw.close()


# -- real clients against Tansu ------------------------------------------------------------------


def producer_login(team: Any, kafka_broker: str, what: str) -> tuple[str, RawClient]:
    """A new topic the team's application may produce to, and a raw connection logged in as it."""
    topic = team.name(what)
    create_topics(kafka_broker, topic)
    team.acls("--producer", "--topic", topic)
    raw = team.login()
    raw.sock.settimeout(20)
    return topic, raw


def end_offset(team: Any, topic: str) -> int:
    """Partition 0's end offset. Answers come in order: once the Metadata answer after a burst is back,
    Tansu has appended every record before it."""
    consumer = Consumer({**team.ops_conf(), "group.id": "unused"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert low == 0
        return int(high)
    finally:
        consumer.close()


def test_a_burst_of_acks_0_produce_requests_through_the_gateway_to_tansu(team: Any, kafka_broker: str) -> None:
    """A producer faster than Tansu: 5,000 acks=0 produce requests in one burst (a raw client: librdkafka
    paces itself), then a Metadata request. Tansu answers every produce request, after the gateway has
    forwarded many more than 1,024 of them (the gateway used to remember that many, then closed the
    connection on the first answer it had forgotten). The Metadata answer arrives with its own id, the
    connection stays usable, and every record is in the partition."""
    topic, raw = producer_login(team, kafka_broker, "burst")
    try:
        raw.sock.sendall(b"".join(acks_0_frame(i, b"b", topic) for i in range(1, 5001)) + metadata_frame(5001, topic))
        correlation, answer = receive_metadata(raw)
        assert correlation == 5001 and [t.error_code for t in answer.topics] == [0]
        raw.sock.sendall(metadata_frame(5002, topic))
        assert receive_metadata(raw)[0] == 5002
    finally:
        raw.close()
    assert end_offset(team, topic) == 5000


def test_reused_correlation_ids_through_the_gateway_to_tansu(team: Any, kafka_broker: str) -> None:
    """The reuse case against the real Tansu, which answers acks=0: every answer with an answer expected
    comes back in order with the client's id, and the records arrive."""
    topic, raw = producer_login(team, kafka_broker, "reuse")
    try:
        raw.sock.sendall(acks_0_frame(40, b"r1", topic) + metadata_frame(40, topic) + metadata_frame(41, topic)
                         + acks_0_frame(41, b"r2", topic) + metadata_frame(41, topic))
        answers = [receive_metadata(raw) for _ in range(3)]
        assert [c for c, _ in answers] == [40, 41, 41]
        assert all([t.error_code for t in a.topics] == [0] for _, a in answers)
    finally:
        raw.close()
    assert end_offset(team, topic) == 2
