"""Kafka API keys -> `ApiKeys.name`, as the authorizer log prints it (`for request = Fetch`)."""

from __future__ import annotations

from typing import Final

API_NAMES: Final[dict[int, str]] = dict(enumerate((
    "Produce", "Fetch", "ListOffsets", "Metadata", "LeaderAndIsr", "StopReplica", "UpdateMetadata",
    "ControlledShutdown", "OffsetCommit", "OffsetFetch", "FindCoordinator", "JoinGroup", "Heartbeat",
    "LeaveGroup", "SyncGroup", "DescribeGroups", "ListGroups", "SaslHandshake", "ApiVersions", "CreateTopics",
    "DeleteTopics", "DeleteRecords", "InitProducerId", "OffsetForLeaderEpoch", "AddPartitionsToTxn",
    "AddOffsetsToTxn", "EndTxn", "WriteTxnMarkers", "TxnOffsetCommit", "DescribeAcls", "CreateAcls",
    "DeleteAcls", "DescribeConfigs", "AlterConfigs", "AlterReplicaLogDirs", "DescribeLogDirs",
    "SaslAuthenticate", "CreatePartitions", "CreateDelegationToken", "RenewDelegationToken",
    "ExpireDelegationToken", "DescribeDelegationToken", "DeleteGroups", "ElectLeaders",
    "IncrementalAlterConfigs", "AlterPartitionReassignments", "ListPartitionReassignments", "OffsetDelete",
    "DescribeClientQuotas", "AlterClientQuotas", "DescribeUserScramCredentials", "AlterUserScramCredentials",
    "Vote", "BeginQuorumEpoch", "EndQuorumEpoch", "DescribeQuorum", "AlterPartition", "UpdateFeatures",
    "Envelope", "FetchSnapshot", "DescribeCluster", "DescribeProducers", "BrokerRegistration",
    "BrokerHeartbeat", "UnregisterBroker", "DescribeTransactions", "ListTransactions", "AllocateProducerIds",
    "ConsumerGroupHeartbeat", "ConsumerGroupDescribe", "ControllerRegistration", "GetTelemetrySubscriptions",
    "PushTelemetry", "AssignReplicasToDirs", "ListClientMetricsResources", "DescribeTopicPartitions",
    "ShareGroupHeartbeat", "ShareGroupDescribe", "ShareFetch", "ShareAcknowledge", "AddRaftVoter",
    "RemoveRaftVoter", "UpdateRaftVoter", "InitializeShareGroupState", "ReadShareGroupState",
    "WriteShareGroupState", "DeleteShareGroupState", "ReadShareGroupStateSummary",
)))


def request_name(api_key: int) -> str:
    """The Kafka request name, or `Unknown(<key>)`; HTTP callers pass -1 and get `Http`."""
    if api_key < 0:
        return "Http"
    return API_NAMES.get(api_key, f"Unknown({api_key})")
