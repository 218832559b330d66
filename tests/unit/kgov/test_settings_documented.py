"""Every setting is documented where users look for it, with its true default, and nothing else is.

The rule:
- Each section of `kgov.settings.Settings` has one home document (`HOME`): README.md for the top-level
  keys, `[authz]`, `[audit]`, `[admin]` and `[metrics]`; the package README for `[sasl]`/`[oauth]`
  (sasl/README.md), `[registry]` and `[gateway]`.
- A settings table is a Markdown table whose header is `| setting | environment | default | meaning |`.
  Each row holds one setting: `` `[section] key` `` (`` `key` `` at the top level), its environment
  variable (`` `KGOV_SECTION__KEY` ``, derived from the model's env prefix and nested delimiter), its
  default as TOML writes it in backticks (`` `false` ``, `` `0.2` ``, `` `"kgov"` ``, `` `[]` ``; the
  word "unset" for None; a few defaults computed at start are described, `DESCRIBED_DEFAULTS`), and
  a meaning.
- Every setting has exactly one row, in a settings table of its home document; a row naming a setting
  that does not exist fails, as does any other table headed `setting` (it would escape these checks).
- Stale names in prose: in README.md, the package READMEs and docs/*.md, every `KGOV_...` variable, every
  `section.key` and every `[section] key` must name a real setting (a `section.name` that is a module
  of that package, such as `registry.serdes`, is code, not a setting; inside fenced code blocks, which
  hold client configurations such as librdkafka's `sasl.username`, only the variables are checked).
  `NON_SETTING_VARIABLES` lists the variables read outside the settings object; each must be read by
  the code.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from kgov.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
TOP = ""  # the section name of top-level keys
HOME = {
    TOP: "README.md",
    "authz": "README.md",
    "audit": "README.md",
    "admin": "README.md",
    "metrics": "README.md",
    "sasl": "sasl/README.md",
    "oauth": "sasl/README.md",
    "registry": "registry/README.md",
    "gateway": "gateway/README.md",
}
DESCRIBED_DEFAULTS = {"registry.max_concurrent_checks": "number of CPUs"}
# KGOV_ variables that are no setting: read by one command each (name -> a file that reads it).
NON_SETTING_VARIABLES = {
    "KGOV_PASSWORD": "authz/cli.py",
    "KGOV_AUDIT_DRIVER_MEMORY": "spark_compliance/session.py",
}
HEADER = ["setting", "environment", "default", "meaning"]


@dataclass(frozen=True)
class Setting:
    section: str
    key: str
    field: FieldInfo

    @property
    def dotted(self) -> str:
        return f"{self.section}.{self.key}" if self.section else self.key

    @property
    def toml_name(self) -> str:
        return f"[{self.section}] {self.key}" if self.section else self.key

    @property
    def env(self) -> str:
        prefix = str(Settings.model_config.get("env_prefix", ""))
        delimiter = str(Settings.model_config.get("env_nested_delimiter", ""))
        path = [self.section, self.key] if self.section else [self.key]
        return prefix + delimiter.join(part.upper() for part in path)


def all_settings() -> dict[str, Setting]:
    out: dict[str, Setting] = {}
    for name, field in Settings.model_fields.items():
        model = field.annotation
        if isinstance(model, type) and issubclass(model, BaseModel):
            for key, sub in model.model_fields.items():
                out[f"{name}.{key}"] = Setting(name, key, sub)
        else:
            out[name] = Setting(TOP, name, field)
    return out


def toml_forms(value: Any) -> list[str]:
    """The ways TOML writes `value` (a float that is whole may be written as an integer)."""
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, int):
        return [str(value)]
    if isinstance(value, float):
        return [repr(value), str(int(value))] if math.isfinite(value) and value == int(value) else [repr(value)]
    if isinstance(value, (str, Path)):
        return ['"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"']
    if isinstance(value, list):
        return ["[" + ", ".join(toml_forms(v)[0] for v in value) + "]"]
    if isinstance(value, dict):
        return ["{ " + ", ".join(f"{k} = {toml_forms(v)[0]}" for k, v in value.items()) + " }" if value else "{}"]
    raise TypeError(f"no TOML form for {value!r}")


def default_problem(setting: Setting, cell: str) -> str | None:
    described = DESCRIBED_DEFAULTS.get(setting.dotted)
    if described is not None:
        return None if described in cell else f"default of {setting.dotted} should say {described!r}"
    value = setting.field.get_default(call_default_factory=True)
    if isinstance(value, SecretStr):  # never a default: a secret has none
        return f"{setting.dotted} has a secret default; document it by hand"
    if value is None:
        return None if "unset" in cell else f"default of {setting.dotted} is None: its cell should say 'unset'"
    forms = toml_forms(value)
    if any(f"`{form}`" in cell for form in forms):
        return None
    return f"default of {setting.dotted} is {' or '.join(f'`{f}`' for f in forms)}, not found in {cell!r}"


@dataclass(frozen=True)
class Row:
    doc: str
    line: int
    cells: list[str]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def settings_rows(doc: str, text: str) -> Iterator[Row | str]:
    """Rows of the settings tables of one document; a string for a table headed `setting` whose
    header is not the agreed one."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("|") and i + 1 < len(lines) and re.fullmatch(r"\s*\|[\s|:-]+\|?\s*", lines[i + 1]):
            header = [c.lower() for c in _cells(line)]
            table = header == HEADER
            if not table and header[0] == "setting":
                yield f"{doc}:{i + 1}: a table headed 'setting' must have the columns {' | '.join(HEADER)}"
            i += 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                if table:
                    yield Row(doc, i + 1, _cells(lines[i]))
                i += 1
            continue
        i += 1


_ROW_NAME = re.compile(r"`(?:\[(?P<section>[a-z_]+)\] )?(?P<key>[a-z_][a-z0-9_]*)`")


def table_problems(docs: dict[str, str], settings: dict[str, Setting]) -> list[str]:
    problems: list[str] = []
    seen: dict[str, str] = {}
    by_toml = {s.toml_name: s for s in settings.values()}
    sections = {s.section for s in settings.values()}
    problems += [f"section [{s}] has no home document in HOME" for s in sorted(sections - set(HOME)) if s]
    for doc, text in docs.items():
        for row in settings_rows(doc, text):
            if isinstance(row, str):
                problems.append(row)
                continue
            where = f"{row.doc}:{row.line}"
            if len(row.cells) != len(HEADER):
                problems.append(f"{where}: {len(row.cells)} cells, expected {len(HEADER)}")
                continue
            name_cell, env_cell, default_cell, meaning = row.cells
            names = list(_ROW_NAME.finditer(name_cell))
            if len(names) != 1 or names[0].group(0) != name_cell:
                problems.append(f"{where}: the setting cell must be one `[section] key` or `key`, got {name_cell!r}")
                continue
            toml_name = names[0].group(0).strip("`")
            setting = by_toml.get(toml_name)
            if setting is None:
                problems.append(f"{where}: {toml_name} is documented but is no setting (stale)")
                continue
            if setting.dotted in seen:
                problems.append(f"{where}: {toml_name} is documented again (first at {seen[setting.dotted]})")
                continue
            seen[setting.dotted] = where
            if HOME.get(setting.section) != doc:
                problems.append(f"{where}: {toml_name} belongs in {HOME.get(setting.section)}'s settings table")
            if env_cell != f"`{setting.env}`":
                problems.append(f"{where}: environment of {toml_name} is `{setting.env}`, got {env_cell!r}")
            problem = default_problem(setting, default_cell)
            if problem:
                problems.append(f"{where}: {problem}")
            if not meaning:
                problems.append(f"{where}: {toml_name} has no meaning")
    for dotted in sorted(set(settings) - set(seen)):
        s = settings[dotted]
        problems.append(f"{s.toml_name} ({s.env}) is not documented: add a row to {HOME.get(s.section)}")
    return problems


_ENV = re.compile(r"KGOV_[A-Z0-9_]*")
_DOTTED = re.compile(r"(?<![\w./-])(?P<section>[a-z_]+)\.(?P<key>[a-z_][a-z0-9_]*)\b(?![.(/\w-])")
_BRACKETED = re.compile(r"\[(?P<section>[a-z_]+)\]\s+`?(?P<key>[a-z_][a-z0-9_]*)\b(?!\*)")


def _is_module(section: str, name: str) -> bool:
    package = ROOT / section
    return (package / f"{name}.py").exists() or (package / name).is_dir()


def prose_problems(docs: dict[str, str], settings: dict[str, Setting]) -> list[str]:
    problems: list[str] = []
    envs = {s.env for s in settings.values()}
    sections = {s.section for s in settings.values() if s.section}
    keys = {(s.section, s.key) for s in settings.values()}
    prefix = str(Settings.model_config.get("env_prefix", ""))
    delimiter = str(Settings.model_config.get("env_nested_delimiter", ""))
    for doc, text in docs.items():
        fenced = False
        for number, line in enumerate(text.splitlines(), 1):
            where = f"{doc}:{number}"
            if line.lstrip().startswith("```"):
                fenced = not fenced
            for match in _ENV.finditer(line):
                name = match.group(0)
                rest = line[match.end():match.end() + 1]
                if rest in ("<", "*"):  # a pattern: KGOV_<SECTION>__<KEY>, KGOV_REGISTRY__<NAME>, KGOV_AUTHZ__*
                    section = name[len(prefix):].removesuffix(delimiter).lower()
                    if section and section not in sections:
                        problems.append(f"{where}: {name}{rest}... names no section")
                elif name not in envs and name not in NON_SETTING_VARIABLES:
                    problems.append(f"{where}: {name} is no setting's variable (stale or misspelt)")
            if fenced:  # code and client configurations: `sasl.username` there is librdkafka's
                continue
            for match in _DOTTED.finditer(line):
                section, key = match.group("section"), match.group("key")
                if section in sections and (section, key) not in keys and not _is_module(section, key):
                    problems.append(f"{where}: {section}.{key} is no setting")
            for match in _BRACKETED.finditer(line):
                section, key = match.group("section"), match.group("key")
                if section in sections and (section, key) not in keys:
                    problems.append(f"{where}: [{section}] {key} is no setting")
    return problems


def documentation() -> dict[str, str]:
    paths = [ROOT / "README.md", *sorted(ROOT.glob("*/README.md")), *sorted((ROOT / "docs").glob("*.md"))]
    return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in paths}


def test_every_setting_has_one_row_in_its_home_document_with_its_default() -> None:
    assert table_problems(documentation(), all_settings()) == []


def test_documentation_names_no_setting_that_does_not_exist() -> None:
    assert prose_problems(documentation(), all_settings()) == []


def test_variables_read_outside_the_settings_are_read_by_the_code() -> None:
    for name, reader in NON_SETTING_VARIABLES.items():
        assert name in (ROOT / reader).read_text(encoding="utf-8"), f"{reader} no longer reads {name}"


def test_each_home_document_exists() -> None:
    for doc in set(HOME.values()):
        assert (ROOT / doc).is_file(), doc


# The checks themselves, on small documents: each problem is found.

_TABLE = "| setting | environment | default | meaning |\n|---|---|---|---|\n"


def _small_settings() -> dict[str, Setting]:
    every = all_settings()
    return {k: every[k] for k in ("cluster_id", "authz.refresh_interval_s", "gateway.upstream")}


def _readme(rows: str) -> dict[str, str]:
    return {"README.md": _TABLE + rows}


GOOD_ROWS = (
    "| `cluster_id` | `KGOV_CLUSTER_ID` | `\"kgov-cluster\"` | the cluster |\n"
    "| `[authz] refresh_interval_s` | `KGOV_AUTHZ__REFRESH_INTERVAL_S` | `0.2` | poll interval |\n"
)
GATEWAY_DOC = {"gateway/README.md": _TABLE + "| `[gateway] upstream` | `KGOV_GATEWAY__UPSTREAM` | unset | HOST:PORT |\n"}


def test_checks_pass_a_complete_small_documentation() -> None:
    assert table_problems({**_readme(GOOD_ROWS), **GATEWAY_DOC}, _small_settings()) == []


@pytest.mark.parametrize(
    ("rows", "gateway_doc", "expected"),
    [
        (GOOD_ROWS, {}, "[gateway] upstream (KGOV_GATEWAY__UPSTREAM) is not documented: add a row to gateway/README.md"),
        (GOOD_ROWS + "| `[authz] refresh_s` | `KGOV_AUTHZ__REFRESH_S` | `1` | x |\n", GATEWAY_DOC,
         "README.md:5: [authz] refresh_s is documented but is no setting (stale)"),
        (GOOD_ROWS.replace("`0.2`", "`0.5`"), GATEWAY_DOC,
         "README.md:4: default of authz.refresh_interval_s is `0.2`, not found in '`0.5`'"),
        (GOOD_ROWS.replace("KGOV_AUTHZ__REFRESH", "KGOV_AUTHZ_REFRESH"), GATEWAY_DOC,
         "README.md:4: environment of [authz] refresh_interval_s is `KGOV_AUTHZ__REFRESH_INTERVAL_S`, "
         "got '`KGOV_AUTHZ_REFRESH_INTERVAL_S`'"),
        (GOOD_ROWS + "| `[gateway] upstream` | `KGOV_GATEWAY__UPSTREAM` | unset | HOST:PORT |\n", {},
         "README.md:5: [gateway] upstream belongs in gateway/README.md's settings table"),
        (GOOD_ROWS, {**GATEWAY_DOC, "x.md": "| setting | default |\n|---|---|\n| `a` | 1 |\n"},
         "x.md:1: a table headed 'setting' must have the columns setting | environment | default | meaning"),
        (GOOD_ROWS.replace("`[authz] refresh_interval_s`", "`[authz] refresh_interval_s`, `x`"), GATEWAY_DOC,
         "README.md:4: the setting cell must be one `[section] key` or `key`, got '`[authz] refresh_interval_s`, `x`'"),
    ],
)
def test_table_checks_find_each_problem(rows: str, gateway_doc: dict[str, str], expected: str) -> None:
    assert expected in table_problems({**_readme(rows), **gateway_doc}, _small_settings())


def test_unset_and_secret_and_described_defaults() -> None:
    every = all_settings()
    assert default_problem(every["gateway.upstream"], "`null`") is not None
    assert default_problem(every["gateway.upstream_password"], "unset (secret)") is None
    assert default_problem(every["registry.max_concurrent_checks"], "`2`") is not None
    assert default_problem(every["registry.max_concurrent_checks"], "the number of CPUs") is None
    assert default_problem(every["authz.decision_api_networks"], '`["127.0.0.0/8", "::1/128"]`') is None
    assert default_problem(every["gateway.idle_timeout_s"], "`600`") is None
    assert default_problem(every["gateway.upstream_oauth_extensions"], "`{}`") is None


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("set `KGOV_AUTHZ__SUPER_USER`", "KGOV_AUTHZ__SUPER_USER is no setting's variable"),
        ("see `authz.max_snapshot_age`", "authz.max_snapshot_age is no setting"),
        ("`[sasl] connections_max_reauth`", "[sasl] connections_max_reauth is no setting"),
        ("`KGOV_AUTHS__<KEY>`", "KGOV_AUTHS__<... names no section"),
    ],
)
def test_prose_check_finds_stale_names(line: str, expected: str) -> None:
    problems = prose_problems({"doc.md": line}, all_settings())
    assert len(problems) == 1 and expected in problems[0], problems


def test_prose_check_reads_variables_but_not_client_properties_in_code_blocks() -> None:
    text = '```\n{"sasl.username": "a", "sasl.password": "b"}\nset KGOV_ADMIN__PASWORD\n```\nsee `sasl.username`'
    assert prose_problems({"doc.md": text}, all_settings()) == [
        "doc.md:3: KGOV_ADMIN__PASWORD is no setting's variable (stale or misspelt)",
        "doc.md:5: sasl.username is no setting",
    ]


def test_prose_check_passes_real_names_patterns_and_modules() -> None:
    text = (
        "`KGOV_AUTHZ__SUPER_USERS`, `KGOV_<SECTION>__<KEY>`, `KGOV_REGISTRY__<NAME>`, `KGOV_AUTHZ__*`, "
        "`KGOV_PASSWORD`, `authz.max_snapshot_age_s = 0`, `registry.serdes`, `registry.compat.work_budget`, "
        "`[gateway] upstream_*`, `[sasl] connections_max_reauth_ms`, www.example.com"
    )
    assert prose_problems({"doc.md": text}, all_settings()) == []
