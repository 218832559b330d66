"""Concurrent registration: several kgov processes at once (ids unique and stable), and a version arriving
while a compatibility check runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from authz.database import open_engine
from registry.model import Reference, RegisterRequest, RegistryError, SubjectVersion
from registry.service import SchemaRegistry, anyone_may_read
from registry.store import install_schema

# Registrations by the registry's own callers: no caller ACLs to apply to their references.
TRUSTED: dict[str, Any] = {"normalize": False, "may_read": anyone_may_read}

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


def _record(*fields: dict[str, object]) -> RegisterRequest:
    return RegisterRequest(json.dumps({"type": "record", "name": "R", "fields": [{"name": "f", "type": "string"},
                                                                                 *fields]}))


def _spy_on_checks(registry: SchemaRegistry, during_first: Callable[[], None] | None = None) -> list[list[int]]:
    """Records the live versions each compatibility check sees; runs `during_first` inside the first."""
    seen: list[list[int]] = []
    check = registry._incompatibilities

    def spy(conn: Any, parsed: Any, previous: Sequence[SubjectVersion], level: str, *args: Any, **kwargs: Any
            ) -> list[str]:
        seen.append([p.version for p in previous])
        if len(seen) == 1 and during_first is not None:
            during_first()
        return check(conn, parsed, previous, level, *args, **kwargs)

    registry._incompatibilities = spy  # type: ignore[method-assign]
    return seen


def test_compatibility_is_checked_before_the_writers_lock_once(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite:///{tmp_path / 'kgov.db'}")
    install_schema(engine)
    registry = SchemaRegistry(engine)
    registry.register("s", _record(), **TRUSTED)
    seen = _spy_on_checks(registry)
    created, _ = registry.register("s", _record({"name": "g", "type": "int", "default": 0}), **TRUSTED)
    assert (created.version, seen) == (2, [[1]])  # not repeated under the lock: nothing changed meanwhile
    engine.dispose()


def test_a_version_registered_during_the_check_is_checked_under_the_lock(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite:///{tmp_path / 'kgov.db'}")
    install_schema(engine)
    registry = SchemaRegistry(engine)
    registry.register("s", _record(), **TRUSTED)

    def other_writer() -> None:  # commits while the first check runs: possible only outside the lock
        SchemaRegistry(engine).register("s", _record({"name": "g", "type": "int", "default": 0}), **TRUSTED)

    seen = _spy_on_checks(registry, other_writer)
    # Compatible with version 1 (BACKWARD), not with the version 2 that arrived meanwhile (g: int -> string).
    with pytest.raises(RegistryError) as refused:
        registry.register("s", _record({"name": "g", "type": "string", "default": ""}), **TRUSTED)
    assert refused.value.code == 409
    assert seen == [[1], [1, 2]]
    assert SchemaRegistry(engine).versions("s") == [1, 2]  # nothing stored for the refused schema
    engine.dispose()


def _dep(field_type: str) -> RegisterRequest:
    return RegisterRequest(json.dumps({"type": "record", "name": "Dep", "fields": [{"name": "x", "type": field_type}]}))


def test_a_latest_reference_that_moves_during_the_check_is_checked_again_under_the_lock(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite:///{tmp_path / 'kgov.db'}")
    install_schema(engine)
    registry = SchemaRegistry(engine)
    registry.set_config("r", {"compatibility": "NONE"})
    registry.register("r", _dep("int"), **TRUSTED)
    uses_dep = json.dumps({"type": "record", "name": "S", "fields": [{"name": "d", "type": "Dep"}]})
    registry.register("s", RegisterRequest(uses_dep, references=(Reference("Dep", "r", 1),)), **TRUSTED)

    def other_writer() -> None:  # `r`'s latest changes while the check of `s` runs, outside the lock
        SchemaRegistry(engine).register("r", _dep("string"), **TRUSTED)

    seen = _spy_on_checks(registry, other_writer)
    # With r version 1 (latest before the lock) the new schema only adds a field with a default; with r
    # version 2 (latest under the lock, what would be stored) it also changes `x` from int to string: not
    # BACKWARD.
    adds_e = json.dumps({"type": "record", "name": "S", "fields": [
        {"name": "d", "type": "Dep"}, {"name": "e", "type": "int", "default": 0}]})
    with pytest.raises(RegistryError) as refused:
        registry.register("s", RegisterRequest(adds_e, references=(Reference("Dep", "r", -1),)), **TRUSTED)
    assert refused.value.code == 409
    assert seen == [[1], [1]]  # the same live versions, checked again because the schema resolved differently
    assert SchemaRegistry(engine).versions("s") == [1]
    engine.dispose()
