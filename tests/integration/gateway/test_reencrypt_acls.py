"""`kgov encryption reencrypt` (reencrypt_topic) through the gateway as an application team runs it, with
only the ACLs it grants: the reading consumer's group needs READ too (librdkafka looks up its
coordinator even for assigned partitions), and without it the error says which group, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.serialization import StringSerializer
from confluent_kafka.serializing_producer import SerializingProducer

from encryption import EncryptingSerializer, EncryptionError, LocalKms, RecordKeySerializer
from encryption.reencrypt import Reencryptor, reencrypt_topic
from tests.integration.gateway.team_journey import Team
from tests.integration.gateway.test_proxy import create_topics

pytestmark = [pytest.mark.broker]


def test_reencrypt_names_the_group_it_needs_and_runs_once_granted(team: Team, kafka_broker: str,
                                                                  tmp_path: Path) -> None:
    topic = team.name("secure")
    create_topics(kafka_broker, topic)
    team.acls("--producer", "--topic", topic)
    team.acls("--consumer", "--topic", topic, "--group", team.name("app"))
    kms = LocalKms(tmp_path / "keyring.json")
    kms.create_key("orders")
    producer = SerializingProducer({**team.conf(), "key.serializer": RecordKeySerializer(kms, "orders", StringSerializer()),
                                    "value.serializer": EncryptingSerializer(kms, "orders", StringSerializer())})
    producer.produce(topic, key="k1", value="v1", headers=[])
    assert producer.flush(10) == 0
    kms.rotate_key("orders")

    with pytest.raises(EncryptionError) as refused:
        reencrypt_topic(team.conf(), topic, Reencryptor(kms, "orders"), timeout=10)
    assert f"consumer group 'kgov-reencrypt-{topic}' (GROUP_AUTHORIZATION_FAILED" in str(refused.value)

    team.acls("--operation", "Read", "--group", f"kgov-reencrypt-{topic}")
    report = reencrypt_topic(team.conf(), topic, Reencryptor(kms, "orders"), timeout=10)
    assert (report.read, report.rewritten) == (1, 1)
