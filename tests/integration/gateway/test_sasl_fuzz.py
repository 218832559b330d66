"""Garbage SASL bytes against the real mechanisms (credential service over SQLite): nothing escapes,
nothing authenticates."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from authz.database import open_engine
from authz.model import Principal
from gateway.sasl_session import SaslSession
from kgov.settings import Settings
from sasl.service import CredentialService


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CredentialService]:
    tmp: Path = tmp_path_factory.mktemp("saslfuzz")
    settings = Settings(db=f"sqlite:///{tmp / 'kgov.db'}", data_dir=tmp,
                        sasl={"failed_authentication_delay_ms": 0, "max_failed_attempts_per_source": 10**9,
                              "max_failed_attempts_per_address": 10**9})
    engine = open_engine(settings.database_url)
    svc = CredentialService(engine, settings)
    svc.set_scram_credential("alice", "SCRAM-SHA-256", "alice-password-0123", actor=Principal("User", "t"))
    yield svc
    engine.dispose()


def prefixed(prefix: bytes) -> st.SearchStrategy[bytes]:
    return st.binary(max_size=200).map(lambda b: prefix + b)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mechanism=st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN", "OAUTHBEARER"]),
       messages=st.lists(st.one_of(st.binary(max_size=200), prefixed(b"n,,n=alice,r="), prefixed(b"\x00alice\x00"),
                                   prefixed(b"n,,\x01auth=Bearer ")), min_size=1, max_size=3))
def test_garbage_never_authenticates(service: CredentialService, mechanism: str, messages: list[bytes]) -> None:
    session = SaslSession(enabled=[mechanism], factory=service.server_mechanism, client_address="10.9.9.9")
    assert session.handshake(mechanism, 1, 0).error_code == 0
    for data in messages:
        step = session.authenticate(data, 0)
        assert not step.done, (mechanism, data)
        if step.failed:
            assert step.error_code in (34, 58)
            break
