"""Retry with exponential backoff for transient KMS failures (`KmsUnavailableError` only).

A KMS outage must never be skipped silently: after the last attempt the error is raised with the number
of attempts in its message. Sleep is injected so tests never wait.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from encryption.errors import KmsUnavailableError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 5
    initial_delay: float = 0.05
    max_delay: float = 2.0
    multiplier: float = 2.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("RetryPolicy.attempts must be at least 1")
        if self.initial_delay < 0 or self.max_delay < 0 or self.multiplier < 1:
            raise ValueError("RetryPolicy delays must be >= 0 and multiplier >= 1")

    def delays(self) -> list[float]:
        """The waits between attempts ("full jitter" halves the herd after a KMS restart)."""
        delays: list[float] = []
        delay = self.initial_delay
        for _ in range(self.attempts - 1):
            delays.append(min(self.max_delay, delay) * (0.5 + random.random() / 2))  # noqa: S311
            delay *= self.multiplier
        return delays


def call_with_retry(policy: RetryPolicy, operation: str, call: Callable[[], T]) -> T:
    """Runs `call`, retrying `KmsUnavailableError`; any other error propagates at once."""
    delays = policy.delays()
    for attempt in range(policy.attempts):
        try:
            return call()
        except KmsUnavailableError as exc:
            if attempt == policy.attempts - 1:
                raise KmsUnavailableError(
                    f"KMS unavailable for {operation} after {policy.attempts} attempts: {exc}"
                ) from exc
            policy.sleep(delays[attempt])
    raise AssertionError("unreachable")  # pragma: no cover
