"""What shipping the audit trail to a Kafka topic costs a request, and how fast events reach the topic.

    .venv/bin/python bench/audit_kafka_sink_bench.py [--events 20000] [--rounds 3] [--partitions 1] [--plain]
        [--relayed] [--client both|librdkafka|kafka-python] [--seal]

Starts a real Tansu broker (memory storage) as the tests do: by default listening itself on a loopback
port (tests.support.tansu.tansu_broker_advertising, as a broker elsewhere would be); with `--relayed` as
the session's `kafka_broker` fixture does (tests.support.tansu.tansu_broker: `kgov up`'s embedded broker,
behind the loopback relay `kgov up` holds in its own process, here the benchmark's, whose thread then
competes with the writes for the interpreter). Each round writes `--events` CloudEvents, built before the
timer, through `MultiSink` to a fresh temporary directory; the kinds of round alternate:

- baseline: the file sink alone (`JsonLinesSink`, sealed as `[audit] integrity = true` unless `--plain`),
  as kgov writes with `[audit] kafka_bootstrap_servers` unset;
- the same file sink and `audit.kafka_sink.KafkaSink` with its shipper thread not started: what a write
  itself does for Kafka (serialise the event again, append it to the buffer);
- the same file sink and a shipping `KafkaSink` to a new topic, per client (`--client`, default both, side
  by side in one run): the shipper runs in the writing process as in kgov. With kafka-python (pure Python)
  a write also waits for the interpreter its producer holds; librdkafka's I/O threads are C and release it;
- with `--seal`, also a shipping `KafkaSink` per client whose records are sealed (audit.kafka_seal: a hash
  link per record, an Ed25519 signature per checkpoint, on the shipper thread), beside the unsealed one;
  and one whose `Sealer` signs every record (`checkpoint_records=1`: the work seal version 1 did per
  record), so before and after are measured in one run. The sealed topics are read back and verified
  (`verify_records`): every record verified, none left unsigned.

Printed per kind: microseconds per `write` on the request path (best round; median of rounds) and the
difference and ratio to the baseline; then how long after the first write the broker had acknowledged
the last event (`stats().shipped`), as events per second, and how many distinct events the topic holds,
read back with kafka-python after the round: all of them, once each. Nothing is pinned to a core.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from audit.integrity import IntegrityKey
from audit.kafka_seal import SEAL_HEADER, Sealer, TopicRecord, key_id, verify_records
from audit.kafka_sink import KafkaClient, KafkaSink
from audit.model import AuditEvent, authorization_event
from audit.sinks import JsonLinesSink, MultiSink
from tests.support.audit_topic import create_topic, read_topic
from tests.support.tansu import tansu_broker, tansu_broker_advertising

KEY = IntegrityKey(b"b" * 43)
TS = datetime(2024, 5, 1, 10, 0, 0, 123000, tzinfo=UTC)


def event(i: int) -> AuditEvent:
    return authorization_event(source=f"crn:///kafka=c{i % 3}", time=TS, principal=f"User:u{i % 50}",
                               granted=False, operation="Read", resource_type="Topic",
                               resource_name=f"orders-{i % 7}", pattern_type="LITERAL", client_address="10.0.0.1",
                               method_name="kafka.Fetch", rule="DefaultDeny")


@dataclass(frozen=True, slots=True)
class Round:
    write_us: float
    shipped_per_s: float | None = None  # events acknowledged per second, first write to last acknowledgement
    on_topic: int | None = None


# What a round writes to: the file sink alone; with a Kafka sink whose shipper thread is not started
# (the request path's own work: serialising and buffering the event); with a Kafka sink shipping, per client.
CLIENTS: tuple[KafkaClient, ...] = ("kafka-python", "librdkafka")
LABELS = {"file": "file sink alone", "queued": "+ KafkaSink, shipper stopped",
          **{f"shipped:{c}": f"+ KafkaSink shipping, {c}" for c in CLIENTS},
          **{f"sealed:{c}": f"+ KafkaSink shipping sealed, {c}" for c in CLIENTS},
          **{f"signed:{c}": f"+ shipping, each record signed, {c}" for c in CLIENTS}}
SEAL_KEY = Ed25519PrivateKey.generate()
SEAL_KEYS = {key_id(SEAL_KEY.public_key()): SEAL_KEY.public_key()}


def one_round(kind: str, bootstrap: str, events: list[AuditEvent], sealed: bool, partitions: int) -> Round:
    directory = Path(tempfile.mkdtemp(prefix="kgov-audit-kafka-bench-"))
    try:
        file = JsonLinesSink(directory / "events.jsonl", integrity=KEY if sealed else None)
        topic = create_topic(bootstrap, partitions=partitions, prefix="audit-bench-")
        shipping = kind.startswith(("shipped:", "sealed:", "signed:"))
        client: KafkaClient = "librdkafka" if kind.endswith(":librdkafka") else "kafka-python"
        sealer = Sealer(SEAL_KEY, "bench") if kind.startswith("sealed:") else Sealer(
            SEAL_KEY, "bench", checkpoint_records=1) if kind.startswith("signed:") else None
        kafka = KafkaSink(bootstrap, topic, buffer_bytes=256 * 1024 * 1024, client=client, start=shipping,
                          sealer=sealer)
        audit = MultiSink([file] if kind == "file" else [file, kafka])
        start = time.perf_counter()
        for e in events:
            audit.write(e)
        write_us = (time.perf_counter() - start) / len(events) * 1e6
        file.close()
        if not shipping:
            logging.getLogger("kgov.audit.kafka").setLevel(logging.ERROR)  # "not shipped": as intended here
            kafka.close(timeout_s=0)
            logging.getLogger("kgov.audit.kafka").setLevel(logging.NOTSET)
            return Round(write_us)
        deadline = time.monotonic() + 300
        while kafka.stats().shipped < len(events) and time.monotonic() < deadline:
            time.sleep(0.002)
        shipped_s = time.perf_counter() - start
        kafka.close(timeout_s=5)
        stats = kafka.stats()
        if (stats.shipped, stats.delivery_failures, stats.buffer_full) != (len(events), 0, 0):
            raise SystemExit(f"the Kafka sink did not ship every event once: {stats}")
        # Read back, not the end offsets: Tansu's ListOffsets (latest) answered 4,353 and 4,726 for 5,000
        # records at offsets 0-4,999 here (memory storage, batches of many records).
        records = read_topic(bootstrap, topic, len(events), timeout=120)
        if len(records) != len(events):
            raise SystemExit(f"the topic holds {len(records)} records for {len(events)} events")
        if sealer is not None:
            report = verify_records((TopicRecord(r.partition, r.offset, r.value, tuple(r.headers)) for r in records),
                                    SEAL_KEYS)
            signed = sum(1 for r in records if len(dict(r.headers)[SEAL_HEADER]) > sealer.size - 64)
            if not report.ok or report.pending or sum(c.verified for c in report.chains) != len(events):
                raise SystemExit(f"the sealed topic does not verify whole: {report}")
            print(f"  ({kind}: {signed} of {len(records)} records signed)", file=sys.stderr)
        return Round(write_us, len(events) / shipped_s, len({r.value for r in records}))
    finally:
        shutil.rmtree(directory)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--plain", action="store_true", help="the file sink without integrity (chain files)")
    parser.add_argument("--relayed", action="store_true", help="the broker behind kgov up's in-process relay")
    parser.add_argument("--client", choices=("both", *CLIENTS), default="both",
                        help="the shipping rounds' producer (both: one round of each per round)")
    parser.add_argument("--seal", action="store_true", help="also ship with sealed records, per client")
    args = parser.parse_args()
    clients = CLIENTS if args.client == "both" else (args.client,)
    kinds = ("file", "queued", *(f"shipped:{c}" for c in clients),
             *(f"{k}:{c}" for c in clients for k in ("sealed", "signed") if args.seal))
    events = [event(i) for i in range(args.events)]
    sealed = not args.plain
    rounds: dict[str, list[Round]] = {kind: [] for kind in kinds}
    broker = tansu_broker() if args.relayed else tansu_broker_advertising()
    with broker as address:
        bootstrap = address if isinstance(address, str) else f"{address[0]}:{address[1]}"
        for client in clients:  # warm-up: connections, metadata
            one_round(f"shipped:{client}", bootstrap, events[:200], sealed, args.partitions)
        for _ in range(args.rounds):
            for kind in kinds:
                rounds[kind].append(one_round(kind, bootstrap, events, sealed, args.partitions))
    print(f"{args.events} events per round, {args.rounds} rounds, {args.partitions} partition(s), file sink "
          f"{'sealed' if sealed else 'plain'}, broker {'relayed' if args.relayed else 'direct'}; microseconds per "
          f"write (best round; median of rounds); load average {os.getloadavg()[0]:.1f}")
    base = min(r.write_us for r in rounds["file"])
    for kind in kinds:
        best = min(r.write_us for r in rounds[kind])
        ratio = "" if kind == "file" else f"   {best - base:+7.2f} us, x{best / base:4.2f}"
        print(f"  {LABELS[kind]:40s} {best:7.2f} ({statistics.median(r.write_us for r in rounds[kind]):7.2f}){ratio}")
    shipping = [k for k in kinds if k.startswith(("shipped:", "sealed:", "signed:"))]
    for kind in shipping:
        shipped = rounds[kind]
        rates = [r.shipped_per_s or 0.0 for r in shipped]
        how = {"sealed": " sealed", "signed": " sealed, each record signed"}.get(kind.split(":")[0], "")
        print(f"  shipped to the topic by {kind.split(':')[1]}{how}: "
              f"{max(rates):,.0f} events/s (median {statistics.median(rates):,.0f}),"
              f" first write to last acknowledgement; on the topic per round: {[r.on_topic for r in shipped]}")
    if any(r.on_topic != args.events for k in shipping for r in rounds[k]):
        raise SystemExit("the topic does not hold exactly the events written")


if __name__ == "__main__":
    main()
