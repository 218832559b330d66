"""A control-plane app with only the registry installed, over a real database and the real authorizer."""

from __future__ import annotations

import base64
import hmac
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from audit.sinks import MemorySink
from authz.config import AuthzConfig
from authz.database import open_engine
from authz.model import Principal
from authz.service import AuthorizerService
from kgov.settings import Settings
from registry import api

USERS = {"admin": "admin-password", "alice": "alice-password", "bob": "bob-password"}


class PasswordTableAuthenticator:
    """HTTP Basic against a fixed table: stands in for the credential store, which is not under test here."""

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users

    async def authenticate(self, authorization: str | None, client_address: str) -> Principal | None:
        if not authorization or not authorization.startswith("Basic "):
            return None
        user, _, password = base64.b64decode(authorization[6:]).decode().partition(":")
        expected = self._users.get(user, "\0")
        return Principal("User", user) if hmac.compare_digest(expected, password) else None


def basic(user: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{USERS[user]}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def build_registry_app(db: str, **registry_settings: Any) -> FastAPI:
    settings = Settings(db=db, authz=AuthzConfig(super_users="User:admin"), registry=registry_settings)
    engine = open_engine(db)
    sink = MemorySink()
    authorizer = AuthorizerService(engine, settings.authz, audit=sink, source="kgov")
    authorizer.start(background=False)
    app = FastAPI()
    app.state.settings = settings
    app.state.engine = engine
    app.state.authorizer = authorizer
    app.state.authenticator = PasswordTableAuthenticator(USERS)
    app.state.audit = sink
    app.state.clock = lambda: datetime.now(UTC)
    api.install(app)
    return app


@pytest.fixture
def registry_app_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., FastAPI]]:
    engines = []

    def make(db: str | None = None, **registry_settings: Any) -> FastAPI:
        url = db or f"sqlite:///{tmp_path_factory.mktemp('registry') / 'kgov.db'}"
        app = build_registry_app(url, **registry_settings)
        engines.append(app.state.engine)
        return app

    yield make
    for engine in engines:
        engine.dispose()


@pytest.fixture
def app(registry_app_factory: Callable[..., FastAPI]) -> FastAPI:
    return registry_app_factory()


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, headers=basic("admin")) as c:
        yield c
