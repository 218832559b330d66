"""What kgov writes on disk (database with signing keys, audit trail) is owner-only, whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from kgov.app import build_app
from kgov.private_files import local_secret, private_file, sqlite_file
from kgov.settings import load_settings


@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_build_app_makes_data_database_and_audit_owner_only(tmp_path: Path, open_umask: None) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o777)
    (data / "audit").mkdir(mode=0o777)  # an earlier run's loose directory is tightened
    settings = load_settings(data_dir=data, dev_mode=True)
    build_app(settings).state.authorizer.close()
    assert mode(data) == 0o700
    assert mode(data / "kgov.db") == 0o600
    assert mode(data / "audit") == 0o700
    assert mode(data / "audit" / "events.jsonl") == 0o600
    assert mode(data / "audit" / "kafka-authorizer.log") == 0o600
    for f in data.rglob("*"):
        assert mode(f) & 0o077 == 0, f


def test_dev_secret_is_owner_only_even_when_found_loose(tmp_path: Path, open_umask: None) -> None:
    key = tmp_path / "delegation-token.key"
    value = local_secret(key)
    assert mode(key) == 0o600
    key.chmod(0o644)
    assert local_secret(key) == value
    assert mode(key) == 0o600


@pytest.mark.parametrize("content", ["", "\n", "short-key", "x" * 31])
def test_dev_secret_cut_short_is_refused_not_used(tmp_path: Path, content: str) -> None:
    """The key is assigned after settings validation: a short one would otherwise key tokens' HMACs."""
    key = tmp_path / "delegation-token.key"
    key.write_text(content)
    with pytest.raises(RuntimeError, match="delete the file") as refused:
        local_secret(key)
    assert content.strip() == "" or content.strip() not in str(refused.value)
    assert key.read_text() == content  # nothing overwritten


def test_dev_secret_is_written_whole_and_kept(tmp_path: Path) -> None:
    key = tmp_path / "signing-key.secret"
    (tmp_path / "signing-key.secret.new").write_text("")  # left by a crash before the link
    value = local_secret(key)
    assert len(value) >= 32 and key.read_text() == value + "\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["signing-key.secret"]
    assert local_secret(key) == value


def test_two_first_starts_at_once_agree_on_one_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control plane and the gateway started together on a new data directory both generate the audit
    key: the second start runs while the first is about to link its key into place. Neither may fail or
    take away the other's staged file, and both must use the key that ends up in the file."""
    key = tmp_path / "audit-integrity.key"
    real_link = os.link
    second: list[str] = []
    started = []

    def other_start_first(src: str, dst: str) -> None:
        if not started:
            started.append(True)
            second.append(local_secret(key))
        real_link(src, dst)

    monkeypatch.setattr("kgov.private_files.os.link", other_start_first)
    first = local_secret(key)
    assert first == second[0] == key.read_text().strip()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit-integrity.key"]


def test_private_file_does_not_create_through_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    link = tmp_path / "kgov.db"
    link.symlink_to(target)
    with pytest.raises(OSError):
        private_file(link)
    assert not target.exists()


@pytest.mark.parametrize(("url", "expected"), [
    ("sqlite:////srv/kgov/kgov.db", Path("/srv/kgov/kgov.db")),
    ("sqlite+pysqlite:///rel.db", Path("rel.db")),
    ("sqlite://", None),
    ("sqlite:///:memory:", None),
    ("postgresql://kgov:pw@db/kgov", None),
])
def test_sqlite_file(url: str, expected: Path | None) -> None:
    assert sqlite_file(url) == expected


def test_private_file_does_not_chmod_through_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "shared.txt"
    target.write_text("x")
    target.chmod(0o644)
    link = tmp_path / "tansu.log"
    link.symlink_to(target)
    with pytest.raises(OSError):
        private_file(link)
    assert mode(target) == 0o644


def test_a_shared_directory_named_as_data_dir_keeps_its_mode(tmp_path: Path, open_umask: None,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp
    (tmp_path / "var").mkdir()
    (tmp_path / "var").chmod(0o755)
    (tmp_path / "var" / "someone-else").mkdir()
    build_app(load_settings(data_dir=shared, dev_mode=True)).state.authorizer.close()
    build_app(load_settings(data_dir=tmp_path / "var", dev_mode=True)).state.authorizer.close()
    assert mode(shared) == 0o1777 and mode(tmp_path / "var") == 0o755
    assert "open to other users" in caplog.text
    assert mode(shared / "kgov.db") == 0o600 and mode(tmp_path / "var" / "kgov.db") == 0o600


def test_an_earlier_runs_data_dir_is_tightened(tmp_path: Path, open_umask: None) -> None:
    data = tmp_path / ".kgov"
    data.mkdir(mode=0o755)
    (data / "kgov.db").write_bytes(b"")
    (data / "kgov.db").chmod(0o644)
    (data / "audit").mkdir(mode=0o755)
    (data / "audit" / "events.jsonl.1").write_text("{}")
    build_app(load_settings(data_dir=data, dev_mode=True)).state.authorizer.close()
    assert mode(data) == 0o700 and mode(data / "kgov.db") == 0o600 and mode(data / "audit") == 0o700


def test_an_audit_directory_holding_chain_files_is_still_kgovs_own(tmp_path: Path, open_umask: None) -> None:
    """The chain files, the rotation locks and the audit key count as kgov's: a loosened directory is tightened."""
    data = tmp_path / "data"
    build_app(load_settings(data_dir=data, dev_mode=True)).state.authorizer.close()
    assert (data / "audit" / ".events.jsonl.chain").exists() and (data / "audit-integrity.key").exists()
    assert (data / "audit" / ".events.jsonl.lock").exists()  # the rotation lock (audit.rotation) too
    assert mode(data / "audit-integrity.key") == 0o600
    (data / "audit").chmod(0o755)
    data.chmod(0o755)
    build_app(load_settings(data_dir=data, dev_mode=True)).state.authorizer.close()
    assert mode(data) == 0o700 and mode(data / "audit") == 0o700
