"""`kgov encryption reencrypt --command-config FILE`: client settings, the SASL password among them, from a
file rather than the command line (where `ps` shows them to every local user)."""

from __future__ import annotations

from pathlib import Path

import pytest

from encryption.cli import client_config
from encryption.errors import EncryptionError


def test_the_file_then_each_client_property(tmp_path: Path) -> None:
    conf = tmp_path / "client.properties"
    conf.write_text("# team orders\nsecurity.protocol=SASL_PLAINTEXT\n\nsasl.mechanisms = SCRAM-SHA-512\n"
                    "sasl.username=orders\nsasl.password=s3cret=with=equals\nclient.id=from-file\n")
    assert client_config("gw:9092", conf, ["client.id=from-flag"]) == {
        "bootstrap.servers": "gw:9092", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "orders", "sasl.password": "s3cret=with=equals", "client.id": "from-flag"}


def test_a_bad_line_is_named_by_its_number_never_echoed(tmp_path: Path) -> None:
    conf = tmp_path / "client.properties"
    conf.write_text("sasl.username=orders\nsasl.password s3cret\n")
    with pytest.raises(EncryptionError, match="line 2: not NAME=VALUE") as refused:
        client_config("gw:9092", conf, [])
    assert "s3cret" not in str(refused.value)
    with pytest.raises(EncryptionError, match="cannot read --command-config"):
        client_config("gw:9092", tmp_path / "missing.properties", [])
