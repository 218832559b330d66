"""Takes a SQLite data directory away from a running app, as an unreachable database."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.engine import Engine


@contextmanager
def data_dir_gone(engine: Engine, data: Path) -> Iterator[None]:
    """The pool's open handles are dropped and a plain file takes the data directory's place, so the
    next connection fails (even as root, whom permissions would not stop); put back on exit."""
    moved = data.with_name(data.name + "-moved")
    engine.dispose()
    data.rename(moved)
    data.write_text("not a directory")
    try:
        yield
    finally:
        data.unlink()
        moved.rename(data)
