"""What sealing the Kafka audit topic's records costs (audit.kafka_seal), per event, and what verifying costs.

    .venv/bin/python bench/audit_kafka_seal_bench.py [--events 20000] [--rounds 5]

Each round seals `--events` CloudEvents (the JSON the Kafka sink ships, built before the timer, about 450
bytes each as in bench/audit_kafka_sink_bench.py) with one `Sealer`, as the sink's shipper thread does
for each record the first time it sends it: SHA-256 of the value, the Ed25519 signature, SHA-256 of the
signed message for the next link. Then `verify_records` over the same records (what `kgov audit verify
--kafka-bootstrap` does per record once it has consumed it: parse, verify the signature, chain
bookkeeping), and, for scale, the Ed25519 signature alone over a 32-byte message. Printed: microseconds
per event, best round (median of rounds). Pinned to one core where the OS allows.
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

from audit.kafka_seal import SEAL_HEADER, Sealer, TopicRecord, key_id, verify_records
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
    seal_us: list[float] = []
    verify_us: list[float] = []
    sign_us: list[float] = []
    for _ in range(args.rounds):
        sealer = Sealer(key, "bench-node")
        start = time.perf_counter()
        seals = [sealer.seal(v) for v in values]
        seal_us.append((time.perf_counter() - start) / len(values) * 1e6)
        records = [TopicRecord(0, i, v, (("content-type", b"application/cloudevents+json"), (SEAL_HEADER, s)))
                   for i, (v, s) in enumerate(zip(values, seals, strict=True))]
        start = time.perf_counter()
        report = verify_records(records, keys)
        verify_us.append((time.perf_counter() - start) / len(values) * 1e6)
        if not report.ok or report.chains[0].verified != len(values):
            raise SystemExit(f"the sealed records do not verify: {report}")
        message = b"m" * 32
        start = time.perf_counter()
        for _ in range(len(values)):
            key.sign(message)
        sign_us.append((time.perf_counter() - start) / len(values) * 1e6)
    size = statistics.mean(len(v) for v in values)
    print(f"{args.events} events of {size:.0f} bytes on average, {args.rounds} rounds; microseconds per event, "
          f"best round (median); load average {os.getloadavg()[0]:.1f}; seal header {len(seals[0])} bytes")
    for label, times in (("seal (Sealer.seal)", seal_us), ("verify (verify_records)", verify_us),
                         ("Ed25519 sign alone, 32 bytes", sign_us)):
        print(f"  {label:32s} {min(times):7.2f} ({statistics.median(times):7.2f})")


if __name__ == "__main__":
    main()
