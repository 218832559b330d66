"""What sealing the audit trail costs per record, against the same sink without integrity.

    .venv/bin/python bench/audit_integrity_bench.py [--records 20000] [--rounds 5]

Each round writes `--records` records through the real sinks to a fresh temporary directory (a CloudEvents
`JsonLinesSink` and a Kafka-format `TextLineSink`, 100 MiB rotation so no rotation happens), once plain
and once sealed (`[audit] integrity = true`: SHA-256 of the line, HMAC-SHA-256 chain, a second write and
flush to the chain file). The median microseconds per record of each round, the best round kept; then
`kgov audit verify`'s rate over the sealed files. Writes are flushed, not fsynced, as the sinks do.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from audit.integrity import IntegrityKey, audit_files_in, verify_paths
from audit.kafka_format import authorizer_log_line, log4j_envelope
from audit.model import AuditEvent, authorization_event
from audit.sinks import JsonLinesSink, TextLineSink

KEY = IntegrityKey(b"b" * 43)
TS = datetime(2024, 5, 1, 10, 0, 0, 123000, tzinfo=UTC)


def pin_to_one_core() -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def event(i: int) -> AuditEvent:
    return authorization_event(source="crn:///kafka=c", time=TS, principal=f"User:u{i % 50}", granted=False,
                               operation="Read", resource_type="Topic", resource_name=f"orders-{i % 7}",
                               pattern_type="LITERAL", client_address="10.0.0.1", method_name="kafka.Fetch",
                               rule="DefaultDeny")


def kafka_line(i: int) -> str:
    return log4j_envelope(TS, "INFO", authorizer_log_line(
        principal=f"User:u{i % 50}", allowed=False, operation="READ", host="10.0.0.1", resource_type="TOPIC",
        pattern_type="LITERAL", resource_name=f"orders-{i % 7}", request_name="Fetch", resource_ref_count=1,
        rule="DefaultDeny"), "kafka.authorizer.logger")


def per_record_us(write: Callable[[int], None], n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        write(i)
    return (time.perf_counter() - start) / n * 1e6


def round_(n: int, sealed: bool) -> tuple[float, float, Path]:
    d = Path(tempfile.mkdtemp(prefix="kgov-audit-bench-"))
    key = KEY if sealed else None
    events = JsonLinesSink(d / "events.jsonl", integrity=key)
    lines = TextLineSink(d / "kafka-authorizer.log", integrity=key)
    payload = [event(i) for i in range(n)]  # built outside the timer: the cost measured is the sink's
    texts = [kafka_line(i) for i in range(n)]
    json_us = per_record_us(lambda i: events.write(payload[i]), n)
    text_us = per_record_us(lambda i: lines.write_line(texts[i]), n)
    events.close()
    lines.close()
    return json_us, text_us, d


def cleanup(d: Path) -> None:
    for p in d.iterdir():
        p.unlink()
    d.rmdir()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    pin_to_one_core()
    results: dict[tuple[str, bool], list[float]] = {}
    kept: Path | None = None
    for _ in range(args.rounds):
        for sealed in (False, True):
            json_us, text_us, d = round_(args.records, sealed)
            results.setdefault(("json", sealed), []).append(json_us)
            results.setdefault(("text", sealed), []).append(text_us)
            if sealed and kept is None:
                kept = d
            else:
                cleanup(d)
    print(f"{args.records} records per round, {args.rounds} rounds, one core; microseconds per record "
          f"(best round; median of rounds); load average {os.getloadavg()[0]:.1f}")
    for kind, label in (("json", "JsonLinesSink (CloudEvents)"), ("text", "TextLineSink (Kafka lines)")):
        plain, sealed = results[(kind, False)], results[(kind, True)]
        print(f"  {label:30s} plain {min(plain):6.2f} ({statistics.median(plain):6.2f})   "
              f"sealed {min(sealed):6.2f} ({statistics.median(sealed):6.2f})   "
              f"+{min(sealed) - min(plain):5.2f} us, x{min(sealed) / min(plain):4.2f}")
    assert kept is not None
    files = audit_files_in(kept)
    start = time.perf_counter()
    reports = verify_paths(files, KEY)
    elapsed = time.perf_counter() - start
    records = sum(r.records for r in reports)
    assert all(r.ok for r in reports), reports
    size = sum(p.stat().st_size for p in kept.iterdir() if p.name.startswith("."))
    data = sum(p.stat().st_size for p in kept.iterdir() if not p.name.startswith("."))
    print(f"  verify: {records} records in {elapsed:.2f} s ({records / elapsed:,.0f} records/s); chain files "
          f"{size / records:.0f} bytes per record ({size / data:.0%} of the audit files)")
    cleanup(kept)


if __name__ == "__main__":
    main()
