"""Check slots: a worker thread never waits, the event loop waits first come first served for at most
the bound, and slots pass between threads and event loops without being lost or doubled."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest
from pydantic import ValidationError

from registry.check_slots import ChecksBusy, CheckSlots, ChecksTimedOut
from registry.config import RegistryConfig


def in_another_request(slots: CheckSlots) -> tuple[str, float]:
    """Tries `held()` in a new thread (a new context: another request); what happened and how long it took."""
    outcome: list[tuple[str, float]] = []

    def attempt() -> None:
        started = time.monotonic()
        try:
            with slots.held():
                outcome.append(("held", time.monotonic() - started))
        except ChecksBusy:
            outcome.append(("busy", time.monotonic() - started))

    thread = threading.Thread(target=attempt)
    thread.start()
    thread.join(30)
    return outcome[0]


def test_held_takes_a_free_slot_and_never_waits() -> None:
    slots = CheckSlots(2, wait_s=5)
    with slots.held():
        assert slots.free == 1
        with slots.held():  # the same request (context) already holds one: no second slot
            assert slots.free == 1
        assert in_another_request(slots)[0] == "held"
        with slots.held():
            pass
        assert slots.free == 1
    assert slots.free == 2
    with slots.held():
        assert in_another_request(slots)[0] == "held"
    slots_of_one = CheckSlots(1, wait_s=5)
    with slots_of_one.held():
        outcome, took = in_another_request(slots_of_one)
        assert outcome == "busy"
        assert took < 2.5  # refused at once, not after a wait (of 5 s)
    assert slots_of_one.free == 1


def test_a_slot_is_given_back_when_the_check_fails() -> None:
    slots = CheckSlots(1, wait_s=5)
    with pytest.raises(ValueError), slots.held():
        raise ValueError("the check failed")
    assert slots.free == 1


def test_the_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        CheckSlots(0, wait_s=1)
    with pytest.raises(ValueError, match="positive"):
        CheckSlots(1, wait_s=0)


def test_waiting_ends_with_a_timeout_and_leaves_no_trace() -> None:
    slots = CheckSlots(1, wait_s=0.2)

    async def scenario() -> None:
        async with slots.waited():
            started = time.monotonic()
            with pytest.raises(ChecksTimedOut):
                async with slots.waited():
                    pytest.fail("got a slot that was taken")
            assert 0.2 <= time.monotonic() - started < 5
        assert slots.free == 1
        async with slots.waited():  # nothing left queued in front
            assert slots.free == 0

    asyncio.run(scenario())


def test_waiters_are_served_in_order_and_a_worker_thread_does_not_jump_the_queue() -> None:
    slots = CheckSlots(1, wait_s=5)
    order: list[str] = []

    async def waiter(name: str) -> None:
        async with slots.waited():
            order.append(name)
            await asyncio.sleep(0.01)

    async def scenario() -> None:
        async with slots.waited():
            tasks = [asyncio.create_task(waiter(name)) for name in "abc"]
            await asyncio.sleep(0.05)  # all three queued
        # Released, but handed straight to "a": never free for a thread that did not queue.
        assert slots.free == 0
        assert await asyncio.to_thread(in_another_request, slots) == ("busy", pytest.approx(0, abs=2.5))
        await asyncio.gather(*tasks)

    asyncio.run(scenario())
    assert order == ["a", "b", "c"]
    assert slots.free == 1


def test_the_slot_held_while_waiting_covers_the_worker_threads_of_the_request() -> None:
    slots = CheckSlots(1, wait_s=5)

    async def scenario() -> None:
        async with slots.waited():
            # A request that waited for its slot runs its work in a thread: that work must not
            # ask for a second slot (it would be refused: there is only one).
            def work() -> int:
                with slots.held():
                    return slots.free

            assert await asyncio.to_thread(work) == 0

    asyncio.run(scenario())
    assert slots.free == 1


def test_a_slot_released_in_one_event_loop_wakes_a_waiter_in_another() -> None:
    slots = CheckSlots(1, wait_s=30)  # a waiter that is not woken times out: far longer than the bound below
    holding, waiting = threading.Event(), threading.Event()
    got: list[float] = []

    async def holder() -> None:
        async with slots.waited():
            holding.set()
            waiting.wait(30)
            await asyncio.sleep(0.1)

    async def waiter() -> None:
        holding.wait(30)
        started = time.monotonic()
        waiting.set()
        async with slots.waited():
            got.append(time.monotonic() - started)

    threads = [threading.Thread(target=asyncio.run, args=(coro,)) for coro in (holder(), waiter())]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(40)
    assert len(got) == 1 and got[0] < 10
    assert slots.free == 1


def test_a_cancelled_waiter_leaves_the_queue() -> None:
    slots = CheckSlots(1, wait_s=5)

    async def scenario() -> None:
        async with slots.waited():
            task = asyncio.create_task(slots.waited().__aenter__())
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert slots.free == 1

    asyncio.run(scenario())


def test_the_settings_default_to_the_cores_and_refuse_nonsense() -> None:
    config = RegistryConfig()
    assert config.max_concurrent_checks == (os.cpu_count() or 1)
    assert config.check_wait_s == 10
    assert config.max_body_bytes == 2 * 1024 * 1024
    for wrong in ({"max_concurrent_checks": 0}, {"check_wait_s": 0}, {"check_wait_s": 301}):
        with pytest.raises(ValidationError):
            RegistryConfig.model_validate(wrong)
