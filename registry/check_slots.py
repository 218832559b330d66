"""How many compatibility checks may compare schemas at once in one process.

A check may spend `registry.max_diff_work` of CPU (seconds). The HTTP layer runs the registry's
synchronous work in a pool of 40 threads shared with every other route (id lookups, the authorizer
API of the same process): 40 concurrent expensive checks would take every thread and every core.
So a check takes one of `registry.max_concurrent_checks` slots before it compares anything.

A worker thread never waits for a slot: `held()` takes a free one or raises `ChecksBusy` before any
work or write is done. The HTTP layer then waits for a slot in the event loop (`waited()`, first
come first served, holding no thread) for at most `registry.check_wait_s` and runs the request again
holding it; past the wait, `ChecksTimedOut`. Requests that compare nothing (GETs, lookups,
re-registering a registered schema, a first version, level NONE, imports) never take a slot, unless
their body is large: the HTTP layer makes those wait for a slot before parsing (`registry.api`).

Slots are handed over across threads and event loops (each TestClient and each server worker runs
its own loop), so the state is guarded by a thread lock, not by an asyncio primitive.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar

# Set while the current request holds a slot; copied into the worker thread with the context.
_HELD: ContextVar[bool] = ContextVar("registry_check_slot_held", default=False)


class ChecksBusy(Exception):
    """Every slot is taken: wait for one with `CheckSlots.waited()` and run the request again."""


class ChecksTimedOut(Exception):
    """No slot became free within the wait."""


class CheckSlots:
    def __init__(self, limit: int, wait_s: float) -> None:
        if limit <= 0 or wait_s <= 0:
            raise ValueError("the number of check slots and the wait for one must be positive")
        self.limit = limit
        self.wait_s = wait_s
        self._lock = threading.Lock()
        self._free = limit
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()

    @property
    def free(self) -> int:
        with self._lock:
            return self._free

    @contextmanager
    def held(self) -> Iterator[None]:
        """In a worker thread: a slot for the block (the request's own if it already holds one)."""
        if _HELD.get():
            yield
            return
        with self._lock:
            if self._free == 0 or self._waiters:  # waiters come first
                raise ChecksBusy
            self._free -= 1
        with self._holding():
            yield

    @asynccontextmanager
    async def waited(self) -> AsyncIterator[None]:
        """In the event loop: waits up to `wait_s` for a slot and holds it for the block (and for the
        worker threads the block starts); `ChecksTimedOut` when none came."""
        await self._acquire()
        with self._holding():
            yield

    @contextmanager
    def _holding(self) -> Iterator[None]:
        """Marks the slot just taken as the current request's, and gives it back after the block."""
        token = _HELD.set(True)
        try:
            yield
        finally:
            _HELD.reset(token)
            self._release()

    async def _acquire(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._free > 0 and not self._waiters:
                self._free -= 1
                return
            entry = (loop, loop.create_future())
            self._waiters.append(entry)
        try:
            # shield: a timeout must not cancel the future `_release` may be completing from another thread
            await asyncio.wait_for(asyncio.shield(entry[1]), self.wait_s)
        except BaseException as exc:  # the wait ran out, or the request was cancelled
            with self._lock:
                handed_over = entry not in self._waiters
                if not handed_over:
                    self._waiters.remove(entry)
            if handed_over:  # a slot came at the last moment: pass it on
                self._release()
            if isinstance(exc, TimeoutError):
                raise ChecksTimedOut from None
            raise

    def _release(self) -> None:
        with self._lock:
            while self._waiters:
                loop, future = self._waiters.popleft()
                try:
                    loop.call_soon_threadsafe(_wake, future)
                except RuntimeError:  # that loop is closed: its waiter is gone
                    continue
                return  # the slot passes to that waiter without becoming free
            self._free += 1


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
