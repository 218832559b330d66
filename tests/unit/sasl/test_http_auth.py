"""The bootstrap HTTP authenticator: bad input is a refusal, never an exception."""

from __future__ import annotations

import asyncio
import base64

from authz.model import Principal
from sasl.http_auth import BootstrapAdminAuthenticator


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_the_bootstrap_authenticator_refuses_an_overlong_password_without_raising() -> None:
    # passlib raises PasswordSizeError for secrets over 4096 characters: the request answered 500,
    # without the failure delay.
    auth = BootstrapAdminAuthenticator("admin", "a" * 4096, failure_delay_s=0)
    assert asyncio.run(auth.authenticate(basic("admin", "a" * 5000), "10.0.0.1")) is None
    assert asyncio.run(auth.authenticate(basic("admin", "a" * 4097), "10.0.0.1")) is None
    assert asyncio.run(auth.authenticate(basic("admin", "a" * 4096), "10.0.0.1")) == Principal("User", "admin")
