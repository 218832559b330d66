"""Session-wide fixtures for real services: PostgreSQL and a Tansu broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.ports import refused_port as _refused_port
from tests.support.postgres import create_database, postgres_server
from tests.support.tansu import tansu_broker


@pytest.fixture(scope="session")
def postgres_admin_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture
def postgres_url(postgres_admin_url: str) -> str:
    """A fresh, empty PostgreSQL database for one test."""
    return create_database(postgres_admin_url)


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Runs a storage test against SQLite and against the real PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'kgov.db'}"
    return create_database(request.getfixturevalue("postgres_admin_url"))


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[str]:
    """`host:port` of a real Tansu broker, shared by the session."""
    with tansu_broker() as bootstrap:
        yield bootstrap


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port where nothing listens and nothing can start listening during the test: an
    unreachable endpoint (see tests.support.ports.refused_port)."""
    with _refused_port() as port:
        yield port
