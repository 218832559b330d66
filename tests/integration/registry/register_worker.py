"""Run as a separate process by test_concurrency.py: registers schemas and prints what it got as JSON."""

from __future__ import annotations

import json
import sys

from authz.database import open_engine
from registry.model import RegisterRequest
from registry.service import SchemaRegistry, anyone_may_read
from registry.store import install_schema


def schema(n: int) -> str:
    # all mutually BACKWARD compatible: each adds its own field with a default
    return json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "f", "type": "string"}, {"name": f"g{n}", "type": "int", "default": n}]})


def main(url: str, worker: int, count: int) -> None:
    engine = open_engine(url)
    install_schema(engine)
    registry = SchemaRegistry(engine)
    results = []
    for i in range(count):
        n = (i * 7 + worker) % count  # every worker registers every schema, in a different order
        for subject in (f"shared-{n % 3}", f"own-{worker}"):
            created, _ = registry.register(subject, RegisterRequest(schema(n)), normalize=False,
                                            may_read=anyone_may_read)
            results.append([subject, n, created.schema.id, created.version])
    engine.dispose()
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
