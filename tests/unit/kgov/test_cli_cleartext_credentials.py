"""The `--url` commands (`kgov acls`, `kgov roles`, `kgov groups`, `kgov tokens`) refuse to send a password
over plain http beyond loopback unless `--allow-plain-http` is given; nothing is sent, nor the password read,
before that check."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

import authz.cli
import sasl.cli
from kgov.cli import main

COMMANDS = [
    ["acls", "--list"],
    ["roles", "bindings", "--principal", "User:alice"],
    ["groups", "list"],
    ["tokens", "describe"],
]


class Refused(Exception):
    pass


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Records each HTTP client the commands make, and has it fail to connect."""
    made: list[dict[str, Any]] = []

    class RecordingClient:
        def __init__(self, **kw: Any) -> None:
            made.append(kw)
            self.base_url = kw.get("base_url")

        def request(self, *_: Any, **__: Any) -> Any:
            raise httpx.ConnectError("not connecting in this test")

        def close(self) -> None:
            pass

    monkeypatch.setattr(authz.cli.httpx, "Client", RecordingClient)
    monkeypatch.setattr(sasl.cli.httpx, "Client", RecordingClient)
    monkeypatch.setenv("KGOV_PASSWORD", "a-password-for-the-test")
    return made


@pytest.mark.parametrize("command", COMMANDS)
def test_plain_http_to_another_host_is_refused_before_anything_is_sent(
        command: list[str], clients: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*command, "--url", "http://kgov.example:8080", "--user", "admin"])
    err = capsys.readouterr().err
    assert code != 0 and clients == []
    assert "refusing to send credentials to http://kgov.example:8080 over plain http" in err
    assert "--allow-plain-http" in err and "a-password-for-the-test" not in err


@pytest.mark.parametrize("command", COMMANDS)
def test_insecure_http_lets_it_through(command: list[str], clients: list[dict[str, Any]],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*command, "--url", "http://kgov.example:8080", "--user", "admin", "--allow-plain-http"])
    assert code != 0 and "not connecting in this test" in capsys.readouterr().err
    assert [c["base_url"] for c in clients] == ["http://kgov.example:8080"]
    assert clients[0]["auth"] == ("admin", "a-password-for-the-test")


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080", "http://localhost:8080", "https://kgov.example:8443"])
@pytest.mark.parametrize("command", COMMANDS)
def test_loopback_and_https_need_no_flag(command: list[str], url: str, clients: list[dict[str, Any]],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    main([*command, "--url", url, "--user", "admin"])
    assert "not connecting in this test" in capsys.readouterr().err
    assert [c["base_url"] for c in clients] == [url]
