"""Owner-only directories and files for what kgov keeps on disk (SQLite database, keys, audit trail).

The SQLite database holds OAuth signing keys, SCRAM keys and delegation-token HMACs: readable by
another local user, it is a full takeover. Modes are set with chmod after creation, so the result
does not depend on the process umask.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

log = logging.getLogger("kgov")

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


# What kgov itself puts in its data and audit directories (audit files rotate to NAME.1, NAME.2, ...).
_KGOV_FILE = re.compile(
    r"kgov\.db(-wal|-shm|-journal)?|(delegation-token\.key|signing-key\.secret)(\.new)?|tansu\.log|audit"
    r"|(gateway-)?(events\.jsonl|kafka-authorizer\.log|kafka-request\.log)(\.\d+)?"
)


def private_dir(path: Path) -> Path:
    """Creates `path` (and missing parents) 0700. An existing directory is tightened to 0700 only when it
    is kgov's own (owned by this user, not sticky, holding nothing but kgov's files): `data_dir = "/tmp"`
    or `/var/lib` must not lose its mode. Otherwise a looser mode is only reported; kgov's files in it
    are 0600 (private_file) either way."""
    created = not path.exists()
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    st = path.stat()
    if stat.S_IMODE(st.st_mode) == PRIVATE_DIR_MODE:
        return path
    ours = st.st_uid == os.geteuid() and not st.st_mode & stat.S_ISVTX
    if created or (ours and all(_KGOV_FILE.fullmatch(entry.name) for entry in path.iterdir())):
        os.chmod(path, PRIVATE_DIR_MODE)
    elif st.st_mode & 0o077:
        log.warning("%s is open to other users (mode %o); kgov's files in it are owner-only, but a directory "
                    "of its own (chmod 700) is safer", path, stat.S_IMODE(st.st_mode))
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
