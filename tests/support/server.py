"""A real control plane (uvicorn on a free loopback port) for HTTP-level tests: the same runner
`kgov up` uses."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import FastAPI

from kgov.up import control_plane
from tests.support.ports import free_port


@contextmanager
def serve_app(app: FastAPI) -> Iterator[str]:
    """Runs `app` in a background thread; yields its base URL; stops it afterwards."""
    port = free_port()
    # kgov.app.build_app's app: its own body cap (a wrapping ASGI app, as some tests serve, has no state)
    settings = getattr(getattr(app, "state", None), "settings", None)
    options = {"max_body_bytes": settings.http_request_max_bytes} if settings is not None else {}
    with control_plane(app, "127.0.0.1", port, **options):
        yield f"http://127.0.0.1:{port}"
