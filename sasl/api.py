"""HTTP routers of `sasl`, installed into the control plane by `kgov.app`."""

from __future__ import annotations

from fastapi import FastAPI


def install(app: FastAPI) -> None:
    """Adds this package's routes to the control plane. Reads what it needs from `app.state`."""
