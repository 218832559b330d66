"""`registry.max_concurrent_checks` through HTTP, with real threads: while slow checks hold every slot,
a further check (or any request with a large body) waits `registry.check_wait_s` and fails with
Confluent's timeout (HTTP 500, 50002), and requests that compare nothing (id lookups, listings,
lookups, re-registrations, first versions) answer at once."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from registry import service
from registry.api import LARGE_BODY_BYTES
from tests.integration.registry.conftest import basic

WAIT_S = 2.0
PROMPT_S = 1.0  # what "at once" allows on a loaded machine: half of WAIT_S, which a request that queued takes


def record(*extra: str) -> dict[str, str]:
    fields = [{"name": "a", "type": "string"}, *({"name": f, "type": "int", "default": 0} for f in extra)]
    return {"schema": json.dumps({"type": "record", "name": "R", "fields": fields})}


class SlowChecks:
    """Makes every compatibility check wait for `release` (as a check of huge schemas would run long)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.release = threading.Event()
        self.running = 0
        self._lock = threading.Lock()
        real = service.check_compatibility

        def slow(*args: Any, **kwargs: Any) -> list[str]:
            with self._lock:
                self.running += 1
            try:
                assert self.release.wait(60), "the test never released the slow checks"
                return real(*args, **kwargs)
            finally:
                with self._lock:
                    self.running -= 1

        monkeypatch.setattr(service, "check_compatibility", slow)

    def wait_running(self, count: int) -> None:
        deadline = time.monotonic() + 30
        while self.running < count:
            assert time.monotonic() < deadline, f"{self.running} checks running, expected {count}"
            time.sleep(0.01)


@pytest.fixture
def client(registry_app_factory: Callable[..., FastAPI]) -> Iterator[TestClient]:
    app = registry_app_factory(max_concurrent_checks=2, check_wait_s=WAIT_S)
    with TestClient(app, headers=basic("admin")) as admin:
        for subject in ("s1", "s2", "s3"):
            assert admin.post(f"/subjects/{subject}/versions", json=record()).status_code == 200
        yield admin


def timed(call: Callable[[], httpx.Response]) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = call()
    return response, time.monotonic() - started


def test_a_check_beyond_the_slots_waits_then_times_out_while_cheap_requests_answer(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    slow = SlowChecks(monkeypatch)
    with ThreadPoolExecutor(4) as pool:
        holders: list[Future[httpx.Response]] = [
            pool.submit(client.post, "/subjects/s1/versions", json=record("b")),
            pool.submit(client.post, "/compatibility/subjects/s2/versions/latest", json=record("b")),
        ]
        slow.wait_running(2)  # both slots taken by checks in progress

        refused, took = timed(lambda: client.post("/subjects/s3/versions", json=record("b")))
        assert refused.status_code == 500
        assert refused.json()["error_code"] == 50002
        assert refused.json()["message"] == (
            "Operation timed out: the registry is busy comparing or parsing large schemas (2 at a time) and this "
            f"request could not start within {WAIT_S:g} s (registry.max_concurrent_checks, registry.check_wait_s)")
        assert WAIT_S <= took < WAIT_S + 2
        assert slow.running == 2  # the refused request never started comparing
        tested, _ = timed(lambda: client.post("/compatibility/subjects/s3/versions", json=record("b")))
        assert (tested.status_code, tested.json()["error_code"]) == (500, 50002)
        # A large body takes a slot before it is parsed, even when it compares nothing.
        large = record(*(f"x{i}" for i in range(3000)))
        assert len(json.dumps(large)) > LARGE_BODY_BYTES
        for call in (lambda: client.post("/subjects/s3", json=large), lambda: client.post("/subjects/other/versions",
                                                                                         json=large)):
            answer, took = timed(call)
            assert (answer.status_code, answer.json()["error_code"]) == (500, 50002)
            assert took >= WAIT_S

        # Requests that compare nothing do not queue behind the checks.
        for call in (lambda: client.get("/schemas/ids/1"), lambda: client.get("/subjects"),
                     lambda: client.get("/subjects/s3/versions/latest"),
                     lambda: client.post("/subjects/s3", json=record()),  # lookup
                     lambda: client.post("/subjects/s3/versions", json=record()),  # already registered
                     lambda: client.post("/subjects/new/versions", json=record("b"))):  # a first version
            answer, took = timed(call)
            assert answer.status_code == 200, answer.text
            assert took < PROMPT_S, (answer.request.url, took)

        slow.release.set()
        assert [h.result(10).status_code for h in holders] == [200, 200]
    assert client.get("/subjects/s3/versions").json() == [1]  # nothing stored for the refused one
    # The slots came back: the refused requests now go through.
    assert client.post("/subjects/s3/versions", json=record("b")).json()["version"] == 2
    assert client.post("/subjects/s3", json=large).json()["error_code"] == 40403  # looked up: not there
    assert client.post("/subjects/other/versions", json=large).json()["version"] == 1


def test_a_waiting_check_runs_as_soon_as_a_slot_frees(registry_app_factory: Callable[..., FastAPI],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    app = registry_app_factory(max_concurrent_checks=1, check_wait_s=10)
    with TestClient(app, headers=basic("admin")) as admin:
        for subject in ("s1", "s2"):
            assert admin.post(f"/subjects/{subject}/versions", json=record()).status_code == 200
        slow = SlowChecks(monkeypatch)
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(admin.post, "/subjects/s1/versions", json=record("b"))
            slow.wait_running(1)
            second = pool.submit(admin.post, "/subjects/s2/versions", json=record("b"))
            time.sleep(0.2)
            assert slow.running == 1 and not second.done()  # waiting for the one slot
            slow.release.set()
            assert first.result(10).status_code == 200
            assert second.result(10).json()["version"] == 2
