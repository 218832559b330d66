"""The OPA-compatible decision API over HTTP, as a broker running the opa-kafka-plugin calls it.

The plugin (StyraInc/opa-kafka-plugin, OpaAuthorizer.scala) POSTs one `{"input": ...}` per decision on a
cache miss, over a keep-alive `java.net.http.HttpClient` connection, and waits for the answer: a Kafka
request thread is blocked for that long. So the figures that matter are the latency of one call on a
warm connection, and how many calls per second one kgov process answers.

Set-up: the ACLs of bench/authz_bench.py's scenario (Kafka's AuthorizerBenchmark shape, deny 20 %; 1,000
resources = 13,399 ACLs by default: a decision's cost does not grow with the ACL count, see authz_bench,
while writing them through the API does) are written to a fresh SQLite database, then the control plane (`build_app` under uvicorn, as `kgov serve`
runs it, audit to files on) is started in a child process. The client uses raw keep-alive sockets and
pre-encoded requests, so that its own work stays small (it shares the machine with the server).

Cases, each as the plugin's document with `header`, `clientInformation` and `connectionId`:
- allowed: READ on TOPIC `foo-bar35_resource-1` by `User:test-user` from /127.0.0.1, the same document
  every time (kgov's decision cache hits; allowed decisions are not audited by default);
- miss: the same, from a different client address each time (`/10.a.b.c`: a decision-cache miss);
- denied+audited: `User:nobody`, no ACL: DENIED, written to both audit files every time;
- batch of 100 (kgov's `/batch`, not used by the plugin): 100 allowed documents per call.

    .venv/bin/python bench/decision_api_bench.py [--resources 1000] [--requests 3000] [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.authz_bench import RESOURCE_PREFIX, scenario_acls

ALLOW = "/v1/data/kafka/authz/allow"
BATCH = "/v1/data/kafka/authz/batch"


def document(name: str, principal: str = "test-user", address: str = "/127.0.0.1") -> dict[str, Any]:
    return {
        "action": {"operation": "READ", "resourceReferenceCount": 1, "logIfAllowed": True, "logIfDenied": True,
                   "resourcePattern": {"resourceType": "TOPIC", "name": name, "patternType": "LITERAL",
                                       "unknown": False}},
        "requestContext": {"clientAddress": address, "principal": {"principalType": "User", "name": principal},
                           "clientInformation": {"softwareName": "apache-kafka-java", "softwareVersion": "3.7.0"},
                           "connectionId": "127.0.0.1:9092-127.0.0.1:51234-7", "listenerName": "SASL_SSL",
                           "securityProtocol": "SASL_SSL",
                           "header": {"name": {"clientId": "bench", "correlationId": 7, "requestApiKey": 1,
                                               "requestApiVersion": 13}, "headerVersion": 2}},
    }


def http_post(path: str, body: dict[str, Any]) -> bytes:
    payload = json.dumps(body, separators=(",", ":")).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: kgov\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n").encode()
    return head + payload


def serve(data_dir: str, port: int, ready: Any, stop: Any) -> None:
    """The control plane in this (child) process, until `stop` is set."""
    from kgov.app import build_app
    from kgov.settings import Settings
    from kgov.up import control_plane

    settings = Settings(data_dir=Path(data_dir), cluster_id="bench")
    with control_plane(build_app(settings), "127.0.0.1", port):
        ready.set()
        stop.wait()


def load_acls(data_dir: Path, resources: int) -> int:
    from authz.config import AuthzConfig
    from authz.database import open_engine
    from authz.model import Principal
    from authz.service import MAX_ACLS_PER_OPERATION, AuthorizerService
    from kgov.settings import Settings

    engine = open_engine(Settings(data_dir=data_dir).database_url)
    service = AuthorizerService(engine, AuthzConfig())
    service.start(background=False)
    acls = scenario_acls(resources, 20.0)
    for i in range(0, len(acls), MAX_ACLS_PER_OPERATION):
        service.create_acls(acls[i:i + MAX_ACLS_PER_OPERATION], actor=Principal("User", "bench"))
    service.close()
    engine.dispose()
    return len(acls)


class Connection:
    """One keep-alive HTTP/1.1 connection; `call` sends a pre-encoded request and returns the body."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def call(self, request: bytes) -> bytes:
        self.sock.sendall(request)
        while b"\r\n\r\n" not in self.buf:
            self.buf += self._recv()
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(head.decode(errors="replace"))
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        while len(rest) < length:
            rest += self._recv()
        self.buf = rest[length:]
        return rest[:length]

    def _recv(self) -> bytes:
        data = self.sock.recv(65536)
        if not data:
            raise RuntimeError("connection closed")
        return data

    def close(self) -> None:
        self.sock.close()


def latency(port: int, requests: list[bytes], expect: bytes) -> list[float]:
    conn = Connection(port)
    for request in requests[:200]:  # warm-up
        conn.call(request)
    out = []
    for request in requests:
        started = time.perf_counter()
        body = conn.call(request)
        out.append(time.perf_counter() - started)
        if expect not in body:
            raise RuntimeError(f"unexpected answer {body[:200]!r}")
    conn.close()
    return out


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU time of a process so far (Linux /proc): the server's own cost, which a shared
    machine's other load does not inflate the way it inflates wall-clock rates."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def throughput(port: int, request: bytes, connections: int, seconds: float, server_pid: int
               ) -> tuple[float, float, float]:
    """(calls per second, server user and system CPU microseconds per call)."""
    counts = [0] * connections
    stop = time.perf_counter() + seconds

    def run(i: int) -> None:
        conn = Connection(port)
        n = 0
        while time.perf_counter() < stop:
            conn.call(request)
            n += 1
        counts[i] = n
        conn.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(connections)]
    cpu = cpu_seconds(server_pid)
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    calls = sum(counts)
    user, system = cpu_seconds(server_pid)
    return calls / (time.perf_counter() - started), (user - cpu[0]) / calls * 1e6, (system - cpu[1]) / calls * 1e6


def summary(label: str, samples: list[float]) -> None:
    ordered = sorted(samples)

    def p(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3

    print(f"{label:<34} n={len(samples):>6}  mean {statistics.fmean(samples) * 1e3:7.3f} ms  "
          f"p50 {p(0.50):7.3f}  p99 {p(0.99):7.3f}  max {ordered[-1] * 1e3:7.3f} ms  "
          f"({1 / statistics.fmean(samples):,.0f} calls/s on one connection)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resources", type=int, default=1_000)
    parser.add_argument("--requests", type=int, default=3_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=4)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kgov-decision-bench-") as tmp:
        data_dir = Path(tmp)
        started = time.perf_counter()
        acl_count = load_acls(data_dir, args.resources)
        print(f"{acl_count:,} ACLs ({args.resources:,} resources, deny 20 %) written in "
              f"{time.perf_counter() - started:.1f} s; cpus: {os.cpu_count()}, "
              f"load average {os.getloadavg()[0]:.1f}")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        ctx = multiprocessing.get_context("spawn")
        ready, stop = ctx.Event(), ctx.Event()
        server = ctx.Process(target=serve, args=(tmp, port, ready, stop), daemon=True)
        server.start()
        try:
            if not ready.wait(120):
                raise RuntimeError("the control plane did not start")
            name = RESOURCE_PREFIX + "1"
            allowed = http_post(ALLOW, {"input": document(name)})
            n = args.requests
            summary("allowed (decision cached)", latency(port, [allowed] * n, b"true"))
            misses = [http_post(ALLOW, {"input": document(name, address=f"/10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}")})
                      for i in range(n + 200)]
            summary("allowed, decision-cache miss", latency(port, misses[200:], b"true"))
            denied = http_post(ALLOW, {"input": document(name, principal="nobody")})
            summary("denied + audited (2 files)", latency(port, [denied] * n, b"false"))
            batch = http_post(BATCH, {"inputs": [document(name)] * 100})
            batch_lat = latency(port, [batch] * max(1, n // 10), b"true")
            summary("batch of 100 allowed", batch_lat)
            print(f"{'':<34} = {statistics.fmean(batch_lat) / 100 * 1e6:.1f} us per decision in a batch")
            for label, request in (("allowed", allowed), ("denied + audited", denied)):
                for conns in (1, args.connections):
                    rate, user_us, sys_us = throughput(port, request, conns, args.seconds, server.pid or 0)
                    print(f"throughput {label:<18} {conns} connection(s): {rate:>9,.0f} calls/s, server CPU "
                          f"{user_us + sys_us:,.0f} us per call (user {user_us:,.0f}, system {sys_us:,.0f}; "
                          f"{1e6 / (user_us + sys_us):,.0f} calls per CPU-second)")
        finally:
            stop.set()
            server.join(15)


if __name__ == "__main__":
    main()
