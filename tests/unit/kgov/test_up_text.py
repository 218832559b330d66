"""`kgov up`'s start-up text: the generated admin password is its only secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgov.settings import load_settings
from kgov.up import startup_text


def test_startup_text_hides_the_database_password(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path, dev_mode=True, db="postgresql://kgov:db-pass-0f9a@db.internal/kgov")
    text = startup_text(settings, gateway="127.0.0.1:9192", mechanisms=["SCRAM-SHA-512"], upstream="127.0.0.1:9092",
                        embedded=True, url="http://127.0.0.1:8080", password="generated-admin-pw")
    assert "db-pass-0f9a" not in text
    assert "postgresql://kgov:***@db.internal/kgov" in text
    assert text.count("generated-admin-pw") == 3  # the one-time line and the two client snippets
    assert text.endswith("Press Ctrl-C to stop.")


def test_startup_text_without_a_generated_password(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path, dev_mode=True)
    text = startup_text(settings, gateway="g:1", mechanisms=["SCRAM-SHA-512"], upstream="u:2", embedded=False,
                        url="http://127.0.0.1:8080", password=None)
    assert "<admin password>" in text
    assert "  admin password: the one you set (KGOV_ADMIN__PASSWORD or [admin] password)" in text


def test_a_chosen_admin_password_replaces_the_one_an_earlier_run_generated(tmp_path: Path, db_url: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The first `kgov up` generates a password; the user then sets KGOV_ADMIN__PASSWORD, as the start-up
    text says, and starts again on the same data directory (`kgov up --db` may name PostgreSQL): the chosen
    password must work."""
    from fastapi.testclient import TestClient

    from kgov.app import build_app
    from kgov.up import reset_dev_admin

    monkeypatch.setenv("KGOV_ADMIN__PASSWORD", "generated-by-the-first-run")
    first = load_settings(data_dir=tmp_path, dev_mode=True, db=db_url)
    with TestClient(build_app(first)) as client:
        reset_dev_admin(client.app.state.credentials, first)  # type: ignore[attr-defined]
        # a SCRAM-SHA-256 credential added by hand, with the same (old) password
        client.app.state.credentials.set_scram_credential(  # type: ignore[attr-defined]
            "admin", "SCRAM-SHA-256", "generated-by-the-first-run", actor="test")
    monkeypatch.setenv("KGOV_ADMIN__PASSWORD", "chosen-later")
    second = load_settings(data_dir=tmp_path, dev_mode=True, db=db_url)
    with TestClient(build_app(second)) as client:
        credentials = client.app.state.credentials  # type: ignore[attr-defined]
        assert credentials.verify_password("admin", "chosen-later") is None  # start-up keeps the old one
        reset_dev_admin(credentials, second)
        assert credentials.verify_password("admin", "chosen-later") is not None
        assert credentials.verify_password("admin", "generated-by-the-first-run") is None
        # the old password no longer logs in through any mechanism
        assert [m.mechanism for u in credentials.describe_scram_users(["admin"]) for m in u.mechanisms] == [
            "SCRAM-SHA-512"]
        assert client.get("/subjects", auth=("admin", "chosen-later")).status_code == 200


def test_startup_text_says_the_embedded_broker_is_unauthenticated(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path, dev_mode=True)
    args = {"gateway": "g:1", "mechanisms": ["SCRAM-SHA-512"], "upstream": "127.0.0.1:2", "url": "http://h:1",
            "password": None}
    embedded = startup_text(settings, embedded=True, **args)  # type: ignore[arg-type]
    assert "upstream      : 127.0.0.1:2  (embedded Tansu, memory storage, NO AUTHENTICATION" in embedded
    assert "NO AUTHENTICATION" not in startup_text(settings, embedded=False, **args)  # type: ignore[arg-type]


def test_kgov_up_closes_the_decision_api_unless_configured(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from fastapi.testclient import TestClient

    from kgov.app import build_app
    from kgov.up import close_unused_decision_api

    settings = load_settings(data_dir=tmp_path / "a", dev_mode=True)
    close_unused_decision_api(settings)
    with TestClient(build_app(settings), client=("127.0.0.1", 5000)) as client:
        r = client.post("/v1/data/kafka/authz/allow", json={"input": {}})
        assert r.status_code == 403 and "decision_api_networks" in r.json()["message"]
    monkeypatch.setenv("KGOV_AUTHZ__DECISION_API_NETWORKS", '["127.0.0.0/8"]')
    settings = load_settings(data_dir=tmp_path / "b", dev_mode=True)
    close_unused_decision_api(settings)
    assert settings.authz.decision_api_networks == ["127.0.0.0/8"]


def test_an_empty_chosen_admin_password_is_refused_with_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`KGOV_ADMIN__PASSWORD=` (set, empty) is not "unset": no password is generated, and the admin's
    credential cannot be set to it. `kgov up` must say so before it starts anything (it ended with a
    CredentialError traceback after the broker had started)."""
    import argparse

    from kgov.up import run_up

    monkeypatch.setenv("KGOV_ADMIN__PASSWORD", "")
    args = argparse.Namespace(data_dir=tmp_path, host="127.0.0.1", port=0, config=None, db=None, upstream="127.0.0.1:9",
                              allow_remote_plaintext=False)
    assert run_up(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("kgov up: KGOV_ADMIN__PASSWORD / [admin] password is empty"), err
    assert "Traceback" not in err


def test_up_without_data_dir_takes_the_setting_the_other_commands_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`kgov up` without --data-dir keeps its files where KGOV_DATA_DIR (or the file's data_dir) says, the
    directory where `kgov users` / `kgov tokens` look for its database and keys; it took ./.kgov before."""
    import argparse

    from kgov.up import run_up

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KGOV_DATA_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("KGOV_ADMIN__PASSWORD", "")  # stops it after the keys, before anything starts
    args = argparse.Namespace(data_dir=None, host="127.0.0.1", port=0, config=None, db=None, upstream="127.0.0.1:9",
                              allow_remote_plaintext=False)
    assert run_up(args) == 1
    assert "KGOV_ADMIN__PASSWORD" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == ["delegation-token.key", "signing-key.secret"]
    assert not (tmp_path / ".kgov").exists()
