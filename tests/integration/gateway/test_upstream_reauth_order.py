"""KIP-368 upstream re-authentication is never interleaved with forwarded requests.

The upstream is a small scripted Kafka server on a real socket: it answers ApiVersions, PLAIN
SaslHandshake/SaslAuthenticate (granting a short session) and Metadata, records what it received and
sent in order, and withholds one Metadata answer until the test releases it, so that the
re-authentication falls due while a request is in flight and another request arrives meanwhile.
It also answers an acks=0 produce, as Tansu does, once the gateway's next request has arrived behind it
(or never, as Kafka's brokers, with `answers_acks_0` False); its Metadata answers list one topic, `TOPIC`.
"""

from __future__ import annotations

import select
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gateway.codec import API_VERSIONS_KEY, SPECS, encode_response, parse_request_header
from gateway.proxy import ClientConnection, GatewayOptions, Services
from tests.integration.gateway.conftest import AuthzFixture, RawClient, RunningGateway, wait_until
from tests.integration.gateway.test_proxy import _one_record_batch
from tests.support.sockets import recv_frame, serve_each_connection

LIFETIME_MS = 400
PRODUCE, SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA = 0, 17, 36, 3
TOPIC, TOPIC_ID = "metrics", uuid.UUID("6c1f0d8e-2b8a-4f4e-9a51-0d3c2f1e7a10")


class ScriptedUpstream:
    """Serves every connection on its own thread; `events` is the SASL connection's transcript."""

    def __init__(self, hold_first_metadata: threading.Event) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.release = hold_first_metadata
        self.events: list[tuple[str, int, int]] = []  # (recv|sent, api key, correlation id)
        self.readable_while_held: bool | None = None
        self.auth_bytes: list[bytes] = []
        self.answered_produce_behind_another = False
        self.answers_acks_0 = True
        self._conns: list[socket.socket] = []
        serve_each_connection(self.listener, self._serve, self._conns)

    def _serve(self, conn: socket.socket) -> None:
        held = False
        try:
            while True:
                frame = recv_frame(conn)
                h = parse_request_header(frame)
                sasl = h.api_key != API_VERSIONS_KEY
                if sasl:
                    self.events.append(("recv", h.api_key, h.correlation_id))
                spec = SPECS[h.api_key]
                if h.api_key == API_VERSIONS_KEY:
                    keys = [spec.response.ApiVersion(api_key=k, min_version=0, max_version=v)
                            for k, v in ((PRODUCE, 9), (METADATA, 12), (SASL_HANDSHAKE, 1), (SASL_AUTHENTICATE, 2))]
                    body = spec.response(error_code=0, api_keys=keys, throttle_time_ms=0)
                elif h.api_key == SASL_HANDSHAKE:
                    body = spec.response(error_code=0, mechanisms=["PLAIN"])
                elif h.api_key == SASL_AUTHENTICATE:
                    self.auth_bytes.append(bytes(spec.request[h.api_version].decode(
                        memoryview(frame)[h.body_offset:], version=h.api_version).auth_bytes))
                    body = spec.response(error_code=0, error_message=None, auth_bytes=b"",
                                         session_lifetime_ms=LIFETIME_MS)
                elif h.api_key == PRODUCE and not self.answers_acks_0:
                    continue
                elif h.api_key == PRODUCE:
                    # Tansu answers acks=0 too; this answer goes once another request has arrived behind
                    # it (answers stay in request order).
                    self.answered_produce_behind_another = bool(select.select([conn], [], [], 10)[0])
                    part = spec.response.TopicProduceResponse.PartitionProduceResponse
                    body = spec.response(throttle_time_ms=0, responses=[spec.response.TopicProduceResponse(
                        name="metrics", partition_responses=[part(index=0, error_code=0, base_offset=0,
                                                                  log_append_time_ms=-1, log_start_offset=0)])])
                else:
                    assert h.api_key == METADATA
                    if not held:
                        held = True
                        assert self.release.wait(10)
                        # the gateway must have sent nothing while this request was in flight
                        self.readable_while_held = bool(select.select([conn], [], [], 0)[0])
                    topic = spec.response.MetadataResponseTopic(error_code=0, name=TOPIC, topic_id=TOPIC_ID,
                                                                is_internal=False, partitions=[])
                    body = spec.response(throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1,
                                         topics=[topic])
                conn.sendall(encode_response(spec, h.api_version, h.correlation_id, body))
                if sasl:
                    self.events.append(("sent", h.api_key, h.correlation_id))
        except (ConnectionError, OSError):
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.listener.close()
        for c in self._conns:
            c.close()


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    server = ScriptedUpstream(threading.Event())
    yield server
    server.release.set()
    server.close()


def test_reauthentication_waits_for_in_flight_requests_and_holds_new_ones(
    upstream: ScriptedUpstream, authz_factory: Callable[..., AuthzFixture],
) -> None:
    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    options = GatewayOptions("127.0.0.1", 0, ("127.0.0.1", upstream.port), address_mode="single",
                             upstream_sasl=("PLAIN", "svc", "svc-password"))
    with RunningGateway(options, Services(authz.service, rand=lambda: 0.0)) as gw:
        raw = RawClient(gw.bootstrap)
        metadata = SPECS[METADATA].request[12](topics=[], allow_auto_topic_creation=False)
        raw.send(METADATA, 12, metadata)
        wait_until(lambda: any(e[:2] == ("recv", METADATA) for e in upstream.events))

        def reauth_holding() -> bool:
            async def paused() -> bool:
                conns: list[ClientConnection] = list(gw.gateway._connections)
                return len(conns) == 1 and "upstream-reauth" in conns[0].paused

            result: Any = gw.call(paused())
            return bool(result)

        # due at 85% of the session (rand = 0): the gateway holds its client while the answer is pending
        wait_until(reauth_holding)
        raw.send(METADATA, 12, metadata)  # arrives during the re-authentication: held
        time.sleep(0.2)
        upstream.release.set()
        assert raw.receive(METADATA, 12) is not None
        assert raw.receive(METADATA, 12) is not None
        raw.close()
    assert upstream.readable_while_held is False
    sasl = [(d, k) for d, k, _ in upstream.events]
    assert sasl[:12] == [
        ("recv", SASL_HANDSHAKE), ("sent", SASL_HANDSHAKE), ("recv", SASL_AUTHENTICATE), ("sent", SASL_AUTHENTICATE),
        ("recv", METADATA), ("sent", METADATA),  # the in-flight request completes first ...
        ("recv", SASL_HANDSHAKE), ("sent", SASL_HANDSHAKE), ("recv", SASL_AUTHENTICATE), ("sent", SASL_AUTHENTICATE),
        ("recv", METADATA), ("sent", METADATA),  # ... and the held one goes after the exchange
    ], upstream.events
    # the gateway's own correlation ids upstream (`gateway.upstream_ids`): its first two requests
    assert [c for d, k, c in upstream.events if k == METADATA and d == "recv"][:2] == [0, 1]
    assert upstream.auth_bytes[:2] == [b"\x00svc\x00svc-password"] * 2
    assert gw.gateway.upstream_reauthentications >= 1


def test_an_answer_to_an_acks_0_produce_arriving_during_upstream_reauthentication_is_dropped(
    upstream: ScriptedUpstream, authz_factory: Callable[..., AuthzFixture],
) -> None:
    """The re-authentication waits for the awaited answers only, so an answer to an acks=0 produce
    (`ClientConnection.drops_acks_0_answer`) can still be on its way when the SASL exchange begins: it is
    dropped, not read as the SaslHandshake's answer."""
    upstream.release.set()  # no Metadata answer held
    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    options = GatewayOptions("127.0.0.1", 0, ("127.0.0.1", upstream.port), address_mode="single",
                             upstream_sasl=("PLAIN", "svc", "svc-password"))
    with RunningGateway(options, Services(authz.service, rand=lambda: 0.0)) as gw:
        raw = RawClient(gw.bootstrap)
        metadata = SPECS[METADATA].request[12](topics=[], allow_auto_topic_creation=False)
        raw.call(METADATA, 12, metadata)  # logged in upstream
        cls = SPECS[PRODUCE].request[9]
        topic = cls.TopicProduceData
        raw.send(PRODUCE, 9, cls(transactional_id=None, acks=0, timeout_ms=5000, topic_data=[
            topic(name="metrics", partition_data=[topic.PartitionProduceData(index=0,
                                                                             records=_one_record_batch(b"m"))])]))
        # the re-authentication (due at 85% of the session) has begun behind it
        wait_until(lambda: [e[:2] for e in upstream.events].count(("recv", SASL_HANDSHAKE)) >= 2)
        answer = raw.call(METADATA, 12, metadata)  # after it: the connection still works
        assert answer.brokers == []
        raw.close()
    assert upstream.answered_produce_behind_another
    assert gw.gateway.upstream_reauthentication_failures == 0
    assert gw.gateway.upstream_reauthentications >= 1


def test_the_gateways_topic_listing_is_not_taken_for_an_unanswered_acks_0_produce_with_its_correlation_id(
    upstream: ScriptedUpstream, authz_factory: Callable[..., AuthzFixture],
) -> None:
    """The listing of the upstream's topics a request naming an unknown topic id starts goes on the
    client's upstream connection with a correlation id of the gateway's choosing. A Kafka broker never
    answers an acks=0 produce, so one the client sent with that same id must not make the listing's
    answer look like that produce's (dropped): every client waiting for the listing would wait its
    10 s out, the ids would stay unknown, and this connection would be closed."""
    upstream.release.set()  # no Metadata answer held
    upstream.answers_acks_0 = False
    authz = authz_factory(allow_everyone_if_no_acl_found=True)
    options = GatewayOptions("127.0.0.1", 0, ("127.0.0.1", upstream.port), address_mode="single")
    with RunningGateway(options, Services(authz.service)) as gw:
        raw = RawClient(gw.bootstrap)
        raw.sock.settimeout(5)
        cls = SPECS[PRODUCE].request[9]
        data = cls.TopicProduceData
        raw.correlation = -2  # the next request's correlation id is -1
        raw.send(PRODUCE, 9, cls(transactional_id=None, acks=0, timeout_ms=5000, topic_data=[
            data(name=TOPIC, partition_data=[data.PartitionProduceData(index=0, records=_one_record_batch(b"m"))])]))
        raw.correlation = 10
        metadata = SPECS[METADATA].request[12]
        answer = raw.call(METADATA, 12, metadata(topics=[metadata.MetadataRequestTopic(topic_id=TOPIC_ID, name=None)],
                                                 allow_auto_topic_creation=False))
        assert [(t.error_code, t.name) for t in answer.topics] == [(0, TOPIC)]  # the id was learned
        raw.close()
