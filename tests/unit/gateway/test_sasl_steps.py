"""The SASL step pool: worker threads, the waiting bound, outcomes handed back to the event loop."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

import pytest
from pydantic import ValidationError

from gateway.config import GatewayConfig
from gateway.sasl_steps import (
    Refusal,
    SaslStepPool,
    StepsAtClose,
    default_max_waiting_per_source,
    default_workers,
)


def test_steps_run_on_worker_threads_and_their_outcomes_come_back_on_the_loop() -> None:
    async def main() -> None:
        pool: SaslStepPool[int] = SaslStepPool(workers=1, max_waiting=1)
        gate = threading.Event()
        loop_thread = threading.get_ident()
        ran_on: list[int] = []
        delivered: list[tuple[int, int]] = []
        all_done = asyncio.Event()

        def work(n: int) -> int:
            ran_on.append(threading.get_ident())
            assert gate.wait(10)
            return n

        def on_done(future: Future[int]) -> None:
            delivered.append((future.result(), threading.get_ident()))
            if len(delivered) == 3:
                all_done.set()

        assert pool.submit(lambda: work(1), on_done) is None
        assert pool.submit(lambda: work(2), on_done) is None
        assert (pool.pending, pool.waiting) == (2, 1)
        assert pool.submit(lambda: work(3), on_done) is Refusal.FULL  # one running, one waiting: the bound
        assert pool.refused == 1 and pool.pending == 2
        assert pool.submit(lambda: work(4), on_done, may_refuse=False) is None  # a re-authentication waits anyway
        gate.set()
        await asyncio.wait_for(all_done.wait(), 10)
        assert sorted(n for n, _ in delivered) == [1, 2, 4]
        assert {t for _, t in delivered} == {loop_thread}
        assert loop_thread not in ran_on
        assert (pool.pending, pool.waiting, pool.refused) == (0, 0, 1)
        pool.close()

    asyncio.run(main())


def test_close_drops_waiting_steps_and_refuses_new_ones() -> None:
    async def main() -> None:
        pool: SaslStepPool[int] = SaslStepPool(workers=1, max_waiting=5)
        gate = threading.Event()
        started = threading.Event()
        ran: list[int] = []
        delivered: list[int] = []

        def work(n: int) -> int:
            started.set()
            ran.append(n)
            assert gate.wait(10)
            return n

        pool.submit(lambda: work(1), lambda f: delivered.append(f.result()))
        pool.submit(lambda: work(2), lambda f: delivered.append(f.result()))
        assert await asyncio.to_thread(started.wait, 10)
        pool.close()
        gate.set()
        assert pool.submit(lambda: work(3), lambda f: delivered.append(f.result())) is Refusal.CLOSED
        assert pool.refused == 0  # closed is not busy
        await asyncio.sleep(0.2)
        assert ran == [1] and delivered == []  # the waiting one never ran; no outcome after close

    asyncio.run(main())


def test_wait_closed_waits_for_the_running_steps_and_names_failures_and_those_abandoned() -> None:
    async def main() -> None:
        pool: SaslStepPool[int] = SaslStepPool(workers=2, max_waiting=5)
        failing_gate, stuck_gate = threading.Event(), threading.Event()
        started = threading.Semaphore(0)
        delivered: list[int] = []

        def failing() -> int:
            started.release()
            assert failing_gate.wait(10)
            raise RuntimeError("the store was closed under it")

        def stuck() -> int:
            started.release()
            assert stuck_gate.wait(10)
            return 2

        assert pool.submit(failing, lambda f: delivered.append(1), label="failing") is None
        assert pool.submit(stuck, lambda f: delivered.append(2), label="stuck") is None
        assert pool.submit(lambda: 3, lambda f: delivered.append(3), label="waiting") is None  # no thread free
        for _ in range(2):
            assert await asyncio.to_thread(started.acquire, True, 10)
        pool.close()
        assert pool.still_running() == 2
        # The bound: ample for the failing step's thread to wake once its gate opens, on a loaded machine too.
        waiting = asyncio.create_task(pool.wait_closed(2.0))
        await asyncio.sleep(0)  # the wait has begun (it runs until its first await)
        assert not waiting.done()
        failing_gate.set()  # fails while the close waits for it: its failure is reported, not lost
        outcome = await waiting
        try:
            assert [(label, type(exc)) for label, exc in outcome.failed] == [("failing", RuntimeError)]
            assert outcome.abandoned == ("stuck",)  # still running when the bound ended
            assert pool.still_running() == 1
            assert delivered == []  # no outcome goes to its caller after close; the waiting step never ran
        finally:
            stuck_gate.set()

    asyncio.run(main())


def test_wait_closed_returns_at_once_when_nothing_runs() -> None:
    async def main() -> None:
        pool: SaslStepPool[int] = SaslStepPool(workers=1)
        done = asyncio.Event()
        assert pool.submit(lambda: 1, lambda f: done.set(), label="finished") is None
        await asyncio.wait_for(done.wait(), 10)
        pool.close()
        assert pool.still_running() == 0
        assert await asyncio.wait_for(pool.wait_closed(60), 1) == StepsAtClose()

    asyncio.run(main())


def test_one_source_holds_at_most_its_share_and_the_others_are_served_in_turn() -> None:
    async def main() -> None:
        pool: SaslStepPool[str] = SaslStepPool(workers=1, max_waiting=6, max_waiting_per_source=3)
        gate = threading.Event()
        order: list[str] = []
        all_done = asyncio.Event()
        expected = 7

        def work(name: str) -> str:
            assert gate.wait(10)
            return name

        def on_done(future: Future[str]) -> None:
            order.append(future.result())
            if len(order) == expected:
                all_done.set()

        def submit(name: str, source: str, *, may_refuse: bool = True) -> Refusal | None:
            return pool.submit(lambda: work(name), on_done, source=source, may_refuse=may_refuse)

        assert submit("f0", "flood") is None  # runs at once: the thread was free
        assert [submit(f"f{n}", "flood") for n in (1, 2, 3)] == [None, None, None]
        assert submit("f4", "flood") is Refusal.SOURCE_FULL  # its share (3) waits already
        assert (pool.waiting, pool.waiting_of("flood"), pool.refused, pool.refused_per_source) == (3, 3, 1, 1)
        assert submit("a0", "victim") is None  # another address is still let in
        assert submit("a1", "victim") is None
        assert submit("r0", "flood", may_refuse=False) is None  # a re-authentication goes over the share
        assert submit("b0", "third") is Refusal.FULL  # 6 wait: the global bound holds
        gate.set()
        await asyncio.wait_for(all_done.wait(), 10)
        # Round robin between the sources, not first come first served: the victim's first step runs
        # right after one of the flood's, though three of the flood's came before it.
        assert order == ["f0", "f1", "a0", "f2", "a1", "f3", "r0"]
        assert (pool.pending, pool.waiting, pool.waiting_of("flood")) == (0, 0, 0)
        pool.close()

    asyncio.run(main())


def test_a_step_runs_at_once_only_when_nobody_waits() -> None:
    async def main() -> None:
        pool: SaslStepPool[int] = SaslStepPool(workers=2, max_waiting=4, max_waiting_per_source=0)
        gate = threading.Event()
        delivered: list[int] = []

        def work(n: int) -> int:
            assert gate.wait(10)
            return n

        # A share of 0: an address may only use a free thread, never wait for one.
        assert pool.submit(lambda: work(1), lambda f: delivered.append(f.result()), source="a") is None
        assert pool.submit(lambda: work(2), lambda f: delivered.append(f.result()), source="a") is None
        assert pool.submit(lambda: work(3), lambda f: delivered.append(f.result()), source="a") is Refusal.SOURCE_FULL
        assert (pool.pending, pool.waiting) == (2, 0)
        gate.set()
        while len(delivered) < 2:
            await asyncio.sleep(0.01)
        assert sorted(delivered) == [1, 2] and pool.pending == 0
        pool.close()

    asyncio.run(main())


def test_sizes() -> None:
    assert default_workers() >= 1
    assert SaslStepPool(workers=0).workers == default_workers()
    assert SaslStepPool(workers=1).max_waiting_per_source == 64  # an eighth of 512
    assert [default_max_waiting_per_source(n) for n in (0, 1, 7, 8, 100)] == [0, 1, 1, 1, 12]
    with pytest.raises(ValueError):
        SaslStepPool(workers=1, max_waiting_per_source=-1)
    with pytest.raises(ValueError):
        SaslStepPool(workers=-1)
    with pytest.raises(ValueError):
        SaslStepPool(workers=1, max_waiting=-1)


def test_settings_per_address_share() -> None:
    assert GatewayConfig().sasl_max_waiting_steps_per_ip is None  # an eighth of sasl_max_waiting_steps
    assert GatewayConfig(sasl_max_waiting_steps=10, sasl_max_waiting_steps_per_ip=10)
    with pytest.raises(ValidationError, match=r"sasl_max_waiting_steps_per_ip \(11\) must not exceed "
                                              r"gateway.sasl_max_waiting_steps \(10\)"):
        GatewayConfig(sasl_max_waiting_steps=10, sasl_max_waiting_steps_per_ip=11)
    with pytest.raises(ValidationError):
        GatewayConfig(sasl_max_waiting_steps_per_ip=-1)
