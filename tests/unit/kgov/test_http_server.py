"""kgov.http_server's choice of uvicorn protocol: the bounded httptools protocol subclasses uvicorn's
internals, so when they move, or httptools is missing, the server must not quietly run without its head
limits and timers; and the body and answer deadlines' arithmetic."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from kgov.http_server import (
    HttpParserMissing,
    answer_write_deadline_s,
    declared_body,
    request_body_deadline_s,
    server_options,
)


def test_the_bounded_httptools_protocol_is_used_when_httptools_is_installed() -> None:
    protocol = server_options([], max_body_bytes=1024)["http"]
    assert isinstance(protocol, type) and protocol.__name__ == "BoundedHttpToolsProtocol"


def test_without_httptools_the_server_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    # uvicorn would fall back to h11, which has none of the head, body and answer timers: a documented
    # refusal (kgov/http_server.py's docstring, README), not a quietly unbounded server.
    monkeypatch.setitem(sys.modules, "httptools", None)  # `import httptools` raises ImportError
    with pytest.raises(HttpParserMissing, match="httptools is not installed"):
        server_options([], max_body_bytes=1024)


def test_kgov_serve_without_httptools_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import uvicorn

    from kgov.cli import main

    started: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: started.append(kw))
    monkeypatch.setitem(sys.modules, "httptools", None)
    old_umask = os.umask(0o022)
    try:
        assert main(["serve", "--db", f"sqlite:///{tmp_path}/k.db"]) == 2
    finally:
        os.umask(old_umask)
    assert started == []
    err = capsys.readouterr().err
    assert err.startswith("kgov: httptools is not installed") and "Traceback" not in err


def test_uvicorn_internals_that_moved_fail_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    # httptools is there but uvicorn's protocol module is not where kgov subclasses it (a uvicorn
    # release that reorganised it): the start fails, rather than serving without head timers.
    monkeypatch.setitem(sys.modules, "uvicorn.protocols.http.httptools_impl", None)
    with pytest.raises(ImportError):
        server_options([], max_body_bytes=1024)


def test_a_body_gets_a_grace_plus_its_declared_length_at_the_minimum_rate() -> None:
    cap = 8 * 1024 * 1024
    assert request_body_deadline_s(0, cap) == 30.0
    assert request_body_deadline_s(2 * 1024 * 1024, cap) == 38.0  # registry.max_body_bytes
    # Chunked (no declared length), or declared past the cap (answered 413): the cap's time.
    assert request_body_deadline_s(None, cap) == request_body_deadline_s(10**12, cap) == 62.0


def test_answers_waiting_in_a_full_buffer_get_a_grace_plus_their_length_at_the_minimum_rate() -> None:
    assert answer_write_deadline_s(0) == 30.0
    assert answer_write_deadline_s(8 * 1024 * 1024) == 62.0


@pytest.mark.parametrize(("headers", "expected"), [
    ([], (False, 0)),
    ([(b"content-length", b"0")], (False, 0)),
    ([(b"host", b"kgov"), (b"content-length", b"1234")], (True, 1234)),
    ([(b"transfer-encoding", b"chunked")], (True, None)),
])
def test_the_declared_body_is_read_from_the_head(headers: list[tuple[bytes, bytes]],
                                                  expected: tuple[bool, int | None]) -> None:
    assert declared_body(headers) == expected
