"""The embedded broker's process: what it inherits."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

import kgov.up


def test_broker_does_not_inherit_kgov_secrets_or_tansu_overrides(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGOV_ADMIN__PASSWORD", "admin-pw-not-for-tansu")
    monkeypatch.setenv("KGOV_SASL__DELEGATION_TOKEN_SECRET_KEY", "dt-key-not-for-tansu")
    monkeypatch.setenv("SCHEMA_REGISTRY", "file:///tmp/planted")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector.example")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    seen: list[dict[str, Any]] = []

    def fake_popen(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs)
        raise OSError("test: not starting the broker")

    monkeypatch.setattr(subprocess, "Popen", fake_popen)
    with pytest.raises(OSError, match="not starting"), kgov.up.embedded_broker(tmp_path):
        pass
    env = seen[0]["env"]
    assert env is not None and env["PATH"] == "/usr/bin:/bin"
    assert not {"KGOV_ADMIN__PASSWORD", "KGOV_SASL__DELEGATION_TOKEN_SECRET_KEY", "SCHEMA_REGISTRY",
                "OTEL_EXPORTER_OTLP_ENDPOINT"} & set(env)


def test_the_brokers_port_is_held_for_it_until_it_binds() -> None:
    """Between kgov choosing the port and Tansu binding it, no other bind(0) may be handed it: the port
    is left in TIME_WAIT, which refuses a plain bind and lets a SO_REUSEADDR one (Tansu's) take it."""
    import errno
    import socket

    from kgov.up import reserved_loopback_port

    port = reserved_loopback_port()
    with socket.socket() as plain:
        with pytest.raises(OSError) as taken:
            plain.bind(("127.0.0.1", port))
        assert taken.value.errno == errno.EADDRINUSE
    with socket.socket() as reusing:
        reusing.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        reusing.bind(("127.0.0.1", port))
        reusing.listen(1)
