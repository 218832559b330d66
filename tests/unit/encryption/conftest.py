"""Fixtures for the encryption unit tests: a real LocalKms in a temporary directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from encryption import LocalKms


@pytest.fixture
def kms(tmp_path: Path) -> LocalKms:
    ring = LocalKms(tmp_path / "ring.json")
    ring.create_key("orders")
    return ring
