"""An application team behind the gateway: its users, least-privilege ACLs written with `kgov acls` as the
README's "First steps" do, and its real clients' settings. The `team` fixture of the test_team_*.py files."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer

from authz.model import Principal
from kgov.cli import main as kgov
from tests.integration.gateway.conftest import RawClient, RunningGateway
from tests.integration.gateway.test_sasl import scram_login

ADMIN = Principal("User", "admin")
APP_PASSWORD = "orders-app-password-1"
# Consumer group timings for tests: a dead member is noticed in seconds, heartbeats answer rebalances fast
GROUP_TIMINGS = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "auto.offset.reset": "earliest"}
OPS_PASSWORD = "platform-ops-password-1"


@dataclass
class Team:
    """`app` (User:orders-app) holds only the ACLs a test grants; `ops` (User:ops) is a super user."""

    gw: RunningGateway
    prefix: str  # every topic, group and transactional id of one test starts with it

    def name(self, what: str) -> str:
        return f"{self.prefix}{what}"

    def acls(self, *args: str) -> None:
        """`kgov acls --add --allow-principal User:orders-app <args>` on the gateway's database; the
        gateway is then told to re-read it at once (it polls within a second otherwise)."""
        db = str(self.gw.settings.db)  # type: ignore[attr-defined]
        assert kgov(["acls", "--db", db, "--add", "--allow-principal", "User:orders-app", *args]) == 0
        # under its lock: current once it returns, whether this call or the background poll applied it
        self.gw.runtime.authorizer.refresh()

    def call(self, api_key: int, version: int, request: Any) -> Any:
        """One request on a connection of its own, logged in as User:orders-app: the answer a client
        gets for an API whose denial its library turns into something else."""
        raw = self.login()
        try:
            return raw.call(api_key, version, request)
        finally:
            raw.close()

    def login(self) -> RawClient:
        """A bare connection logged in as User:orders-app."""
        raw = RawClient(self.gw.bootstrap)
        assert scram_login(raw, "SCRAM-SHA-512", "orders-app", APP_PASSWORD).error_code == 0
        return raw

    def conf(self, user: str = "orders-app", password: str = APP_PASSWORD) -> dict[str, Any]:
        """librdkafka's settings for `user` through the gateway."""
        return {"bootstrap.servers": self.gw.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": password}

    def ops_conf(self) -> dict[str, Any]:
        return self.conf("ops", OPS_PASSWORD)

    def python_conf(self) -> dict[str, Any]:
        """kafka-python's settings for User:orders-app through the gateway."""
        return {"bootstrap_servers": self.gw.bootstrap, "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "orders-app",
                "sasl_plain_password": APP_PASSWORD}


def take(c: Consumer, count: int, timeout: float = 9) -> list[bytes]:
    """The values of the next `count` records `c` polls."""
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        assert time.monotonic() < deadline, f"timed out with {out}"
        m = c.poll(0.1)
        if m is not None:
            assert m.error() is None, m.error()
            out.append(m.value())
    return out


def make_team(runtime_factory: Callable[..., RunningGateway], *, prefix: str | None = None,
              **runtime: Any) -> Team:
    """The `team` fixture (tests/integration/gateway/conftest.py): a production-assembly gateway in
    front of Tansu with the two users. `runtime` goes to `runtime_factory` (listen, name, gateway...);
    a gateway on an existing database (`prefix` given: a restart) finds the users already there."""
    gw = runtime_factory(sasl={"failed_authentication_delay_ms": 0}, authz={"super_users": "User:ops"}, **runtime)
    if prefix is None:
        creds = gw.runtime.credentials
        creds.set_scram_credential("orders-app", "SCRAM-SHA-512", APP_PASSWORD, actor=ADMIN)
        creds.set_scram_credential("ops", "SCRAM-SHA-512", OPS_PASSWORD, actor=ADMIN)
    return Team(gw, prefix or f"team-{uuid.uuid4().hex[:8]}-")
