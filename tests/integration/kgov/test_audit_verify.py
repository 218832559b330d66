"""`kgov audit verify` over the audit trail real kgov commands write (each `kgov users` run is a writer)."""

from __future__ import annotations

import io
import json
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from kgov.cli import main
from kgov.settings import load_settings

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def kgov(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KGOV_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KGOV_SASL__DELEGATION_TOKEN_SECRET_KEY", "cli-delegation-key")
    monkeypatch.setenv("KGOV_SASL__SCRAM_ITERATIONS", "4096")

    def run(*argv: str, stdin: str = "") -> tuple[int, str, str]:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def add_users(run: Run, n: int) -> None:
    for i in range(n):
        code, _, err = run("users", "add", f"user{i}", "--mechanism", "SCRAM-SHA-256", "--password-stdin",
                           stdin=f"password-of-user-{i}\n")
        assert code == 0, err


def test_a_trail_of_one_record_is_counted_in_the_singular(kgov: Run, tmp_path: Path) -> None:
    add_users(kgov, 1)
    code, out, err = kgov("audit", "verify")
    assert code == 0, out + err
    assert out.splitlines()[0] == "events.jsonl: OK, 1 record, 1 writer"


def test_a_trail_written_by_several_runs_verifies_and_a_change_fails_it(kgov: Run, tmp_path: Path) -> None:
    add_users(kgov, 4)  # four processes' worth of writers, one after the other
    audit = tmp_path / "data" / "audit"
    key_file = tmp_path / "data" / "audit-integrity.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_text().strip()
    chain = audit / ".events.jsonl.chain"
    assert [json.loads(x)["k"] for x in chain.read_text().splitlines()].count("start") == 4

    code, out, err = kgov("audit", "verify")
    assert code == 0, out + err
    assert out.splitlines()[0] == "events.jsonl: OK, 4 records, 4 writers"
    assert "newest seal: " in out and key not in out + err

    events = audit / "events.jsonl"
    text = events.read_text().splitlines(keepends=True)
    events.write_text("".join([text[0], text[1].replace("user1", "userX"), *text[2:]]))
    code, out, err = kgov("audit", "verify", "--dir", str(audit))
    assert code == 1
    assert "events.jsonl: FAILED, events.jsonl line 2: modified: the line does not match its seal" in out
    assert key not in out + err
    code, out, _ = kgov("audit", "verify", str(events), "--key", str(key_file))
    assert code == 1 and "line 2: modified" in out


def test_another_key_and_a_missing_key_file(kgov: Run, tmp_path: Path) -> None:
    add_users(kgov, 1)
    other = tmp_path / "other.key"
    other.write_text("another-key-" + "x" * 40 + "\n")
    other.chmod(0o600)
    code, out, _ = kgov("audit", "verify", "--key", str(other))
    assert code == 1 and "unknown key" in out and "x" * 40 not in out
    code, out, err = kgov("audit", "verify", "--key", str(tmp_path / "nope.key"))
    assert code == 2 and out == ""
    assert f"key file {tmp_path / 'nope.key'} does not exist; pass --key FILE" in err
    code, _, err = kgov("audit", "verify", "--dir", str(tmp_path / "nowhere"))
    assert code == 2 and "is not a directory" in err


def test_a_configured_key_file_must_exist_and_integrity_can_be_turned_off(
        kgov: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGOV_AUDIT__INTEGRITY_KEY_FILE", str(tmp_path / "vault" / "audit.key"))
    with pytest.raises(ValueError, match=r"audit.key does not exist \(\[audit\] integrity_key_file\)"):
        load_settings().audit_integrity_key()
    (tmp_path / "vault").mkdir()
    (tmp_path / "vault" / "audit.key").write_text("v" * 43)
    (tmp_path / "vault" / "audit.key").chmod(0o644)  # others could read it, and forge the chain
    with pytest.raises(ValueError, match=r"mode 0644; only its owner may read it: run `chmod 600 .*audit.key`"):
        load_settings().audit_integrity_key()
    monkeypatch.delenv("KGOV_AUDIT__INTEGRITY_KEY_FILE")
    monkeypatch.setenv("KGOV_AUDIT__INTEGRITY", "false")
    assert load_settings().audit_integrity_key() is None
    add_users(kgov, 1)
    audit = tmp_path / "data" / "audit"
    assert sorted(p.name for p in audit.iterdir()) == [".events.jsonl.lock", "events.jsonl"]  # no chain file
    assert not (tmp_path / "data" / "audit-integrity.key").exists()
    (tmp_path / "k").write_text("k" * 43)
    (tmp_path / "k").chmod(0o600)
    code, out, _ = kgov("audit", "verify", "--key", str(tmp_path / "k"))
    assert code == 1 and "events.jsonl: FAILED, events.jsonl line 1: no chain file" in out


def test_files_named_on_the_command_line_chain_files_too(kgov: Run, tmp_path: Path) -> None:
    add_users(kgov, 2)
    audit = tmp_path / "data" / "audit"
    for named in (audit / "events.jsonl", audit / ".events.jsonl.chain"):
        code, out, _ = kgov("audit", "verify", str(named), str(audit / "events.jsonl"))
        assert code == 0 and out.splitlines()[0] == "events.jsonl: OK, 2 records, 2 writers"
    code, _, err = kgov("audit", "verify", str(audit / "nope.log"))
    assert code == 2 and "no such file" in err


def test_a_kept_anchor_shows_records_cut_from_the_end(kgov: Run, tmp_path: Path) -> None:
    """The blind spot of a chain (its newest tail cut, seals and all) closed by a seal kept elsewhere."""
    add_users(kgov, 3)
    code, out, _ = kgov("audit", "verify")
    anchor = out.split("newest seal: ")[1].split()[0]
    code, out, _ = kgov("audit", "verify", "--anchor", anchor)
    assert code == 0 and f"anchor {anchor}: found" in out
    audit = tmp_path / "data" / "audit"
    events, chain = audit / "events.jsonl", audit / ".events.jsonl.chain"
    events.write_text("".join(events.read_text().splitlines(keepends=True)[:-1]))
    entries = chain.read_text().splitlines(keepends=True)
    last_start = max(i for i, x in enumerate(entries) if json.loads(x)["k"] == "start")
    chain.write_text("".join(entries[:last_start]))  # the third run gone, seals and all
    code, out, _ = kgov("audit", "verify")
    assert code == 0  # undetectable from the files alone ...
    code, out, _ = kgov("audit", "verify", "--anchor", anchor)
    assert code == 1 and f"anchor {anchor}: MISSING" in out  # ... but not against the anchor


def test_a_directory_or_an_unreadable_file_is_a_clear_error_not_a_traceback(kgov: Run, tmp_path: Path) -> None:
    add_users(kgov, 1)
    audit = tmp_path / "data" / "audit"
    code, out, err = kgov("audit", "verify", str(audit))
    assert code == 2 and out == "" and f"{audit} is a directory: pass --dir {audit}" in err
    chain = audit / ".events.jsonl.chain"
    chain.unlink()
    chain.mkdir()  # unreadable as a file (permissions would not stop root, who runs some CI)
    code, out, err = kgov("audit", "verify", "--dir", str(audit))
    assert code == 2 and out == "" and f"cannot read {chain}: Is a directory" in err
