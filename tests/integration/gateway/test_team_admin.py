"""An application team's AdminClient (librdkafka) through the gateway, each call without and with the
ACL Kafka's KafkaApis asks for, denied with the error code Kafka answers."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from gateway.codec import SPECS
from tests.integration.gateway.conftest import wait_until
from tests.integration.gateway.team_journey import Team
from tests.integration.gateway.test_proxy import create_topics

pytestmark = [pytest.mark.broker]


def error_of(future: object) -> int:
    with pytest.raises(KafkaException) as err:
        future.result(8)  # type: ignore[attr-defined]
    code: int = err.value.args[0].code()
    return code


def test_create_and_delete_topics_need_create_and_delete(team: Team) -> None:
    admin = AdminClient(team.conf())
    topic = team.name("events")
    # KafkaApis.handleCreateTopicsRequest: CREATE on the cluster or on the topic
    [future] = admin.create_topics([NewTopic(topic, 2, 1)]).values()
    assert error_of(future) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    team.acls("--operation", "Create", "--topic", team.prefix, "--resource-pattern-type", "prefixed")
    [future] = admin.create_topics([NewTopic(topic, 2, 1)]).values()
    assert future.result(8) is None
    # KafkaApis.handleDeleteTopicsRequest: DELETE on the topic
    [future] = admin.delete_topics([topic]).values()
    assert error_of(future) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    team.acls("--operation", "Delete", "--topic", topic)
    [future] = admin.delete_topics([topic]).values()
    assert future.result(8) is None
    ops = AdminClient(team.ops_conf())
    wait_until(lambda: topic not in ops.list_topics(timeout=8).topics)


def test_describe_and_incrementally_alter_topic_configs(team: Team, kafka_broker: str) -> None:
    topic = team.name("events")
    create_topics(kafka_broker, topic)
    admin = AdminClient(team.conf())
    resource = ConfigResource(ResourceType.TOPIC, topic)
    # KafkaApis.handleDescribeConfigsRequest: DESCRIBE_CONFIGS on the topic
    [future] = admin.describe_configs([resource]).values()
    assert error_of(future) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    team.acls("--operation", "DescribeConfigs", "--topic", topic)
    [future] = admin.describe_configs([resource]).values()
    assert future.result(8) == {}  # Tansu (0.x) describes no topic configs
    # KafkaApis.handleIncrementalAlterConfigsRequest: ALTER_CONFIGS on the topic
    change = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    [future] = admin.incremental_alter_configs([change]).values()
    assert error_of(future) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    team.acls("--operation", "AlterConfigs", "--topic", topic)
    [future] = admin.incremental_alter_configs([change]).values()
    assert future.result(8) is None


def test_list_offsets_needs_describe_and_delete_records_delete(team: Team, kafka_broker: str) -> None:
    topic = team.name("events")
    create_topics(kafka_broker, topic)
    p = Producer(team.ops_conf())
    for i in range(3):  # a batch each: Tansu (0.x) counts a batch as one offset in ListOffsets
        p.produce(topic, f"e{i}".encode(), partition=0)
        assert p.flush(8) == 0
    admin = AdminClient(team.conf())
    partition = TopicPartition(topic, 0)
    # KafkaApis.handleListOffsetRequest: DESCRIBE on the topic (librdkafka does not send it for a topic
    # its Metadata answered TOPIC_AUTHORIZATION_FAILED: the gateway's answer is read raw)
    assert list_offsets(team, topic) == (KafkaError.TOPIC_AUTHORIZATION_FAILED, -1)
    team.acls("--operation", "Describe", "--topic", topic)
    [future] = admin.list_offsets({partition: OffsetSpec.latest()}).values()
    assert future.result(8).offset == 3
    assert list_offsets(team, topic) == (0, 3)
    # KafkaApis.handleDeleteRecordsRequest: DELETE on the topic
    # KafkaApis.handleDeleteRecordsRequest: DELETE on the topic. Tansu (0.x) has no DeleteRecords (it
    # closes the connection), so only the gateway's refusal is checked.
    [future] = admin.delete_records([TopicPartition(topic, 0, 2)]).values()
    assert error_of(future) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def list_offsets(team: Team, topic: str) -> tuple[int, int]:
    """(error code, offset) of ListOffsets v7 for the latest offset of partition 0."""
    cls = SPECS[2].request[7]
    part = cls.fields["topics"].data_class.fields["partitions"].data_class
    request = cls(replica_id=-1, isolation_level=0, topics=[cls.fields["topics"].data_class(
        name=topic, partitions=[part(partition_index=0, current_leader_epoch=-1, timestamp=-1)])])
    [answered] = team.call(2, 7, request).topics
    [partition] = answered.partitions
    return partition.error_code, partition.offset


def test_describe_cluster_needs_no_acl(team: Team, kafka_broker: str) -> None:
    """KafkaApis.handleDescribeCluster (AuthHelper.computeDescribeClusterResponse) authorizes nothing but
    the authorized operations it reports: none (0) without DESCRIBE on the cluster. kafka-python asks
    with DescribeCluster (API 60); librdkafka with Metadata v10, which Kafka answers the same way."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(**team.python_conf())
    try:
        described = admin.describe_cluster()
        [broker] = described["brokers"]
        assert described["cluster_id"] and f"{broker['host']}:{broker['port']}" != kafka_broker
        base = team.gw.settings.gateway.node_port_base  # type: ignore[attr-defined]
        assert broker["port"] == base + broker["broker_id"]  # the gateway's listener for that broker
        assert not described["authorized_operations"]  # an empty list: 0 on the wire
        team.acls("--operation", "Describe", "--operation", "IdempotentWrite", "--cluster")
        granted = admin.describe_cluster()["authorized_operations"]
        assert sorted(granted) == ["DESCRIBE", "IDEMPOTENT_WRITE"]
    finally:
        admin.close()
    librdkafka = AdminClient(team.conf())
    cluster = librdkafka.describe_cluster(include_authorized_operations=True).result(8)
    assert sorted(cluster.authorized_operations) == [AclOperation.DESCRIBE, AclOperation.IDEMPOTENT_WRITE]
    ops = AdminClient(team.ops_conf())
    everything = ops.describe_cluster(include_authorized_operations=True).result(8).authorized_operations
    assert AclOperation.ALTER in everything and AclOperation.CLUSTER_ACTION in everything


def test_group_offsets_are_altered_with_group_and_topic_read_and_groups_deleted_with_delete(team: Team) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions

    topic, group = team.name("events"), team.name("orders-app")
    ops = AdminClient(team.ops_conf())
    [created] = ops.create_topics([NewTopic(topic, 1, 1)]).values()
    assert created.result(8) is None
    admin = AdminClient(team.conf())
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 1)])]
    # KafkaApis.handleOffsetCommitRequest: READ on the group, then READ on each topic
    assert error_of(admin.alter_consumer_group_offsets(request)[group]) == KafkaError.GROUP_AUTHORIZATION_FAILED
    team.acls("--consumer", "--topic", topic, "--group", group)
    [altered] = admin.alter_consumer_group_offsets(request)[group].result(8).topic_partitions
    assert (altered.offset, altered.error) == (1, None)
    # KafkaApis.handleDeleteGroupsRequest: DELETE on the group
    assert error_of(admin.delete_consumer_groups([group])[group]) == KafkaError.GROUP_AUTHORIZATION_FAILED
    team.acls("--operation", "Delete", "--group", group)
    assert admin.delete_consumer_groups([group])[group].result(8) is None


def create_topic_v7(team: Team, topic: str) -> Any:
    """The result of CreateTopics v7 for `topic` (2 partitions), as User:orders-app."""
    cls = SPECS[19].request[7]
    request = cls(topics=[cls.fields["topics"].data_class(name=topic, num_partitions=2, replication_factor=1,
                                                          assignments=[], configs=[])],
                  timeout_ms=8000, validate_only=False)
    [result] = team.call(19, 7, request).topics
    return result


def test_a_created_topic_is_described_only_to_a_principal_that_may_describe_its_configs(team: Team) -> None:
    """KIP-525 as the controller answers (ReplicationControlManager.createTopic, ControllerApis.createTopics):
    without DESCRIBE_CONFIGS on the new topic its partitions, replication factor and configs are hidden and
    topic_config_error_code is TOPIC_AUTHORIZATION_FAILED."""
    hidden, shown = team.name("hidden"), team.name("shown")
    team.acls("--operation", "Create", "--topic", team.prefix, "--resource-pattern-type", "prefixed")
    result = create_topic_v7(team, hidden)
    assert (result.name, result.error_code, result.topic_config_error_code) == (hidden, 0, 29)
    assert (result.num_partitions, result.replication_factor, list(result.configs)) == (-1, -1, [])
    team.acls("--operation", "DescribeConfigs", "--topic", shown)
    result = create_topic_v7(team, shown)
    assert (result.error_code, result.topic_config_error_code, result.num_partitions) == (0, 0, 2)


def test_group_configs_need_describe_configs_and_alter_configs_on_the_group(team: Team) -> None:
    """Group configs (KIP-848, Kafka 3.8+; resource type 32) are checked on the group and denied with
    GROUP_AUTHORIZATION_FAILED (ControllerApis.authorizeAlterResource, KafkaApis). Tansu has no group
    configs: only the gateway's answers to a principal without the ACL are checked."""
    group = team.name("orders-app")
    describe = SPECS[32].request[4]
    resource = describe.fields["resources"].data_class(resource_type=32, resource_name=group, configuration_keys=None)
    [described] = team.call(32, 4, describe(resources=[resource], include_synonyms=False,
                                              include_documentation=False)).results
    assert (described.resource_type, described.resource_name, described.error_code) == (32, group, 30)
    alter = SPECS[44].request[1]
    entry = alter.fields["resources"].data_class
    config = entry.fields["configs"].data_class
    request = alter(resources=[entry(resource_type=32, resource_name=group, configs=[
        config(name="consumer.session.timeout.ms", config_operation=0, value="45000")])], validate_only=True)
    [altered] = team.call(44, 1, request).responses
    assert (altered.resource_type, altered.resource_name, altered.error_code) == (32, group, 30)
