"""`kgov users / tokens / oauth-clients / oauth-keys` against a real database (SQLite and PostgreSQL)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from authz.database import open_engine
from kgov.cli import main
from kgov.settings import Settings
from sasl.scram import SCRAM_SHA_256, ScramClient
from sasl.service import CredentialService

pytestmark = pytest.mark.postgres


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db_url: str, capsys: pytest.CaptureFixture[str]):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KGOV_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("KGOV_SASL__DELEGATION_TOKEN_SECRET_KEY", "cli-delegation-key")
    monkeypatch.setenv("KGOV_SASL__SCRAM_ITERATIONS", "4096")

    def run(*argv: str, stdin: str = "") -> tuple[int, str, str]:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        code = main([*argv, "--db", db_url])
        out, err = capsys.readouterr()
        return code, out, err

    return run, db_url, tmp_path


def test_users(cli) -> None:
    run, db_url, tmp_path = cli
    code, out, _ = run(
        "users",
        "add",
        "alice",
        "--mechanism",
        "scram-sha-256",
        "--mechanism",
        "SCRAM-SHA-512",
        "--password-stdin",
        stdin="alice-cli-pw\n",
    )
    assert code == 0 and "SCRAM-SHA-256, SCRAM-SHA-512" in out
    code, out, _ = run("users", "list", "--json")
    assert json.loads(out) == [
        {
            "name": "alice",
            "mechanisms": [
                {"mechanism": "SCRAM-SHA-256", "iterations": 4096},
                {"mechanism": "SCRAM-SHA-512", "iterations": 4096},
            ],
        }
    ]
    assert (
        run(
            "users",
            "set-password",
            "alice",
            "--mechanism",
            "SCRAM-SHA-256",
            "--password-stdin",
            stdin="alice-new-pw\n",
        )[0]
        == 0
    )
    assert run("users", "set-password", "nobody", "--password-stdin", stdin="x\n")[0] == 1
    code, _, err = run("users", "add", "bob", "--iterations", "100", "--password-stdin", stdin="pw\n")
    assert code == 1 and "Too few iterations" in err
    code, _, err = run("users", "add", "bob")  # no tty, no --password-stdin: refuses
    assert code == 2 and "--password-stdin" in err
    engine = open_engine(db_url)
    svc = CredentialService(engine, Settings(dev_mode=True))
    server = svc.server_mechanism("SCRAM-SHA-256", "127.0.0.1")
    client = ScramClient(SCRAM_SHA_256, "alice", "alice-new-pw")
    assert (
        server.step(client.final_message(server.step(client.first_message()).data)).__class__.__name__
        == "Success"
    )
    engine.dispose()
    assert run("users", "remove", "alice", "--mechanism", "SCRAM-SHA-256")[0] == 0
    assert run("users", "remove", "alice")[0] == 0
    code, _, err = run("users", "remove", "alice")
    assert code == 1 and "does not exist" in err
    audit = (tmp_path / "audit" / "events.jsonl").read_text()
    assert audit.count("io.kgov.credential_change") == 5 and "alice-cli-pw" not in audit and "local:" in audit


def test_tokens(cli) -> None:
    run, *_ = cli
    code, out, _ = run(
        "tokens",
        "create",
        "--owner-principal",
        "User:alice",
        "--renewer-principal",
        "User:bob",
        "--max-life-time-period",
        "600000",
        "--json",
    )
    assert code == 0
    token = json.loads(out)
    assert token["owner"] == "User:alice" and token["renewers"] == ["User:bob"] and token["hmac"]
    # what librdkafka's oauth_cb and kafka-python's token provider hand over (sasl.delegation.format_bearer)
    assert token["bearer"] == f"kgov-dt1~{token['token_id']}~{token['hmac']}"
    code, out, _ = run("tokens", "describe", "--owner-principal", "User:bob", "--json")
    assert [t["token_id"] for t in json.loads(out)] == [token["token_id"]] and "hmac" not in out
    code, out, _ = run(
        "tokens", "renew", "--hmac", "-", "--renew-time-period", "1000", "--json", stdin=token["hmac"] + "\n"
    )
    assert code == 0 and json.loads(out)["expiry_timestamp_ms"] <= token["max_timestamp_ms"]
    code, out, _ = run("tokens", "expire", "--hmac", token["hmac"], "--json")
    assert code == 0 and json.loads(out) == {"expiry_timestamp_ms": -1}  # KRaft answers the period
    code, out, _ = run("tokens", "describe", "--json")
    assert json.loads(out) == []
    code, _, err = run("tokens", "renew", "--hmac", token["hmac"])
    assert code == 1 and "not found" in err


def test_tokens_without_the_secret_key_say_how_to_get_one(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the key (set, or beside the data directory's database): the CLI says where it could come from."""
    run, _, tmp_path = cli
    monkeypatch.delenv("KGOV_SASL__DELEGATION_TOKEN_SECRET_KEY")
    for argv in (("create", "--owner-principal", "User:alice"), ("describe",), ("expire", "--hmac", "AAAA")):
        code, out, err = run("tokens", *argv)
        assert code == 2 and out == ""
        assert "KGOV_SASL__DELEGATION_TOKEN_SECRET_KEY" in err and "KGOV_DATA_DIR" in err, err
        assert "delegation-token.key is read" in err and "--url http://HOST:PORT" in err, err
    # A key `kgov up` left in the data directory is not taken for another database (this one is elsewhere).
    (tmp_path / "delegation-token.key").write_text("k" * 43 + "\n")
    code, _, err = run("tokens", "describe")
    assert code == 2 and "KGOV_SASL__DELEGATION_TOKEN_SECRET_KEY" in err, err


def test_oauth_clients_and_keys(cli) -> None:
    run, *_ = cli
    code, _, _ = run(
        "oauth-clients", "add", "etl", "--scope", "kafka", "--secret-stdin", stdin="etl-secret-0123456789\n"
    )
    assert code == 0
    assert json.loads(run("oauth-clients", "list", "--json")[1])[0]["scopes"] == ["kafka"]
    code, _, err = run("oauth-clients", "add", "weak", "--secret-stdin", stdin="short\n")
    assert code == 1 and "at least 16" in err
    assert run("oauth-keys", "rotate")[0] == 0
    assert run("oauth-keys", "rotate")[0] == 0
    keys = json.loads(run("oauth-keys", "list", "--json")[1])["keys"]
    assert len(keys) == 2 and all("d" not in k for k in keys)
    assert run("oauth-clients", "remove", "etl")[0] == 0
    assert run("oauth-clients", "remove", "etl")[0] == 1


def test_tokens_through_a_running_control_plane(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`--url`: the owner is the authenticated user, as with kafka-delegation-tokens.sh. httpx's INFO
    line for each request is not printed."""
    import logging

    from kgov.app import build_app
    from tests.support.server import serve_app

    app = build_app(
        Settings(
            data_dir=tmp_path,
            admin={"password": "admin-password-cli"},
            sasl={"delegation_token_secret_key": "cli-delegation-key-remote"},
        )
    )
    caplog.set_level(logging.INFO)
    with serve_app(app) as url:
        app.state.credentials.set_scram_credential("gina", "SCRAM-SHA-512", "gina-password", actor="test")
        monkeypatch.setenv("KGOV_PASSWORD", "gina-password")

        def run(*argv: str, stdin: str = "") -> tuple[int, str, str]:
            monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
            code = main([*argv, "--url", url, "--user", "gina"])
            out, err = capsys.readouterr()
            return code, out, err

        code, out, _ = run("tokens", "create", "--renewer-principal", "User:hank", "--json")
        assert code == 0
        token = json.loads(out)
        assert token["owner"] == "User:gina" and token["requester"] == "User:gina"
        validated = app.state.credentials.validate_sasl_bearer(token["bearer"])
        assert validated.principal_name == "gina" and validated.token_authenticated
        code, out, _ = run("tokens", "describe", "--json")
        assert [t["token_id"] for t in json.loads(out)] == [token["token_id"]]
        assert run("tokens", "renew", "--hmac", "-", stdin=token["hmac"] + "\n")[0] == 0
        code, _, err = run("tokens", "create", "--owner-principal", "User:admin")
        assert code == 1 and "403" in err
        assert run("tokens", "expire", "--hmac", token["hmac"])[0] == 0
        monkeypatch.setenv("KGOV_PASSWORD", "wrong")
        code, _, err = run("tokens", "describe")
        assert code == 1 and "401" in err
    assert caplog.records and not [r for r in caplog.records if r.name.startswith("httpx")]


def test_without_url_the_commands_use_the_keys_kgov_up_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kgov up` keeps the keys it generates beside its database (kgov.up.keep_dev_secrets); without
    --url, `kgov tokens` and `kgov oauth-keys` find them there, as `kgov users` finds the database. A
    token made through the served app renews from the CLI, one the CLI makes logs in at the served app,
    and a signing key the CLI rotates in is sealed with the platform's secret."""
    from kgov.app import build_app
    from kgov.settings import load_settings
    from kgov.up import keep_dev_secrets
    from sasl.issuer import SEALED_PREFIX
    from sasl.mechanism import Challenge, Success
    from sasl.scram import SCRAM_SHA_512
    from tests.support.server import serve_app

    data = tmp_path / "up-data"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KGOV_DATA_DIR", str(data))
    monkeypatch.setenv("KGOV_SASL__SCRAM_ITERATIONS", "4096")
    settings = load_settings(dev_mode=True, admin={"password": "admin-password-cli"})
    keep_dev_secrets(settings)  # what `kgov up` does before it builds the app
    assert settings.delegation_token_key_file.exists() and settings.signing_key_secret_file.exists()
    app = build_app(settings)

    def run(*argv: str, stdin: str = "") -> tuple[int, str, str]:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    with serve_app(app) as url:
        service = app.state.credentials
        service.set_scram_credential("gina", "SCRAM-SHA-512", "gina-password", actor="test")
        monkeypatch.setenv("KGOV_PASSWORD", "gina-password")
        code, out, err = run("tokens", "create", "--url", url, "--user", "gina", "--json")
        assert code == 0, err
        remote = json.loads(out)

        code, out, err = run("tokens", "describe", "--json")  # no --url, no key in the environment
        assert code == 0, err
        assert [t["token_id"] for t in json.loads(out)] == [remote["token_id"]]
        code, out, err = run("tokens", "renew", "--hmac", "-", "--json", stdin=remote["hmac"] + "\n")
        assert code == 0, err
        code, out, err = run("tokens", "create", "--owner-principal", "User:gina", "--json")
        assert code == 0, err
        local = json.loads(out)

        # the CLI's token logs in at the served app: its HMAC was made under the platform's key
        service.refresh()
        server = service.server_mechanism("SCRAM-SHA-512", "127.0.0.1")
        client = ScramClient(SCRAM_SHA_512, local["token_id"], local["hmac"], token_auth=True)
        first = server.step(client.first_message())
        assert isinstance(first, Challenge)
        result = server.step(client.final_message(first.data))
        assert isinstance(result, Success) and str(result.principal) == "User:gina"
        assert run("tokens", "expire", "--hmac", local["hmac"], "--url", url, "--user", "gina")[0] == 0

        code, _, err = run("oauth-keys", "rotate")
        assert code == 0, err
        stored = service.store.signing_keys()
        assert stored and all(k.private_pem.startswith(SEALED_PREFIX) for k in stored)
        assert [k["kid"] for k in app.state.credentials.jwks_document()["keys"]] == [k.kid for k in stored]


def test_a_short_saved_key_is_refused_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A key file cut short keys nothing: the command stops with a message, as `kgov up` does."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KGOV_DATA_DIR", str(tmp_path))
    (tmp_path / "delegation-token.key").write_text("short\n")
    assert main(["tokens", "describe"]) == 2
    err = capsys.readouterr().err
    assert "delegation-token.key holds a key of 5 characters" in err and "short" not in err.split("key of")[1]


def test_one_name_for_a_user_and_a_client_only_with_shared_principal(cli) -> None:
    """`User:svc` would be both a SCRAM user and an OAuth client's tokens: the CLI refuses the second
    credential unless --shared-principal says that is meant, either way round."""
    run, *_ = cli
    assert run("users", "add", "svc", "--password-stdin", stdin="svc-password-1\n")[0] == 0
    code, _, err = run("oauth-clients", "add", "svc", "--secret-stdin", stdin="svc-secret-0123456789\n")
    assert code == 1 and "shared_principal" in err
    assert run("oauth-clients", "list", "--json")[1].strip() == "[]"
    code, out, _ = run("oauth-clients", "add", "svc", "--shared-principal", "--secret-stdin",
                       stdin="svc-secret-0123456789\n")
    assert code == 0 and "Added OAuth client svc" in out

    assert run("oauth-clients", "add", "etl", "--secret-stdin", stdin="etl-secret-0123456789\n")[0] == 0
    code, _, err = run("users", "add", "etl", "--password-stdin", stdin="etl-password-1\n")
    assert code == 1 and "shared_principal" in err
    assert "etl" not in run("users", "list")[1]
    assert run("users", "add", "etl", "--shared-principal", "--password-stdin", stdin="etl-password-1\n")[0] == 0
    assert "etl" in run("users", "list")[1]
