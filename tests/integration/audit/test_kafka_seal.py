"""The Kafka audit sink's seals (audit.kafka_seal) on a real broker (Tansu), written by audit.kafka_sink with
each client and checked by `kgov audit verify --kafka-bootstrap`, which reads the topic with each client."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from audit.kafka_seal import SEAL_HEADER, Sealer, parse_seal, public_key_pem
from audit.kafka_sink import CONTENT_TYPE, KafkaSink
from kgov.cli import main
from tests.integration.audit.test_kafka_sink import fast_sink, make_events
from tests.support.audit_topic import create_topic, read_topic
from tests.support.leaks import KAFKA_PYTHON_CONNECT_LEAKS, collect_kafka_python_connect_leaks

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, KafkaProducer

pytestmark = [pytest.mark.broker, KAFKA_PYTHON_CONNECT_LEAKS, pytest.mark.usefixtures("collect_leaks")]
collect_leaks = collect_kafka_python_connect_leaks

CLIENTS = pytest.mark.parametrize("client", ["librdkafka", "kafka-python"])


def public_key_file(tmp_path: Path, key: Ed25519PrivateKey, name: str) -> str:
    path = tmp_path / f"{name}.pem"
    path.write_text(public_key_pem(key))
    return str(path)


def verify(capsys: pytest.CaptureFixture[str], bootstrap: str, topic: str, keys: list[str], *extra: str,
           client: str = "librdkafka") -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["audit", "verify", "--kafka-bootstrap", bootstrap, "--topic", topic, "--timeout", "20",
               "--client", client, *[arg for k in keys for arg in ("--public-key", k)], *extra])
    out, err = capsys.readouterr()
    return rc, out, err


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes, list[tuple[str, bytes]]]]) -> None:
    """Writes records as someone with WRITE on the topic would: (partition, value, headers)."""
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for partition, value, headers in records:
            producer.send(topic, value=value, partition=partition, headers=headers)
        producer.flush(timeout=20)
    finally:
        producer.close(timeout=5)


@CLIENTS
def test_two_writers_seal_their_records_and_the_topic_verifies(
    kafka_broker: str, client: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    topic = create_topic(kafka_broker, partitions=3)
    keys = {"node-a": Ed25519PrivateKey.generate(), "node-b": Ed25519PrivateKey.generate()}
    sources = tuple(f"crn:///kafka={c}" for c in "abcdef")  # each client's partitioner spreads these
    sinks = [fast_sink(kafka_broker, topic, client, sealer=Sealer(key, name)) for name, key in keys.items()]
    for event in make_events(40, sources):
        for sink in sinks:
            sink.write(event)
    for sink in sinks:
        sink.close(timeout_s=20)
        assert sink.stats().shipped == 40

    records = read_topic(kafka_broker, topic, 80)
    assert len(records) == 80 and len({r.partition for r in records}) > 1  # each writer's chain spans partitions
    assert all(r.headers[0] == CONTENT_TYPE and r.headers[1][0] == SEAL_HEADER for r in records)
    seals = [parse_seal(r.headers[1][1]) for r in records]
    assert sorted(s.seq for s in seals) == sorted([*range(40), *range(40)])
    # A link per record, a signature per checkpoint: each attempt's last record once the sink went idle.
    assert all(s.version == 2 for s in seals)
    assert all(s.signature is not None for s in seals if s.seq == 39)  # an idle sink leaves no unsigned tail
    assert sum(s.signature is not None for s in seals) <= 40, "about one signature per attempt, not per record"

    files = [public_key_file(tmp_path, key, name) for name, key in keys.items()]
    rc, out, err = verify(capsys, kafka_broker, topic, files, client=client)
    assert (rc, err) == (0, ""), out
    assert f"topic {topic}: 80 records, 2 chains" in out
    for name in keys:
        assert f"writer {name} epoch " in out
    assert out.count(": OK, 40 records verified (seq 0-39)") == 2
    assert out.count("newest seal: ") == 2

    # A verifier given one node's key only: the other node's records are not trusted.
    rc, out, _ = verify(capsys, kafka_broker, topic, files[:1], client=client)
    assert rc == 1
    assert "FAILED: 40 record(s) whose seal does not verify" in out and "which was not given" in out


@CLIENTS
def test_inserted_changed_and_malformed_records_fail_verification_and_a_replay_is_a_duplicate(
    kafka_broker: str, client: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    topic = create_topic(kafka_broker, partitions=1)
    key = Ed25519PrivateKey.generate()
    sink = fast_sink(kafka_broker, topic, "librdkafka", sealer=Sealer(key, "cp-1"))
    for event in make_events(6):
        sink.write(event)
    sink.close(timeout_s=20)
    sealed = read_topic(kafka_broker, topic, 6)
    pem = public_key_file(tmp_path, key, "cp")
    rc, out, _ = verify(capsys, kafka_broker, topic, [pem], client=client)
    assert rc == 0, out
    anchor = out.split("newest seal: ")[1].split()[0]

    third = sealed[3]
    produce(kafka_broker, topic, [
        (0, b'{"inserted": true}', [CONTENT_TYPE]),
        (0, third.value.replace(b"topic=t3", b"topic=tX"), third.headers),
        (0, third.value, [CONTENT_TYPE, (SEAL_HEADER, b"\x01too short")]),
        (0, sealed[5].value, sealed[5].headers),  # the same record again: as a lost answer's resend
    ])
    rc, out, err = verify(capsys, kafka_broker, topic, [pem], "--anchor", anchor, client=client)
    assert (rc, err) == (1, "")
    assert "OK, 6 records verified (seq 0-5), 1 duplicate(s) sent again" in out
    assert "FAILED: 1 record(s) without a kgov-seal header (unsigned):\n  partition 0 offset 6" in out
    # seq 3 is a link, not a checkpoint (the sink signed the last of its attempt): the changed copy
    # contradicts the link the verified seq 4 carries.
    assert "FAILED: 1 record(s) whose seal does not verify (forged or signed by another key):\n  partition 0 " \
           "offset 7: claims writer cp-1 epoch " in out
    assert "seq 3 unsigned, but the verified seq 4 links to another record" in out
    assert "FAILED: 1 record(s) with a malformed kgov-seal header:\n  partition 0 offset 8: 10 bytes, shorter" in out
    assert f"anchor {anchor}: found" in out


@CLIENTS
def test_lost_reordered_and_cut_records_are_reported(
    kafka_broker: str, client: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """What deleting or moving records would leave (a topic rewritten without some of them): sealed here
    as the sink seals, then produced with some left out or swapped."""
    key = Ed25519PrivateKey.generate()
    pem = public_key_file(tmp_path, key, "gw")
    sealer = Sealer(key, "gw-1")
    values = [f'{{"n":{i}}}'.encode() for i in range(8)]
    seals = [sealer.seal(v) for v in values]
    record = {i: (0, values[i], [CONTENT_TYPE, (SEAL_HEADER, seals[i])]) for i in range(8)}

    topic = create_topic(kafka_broker, partitions=1)
    produce(kafka_broker, topic, [record[i] for i in (0, 1, 2, 4, 6, 5, 7)])
    rc, out, _ = verify(capsys, kafka_broker, topic, [pem], client=client)
    assert rc == 1
    assert "FAILED, 7 records verified (seq 0-7)" in out
    assert "problem: reordered: seq 5 at partition 0 offset 5 comes after seq 6 in partition 0" in out
    assert "problem: 1 record(s) missing (deleted or lost): seq 3" in out

    # The oldest records gone (DeleteRecords, or retention): a failure unless retention is expected; the
    # newest records gone: visible only against an anchor kept from an earlier verify.
    topic = create_topic(kafka_broker, partitions=1)
    produce(kafka_broker, topic, [record[i] for i in (2, 3, 4, 5)])
    rc, out, _ = verify(capsys, kafka_broker, topic, [pem], client=client)
    assert rc == 1 and "problem: the chain's start is missing: its first record is seq 2" in out
    anchor_of_7 = f"gw-1:{sealer.epoch.hex()}:7:{'0' * 64}"
    rc, out, _ = verify(capsys, kafka_broker, topic, [pem], "--missing-start-ok", client=client)
    assert rc == 0 and "note: the chain's start is missing" in out
    rc, out, _ = verify(capsys, kafka_broker, topic, [pem], "--missing-start-ok", "--anchor", anchor_of_7,
                        client=client)
    assert rc == 1 and f"anchor {anchor_of_7}: MISSING" in out


@CLIENTS
def test_records_after_the_last_checkpoint_are_not_yet_signed(
    kafka_broker: str, client: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """A writer stopped under load (killed between checkpoints): its newest records carry their links but no
    signature after them, so `verify` neither passes nor fails them (exit 3). A record changed before the
    checkpoint fails."""
    key = Ed25519PrivateKey.generate()
    pem = public_key_file(tmp_path, key, "gw")
    sealer = Sealer(key, "gw-2", checkpoint_records=4)
    values = [f'{{"n":{i}}}'.encode() for i in range(7)]
    record = [(0, v, [CONTENT_TYPE, (SEAL_HEADER, sealer.seal(v, last=False))]) for v in values]  # signed: 3
    topic = create_topic(kafka_broker, partitions=1)
    produce(kafka_broker, topic, record)
    rc, out, _ = verify(capsys, kafka_broker, topic, [pem], client=client)
    assert rc == 3, out
    assert "OK so far, 4 records verified (seq 0-6), 3 NOT YET SIGNED (seq 4-6: no checkpoint after them yet)" in out
    assert f"newest seal: gw-2:{sealer.epoch.hex()}:3:" in out  # the anchor is the newest verified record
    assert "3 record(s) not yet signed: verify again after their writer's next checkpoint" in out

    changed = create_topic(kafka_broker, partitions=1)
    produce(kafka_broker, changed, [*record[:1], (0, b'{"n":"changed"}', record[1][2]), *record[2:]])
    rc, out, _ = verify(capsys, kafka_broker, changed, [pem], client=client)
    assert rc == 1 and "offset 1: claims writer gw-2 epoch " in out


@CLIENTS
def test_a_missing_topic_is_a_clear_error_and_is_not_created(
    kafka_broker: str, client: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    pem = public_key_file(tmp_path, Ed25519PrivateKey.generate(), "k")
    topic = f"audit-absent-{client}"
    rc, out, err = verify(capsys, kafka_broker, topic, [pem], "--timeout", "3", client=client)
    assert (rc, out) == (2, "")
    assert f"cannot read topic {topic}: topic {topic} does not exist or may not be described" in err
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker)
    try:
        assert topic not in admin.list_topics()
    finally:
        admin.close()


def test_an_unreachable_cluster_and_inconsistent_options_are_usage_errors(
    refused_port: int, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    pem = public_key_file(tmp_path, Ed25519PrivateKey.generate(), "k")
    rc, out, err = verify(capsys, f"127.0.0.1:{refused_port}", "t", [pem], "--timeout", "2")
    assert (rc, out) == (2, "") and "cannot read topic t: " in err
    rc, _, err = verify(capsys, "127.0.0.1:9", "t", [pem], "--security-protocol", "SASL_SSL")
    assert rc == 2 and "set audit.kafka_sasl_username" in err
    rc, _, err = verify(capsys, "127.0.0.1:9", "t", [str(tmp_path / "absent.pem")])
    assert rc == 2 and "cannot read the public key file" in err
    rc, _, err = verify(capsys, "127.0.0.1:9", "t", [pem], "--key", pem)
    assert rc == 2 and "--key is the audit files' chain key" in err
    assert main(["audit", "verify", "--dir", str(tmp_path), "--public-key", pem]) == 2
    assert "--public-key is for a topic: pass --kafka-bootstrap" in capsys.readouterr().err


def test_a_sink_started_from_settings_seals_with_the_generated_key(
    kafka_broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The key handling end to end: the key is generated under the data directory at the first start, the
    public key printed by `kgov audit seal-public-key` verifies the topic."""
    from kgov.settings import Settings

    topic = create_topic(kafka_broker, partitions=1)
    data = tmp_path / "data"
    settings = Settings(data_dir=data, audit={"kafka_bootstrap_servers": kafka_broker, "kafka_topic": topic,
                                              "kafka_seal_writer": "node-7"})
    sink = KafkaSink.from_settings(settings.audit, settings.audit_seal_key(), delivery_timeout_ms=2000)
    assert sink is not None
    for event in make_events(3):
        sink.write(event)
    sink.close(timeout_s=20)
    assert (data / "audit-seal.key").stat().st_mode & 0o777 == 0o600

    monkeypatch.setenv("KGOV_DATA_DIR", str(data))
    capsys.readouterr()
    assert main(["audit", "seal-public-key"]) == 0
    pem = capsys.readouterr().out
    assert pem.startswith("-----BEGIN PUBLIC KEY-----") and "PRIVATE" not in pem
    (tmp_path / "node-7.pem").write_text(pem)
    rc, out, _ = verify(capsys, kafka_broker, topic, [str(tmp_path / "node-7.pem")])
    assert rc == 0 and "writer node-7 epoch " in out and "OK, 3 records verified (seq 0-2)" in out
