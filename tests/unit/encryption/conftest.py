"""Fixtures for the encryption unit tests: a real LocalKms in a temporary directory."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from encryption import LocalKms


@pytest.fixture
def kms(tmp_path: Path) -> LocalKms:
    ring = LocalKms(tmp_path / "ring.json")
    ring.create_key("orders")
    return ring


@pytest.fixture
def fixed_kms(tmp_path: Path) -> LocalKms:
    """A ring whose KEK "orders" v1 is bytes(range(32)): what the records of field_format_1.py were written under."""
    ring = tmp_path / "fixed-ring.json"
    document = {"format": "kgov-keyring", "version": 1, "keys": {"orders": {"current": 1, "versions": {
        "1": {"material": base64.b64encode(bytes(range(32))).decode()}}}}}
    fd = os.open(ring, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(document, out)
    return LocalKms(ring)
