"""`kgov up`'s broker relays: what asking the kernel who is at the other end costs, with many sockets open.

The sandboxed broker's relay (kgov.broker_sandbox.OwnerOnlyRelay) looks up the uid owning the peer of every
connection it accepts. Two ways: `proc` scans /proc/net/tcp and /proc/net/tcp6 (every socket of the host,
so any local user can make it slower by opening sockets); `sock_diag` asks netlink for the one socket by its
4-tuple. The plain broker's relay (PortHoldingRelay) asks, for every connection, who owns the listeners on
the broker's port: `sock_diag` dumps the listening sockets; `proc` reads the tables' listeners, which Linux
writes first, and stops after them; `proc-whole` reads every line (what `proc` did before, and still does
where /proc lists sockets in another order).
This opens `--sockets` loopback sockets (half of them connected pairs), then times each lookup on one
accepted connection (or its listener's port) `--rounds` times and prints the median and p99 per lookup,
and the ratios.

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

from kgov.broker_sandbox import diag_listener_uids, diag_peer_uid, proc_listener_uids, proc_peer_uid


def _open_sockets(stack: contextlib.ExitStack, count: int) -> None:
    server = stack.enter_context(socket.create_server(("127.0.0.1", 0), backlog=4096))
    address = server.getsockname()[:2]
    for _ in range(count // 2):
        client = stack.enter_context(socket.create_connection(address))
        accepted, _ = server.accept()
        stack.enter_context(accepted)
        del client


def _time(lookup: Callable[[], object], rounds: int) -> list[float]:
    took = []
    for _ in range(rounds):
        start = time.perf_counter()
        assert lookup() not in (None, set())  # found: uid 0 counts, an empty set of listeners does not
        took.append(time.perf_counter() - start)
    return took


def _report(title: str, lookups: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    print(title)
    medians = {}
    for name, lookup in lookups.items():
        took = sorted(_time(lookup, rounds))
        medians[name] = statistics.median(took)
        p99 = took[min(len(took) - 1, int(len(took) * 0.99))]
        print(f"{name:>10}: median {medians[name] * 1e3:8.3f} ms   p99 {p99 * 1e3:8.3f} ms   ({rounds} lookups)")
    return medians


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
        peer = _report("peer of a connection (OwnerOnlyRelay):",
                       {"proc": lambda: proc_peer_uid(conn), "sock_diag": lambda: diag_peer_uid(conn)}, args.rounds)
        print(f"proc / sock_diag (median): {peer['proc'] / peer['sock_diag']:.0f}x")
        port = server.getsockname()[1]
        listener = _report("listeners of a port (PortHoldingRelay):", {
            "proc-whole": lambda: proc_listener_uids(port, whole_tables=True),
            "proc": lambda: proc_listener_uids(port),
            "sock_diag": lambda: diag_listener_uids(port)}, args.rounds)
        print(f"proc-whole / proc (median): {listener['proc-whole'] / listener['proc']:.0f}x; "
              f"proc / sock_diag: {listener['proc'] / listener['sock_diag']:.1f}x")


if __name__ == "__main__":
    main()
