"""Units of `registry.max_diff_work` and CPU one FULL_TRANSITIVE check spends: a new version of a
50-field record against K earlier versions, all differing in their docs only (so every comparison
runs, both ways, and finds them compatible).

    .venv/bin/python bench/registry_check_work_bench.py [avro|json K]   (default: both, K = 100)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from registry.compat import CompatibilityLevel, WorkBudget, check_compatibility
from registry.schemas import ParsedSchema, SchemaType, parse_schema


def avro(version: int) -> ParsedSchema:
    fields = [{"name": f"f{i}", "type": ["null", "string"], "default": None, "doc": f"v{version}"} for i in range(50)]
    return parse_schema(SchemaType.AVRO, json.dumps({"type": "record", "name": "R", "fields": fields}))


def json_schema(version: int) -> ParsedSchema:
    properties = {f"f{i}": {"type": ["null", "string"], "description": f"v{version}"} for i in range(50)}
    return parse_schema(SchemaType.JSON, json.dumps({"type": "object", "properties": properties}))


def main() -> None:
    runs = [(sys.argv[1], int(sys.argv[2]))] if len(sys.argv) == 3 else [("avro", 100), ("json", 100)]
    for kind, count in runs:
        measure(kind, count)


def measure(kind: str, count: int) -> None:
    make = avro if kind == "avro" else json_schema
    versions = [make(v) for v in range(count)]
    budget = WorkBudget(10**9)
    started = time.process_time()
    messages = check_compatibility(make(count), versions, CompatibilityLevel.FULL_TRANSITIVE, budget=budget)
    cpu = time.process_time() - started
    print(f"{kind} versions={count} compatible={not messages} units={budget.spent} CPU={cpu:.3f}s "
          f"({cpu / budget.spent * 1e6:.1f} us/unit)")


if __name__ == "__main__":
    main()
