"""`registry.max_diff_work` bounds all the compatibility work of one request: every version and both
directions of a transitive or FULL level, and the re-check under the writers' lock."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from authz.database import open_engine
from registry.compat import CompatibilityLevel, WorkBudget, check_compatibility
from registry.model import RegisterRequest, RegistryError
from registry.schemas import SchemaType, parse_schema
from registry.service import SchemaRegistry, anyone_may_read
from registry.store import install_schema
from tests.integration.registry.conftest import basic
from tests.integration.registry.test_concurrency import _spy_on_checks

TOO_COMPLEX = "Schema is too complex to check for compatibility: more than"


def avro_record(doc: str, fields: int = 50) -> str:
    """A record of `fields` optional strings; versions differing in `doc` only are compatible both ways."""
    return json.dumps({"type": "record", "name": "R", "fields": [
        {"name": f"f{i}", "type": ["null", "string"], "default": None, "doc": doc} for i in range(fields)]})


def json_object(doc: str, properties: int = 50) -> str:
    return json.dumps({"type": "object", "properties": {
        f"f{i}": {"type": ["null", "string"], "description": doc} for i in range(properties)}})


def one_comparison() -> int:
    """Units one comparison of two versions of `avro_record` costs (one direction)."""
    budget = WorkBudget(10**6)
    first, second = (parse_schema(SchemaType.AVRO, avro_record(doc)) for doc in ("a", "b"))
    assert check_compatibility(second, [first], CompatibilityLevel.BACKWARD, budget=budget) == []
    return budget.spent


def test_transitive_and_full_checks_share_one_budget(registry_app_factory: Callable[..., FastAPI],
                                                     db_url: str) -> None:
    unit = one_comparison()
    app = registry_app_factory(db_url, max_diff_work=unit * 5 // 2)  # room for two comparisons, not three
    with TestClient(app, headers=basic("admin")) as admin:
        for doc in ("v1", "v2", "v3"):  # BACKWARD: one comparison each
            assert admin.post("/subjects/s/versions", json={"schema": avro_record(doc)}).status_code == 200
        for level in ("BACKWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE"):  # 3, 2 and 6 comparisons
            assert admin.put("/config/s", json={"compatibility": level}).status_code == 200
            refused = admin.post("/subjects/s/versions", json={"schema": avro_record("v4")})
            if level == "FULL":
                assert refused.status_code == 200, refused.text  # two comparisons fit
                assert admin.delete(f"/subjects/s/versions/{refused.json()['version']}").status_code == 200
                continue
            assert refused.status_code == 422, (level, refused.text)
            assert refused.json()["error_code"] == 42201
            assert refused.json()["message"] == (f"{TOO_COMPLEX} {unit * 5 // 2} subschema comparisons "
                                                 "(registry.max_diff_work)")
            tested = admin.post("/compatibility/subjects/s/versions", json={"schema": avro_record("v4")})
            assert (tested.status_code, tested.json()["error_code"]) == (422, 42201)
        assert admin.get("/subjects/s/versions").json() == [1, 2, 3]  # nothing stored for the refused


@pytest.mark.parametrize(("schema_type", "make"), [("AVRO", avro_record), ("JSON", json_object)])
def test_a_hundred_versions_of_a_50_field_schema_pass_full_transitive_by_default(
        app: FastAPI, schema_type: str, make: Callable[[str], str]) -> None:
    with TestClient(app, headers=basic("admin")) as admin:
        assert admin.put("/config/s", json={"compatibility": "NONE"}).status_code == 200
        for version in range(100):
            body = {"schema": make(f"v{version}"), "schemaType": schema_type}
            assert admin.post("/subjects/s/versions", json=body).status_code == 200
        assert admin.put("/config/s", json={"compatibility": "FULL_TRANSITIVE"}).status_code == 200
        body = {"schema": make("v100"), "schemaType": schema_type}
        tested = admin.post("/compatibility/subjects/s/versions?verbose=true", json=body)
        assert tested.json() == {"is_compatible": True, "messages": []}
        created = admin.post("/subjects/s/versions", json=body)
        assert created.status_code == 200, created.text
        assert created.json()["version"] == 101


def _registry(db_url: str, max_diff_work: int) -> SchemaRegistry:
    engine = open_engine(db_url)
    install_schema(engine)
    return SchemaRegistry(engine, max_diff_work=max_diff_work)


def _register(registry: SchemaRegistry, doc: str) -> Any:
    return registry.register("s", RegisterRequest(avro_record(doc)), normalize=False, may_read=anyone_may_read)


def _set_transitive(registry: SchemaRegistry) -> None:
    registry.set_config("s", {"compatibility": "BACKWARD_TRANSITIVE"})


def test_the_recheck_under_the_lock_compares_only_the_versions_that_arrived(db_url: str) -> None:
    unit = one_comparison()
    registry = _registry(db_url, unit * 5 // 2)  # v1 before the lock and v2 under it: two comparisons
    _set_transitive(registry)
    _register(registry, "v1")
    other = SchemaRegistry(registry.engine)
    seen = _spy_on_checks(registry, lambda: _register(other, "v2"))
    created, _ = _register(registry, "v3")
    assert created.version == 3
    assert seen == [[1], [1, 2]]  # re-checked because v2 arrived, but v1 was not compared again
    registry.engine.dispose()


def test_the_recheck_under_the_lock_spends_from_the_same_budget(db_url: str) -> None:
    unit = one_comparison()
    registry = _registry(db_url, unit * 3 // 2)  # one comparison, not two
    _set_transitive(registry)
    _register(registry, "v1")
    other = SchemaRegistry(registry.engine)
    _spy_on_checks(registry, lambda: _register(other, "v2"))
    with pytest.raises(RegistryError) as refused:
        _register(registry, "v3")
    assert refused.value.code == 42201
    assert refused.value.message.startswith(TOO_COMPLEX)
    assert registry.versions("s") == [1, 2]
    # Each phase alone fitted (one comparison each): the refusal is the two of them together.
    registry.set_config("s", {"compatibility": "BACKWARD"})  # one comparison (with v2): fits
    created, _ = _register(registry, "v3")
    assert created.version == 3
    registry.engine.dispose()
