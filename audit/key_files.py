"""Reading and first writing of the owner-only key files kgov keeps (the audit chain key, the audit seal
key, the generated secrets of `kgov.private_files`): one way for all of them, so none is weaker."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path


def read_owner_only(path: Path, what: str, error: type[Exception], *, limit: int = 64 * 1024) -> bytes:
    """The bytes (at most `limit`) of the existing regular file `path`, readable by its owner only;
    `error(message)` otherwise, naming `what` and the file, never what it holds. Opened non-blocking, so a
    FIFO put in its place cannot hang a start; a symbolic link is followed (a Kubernetes secret volume's
    files are links)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as fh:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise error(f"{what} {path} is not a regular file")
            if st.st_mode & 0o077:
                # Whoever reads the key can forge what it protects.
                raise error(f"{what} {path} has mode {stat.S_IMODE(st.st_mode):04o}; only its owner may read it: "
                            f"run `chmod 600 {path}`")
            return fh.read(limit)
    except FileNotFoundError:
        raise error(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise error(f"cannot read the {what} {path}: {exc.strerror}") from None


def link_new_key(path: Path, data: bytes) -> None:
    """Writes a new key file (0600) at `path` unless one is there: whole, under a name of its own, synced,
    then linked into place, so a crash never leaves half a key and two first starts at once (control
    plane and gateway) do not remove or fill each other's staged key; the first link wins, the other
    start's key is dropped and both read the one linked."""
    staged = path.with_name(f"{path.name}.{secrets.token_hex(8)}.new")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(FileExistsError):  # never replaces a key another start wrote meanwhile
            os.link(staged, path)
    finally:
        staged.unlink()
