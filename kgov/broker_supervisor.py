"""Keeps `kgov up`'s embedded broker running: notices when it dies, restarts it with backoff, gives up.

The embedded Tansu is a child process; if it crashes the gateway would go on failing every upstream
connection with nothing said. The supervisor waits on it in a thread: on an exit it was not asked for it
logs an ERROR with how the broker ended (its exit code or signal, nothing of its environment or output),
starts it again after a growing delay, and after `RestartPolicy.give_up_after` quick failures in a row
calls `on_give_up` (`kgov up` then stops with a non-zero exit). While the broker is down, `problem()`
says so (`/health` answers 503 with it).

The restart policy is a pure function of the failures so far (`RestartPolicy.after_exit`).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger("kgov.broker")


def describe_exit(returncode: int) -> str:
    """`exited with code 3`, or `was killed by SIGKILL` for a negative returncode (Popen's convention)."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


class RunningBroker(Protocol):
    def wait(self) -> str:
        """Blocks until the broker exits; how it ended (describe_exit's wording)."""

    def stop(self) -> None:
        """Stops it (SIGTERM, then SIGKILL); returns once it is gone."""


@dataclass(frozen=True, slots=True)
class Restart:
    delay_s: float
    quick_failures: int


@dataclass(frozen=True, slots=True)
class GiveUp:
    quick_failures: int


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """A run shorter than `quick_s` is a quick failure; the delay doubles from `first_delay_s` with each
    quick failure in a row, up to `max_delay_s`; `give_up_after` of them in a row end the supervision.
    A run that lasted `quick_s` or more starts the count again (a crash a day is restarted every time)."""

    first_delay_s: float = 0.5
    max_delay_s: float = 30.0
    quick_s: float = 30.0
    give_up_after: int = 5

    def after_exit(self, quick_failures: int, ran_s: float) -> Restart | GiveUp:
        """What to do after the broker ran `ran_s` seconds, with `quick_failures` quick ones before it."""
        streak = quick_failures + 1 if ran_s < self.quick_s else 0
        if streak >= self.give_up_after:
            return GiveUp(streak)
        delay = min(self.max_delay_s, self.first_delay_s * 2 ** max(streak - 1, 0))
        return Restart(delay, streak)


class BrokerSupervisor:
    """Runs `start()` now (its errors are the caller's, as before supervision) and watches what it
    returned from a thread of its own (`watch`). `stop()` stops the broker and the watching."""

    def __init__(self, start: Callable[[], RunningBroker], *, log_hint: str,
                 on_give_up: Callable[[str], None], policy: RestartPolicy = RestartPolicy(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._start = start
        self._log_hint = log_hint
        self._on_give_up = on_give_up
        self.policy = policy
        self._clock = clock
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._broker = start()
        self._started_at = clock()
        self._thread: threading.Thread | None = None
        self.restarts = 0
        self.gave_up: str | None = None
        self._problem: str | None = None

    def watch(self) -> None:
        """Starts watching the broker (after the caller has forked what it needed to: this is a thread)."""
        self._thread = threading.Thread(target=self._run, name="kgov-broker-supervisor", daemon=True)
        self._thread.start()

    @property
    def broker(self) -> RunningBroker:
        """The broker last started (it may have exited since)."""
        return self._broker

    def problem(self) -> str | None:
        """None while the broker runs; else what is wrong (for /health)."""
        return self._problem

    def stop(self) -> None:
        with self._lock:
            self._stopping.set()
            broker = self._broker
        broker.stop()
        if self._thread is not None:
            self._thread.join(30)

    def _run(self) -> None:
        quick_failures = 0
        broker: RunningBroker | None = self._broker
        while True:
            ended = broker.wait() if broker is not None else "did not start"
            if self._stopping.is_set():
                return
            ran_s = self._clock() - self._started_at
            self._problem = "the embedded broker (Tansu) is down; kgov up is restarting it"
            log.error("the embedded broker (Tansu) %s after %.1f s; see %s", ended, ran_s, self._log_hint)
            decision = self.policy.after_exit(quick_failures, ran_s)
            if isinstance(decision, GiveUp):
                self.gave_up = (
                    f"the embedded broker (Tansu) failed {decision.quick_failures} times in a row within "
                    f"{self.policy.quick_s:.0f} s of starting (last: {ended}); giving up. See {self._log_hint}")
                self._problem = "the embedded broker (Tansu) is down; kgov up gave up restarting it"
                log.error("%s", self.gave_up)
                self._on_give_up(self.gave_up)
                return
            quick_failures = decision.quick_failures
            log.warning("restarting the embedded broker in %.1f s", decision.delay_s)
            if self._stopping.wait(decision.delay_s):
                return
            broker = self._restart()
            if broker is None:
                self._started_at = self._clock()  # a start that failed is a quick failure
                continue
            self.restarts += 1
            self._problem = None
            # Tansu's storage is memory://: what the broker held before is gone (see README, kgov up).
            log.warning("the embedded broker (Tansu) is running again (restart %d); topics and records "
                        "written before the restart are lost (memory storage)", self.restarts)

    def _restart(self) -> RunningBroker | None:
        with self._lock:
            if self._stopping.is_set():
                return None
            try:
                broker = self._start()
            except Exception as exc:  # a failed restart counts as a quick failure
                log.error("the embedded broker (Tansu) did not restart: %s", exc)
                return None
            self._broker = broker
            self._started_at = self._clock()
            return broker
