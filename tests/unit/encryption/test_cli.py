"""`kgov encryption keys ...` against a real key ring, through the kgov command."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from encryption import LocalKms
from kgov.cli import main


def test_create_rotate_list_through_kgov(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ring = tmp_path / "ring.json"
    assert main(["encryption", "keys", "create", "orders", "--key-ring", str(ring)]) == 0
    assert main(["encryption", "keys", "rotate", "orders", "--key-ring", str(ring)]) == 0
    assert main(["encryption", "keys", "create", "payments", "--key-ring", str(ring)]) == 0
    assert main(["encryption", "keys", "list", "--key-ring", str(ring)]) == 0
    out = capsys.readouterr().out
    assert "created orders version 1" in out and "rotated orders to version 2" in out
    assert "orders\tversion 2" in out and "payments\tversion 1" in out
    assert LocalKms(ring).current_version("orders") == 2
    assert stat.S_IMODE(os.stat(ring).st_mode) == 0o600


def test_errors_are_reported_not_raised(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ring = tmp_path / "ring.json"
    assert main(["encryption", "keys", "rotate", "missing", "--key-ring", str(ring)]) == 1
    assert "no key named 'missing'" in capsys.readouterr().err
    os.chmod(ring, 0o644)
    assert main(["encryption", "keys", "list", "--key-ring", str(ring)]) == 1
    assert "chmod 600" in capsys.readouterr().err


def test_default_key_ring_lives_in_the_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KGOV_DATA_DIR", str(tmp_path / "data"))
    assert main(["encryption", "keys", "create", "orders"]) == 0
    assert (tmp_path / "data" / "keyring.json").exists()


def test_vault_needs_a_token_from_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("VAULT_TOKEN", raising=False)
    assert main(["encryption", "keys", "list", "--vault-url", "http://127.0.0.1:1"]) == 1
    assert "VAULT_TOKEN" in capsys.readouterr().err


def test_kgov_and_the_key_tools_work_without_confluent_kafka(tmp_path: Path) -> None:
    """confluent-kafka is only needed by the serdes: `kgov` must start without it."""
    import subprocess
    import sys

    ring = tmp_path / "ring.json"
    script = (
        "import sys; sys.modules['confluent_kafka'] = None\n"  # any import of it now fails
        "from kgov.cli import main\n"
        f"code = main(['encryption', 'keys', 'create', 'orders', '--key-ring', {str(ring)!r}])\n"
        "import encryption; assert encryption.LocalKms and 'encryption.serdes' not in sys.modules\n"
        "sys.exit(code)\n"
    )
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert LocalKms(ring).current_version("orders") == 1


def test_public_names_resolve() -> None:
    import encryption

    for name in encryption.__all__:
        assert getattr(encryption, name) is not None
    with pytest.raises(AttributeError):
        encryption.NoSuchThing  # noqa: B018
