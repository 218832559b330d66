"""A kgov gateway running in a background event loop, in front of the session's Tansu broker."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from audit.sinks import MemorySink
from authz.config import AuthzConfig
from authz.database import open_engine
from authz.model import Acl
from authz.service import AuthorizerService
from gateway.proxy import Gateway, GatewayOptions, Services
from tests.support.ports import free_port, wait_for_port
from tests.support.sockets import recv_exactly


class RunningGateway:
    """Starts `Gateway` on its own loop thread; `bootstrap` is `127.0.0.1:PORT`."""

    def __init__(self, options: GatewayOptions | None, services: Services | None, *, runtime: Any = None) -> None:
        self.runtime = runtime
        self.gateway = runtime.gateway if runtime is not None else Gateway(options, services)  # type: ignore[arg-type]
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="gateway-loop", daemon=True)

    def __enter__(self) -> RunningGateway:
        self.thread.start()
        self.call(self.runtime.start() if self.runtime is not None else self.gateway.start())
        return self

    def call(self, coro: Any, timeout: float = 30) -> Any:
        fut: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result(timeout)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.gateway.port}"

    def __exit__(self, *exc: object) -> None:
        if self.loop.is_closed():  # stopped already (a test restarting it), then again by its fixture
            return
        self.call(self.runtime.stop() if self.runtime is not None else self.gateway.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def wait_until(check: Callable[[], bool], timeout: float = 30) -> None:
    """Polls `check` every 10 ms until it holds; fails the test after `timeout` seconds. For what must
    happen eventually: a passing test returns as soon as it holds, so the default only bounds a failing
    one, generously for a loaded machine. A bound that is itself the behaviour under test is passed
    explicitly."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@contextlib.contextmanager
def metadata_round_trips(raw: Any) -> Iterator[list[tuple[float, float]]]:
    """While the block runs, a thread of its own sends Metadata (no topics: through the gateway to the
    broker) on `raw` (a logged-in RawClient) one at a time, 2 ms apart; yields the (sent at, seconds to
    the answer) of every round trip so far: another client's latency while the block loads the gateway."""
    from gateway.codec import SPECS

    latencies: list[tuple[float, float]] = []
    stop = threading.Event()

    def measure() -> None:
        while not stop.is_set():
            sent = time.monotonic()
            assert raw.call(3, 12, SPECS[3].request[12](topics=[], allow_auto_topic_creation=False)
                            ).throttle_time_ms == 0
            latencies.append((sent, time.monotonic() - sent))
            time.sleep(0.002)

    measurer = threading.Thread(target=measure)
    measurer.start()
    try:
        yield latencies
    finally:
        stop.set()
        measurer.join(timeout=30)


def upstream_of(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


class AuthzFixture:
    """A real AuthorizerService over SQLite, with the audit trail in memory."""

    def __init__(self, tmp: Path, **config: Any) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        self.engine = open_engine(f"sqlite:///{tmp / 'kgov.db'}")
        self.audit = MemorySink()
        self.service = AuthorizerService(self.engine, AuthzConfig(**config), audit=self.audit, source="test")
        self.service.start(background=True)

    def allow(self, *acls: Acl) -> None:
        from authz.model import Principal

        results = self.service.create_acls(list(acls), actor=Principal("User", "admin"))
        assert all(r is None for r in results), results

    def close(self) -> None:
        self.service.close()
        self.engine.dispose()


@pytest.fixture
def authz_factory(tmp_path: Path) -> Iterator[Callable[..., AuthzFixture]]:
    made: list[AuthzFixture] = []

    def make(**config: Any) -> AuthzFixture:
        fx = AuthzFixture(tmp_path / f"authz-{len(made)}", **config)
        made.append(fx)
        return fx

    yield make
    for fx in made:
        fx.close()


@pytest.fixture
def gateway_factory(kafka_broker: str) -> Iterator[Callable[..., RunningGateway]]:
    running: list[RunningGateway] = []

    def make(services: Services, **overrides: Any) -> RunningGateway:
        options = GatewayOptions("127.0.0.1", 0, upstream_of(kafka_broker), address_mode="per-node",
                                 node_port_base=free_port() - 111 if "node_port_base" not in overrides else None)
        gw = RunningGateway(replace(options, **overrides), services)
        gw.__enter__()
        running.append(gw)
        return gw

    yield make
    for gw in running:
        gw.__exit__(None, None, None)


@contextlib.contextmanager
def serve_control_plane(settings: Any, tls: tuple[Path, Path] | None = None, clock: Any = None) -> Iterator[str]:
    """`kgov serve` (in-process, on its own thread) over `settings`: the token issuer at `/oauth/token`.
    `tls` = (certificate, key) PEM files serves it over https; `clock` is build_app's."""
    import uvicorn

    from kgov.app import build_app

    # Bound here and handed to uvicorn (which listens on it, and closes it): a port only looked up free
    # could be taken by another process before the server bound it.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(
        build_app(settings, clock=clock), host="127.0.0.1", port=port, log_level="warning",
        ssl_certfile=str(tls[0]) if tls else None, ssl_keyfile=str(tls[1]) if tls else None,
    ))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for_port("127.0.0.1", port)
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class RawClient:
    """A bare Kafka connection speaking through kafka-python's message classes."""

    def __init__(self, bootstrap: str, source: str | None = None) -> None:
        """`source`: the local address to connect from (another loopback address, e.g. 127.0.0.2, is
        another client address to the gateway)."""
        self.sock = socket.create_connection(upstream_of(bootstrap), timeout=10,
                                             source_address=(source, 0) if source is not None else None)
        self.correlation = 0

    def send(self, api_key: int, version: int, request: Any, client_id: str | None = "raw") -> int:
        self.correlation += 1
        request.with_header(correlation_id=self.correlation, client_id=client_id)
        self.sock.sendall(bytes(request.encode(version=version, header=True, framed=True)))
        return self.correlation

    def receive(self, api_key: int, version: int) -> Any:
        from gateway.codec import SPECS, decode_response

        size = int.from_bytes(self._exactly(4), "big")
        return decode_response(SPECS[api_key], version, self._exactly(size))

    def call(self, api_key: int, version: int, request: Any) -> Any:
        self.send(api_key, version, request)
        return self.receive(api_key, version)

    def _exactly(self, n: int) -> bytes:
        return recv_exactly(self.sock, n, "closed by the gateway")

    def closed_by_peer(self, timeout: float = 5) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def runtime_factory(kafka_broker: str, tmp_path: Path) -> Iterator[Callable[..., RunningGateway]]:
    """The production assembly (`gateway.runtime.build_runtime`) over SQLite, in front of Tansu.

    `upstream` puts it in front of something else (another gateway); `name` gives it a database of
    its own (default: the one shared by every gateway of the test); `clock` and `listen` (default
    `127.0.0.1:0`) are build_runtime's."""
    from gateway.runtime import build_runtime
    from kgov.settings import Settings

    running: list[RunningGateway] = []

    def make(*, upstream: str | None = None, name: str | None = None, clock: Any = None,
             listen: str = "127.0.0.1:0", **sections: Any) -> RunningGateway:
        gateway_section = {"security_protocol": "SASL_PLAINTEXT", "node_port_base": free_port() - 111,
                           **sections.pop("gateway", {})}
        data_dir = tmp_path / name if name else tmp_path
        data_dir.mkdir(parents=True, exist_ok=True)
        settings = Settings(db=f"sqlite:///{data_dir / 'kgov.db'}", data_dir=data_dir, gateway=gateway_section,
                            **sections)
        memory = MemorySink()
        runtime = build_runtime(settings, listen=listen, upstream=upstream or kafka_broker,
                                extra_audit=memory, clock=clock)
        gw = RunningGateway(None, None, runtime=runtime)
        gw.memory = memory  # type: ignore[attr-defined]
        gw.settings = settings  # type: ignore[attr-defined]
        try:
            gw.__enter__()
        except BaseException:
            gw.__exit__(None, None, None)  # a refused start still stops the runtime and the loop
            raise
        running.append(gw)
        return gw

    yield make
    for gw in running:
        gw.__exit__(None, None, None)


@pytest.fixture
def team(runtime_factory: Callable[..., RunningGateway]) -> Any:
    """An application team's users and ACL helper on a gateway (tests.integration.gateway.team_journey)."""
    from tests.integration.gateway.team_journey import make_team

    return make_team(runtime_factory)
