"""`kgov serve` in its own process, on a free port: what an operator runs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.ports import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[3]
PASSWORD = "e2e-registry-password-long"


@contextmanager
def kgov_serve(data: Path, db: str | None = None) -> Iterator[str]:
    """Yields the base URL of a `kgov serve` process with its own data directory (and SQLite unless `db`)."""
    data.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KGOV_ADMIN__PASSWORD": PASSWORD,
           "KGOV_DATA_DIR": str(data), "KGOV_SASL__FAILED_AUTHENTICATION_DELAY_MS": "0"}
    with (data / "serve.log").open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "kgov", "serve", "--port", str(port), "--log-level",
                                 "warning", "--db", db or f"sqlite:///{data / 'kgov.db'}"],
                                cwd=data, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for_port("127.0.0.1", port, timeout=90)
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
