"""`kgov acls`, `kgov roles`, `kgov groups` against a real SQLite database (kafka-acls.sh's options)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kgov.cli import main


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    return f"sqlite:///{tmp_path / 'kgov.db'}"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_add_list_remove(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "acls", "--db", db, "--add", "--allow-principal", "User:Bob", "--allow-principal",
                       "User:Alice", "--allow-host", "198.51.100.0", "--operation", "Read", "--operation", "Write",
                       "--topic", "Test-topic")
    assert code == 0
    assert out.startswith("Adding ACLs for resource "
                          "`ResourcePattern(resourceType=TOPIC, name=Test-topic, patternType=LITERAL)`: ")
    assert out.count("principal=") == 8  # the four added, then the four now on the topic
    code, out, _ = run(capsys, "acls", "--db", db, "--list", "--topic", "Test-topic")
    assert code == 0
    assert "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=Test-topic, patternType=LITERAL)`" in out
    assert "(principal=User:Bob, host=198.51.100.0, operation=WRITE, permissionType=ALLOW)" in out
    assert out.count("principal=") == 4
    code, out, _ = run(capsys, "acls", "--db", db, "--list", "--topic", "Test-topic", "--principal", "User:Bob")
    assert out.count("principal=") == 2
    code, out, _ = run(capsys, "acls", "--db", db, "--remove", "--force", "--topic", "Test-topic")
    assert code == 0 and "Removed 4 ACLs" in out
    _, out, _ = run(capsys, "acls", "--db", db, "--list")
    assert "principal=" not in out


def test_add_and_remove_show_what_changed_then_every_acl_now_on_the_resource(
        db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """As kafka-acls.sh: the ACLs added (or removed), then all the resource's ACLs, not just the new ones."""
    run(capsys, "acls", "--db", db, "--add", "--allow-principal", "User:a", "--producer", "--topic", "t")
    code, out, _ = run(capsys, "acls", "--db", db, "--add", "--allow-principal", "User:b", "--consumer", "--topic", "t",
                       "--group", "g")
    adding, _, current = out.partition("Current ACLs for resource")
    assert code == 0 and "Adding ACLs for resource" in adding and "User:a" not in adding
    assert adding.count("principal=User:b") == 3
    assert current.startswith(" `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`")
    for acl in ("User:a, host=*, operation=WRITE", "User:a, host=*, operation=CREATE", "User:b, host=*, operation=READ"):
        assert f"(principal={acl}, permissionType=ALLOW)" in current
    assert "name=g, patternType=LITERAL" in current
    code, out, _ = run(capsys, "acls", "--db", db, "--remove", "--force", "--topic", "t", "--group", "g")
    assert code == 0 and out.startswith("Removed 6 ACLs\nRemoved ACLs for resource ") and "Current ACLs" not in out


def test_subject_acls_for_the_schema_registry(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "acls", "--db", db, "--add", "--allow-principal", "User:alice", "--operation", "Read",
                       "--operation", "Write", "--subject", "orders-", "--resource-pattern-type", "prefixed")
    assert code == 0
    _, out, _ = run(capsys, "acls", "--db", db, "--list", "--subject", "orders-", "--resource-pattern-type", "prefixed")
    assert "`ResourcePattern(resourceType=SUBJECT, name=orders-, patternType=PREFIXED)`" in out
    assert out.count("principal=User:alice") == 2
    code, _, err = run(capsys, "acls", "--db", db, "--add", "--allow-principal", "User:a", "--operation",
                       "CreateTokens", "--subject", "s")
    assert code == 1 and "ResourceType Subject only supports operations" in err


def test_an_unreachable_control_plane_is_an_error_not_a_traceback(capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        monkeypatch.setenv("KGOV_PASSWORD", "pw")
        code, out, err = run(capsys, "acls", "--url", url, "--user", "admin", "--list")
    assert code == 1 and out == ""
    assert err.startswith(f"Error: cannot reach the control plane at {url}") and "Traceback" not in err


def test_producer_and_consumer_shortcuts(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "acls", "--db", db, "--add", "--allow-principal", "User:Jane", "--producer", "--topic", "Test-",
        "--resource-pattern-type", "prefixed")
    run(capsys, "acls", "--db", db, "--add", "--allow-principal", "User:Peter", "--producer", "--idempotent",
        "--topic", "t", "--transactional-id", "tx")
    run(capsys, "acls", "--db", db, "--add", "--allow-principal", "User:Bob", "--consumer", "--topic", "t",
        "--group", "Group-1")
    _, out, _ = run(capsys, "acls", "--db", db, "--list")
    assert "name=Test-, patternType=PREFIXED" in out
    for op in ("WRITE", "DESCRIBE", "CREATE"):
        assert f"(principal=User:Jane, host=*, operation={op}, permissionType=ALLOW)" in out
    assert "(principal=User:Peter, host=*, operation=IDEMPOTENT_WRITE, permissionType=ALLOW)" in out
    assert "resourceType=TRANSACTIONAL_ID, name=tx" in out
    assert "resourceType=GROUP, name=Group-1" in out and "(principal=User:Bob, host=*, operation=READ" in out


def test_producer_and_consumer_in_one_command_add_both_sets(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Kafka's AclCommand takes --producer and --consumer together and adds both sets of ACLs; with
    --producer also given, --transactional-id and --idempotent's cluster ACL are the producer's."""
    code, _, err = run(capsys, "acls", "--db", db, "--add", "--allow-principal", "User:Ann", "--producer",
                       "--consumer", "--idempotent", "--topic", "t", "--group", "g", "--transactional-id", "tx")
    assert code == 0, err
    _, out, _ = run(capsys, "acls", "--db", db, "--list", "--principal", "User:Ann")
    granted = {(block.split(",")[0], op) for block in out.split("Current ACLs for resource `")[1:]
               for op in ("READ", "WRITE", "DESCRIBE", "CREATE", "IDEMPOTENT_WRITE")
               if f"operation={op}," in block}
    assert granted == {
        ("ResourcePattern(resourceType=TOPIC", op) for op in ("READ", "WRITE", "DESCRIBE", "CREATE")
    } | {("ResourcePattern(resourceType=GROUP", "READ"), ("ResourcePattern(resourceType=CLUSTER", "IDEMPOTENT_WRITE"),
         ("ResourcePattern(resourceType=TRANSACTIONAL_ID", "WRITE"),
         ("ResourcePattern(resourceType=TRANSACTIONAL_ID", "DESCRIBE")}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--add", "--topic", "t"], "You must specify one of: --allow-principal, --deny-principal"),
        (["--add", "--allow-principal", "User:a"], "You must provide at least one resource"),
        (["--add", "--list", "--topic", "t"], "Command must include exactly one action"),
        (["--add", "--allow-principal", "User:a", "--consumer", "--topic", "t"], "With --consumer you must specify"),
        (["--add", "--allow-principal", "User:a", "--producer"], "With --producer you must specify a --topic"),
        (["--add", "--allow-principal", "User:a", "--idempotent", "--topic", "t"], "--idempotent option is only"),
        (["--add", "--allow-principal", "User:a", "--operation", "IdempotentWrite", "--topic", "t"],
         "ResourceType Topic only supports operations"),
        (["--add", "--allow-principal", "User:a", "--resource-pattern-type", "match", "--topic", "t"],
         "'--resource-pattern-type' value of 'match' is not valid when adding acls"),
        (["--add", "--allow-principal", "bob", "--topic", "t"], "principalType:principalName"),
        (["--list", "--principal", "User:a", "--add"], "exactly one action"),
    ],
)
def test_refusals_say_what_is_wrong(db: str, capsys: pytest.CaptureFixture[str], argv: list[str],
                                    message: str) -> None:
    code, _, err = run(capsys, "acls", "--db", db, *argv)
    assert code == 1 and message in err


def test_remove_without_force_and_without_terminal_removes_nothing(db: str, capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    run(capsys, "acls", "--db", db, "--add", "--allow-principal", "User:a", "--topic", "t")
    code, _, err = run(capsys, "acls", "--db", db, "--remove", "--topic", "t")
    assert code == 1 and "--force" in err
    _, out, _ = run(capsys, "acls", "--db", db, "--list")
    assert "principal=User:a" in out


def test_roles_groups_and_export(db: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(capsys, "roles", "list")
    assert code == 0 and "DeveloperRead" in out and "SystemAdmin" in out
    assert run(capsys, "groups", "add-member", "Group:sales", "User:alice", "--db", db)[0] == 0
    assert run(capsys, "roles", "bind", "--principal", "Group:sales", "--role", "DeveloperRead",
               "--resource", "Topic:orders-", "--prefix", "--db", db)[0] == 0
    code, _, err = run(capsys, "roles", "bind", "--principal", "User:x", "--role", "SystemAdmin",
                       "--resource", "Topic:t", "--db", db)
    assert code == 1 and "cluster scope" in err
    _, out, _ = run(capsys, "groups", "list", "--db", db)
    assert "Group:sales: User:alice" in out
    run(capsys, "acls", "--db", db, "--add", "--deny-principal", "User:mallory", "--operation", "All",
        "--topic", "*")
    out_file = tmp_path / "inventory.json"
    assert run(capsys, "acls", "export", "--output", str(out_file), "--db", db)[0] == 0
    doc = json.loads(out_file.read_text())
    assert doc["acls"] == [{"resource_type": "TOPIC", "resource_name": "*", "pattern_type": "LITERAL",
                            "principal": "User:mallory", "host": "*", "operation": "ALL", "permission": "DENY"}]
    assert doc["role_bindings"] == [{"principal": "Group:sales", "role": "DeveloperRead", "resource_type": "TOPIC",
                                     "resource_name": "orders-", "pattern_type": "PREFIXED"}]
    assert doc["exported_at"].endswith("Z") and doc["cluster_id"] == "kgov-cluster"
