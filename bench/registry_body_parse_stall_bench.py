"""How long a large registry request body stalls every other request of the control plane while it is
parsed: one client posts 8 MiB JSON bodies (a long array of small numbers, the slowest JSON to parse per
byte) to `/subjects/{subject}/versions` while another asks `GET /health` in a loop; prints the worst and
the 99th-percentile latency of the health checks, and the same without the large bodies. Real uvicorn on
loopback, SQLite. Run from the repository root: `python bench/registry_body_parse_stall_bench.py`."""

from __future__ import annotations

import json
import logging
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kgov.app import build_app
from kgov.settings import Settings
from kgov.up import control_plane
from tests.support.ports import free_port

ADMIN = ("admin", "correct-horse-battery")
BODY_BYTES = 8 * 1024 * 1024
POSTS = 3


def _health_latencies(base: str, stop: threading.Event) -> list[float]:
    out: list[float] = []
    with httpx.Client(base_url=base, timeout=30) as client:
        while not stop.is_set():
            started = time.perf_counter()
            client.get("/health")
            out.append(time.perf_counter() - started)
            time.sleep(0.002)
    return out


def _run(base: str, large: bytes | None) -> tuple[list[float], list[float]]:
    stop = threading.Event()
    result: list[list[float]] = []
    prober = threading.Thread(target=lambda: result.append(_health_latencies(base, stop)))
    prober.start()
    posts: list[float] = []
    with httpx.Client(base_url=base, auth=ADMIN, timeout=120) as client:
        for _ in range(POSTS):
            started = time.perf_counter()
            if large is None:
                time.sleep(0.3)
            else:
                r = client.post("/subjects/s/versions", content=large,
                                headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
                assert r.status_code == 200, r.text[:200]  # the extra field is ignored, as Confluent does
                posts.append(time.perf_counter() - started)
    stop.set()
    prober.join()
    return result[0], posts


def main() -> None:
    logging.disable(logging.WARNING)
    numbers = "1," * ((BODY_BYTES - 40) // 2)
    large = ('{"schema": "\\"int\\"", "x": [' + numbers + '1]}').encode()
    with tempfile.TemporaryDirectory() as data:
        settings = Settings(data_dir=Path(data), admin={"user": ADMIN[0], "password": ADMIN[1]},
                            sasl={"delegation_token_secret_key": "k" * 32},
                            registry={"max_body_bytes": BODY_BYTES}, http_request_max_bytes=BODY_BYTES)
        port = free_port()
        with control_plane(build_app(settings), "127.0.0.1", port, max_body_bytes=BODY_BYTES):
            base = f"http://127.0.0.1:{port}"
            started = time.perf_counter()
            json.loads(large)
            print(f"one json.loads of the {len(large) / 2**20:.1f} MiB body: {time.perf_counter() - started:.3f} s")
            for name, body in (("idle", None), ("with 8 MiB bodies", large)):
                latencies, posts = _run(base, body)
                lat = sorted(latencies)
                p99 = lat[int(len(lat) * 0.99) - 1]
                print(f"GET /health {name}: {len(lat)} requests, median {statistics.median(lat) * 1e3:.1f} ms, "
                      f"p99 {p99 * 1e3:.1f} ms, worst {lat[-1] * 1e3:.1f} ms"
                      + (f"; each large POST took {', '.join(f'{p:.1f}' for p in posts)} s" if posts else ""))


if __name__ == "__main__":
    main()
