"""A real PostgreSQL server for the test session (Debian's package, installed by `make test`).

Set KGOV_TEST_POSTGRES_URL to use a server of your own instead (a database per test is created in it).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from tests.support.ports import free_port


def _bin_dir() -> Path:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name))
    if not candidates:
        raise RuntimeError(
            "PostgreSQL server binaries not found under /usr/lib/postgresql; run `make test`, "
            "which installs Debian's postgresql package (scripts/system-deps.sh)"
        )
    return Path(candidates[-1])


def _as_user() -> list[str]:
    """PostgreSQL refuses to run as root: run it as the `postgres` account the package creates."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "postgres"], check=True)
    return ["runuser", "-u", "postgres", "--"]


@contextmanager
def postgres_server() -> Iterator[str]:
    """Yields an admin URL (`postgresql+psycopg://kgov@127.0.0.1:PORT/postgres`)."""
    external = os.environ.get("KGOV_TEST_POSTGRES_URL")
    if external:
        yield external
        return
    bindir = _bin_dir()
    prefix = _as_user()
    root = Path(tempfile.mkdtemp(prefix="kgov-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if prefix:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
    port = free_port()
    subprocess.run(
        [*prefix, str(bindir / "initdb"), "-D", str(data), "-U", "kgov", "-A", "trust", "-E", "UTF8", "--no-sync"],
        check=True, stdout=subprocess.DEVNULL,
    )
    opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    subprocess.run(
        [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-w", "-t", "60", "-l", str(root / "log"), "-o", opts,
         "start"],
        check=True, stdout=subprocess.DEVNULL,
    )
    try:
        yield f"postgresql+psycopg://kgov@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"],
            check=False, stdout=subprocess.DEVNULL,
        )
        shutil.rmtree(root, ignore_errors=True)


def create_database(admin_url: str) -> str:
    """A fresh empty database on the server; returns its SQLAlchemy URL."""
    name = "t_" + uuid.uuid4().hex[:12]
    dsn = admin_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return admin_url.rsplit("/", 1)[0] + "/" + name
