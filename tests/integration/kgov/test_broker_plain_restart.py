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

# Not restarted while the test runs (the supervisor's wait ends at once when the test stops it): the broker
# stays dead and the relay keeps pointing at the port it left, so the attack below always meets that window.
# (With a restart after 4 s, a slow machine could let the restart come first: the relay then pointed at the
# new broker, the attacker's port was never tried, and the test passed without an attack.)
NO_RESTART = RestartPolicy(first_delay_s=600, max_delay_s=600, quick_s=60, give_up_after=5)
OTHER_UID = 65533  # an unprivileged user that is not kgov's (and not the overflow uid)
ATTACKER_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable

# Another user: listens on every given loopback port it can bind; once told (a line on stdin) that kgov's
# side is done, says how many connections it accepted and what data came on them.
ATTACKER = """
import select, socket, sys
servers = []
for port in sys.argv[1:]:
    try:
        servers.append(socket.create_server(("127.0.0.1", int(port))))
    except OSError:
        pass
print("listening", len(servers), flush=True)
accepted, got, done = 0, b"", False
while not done:
    ready, _, _ = select.select([sys.stdin, *servers], [], [], 5)
    done = sys.stdin in ready or not ready
    for server in set(ready) - {sys.stdin}:
        conn, _ = server.accept()
        accepted += 1
        conn.settimeout(1)
        try:
            got += conn.recv(100)
        except OSError:
            pass
print("accepted", accepted, "hijacked" if got else "nothing came", got, flush=True)
"""


class _SeenRelay(kgov.up.PortHoldingRelay):
    """The relay kgov.up.embedded_broker makes, kept where the test can see it."""

    made: list[kgov.up.PortHoldingRelay] = []

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.made.append(self)


def test_while_the_plain_broker_restarts_no_other_user_can_stand_in_for_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listened: list[int] = []

    def dies_soon(listener_url: str, advertised_url: str) -> list[str]:
        listened.append(int(listener_url.rsplit(":", 1)[1]))
        return _dies_soon(listener_url, advertised_url)

    monkeypatch.setattr(kgov.up, "_tansu_broker_command", dies_soon)  # ends 0.2 s after it starts
    monkeypatch.setattr(kgov.up, "_give_up", lambda message: None)
    monkeypatch.setattr(_SeenRelay, "made", [])
    monkeypatch.setattr(kgov.up, "PortHoldingRelay", _SeenRelay)
    with _broker("plain", tmp_path / "data", NO_RESTART) as broker:
        assert wait_for(lambda: broker.supervisor.problem() is not None, 10)  # ended; not restarted
        [relay] = _SeenRelay.made
        assert listened == [relay.target_port]  # the relay still points at the port the dead broker left
        host, port = broker.address.rsplit(":", 1)
        assert int(port) == relay.port
        with socket.socket() as squatter:  # the address the gateway uses is not free to bind
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Tokio's (Tansu's) listeners do
            with pytest.raises(OSError) as taken:
                squatter.bind((host, int(port)))
            assert taken.value.errno == errno.EADDRINUSE
        if os.geteuid() == 0:  # the attack itself, as another user, on both that port and the dead broker's
            with subprocess.Popen([ATTACKER_PYTHON, "-I", "-c", ATTACKER, port, *map(str, listened)],
                                  user=OTHER_UID, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True) as attacker:
                assert attacker.stdin is not None and attacker.stdout is not None
                first = attacker.stdout.readline()
                assert first == "listening 1\n", first  # the dead broker's port only
                with socket.create_connection((host, int(port)), timeout=5) as kgov_side:  # as the gateway
                    kgov_side.sendall(b"produce request")
                    kgov_side.settimeout(5)
                    with contextlib.suppress(ConnectionResetError):
                        assert kgov_side.recv(100) == b""  # cut, unanswered
                attacker.stdin.write("done\n")
                attacker.stdin.flush()
                rest = attacker.stdout.read()
            # The attack happened: the relay did connect to the attacker's listener, saw whose it was, and
            # refused; nothing of the client's reached it.
            assert rest.startswith("accepted 1 nothing came"), rest
            assert relay.refused == 1
            assert relay.target_port == listened[0] and broker.supervisor.restarts == 0
