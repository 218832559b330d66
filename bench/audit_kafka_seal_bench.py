"""What sealing the Kafka audit topic's records costs (audit.kafka_seal), per event, and what verifying costs.

    .venv/bin/python bench/audit_kafka_seal_bench.py [--events 20000] [--rounds 5]

Each round seals `--events` CloudEvents (the JSON the Kafka sink ships, built before the timer, about 450
bytes each as in bench/audit_kafka_sink_bench.py) with one `Sealer` per checkpoint interval, as the sink's
shipper thread does under sustained load (its queue never empty, `last=False`) for each record the first
time it sends it: SHA-256 of the value, SHA-256 of the message for the link, and on a checkpoint the
Ed25519 signature. Intervals: 1 (every record signed: what seal version 1 did), 100, 1000 (the default,
`CHECKPOINT_RECORDS`). Then `verify_records` over the records of intervals 1 and 1000 (what `kgov audit
verify --kafka-bootstrap` does once it has consumed them: parse, verify the signatures, walk the chain),
and, for scale, the Ed25519 signature alone over a 32-byte message. Printed: microseconds per event, best
round (median of rounds). Pinned to one core where the OS allows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from audit.kafka_seal import CHECKPOINT_RECORDS, SEAL_HEADER, Sealer, TopicRecord, key_id, verify_records
from bench.audit_integrity_bench import event, pin_to_one_core


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    pin_to_one_core()
    key = Ed25519PrivateKey.generate()
    keys = {key_id(key.public_key()): key.public_key()}
    values = [event(i).to_json().encode() for i in range(args.events)]
    intervals = sorted({1, 100, CHECKPOINT_RECORDS})
    seal_us: dict[int, list[float]] = {n: [] for n in intervals}
    verify_us: dict[int, list[float]] = {n: [] for n in (1, CHECKPOINT_RECORDS)}
    sign_us: list[float] = []
    sizes: dict[int, float] = {}
    for _ in range(args.rounds):
        for n in intervals:
            # checkpoint_s out of the way: the interval alone decides, as under load at this rate
            sealer = Sealer(key, "bench-node", checkpoint_records=n, checkpoint_s=3600)
            start = time.perf_counter()
            seals = [sealer.seal(v, last=False) for v in values[:-1]] + [sealer.seal(values[-1])]
            seal_us[n].append((time.perf_counter() - start) / len(values) * 1e6)
            sizes[n] = statistics.mean(len(s) for s in seals)
            if n not in verify_us:
                continue
            records = [TopicRecord(0, i, v, (("content-type", b"application/cloudevents+json"), (SEAL_HEADER, s)))
                       for i, (v, s) in enumerate(zip(values, seals, strict=True))]
            start = time.perf_counter()
            report = verify_records(records, keys)
            verify_us[n].append((time.perf_counter() - start) / len(values) * 1e6)
            if not report.ok or report.chains[0].verified != len(values):
                raise SystemExit(f"the sealed records do not verify: {report}")
        message = b"m" * 32
        start = time.perf_counter()
        for _ in range(len(values)):
            key.sign(message)
        sign_us.append((time.perf_counter() - start) / len(values) * 1e6)
    size = statistics.mean(len(v) for v in values)
    print(f"{args.events} events of {size:.0f} bytes on average, {args.rounds} rounds; microseconds per event, "
          f"best round (median); load average {os.getloadavg()[0]:.1f}")
    rows = [*((f"seal, a signature every {n} (header {sizes[n]:.0f} B avg)", seal_us[n]) for n in intervals),
            *((f"verify, a signature every {n}", verify_us[n]) for n in verify_us),
            ("Ed25519 sign alone, 32 bytes", sign_us)]
    for label, times in rows:
        print(f"  {label:46s} {min(times):7.2f} ({statistics.median(times):7.2f})")

if __name__ == "__main__":
    main()
