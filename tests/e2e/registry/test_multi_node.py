"""Two `kgov serve` processes over one PostgreSQL, registering at the same time through HTTP."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.e2e.registry.kgov_process import PASSWORD, kgov_serve

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def schema(n: int) -> str:
    return json.dumps({"type": "record", "name": "M", "fields": [
        {"name": "f", "type": "string"}, {"name": f"g{n}", "type": "int", "default": 0}]})


def test_two_nodes_one_database(postgres_url: str, tmp_path: Path) -> None:
    count = 20
    with kgov_serve(tmp_path / "a", postgres_url) as url_a, kgov_serve(tmp_path / "b", postgres_url) as url_b:
        clients = [httpx.Client(base_url=u, auth=("admin", PASSWORD), timeout=60) for u in (url_a, url_b)]

        def register(job: tuple[int, int]) -> tuple[int, int, int]:
            node, n = job
            r = clients[node].post(f"/subjects/multi-{n % 4}/versions", json={"schema": schema(n)})
            r.raise_for_status()
            return n, r.json()["id"], r.json()["version"]

        jobs = [(node, n) for n in range(count) for node in (0, 1)]  # each schema through both nodes
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(register, jobs))
        ids: dict[int, set[int]] = {}
        for n, schema_id, _ in results:
            ids.setdefault(n, set()).add(schema_id)
        assert all(len(found) == 1 for found in ids.values())
        assert sorted(next(iter(v)) for v in ids.values()) == list(range(1, count + 1))
        # both nodes answer every id the same way, the second from its memory after the first call
        for n, found in ids.items():
            schema_id = next(iter(found))
            bodies = [c.get(f"/schemas/ids/{schema_id}").json() for c in clients for _ in range(2)]
            assert all(b == {"schema": json.dumps(json.loads(schema(n)), separators=(",", ":"))} for b in bodies)
        for subject in range(4):
            versions = [c.get(f"/subjects/multi-{subject}/versions").json() for c in clients]
            assert versions[0] == versions[1] == list(range(1, count // 4 + 1))
        for c in clients:
            c.close()
