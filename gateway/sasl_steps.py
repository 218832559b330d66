"""Worker threads for SASL mechanism steps, so a login's key derivation never stalls the event loop.

A SaslAuthenticate step may cost milliseconds of CPU: PBKDF2 for a PLAIN verification the cache
cannot answer (about 10 ms for SCRAM-SHA-512 at 16,384 iterations), a JWT
signature check for OAUTHBEARER, now and then a store read (the credential snapshot's version poll)
or a JWKS fetch for an unknown key id. On the gateway's event loop every such step would hold every
other client's produce and fetch for its whole duration. hashlib's PBKDF2 and `cryptography`'s
verifications release the GIL, so on a worker thread they run beside the loop.

The pool is bounded twice: `workers` threads, and at most `max_waiting` steps waiting for one. A step
offered beyond that is refused at once (`submit` answers False) and the caller fails the login as a
failed authentication (audited, after the failure delay), so a login storm costs bounded memory and a
bounded wait instead of a queue that grows without limit. Steps of re-authentications are never
refused (`submit(..., may_refuse=False)`): they belong to connections that already proved their
identity, at most one step each, and refusing one would close a working connection.

Departure from Kafka: a broker runs `SaslServerAuthenticator.authenticate` on its network threads
(`num.network.threads`, each serving many connections), so a slow login there stalls the other
connections of its network thread, and nothing bounds the logins waiting.

Every count is kept on the event loop's thread (`submit` is called there and completions are handed
back to it), so no lock is needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")

DEFAULT_MAX_WAITING = 512


def default_workers() -> int:
    """The CPUs this process may run on (PBKDF2 is CPU-bound: more threads than cores only queue)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not on Linux
        return max(os.cpu_count() or 1, 1)


class SaslStepPool(Generic[T]):
    def __init__(self, workers: int = 0, max_waiting: int = DEFAULT_MAX_WAITING) -> None:
        if workers < 0 or max_waiting < 0:
            raise ValueError("workers and max_waiting must not be negative")
        self.workers = workers or default_workers()
        self.max_waiting = max_waiting
        self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="kgov-sasl-step")
        self._pending = 0  # submitted, outcome not yet handed back to the loop
        self.refused = 0  # steps refused because `max_waiting` were waiting (for tests and metrics)
        self._closed = False

    @property
    def pending(self) -> int:
        """Steps running or waiting for a thread."""
        return self._pending

    @property
    def waiting(self) -> int:
        """Steps waiting for a thread (their count is bounded by `max_waiting`)."""
        return max(self._pending - self.workers, 0)

    def submit(self, run: Callable[[], T], on_done: Callable[[Future[T]], None], *, may_refuse: bool = True) -> bool:
        """Runs `run` on a worker thread, then `on_done(future)` on the calling event loop. False,
        without running anything, when the pool is closed or (`may_refuse`) `max_waiting` steps wait
        already. Must be called on the event loop's thread."""
        if self._closed or (may_refuse and self._pending >= self.workers + self.max_waiting):
            self.refused += not self._closed
            return False
        loop = asyncio.get_running_loop()
        future = self._executor.submit(run)
        self._pending += 1

        def deliver(done: Future[T]) -> None:
            self._pending -= 1
            if not self._closed:
                on_done(done)

        def hand_back(done: Future[T]) -> None:  # on the worker thread
            # A closed loop raises: the gateway stopped and nobody waits for this outcome.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(deliver, done)

        future.add_done_callback(hand_back)
        return True

    def close(self) -> None:
        """Drops the waiting steps; running ones finish on their threads and their outcomes are
        discarded. Does not wait."""
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)
