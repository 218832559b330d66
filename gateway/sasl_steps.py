"""Worker threads for SASL mechanism steps, so a login's key derivation never stalls the event loop.

A SaslAuthenticate step may cost milliseconds of CPU: PBKDF2 for a PLAIN verification the cache
cannot answer (about 10 ms for SCRAM-SHA-512 at 16,384 iterations), a JWT
signature check for OAUTHBEARER, now and then a store read (the credential snapshot's version poll)
or a JWKS fetch for an unknown key id. On the gateway's event loop every such step would hold every
other client's produce and fetch for its whole duration. hashlib's PBKDF2 and `cryptography`'s
verifications release the GIL, so on a worker thread they run beside the loop.

The pool is bounded three times: `workers` threads, at most `max_waiting` steps waiting for one, and
at most `max_waiting_per_source` of those from one source (a client address: an IPv4 address or an
IPv6 /64, `gateway.connection_limits.share_key`). A step offered beyond
either bound is refused at once (`submit` answers why) and the caller ends the login without running
it, so a login storm costs bounded memory and a bounded wait instead of a queue that grows without
limit. Steps of re-authentications are never refused (`submit(..., may_refuse=False)`): they belong
to connections that already proved their identity, at most one step each, and refusing one would
close a working connection.

Fairness: the waiting steps are kept per source and a free thread takes the next step of the next
source in turn (round robin), not the oldest step of all. One address flooding the gateway with slow
logins therefore holds at most `max_waiting_per_source` places, and another address's login waits
behind at most one step of each source, not behind the whole flood.

Departure from Kafka: a broker runs `SaslServerAuthenticator.authenticate` on its network threads
(`num.network.threads`, each serving many connections), so a slow login there stalls the other
connections of its network thread, and nothing bounds the logins waiting.

The gateway's security admin requests (ACLs, SCRAM credentials, quotas, delegation tokens) run on a
pool of this class too, with threads of their own (`ClientConnection._serve_admin_request`): never
refused (`may_refuse=False`), since each connection has at most one admin request running (its
reading is paused meanwhile), so the waiting ones are bounded by the connection limits.

Shutdown (`close`, then `wait_closed`): the waiting steps are dropped and the running ones are waited
for, on the event loop (which keeps serving the outcomes and anything a step awaits from it), at most
for a bound: as Kafka's `KafkaRequestHandlerPool.shutdown` waits for its handler threads (without a
bound there), so a step's failure is still seen and the stores it writes are closed only after it.

Every count is kept on the event loop's thread (`submit` is called there and completions are handed
back to it), so no lock is needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

DEFAULT_MAX_WAITING = 512
# One source's share of the waiting places, by default: an eighth, so that one address flooding the
# gateway leaves seven eighths to everyone else (64 of the default 512).
DEFAULT_WAITING_SHARE_DIVISOR = 8


def default_max_waiting_per_source(max_waiting: int) -> int:
    """One source's default share of `max_waiting`: an eighth, at least 1 when anything may wait."""
    return max(max_waiting // DEFAULT_WAITING_SHARE_DIVISOR, min(max_waiting, 1))


def default_workers() -> int:
    """The CPUs this process may run on (PBKDF2 is CPU-bound: more threads than cores only queue)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not on Linux
        return max(os.cpu_count() or 1, 1)


class Refusal(enum.Enum):
    """Why `submit` did not take a step."""

    CLOSED = "closed"  # the gateway is stopping
    FULL = "full"  # `max_waiting` steps wait already
    SOURCE_FULL = "source-full"  # `max_waiting_per_source` steps of this source wait already


@dataclass(slots=True)
class _Waiting(Generic[T]):
    run: Callable[[], T]
    on_done: Callable[[Future[T]], None]
    label: str  # what the step is, for the shutdown's log lines (`wait_closed`)


@dataclass(frozen=True, slots=True)
class StepsAtClose:
    """What `wait_closed` found of the steps running at `close`: the labels of those that raised (with
    the exception) and of those still running when the wait ended (abandoned: their outcome is unknown)."""

    failed: tuple[tuple[str, BaseException], ...] = ()
    abandoned: tuple[str, ...] = ()


class SaslStepPool(Generic[T]):
    def __init__(self, workers: int = 0, max_waiting: int = DEFAULT_MAX_WAITING,
                 max_waiting_per_source: int | None = None, thread_name_prefix: str = "kgov-sasl-step") -> None:
        if max_waiting_per_source is None:
            max_waiting_per_source = default_max_waiting_per_source(max_waiting)
        if workers < 0 or max_waiting < 0 or max_waiting_per_source < 0:
            raise ValueError("workers, max_waiting and max_waiting_per_source must not be negative")
        self.workers = workers or default_workers()
        self.max_waiting = max_waiting
        self.max_waiting_per_source = max_waiting_per_source
        self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix=thread_name_prefix)
        self._running = 0  # handed to a thread, outcome not yet handed back to the loop
        # Waiting steps per source, the sources in their turn's order (the next to run is first).
        self._queues: dict[str, deque[_Waiting[T]]] = {}
        self._waiting = 0
        self.refused = 0  # steps refused because too many were waiting (for tests and metrics)
        self.refused_per_source = 0  # of those, refused for their source's share
        self._closed = False
        # Steps handed to a thread, by their thread's future, with their labels (`wait_closed`).
        self._on_threads: dict[Future[T], str] = {}
        self._running_at_close: dict[Future[T], str] = {}

    @property
    def pending(self) -> int:
        """Steps running or waiting for a thread."""
        return self._running + self._waiting

    @property
    def waiting(self) -> int:
        """Steps waiting for a thread (their count is bounded by `max_waiting`)."""
        return self._waiting

    def waiting_of(self, source: str) -> int:
        """Steps of `source` waiting for a thread (bounded by `max_waiting_per_source`)."""
        queue = self._queues.get(source)
        return len(queue) if queue is not None else 0

    def submit(self, run: Callable[[], T], on_done: Callable[[Future[T]], None], *, source: str = "",
               may_refuse: bool = True, label: str = "") -> Refusal | None:
        """Runs `run` on a worker thread, then `on_done(future)` on the calling event loop, and answers
        None; or answers why it runs nothing: the pool is closed, or (`may_refuse`) `max_waiting` steps
        wait already, or `max_waiting_per_source` of `source`'s. A step runs at once when a thread is
        free and no other step waits. Must be called on the event loop's thread. `label` names the step
        in the shutdown's log lines (`wait_closed`)."""
        if self._closed:
            return Refusal.CLOSED
        if self._running < self.workers and not self._waiting:
            self._start(_Waiting(run, on_done, label))
            return None
        queue = self._queues.get(source)
        if may_refuse and self._waiting >= self.max_waiting:
            self.refused += 1
            return Refusal.FULL
        if may_refuse and (len(queue) if queue is not None else 0) >= self.max_waiting_per_source:
            self.refused += 1
            self.refused_per_source += 1
            return Refusal.SOURCE_FULL
        if queue is None:
            queue = self._queues[source] = deque()
        queue.append(_Waiting(run, on_done, label))
        self._waiting += 1
        return None

    def _start(self, step: _Waiting[T]) -> None:
        loop = asyncio.get_running_loop()
        self._running += 1
        on_done = step.on_done

        def deliver(done: Future[T]) -> None:
            self._running -= 1
            self._on_threads.pop(done, None)
            if self._closed:
                return  # `wait_closed` reports its failure, if any
            self._next()
            on_done(done)

        def hand_back(done: Future[T]) -> None:  # on the worker thread
            # A closed loop raises: the gateway stopped and nobody waits for this outcome.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(deliver, done)

        future = self._executor.submit(step.run)
        self._on_threads[future] = step.label
        future.add_done_callback(hand_back)

    def _next(self) -> None:
        """A thread is free: the next source in turn runs its oldest waiting step, and goes to the end
        of the line if it has more."""
        while self._running < self.workers and self._queues:
            source = next(iter(self._queues))
            queue = self._queues.pop(source)
            step = queue.popleft()
            self._waiting -= 1
            if queue:
                self._queues[source] = queue
            self._start(step)

    def close(self) -> None:
        """Drops the waiting steps; running ones finish on their threads and their outcomes are not
        handed to their `on_done` (`wait_closed` waits for them and reports failures). Does not wait."""
        if not self._closed:
            self._running_at_close = dict(self._on_threads)
        self._closed = True
        self._queues.clear()
        self._waiting = 0
        self._executor.shutdown(wait=False, cancel_futures=True)

    def still_running(self) -> int:
        """Of the steps running at `close`, those not finished yet."""
        return sum(not f.done() for f in self._running_at_close)

    async def wait_closed(self, timeout_s: float) -> StepsAtClose:
        """After `close`: waits, at most `timeout_s`, for the steps that were running on the threads,
        without blocking the event loop, and answers which of them failed and which still run."""
        assert self._closed, "wait_closed before close"
        steps = self._running_at_close
        waiting = [asyncio.wrap_future(f) for f in steps if not f.done()]
        if waiting:
            await asyncio.wait(waiting, timeout=timeout_s)
            for w in waiting:  # the ones still running: their completion is nobody's business now
                w.cancel()
        failed = tuple((label, exc) for f, label in steps.items()
                       if f.done() and not f.cancelled() and (exc := f.exception()) is not None)
        return StepsAtClose(failed, tuple(label for f, label in steps.items() if not f.done()))
