"""kgov.broker_sandbox.PortHoldingRelay: the plain broker's port, held by kgov, relayed only to a listener of
kgov's own user (kgov.up.embedded_broker)."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from kgov.broker_sandbox import (
    PROC_NET_TABLES,
    AmbiguousOwner,
    OwnerUnknowable,
    PortHoldingRelay,
    choose_listener_lookup,
    diag_listener_uids,
    proc_listener_uids,
)
from tests.unit.kgov.test_broker_sandbox import _exchange, upper_echo

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def _row(local: str, state: str, uid: int, remote: str = "00000000:0000") -> str:
    return f"   0: {local} {remote} {state} 00000000:00000000 00:00000000 00000000 {uid:>5}        0 4242 1\n"


def _tables(tmp_path: Path, ipv4: Sequence[str], ipv6: Sequence[str] = ()) -> list[Path]:
    tcp, tcp6 = tmp_path / "tcp", tmp_path / "tcp6"
    tcp.write_text(HEADER + "".join(ipv4))
    tcp6.write_text(HEADER + "".join(ipv6))
    return [tcp, tcp6]


PORT = 0x2384  # 9092
OTHER_UID = 65533  # an unprivileged user that is not kgov's (and not the overflow uid)
# An interpreter that user may run (the virtualenv's may sit in a directory closed to it); stdlib only.
OTHERS_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
LOOPBACK, ANY = f"0100007F:{PORT:04X}", f"00000000:{PORT:04X}"
ANY6, MAPPED_LOOPBACK6 = f"{'0' * 32}:{PORT:04X}", f"0000000000000000FFFF00000100007F:{PORT:04X}"


def test_the_listeners_that_could_take_a_loopback_connection_are_read_from_the_socket_tables(
        tmp_path: Path) -> None:
    def owners(ipv4: Sequence[str], ipv6: Sequence[str] = ()) -> set[int] | None:
        return proc_listener_uids(PORT, _tables(tmp_path, ipv4, ipv6))

    assert owners([_row(LOOPBACK, "0A", 1000)]) == {1000}
    assert owners([_row(ANY, "0A", 1001)]) == {1001}
    assert owners([], [_row(ANY6, "0A", 1001)]) == {1001}  # a dual-stack listener takes 127.0.0.1 too
    assert owners([], [_row(MAPPED_LOOPBACK6, "0A", 1001)]) == {1001}
    assert owners([_row(LOOPBACK, "0A", 1000)], [_row(ANY6, "0A", 1001)]) == {1000, 1001}
    assert owners([]) == set()
    # what cannot take a connection to 127.0.0.1:PORT does not count: 127.0.0.2, a connection, another port
    assert owners([_row(LOOPBACK, "0A", 1000), _row(f"0200007F:{PORT:04X}", "0A", 1001),
                   _row(LOOPBACK, "01", 1001, remote="0100007F:D431"),
                   _row(f"0100007F:{PORT + 1:04X}", "0A", 1001)]) == {1000}
    # a table that cannot be read: nobody can tell
    assert proc_listener_uids(PORT, [_tables(tmp_path, [_row(LOOPBACK, "0A", 1000)])[0],
                                     tmp_path / "no-such-table"]) is None


def test_the_read_stops_after_the_listeners_which_linux_writes_first(tmp_path: Path) -> None:
    """Past the first line that is neither LISTEN nor SYN_RECV nothing is read (nor formatted by the kernel):
    Linux writes every listener before the other sockets. Reading the whole tables still finds a listener
    written later, for a /proc that lists them in another order."""
    later = [_row(LOOPBACK, "0A", 1000), _row(LOOPBACK, "03", 1000, remote="0100007F:D431"),  # a pending one
             _row(ANY, "0A", 1001), _row(LOOPBACK, "01", 1000, remote="0100007F:D432"),
             _row(ANY, "0A", 1002)]
    tables = _tables(tmp_path, later, [_row(LOOPBACK, "06", 0, remote="0100007F:D433"), _row(ANY6, "0A", 1003)])
    assert proc_listener_uids(PORT, tables) == {1000, 1001}
    assert proc_listener_uids(PORT, tables, whole_tables=True) == {1000, 1001, 1002, 1003}


def test_this_kernel_writes_its_listeners_before_its_connections() -> None:
    """What proc_listener_uids relies on, with connections made before a listener."""
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
        for _ in range(20):
            stack.enter_context(socket.create_connection(server.getsockname()[:2]))
            stack.enter_context(server.accept()[0])
        late = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
        for table in PROC_NET_TABLES:
            states = [line.split()[3] for line in table.read_text().splitlines()[1:]]
            first_other = next((i for i, state in enumerate(states) if state not in ("0A", "03")), len(states))
            assert "0A" not in states[first_other:], table
            if table.name == "tcp":
                assert states.count("0A") >= 2 and first_other < len(states)  # both kinds are there
        assert proc_listener_uids(late.getsockname()[1]) == {os.geteuid()}


class _ConnectionsFirst:
    """A socket table as a /proc that does not write listeners first would show it (gVisor or WSL may
    not): the real table's lines with the listeners moved last."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def open(self) -> io.StringIO:
        header, *rows = self.path.read_text().splitlines(keepends=True)
        return io.StringIO(header + "".join(sorted(rows, key=lambda row: row.split()[3] == "0A")))


def test_where_listeners_are_not_written_first_every_line_is_read() -> None:
    tables: Any = [_ConnectionsFirst(table) for table in PROC_NET_TABLES]
    name, lookup = choose_listener_lookup(tables=tables, candidates=("proc",))
    assert name == "proc-whole"
    with socket.create_server(("127.0.0.1", 0)) as mine:
        assert lookup(mine.getsockname()[1]) == {os.geteuid()}


# Another user's listener: prints its port, then waits to be killed.
OTHERS_LISTENER = """
import socket, sys, time
family = socket.AF_INET6 if sys.argv[1] == "::" else socket.AF_INET
s = socket.create_server((sys.argv[1], 0), family=family, dualstack_ipv6=family == socket.AF_INET6)
print(s.getsockname()[1], flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("lookup", [diag_listener_uids, proc_listener_uids], ids=["sock_diag", "proc"])
@pytest.mark.parametrize("address", ["127.0.0.1", "0.0.0.0", "::"])
def test_the_kernel_names_the_owner_of_a_real_listener(lookup: Any, address: str) -> None:
    with socket.create_server((address, 0), family=socket.AF_INET6 if address == "::" else socket.AF_INET,
                              dualstack_ipv6=address == "::") as mine:
        port = mine.getsockname()[1]
        assert lookup(port) == {os.geteuid()}
    assert lookup(port) == set()  # closed: nothing listens
    if os.geteuid() == 0:  # a listener that really is another user's (only root can start one)
        with subprocess.Popen([OTHERS_PYTHON, "-I", "-c", OTHERS_LISTENER, address], user=OTHER_UID,
                              stdout=subprocess.PIPE, text=True, cwd="/") as theirs:
            try:
                assert theirs.stdout is not None
                assert lookup(int(theirs.stdout.readline())) == {OTHER_UID}
            finally:
                theirs.kill()


def test_a_listener_lookup_is_chosen_only_if_it_works(tmp_path: Path) -> None:
    assert choose_listener_lookup()[0] == "sock_diag"
    assert choose_listener_lookup(candidates=("proc",))[0] == "proc"
    with pytest.raises(OwnerUnknowable):
        choose_listener_lookup(tables=[tmp_path / "no-such-table"], candidates=("proc",))


def test_the_relay_is_refused_where_the_kernel_does_not_say_who_listens(tmp_path: Path) -> None:
    with pytest.raises(OwnerUnknowable):
        PortHoldingRelay(os.geteuid(), tables=[tmp_path / "no-such-table"], lookups=("proc",))


@pytest.fixture
def echo_server() -> Iterator[tuple[int, list[bytes]]]:
    """A loopback TCP server of this user: answers what it received, upper-cased; records what came."""
    server = socket.create_server(("127.0.0.1", 0))
    with upper_echo(server) as received:
        yield server.getsockname()[1], received


def _through(owner_uid: int, target_port: int | None, lookups: Sequence[str] = ("sock_diag",)) -> tuple[bytes, int]:
    relay = PortHoldingRelay(owner_uid, lookups=lookups)
    assert relay.lookup_name == lookups[0]
    relay.target_port = target_port
    port = relay.start()
    try:
        return _exchange(port), relay.refused
    finally:
        relay.stop()


@pytest.mark.parametrize("lookup", ["sock_diag", "proc"])
def test_the_relay_passes_connections_to_its_owners_listener(echo_server: tuple[int, list[bytes]],
                                                             lookup: str) -> None:
    port, received = echo_server
    assert _through(os.geteuid(), port, (lookup,)) == (b"HELLO", 0)
    assert received == [b"hello"]


@pytest.mark.parametrize("lookup", ["sock_diag", "proc"])
def test_the_relay_sends_nothing_to_a_listener_that_is_not_its_owners(echo_server: tuple[int, list[bytes]],
                                                                      lookup: str) -> None:
    """As if the broker's port had been taken by another user while it restarted: the connection is cut
    before anything of the client's reaches them."""
    port, received = echo_server
    assert _through(os.geteuid() + 1, port, (lookup,)) == (b"", 1)
    assert b"hello" not in received


def test_the_relay_fails_closed_when_the_lookup_fails(echo_server: tuple[int, list[bytes]],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    port, received = echo_server
    relay = PortHoldingRelay(os.geteuid())
    relay.target_port = port
    served = relay.start()
    try:
        for failure in (OSError(24, "Too many open files"), ValueError("malformed answer")):
            def failing(port: int, failure: Exception = failure) -> set[int] | None:
                raise failure

            relay._owners = failing
            assert _exchange(served) == b""
        relay._owners = lambda port: None  # no answer
        assert _exchange(served) == b""
        assert relay.refused == 3
        assert b"hello" not in received
    finally:
        relay.stop()


def test_the_relay_refuses_connections_before_the_broker_first_started() -> None:
    assert _through(os.geteuid(), None) == (b"", 0)


def test_the_port_holding_relay_refuses_to_run_as_the_overflow_uid(tmp_path: Path) -> None:
    """As the overflow uid (`nobody`), a listener of another user namespace's unmapped user shows the
    same uid as kgov's broker, so the relay could not tell them apart."""
    overflow = tmp_path / "overflowuid"
    overflow.write_text(f"{os.geteuid()}\n")
    with pytest.raises(AmbiguousOwner, match=r"overflow uid"):
        PortHoldingRelay(os.geteuid(), overflow_uid_path=overflow)
    overflow.write_text(f"{os.geteuid() + 1}\n")
    PortHoldingRelay(os.geteuid(), overflow_uid_path=overflow).stop()
