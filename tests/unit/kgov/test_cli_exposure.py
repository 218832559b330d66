"""`kgov serve` and `kgov up` keep plain-text credentials on loopback unless told otherwise."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kgov.up
from kgov.cli import main


@pytest.fixture(autouse=True)
def keep_umask() -> Iterator[None]:
    """`kgov serve` and `kgov up` tighten the process umask; the rest of the test session keeps its own."""
    old = os.umask(0o022)
    os.umask(old)
    yield
    os.umask(old)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Records a server start instead of binding a socket."""
    calls: list[dict[str, Any]] = []
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append(kw))

    def no_broker(*a: Any, **kw: Any) -> Any:
        calls.append({"broker": True})
        raise RuntimeError("test: no broker")

    monkeypatch.setattr(kgov.up, "dev_broker", no_broker)
    return calls


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7", "kgov.example"])
def test_serve_refuses_plain_http_beyond_loopback(host: str, tmp_path: Path, started: list[dict[str, Any]],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--host", host, "--db", f"sqlite:///{tmp_path}/k.db"]) == 2
    assert started == []
    assert "--tls-cert" in capsys.readouterr().err


def test_serve_beyond_loopback_with_tls_or_explicit_proxy(tmp_path: Path, started: list[dict[str, Any]],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path}/k.db"
    assert main(["serve", "--host", "0.0.0.0", "--tls-cert", "c.pem", "--tls-key", "k.pem", "--db", db]) == 0
    assert started[-1]["ssl_certfile"] == Path("c.pem") and started[-1]["ssl_keyfile"] == Path("k.pem")
    assert started[-1]["server_header"] is False
    assert started[-1]["proxy_headers"] is False and started[-1]["forwarded_allow_ips"] == []
    assert main(["serve", "--host", "0.0.0.0", "--allow-remote-plaintext", "--db", db]) == 0
    assert main(["serve", "--db", db]) == 0
    assert [c["host"] for c in started] == ["0.0.0.0", "0.0.0.0", "127.0.0.1"]
    assert os.umask(0o022) == 0o077  # what the server writes later is owner-only
    assert main(["serve", "--host", "0.0.0.0", "--tls-cert", "c.pem", "--db", db]) == 2


def test_up_refuses_a_remote_control_plane_before_writing_anything(tmp_path: Path, started: list[dict[str, Any]],
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    assert main(["up", "--host", "0.0.0.0", "--data-dir", str(data)]) == 2
    assert started == [] and not data.exists()
    assert "--allow-remote-plaintext" in capsys.readouterr().err


def test_up_refuses_a_remote_plaintext_gateway(tmp_path: Path, started: list[dict[str, Any]],
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KGOV_GATEWAY__LISTEN", "0.0.0.0:9192")
    monkeypatch.delenv("KGOV_ADMIN__PASSWORD", raising=False)
    assert main(["up", "--data-dir", str(tmp_path / "data")]) == 2
    assert started == []
    assert "KGOV_GATEWAY__LISTEN" in capsys.readouterr().err
    # the explicit opt-in goes on to start the broker (stubbed here)
    assert main(["up", "--allow-remote-plaintext", "--data-dir", str(tmp_path / "data")]) == 1
    assert started == [{"broker": True}]


@pytest.mark.parametrize("where", [["--host", "0.0.0.0"], []])
def test_up_refuses_a_weak_admin_password_beyond_loopback(where: list[str], tmp_path: Path,
                                                         started: list[dict[str, Any]],
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Dev mode takes KGOV_ADMIN__PASSWORD=admin; a super user with it must not be reachable from elsewhere."""
    monkeypatch.setenv("KGOV_ADMIN__PASSWORD", "admin")
    if not where:
        monkeypatch.setenv("KGOV_GATEWAY__LISTEN", "0.0.0.0:9192")
    data = tmp_path / "data"
    assert main(["up", "--allow-remote-plaintext", "--data-dir", str(data), *where]) == 2
    assert started == [] and not (data / "delegation-token.key").exists()
    err = capsys.readouterr().err
    assert "weak admin password" in err and "KGOV_ADMIN__PASSWORD" in err and "'admin'" not in err
    # on loopback alone, dev mode still takes it
    monkeypatch.delenv("KGOV_GATEWAY__LISTEN", raising=False)
    assert main(["up", "--data-dir", str(data)]) == 1  # went on to start the broker (stubbed)
    assert started == [{"broker": True}]


def test_serve_in_dev_mode_refuses_a_weak_admin_password_beyond_loopback(
        tmp_path: Path, started: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # dev_mode is an ordinary setting (KGOV_DEV_MODE); it admits a weak password, but only on loopback.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KGOV_DEV_MODE", "true")
    monkeypatch.setenv("KGOV_ADMIN__PASSWORD", "admin")
    db = f"sqlite:///{tmp_path}/k.db"
    assert main(["serve", "--host", "0.0.0.0", "--tls-cert", "c.pem", "--tls-key", "k.pem", "--db", db]) == 2
    assert started == []
    assert "refusing a weak admin password" in capsys.readouterr().err
    assert main(["serve", "--db", db]) == 0  # loopback: the dev convenience stays
    assert [c["host"] for c in started] == ["127.0.0.1"]
