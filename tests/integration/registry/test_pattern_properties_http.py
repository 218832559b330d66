"""`patternProperties` through HTTP, with real threads: a compatibility test whose patterns would
backtrack for centuries in Python's `re` answers promptly with the right verdict while other clients
are served, and a pattern that cannot be evaluated in linear time makes the answer incompatible with
a message naming it (nothing registered)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.integration.registry.conftest import basic

CATASTROPHIC = "^(a+)+$"
FAST_S = 2.0  # generous for a loaded CI machine; backtracking would take longer than the universe
PROMPT_S = 2.0


def schema(pattern: str, *added: tuple[str, str]) -> dict[str, str]:
    """Properties matching `pattern` must be strings; any other additional property an integer."""
    properties = {"id": {"type": "string"}, **{name: {"type": kind} for name, kind in added}}
    return {"schemaType": "JSON", "schema": json.dumps({
        "type": "object", "properties": properties, "patternProperties": {pattern: {"type": "string"}},
        "additionalProperties": {"type": "integer"}})}


def timed(call: Callable[[], httpx.Response]) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = call()
    return response, time.monotonic() - started


def test_a_catastrophic_pattern_does_not_stall_the_registry(app: FastAPI) -> None:
    # 20 names of 10,000 characters that `^(a+)+$` almost matches: with backtracking, each is 2**10000 steps.
    near_misses = [("a" * 10_000 + f"{i}!", "integer") for i in range(20)]
    with TestClient(app, headers=basic("admin")) as admin:
        first = admin.post("/subjects/s/versions", json=schema(CATASTROPHIC))
        assert first.status_code == 200, first.text
        schema_id = first.json()["id"]

        def test_compatibility(*added: tuple[str, str]) -> httpx.Response:
            return admin.post("/compatibility/subjects/s/versions/latest?verbose=true", json=schema(CATASTROPHIC,
                                                                                                   *added))

        with ThreadPoolExecutor(4) as pool:
            checks = [pool.submit(timed, lambda: test_compatibility(*near_misses)) for _ in range(2)]
            matched = pool.submit(timed, lambda: test_compatibility(("a" * 10_000, "integer")))
            lookups = [pool.submit(timed, lambda: admin.get(f"/schemas/ids/{schema_id}")) for _ in range(5)]
            for lookup in lookups:
                answer, took = lookup.result(30)
                assert answer.status_code == 200, answer.text
                assert json.loads(answer.json()["schema"])["patternProperties"] == {CATASTROPHIC: {"type": "string"}}
                assert took < PROMPT_S
            for check in checks:
                answer, took = check.result(30)
                assert took < FAST_S
                # Not matched: covered by additionalProperties (integer).
                assert answer.json() == {"is_compatible": True, "messages": []}, answer.text
            answer, took = matched.result(30)
            assert took < FAST_S
            # Matched: an integer is not covered by the pattern's string schema.
            assert answer.json()["is_compatible"] is False
            assert any("PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" in m
                       for m in answer.json()["messages"])


def refusal(pattern: str) -> str:
    return (f"Unexpected exception during compatibility check: patternProperties pattern {json.dumps(pattern)} "
            "cannot be evaluated: the linear-time engine (RE2) rejects it: ")


def test_a_pattern_that_cannot_be_evaluated_is_answered_incompatible_and_registers_nothing(app: FastAPI) -> None:
    lookahead = "^(?=x)"
    with TestClient(app, headers=basic("admin")) as admin:
        assert admin.post("/subjects/s/versions", json=schema(lookahead)).status_code == 200
        # Java matches "xa" (string schema), so an integer "xa" is incompatible; skipping the pattern
        # would fall back to additionalProperties (integer) and call it compatible.
        update = schema(lookahead, ("xa", "integer"))
        verbose = admin.post("/compatibility/subjects/s/versions/latest?verbose=true", json=update)
        assert verbose.status_code == 200
        body: dict[str, Any] = verbose.json()
        assert body["is_compatible"] is False
        assert body["messages"][0].startswith(refusal(lookahead) + "invalid perl operator: (?=")
        plain = admin.post("/compatibility/subjects/s/versions/latest", json=update)
        assert plain.json() == {"is_compatible": False}

        registered = admin.post("/subjects/s/versions", json=update)
        assert registered.status_code == 409
        assert refusal(lookahead) in registered.json()["message"]
        assert admin.get("/subjects/s/versions").json() == [1]
        # A change that needs no match goes through: the pattern itself is accepted.
        described = json.loads(schema(lookahead)["schema"]) | {"description": "unchanged content model"}
        second = admin.post("/subjects/s/versions", json={"schemaType": "JSON", "schema": json.dumps(described)})
        assert second.status_code == 200, second.text
        assert admin.get("/subjects/s/versions").json() == [1, 2]
