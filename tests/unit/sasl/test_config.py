"""Credential settings refuse weak or unusable values with a message that says the fix."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kgov.settings import Settings


def test_short_delegation_secret_refused() -> None:
    with pytest.raises(ValidationError, match="at least 16 characters"):
        Settings(sasl={"delegation_token_secret_key": "short"})
    assert (
        Settings(sasl={"delegation_token_secret_key": "x" * 16}).sasl.delegation_token_secret_key is not None
    )


def test_secret_not_in_repr() -> None:
    settings = Settings(sasl={"delegation_token_secret_key": "very-secret-master-key"})
    assert "very-secret-master-key" not in repr(settings) and "very-secret-master-key" not in str(settings)


def test_mechanisms_and_jwks_url() -> None:
    with pytest.raises(ValidationError, match="unknown SASL mechanism"):
        Settings(sasl={"enabled_mechanisms": ["GSSAPI"]})
    assert Settings(sasl={"enabled_mechanisms": ["plain"]}).sasl.enabled_mechanisms == ["PLAIN"]
    with pytest.raises(ValidationError, match="http"):
        Settings(oauth={"jwks_url": "file:///etc/passwd"})
    with pytest.raises(ValidationError):
        Settings(sasl={"scram_iterations": 1000})
