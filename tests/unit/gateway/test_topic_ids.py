"""Fetch v13+ (KIP-516): topics named by id, authorized by the names the upstream gives the ids."""

from __future__ import annotations

import uuid
from typing import Any

from authz.model import Action, Operation, ResourceType
from gateway.codec import SPECS, decode_response, encode_response
from gateway.request_authz import RequestAuthorizer, error_response, plan_request
from gateway.topic_ids import TopicIds, ids_supported, refresh_request, refresh_version, request_ids

A, B, C = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()


class Rules:
    def __init__(self, *allowed: tuple[ResourceType, str, Operation]) -> None:
        self.allowed = set(allowed)
        self.asked: list[Action] = []

    def authorizer(self, ids: TopicIds) -> RequestAuthorizer:
        def check(actions: list[Action]) -> list[bool]:
            self.asked.extend(actions)
            return [(a.resource_type, a.resource_name, a.operation) in self.allowed for a in actions]

        return RequestAuthorizer(check, lambda op, rt: False, ids.name)


def read(name: str) -> tuple[ResourceType, str, Operation]:
    return ResourceType.TOPIC, name, Operation.READ


def fetch(version: int, *topics: tuple[uuid.UUID | None, int], replica_id: int = -1) -> Any:
    cls = SPECS[1].request[version]
    t = cls.FetchTopic
    extra: dict[str, Any] = {}
    if version >= 15:
        extra["replica_state"] = cls.ReplicaState(replica_id=replica_id, replica_epoch=-1)
    else:
        extra["replica_id"] = replica_id
    request = cls(max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                  topics=[t(topic_id=i, partitions=[t.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1)
                                                    for p in range(n)]) for i, n in topics],
                  forgotten_topics_data=[], rack_id="", **extra)
    # Through the wire and back, as the gateway sees it.
    return SPECS[1].request.decode(request.encode(version=version), version=version)


def known(**names: uuid.UUID) -> TopicIds:
    ids = TopicIds()
    ids.learn((i, n) for n, i in names.items())
    return ids


def plan(rules: Rules, ids: TopicIds, version: int, request: Any) -> Any:
    return plan_request(rules.authorizer(ids), 1, version, request, SPECS[1].response)


def answered(version: int, p: Any, upstream: Any = None) -> dict[uuid.UUID | None, list[tuple[int, int, int]]]:
    """topic id -> [(partition, error code, high watermark)] as the client decodes the answer."""
    response = p.local if p.forward is None else upstream
    for patch in p.patches:
        patch(response)
    frame = encode_response(SPECS[1], version, 7, response)
    decoded = decode_response(SPECS[1], version, frame[4:])
    return {t.topic_id: [(x.partition_index, x.error_code, x.high_watermark) for x in t.partitions]
            for t in decoded.responses}


def test_allowed_ids_are_forwarded_untouched_and_authorized_by_name_with_partition_counts() -> None:
    rules = Rules(read("orders"), read("payments"))
    request = fetch(13, (A, 2), (B, 1))
    p = plan(rules, known(orders=A, payments=B), 13, request)
    assert p.forward is request and not p.rewritten and not p.patches
    assert [(a.resource_name, a.operation, a.resource_ref_count) for a in rules.asked] == [
        ("orders", Operation.READ, 2), ("payments", Operation.READ, 1)]


def test_unknown_id_is_unknown_topic_id_without_an_authorization_and_denied_name_is_29() -> None:
    rules = Rules(read("orders"))
    request = fetch(13, (A, 1), (B, 2), (C, 1))
    p = plan(rules, known(orders=A, payments=B), 13, request)
    assert p.rewritten and [t.topic_id for t in p.forward.topics] == [A]
    # C has no name: nothing is asked (or logged) about it, as in KafkaApis.handleFetchRequest.
    assert [a.resource_name for a in rules.asked] == ["orders", "payments"]
    upstream = SPECS[1].response(responses=[SPECS[1].response.fields["responses"].data_class(topic_id=A, partitions=[])])
    assert answered(13, p, upstream) == {A: [], B: [(0, 29, -1), (1, 29, -1)], C: [(0, 100, -1)]}


def test_nothing_allowed_is_answered_locally_by_id() -> None:
    rules = Rules()
    p = plan(rules, known(payments=B), 15, fetch(15, (B, 1), (C, 1)))
    assert p.forward is None
    assert answered(15, p) == {B: [(0, 29, -1)], C: [(0, 100, -1)]}


def test_an_empty_map_fails_closed() -> None:
    rules = Rules(read("orders"))
    p = plan(rules, TopicIds(), 13, fetch(13, (A, 1)))
    assert p.forward is None and answered(13, p) == {A: [(0, 100, -1)]}
    assert rules.asked == []
    # A RequestAuthorizer built without a map knows no id either.
    bare = plan_request(RequestAuthorizer(lambda a: [True] * len(a), lambda op, rt: True), 1, 13,
                        fetch(13, (A, 1)), SPECS[1].response)
    assert bare.forward is None


def test_an_incremental_fetch_naming_no_topic_is_forwarded() -> None:
    request = fetch(13)
    p = plan(Rules(), TopicIds(), 13, request)
    assert p.forward is request and not p.rewritten


def test_follower_fetch_v15_reads_the_replica_id_from_replica_state() -> None:
    rules = Rules(read("orders"))
    p = plan(rules, known(orders=A), 15, fetch(15, (A, 1), replica_id=3))
    assert p.forward is None and p.local.error_code == 31
    assert [(a.resource_type, a.operation) for a in rules.asked] == [(ResourceType.CLUSTER, Operation.CLUSTER_ACTION)]
    consumer = plan(Rules(read("orders")), known(orders=A), 15, fetch(15, (A, 1), replica_id=-1))
    assert consumer.forward is not None


def test_error_response_of_a_fetch_by_id_names_the_ids() -> None:
    request = fetch(13, (A, 2))
    response = error_response(1, request, SPECS[1].response, 34)
    frame = encode_response(SPECS[1], 13, 1, response)
    decoded = decode_response(SPECS[1], 13, frame[4:])
    assert decoded.error_code == 34
    assert [(t.topic_id, [p.error_code for p in t.partitions]) for t in decoded.responses] == [(A, [34, 34])]


def test_learning_adds_replacing_drops_and_zero_ids_or_null_names_are_ignored() -> None:
    ids = TopicIds()
    ids.learn([(A, "orders"), (None, "x"), (uuid.UUID(int=0), "y"), (B, None)])
    assert len(ids) == 1 and ids.name(A) == "orders" and ids.name(None) is None
    ids.learn([(B, "payments")])
    assert ids.name(A) == "orders" and ids.name(B) == "payments"
    assert not ids.missing([A, B]) and ids.missing([A, C]) and ids.missing([None])
    ids.replace([(B, "payments"), (C, "audit")])  # orders was deleted upstream
    assert ids.name(A) is None and ids.name(C) == "audit" and len(ids) == 2


def test_a_full_map_starts_again_from_what_is_learned() -> None:
    ids = TopicIds(max_pairs=2)
    ids.learn([(A, "orders"), (B, "payments")])
    ids.learn([(C, "audit")])
    assert ids.name(C) == "audit" and ids.name(A) is None and len(ids) == 1


def test_metadata_responses_teach_only_error_free_topics() -> None:
    resp_cls = SPECS[3].response
    topic = resp_cls.fields["topics"].data_class
    response = resp_cls(brokers=[], topics=[topic(name="orders", topic_id=A, error_code=0, partitions=[]),
                                            topic(name="secret", topic_id=B, error_code=29, partitions=[])])
    ids = TopicIds()
    ids.learn_from_metadata(response)
    assert ids.name(A) == "orders" and ids.name(B) is None


def test_fetch_by_id_needs_metadata_with_ids_upstream() -> None:
    assert ids_supported({3: (0, 12)}) and ids_supported({3: (0, 10)})
    assert not ids_supported({3: (0, 9)}) and not ids_supported({})
    assert refresh_version({3: (0, 13)}) == 12 and refresh_version({3: (0, 10)}) == 10
    request = refresh_request(SPECS[3].request, 12)
    assert request.topics is None and request.allow_auto_topic_creation is False
    assert request_ids(1, fetch(13, (A, 1), (B, 1))) == [A, B]
    assert request_ids(0, produce((B, 1), (A, 1))) == [B, A]


def produce(*topics: tuple[uuid.UUID | None, int], txn: str | None = None) -> Any:
    cls = SPECS[0].request[13]
    t = cls.TopicProduceData
    request = cls(transactional_id=txn, acks=1, timeout_ms=1, topic_data=[
        t(topic_id=i, partition_data=[t.PartitionProduceData(index=p, records=b"x") for p in range(n)])
        for i, n in topics])
    return SPECS[0].request.decode(request.encode(version=13), version=13)


def produced(p: Any, upstream: Any = None) -> dict[uuid.UUID | None, list[tuple[int, int, int]]]:
    """topic id -> [(partition, error code, base offset)] as the client decodes the Produce v13 answer."""
    response = p.local if p.forward is None else upstream
    for patch in p.patches:
        patch(response)
    frame = encode_response(SPECS[0], 13, 7, response)
    decoded = decode_response(SPECS[0], 13, frame[4:])
    return {t.topic_id: [(x.index, x.error_code, x.base_offset) for x in t.partition_responses]
            for t in decoded.responses}


def test_produce_v13_writes_by_the_names_of_its_ids_unknown_ones_are_100() -> None:
    rules = Rules((ResourceType.TOPIC, "orders", Operation.WRITE))
    request = produce((A, 2), (B, 1), (C, 1))
    p = plan_request(rules.authorizer(known(orders=A, payments=B)), 0, 13, request, SPECS[0].response)
    assert p.rewritten and [t.topic_id for t in p.forward.topic_data] == [A]
    assert [(a.resource_name, a.operation, a.resource_ref_count) for a in rules.asked] == [
        ("orders", Operation.WRITE, 2), ("payments", Operation.WRITE, 1)]
    assert produced(p, SPECS[0].response(responses=[])) == {B: [(0, 29, -1)], C: [(0, 100, -1)]}


def test_produce_v13_with_a_denied_transactional_id_is_53_everywhere_and_asks_nothing_of_the_topics() -> None:
    rules = Rules((ResourceType.TOPIC, "orders", Operation.WRITE))
    p = plan_request(rules.authorizer(known(orders=A)), 0, 13, produce((A, 1), (C, 1), txn="tx"), SPECS[0].response)
    assert p.forward is None and produced(p) == {A: [(0, 53, -1)], C: [(0, 53, -1)]}
    assert [(a.resource_type, a.resource_name) for a in rules.asked] == [(ResourceType.TRANSACTIONAL_ID, "tx")]


def metadata_by_id(*topics: tuple[str | None, uuid.UUID | None]) -> Any:
    cls = SPECS[3].request[12]
    request = cls(topics=[cls.MetadataRequestTopic(name=n, topic_id=i) for n, i in topics],
                  allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    return SPECS[3].request.decode(request.encode(version=12), version=12)


def test_metadata_v12_by_id_describes_by_name_unknown_ids_are_100_and_denied_ones_answered_by_id() -> None:
    rules = Rules((ResourceType.TOPIC, "orders", Operation.DESCRIBE), (ResourceType.TOPIC, "new", Operation.DESCRIBE))
    request = metadata_by_id((None, A), (None, B), (None, C), ("new", None))
    p = plan_request(rules.authorizer(known(orders=A, payments=B)), 3, 12, request, SPECS[3].response)
    assert [(t.name, t.topic_id) for t in p.forward.topics] == [(None, A), ("new", None)]
    # Only names are checked (C is unknown: nothing asked); auto-creation is judged on the names only.
    describe = [(a.resource_name, a.operation) for a in rules.asked if a.operation == Operation.DESCRIBE]
    assert describe == [("orders", Operation.DESCRIBE), ("payments", Operation.DESCRIBE), ("new", Operation.DESCRIBE)]
    assert [(a.resource_type, a.resource_name) for a in rules.asked if a.operation == Operation.CREATE] == [
        (ResourceType.CLUSTER, "kafka-cluster"), (ResourceType.TOPIC, "new")]
    assert p.forward.allow_auto_topic_creation is False  # "new" may not be created
    resp_cls = SPECS[3].response
    topic = resp_cls.fields["topics"].data_class
    upstream = resp_cls(brokers=[], topics=[topic(name="orders", topic_id=A, error_code=0, partitions=[]),
                                            topic(name="new", topic_id=uuid.uuid4(), error_code=0, partitions=[]),
                                            topic(name="payments", topic_id=B, error_code=0, partitions=[])])
    for patch in p.patches:
        patch(upstream)
    frame = encode_response(SPECS[3], 12, 3, upstream)
    decoded = decode_response(SPECS[3], 12, frame[4:])
    assert [(t.name, t.topic_id, t.error_code) for t in decoded.topics if t.name != "new"] == [
        ("orders", A, 0), (None, B, 29), (None, C, 100)]


def _answer(p: Any, *topics: tuple[str | None, uuid.UUID | None, int]) -> list[tuple[str | None, uuid.UUID | None, int]]:
    """What the client decodes from an upstream Metadata v12 answer listing `topics`, after the patches."""
    resp_cls = SPECS[3].response
    topic = resp_cls.fields["topics"].data_class
    upstream = resp_cls(brokers=[], topics=[topic(name=n, topic_id=i, error_code=e, partitions=[]) for n, i, e in topics])
    for patch in p.patches:
        patch(upstream)
    decoded = decode_response(SPECS[3], 12, encode_response(SPECS[3], 12, 3, upstream)[4:])
    return [(t.name, t.topic_id, t.error_code) for t in decoded.topics]


def test_metadata_v12_entry_with_a_name_and_an_id_is_authorized_by_the_id_as_kafka_describes_it() -> None:
    """Kafka's handleTopicMetadataRequest describes the ids of a request that has any, ignoring its names:
    `{name: "public", id: <secret's id>}` checked by the name described "secret" to a reader of "public"."""
    rules = Rules((ResourceType.TOPIC, "public", Operation.DESCRIBE))
    ids = known(public=A, secret=B)
    p = plan_request(rules.authorizer(ids), 3, 12, metadata_by_id(("public", B)), SPECS[3].response)
    assert [a.resource_name for a in rules.asked if a.operation == Operation.DESCRIBE] == ["secret"]
    assert p.forward.topics == []  # nothing asked of the upstream
    # What a Kafka upstream would answer for id B, had it been forwarded, never reaches the client.
    assert _answer(p, ("secret", B, 0)) == [(None, B, 29)]
    assert request_ids(3, metadata_by_id(("public", B))) == [B]  # an unknown one waits for the listing


def test_metadata_v12_entry_with_a_name_and_an_allowed_id_goes_upstream_by_id_alone() -> None:
    rules = Rules((ResourceType.TOPIC, "public", Operation.DESCRIBE))
    p = plan_request(rules.authorizer(known(public=A, secret=B)), 3, 12, metadata_by_id(("secret", A)),
                     SPECS[3].response)
    assert [(t.name, t.topic_id) for t in p.forward.topics] == [(None, A)] and p.rewritten
    assert p.forward.allow_auto_topic_creation is True  # an id creates nothing: no CREATE asked
    assert not [a for a in rules.asked if a.operation == Operation.CREATE]
    # An upstream answering some other topic than the one asked and allowed is cut to what was allowed.
    assert _answer(p, ("public", A, 0), ("secret", B, 0)) == [("public", A, 0)]


def test_metadata_v12_kept_id_the_upstream_no_longer_knows_is_passed_on_next_to_denied_ones() -> None:
    rules = Rules((ResourceType.TOPIC, "orders", Operation.DESCRIBE))
    p = plan_request(rules.authorizer(known(orders=A, payments=B)), 3, 12, metadata_by_id((None, A), (None, B)),
                     SPECS[3].response)
    assert [t.topic_id for t in p.forward.topics] == [A]
    # "orders" was deleted meanwhile: the upstream answers its id nameless; the client hears that.
    assert _answer(p, (None, A, 100)) == [(None, A, 100), (None, B, 29)]


def test_the_listing_gate_is_single_flight_and_once_per_interval_for_everyone() -> None:
    from gateway.topic_ids import ListingGate, Miss

    gate: ListingGate[str] = ListingGate(interval_s=1.0)
    assert gate.on_miss("a", now=10.0) is Miss.LIST and gate.under_way
    token = gate.listings
    assert gate.on_miss("b", now=10.2) is Miss.WAIT and gate.on_miss("c", now=30.0) is Miss.WAIT  # however late
    assert gate.finish(token) == ["a", "b", "c"] and not gate.under_way
    assert gate.finish(token) == []  # the wait's timer, or a late answer: nobody twice
    assert gate.on_miss("d", now=10.9) is Miss.ANSWER  # within a second of the last listing's start
    assert gate.on_miss("d", now=11.0) is Miss.LIST and gate.listings == token + 1


def test_a_listing_whose_connection_closed_or_timed_out_releases_its_waiters_once() -> None:
    from gateway.topic_ids import ListingGate, Miss

    gate: ListingGate[str] = ListingGate(interval_s=1.0)
    assert gate.on_miss("owner", now=0.0) is Miss.LIST
    gate.on_miss("other", now=0.1)
    assert gate.abandon("other") == []  # only the connection the listing runs on ends it
    assert gate.abandon("owner") == ["owner", "other"] and not gate.under_way
    stale = gate.listings
    assert gate.on_miss("next", now=5.0) is Miss.LIST
    assert gate.finish(stale) == [] and gate.under_way  # an old listing's late end leaves the new one be
    assert gate.finish(gate.listings) == ["next"]
