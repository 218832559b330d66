"""Owner-only directories and files for what kgov keeps on disk (SQLite database, keys, audit trail).

The SQLite database holds OAuth signing keys, SCRAM keys and delegation-token HMACs: readable by
another local user, it is a full takeover. Modes are set with chmod after creation, so the result
does not depend on the process umask.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import stat
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from audit.integrity import AUDIT_FILE_PATTERN
from audit.key_files import link_new_key

log = logging.getLogger("kgov")

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


# What kgov itself puts in its data and audit directories (audit files rotate to NAME.1, NAME.2, ..., each
# with its chain file .NAME.chain, .NAME.1.chain, ...: audit.integrity; .NAME.lock: audit.rotation).
_KGOV_FILE = re.compile(
    r"kgov\.db(-wal|-shm|-journal)?"
    r"|(delegation-token\.key|signing-key\.secret|audit-integrity\.key|audit-seal\.key)(\.([0-9a-f]{16}\.)?new)?"
    rf"|tansu\.log|audit|{AUDIT_FILE_PATTERN}|\.{AUDIT_FILE_PATTERN}\.(chain|lock)"
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


# What local_secret generates is 43 characters; settings take 16 at least from the operator.
LOCAL_SECRET_MIN_CHARS = 32


def local_secret(path: Path) -> str:
    """A generated key kept in the data directory (0600), the same from one run to the next.

    The value is used after the settings were validated, so their 16-character check never sees it: a file
    cut short (an interrupted write, a hand edit) would key every delegation token's HMAC, seal the issuer's
    keys or the audit trail's chain with next to nothing. It is refused instead, and a new key is written
    whole under a temporary name before it takes the real one, so a crash never leaves such a file behind."""
    if not path.exists():
        value = secrets.token_urlsafe(32)
        with contextlib.suppress(FileNotFoundError):
            path.with_name(path.name + ".new").unlink()  # an earlier version's, left by a crash before the link
        link_new_key(path, (value + "\n").encode("ascii"))
    private_file(path)  # an earlier version, or a copy, may have left it readable to others
    return _checked_secret(path, path.read_text())


def saved_secret(path: Path) -> str | None:
    """The key `local_secret` keeps at `path` (made owner-only, checked as it checks it), or None when there
    is no such file: for the commands that use what `kgov up` generated and must never generate one (a key
    of their own would not open what the platform's key made). A symlink is refused (ELOOP), as there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd) as fh:
        os.fchmod(fd, PRIVATE_FILE_MODE)
        return _checked_secret(path, fh.read())


def _checked_secret(path: Path, text: str) -> str:
    value = text.strip()
    if len(value) < LOCAL_SECRET_MIN_CHARS:
        raise RuntimeError(
            f"{path} holds a key of {len(value)} characters, fewer than the {LOCAL_SECRET_MIN_CHARS} kgov "
            f"needs; delete the file to have a new one generated (what the old key signed or sealed stops "
            f"opening), or set the corresponding KGOV_ variable"
        )
    return value
