"""Several kgov processes registering at once against one PostgreSQL: ids unique and stable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("register_worker.py")
ROOT = Path(__file__).resolve().parents[3]


def run_workers(url: str, workers: int, count: int) -> list[list[object]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, str(WORKER), url, str(w), str(count)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for w in range(workers)]
    rows: list[list[object]] = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        rows.extend(json.loads(out))
    return rows


def check(rows: list[list[object]], count: int) -> None:
    ids_of_schema: dict[object, set[object]] = defaultdict(set)
    versions: dict[tuple[object, object], set[object]] = defaultdict(set)
    for subject, n, schema_id, version in rows:
        ids_of_schema[n].add(schema_id)
        versions[(subject, version)].add(n)
    # one id per schema, whoever registered it first; no two schemas share an id
    assert all(len(ids) == 1 for ids in ids_of_schema.values())
    assigned = sorted(next(iter(ids)) for ids in ids_of_schema.values())
    assert assigned == list(range(1, count + 1))
    # a version number names exactly one schema in its subject
    assert all(len(ns) == 1 for ns in versions.values())


@pytest.mark.postgres
@pytest.mark.slow
def test_concurrent_processes_on_postgres(postgres_url: str) -> None:
    count = 24
    check(run_workers(postgres_url, 4, count), count)


@pytest.mark.slow
def test_concurrent_processes_on_sqlite(tmp_path: Path) -> None:
    count = 12
    check(run_workers(f"sqlite:///{tmp_path / 'kgov.db'}", 3, count), count)
