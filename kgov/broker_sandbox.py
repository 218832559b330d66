"""Keeps `kgov up`'s embedded broker away from other local users.

The bundled Tansu cannot require authentication (kgov.up.EMBEDDED_BROKER_WARNING), and a TCP port on
loopback is open to every user of the host. So, on Linux where unprivileged user namespaces are allowed,
Tansu runs in a network namespace of its own, where its loopback port is invisible to the host:

    gateway --TCP--> OwnerOnlyRelay (kgov, host loopback, accepts only connections of kgov's own uid)
            --Unix socket in a 0700 directory of its own--> this script (inside the namespace) --TCP--> Tansu

Run as a script (`python -I broker_sandbox.py SOCKET PORT -- TANSU ARGS...`) it is the part inside the
namespace; it prints one line, `ready` or `unavailable: <why>`, then relays until Tansu exits or it is
stopped; when Tansu exits on its own it then prints `exited: <returncode>`. Standard library only: it runs isolated (-I), without kgov's packages.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_PR_SET_PDEATHSIG = 1
_CHUNK = 256 * 1024


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> Callable[[], None] | None:
    """Linux: the child gets `sig` when its parent dies, even by SIGKILL, so no unauthenticated broker
    outlives the process that fronted it. Elsewhere only the normal shutdown stops it."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork: the child only calls it
    parent = os.getpid()

    def in_child() -> None:
        prctl(_PR_SET_PDEATHSIG, int(sig))
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return in_child


def enter_private_network() -> None:
    """A new user namespace (mapping only this uid and gid) owning a new network namespace, whose
    loopback is brought up. Raises OSError where the kernel or a policy refuses (containers, AppArmor)."""
    uid, gid = os.geteuid(), os.getegid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWUSER|CLONE_NEWNET): {os.strerror(err)}")
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s.fileno(), _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s.fileno(), _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()
            else:
                writer.close()


async def _splice(client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                  upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
    try:
        await asyncio.gather(_pump(client[0], upstream[1]), _pump(upstream[0], client[1]))
    finally:
        for _, writer in (client, upstream):
            writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()


def wait_for_port(host: str, port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the embedded broker exited with code {proc.returncode}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {host}:{port} after {timeout:.0f}s")


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, and SIGKILL when that is not enough within 10 s."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --- host side -------------------------------------------------------------------------------------


def _proc_net_address(host: str, port: int) -> str:
    """`127.0.0.1:9092` as /proc/net/tcp writes it: `0100007F:2384` (the IPv4 word in host byte order)."""
    return f"{struct.unpack('=I', socket.inet_aton(host))[0]:08X}:{port:04X}"


def _proc_net6_address(host: str, port: int) -> str:
    """The same IPv4 address as /proc/net/tcp6 writes it for a dual-stack socket (`::ffff:127.0.0.1`, what a
    Java client's IPv6 socket connects from): four 32-bit words, each in host byte order."""
    words = struct.unpack("=4I", socket.inet_pton(socket.AF_INET6, f"::ffff:{host}"))
    return "".join(f"{w:08X}" for w in words) + f":{port:04X}"


# The kernel's socket tables: IPv4 sockets, and IPv6 ones (an IPv4-mapped peer's own socket is listed there).
PROC_NET_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
_ESTABLISHED = "01"  # the `st` column (include/net/tcp_states.h, TCP_ESTABLISHED)
_TCP_ESTABLISHED = 1


def _endpoints(conn: socket.socket) -> tuple[tuple[str, int], tuple[str, int]] | None:
    """(the peer's address, ours) of an accepted connection; None once it is disconnected."""
    try:
        peer_host, peer_port = conn.getpeername()[:2]
        own_host, own_port = conn.getsockname()[:2]
    except OSError:
        return None
    return (peer_host, peer_port), (own_host, own_port)


def proc_peer_uid(conn: socket.socket, tables: Sequence[Path] = PROC_NET_TABLES) -> int | None:
    """The uid owning the other end of an accepted IPv4 loopback connection, from the kernel's socket
    tables (what identd answers); None when it cannot be found (the peer already left, no /proc).

    Only an ESTABLISHED socket that a process still holds (a non-zero inode) counts. Once the peer has
    closed its end, the kernel lists what is left of it (FIN_WAIT2, TIME_WAIT) with uid 0 and inode 0
    whoever opened it: without this check any user could connect, send requests, close, and have a
    relay owned by root forward them (tests/unit/kgov/test_broker_sandbox.py).

    Reads every line of both tables: its cost grows with the sockets open on the host, which any local
    user can inflate. The fallback for hosts without sock_diag (diag_peer_uid)."""
    ends = _endpoints(conn)
    if ends is None:
        return None
    (peer_host, peer_port), (own_host, own_port) = ends
    wanted = {(_proc_net_address(peer_host, peer_port), _proc_net_address(own_host, own_port)),
              (_proc_net6_address(peer_host, peer_port), _proc_net6_address(own_host, own_port))}
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            # sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
            fields = line.split()
            if len(fields) > 9 and (fields[1], fields[2]) in wanted:
                if fields[3] != _ESTABLISHED or fields[9] == "0":
                    return None
                return int(fields[7])
    return None


# Netlink sock_diag (linux/sock_diag.h, linux/inet_diag.h); Python's socket module names none of these.
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 0x1
_NLMSG_ERROR = 2
_NLMSG_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
_DIAG_REQUEST = struct.Struct("=BBBxI")  # inet_diag_req_v2: family, protocol, extensions, pad, states
_DIAG_MESSAGE = struct.Struct("=BBBB")  # inet_diag_msg: family, state, timer, retransmits, then the sockid
_DIAG_TAIL = struct.Struct("=IIIII")  # after the 48-byte sockid: expires, rqueue, wqueue, uid, inode
_SOCKID_SIZE = 48
_NO_COOKIE = 0xFFFFFFFF  # INET_DIAG_NOCOOKIE: any socket with this 4-tuple
_DIAG_TIMEOUT_S = 1.0


def _sockid(src: tuple[str, int], dst: tuple[str, int]) -> bytes:
    """inet_diag_sockid for an IPv4 4-tuple: ports and addresses in network order, no interface, no cookie."""
    return (struct.pack("!HH", src[1], dst[1]) + socket.inet_aton(src[0]) + bytes(12)
            + socket.inet_aton(dst[0]) + bytes(12) + struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE))


def _same_tuple(requested: bytes, answered: bytes) -> bool:
    """Whether the kernel answered about the socket asked for: same ports, and the same IPv4 addresses
    whether it lists them as IPv4 (first word) or, for an IPv6 socket, as ::ffff:a.b.c.d (last word)."""
    if answered[:4] != requested[:4]:
        return False
    for offset in (4, 20):
        wanted, got = requested[offset:offset + 4], answered[offset:offset + 16]
        if got not in (wanted + bytes(12), bytes(10) + b"\xff\xff" + wanted):
            return False
    return True


def diag_peer_uid(conn: socket.socket, *, sequence: int = 1) -> int | None:
    """proc_peer_uid's answer from the kernel's sock_diag netlink interface: one exact lookup of the
    peer's socket by its 4-tuple (inet_diag_req_v2, as `ss` does for one socket), whatever the number of
    sockets on the host. None when the peer is not an ESTABLISHED socket held by a process (the same
    rule as proc_peer_uid), when the kernel has no such socket, or on any malformed answer.

    Raises OSError when netlink itself cannot be used (no AF_NETLINK, sock_diag refused)."""
    ends = _endpoints(conn)
    if ends is None:
        return None
    peer, own = ends
    if ":" in peer[0]:  # an IPv6 listener; the relay binds 127.0.0.1 only
        return None
    # The peer's own socket: its local end is the peer address, its remote end ours. An IPv4 lookup also
    # finds a dual-stack client's IPv6 socket connected to ::ffff:127.0.0.1 (one established-socket table).
    sockid = _sockid(peer, own)
    body = _DIAG_REQUEST.pack(socket.AF_INET, socket.IPPROTO_TCP, 0, 0xFFFFFFFF) + sockid
    request = _NLMSG_HEADER.pack(_NLMSG_HEADER.size + len(body), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST,
                                 sequence, 0) + body
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(_DIAG_TIMEOUT_S)
        nl.sendto(request, (0, 0))
        try:
            answer = nl.recv(8192)
        except OSError:  # a timeout or an error on the lookup itself: not an answer
            return None
    if len(answer) < _NLMSG_HEADER.size:
        return None
    length, kind, _, seq, _ = _NLMSG_HEADER.unpack_from(answer)
    if kind != _SOCK_DIAG_BY_FAMILY or seq != sequence or length > len(answer):
        return None  # NLMSG_ERROR (ENOENT: no such socket) or something else
    offset = _NLMSG_HEADER.size
    if length < offset + _DIAG_MESSAGE.size + _SOCKID_SIZE + _DIAG_TAIL.size:
        return None
    _, state, _, _ = _DIAG_MESSAGE.unpack_from(answer, offset)
    answered = answer[offset + _DIAG_MESSAGE.size:offset + _DIAG_MESSAGE.size + _SOCKID_SIZE]
    _, _, _, uid, inode = _DIAG_TAIL.unpack_from(answer, offset + _DIAG_MESSAGE.size + _SOCKID_SIZE)
    if not _same_tuple(sockid, answered) or state != _TCP_ESTABLISHED or inode == 0:
        return None
    return int(uid)


PeerLookup = Callable[[socket.socket], "int | None"]


class OwnerUnknowable(OSError):
    """Neither sock_diag nor /proc says who owns a loopback connection here: the relay cannot work."""


def choose_peer_lookup(tables: Sequence[Path] = PROC_NET_TABLES, candidates: Sequence[str] = ("sock_diag", "proc"),
                       *, expected_uid: int | None = None) -> tuple[str, PeerLookup]:
    """The first lookup, of `candidates`, that names this process's uid (`expected_uid`, for tests) as the
    owner of a test connection this process opens to itself: sock_diag (one exact query) or the /proc tables (a scan). Chosen once, so a
    connection's check never switches to the slower one. Raises OwnerUnknowable when none works."""
    expected = os.geteuid() if expected_uid is None else expected_uid
    lookups: dict[str, PeerLookup] = {"sock_diag": diag_peer_uid,
                                      "proc": lambda conn: proc_peer_uid(conn, tables)}
    with socket.create_server(("127.0.0.1", 0)) as server, \
            socket.create_connection(server.getsockname()[:2], timeout=5):
        conn, _ = server.accept()
        with conn:
            for name in candidates:
                try:
                    if lookups[name](conn) == expected:
                        return name, lookups[name]
                except OSError:
                    continue
    raise OwnerUnknowable(f"neither {' nor '.join(candidates)} tells who owns a loopback connection")


OVERFLOW_UID_PATH = Path("/proc/sys/kernel/overflowuid")
_DEFAULT_OVERFLOW_UID = 65534  # the kernel's default (DEFAULT_OVERFLOWUID, linux/highuid.h)


class AmbiguousOwner(RuntimeError):
    """kgov runs as the overflow uid, which the kernel also reports for other namespaces' unmapped users."""


def overflow_uid(path: Path = OVERFLOW_UID_PATH) -> int:
    """The uid the kernel shows for a uid that has no mapping in the reader's user namespace; the
    kernel's default when the file cannot be read."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return _DEFAULT_OVERFLOW_UID


def check_owner_distinguishable(owner_uid: int, path: Path = OVERFLOW_UID_PATH) -> None:
    """Raises AmbiguousOwner when `owner_uid` is the overflow uid: both sock_diag and /proc map the uid
    of a socket opened in another user namespace, by a user unmapped in ours, to that uid, so the relay
    could not tell such a user from kgov."""
    if owner_uid == overflow_uid(path):
        raise AmbiguousOwner(
            f"kgov runs as uid {owner_uid}, the kernel's overflow uid ({path}): connections of users from "
            f"other user namespaces show that uid too, so the embedded broker's relay cannot tell them from "
            f"kgov. Run `kgov up` as another user, or give --upstream a cluster that authenticates")


class _Relay:
    """A loopback TCP port whose admitted connections are spliced to an upstream that `_connect` opens.
    Runs its own event loop in a thread. Binds at construction; serves from `start`."""

    def __init__(self) -> None:
        """Binds a free 127.0.0.1 port (`port`); nothing is accepted before `start`, and no thread runs
        before it either, so the caller may still fork with a preexec_fn in between."""
        self.refused = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._transports: set[asyncio.WriteTransport] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kgov-broker-relay", daemon=True)

    @property
    def serving(self) -> bool:
        return self._server is not None

    def start(self) -> int:
        """Serves the bound port in a thread of its own; returns the port."""
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accepted, sock=self._listener), self._loop).result(10)
        return self.port

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            # Connections still relayed (a client that kept its socket open) are cut, then their tasks
            # end: cancelled mid-splice they would leave transports for the garbage collector to close.
            for transport in list(self._transports):
                transport.abort()
            for _ in range(5):
                tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
                if not tasks:
                    break
                await asyncio.wait(tasks, timeout=1)
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            if self._server is not None:
                await self._server.wait_closed()

        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._thread.is_alive() and not self._loop.is_closed():
            # What close() could not end (a connection accepted while it ran, or close() itself cut short)
            # is cancelled here on the stopped loop and run to its end, as asyncio.run's shutdown does:
            # destroyed while pending, a splice's `finally` would be thrown GeneratorExit mid-await.
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            if pending:
                with contextlib.suppress(Exception):
                    self._loop.run_until_complete(asyncio.wait(pending, timeout=10))
        self._listener.close()
        self._loop.close()

    def _admit(self, conn: socket.socket) -> bool:
        """Whether this accepted connection may go on (raising counts as no)."""
        raise NotImplementedError

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """The upstream end for an admitted connection; None (or OSError) closes the client's."""
        raise NotImplementedError

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = writer.get_extra_info("socket")
        try:
            admitted = conn is not None and self._admit(conn)
        except Exception:  # fail closed: whatever went wrong, nobody is let through
            admitted = False
        if not admitted:
            self.refused += 1
            writer.transport.abort()
            return
        try:
            upstream = await self._connect()
        except OSError:
            upstream = None
        if upstream is None:
            writer.transport.abort()
            return
        ends = {writer.transport, upstream[1].transport}
        self._transports |= ends
        try:
            await _splice((reader, writer), upstream)
        finally:
            self._transports -= ends


class OwnerOnlyRelay(_Relay):
    """A loopback TCP port whose connections, if they come from `owner_uid`, are relayed to `unix_path`.

    Any other user's connection is closed unanswered: loopback TCP cannot be restricted to one user, but
    the kernel says who opened each connection (sock_diag, else /proc: choose_peer_lookup). Any error in
    that lookup refuses the connection."""

    def __init__(self, unix_path: Path, owner_uid: int, *, tables: Sequence[Path] = PROC_NET_TABLES,
                 lookups: Sequence[str] = ("sock_diag", "proc"),
                 overflow_uid_path: Path = OVERFLOW_UID_PATH) -> None:
        """Raises AmbiguousOwner when `owner_uid` is the overflow uid, OwnerUnknowable when no lookup
        works on this host (before binding anything)."""
        check_owner_distinguishable(owner_uid, overflow_uid_path)
        self.lookup_name, self._lookup = choose_peer_lookup(tables, lookups)
        self.unix_path = unix_path  # may be replaced while serving (a restarted broker's new socket)
        self.owner_uid = owner_uid
        super().__init__()

    def _admit(self, conn: socket.socket) -> bool:
        return self._lookup(conn) == self.owner_uid

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        return await asyncio.open_unix_connection(str(self.unix_path))


_LISTEN = "0A"  # the `st` column of a listening socket (TCP_LISTEN)
_SYN_RECV = "03"
_TCP_LISTEN = 10
_NLM_F_DUMP = 0x300
_NLMSG_DONE = 3


def _listener_addresses(port: int) -> frozenset[str]:
    """How /proc/net/tcp and tcp6 write the local address of a listener that takes connections to
    127.0.0.1:port: bound to it, to any IPv4 address, or (dual-stack IPv6) to :: or their mapped forms."""
    return frozenset({_proc_net_address("127.0.0.1", port), _proc_net_address("0.0.0.0", port),
                      _proc_net6_address("127.0.0.1", port), _proc_net6_address("0.0.0.0", port),
                      "0" * 32 + f":{port:04X}"})


def proc_listener_uids(port: int, tables: Sequence[Path] = PROC_NET_TABLES, *,
                       whole_tables: bool = False) -> set[int] | None:
    """The uids owning the listening sockets where a connection to 127.0.0.1:port could go (the kernel's
    socket tables; a listener's uid is its creator's). None when a table cannot be read. The fallback for
    diag_listener_uids.

    Linux writes each table's listening sockets first: tcp_get_idx and tcp_seq_next (net/ipv4/tcp_ipv4.c,
    which serves tcp6 too) walk the listening hash, then the established one, which holds every other
    socket (connections, SYN_RECV since 4.4, TIME_WAIT) and never a listener. So the read stops at the
    first line past the listeners, and the kernel formats no more than a page beyond them: its cost grows
    with the host's listeners, as sock_diag's dump does, not with every connection on the host, which any
    local user can multiply (bench/broker_relay_lookup_bench.py). A SYN_RECV line does not stop it (before
    4.4 a listener's pending connections were written after it). `whole_tables` reads every line, for a
    /proc that lists sockets in another order (choose_listener_lookup finds out)."""
    wanted = _listener_addresses(port)
    owners = set()
    for table in tables:
        try:
            with table.open() as fh:
                # The whole table in a few large reads, as before; else line by line, to stop early.
                lines = iter(fh.read().splitlines() if whole_tables else fh)
                next(lines, None)  # the header
                for line in lines:
                    # sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid ...
                    fields = line.split()
                    if len(fields) <= 7:
                        continue
                    if fields[3] == _LISTEN:
                        if fields[1] in wanted:
                            owners.add(int(fields[7]))
                    elif fields[3] != _SYN_RECV and not whole_tables:
                        break
        except OSError:
            return None
    return owners


# What the kernel writes as the local address (inet_diag_sockid.idiag_src, 16 bytes) of a listener that
# takes connections to 127.0.0.1: the address itself or any address, as IPv4 or as IPv4-mapped IPv6, or ::.
_LOOPBACK_LISTENERS = frozenset({
    socket.inet_aton("127.0.0.1") + bytes(12), bytes(16),
    bytes(10) + b"\xff\xff" + socket.inet_aton("127.0.0.1"), bytes(10) + b"\xff\xff" + bytes(4),
})


def diag_listener_uids(port: int, *, sequence: int = 1) -> set[int] | None:
    """proc_listener_uids' answer from sock_diag: a dump of the listening TCP sockets only (IPv4, then
    IPv6), whose cost grows with the host's listeners, not with all its sockets. None on a malformed or
    unfinished answer. Raises OSError when netlink itself cannot be used."""
    owners: set[int] = set()
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(_DIAG_TIMEOUT_S)
        for family in (socket.AF_INET, socket.AF_INET6):
            body = _DIAG_REQUEST.pack(family, socket.IPPROTO_TCP, 0, 1 << _TCP_LISTEN) + bytes(_SOCKID_SIZE)
            nl.sendto(_NLMSG_HEADER.pack(_NLMSG_HEADER.size + len(body), _SOCK_DIAG_BY_FAMILY,
                                         _NLM_F_REQUEST | _NLM_F_DUMP, sequence, 0) + body, (0, 0))
            if not _read_listener_dump(nl, sequence, port, owners):
                return None
    return owners


def _read_listener_dump(nl: socket.socket, sequence: int, port: int, owners: set[int]) -> bool:
    """Adds to `owners` the uids of the dumped listeners on 127.0.0.1:port (or any address); True once
    the dump is done, False on anything else."""
    wanted_port = struct.pack("!H", port)
    while True:
        try:
            answer = nl.recv(65536)
        except OSError:
            return False
        offset = 0
        while offset + _NLMSG_HEADER.size <= len(answer):
            length, kind, _, seq, _ = _NLMSG_HEADER.unpack_from(answer, offset)
            if length < _NLMSG_HEADER.size or offset + length > len(answer) or seq != sequence:
                return False
            if kind == _NLMSG_DONE:
                return True
            if kind != _SOCK_DIAG_BY_FAMILY:
                return False  # NLMSG_ERROR or something else
            body = offset + _NLMSG_HEADER.size
            if length < _NLMSG_HEADER.size + _DIAG_MESSAGE.size + _SOCKID_SIZE + _DIAG_TAIL.size:
                return False
            _, state, _, _ = _DIAG_MESSAGE.unpack_from(answer, body)
            sockid = answer[body + _DIAG_MESSAGE.size:body + _DIAG_MESSAGE.size + _SOCKID_SIZE]
            _, _, _, uid, _ = _DIAG_TAIL.unpack_from(answer, body + _DIAG_MESSAGE.size + _SOCKID_SIZE)
            if state == _TCP_LISTEN and sockid[:2] == wanted_port and sockid[4:20] in _LOOPBACK_LISTENERS:
                owners.add(int(uid))
            offset += (length + 3) & ~3  # NLMSG_ALIGN
        if offset == 0:
            return False


ListenerLookup = Callable[[int], "set[int] | None"]


def choose_listener_lookup(tables: Sequence[Path] = PROC_NET_TABLES,
                           candidates: Sequence[str] = ("sock_diag", "proc")) -> tuple[str, ListenerLookup]:
    """The first lookup, of `candidates`, that names this process's uid alone as the owner of a listener
    it opens: sock_diag (a dump of the listeners) or the /proc tables (their listeners, written first).
    The probe listener is opened after a connection, so that a /proc listing sockets in the order they
    were made (not Linux's) shows it after that connection: the listeners-first read then misses it, and
    "proc-whole" (every line of the tables) is used instead. Raises OwnerUnknowable when none works."""
    lookups: dict[str, ListenerLookup] = {
        "sock_diag": diag_listener_uids,
        "proc": lambda port: proc_listener_uids(port, tables),
        "proc-whole": lambda port: proc_listener_uids(port, tables, whole_tables=True),
    }
    tried = [n for name in candidates for n in ((name, "proc-whole") if name == "proc" else (name,))]
    with contextlib.ExitStack() as stack:
        earlier = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
        stack.enter_context(socket.create_connection(earlier.getsockname()[:2], timeout=5))
        stack.enter_context(earlier.accept()[0])
        probe = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
        for name in tried:
            try:
                if lookups[name](probe.getsockname()[1]) == {os.geteuid()}:
                    return name, lookups[name]
            except OSError:
                continue
    raise OwnerUnknowable(f"neither {' nor '.join(candidates)} tells who listens on a loopback port")


class PortHoldingRelay(_Relay):
    """The plain (unsandboxed) broker's loopback port, held by kgov for the whole run and relayed to
    the port the broker currently listens on (`target_port`), which changes with each start.

    The broker's own port is free for anyone to bind while it restarts, so a connection to it is relayed
    only if, once it is open, every listener that could have taken it belongs to `owner_uid`
    (choose_listener_lookup): a port taken by another user is refused, and nothing of the client's reaches
    it. Anyone may connect to this port, as to the unauthenticated broker itself
    (kgov.up.EMBEDDED_BROKER_WARNING)."""

    def __init__(self, owner_uid: int, *, tables: Sequence[Path] = PROC_NET_TABLES,
                 lookups: Sequence[str] = ("sock_diag", "proc"),
                 overflow_uid_path: Path = OVERFLOW_UID_PATH) -> None:
        """Raises AmbiguousOwner when `owner_uid` is the overflow uid (another namespace's unmapped user's
        listener would look like kgov's), OwnerUnknowable when neither lookup shows this process's own
        listener."""
        check_owner_distinguishable(owner_uid, overflow_uid_path)
        self.lookup_name, self._owners = choose_listener_lookup(tables, lookups)
        self.owner_uid = owner_uid
        self.target_port: int | None = None  # None until the broker first started
        super().__init__()

    def _admit(self, conn: socket.socket) -> bool:
        return True

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        port = self.target_port
        if port is None:
            return None
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        # Checked once connected, so that the listener that took the connection is among those checked:
        # it cannot give way to one of kgov's user in between, as each start of the broker binds a port
        # the last one did not have. Any failure of the lookup refuses (fail closed).
        try:
            owners = self._owners(port)
        except Exception:
            owners = None
        if owners != {self.owner_uid}:
            self.refused += 1
            writer.transport.abort()
            return None
        return reader, writer


# --- inside the namespace --------------------------------------------------------------------------


async def _serve(unix_path: Path, port: int, broker: subprocess.Popen[bytes]) -> None:
    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.transport.abort()
            return
        await _splice((reader, writer), upstream)

    with contextlib.suppress(FileNotFoundError):
        unix_path.unlink()
    server = await asyncio.start_unix_server(accepted, str(unix_path))
    os.chmod(unix_path, 0o600)  # the directory is 0700 already; this keeps it so if it is not
    print("ready", flush=True)
    while not _stopping[0] and broker.poll() is None:
        await asyncio.sleep(0.2)
    server.close()


# The line this script prints after `ready` when the broker exited without being asked, then its returncode.
EXITED = "exited:"

# Set by SIGTERM/SIGINT. A plain handler, for the whole life of the process: the parent-death signal
# comes once per thread of the dying kgov, and a second SIGTERM must not cut the clean-up short (asyncio's
# own handlers are gone, back to the default action, once its loop is closed). A bare flag, not an
# Event: a second signal arriving inside the first handler would wait forever for the Event's lock.
_stopping = [False]


def _stop_requested(signum: int, frame: object) -> None:
    _stopping[0] = True


def main(argv: Sequence[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: broker_sandbox.py SOCKET PORT -- BROKER ARGS...", file=sys.stderr)
        return 2
    unix_path, port, command = Path(argv[0]), int(argv[1]), list(argv[3:])
    try:
        enter_private_network()
    except OSError as exc:
        print(f"unavailable: {exc}", flush=True)
        return 3
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop_requested)
    # stdout carries only this script's one line; the broker writes to stderr (kgov's broker log). When
    # this script dies without stopping the broker (kgov's stop_process ends its wait with SIGKILL after
    # as long as this script's own stop_process waits for the broker), the broker is killed, not asked:
    # a SIGTERM it does not act on would leave it running, unauthenticated, with nobody to stop it.
    broker = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno(),  # noqa: S603
                              preexec_fn=die_with_parent(signal.SIGKILL))
    try:
        wait_for_port("127.0.0.1", port, 30, broker)
        asyncio.run(_serve(unix_path, port, broker))
        if not _stopping[0] and broker.poll() is not None:
            # The broker died on its own: kgov's supervisor (kgov.broker_supervisor) reads how.
            with contextlib.suppress(OSError):
                print(f"{EXITED} {broker.returncode}", flush=True)
    finally:
        stop_process(broker)
        with contextlib.suppress(FileNotFoundError):
            unix_path.unlink()
        with contextlib.suppress(OSError):  # kgov's private directory for it, when kgov died without cleaning up
            unix_path.parent.rmdir()
        for sig in (signal.SIGTERM, signal.SIGINT):  # done: more of kgov's death signals change nothing
            signal.signal(sig, signal.SIG_IGN)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
