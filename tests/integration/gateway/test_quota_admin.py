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
    CONNECTION_CREATION_RATE,
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


# -- ip entities: every path refuses what is not one IP address and keeps the address in its lookup form --

IP_RATE = {CONNECTION_CREATION_RATE: 3.0}


def test_the_store_refuses_an_ip_entity_that_is_not_an_address_and_keeps_the_others_in_lookup_form(
    db_url: str,
) -> None:
    engine = open_engine(db_url)
    try:
        store = QuotaStore(engine)
        store.migrate()
        good = (QuotaEntity(ip=EntityPart.of("::ffff:10.0.0.7")), [QuotaOp(CONNECTION_CREATION_RATE, 3)])
        bad = (QuotaEntity(ip=EntityPart.of("10.0.0.0/24")), [QuotaOp(CONNECTION_CREATION_RATE, 3)])
        with pytest.raises(QuotaError, match=r"^10\.0\.0\.0/24 is not a valid IP address"):
            store.alter([good, bad])
        assert store.load()[1] == {}  # all or nothing: the good change was not applied either
        store.alter([good])
        assert store.load()[1] == {QuotaEntity(ip=EntityPart.of("10.0.0.7")): IP_RATE}
        # Written again in another spelling, it is the same entity: one row, replaced.
        store.alter([(QuotaEntity(ip=EntityPart.of("[10.0.0.7]")), [QuotaOp(CONNECTION_CREATION_RATE, 4)])])
        assert store.load()[1] == {QuotaEntity(ip=EntityPart.of("10.0.0.7")): {CONNECTION_CREATION_RATE: 4.0}}
    finally:
        engine.dispose()


def test_an_ip_row_written_before_validation_applies_in_lookup_form(db_url: str) -> None:
    """Rows kept as given before ip names were normalised still apply to their address."""
    import sqlalchemy as sa

    from authz.database import transaction
    from gateway.quota_store import quotas_table

    engine = open_engine(db_url)
    try:
        store = QuotaStore(engine)
        store.migrate()
        with transaction(engine) as conn:
            conn.execute(sa.insert(quotas_table).values(
                user_kind="none", user_name="", client_kind="none", client_name="", ip_kind="name",
                ip_name="::ffff:10.0.0.9", quota_key=CONNECTION_CREATION_RATE, quota_value=2.0))
        enforcer = QuotaEnforcer(store)
        enforcer.refresh()
        assert enforcer.configs == {QuotaEntity(ip=EntityPart.of("10.0.0.9")): {CONNECTION_CREATION_RATE: 2.0}}
    finally:
        engine.dispose()


def test_kgov_quotas_cli_refuses_an_ip_that_is_not_an_address(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KGOV_DATA_DIR", str(tmp_path))
    for bad in ("broker.example.com", "10.0.0.0/24", "127.1"):
        assert main(["quotas", "set", "--ip", bad, "--connection-creation-rate", "3", "--db", db_url]) == 1
        assert capsys.readouterr().err.startswith(f"error: {bad} is not a valid IP address (host names are not "
                                                  "resolved")
    assert main(["quotas", "set", "--ip", "::ffff:10.0.0.7", "--connection-creation-rate", "3", "--db", db_url]) == 0
    assert capsys.readouterr().out.strip() == "Updated quotas of ip=10.0.0.7"
    assert main(["quotas", "list", "--ip", "[10.0.0.7]", "--db", db_url]) == 0  # any spelling finds it
    assert capsys.readouterr().out.strip() == "Quota configs for ip=10.0.0.7 are connection_creation_rate=3.0"
    assert main(["quotas", "list", "--ip", "bad host", "--db", db_url]) == 1
    assert "bad host is not a valid IP address" in capsys.readouterr().err


def test_quota_rest_api_refuses_an_ip_that_is_not_an_address(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, admin={"user": "admin", "password": "correct-horse-battery"},
                        sasl={"failed_authentication_delay_ms": 0})
    with serve_app(build_app(settings)) as url, httpx.Client(base_url=url, timeout=10) as http:
        admin = ("admin", "correct-horse-battery")
        bad = http.put("/v1/quotas", auth=admin, json={"entity": {"ip": "fe80::1%"}, "set": IP_RATE})
        assert bad.status_code == 400 and bad.json()["error_code"] == 40001
        assert bad.json()["message"].startswith("fe80::1% is not a valid IP address")
        r = http.put("/v1/quotas", auth=admin, json={"entity": {"ip": "2001:DB8::7%eth0"}, "set": IP_RATE})
        assert r.status_code == 200, r.text
        assert r.json() == {"entity": {"ip": "2001:db8:0:0:0:0:0:7"}, "values": IP_RATE}
        assert http.get("/v1/quotas", auth=admin).json() == [r.json()]


# -- ip rows written before the names were normalised: one row per address, the same one every time --


def _insert_ip_rows(engine: Any, *rows: tuple[str, float]) -> None:
    """Rows as a gateway older than the normalisation wrote them: the ip name as the operator spelled it."""
    import sqlalchemy as sa

    from authz.database import transaction
    from gateway.quota_store import quotas_table

    with transaction(engine) as conn:
        for name, value in rows:
            conn.execute(sa.insert(quotas_table).values(
                user_kind="none", user_name="", client_kind="none", client_name="", ip_kind="name", ip_name=name,
                quota_key=CONNECTION_CREATION_RATE, quota_value=value))


def _stored_ip_rows(engine: Any) -> list[tuple[str, float]]:
    import sqlalchemy as sa

    from gateway.quota_store import quotas_table

    with engine.connect() as conn:
        return sorted((r.ip_name, r.quota_value) for r in conn.execute(
            sa.select(quotas_table).where(quotas_table.c.ip_kind == "name")))


def _ip(name: str) -> QuotaEntity:
    return QuotaEntity(ip=EntityPart.of(name))


def test_ip_rows_spelling_one_address_apply_one_value_and_the_migration_merges_them(
    db_url: str, caplog: pytest.LogCaptureFixture, authz_factory: Any,
) -> None:
    """`::ffff:10.0.0.7` and `10.0.0.7` stored as two rows name one entity: the row in the lookup form
    applies (every change since the normalisation went to it), else the lowest value; every time, not in
    whichever order the database returns the rows (the later row used to shadow the other silently),
    with a WARNING naming the rows. Migration 2 then leaves one row per address, in the lookup form, and
    DescribeClientQuotas lists one entity, under either spelling."""
    import logging

    from authz.database import migrate
    from authz.model import Principal, RequestContext
    from gateway.admin_apis import QuotaApis
    from gateway.codec import SPECS
    from gateway.quota_store import COMPONENT, MIGRATIONS

    engine = open_engine(db_url)
    try:
        store = QuotaStore(engine)
        migrate(engine, COMPONENT, MIGRATIONS[:1])  # the table as the older gateway left it
        _insert_ip_rows(engine, ("10.0.0.7", 5.0), ("::ffff:10.0.0.7", 2.0), ("[10.0.0.8]", 3.0),
                        ("::ffff:10.0.0.8", 4.0), ("::ffff:10.0.0.9", 6.0), ("broker.example.com", 1.0))
        applied = {_ip("10.0.0.7"): {CONNECTION_CREATION_RATE: 5.0}, _ip("10.0.0.8"): {CONNECTION_CREATION_RATE: 3.0},
                   _ip("10.0.0.9"): {CONNECTION_CREATION_RATE: 6.0},
                   _ip("broker.example.com"): {CONNECTION_CREATION_RATE: 1.0}}
        with caplog.at_level(logging.WARNING, logger="kgov.gateway.quotas"):
            assert store.load()[1] == applied
            assert store.load()[1] == applied
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert sorted(warnings) == [  # once per store, not at every load
            "client quota rows ip='10.0.0.7' connection_creation_rate=5, ip='::ffff:10.0.0.7' "
            "connection_creation_rate=2 name one ip entity, 10.0.0.7: connection_creation_rate=5 of the row "
            "ip='10.0.0.7' applies (the row stored as 10.0.0.7 wins, else the lowest value)",
            "client quota rows ip='::ffff:10.0.0.8' connection_creation_rate=4, ip='[10.0.0.8]' "
            "connection_creation_rate=3 name one ip entity, 10.0.0.8: connection_creation_rate=3 of the row "
            "ip='[10.0.0.8]' applies (the row stored as 10.0.0.8 wins, else the lowest value)",
        ]
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="kgov.gateway.quotas"):
            store.migrate()
        assert [r.levelname for r in caplog.records] == ["WARNING", "WARNING", "INFO"]
        assert caplog.records[0].getMessage().endswith("; merged into that one row")
        assert caplog.records[2].getMessage() == ("client quota row ip='::ffff:10.0.0.9' connection_creation_rate=6 "
                                                  "is now stored as ip='10.0.0.9'")
        assert _stored_ip_rows(engine) == [("10.0.0.7", 5.0), ("10.0.0.8", 3.0), ("10.0.0.9", 6.0),
                                           ("broker.example.com", 1.0)]
        assert store.load()[1] == applied
        describe = SPECS[48].request[1]
        apis = QuotaApis(authz_factory(allow_everyone_if_no_acl_found=True).service, store, QuotaEnforcer(store))
        ctx = RequestContext(Principal("User", "admin"), "127.0.0.1")
        for match in ("10.0.0.7", "::ffff:10.0.0.7"):
            found = apis.describe(ctx, 1, describe(components=[
                describe.ComponentData(entity_type="ip", match_type=0, match=match)], strict=True))
            assert [([(p.entity_type, p.entity_name) for p in e.entity], [(v.key, v.value) for v in e.values])
                    for e in found.entries] == [([("ip", "10.0.0.7")], [(CONNECTION_CREATION_RATE, 5.0)])]
    finally:
        engine.dispose()


def test_a_change_to_an_ip_entity_replaces_or_removes_its_rows_in_every_spelling(db_url: str) -> None:
    """A row another spelling left after the migration (a gateway older than it, still running) would
    otherwise come back when the entity is removed, or keep shadowing it."""
    engine = open_engine(db_url)
    try:
        store = QuotaStore(engine)
        store.migrate()
        _insert_ip_rows(engine, ("10.0.0.7", 5.0), ("::ffff:10.0.0.7", 2.0), ("10.0.0.70", 9.0))
        store.alter([(_ip("[10.0.0.7]"), [QuotaOp(CONNECTION_CREATION_RATE, 4.0)])])
        assert _stored_ip_rows(engine) == [("10.0.0.7", 4.0), ("10.0.0.70", 9.0)]
        _insert_ip_rows(engine, ("::ffff:10.0.0.7", 2.0))
        store.alter([(_ip("10.0.0.7"), [QuotaOp(CONNECTION_CREATION_RATE, remove=True)])])
        assert store.load()[1] == {_ip("10.0.0.70"): {CONNECTION_CREATION_RATE: 9.0}}
    finally:
        engine.dispose()
