"""Owner-only directories and files for what kgov keeps on disk (SQLite database, keys, audit trail).

The SQLite database holds OAuth signing keys, SCRAM keys and delegation-token HMACs: readable by
another local user, it is a full takeover. Modes are set with chmod after creation, so the result
does not depend on the process umask.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Creates `path` (and missing parents) and makes it 0700."""
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    os.chmod(path, PRIVATE_DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """Creates `path` empty if missing and makes it 0600; a symlink is refused (ELOOP), never followed."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)
    finally:
        os.close(fd)
    return path


def sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite URL, or None (another backend, in-memory, or unparsable)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if not parsed.drivername.startswith("sqlite") or not parsed.database or parsed.database == ":memory:":
        return None
    if parsed.database.startswith("file:") or parsed.query.get("mode") == "memory":
        return None
    return Path(parsed.database)
