"""The clock kgov measures ages and time-to-live on: monotonic, and counting suspended time."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable


def _suspend_counting_clock() -> Callable[[], float]:
    """Seconds on a clock that never goes back and keeps counting while the machine is suspended.

    `time.monotonic()` is CLOCK_MONOTONIC on Linux, which stops during suspend: after a resume a
    snapshot last confirmed before the suspend would look as fresh as it was then. CLOCK_BOOTTIME
    counts the suspended time. Elsewhere (no CLOCK_BOOTTIME, or a kernel that refuses it) this falls
    back to `time.monotonic()`. A partial, not a lambda: it is read once per authorization when
    `max_snapshot_age_s` is on, and on every cache look-up elsewhere."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is None:
        return time.monotonic
    try:
        time.clock_gettime(boottime)
    except OSError:
        return time.monotonic
    return functools.partial(time.clock_gettime, boottime)


elapsed_clock: Callable[[], float] = _suspend_counting_clock()
