"""`kgov up`'s broker relay: what asking the kernel who opened a connection costs, with many sockets open.

The relay (kgov.broker_sandbox.OwnerOnlyRelay) looks up the uid owning the peer of every connection it
accepts. Two ways: `proc` scans /proc/net/tcp and /proc/net/tcp6 (every socket of the host, so any local
user can make it slower by opening sockets); `sock_diag` asks netlink for the one socket by its 4-tuple.
This opens `--sockets` loopback sockets (half of them connected pairs), then times each lookup on one
accepted connection `--rounds` times and prints the median and p99 per lookup, and their ratio.

    .venv/bin/python bench/broker_relay_lookup_bench.py [--sockets 8000] [--rounds 200]

Needs an open-file limit above `--sockets` (`ulimit -n`).
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kgov.broker_sandbox import diag_peer_uid, proc_peer_uid


def _open_sockets(stack: contextlib.ExitStack, count: int) -> None:
    server = stack.enter_context(socket.create_server(("127.0.0.1", 0), backlog=4096))
    address = server.getsockname()[:2]
    for _ in range(count // 2):
        client = stack.enter_context(socket.create_connection(address))
        accepted, _ = server.accept()
        stack.enter_context(accepted)
        del client


def _time(lookup: Callable[[socket.socket], int | None], conn: socket.socket, rounds: int) -> list[float]:
    took = []
    for _ in range(rounds):
        start = time.perf_counter()
        assert lookup(conn) is not None
        took.append(time.perf_counter() - start)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sockets", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        _open_sockets(stack, args.sockets)
        listed = sum(len(Path(t).read_text().splitlines()) - 1 for t in ("/proc/net/tcp", "/proc/net/tcp6"))
        server = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
        stack.enter_context(socket.create_connection(server.getsockname()[:2]))
        conn = stack.enter_context(server.accept()[0])
        print(f"sockets opened by this bench: {args.sockets}; listed in /proc/net/tcp{{,6}}: {listed}")
        medians = {}
        for name, lookup in (("proc", proc_peer_uid), ("sock_diag", diag_peer_uid)):
            took = sorted(_time(lookup, conn, args.rounds))
            medians[name] = statistics.median(took)
            p99 = took[min(len(took) - 1, int(len(took) * 0.99))]
            print(f"{name:>9}: median {medians[name] * 1e3:8.3f} ms   p99 {p99 * 1e3:8.3f} ms   "
                  f"({args.rounds} lookups)")
        print(f"proc / sock_diag (median): {medians['proc'] / medians['sock_diag']:.0f}x")


if __name__ == "__main__":
    main()
