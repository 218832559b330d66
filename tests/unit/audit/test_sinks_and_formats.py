"""Audit sinks (rotation, no silent loss) and Kafka's authorizer line."""

from __future__ import annotations

import errno
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from audit.kafka_format import authorizer_log_line, log4j_envelope
from audit.model import AuditEvent, EventType, authorization_event
from audit.sinks import AuditWriteError, JsonLinesSink, MultiSink, TextLineSink

NOW = datetime(2024, 5, 1, 10, 0, 0, 123000, tzinfo=UTC)


def event(i: int) -> object:
    return authorization_event(source="s", time=NOW, principal=f"User:u{i}", granted=False, operation="Read",
                               resource_type="Topic", resource_name="t", pattern_type="LITERAL",
                               client_address="10.0.0.1", method_name="Fetch", rule="DefaultDeny")


def test_json_lines_rotate_by_size_and_keep_every_event(tmp_path: Path) -> None:
    sink = JsonLinesSink(tmp_path / "events.jsonl", max_bytes=2000, backups=50)
    for i in range(40):
        sink.write(event(i))  # type: ignore[arg-type]
    sink.close()
    files = sorted(tmp_path.glob("events.jsonl*"))
    assert len(files) > 3
    principals = {json.loads(line)["data"]["authenticationInfo"]["principal"]
                  for f in files for line in f.read_text().splitlines()}
    assert principals == {f"User:u{i}" for i in range(40)}
    assert all(f.stat().st_size <= 2000 for f in files)


def test_every_audit_file_a_sink_creates_is_private_whatever_the_umask(tmp_path: Path) -> None:
    """Audit lines name principals, hosts and resources: a file made by a rotation is 0600, as the first
    one is made private where the sinks are built (kgov.private_files)."""
    old = os.umask(0)
    try:
        sink = JsonLinesSink(tmp_path / "events.jsonl", max_bytes=2000, backups=50)
        for i in range(40):
            sink.write(event(i))  # type: ignore[arg-type]
        sink.close()
    finally:
        os.umask(old)
    files = sorted(tmp_path.glob("events.jsonl*"))
    assert len(files) > 3
    assert {oct(f.stat().st_mode & 0o777) for f in files} == {oct(0o600)}


def test_rotation_drops_only_beyond_the_configured_backups(tmp_path: Path) -> None:
    sink = TextLineSink(tmp_path / "a.log", max_bytes=100, backups=2)
    for i in range(30):
        sink.write_line(f"line {i:03d} " + "x" * 40)
    sink.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".a.log.lock", "a.log", "a.log.1", "a.log.2"]
    assert "line 029" in (tmp_path / "a.log").read_text()


def test_a_failed_write_raises(tmp_path: Path) -> None:
    sink = JsonLinesSink(tmp_path / "e.jsonl")
    assert sink._file._data is not None
    read_only = os.open(tmp_path / "e.jsonl", os.O_RDONLY)
    os.dup2(read_only, sink._file._data.fileno())  # the sink's descriptor can no longer write
    os.close(read_only)
    with pytest.raises(AuditWriteError, match="Bad file descriptor"):
        sink.write(event(1))  # type: ignore[arg-type]
    sink.close()

    class Broken:
        def write(self, e: object) -> None:
            raise AuditWriteError("down")

    seen: list[object] = []

    class Good:
        def write(self, e: object) -> None:
            seen.append(e)

    with pytest.raises(AuditWriteError):
        MultiSink([Broken(), Good()]).write(event(2))  # type: ignore[arg-type]
    assert len(seen) == 1  # the other sinks still got it


def test_a_failed_rotation_is_an_audit_error_and_the_sink_recovers(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    sink = TextLineSink(tmp_path / "a.log", max_bytes=100, backups=2)
    sink.write_line("first " + "x" * 60)
    real_replace = os.replace
    failures = [OSError(errno.ENOSPC, "No space left on device")]

    def replace_failing_once(src: str, dst: str) -> None:
        if failures:
            raise failures.pop()
        real_replace(src, dst)

    monkeypatch.setattr("audit.sinks.os.replace", replace_failing_once)  # disk full: not causable here
    with pytest.raises(AuditWriteError, match="No space left on device"):
        sink.write_line("second " + "x" * 60)
    sink.write_line("third " + "x" * 60)  # the next write rotates and succeeds
    sink.close()
    assert (tmp_path / "a.log").read_text().startswith("third")
    assert (tmp_path / "a.log.1").read_text().startswith("first")


def test_kafka_authorizer_line_and_envelope() -> None:
    line = authorizer_log_line(
        principal="User:bob", allowed=True, operation="READ", host="127.0.0.1", resource_type="TOPIC",
        pattern_type="LITERAL", resource_name="green1", request_name="Fetch", resource_ref_count=1,
        rule="MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=green, patternType=PREFIXED, "
             "principal=User:bob, host=*, operation=READ, permissionType=ALLOW))",
    )
    assert line == (
        "Principal = User:bob is Allowed operation = READ from host = 127.0.0.1 on resource = Topic:LITERAL:green1 "
        "for request = Fetch with resourceRefCount = 1 based on rule MatchingAcl(acl=StandardAcl(resourceType=TOPIC, "
        "resourceName=green, patternType=PREFIXED, principal=User:bob, host=*, operation=READ, permissionType=ALLOW))"
    )
    assert log4j_envelope(NOW, "DEBUG", "m", "kafka.authorizer.logger") == (
        "[2024-05-01 10:00:00,123] DEBUG m (kafka.authorizer.logger)"
    )


def test_a_client_chosen_name_cannot_start_a_line_of_its_own() -> None:
    """A group id with a line break and a forged decision after it stays on its decision's line."""
    forged = "[2024-05-01 10:00:00,124] DEBUG Principal = User:admin is Allowed operation = ALTER ..."
    message = authorizer_log_line(
        principal="User:mallory", allowed=False, operation="READ", host="10.0.0.9", resource_type="GROUP",
        pattern_type="LITERAL", resource_name=f"g\r\n{forged}", request_name="JoinGroup", resource_ref_count=1,
        rule="DefaultDeny")
    line = log4j_envelope(NOW, "INFO", message, "kafka.authorizer.logger")
    assert line.splitlines() == [line]
    assert "Group:LITERAL:g\\r\\n[2024-05-01 10:00:00,124] DEBUG Principal = User:admin" in line
    assert line.startswith("[2024-05-01 10:00:00,123] INFO Principal = User:mallory is Denied")


def test_event_shape_is_cloudevents_with_a_format_version() -> None:
    doc = event(7).to_dict()  # type: ignore[attr-defined]
    assert doc["specversion"] == "1.0" and doc["kgovformatversion"] == 1
    assert doc["time"] == "2024-05-01T10:00:00.123Z"
    assert doc["data"]["authorizationInfo"]["granted"] is False


def _kept(directory: Path) -> dict[str, list[str]]:
    return {p.name: [x.split()[1] for x in p.read_text().splitlines()]
            for p in sorted(directory.iterdir()) if not p.name.startswith(".")}


def test_a_rotation_that_cannot_open_its_new_file_pushes_no_kept_file_out(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Disk full while the rotated-to file's chain header is written: the files were already moved, so the
    next writes must only retry the opening; rotating again each time would push a kept file out per write."""
    from audit.integrity import IntegrityKey, audit_files_in, verify_paths

    key = IntegrityKey(b"k" * 43)
    sink = TextLineSink(tmp_path / "a.log", max_bytes=100, backups=3, integrity=key)
    for i in range(8):
        sink.write_line(f"line {i:03d} " + "x" * 40)
    before = _kept(tmp_path)
    assert before == {"a.log": ["006", "007"], "a.log.1": ["004", "005"], "a.log.2": ["002", "003"],
                      "a.log.3": ["000", "001"]}
    real_open = os.open
    failures = [OSError(errno.ENOSPC, "No space left on device") for _ in range(3)]

    def chain_open_failing(path: str, *args: int) -> int:
        if str(path).endswith(".chain") and failures:
            raise failures.pop()
        return real_open(path, *args)

    monkeypatch.setattr("audit.sinks.os.open", chain_open_failing)  # disk full: not causable here
    for i in range(8, 11):
        with pytest.raises(AuditWriteError, match="No space left on device"):
            sink.write_line(f"line {i:03d} " + "x" * 40)
    sink.write_line("line 011 " + "x" * 40)
    sink.close()
    # One rotation happened: the oldest file (000, 001) went, as it would have without the failures.
    assert _kept(tmp_path) == {"a.log": ["011"], "a.log.1": ["006", "007"], "a.log.2": ["004", "005"],
                               "a.log.3": ["002", "003"]}
    assert all(r.ok for r in verify_paths(audit_files_in(tmp_path), key))


def test_a_rotation_retried_after_a_failed_rename_does_no_rename_twice(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    sink = TextLineSink(tmp_path / "a.log", max_bytes=100, backups=3)
    for i in range(8):
        sink.write_line(f"line {i:03d} " + "x" * 40)
    real_replace = os.replace
    calls = [0]

    def last_rename_fails_once(src: str, dst: str) -> None:
        calls[0] += 1
        if calls[0] == 3:  # a.log -> a.log.1, after a.log.2 -> a.log.3 and a.log.1 -> a.log.2 were done
            raise OSError(errno.EIO, "Input/output error")
        real_replace(src, dst)

    monkeypatch.setattr("audit.sinks.os.replace", last_rename_fails_once)  # not causable here
    with pytest.raises(AuditWriteError, match="Input/output error"):
        sink.write_line("line 008 " + "x" * 40)
    sink.write_line("line 009 " + "x" * 40)
    sink.close()
    assert _kept(tmp_path) == {"a.log": ["009"], "a.log.1": ["006", "007"], "a.log.2": ["004", "005"],
                               "a.log.3": ["002", "003"]}


def test_an_events_json_is_made_once_for_every_sink_and_anew_after_replace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A MultiSink of the file and the Kafka topic wrote each event's JSON twice: on the gateway, one
    more serialisation per request on the event loop."""
    import dataclasses

    import audit.model

    calls = []
    real_dumps = json.dumps

    def counting_dumps(*args: Any, **kwargs: Any) -> str:
        calls.append(1)
        return real_dumps(*args, **kwargs)

    monkeypatch.setattr(audit.model.json, "dumps", counting_dumps)
    event = AuditEvent(EventType.AUTHORIZATION, "crn:///kafka=a", "t", datetime(2026, 11, 22, tzinfo=UTC),
                       {"n": 1})
    one, two = JsonLinesSink(tmp_path / "a.jsonl"), JsonLinesSink(tmp_path / "b.jsonl", integrity=None)
    MultiSink([one, two]).write(event)
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text() == event.to_json() + "\n"
    assert len(calls) == 1
    changed = dataclasses.replace(event, data={"n": 2})
    assert json.loads(changed.to_json())["data"] == {"n": 2} and len(calls) == 2
    assert changed != event and dataclasses.replace(changed, data={"n": 1}) == event  # the cache is no field
    one.close()
    two.close()
