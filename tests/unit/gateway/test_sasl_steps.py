"""The SASL step pool: worker threads, the waiting bound, outcomes handed back to the event loop."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

import pytest

from gateway.sasl_steps import SaslStepPool, default_workers


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

        assert pool.submit(lambda: work(1), on_done)
        assert pool.submit(lambda: work(2), on_done)
        assert (pool.pending, pool.waiting) == (2, 1)
        assert not pool.submit(lambda: work(3), on_done)  # one running, one waiting: the bound
        assert pool.refused == 1 and pool.pending == 2
        assert pool.submit(lambda: work(4), on_done, may_refuse=False)  # a re-authentication waits anyway
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
        assert not pool.submit(lambda: work(3), lambda f: delivered.append(f.result()))
        assert pool.refused == 0  # closed is not busy
        await asyncio.sleep(0.2)
        assert ran == [1] and delivered == []  # the waiting one never ran; no outcome after close

    asyncio.run(main())


def test_sizes() -> None:
    assert default_workers() >= 1
    assert SaslStepPool(workers=0).workers == default_workers()
    with pytest.raises(ValueError):
        SaslStepPool(workers=-1)
    with pytest.raises(ValueError):
        SaslStepPool(workers=1, max_waiting=-1)
