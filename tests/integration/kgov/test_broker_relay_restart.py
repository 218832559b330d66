"""The sandboxed broker's relay while the supervisor restarts it (kgov.up.isolated_broker): the relay goes on
relaying kgov's connections to the last broker's Unix socket until the new one is ready, so that path must
stay where no other user can put a socket of their own. Another user who could make the old socket's
directory again (it was a directory of its own in /tmp, removed when the broker ended) would receive the
gateway's traffic, produce requests and all, and answer it as the broker."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import kgov.up
from kgov.broker_supervisor import RestartPolicy
from tests.integration.kgov.test_broker_restart import _broker, _dies_soon
from tests.support.waiting import wait_for

# Restarted after 4 s: the window in which the relay still names the socket of the broker that ended.
SLOW_RESTART = RestartPolicy(first_delay_s=4, max_delay_s=4, quick_s=60, give_up_after=5)
OTHER_UID = 65533  # an unprivileged user that is not kgov's (and not the overflow uid)
# An interpreter that user may run (the virtualenv's may sit in a directory closed to it); stdlib only.
ATTACKER_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable

# Another user: makes the old socket's directory again and listens there, then says whether the relay came.
ATTACKER = """
import os, socket, sys
path = sys.argv[1]
try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
except OSError as exc:
    print("refused", type(exc).__name__, flush=True)
    sys.exit(0)
print("listening", flush=True)
server.settimeout(5)
try:
    conn, _ = server.accept()
    print("hijacked", conn.recv(100), flush=True)
except OSError:
    print("nobody came", flush=True)
"""


def _writable_by_others(path: Path) -> bool:
    """Whether a user other than this process's could create `path` (its nearest existing ancestor is
    not this user's own directory closed to others)."""
    ancestor = path
    while not ancestor.exists():
        ancestor = ancestor.parent
    info = ancestor.stat()
    return info.st_uid != os.geteuid() or bool(info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def test_while_the_broker_restarts_no_other_user_can_take_the_relays_socket_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kgov.up, "_tansu_broker_command", _dies_soon)  # ends 0.2 s after it starts
    monkeypatch.setattr(kgov.up, "_give_up", lambda message: None)
    with _broker("sandboxed", tmp_path / "data", SLOW_RESTART) as broker:
        old = broker.supervisor.broker.sockets / "broker.sock"  # type: ignore[attr-defined]
        assert wait_for(lambda: broker.supervisor.problem() is not None, 10)  # ended; restart in 4 s
        assert wait_for(lambda: not old.exists(), 5)  # the sandbox removed its socket
        assert not _writable_by_others(old), f"another user could create {old} while the broker restarts"
        if os.geteuid() == 0:  # the attack itself, as another user
            with subprocess.Popen([ATTACKER_PYTHON, "-I", "-c", ATTACKER, str(old)], user=OTHER_UID,
                                  stdout=subprocess.PIPE, text=True) as attacker:
                assert attacker.stdout is not None
                first = attacker.stdout.readline()
                if first.startswith("listening"):
                    host, port = broker.address.rsplit(":", 1)
                    with socket.create_connection((host, int(port)), timeout=5) as kgov_side:  # as the gateway
                        kgov_side.sendall(b"produce request")
                        first += attacker.stdout.read()
            assert "hijacked" not in first, first
            assert first.startswith("refused"), first
