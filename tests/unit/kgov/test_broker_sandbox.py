"""kgov.broker_sandbox: who may reach `kgov up`'s unauthenticated broker, and the fallback when the host
gives it no network of its own."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kgov.up
from kgov import broker_sandbox
from kgov.broker_sandbox import (
    AmbiguousOwner,
    OwnerOnlyRelay,
    OwnerUnknowable,
    choose_peer_lookup,
    diag_peer_uid,
    proc_peer_uid,
)

LOOKUPS = pytest.mark.parametrize("lookup", [proc_peer_uid, diag_peer_uid], ids=["proc", "sock_diag"])


@contextlib.contextmanager
def upper_echo(server: socket.socket) -> Iterator[list[bytes]]:
    """Serves a listening socket: answers every connection with what it received, upper-cased. Yields
    what was received, one entry per connection."""
    received: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                with contextlib.suppress(OSError):
                    data = conn.recv(100)
                    received.append(data)
                    conn.sendall(data.upper())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        stop.set()
        thread.join(5)
        server.close()


@pytest.fixture
def echo_socket(tmp_path: Path) -> Iterator[Path]:
    """A Unix socket that answers every connection with what it received, upper-cased."""
    path = tmp_path / "echo.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    with upper_echo(server):
        yield path


def _exchange(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        c.sendall(b"hello")
        try:
            return c.recv(100)
        except ConnectionResetError:
            return b""


def test_proc_net_address_is_the_kernels_spelling() -> None:
    if sys.byteorder != "little":
        pytest.fail("the expected value below is for little-endian hosts")
    assert broker_sandbox._proc_net_address("127.0.0.1", 8080) == "0100007F:1F90"


@LOOKUPS
def test_peer_uid_names_the_owner_of_the_other_end(lookup: Any) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server, \
            socket.create_connection(server.getsockname()[:2], timeout=5) as client:
        conn, _ = server.accept()
        with conn:
            assert lookup(conn) == os.geteuid()
            client.close()
            conn.close()


def _client_state(port: int) -> str | None:
    """The `st` column of the client end of a loopback connection from `port`, None when not listed."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{port:04X}"):
            return fields[3]
    return None


@LOOKUPS
def test_peer_uid_has_no_owner_for_a_peer_that_already_closed(lookup: Any) -> None:
    """Once the client has closed, the kernel lists its end (FIN_WAIT2, then TIME_WAIT) with uid 0 whoever
    opened it: read as an owner, any user's connect-send-close passed a relay run by root, requests and all."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname()[:2], timeout=5)
        client_port = client.getsockname()[1]
        client.sendall(b"requests")
        client.close()
        deadline = time.monotonic() + 30
        while _client_state(client_port) in (None, "01") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _client_state(client_port) not in (None, "01")  # what is left of it, listed with uid 0
        conn, _ = server.accept()
        with conn:
            assert conn.recv(100) == b"requests"  # what a relay would have forwarded
            assert lookup(conn) is None


def test_peer_uid_finds_a_dual_stack_client_in_the_ipv6_table() -> None:
    """A client's IPv6 socket (Java's default) connecting to 127.0.0.1 is listed in /proc/net/tcp6 as
    ::ffff:127.0.0.1; its owner is found there (it used to be refused as unknown)."""
    if not socket.has_ipv6 or not Path("/proc/net/tcp6").exists():
        pytest.skip("this host has no IPv6 sockets")
    with socket.create_server(("127.0.0.1", 0)) as server, socket.socket(socket.AF_INET6) as client:
        client.settimeout(5)
        client.connect(("::ffff:127.0.0.1", server.getsockname()[1]))
        conn, _ = server.accept()
        with conn:
            assert proc_peer_uid(conn) == os.geteuid()
            assert proc_peer_uid(conn, tables=[Path("/proc/net/tcp")]) is None  # not in the IPv4 table
            assert diag_peer_uid(conn) == os.geteuid()  # one lookup by 4-tuple finds it too


def _through_relay(unix_path: Path, owner_uid: int, **options: Any) -> tuple[bytes, int]:
    """What a connection from this process gets back through a relay, and how many the relay refused."""
    relay = OwnerOnlyRelay(unix_path, owner_uid, **options)
    port = relay.start()
    try:
        return _exchange(port), relay.refused
    finally:
        relay.stop()


def test_relay_passes_its_owner_through(echo_socket: Path) -> None:
    assert _through_relay(echo_socket, os.geteuid()) == (b"HELLO", 0)


def test_relay_closes_other_users_connections_unanswered(echo_socket: Path) -> None:
    assert _through_relay(echo_socket, os.geteuid() + 1) == (b"", 1)  # as if this process were someone else


def test_relay_asks_sock_diag_and_falls_back_to_proc_where_netlink_fails(
        echo_socket: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    relay = OwnerOnlyRelay(echo_socket, os.geteuid())
    relay.stop()
    assert relay.lookup_name == "sock_diag"

    def no_netlink(conn: socket.socket, **kw: Any) -> int | None:
        raise PermissionError(13, "socket(AF_NETLINK): Permission denied")

    monkeypatch.setattr(broker_sandbox, "diag_peer_uid", no_netlink)
    relay = OwnerOnlyRelay(echo_socket, os.geteuid())
    relay.stop()
    assert relay.lookup_name == "proc"
    assert _through_relay(echo_socket, os.geteuid()) == (b"HELLO", 0)
    assert _through_relay(echo_socket, os.geteuid() + 1) == (b"", 1)


def test_relay_is_refused_where_the_kernel_cannot_say_who_connects(echo_socket: Path, tmp_path: Path) -> None:
    with pytest.raises(OwnerUnknowable):
        OwnerOnlyRelay(echo_socket, os.geteuid(), lookups=("proc",), tables=[tmp_path / "no-such-table"])


def test_relay_fails_closed_when_a_lookup_fails(echo_socket: Path) -> None:
    relay = OwnerOnlyRelay(echo_socket, os.geteuid())
    port = relay.start()
    try:
        for failure in (OSError(24, "Too many open files"), ValueError("malformed answer")):
            def failing(conn: socket.socket, failure: Exception = failure) -> int | None:
                raise failure

            relay._lookup = failing
            assert _exchange(port) == b""
        assert relay.refused == 2
    finally:
        relay.stop()


def test_a_lookup_is_chosen_only_if_it_names_this_user(tmp_path: Path) -> None:
    assert choose_peer_lookup()[0] == "sock_diag"
    assert choose_peer_lookup(candidates=("proc",))[0] == "proc"
    with pytest.raises(OwnerUnknowable):  # a lookup that answers someone else is no lookup
        choose_peer_lookup(expected_uid=os.geteuid() + 1)


def test_diag_peer_uid_finds_nothing_for_a_connection_that_is_gone() -> None:
    """The kernel answers ENOENT for a 4-tuple it does not know: refused, like any other failure."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname()[:2], timeout=5)
        conn, _ = server.accept()
        with conn:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()  # RST: the client's socket is gone at once, no TIME_WAIT left
            assert diag_peer_uid(conn) is None


def test_the_relay_refuses_to_run_as_the_overflow_uid(echo_socket: Path, tmp_path: Path) -> None:
    """Running as the overflow uid (`nobody`), the relay could not tell kgov from an unmapped user of
    another user namespace: it refuses to start rather than let the broker be reached that way."""
    overflow = tmp_path / "overflowuid"
    overflow.write_text(f"{os.geteuid()}\n")
    with pytest.raises(AmbiguousOwner, match=r"overflow uid .*Run `kgov up` as another user"):
        OwnerOnlyRelay(echo_socket, os.geteuid(), overflow_uid_path=overflow)
    overflow.write_text(f"{os.geteuid() + 1}\n")
    OwnerOnlyRelay(echo_socket, os.geteuid(), overflow_uid_path=overflow).stop()
    overflow.unlink()  # unreadable: the kernel's default, 65534
    assert broker_sandbox.overflow_uid(overflow) == 65534


def test_kgov_up_stops_rather_than_fall_back_when_it_runs_as_the_overflow_uid(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The unsandboxed fallback would open the broker to every local user: worse than refusing."""
    overflow = tmp_path / "overflowuid"
    overflow.write_text(str(os.geteuid()))
    monkeypatch.setattr(kgov.up, "OwnerOnlyRelay", functools.partial(OwnerOnlyRelay, overflow_uid_path=overflow))
    started: list[Any] = []
    monkeypatch.setattr(kgov.up, "embedded_broker", lambda *a: started.append(a))
    with pytest.raises(AmbiguousOwner), kgov.up.dev_broker(tmp_path):
        pass
    assert started == []


def test_sandbox_script_reports_when_namespaces_are_refused(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    def refused() -> None:
        raise PermissionError(1, "unshare(CLONE_NEWUSER|CLONE_NEWNET): Operation not permitted")

    monkeypatch.setattr(broker_sandbox, "enter_private_network", refused)
    assert broker_sandbox.main(["/tmp/x.sock", "9092", "--", "/bin/false"]) == 3
    assert capsys.readouterr().out == "unavailable: [Errno 1] unshare(CLONE_NEWUSER|CLONE_NEWNET): Operation not permitted\n"


def test_without_a_private_network_kgov_up_warns_and_runs_the_plain_broker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    @contextlib.contextmanager
    def unavailable(data_dir: Path, policy: Any) -> Iterator[str]:
        raise kgov.up.IsolationUnavailable("unshare refused")
        yield ""  # pragma: no cover

    @contextlib.contextmanager
    def plain(data_dir: Path, policy: Any) -> Iterator[str]:
        yield "127.0.0.1:1"

    monkeypatch.setattr(kgov.up, "isolated_broker", unavailable)
    monkeypatch.setattr(kgov.up, "embedded_broker", plain)
    with kgov.up.dev_broker(tmp_path) as (broker, isolated):
        assert (broker, isolated) == ("127.0.0.1:1", False)
    err = capsys.readouterr().err
    assert kgov.up.EMBEDDED_BROKER_WARNING in err and "unshare refused" in err


def test_isolated_broker_is_not_silently_replaced_when_it_fails_otherwise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only 'no namespaces here' falls back; a sandbox that breaks stops `kgov up` with the log's name."""
    real_popen = kgov.up.subprocess.Popen

    def broken_script(args: list[str], **kw: Any) -> Any:
        return real_popen([sys.executable, "-c", "raise SystemExit(5)"], **kw)

    monkeypatch.setattr(kgov.up.subprocess, "Popen", broken_script)
    with pytest.raises(RuntimeError, match=r"exit code 5; see .*tansu\.log"), kgov.up.dev_broker(tmp_path):
        pass


@contextlib.contextmanager
def _sandbox(socket_path: Path, broker: list[str]) -> Iterator[tuple[subprocess.Popen[str], list[int]] | None]:
    """The sandbox script running `broker`: (its process, its children's pids) once it said `ready`; None
    where this host refuses namespaces (it then exited 3, no broker started). Killed if still running."""
    proc = subprocess.Popen([sys.executable, "-I", broker_sandbox.__file__, str(socket_path), "9092", "--", *broker],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().strip()
        if first.startswith("unavailable"):
            assert proc.wait(10) == 3
            yield None
            return
        assert first == "ready" and socket_path.exists()
        children = [int(stat.parent.name) for stat in Path("/proc").glob("[0-9]*/stat")
                    if _parent_pid(stat) == proc.pid]
        assert children
        yield proc, children
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _fake_broker(*setup: str) -> list[str]:
    return [sys.executable, "-c", "; ".join(["import signal, socket, time", *setup,
                                             "s = socket.create_server(('127.0.0.1', 9092))", "time.sleep(600)"])]


def test_sandbox_survives_repeated_stop_signals_and_cleans_up(tmp_path: Path) -> None:
    """A dying kgov sends its death signal once per thread: the second SIGTERM used to deadlock the
    sandbox in its handler (the broker then lived on) or kill it before it removed its socket."""
    sockets = tmp_path / "s"
    sockets.mkdir(mode=0o700)
    with _sandbox(sockets / "b.sock", _fake_broker()) as running:
        if running is None:  # no namespaces on this host: nothing more to stop
            return
        proc, children = running
        for _ in range(20):
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.01)
        assert proc.wait(15) == 0
    assert not sockets.exists()
    assert not any(Path(f"/proc/{pid}").exists() for pid in children)  # the broker was stopped


def _parent_pid(stat: Path) -> int | None:
    try:
        return int(stat.read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def test_a_broker_deaf_to_sigterm_dies_with_its_sandbox(tmp_path: Path) -> None:
    """kgov's stop waits 10 s for the sandbox, then SIGKILLs it; the sandbox itself waits 10 s for the broker.
    The broker's parent-death signal was SIGTERM, so a broker that did not act on it outlived both."""
    with _sandbox(tmp_path / "b.sock", _fake_broker("signal.signal(signal.SIGTERM, signal.SIG_IGN)")) as running:
        if running is None:  # no namespaces on this host: no broker was started
            return
        proc, children = running
        proc.send_signal(signal.SIGKILL)  # what kgov's stop_process ends with
        proc.wait(10)
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.02)
    alive = [pid for pid in children if _alive(pid)]
    for pid in alive:  # not left behind when the assertion fails
        os.kill(pid, signal.SIGKILL)
    assert alive == []


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for whoever reaps orphans."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_kgov_up_falls_back_for_real_where_the_kernel_refuses_user_namespaces(tmp_path: Path) -> None:
    """`make run` on a host that refuses namespaces: inside a user namespace whose limit of nested ones
    is 0 (unshare then fails with ENOSPC), dev_broker warns and serves the plain broker."""
    import shutil

    if shutil.which("unshare") is None or subprocess.run(["unshare", "-Ur", "true"], check=False).returncode != 0:
        pytest.skip("this host gives no user namespace to refuse nested ones in")
    script = tmp_path / "fallback.py"
    script.write_text(
        "import pathlib, socket, sys\n"
        "from kgov.up import dev_broker\n"
        "with dev_broker(pathlib.Path(sys.argv[1])) as (broker, isolated):\n"
        "    host, port = broker.address.split(':')\n"
        "    socket.create_connection((host, int(port)), timeout=5).close()\n"
        "    print(isolated)\n")
    root = Path(kgov.up.__file__).resolve().parents[1]
    run = subprocess.run(
        ["unshare", "-Ur", "sh", "-c", 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"', "sh",
         sys.executable, str(script), str(tmp_path)],
        capture_output=True, text=True, timeout=60, cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout == "False\n"
    assert kgov.up.EMBEDDED_BROKER_WARNING in run.stderr and "No space left on device" in run.stderr


def test_a_sock_diag_answer_about_another_socket_is_no_answer() -> None:
    asked = broker_sandbox._sockid(("127.0.0.1", 40000), ("127.0.0.1", 9092))
    v4 = socket.inet_aton("127.0.0.1")
    mapped = bytes(10) + b"\xff\xff" + v4
    assert broker_sandbox._same_tuple(asked, asked)
    assert broker_sandbox._same_tuple(asked, asked[:4] + mapped + mapped + bytes(16))  # a dual-stack socket
    other_port = broker_sandbox._sockid(("127.0.0.1", 40001), ("127.0.0.1", 9092))
    other_host = broker_sandbox._sockid(("127.0.0.2", 40000), ("127.0.0.1", 9092))
    assert not broker_sandbox._same_tuple(asked, other_port)
    assert not broker_sandbox._same_tuple(asked, other_host)


def test_sandbox_reports_how_its_broker_ended_when_nobody_asked_it_to(tmp_path: Path) -> None:
    """kgov's supervisor learns Tansu's own exit status from the script (`exited: N`), not just the script's."""
    broker = [sys.executable, "-c", "import socket, time, sys; s = socket.create_server(('127.0.0.1', 9092)); "
                                    "time.sleep(0.3); sys.exit(4)"]
    with _sandbox(tmp_path / "b.sock", broker) as running:
        if running is None:  # no namespaces on this host
            return
        proc, _ = running
        assert proc.stdout is not None
        assert proc.stdout.read() == f"{broker_sandbox.EXITED} 4\n"
        assert proc.wait(10) == 0
