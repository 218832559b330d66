"""What one large-schema request costs through the registry's HTTP app (in process, SQLite).

    .venv/bin/python bench/registry_large_schema_bench.py [SHAPE MIB] [--max-body-mib N]

SHAPE: `avro-record` (optional string fields with docs), `json-object` (the same as JSON Schema),
`avro-enum` (one enum, many symbols), `json-enum` (a draft-04 `enum` of small objects). Registers
a first version of about MIB MiB of schema text (parse, meta-schema check, canonical form,
fingerprint, store), then a second version differing in one member (parse again and a BACKWARD
check), and prints the HTTP status, wall and CPU seconds of each. The body limit is raised to
`--max-body-mib` (default 64) so that parsing, not the limit, is measured; with `--max-body-mib 0`
the configured default applies. CPU is the process's (client and server share it). Without
SHAPE and MIB: every shape at 1 MiB.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402

from tests.integration.registry.conftest import basic, build_registry_app  # noqa: E402

SHAPES = ("avro-record", "json-object", "avro-enum", "json-enum")


def schema(shape: str, n: int, changed: bool) -> dict[str, Any]:
    last = n + 1 if changed else n
    if shape == "avro-record":
        return {"type": "record", "name": "Big", "namespace": "com.example", "fields": [
            {"name": f"field_{i}", "type": ["null", "string"], "default": None, "doc": f"documentation {i}"}
            for i in range(last)]}
    if shape == "json-object":
        return {"type": "object", "properties": {
            f"field_{i}": {"type": ["null", "string"], "description": f"documentation {i}"} for i in range(last)}}
    if shape == "avro-enum":
        return {"type": "enum", "name": "E", "symbols": [f"SYMBOL_{i}" for i in range(last)]}
    if shape == "json-enum":
        return {"$schema": "http://json-schema.org/draft-04/schema#", "enum": [{"k": i} for i in range(last)]}
    raise SystemExit(f"unknown shape {shape}")


def members_for(shape: str, size: int) -> int:
    """The member count whose schema text is closest to `size` bytes (a binary search)."""
    low, high = 1, 1
    while len(json.dumps(schema(shape, high, False))) < size:
        high *= 2
    while high - low > 1:
        middle = (low + high) // 2
        if len(json.dumps(schema(shape, middle, False))) < size:
            low = middle
        else:
            high = middle
    return high


def measure(shape: str, mib: float, max_body_mib: float) -> str:
    n = members_for(shape, int(mib * 1024 * 1024))
    schema_type = "AVRO" if shape.startswith("avro") else "JSON"
    bodies = [json.dumps({"schema": json.dumps(schema(shape, n, changed)), "schemaType": schema_type})
              for changed in (False, True)]
    settings = {"max_body_bytes": int(max_body_mib * 1024 * 1024)} if max_body_mib else {}
    line = [f"{shape} members={n} body={len(bodies[0])}B"]
    with tempfile.TemporaryDirectory() as data:
        app = build_registry_app(f"sqlite:///{data}/kgov.db", **settings)
        headers = {**basic("admin"), "content-type": "application/vnd.schemaregistry.v1+json"}
        with TestClient(app, headers=headers) as client:
            client.put("/config/big", json={"compatibility": "BACKWARD"})
            for name, body in zip(("first", "second"), bodies, strict=True):
                wall, cpu = time.perf_counter(), time.process_time()
                answer = client.post("/subjects/big/versions", content=body)
                line.append(f"{name}: HTTP {answer.status_code} {time.perf_counter() - wall:.2f}s wall "
                            f"{time.process_time() - cpu:.2f}s CPU")
        app.state.engine.dispose()
    return "  ".join(line)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("shape", nargs="?", choices=SHAPES)
    parser.add_argument("mib", nargs="?", type=float, default=1.0)
    parser.add_argument("--max-body-mib", type=float, default=64)
    args = parser.parse_args()
    for shape in [args.shape] if args.shape else SHAPES:
        print(measure(shape, args.mib, args.max_body_mib), flush=True)


if __name__ == "__main__":
    main()
