"""Quotas stored in the shared database: the store on SQLite and PostgreSQL, `kgov quotas`, REST."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from authz.database import open_engine
from gateway.quota_model import (
    CONSUMER_BYTE_RATE,
    DEFAULT_PART,
    PRODUCER_BYTE_RATE,
    EntityPart,
    QuotaEntity,
    QuotaError,
)
from gateway.quota_store import QuotaOp, QuotaStore
from gateway.quotas import QuotaEnforcer
from kgov.app import build_app
from kgov.cli import main
from kgov.settings import Settings
from tests.support.server import serve_app

pytestmark = pytest.mark.postgres

ALICE = QuotaEntity(EntityPart.of("alice"))


@pytest.mark.parametrize("name", ["a\x00b", "n" * 256])
def test_entity_names_the_store_cannot_keep_are_refused_on_every_path(db_url: str, name: str) -> None:
    """The REST route refused them itself; Kafka's AlterClientQuotas (gateway.admin_apis) and `kgov quotas`
    validate with `validate_ops` only, so PostgreSQL answered with a database error (the gateway closed
    the connection) and SQLite kept them. Every entity part, names alike."""
    engine = open_engine(db_url)
    try:
        store = QuotaStore(engine)
        store.migrate()
        for entity in (QuotaEntity(EntityPart.of(name)), QuotaEntity(DEFAULT_PART, EntityPart.of(name)),
                       QuotaEntity(ip=EntityPart.of(name))):
            with pytest.raises(QuotaError, match="Entity names must"):
                store.alter([(entity, [QuotaOp(PRODUCER_BYTE_RATE, 1000)])])
        assert store.load()[1] == {}
    finally:
        engine.dispose()


def test_store_roundtrip_defaults_and_removal(db_url: str) -> None:
    engine = open_engine(db_url)
    store = QuotaStore(engine)
    store.migrate()
    store.migrate()  # idempotent
    v0 = store.version()
    both = QuotaEntity(DEFAULT_PART, EntityPart.of("app"))
    store.alter([(ALICE, [QuotaOp(PRODUCER_BYTE_RATE, 1000), QuotaOp(CONSUMER_BYTE_RATE, 2000)]),
                 (both, [QuotaOp(PRODUCER_BYTE_RATE, 5)])])
    version, configs = store.load()
    assert version > v0
    assert configs == {ALICE: {PRODUCER_BYTE_RATE: 1000.0, CONSUMER_BYTE_RATE: 2000.0},
                       both: {PRODUCER_BYTE_RATE: 5.0}}
    store.alter([(ALICE, [QuotaOp(PRODUCER_BYTE_RATE, 1500), QuotaOp(CONSUMER_BYTE_RATE, remove=True)])])
    assert store.load()[1][ALICE] == {PRODUCER_BYTE_RATE: 1500.0}
    with pytest.raises(QuotaError):  # all or nothing
        store.alter([(ALICE, [QuotaOp(PRODUCER_BYTE_RATE, 1)]), (ALICE, [QuotaOp("nope", 1)])])
    assert store.load()[1][ALICE] == {PRODUCER_BYTE_RATE: 1500.0}
    # another node's enforcer sees the change by polling the version
    enforcer = QuotaEnforcer(QuotaStore(engine))
    enforcer.refresh()
    assert enforcer.configs[ALICE] == {PRODUCER_BYTE_RATE: 1500.0}
    engine.dispose()


class PausedFirstLoad(QuotaStore):
    """The first `load` reads the store, then waits for `release` before it returns: a poll that read
    an older version and is slow to finish."""

    def __init__(self, engine: Any) -> None:
        super().__init__(engine)
        self.entered = threading.Event()
        self.release = threading.Event()
        self._loads = 0

    def load(self) -> tuple[int, dict[QuotaEntity, dict[str, float]]]:
        loaded = super().load()
        self._loads += 1
        if self._loads == 1:
            self.entered.set()
            assert self.release.wait(30)
        return loaded


def test_a_slow_poll_never_undoes_a_later_refresh(db_url: str) -> None:
    # The poll thread and AlterClientQuotas (on a gateway admin thread) both refresh the enforcer. The
    # refresh after a write must leave the written quotas in force, even when a poll that loaded the
    # version before the write ends after it.
    engine = open_engine(db_url)
    store = PausedFirstLoad(engine)
    store.migrate()
    store.alter([(ALICE, [QuotaOp(PRODUCER_BYTE_RATE, 1000)])])
    enforcer = QuotaEnforcer(store)
    poll = threading.Thread(target=enforcer.refresh)
    poll.start()
    assert store.entered.wait(30)  # the poll has read 1000 and waits
    store.alter([(ALICE, [QuotaOp(PRODUCER_BYTE_RATE, 2000)])])
    after_write = threading.Thread(target=enforcer.refresh)
    after_write.start()
    after_write.join(timeout=0.3)  # unserialised, it would be done by now, before the poll
    store.release.set()
    poll.join(timeout=30)
    after_write.join(timeout=30)
    assert not poll.is_alive() and not after_write.is_alive()
    assert enforcer.configs == {ALICE: {PRODUCER_BYTE_RATE: 2000.0}}
    engine.dispose()


def test_kgov_quotas_cli(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KGOV_DATA_DIR", str(tmp_path))
    assert main(["quotas", "set", "--user", "alice", "--producer-byte-rate", "1048576", "--db", db_url]) == 0
    assert main(["quotas", "set", "--user-default", "--client-id-default", "--consumer-byte-rate", "2048",
                 "--db", db_url]) == 0
    capsys.readouterr()
    assert main(["quotas", "list", "--json", "--db", db_url]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {"entity": {"user": "alice"}, "values": {PRODUCER_BYTE_RATE: 1048576.0}} in listed
    assert {"entity": {"user": None, "client-id": None}, "values": {CONSUMER_BYTE_RATE: 2048.0}} in listed
    assert main(["quotas", "list", "--user", "alice", "--db", db_url]) == 0
    assert capsys.readouterr().out.strip() == "Quota configs for user=alice are producer_byte_rate=1048576.0"
    assert main(["quotas", "set", "--user", "bob", "--producer-byte-rate", "1048577", "--db", db_url]) == 0
    capsys.readouterr()
    assert main(["quotas", "list", "--user", "bob", "--db", db_url]) == 0
    assert capsys.readouterr().out.strip() == "Quota configs for user=bob are producer_byte_rate=1048577.0"
    assert main(["quotas", "set", "--producer-byte-rate", "5", "--db", db_url]) == 2
    assert "say whose quota to set: --user U or --user-default" in capsys.readouterr().err
    assert main(["quotas", "set", "--user", "alice", "--connection-creation-rate", "3", "--db", db_url]) == 1
    assert "cannot be set" in capsys.readouterr().err
    assert main(["quotas", "set", "--user", "alice", "--remove", PRODUCER_BYTE_RATE, "--db", db_url]) == 0


def test_quota_rest_api(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, admin={"user": "admin", "password": "correct-horse-battery"},
                        sasl={"failed_authentication_delay_ms": 0})
    with serve_app(build_app(settings)) as url, httpx.Client(base_url=url, timeout=10) as http:
        admin = ("admin", "correct-horse-battery")
        assert http.get("/v1/quotas").status_code == 401
        r = http.put("/v1/quotas", auth=admin, json={"entity": {"user": "alice", "client-id": None},
                                                     "set": {PRODUCER_BYTE_RATE: 4096}})
        assert r.status_code == 200, r.text
        assert r.json() == {"entity": {"user": "alice", "client-id": None}, "values": {PRODUCER_BYTE_RATE: 4096.0}}
        assert http.get("/v1/quotas", auth=admin).json() == [r.json()]
        bad = http.put("/v1/quotas", auth=admin, json={"entity": {"user": "alice"}, "set": {"bogus": 1}})
        assert bad.status_code == 400 and bad.json()["error_code"] == 40001
        assert http.put("/v1/quotas", auth=admin, json={"entity": {"team": "x"}, "set": {}}).status_code == 400
