"""`kgov gateway --listen --upstream --db` as users run it: SASL_PLAINTEXT by default, real clients."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from authz.database import open_engine
from authz.model import Acl, Operation, PatternType, Permission, Principal, ResourceType
from authz.service import AuthorizerService
from kgov.settings import Settings
from sasl.service import CredentialService
from tests.support.ports import free_port, wait_for_port

pytestmark = [pytest.mark.broker]


def seed_producer(tmp_path: Path, db: str, user: str, mechanism: str, password: str, topic: str) -> None:
    """`user` with a SCRAM credential and WRITE, DESCRIBE and CREATE on `topic`, in the database `db`,
    before any gateway runs on it."""
    settings = Settings(db=db, data_dir=tmp_path)
    engine = open_engine(db)
    CredentialService(engine, settings).set_scram_credential(user, mechanism, password, actor="test")
    authz = AuthorizerService(engine, settings.authz)
    authz.start(background=False)
    authz.create_acls([Acl(ResourceType.TOPIC, topic, PatternType.LITERAL, f"User:{user}", "*", op,
                           Permission.ALLOW) for op in (Operation.WRITE, Operation.DESCRIBE, Operation.CREATE)],
                      actor=Principal("User", "admin"))
    authz.close()
    engine.dispose()


def test_kgov_gateway_command(kafka_broker: str, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'kgov.db'}"
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    seed_producer(tmp_path, db, "carol", "SCRAM-SHA-256", "carol-password-0123", topic)
    port = free_port()
    env = {**os.environ, "KGOV_DATA_DIR": str(tmp_path), "KGOV_GATEWAY__ADDRESS_MODE": "single"}
    proc = subprocess.Popen([sys.executable, "-m", "kgov", "gateway", "--listen", f"127.0.0.1:{port}",
                             "--upstream", kafka_broker, "--db", db], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        wait_for_port("127.0.0.1", port, timeout=30)
        results: list[object] = []
        p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                      "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol",
                      "sasl.password": "carol-password-0123"})
        p.produce(topic, b"via kgov gateway", on_delivery=lambda err, msg: results.append(err))
        assert p.flush(20) == 0 and results == [None]
        p.produce(f"{topic}-not-hers", b"x", on_delivery=lambda err, msg: results.append(err))
        p.flush(20)
        assert results[1] is not None and results[1].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert f"listening on 127.0.0.1:{port} (SASL_PLAINTEXT" in out
    events = (tmp_path / "audit" / "gateway-events.jsonl").read_text()
    assert '"principal":"User:carol"' in events and "io.kgov.request" in events
    assert "carol-password-0123" not in events + out + err
    request_lines = (tmp_path / "audit" / "gateway-kafka-request.log").read_text()
    assert "DEBUG Completed request:" in request_lines and '"requestApiKeyName":"PRODUCE"' in request_lines
    authorizer_lines = (tmp_path / "audit" / "gateway-kafka-authorizer.log").read_text()
    assert (f"INFO Principal = User:carol is Denied operation = DESCRIBE from host = 127.0.0.1 on resource = "
            f"Topic:LITERAL:{topic}-not-hers") in authorizer_lines


def test_kgov_gateway_refuses_to_start_without_an_upstream(tmp_path: Path) -> None:
    env = {**os.environ, "KGOV_DATA_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "kgov", "gateway", "--listen", "127.0.0.1:0"], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 2 and "--upstream HOST:PORT" in done.stderr
