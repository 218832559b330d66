"""README.md's quick start and commands match the code.

- The `kgov up` output shown under Set-up is `kgov.up.startup_text` for the values it shows (its own
  mechanisms, `UP_MECHANISMS`; an isolated embedded broker; the default addresses).
- Every backticked `kgov ...` command in README.md, the package READMEs and docs/*.md names subcommands
  the CLI has (`a|b` alternatives included) and options the deepest of them takes; every top-level
  subcommand appears in README.md.
- Every backticked `make TARGET` is a Makefile target.
- The decision API `curl` of the quick start sends a document the API reads (every field the
  opa-kafka-plugin writes is required) and gets the answer shown, under the quick start's ACLs.
- The delegation-token expiry the quick start tells `oauth_cb` to return is named as `kgov tokens create`
  prints it.
- The failed-login limit the quick start warns about has the defaults it states.
- Every `pip install` of kgov in README.md installs the checkout (a path), with extras pyproject.toml has.
"""

from __future__ import annotations

import argparse
import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from authz.api import _opa_decide
from authz.config import AuthzConfig
from authz.database import open_engine
from authz.model import Acl, Operation, PatternType, Permission, Principal, ResourceType
from authz.service import AuthorizerService
from kgov.cli import build_parser
from kgov.settings import Settings
from kgov.up import UP_MECHANISMS, startup_text
from sasl.cli import _token_line
from sasl.config import SaslConfig

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _positional_choices(parser: argparse.ArgumentParser) -> set[str]:
    return {str(c) for a in parser._actions if not a.option_strings and a.choices
            and not isinstance(a, argparse._SubParsersAction) for c in a.choices}


def command_problems(command: str, root: argparse.ArgumentParser) -> list[str]:
    """What in one `kgov ...` command line the CLI does not have."""
    parser, path = root, ["kgov"]
    words = command.split()[1:]
    for word in words:
        if not re.fullmatch(r"[a-z][a-z-]*(\|[a-z][a-z-]*)*", word):
            break  # an option, a placeholder (NAME, HOST:PORT), `...` or a bracket
        alternatives = word.split("|")
        children = _subcommands(parser)
        if all(a in children for a in alternatives):
            parser, path = children[alternatives[0]], [*path, alternatives[0]]
            continue
        if all(a in _positional_choices(parser) for a in alternatives):
            continue
        return [f"`{command}`: {' '.join(path)} has no subcommand {word!r}"]
    options = {s for a in parser._actions for s in a.option_strings}
    return [f"`{command}`: {' '.join(path)} has no option {option}"
            for option in re.findall(r"(?<![\w-])--[a-z][a-z-]*", command) if option not in options]


def readme_commands(text: str) -> list[str]:
    return [" ".join(m.split()) for m in re.findall(r"`(kgov(?: [^`]*)?)`", text)]


def test_readme_shows_what_kgov_up_prints() -> None:
    settings = Settings(db="sqlite:////home/you/kgov/.kgov/kgov.db")
    text = startup_text(settings, gateway=settings.gateway.listen, mechanisms=UP_MECHANISMS,
                        upstream="127.0.0.1:41517", embedded=True, url="http://127.0.0.1:8080",
                        password="<one-time password>", isolated=True)
    assert f"```\n{text}\n```" in README


def test_documented_kgov_commands_exist() -> None:
    docs = [ROOT / "README.md", *sorted(ROOT.glob("*/README.md")), *sorted((ROOT / "docs").glob("*.md"))]
    commands = [c for doc in docs for c in readme_commands(doc.read_text(encoding="utf-8"))]
    assert len(commands) > 20  # the pattern still finds them
    parser = build_parser()
    assert [p for c in commands for p in command_problems(c, parser)] == []


def test_every_top_level_subcommand_is_in_the_readme() -> None:
    named = {c.split()[1] for c in readme_commands(README) if len(c.split()) > 1}
    assert sorted(set(_subcommands(build_parser())) - named) == []


def test_readme_make_targets_exist() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, re.M))
    named = set(re.findall(r"`make ([a-z][a-z-]*)`", README)) | set(re.findall(r"^make ([a-z-]+)\s", README, re.M))
    assert {"run", "test"} <= named
    assert sorted(named - targets) == []


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("kgov audit clasify --out F", "kgov audit has no subcommand 'clasify'"),
        ("kgov roles list|bindings|bond", "kgov roles has no subcommand 'list|bindings|bond'"),
        ("kgov audit classify --registry URL --usr U", "kgov audit classify has no option --usr"),
        ("kgov serve --tls-certificate PEM", "kgov serve has no option --tls-certificate"),
    ],
)
def test_command_check_finds_each_problem(command: str, expected: str) -> None:
    problems = command_problems(command, build_parser())
    assert len(problems) == 1 and expected in problems[0], problems


def test_command_check_passes_real_commands() -> None:
    parser = build_parser()
    for command in ("kgov acls export", "kgov roles list|bindings|bind|unbind", "kgov users add NAME --mechanism M",
                    "kgov up [--upstream HOST:PORT] [--data-dir DIR]", "kgov tokens ..."):
        assert command_problems(command, parser) == [], command


def readme_decision_document() -> dict[str, Any]:
    """The `-d '...'` body of the quick start's `curl` to the decision API."""
    match = re.search(r"curl [^`]*?/v1/data/kafka/authz/allow -d\s+'([^']*)'", README)
    assert match, "the quick start's decision API curl is gone"
    document = json.loads(match.group(1))
    assert isinstance(document, dict)
    return document


@pytest.fixture
def quick_start_acls(tmp_path: Path) -> Iterator[AuthorizerService]:
    """What `kgov acls --add --allow-principal User:alice --consumer --topic orders ...` gives alice."""
    engine = open_engine(f"sqlite:///{tmp_path}/kgov.db")
    service = AuthorizerService(engine, AuthzConfig())
    service.start(background=False)
    service.create_acls([Acl(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*", op, Permission.ALLOW)
                         for op in (Operation.READ, Operation.DESCRIBE)], actor=Principal("User", "admin"))
    yield service
    service.close()
    engine.dispose()


def test_readme_decision_api_example_answers_as_shown(quick_start_acls: AuthorizerService) -> None:
    document = readme_decision_document()
    assert _opa_decide(quick_start_acls, document["input"]) is True
    assert "answers `{\"result\":true}`; with `\"name\": \"payments\"` it answers `{\"result\":false}`" in README
    document["input"]["action"]["resourcePattern"]["name"] = "payments"
    assert _opa_decide(quick_start_acls, document["input"]) is False


def test_readme_names_the_token_expiry_as_the_cli_prints_it() -> None:
    line = _token_line({"token_id": "t", "owner": "User:alice", "renewers": [], "expiry_timestamp_ms": 5,
                        "max_timestamp_ms": 9})
    assert "\texpiry=5\t" in line
    assert "(`expiry=` on the first line `kgov tokens create`" in " ".join(README.split())


def test_readme_states_the_failed_login_limit_as_configured() -> None:
    config = SaslConfig()
    stated = f"({config.max_failed_attempts_per_source} failed logins a minute per name per client address)"
    per_address = f"({config.max_failed_attempts_per_address} failed logins a minute from one address"
    assert config.failed_attempts_window_s == 60.0
    assert stated in " ".join(README.split()) and per_address in " ".join(README.split())


def test_readme_installs_kgov_from_the_checkout() -> None:
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"])
    installs = re.findall(r"pip install '([^']*)'", README)
    assert installs
    for target in installs:
        path, _, rest = target.partition("[")
        assert path.startswith("/") and path.endswith("/kgov"), target  # not the package index's `kgov`
        assert set(rest.rstrip("]").split(",")) <= extras, target
