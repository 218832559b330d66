"""Memory a snapshot's decision cache keeps, and the cost of a miss, when callers choose the names.

Fills one `AuthorizerData` (100 ACLs) with N decision-cache misses: 1,000 principals, a new client
address and a new resource name of `--name-length` characters each time, every string made fresh by
`json.loads` as the decision API makes them. Prints the cache's entries, the process's RSS growth, what
the byte bound counted (`cached_bytes`; 0 on code without it) and the time per miss.

    PYTHONPATH=. .venv/bin/python bench/decision_cache_memory_bench.py --misses 200000 --name-length 30
    PYTHONPATH=. .venv/bin/python bench/decision_cache_memory_bench.py --misses 20000 --name-length 32767

`--miss-timing` instead times `AuthorizerData.authorize` alone: 100,000 misses (one principal, a new
client address each) on pre-built contexts, then the same 100,000 as hits; min and median of 7 runs.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from authz.decide import AuthorizerData
from authz.model import (
    Acl,
    Action,
    Operation,
    PatternType,
    Permission,
    Principal,
    RequestContext,
    ResourceType,
)


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def miss_timing(acls: list[Acl]) -> None:
    n = 100_000
    ctxs = [RequestContext(Principal("User", "alice"), f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}")
            for i in range(n)]
    actions = [Action(ResourceType.TOPIC, "t5", Operation.READ)]
    misses, hits = [], []
    for _ in range(7):
        data = AuthorizerData.build(acls)
        for runs in (misses, hits):
            started = time.perf_counter()
            for ctx in ctxs:
                data.authorize(ctx, actions)
            runs.append((time.perf_counter() - started) / n * 1e6)
    print(f"miss: min {min(misses):.2f} median {statistics.median(misses):.2f} us; "
          f"hit: min {min(hits):.2f} median {statistics.median(hits):.2f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--misses", type=int, default=200_000)
    parser.add_argument("--name-length", type=int, default=30)
    parser.add_argument("--miss-timing", action="store_true")
    args = parser.parse_args()
    acls = [Acl(ResourceType.TOPIC, f"t{i}", PatternType.LITERAL, "User:alice", "*", Operation.READ,
                Permission.ALLOW) for i in range(100)]
    if args.miss_timing:
        miss_timing(acls)
        return
    data = AuthorizerData.build(acls)
    pad = "x" * max(0, args.name_length - 12)
    before = rss_bytes()
    started = time.perf_counter()
    for i in range(args.misses):
        doc = json.loads(json.dumps({"p": f"user-{i % 1000}", "h": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}",
                                     "n": f"{pad}{i:012d}"}))
        ctx = RequestContext(Principal("User", doc["p"]), doc["h"])
        data.authorize(ctx, [Action(ResourceType.TOPIC, doc["n"], Operation.READ)])
    elapsed = time.perf_counter() - started
    gc.collect()
    grown = rss_bytes() - before
    print(f"{args.misses:,} misses, names of {args.name_length:,} characters: {len(data._decisions):,} decisions "
          f"cached, RSS grew {grown / 2**20:,.1f} MiB, counted {getattr(data, 'cached_bytes', 0) / 2**20:,.1f} MiB, "
          f"{elapsed / args.misses * 1e6:.1f} us per miss (with the JSON round trip)")


if __name__ == "__main__":
    main()
