"""Polling for a condition that another thread or process brings about."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], object], seconds: float = 10.0, interval: float = 0.02) -> bool:
    """Whether `condition()` became truthy within `seconds` (checked every `interval`)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return False
