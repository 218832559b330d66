"""The plain (unsandboxed) broker while the supervisor restarts it (kgov.up.embedded_broker): the port the
gateway knows it by stays kgov's, and a port the dead broker left is not trusted. Were the broker's own port
bound again at each restart, another local user could bind it in between and receive the gateway's traffic
(produce requests and all) and answer it as the broker."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import kgov.up
from kgov.broker_supervisor import RestartPolicy
from tests.integration.kgov.test_broker_restart import _broker, _dies_soon
from tests.support.waiting import wait_for

# Restarted after 4 s: the window in which no broker listens.
SLOW_RESTART = RestartPolicy(first_delay_s=4, max_delay_s=4, quick_s=60, give_up_after=5)
OTHER_UID = 65533  # an unprivileged user that is not kgov's (and not the overflow uid)
ATTACKER_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable

# Another user: listens on every given loopback port it can bind, then says whether data came to any.
ATTACKER = """
import select, socket, sys, time
servers = []
for port in sys.argv[1:]:
    try:
        servers.append(socket.create_server(("127.0.0.1", int(port))))
    except OSError:
        pass
print("listening", len(servers), flush=True)
end, got = time.monotonic() + 3, b""
while servers and time.monotonic() < end and not got:
    ready, _, _ = select.select(servers, [], [], 0.1)
    for server in ready:
        conn, _ = server.accept()
        conn.settimeout(1)
        try:
            got += conn.recv(100)
        except OSError:
            pass
print("hijacked" if got else "nothing came", got, flush=True)
"""


def test_while_the_plain_broker_restarts_no_other_user_can_stand_in_for_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listened: list[int] = []

    def dies_soon(listener_url: str, advertised_url: str) -> list[str]:
        listened.append(int(listener_url.rsplit(":", 1)[1]))
        return _dies_soon(listener_url, advertised_url)

    monkeypatch.setattr(kgov.up, "_tansu_broker_command", dies_soon)  # ends 0.2 s after it starts
    monkeypatch.setattr(kgov.up, "_give_up", lambda message: None)
    with _broker("plain", tmp_path / "data", SLOW_RESTART) as broker:
        assert wait_for(lambda: broker.supervisor.problem() is not None, 10)  # ended; restart in 4 s
        host, port = broker.address.rsplit(":", 1)
        with socket.socket() as squatter:  # the address the gateway uses is not free to bind
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Tokio's (Tansu's) listeners do
            with pytest.raises(OSError) as taken:
                squatter.bind((host, int(port)))
            assert taken.value.errno == errno.EADDRINUSE
        if os.geteuid() == 0:  # the attack itself, as another user, on both that port and the dead broker's
            with subprocess.Popen([ATTACKER_PYTHON, "-I", "-c", ATTACKER, port, *map(str, set(listened))],
                                  user=OTHER_UID, stdout=subprocess.PIPE, text=True) as attacker:
                assert attacker.stdout is not None
                first = attacker.stdout.readline()
                assert first == "listening 1\n", first  # the dead broker's port only
                with socket.create_connection((host, int(port)), timeout=5) as kgov_side:  # as the gateway
                    kgov_side.sendall(b"produce request")
                    kgov_side.settimeout(5)
                    with contextlib.suppress(ConnectionResetError):
                        assert kgov_side.recv(100) == b""  # cut, unanswered
                rest = attacker.stdout.read()
            assert "hijacked" not in rest, rest
