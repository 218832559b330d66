"""The one settings object: TOML, environment overrides, refusal of insecure values."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from authz.model import Principal
from kgov.settings import load_settings


def test_environment_overrides_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toml = tmp_path / "kgov.toml"
    toml.write_text('cluster_id = "from-file"\n[authz]\nsuper_users = "User:file"\nallow_everyone_if_no_acl_found = true\n')
    monkeypatch.setenv("KGOV_AUTHZ__SUPER_USERS", ";  User:bob  ;  User:alice ")
    monkeypatch.setenv("KGOV_CLUSTER_ID", "from-env")
    s = load_settings(toml)
    assert s.cluster_id == "from-env"
    assert s.authz.super_user_set == {Principal("User", "bob"), Principal("User", "alice")}
    assert s.authz.allow_everyone_if_no_acl_found is True


def test_kafka_super_users_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGOV_AUTHZ__SUPER_USERS", "bob;:alice")
    with pytest.raises(ValidationError, match="expected a string in format principalType:principalName but got bob"):
        load_settings()


def test_super_users_written_as_a_json_list_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGOV_AUTHZ__SUPER_USERS", '["User:bob"]')
    with pytest.raises(ValidationError, match=r"super\.users syntax, User:alice;User:bob, not a JSON list"):
        load_settings()


def test_blank_super_users_is_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGOV_AUTHZ__SUPER_USERS", " ")
    assert load_settings().authz.super_user_set == frozenset()


@pytest.mark.parametrize("password", ["admin", "short", "changeme"])
def test_weak_admin_password_refused_outside_dev_mode(monkeypatch: pytest.MonkeyPatch, password: str) -> None:
    monkeypatch.setenv("KGOV_ADMIN__PASSWORD", password)
    with pytest.raises(ValidationError, match="KGOV_ADMIN__PASSWORD"):
        load_settings()
    assert load_settings(dev_mode=True).admin.password is not None


def test_secrets_stay_out_of_reprs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGOV_ADMIN__PASSWORD", "a-very-long-secret-value")
    s = load_settings()
    assert "a-very-long-secret-value" not in repr(s) and "a-very-long-secret-value" not in str(s.model_dump())


def test_unknown_keys_and_missing_file_are_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[authz]\nsuper_user = 'User:x'\n")
    with pytest.raises(ValidationError, match="super_user"):
        load_settings(bad)
    with pytest.raises(FileNotFoundError):
        load_settings(tmp_path / "missing.toml")


def test_bad_decision_api_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGOV_AUTHZ__DECISION_API_NETWORKS", '["10.0.0.0/33"]')
    with pytest.raises(ValidationError, match="decision_api_networks"):
        load_settings()


def test_database_url_stays_out_of_reprs() -> None:
    s = load_settings(db="postgresql://kgov:db-pass-0f9a@db/kgov")
    assert "db-pass-0f9a" not in repr(s) and "db-pass-0f9a" not in str(s)


def test_world_writable_config_is_refused(tmp_path: Path) -> None:
    toml = tmp_path / "kgov.toml"
    toml.write_text("[authz]\nallow_everyone_if_no_acl_found = true\n")
    toml.chmod(0o666)
    with pytest.raises(ValueError, match="writable by every user"):
        load_settings(toml)
    toml.chmod(0o644)
    assert load_settings(toml).authz.allow_everyone_if_no_acl_found is True


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_implicit_config_of_another_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    toml = tmp_path / "kgov.toml"
    toml.write_text("[authz]\nsuper_users = 'User:mallory'\n")
    os.chown(toml, 65534, 65534)
    with pytest.raises(ValueError, match="another user"):
        load_settings()
    assert load_settings(toml).authz.super_user_set == {Principal("User", "mallory")}  # explicit: the operator's call


def test_refused_settings_are_reported_by_name_and_variable_without_pydantic_noise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from kgov.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KGOV_AUTHZ__DECISION_CACHE_SIZE", "lots")
    monkeypatch.setenv("KGOV_SASL__DELEGATION_TOKEN_SECRET_KEY", "sh0rt-secret")
    assert main(["users", "list", "--db", f"sqlite:///{tmp_path / 'k.db'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kgov: invalid settings:\n")
    assert "  authz.decision_cache_size (KGOV_AUTHZ__DECISION_CACHE_SIZE): Input should be a valid integer" in err
    assert "  sasl.delegation_token_secret_key (KGOV_SASL__DELEGATION_TOKEN_SECRET_KEY): sasl.delegation_token_" \
           "secret_key must have at least 16 characters" in err
    assert "sh0rt-secret" not in err and "lots" not in err
    for noise in ("errors.pydantic.dev", "[type=", "Value error, ", "validation error for"):
        assert noise not in err
    monkeypatch.delenv("KGOV_AUTHZ__DECISION_CACHE_SIZE")
    monkeypatch.delenv("KGOV_SASL__DELEGATION_TOKEN_SECRET_KEY")
    (tmp_path / "kgov.toml").write_text('[authz]\nsuper_user = "User:bob"\n')
    (tmp_path / "kgov.toml").chmod(0o600)
    assert main(["users", "list", "--db", f"sqlite:///{tmp_path / 'k.db'}"]) == 2
    assert capsys.readouterr().err.startswith("kgov: invalid settings:\n  unknown setting(s) in [authz]: super_user; known:")


def test_output_cut_short_by_its_reader_ends_quietly(tmp_path: Path) -> None:
    """`kgov roles list | head -1`: no BrokenPipeError traceback when the reader has gone."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    # The command starts writing only once the reader has closed its end, as `head` does after its lines.
    code = "import sys, time; time.sleep(1); from kgov.cli import main; sys.exit(main(['roles', 'list']))"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=60) == 141 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_the_keys_kgov_up_keeps_are_adopted_only_for_its_own_database(tmp_path: Path) -> None:
    key = "k" * 43
    (tmp_path / "delegation-token.key").write_text(key + "\n")
    (tmp_path / "signing-key.secret").write_text("s" * 43 + "\n")

    def adopted(**values: Any) -> tuple[str | None, str | None]:
        settings = load_settings(data_dir=tmp_path, **values)
        settings.adopt_saved_secrets()
        token, signing = settings.sasl.delegation_token_secret_key, settings.oauth.signing_key_secret
        return (token.get_secret_value() if token else None, signing.get_secret_value() if signing else None)

    assert adopted() == (key, "s" * 43)
    assert adopted(db=f"sqlite:///{tmp_path / 'kgov.db'}") == (key, "s" * 43)  # the same file, named
    assert adopted(db=f"sqlite:///{tmp_path / 'other.db'}") == (None, None)
    assert adopted(db="postgresql://kgov@db.internal/kgov") == (None, None)
    assert adopted(sasl={"delegation_token_secret_key": "configured-key-0123"})[0] == "configured-key-0123"
    (tmp_path / "delegation-token.key").write_text("short\n")
    with pytest.raises(ValueError, match="holds a key of 5 characters"):
        adopted()


def test_connection_cap_overrides_take_ip_addresses_only() -> None:
    from pydantic import ValidationError

    from kgov.settings import Settings as _Settings

    assert _Settings(http_max_connections_per_ip_overrides={"10.0.0.7": 500}).http_max_connections_per_ip == 100
    with pytest.raises(ValidationError, match="is not an IP address"):
        _Settings(http_max_connections_per_ip_overrides={"proxy.example.com": 500})
    with pytest.raises(ValidationError, match="must be 0 or more"):
        _Settings(http_max_connections_per_ip_overrides={"10.0.0.7": -1})
