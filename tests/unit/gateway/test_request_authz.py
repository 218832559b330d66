"""Kafka's per-API rules on decoded requests: what is forwarded, what is answered, with which codes."""

from __future__ import annotations

from typing import Any

from authz.model import Action, Operation, ResourceType
from gateway.codec import SPECS, decode_response, encode_response
from gateway.request_authz import RequestAuthorizer, error_response, plan_request


class Rules:
    """The authorizer's answers as a set of (type, name, operation); records every question asked."""

    def __init__(self, *allowed: tuple[ResourceType, str, Operation], by_type: bool = False) -> None:
        self.allowed = set(allowed)
        self.asked: list[Action] = []
        self.by_type = by_type

    def authorizer(self) -> RequestAuthorizer:
        def check(actions: list[Action]) -> list[bool]:
            self.asked.extend(actions)
            return [(a.resource_type, a.resource_name, a.operation) in self.allowed for a in actions]

        return RequestAuthorizer(check, lambda op, rt: self.by_type)


def produce(version: int = 9, txn: str | None = None, topics: tuple[str, ...] = ("a", "b")) -> Any:
    cls = SPECS[0].request[version]
    t = cls.TopicProduceData
    return cls(transactional_id=txn, acks=1, timeout_ms=1, topic_data=[
        t(name=n, partition_data=[t.PartitionProduceData(index=i, records=b"x") for i in range(2)]) for n in topics])


def plan(rules: Rules, key: int, version: int, request: Any) -> Any:
    return plan_request(rules.authorizer(), key, version, request, SPECS[key].response)


def test_produce_fully_allowed_is_forwarded_untouched() -> None:
    rules = Rules((ResourceType.TOPIC, "a", Operation.WRITE), (ResourceType.TOPIC, "b", Operation.WRITE))
    p = plan(rules, 0, 9, produce())
    assert p.forward is not None and not p.rewritten and not p.patches
    assert [(a.resource_name, a.resource_ref_count) for a in rules.asked] == [("a", 2), ("b", 2)]


def test_produce_partly_denied_forwards_the_allowed_topic_and_answers_29_for_the_other() -> None:
    rules = Rules((ResourceType.TOPIC, "a", Operation.WRITE))
    p = plan(rules, 0, 9, produce())
    assert p.rewritten and [t.name for t in p.forward.topic_data] == ["a"]
    response = SPECS[0].response(responses=[])
    for patch in p.patches:
        patch(response)
    [denied] = response.responses
    assert denied.name == "b"
    assert [(x.index, x.error_code, x.base_offset) for x in denied.partition_responses] == [(0, 29, -1), (1, 29, -1)]


def test_produce_with_denied_transactional_id_fails_every_partition_with_53() -> None:
    rules = Rules((ResourceType.TOPIC, "a", Operation.WRITE))
    p = plan(rules, 0, 9, produce(txn="tx", topics=("a",)))
    assert p.forward is None
    assert [x.error_code for t in p.local.responses for x in t.partition_responses] == [53, 53]


def test_fetch_denied_entirely_is_answered_locally() -> None:
    cls = SPECS[1].request[12]
    t = cls.FetchTopic
    request = cls(replica_id=-1, max_wait_ms=1, min_bytes=1, topics=[
        t(topic="x", partitions=[t.FetchPartition(partition=3, fetch_offset=0)])])
    p = plan(Rules(), 1, 12, request)
    assert p.forward is None
    [topic] = p.local.responses
    assert topic.topic == "x" and [(x.partition_index, x.error_code) for x in topic.partitions] == [(3, 29)]


def test_follower_fetch_needs_cluster_action() -> None:
    cls = SPECS[1].request[12]
    p = plan(Rules(), 1, 12, cls(replica_id=1, topics=[]))
    assert p.forward is None and p.local.error_code == 31


def test_join_group_denied_gets_30() -> None:
    request = SPECS[11].request[5](group_id="g", session_timeout_ms=1, member_id="", protocol_type="consumer",
                                   protocols=[])
    p = plan(Rules(), 11, 5, request)
    assert p.forward is None and p.local.error_code == 30
    p = plan(Rules((ResourceType.GROUP, "g", Operation.READ)), 11, 5, request)
    assert p.forward is request


def test_offset_commit_checks_group_then_topics() -> None:
    cls = SPECS[8].request[8]
    t = cls.OffsetCommitRequestTopic
    request = cls(group_id="g", topics=[t(name=n, partitions=[t.OffsetCommitRequestPartition(partition_index=0)])
                                        for n in ("a", "b")])
    p = plan(Rules((ResourceType.GROUP, "g", Operation.READ), (ResourceType.TOPIC, "a", Operation.READ)), 8, 8,
             request)
    assert [t.name for t in p.forward.topics] == ["a"]
    no_group = plan(Rules((ResourceType.TOPIC, "a", Operation.READ)), 8, 8, request)
    assert {x.error_code for t in no_group.local.topics for x in t.partitions} == {30}


def test_describe_groups_partial_and_list_groups_filtered_without_denial_logs() -> None:
    request = SPECS[15].request[5](groups=["g1", "g2"])
    p = plan(Rules((ResourceType.GROUP, "g1", Operation.DESCRIBE)), 15, 5, request)
    assert p.forward.groups == ["g1"]
    response = SPECS[15].response(groups=[])
    p.patches[0](response)
    assert [(g.group_id, g.error_code) for g in response.groups] == [("g2", 30)]

    rules = Rules((ResourceType.GROUP, "g1", Operation.DESCRIBE))
    p = plan(rules, 16, 4, SPECS[16].request[4]())
    groups = SPECS[16].response.fields["groups"].data_class
    listed = SPECS[16].response(groups=[groups(group_id="g1"), groups(group_id="g2")])
    p.patches[0](listed)
    assert [g.group_id for g in listed.groups] == ["g1"]
    assert all(not a.log_if_denied for a in rules.asked)


def test_create_topics_falls_back_from_cluster_to_topic_create() -> None:
    cls = SPECS[19].request[5]
    t = cls.CreatableTopic
    request = cls(topics=[t(name="a", num_partitions=1, replication_factor=1),
                          t(name="b", num_partitions=1, replication_factor=1)])
    p = plan(Rules((ResourceType.TOPIC, "b", Operation.CREATE)), 19, 5, request)
    assert [t.name for t in p.forward.topics] == ["b"]
    everything = plan(Rules((ResourceType.CLUSTER, "kafka-cluster", Operation.CREATE)), 19, 5, request)
    assert everything.forward is request and not everything.rewritten


def test_created_topics_are_described_only_where_the_principal_may_describe_configs() -> None:
    cls = SPECS[19].request[7]
    t = cls.CreatableTopic
    request = cls(topics=[t(name=n, num_partitions=3, replication_factor=1) for n in ("a", "b", "c")])
    rules = Rules((ResourceType.CLUSTER, "kafka-cluster", Operation.CREATE),
                  (ResourceType.TOPIC, "a", Operation.DESCRIBE_CONFIGS))
    p = plan(rules, 19, 7, request)
    result = SPECS[19].response.fields["topics"].data_class
    config = result.fields["configs"].data_class
    response = SPECS[19].response(topics=[
        result(name=n, error_code=code, topic_config_error_code=0, num_partitions=3, replication_factor=1,
               configs=[config(name="retention.ms", value="1", read_only=False, config_source=5,
                               is_sensitive=False)])
        for n, code in (("a", 0), ("b", 0), ("c", 36))])
    for patch in p.patches:
        patch(response)
    answered = [(r.name, r.error_code, r.topic_config_error_code, r.num_partitions, r.replication_factor,
                 len(r.configs)) for r in response.topics]
    assert answered == [("a", 0, 0, 3, 1, 1), ("b", 0, 29, -1, -1, 0), ("c", 36, 0, 3, 1, 1)]
    asked = [(a.resource_name, a.log_if_denied) for a in rules.asked if a.operation is Operation.DESCRIBE_CONFIGS]
    assert asked == [("a", False), ("b", False)]  # only what was created; a filtering check, as Kafka's
    assert not plan(rules, 19, 4, SPECS[19].request[4](topics=[])).patches  # no configs before v5


def test_init_producer_id_rules() -> None:
    cls = SPECS[22].request[4]
    assert plan(Rules(), 22, 4, cls(transactional_id=None)).local.error_code == 31
    assert plan(Rules(by_type=True), 22, 4, cls(transactional_id=None)).forward is not None
    assert plan(Rules(), 22, 4, cls(transactional_id="t")).local.error_code == 53
    ok = Rules((ResourceType.TRANSACTIONAL_ID, "t", Operation.WRITE))
    assert plan(ok, 22, 4, cls(transactional_id="t")).forward is not None


def test_metadata_named_topics_partly_denied_and_auto_create_withheld() -> None:
    cls = SPECS[3].request[12]
    request = cls(topics=[cls.MetadataRequestTopic(name="a"), cls.MetadataRequestTopic(name="b")],
                  allow_auto_topic_creation=True)
    p = plan(Rules((ResourceType.TOPIC, "a", Operation.DESCRIBE)), 3, 12, request)
    assert [t.name for t in p.forward.topics] == ["a"]
    assert p.forward.allow_auto_topic_creation is False
    response = SPECS[3].response(brokers=[], topics=[])
    for patch in p.patches:
        patch(response)
    assert [(t.name, t.error_code) for t in response.topics] == [("b", 29)]


def test_configs_split_topic_and_broker_resources() -> None:
    cls = SPECS[32].request[4]
    r = cls.DescribeConfigsResource
    request = cls(resources=[r(resource_type=2, resource_name="a", configuration_keys=None),
                             r(resource_type=4, resource_name="1", configuration_keys=None)])
    p = plan(Rules((ResourceType.TOPIC, "a", Operation.DESCRIBE_CONFIGS)), 32, 4, request)
    assert [x.resource_name for x in p.forward.resources] == ["a"]
    response = SPECS[32].response(results=[])
    p.patches[0](response)
    assert [(x.resource_name, x.error_code) for x in response.results] == [("1", 31)]


def test_configs_of_groups_are_checked_on_the_group_and_client_metrics_on_the_cluster() -> None:
    cls = SPECS[44].request[1]
    r = cls.fields["resources"].data_class
    request = cls(resources=[r(resource_type=t, resource_name=n, configs=[])
                             for t, n in ((32, "g"), (32, "other"), (16, "metrics"), (64, "unknown"))],
                  validate_only=False)
    rules = Rules((ResourceType.GROUP, "g", Operation.ALTER_CONFIGS),
                  (ResourceType.CLUSTER, "kafka-cluster", Operation.ALTER_CONFIGS))
    p = plan(rules, 44, 1, request)
    assert [(x.resource_type, x.resource_name) for x in p.forward.resources] == [(32, "g"), (16, "metrics")]
    response = SPECS[44].response(responses=[])
    p.patches[0](response)
    assert [(x.resource_name, x.error_code) for x in response.responses] == [("other", 30), ("unknown", 31)]
    assert {(a.resource_type, a.resource_name) for a in rules.asked} == {
        (ResourceType.GROUP, "g"), (ResourceType.GROUP, "other"), (ResourceType.CLUSTER, "kafka-cluster")}


def test_find_coordinator_batched_partial() -> None:
    cls = SPECS[10].request[4]
    p = plan(Rules((ResourceType.GROUP, "g1", Operation.DESCRIBE)), 10, 4,
             cls(key_type=0, coordinator_keys=["g1", "g2"]))
    assert p.forward.coordinator_keys == ["g1"]
    response = SPECS[10].response(coordinators=[])
    p.patches[0](response)
    assert [(c.key, c.error_code) for c in response.coordinators] == [("g2", 30)]
    txn = plan(Rules(), 10, 3, SPECS[10].request[3](key="t", key_type=1))
    assert txn.local.error_code == 53


def test_metadata_answer_never_lists_more_than_was_asked_and_allowed() -> None:
    cls = SPECS[3].request[12]
    request = cls(topics=[cls.MetadataRequestTopic(name="secret")], allow_auto_topic_creation=False)
    p = plan(Rules(), 3, 12, request)
    assert p.forward.topics == []
    # a broker that reads an empty list as "all topics" (Tansu does) must not leak them
    topic = SPECS[3].response.fields["topics"].data_class
    response = SPECS[3].response(brokers=[], topics=[topic(name="secret", error_code=0, partitions=[]),
                                                     topic(name="other", error_code=0, partitions=[])])
    for patch in p.patches:
        patch(response)
    assert [(t.name, t.error_code) for t in response.topics] == [("secret", 29)]


def test_kip_430_authorized_operations_are_the_principals_not_the_gateways() -> None:
    cls = SPECS[3].request[10]
    request = cls(topics=[cls.MetadataRequestTopic(name="a")], allow_auto_topic_creation=False,
                  include_cluster_authorized_operations=True, include_topic_authorized_operations=True)
    rules = Rules((ResourceType.TOPIC, "a", Operation.DESCRIBE), (ResourceType.TOPIC, "a", Operation.READ),
                  (ResourceType.CLUSTER, "kafka-cluster", Operation.DESCRIBE))
    p = plan(rules, 3, 10, request)
    topic = SPECS[3].response.fields["topics"].data_class
    response = SPECS[3].response(brokers=[], topics=[topic(name="a", error_code=0, partitions=[],
                                                           authorized_operations=set(range(3, 12)))])
    for patch in p.patches:
        patch(response)
    assert response.topics[0].authorized_operations == {int(Operation.READ), int(Operation.DESCRIBE)}
    assert response.authorized_operations == {int(Operation.DESCRIBE)}
    # real accesses: DESCRIBE on the topic named, and Kafka's DESCRIBE check before the cluster's
    # operations (KafkaApis.handleTopicMetadataRequest); the operations themselves are filtering checks
    logged = [(a.resource_type, a.operation) for a in rules.asked if a.log_if_denied or a.log_if_allowed]
    assert logged == [(ResourceType.TOPIC, Operation.DESCRIBE), (ResourceType.CLUSTER, Operation.DESCRIBE)]


def test_cluster_authorized_operations_are_none_without_describe_on_the_cluster() -> None:
    cls = SPECS[3].request[10]
    request = cls(topics=[], allow_auto_topic_creation=False, include_cluster_authorized_operations=True,
                  include_topic_authorized_operations=False)
    rules = Rules((ResourceType.CLUSTER, "kafka-cluster", Operation.IDEMPOTENT_WRITE))
    p = plan(rules, 3, 10, request)
    response = SPECS[3].response(brokers=[], topics=[], authorized_operations=set(range(3, 15)))
    for patch in p.patches:
        patch(response)
    assert response.authorized_operations == set()  # Kafka: 0 without DESCRIBE, whatever else is allowed
    assert [a.operation for a in rules.asked] == [Operation.DESCRIBE]


def test_describe_cluster_authorized_operations() -> None:
    request = SPECS[60].request[1](include_cluster_authorized_operations=True)
    rules = Rules((ResourceType.CLUSTER, "kafka-cluster", Operation.DESCRIBE),
                  (ResourceType.CLUSTER, "kafka-cluster", Operation.ALTER))
    p = plan(rules, 60, 1, request)
    response = SPECS[60].response(brokers=[], authorized_operations=set(range(3, 15)))
    p.patches[0](response)
    assert response.authorized_operations == {int(Operation.DESCRIBE), int(Operation.ALTER)}


def test_describe_cluster_is_forwarded_for_anyone_as_kafka_authorizes_none_of_it() -> None:
    rules = Rules()
    p = plan(rules, 60, 1, SPECS[60].request[1](include_cluster_authorized_operations=False))
    assert p.forward is not None and not p.patches and not rules.asked
    p = plan(rules, 60, 1, SPECS[60].request[1](include_cluster_authorized_operations=True))
    response = SPECS[60].response(brokers=[], authorized_operations=set(range(3, 15)))
    p.patches[0](response)
    assert p.forward is not None and response.authorized_operations == set()


def test_error_response_fails_every_partition_a_produce_names() -> None:
    response = error_response(0, produce(), SPECS[0].response, 34)
    answered = {(t.name, p.index): (p.error_code, p.base_offset) for t in response.responses
                for p in t.partition_responses}
    assert answered == {(n, i): (34, -1) for n in ("a", "b") for i in range(2)}


def test_error_response_sets_the_top_level_code_and_the_named_topics() -> None:
    cls = SPECS[3].request[12]
    metadata = cls(topics=[cls.MetadataRequestTopic(name="x")], allow_auto_topic_creation=False)
    assert [(t.name, t.error_code) for t in error_response(3, metadata, SPECS[3].response, 34).topics] == [("x", 34)]
    assert error_response(10, SPECS[10].request[3](key="g"), SPECS[10].response, 34).error_code == 34


def test_error_response_encodes_for_every_api_and_version() -> None:
    """An error answer must never be what breaks a connection: every API the codec knows, every version."""
    for key, spec in SPECS.items():
        message = error_response(key, spec.request(), spec.response, 34)
        for version in range(spec.min_version, spec.max_version + 1):
            frame = encode_response(spec, version, 7, message)
            if key == 18 and version >= 3:
                continue  # Kafka's clients (and kafka-python) read an ApiVersions error as v0
            decoded = decode_response(spec, version, frame[4:])
            if "error_code" in spec.response.fields and spec.response.fields["error_code"].for_version_q(version):
                assert decoded.error_code == 34, (spec.name, version)


def add_partitions(*topics: str) -> Any:
    cls = SPECS[24].request[3]
    topic = cls.fields["v3_and_below_topics"].data_class
    return cls(v3_and_below_transactional_id="tx", v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
               v3_and_below_topics=[topic(name=n, partitions=[0, 1]) for n in topics])


def test_add_partitions_to_txn_is_forwarded_when_every_topic_may_be_written() -> None:
    rules = Rules((ResourceType.TRANSACTIONAL_ID, "tx", Operation.WRITE), (ResourceType.TOPIC, "a", Operation.WRITE),
                  (ResourceType.TOPIC, "b", Operation.WRITE))
    p = plan(rules, 24, 3, add_partitions("a", "b"))
    assert p.forward is not None and not p.rewritten and not p.patches
    assert [(a.resource_name, a.resource_ref_count) for a in rules.asked[1:]] == [("a", 2), ("b", 2)]


def test_add_partitions_to_txn_with_a_denied_topic_adds_nothing_as_kafka() -> None:
    rules = Rules((ResourceType.TRANSACTIONAL_ID, "tx", Operation.WRITE), (ResourceType.TOPIC, "a", Operation.WRITE))
    p = plan(rules, 24, 3, add_partitions("a", "b"))
    assert p.forward is None
    codes = {(t.name, r.partition_index): r.partition_error_code for t in p.local.results_by_topic_v3_and_below
             for r in t.results_by_partition}
    assert codes == {("a", 0): 55, ("a", 1): 55, ("b", 0): 29, ("b", 1): 29}


def test_add_partitions_to_txn_with_a_denied_transactional_id_asks_nothing_of_the_topics() -> None:
    rules = Rules((ResourceType.TOPIC, "a", Operation.WRITE))
    p = plan(rules, 24, 3, add_partitions("a"))
    codes = {r.partition_error_code for t in p.local.results_by_topic_v3_and_below for r in t.results_by_partition}
    assert p.forward is None and codes == {53} and len(rules.asked) == 1


# KIP-848 (ConsumerGroupHeartbeat 68, ConsumerGroupDescribe 69), as Kafka 4.x's KafkaApis.

def heartbeat(version: int = 1, group: str = "g", names: list[str] | None = None, regex: str | None = None) -> Any:
    values: dict[str, Any] = {"group_id": group, "member_id": "m", "member_epoch": 0,
                              "subscribed_topic_names": names, "topic_partitions": []}
    if version >= 1:
        values["subscribed_topic_regex"] = regex
    return SPECS[68].request(**values)


def test_consumer_group_heartbeat_needs_read_on_the_group_before_any_topic_is_looked_at() -> None:
    rules = Rules((ResourceType.TOPIC, "a", Operation.DESCRIBE))
    p = plan(rules, 68, 1, heartbeat(names=["a"]))
    assert p.forward is None and p.local.error_code == 30 and p.local.assignment is None
    assert [(a.resource_type, a.resource_name, a.operation) for a in rules.asked] == [
        (ResourceType.GROUP, "g", Operation.READ)]


def test_consumer_group_heartbeat_fails_whole_with_29_when_any_subscribed_topic_is_denied() -> None:
    rules = Rules((ResourceType.GROUP, "g", Operation.READ), (ResourceType.TOPIC, "a", Operation.DESCRIBE))
    p = plan(rules, 68, 1, heartbeat(names=["a", "secret"]))
    assert p.forward is None and p.local.error_code == 29 and p.local.error_message is None
    topic_checks = [a for a in rules.asked if a.resource_type is ResourceType.TOPIC]
    assert {a.resource_name for a in topic_checks} == {"a", "secret"}
    assert all(a.operation is Operation.DESCRIBE and a.log_if_denied for a in topic_checks)


def test_consumer_group_heartbeat_allowed_is_forwarded_untouched_and_unchanged_subscription_asks_no_topic() -> None:
    rules = Rules((ResourceType.GROUP, "g", Operation.READ), (ResourceType.TOPIC, "a", Operation.DESCRIBE))
    p = plan(rules, 68, 0, heartbeat(version=0, names=["a"]))
    assert p.forward is not None and not p.rewritten and not p.patches
    # Kafka counts: the allowed distinct names (1) against the names sent (2)
    assert plan(rules, 68, 1, heartbeat(names=["a", "a"])).local.error_code == 29
    rules.asked.clear()
    p = plan(rules, 68, 1, heartbeat(names=None))  # null: the subscription did not change
    assert p.forward is not None
    assert [a.resource_type for a in rules.asked] == [ResourceType.GROUP]


def test_consumer_group_heartbeat_regex_subscription_is_refused_after_kafkas_checks() -> None:
    rules = Rules((ResourceType.GROUP, "g", Operation.READ), (ResourceType.TOPIC, "a", Operation.DESCRIBE))
    p = plan(rules, 68, 1, heartbeat(regex="^team\\..*"))
    assert p.forward is None and p.local.error_code == 42 and "SubscribedTopicRegex" in p.local.error_message
    # the group is still checked first: a denied group is 30, not 42
    assert plan(Rules(), 68, 1, heartbeat(regex="^x")).local.error_code == 30
    # an empty expression (Kafka: none) goes through
    assert plan(rules, 68, 1, heartbeat(names=["a"], regex="")).forward is not None


def describe_request(*groups: str, ops: bool = False) -> Any:
    return SPECS[69].request(group_ids=list(groups), include_authorized_operations=ops)


def described(group: str, *assigned: str, target: tuple[str, ...] = (), ops: int = -2147483648) -> Any:
    cls = SPECS[69].response.fields["groups"].data_class
    member_cls = cls.fields["members"].data_class
    assignment_cls = member_cls.fields["assignment"].data_class
    tp = assignment_cls.fields["topic_partitions"].data_class

    def assignment(names: tuple[str, ...]) -> Any:
        return assignment_cls(topic_partitions=[tp(topic_name=n, partitions=[0]) for n in names])

    member = member_cls(member_id="m1", client_id="c", client_host="/10.0.0.1", subscribed_topic_names=list(assigned),
                        assignment=assignment(assigned), target_assignment=assignment(target))
    return cls(group_id=group, group_state="Stable", group_epoch=3, members=[member], authorized_operations=ops)


def test_consumer_group_describe_denied_groups_answered_30_in_place_first_and_not_asked_upstream() -> None:
    rules = Rules((ResourceType.GROUP, "ok", Operation.DESCRIBE))
    p = plan(rules, 69, 0, describe_request("no", "ok"))
    assert p.forward is not None and p.rewritten and p.forward.group_ids == ["ok"]
    response = SPECS[69].response(groups=[described("ok")])
    for patch in p.patches:
        patch(response)
    assert [(g.group_id, g.error_code) for g in response.groups] == [("no", 30), ("ok", 0)]
    only_denied = plan(Rules(), 69, 1, describe_request("no"))
    assert only_denied.forward is None and [(g.group_id, g.error_code) for g in only_denied.local.groups] == [
        ("no", 30)]


def test_consumer_group_describe_hides_groups_whose_assignments_name_an_undescribable_topic() -> None:
    rules = Rules((ResourceType.GROUP, "g1", Operation.DESCRIBE), (ResourceType.GROUP, "g2", Operation.DESCRIBE),
                  (ResourceType.GROUP, "g3", Operation.DESCRIBE), (ResourceType.TOPIC, "a", Operation.DESCRIBE))
    p = plan(rules, 69, 1, describe_request("g1", "g2", "g3"))
    response = SPECS[69].response(groups=[described("g1", "a"), described("g2", "a", "secret"),
                                          described("g3", "a", target=("secret",))])
    for patch in p.patches:
        patch(response)
    rows = {g.group_id: g for g in response.groups}
    assert rows["g1"].error_code == 0 and rows["g1"].members[0].assignment.topic_partitions[0].topic_name == "a"
    for hidden in ("g2", "g3"):  # assignment or target assignment
        g = rows[hidden]
        assert (g.error_code, g.members, g.group_state, g.group_epoch) == (29, [], "", 0)
        assert g.error_message == "The group has described topic(s) that the client is not authorized to describe."
    topic_checks = [a for a in rules.asked if a.resource_type is ResourceType.TOPIC]
    assert {a.resource_name for a in topic_checks} == {"a", "secret"} and all(a.log_if_denied for a in topic_checks)
    # the encoded answer carries no trace of the hidden topic
    frame = encode_response(SPECS[69], 1, 1, response)
    assert b"secret" not in frame


def test_consumer_group_describe_authorized_operations_are_the_principals() -> None:
    rules = Rules((ResourceType.GROUP, "g", Operation.DESCRIBE), (ResourceType.GROUP, "g", Operation.READ))
    p = plan(rules, 69, 1, describe_request("g", ops=True))
    response = SPECS[69].response(groups=[described("g", ops=0x7FFFFFF8)])  # the gateway's own (broad) rights
    for patch in p.patches:
        patch(response)
    assert response.groups[0].authorized_operations == (1 << int(Operation.READ)) | (1 << int(Operation.DESCRIBE))
    p = plan(rules, 69, 1, describe_request("g", ops=False))
    response = SPECS[69].response(groups=[described("g")])
    for patch in p.patches:
        patch(response)
    assert response.groups[0].authorized_operations == -2147483648  # not asked for: Kafka's default


def test_error_response_names_every_consumer_group_described() -> None:
    response = error_response(69, describe_request("a", "b"), SPECS[69].response, 34)
    assert [(g.group_id, g.error_code) for g in response.groups] == [("a", 34), ("b", 34)]
