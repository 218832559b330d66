"""A single-process, pure-Python parser of the same formats: the benchmark's baseline and a cross-check.

It applies the very patterns of `kafka_lines` with Python's `re` and `json`, line by line, and returns
the fields the reports group by. `spark_compliance.ingest` is the implementation the job uses; the two
must agree on every line (tests compare them on generated logs).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark_compliance import kafka_lines as K

_AUTHZ = re.compile(K.AUTHZ)
_AUTHZ_OLD = re.compile(K.AUTHZ_OLD)
_AUTHZ_LAST_DENIED = re.compile(K.AUTHZ_LAST_DENIED)
_AUTHZ_OLD_LAST_DENIED = re.compile(K.AUTHZ_OLD_LAST_DENIED)
_AUTHZ_HEAD = re.compile(K.AUTHZ_HEAD)
_SUPER = re.compile(K.AUTHZ_SUPER_USER)
_NO_ACL = re.compile(K.AUTHZ_NO_ACL)
_REQ_TEXT = re.compile(K.REQUEST_TEXT)
_REQ_JSON = re.compile(K.REQUEST_JSON)
_FAIL = re.compile(K.AUTH_FAILURE)
_OK = re.compile(K.AUTH_SUCCESS)
_OTHER = re.compile(K.OTHER_LOGGER)
_REMOTE = re.compile(K.CONNECTION_REMOTE_HOST)
_PASCAL = re.compile(K.PASCAL_BOUNDARY)


def enum_spelling(name: str) -> str:
    return _PASCAL.sub(r"\1_\2", re.sub(r"^[a-z]+\.", "", name)).upper()


@dataclass(frozen=True, slots=True)
class Parsed:
    kind: str  # event / ignored / bad
    event_type: str | None = None
    principal: str | None = None
    host: str | None = None
    decision: str | None = None
    operation: str | None = None
    resource_name: str | None = None
    api: str | None = None
    ts: str | None = None


def _remote(connection: str | None) -> str | None:
    m = _REMOTE.match(connection or "")
    return m.group(1) if m else None


def _authz_match(line: str) -> re.Match[str] | None:
    m = _AUTHZ.match(line) or _AUTHZ_OLD.match(line)
    if m and m.group(4) == "Allowed" and " is Denied " in line:  # the reading that cannot hide a denial
        return _AUTHZ_LAST_DENIED.match(line) or _AUTHZ_OLD_LAST_DENIED.match(line)
    return m


def parse_line(line: str) -> Parsed:
    line = line.replace(K.FIELD_SEP, "\ufffd")
    if line.startswith("{"):
        try:
            ev: Any = json.loads(line)
            data = ev.get("data") or {}
            typ = ev["type"]
        except (ValueError, KeyError, AttributeError, TypeError):
            return Parsed("bad")
        auth = (data.get("authenticationInfo") or {}).get("principal") or data.get("principal")
        if typ in ("io.kgov.authorization", "io.confluent.kafka.server/authorization"):
            az = data.get("authorizationInfo") or {}
            return Parsed("event", "AUTHORIZATION", auth, None, "ALLOWED" if az.get("granted") else "DENIED",
                          enum_spelling(str(az.get("operation"))), az.get("resourceName"),
                          enum_spelling(str(data.get("methodName"))), ev.get("time"))
        if typ == "io.kgov.request":
            return Parsed("event", "REQUEST", auth, None, api=str((data.get("requestHeader") or {}).get(
                "requestApiKeyName")), ts=ev.get("time"))
        if typ == "io.kgov.authentication":
            return Parsed("event", "AUTHENTICATION", auth, ts=ev.get("time"))
        if typ.startswith("io.kgov.") and typ.endswith("_change"):
            return Parsed("event", "CHANGE", auth, ts=ev.get("time"))
        return Parsed("ignored")
    if _AUTHZ_HEAD.match(line[:60]) or line.endswith(K.AUTHORIZER_SUFFIX):
        m = _authz_match(line)
        if m and "Principal = " in line:
            g = m.groups()
            api = g[9] if len(g) > 9 else None
            return Parsed("event", "AUTHORIZATION", g[2], g[5], g[3].upper(), enum_spelling(g[4]), g[8],
                          enum_spelling(api) if api else None, g[0])
        if m2 := _SUPER.match(line):
            return Parsed("event", "SUPER_USER_NOTICE", m2.group(3), ts=m2.group(1))
        if m3 := _NO_ACL.match(line):
            return Parsed("event", "NO_ACL_NOTICE", ts=m3.group(1))
        if " based on acl = " in line:
            return Parsed("ignored")
        return Parsed("bad")
    if line.endswith(K.REQUEST_SUFFIX):
        if mj := _REQ_JSON.match(line):
            try:
                obj = json.loads(mj.group(3))
            except ValueError:
                return Parsed("bad")
            return Parsed("event", "REQUEST", obj.get("principal"), _remote(obj.get("connection")),
                          api=(obj.get("requestHeader") or {}).get("requestApiKeyName"), ts=mj.group(1))
        if mt := _REQ_TEXT.match(line):
            return Parsed("event", "REQUEST", mt.group(9), _remote(mt.group(7)), api=mt.group(3), ts=mt.group(1))
        return Parsed("bad")
    if line.endswith(K.SELECTOR_SUFFIX) and (mf := (_FAIL.match(line) or _OK.match(line))):
        return Parsed("event", "AUTHENTICATION", host=mf.group(4), ts=mf.group(1))
    if _OTHER.match(line) or re.match(r"^(\s|Caused by: |$)", line) or re.match(
            r"^[\w.$]+(Exception|Error)(: |$)", line):
        return Parsed("ignored")
    return Parsed("bad")


def parse_lines(lines: Iterable[str]) -> Counter[tuple[str, str | None, str | None]]:
    """(kind, event type, principal) counts over `lines`."""
    counts: Counter[tuple[str, str | None, str | None]] = Counter()
    for line in lines:
        p = parse_line(line.rstrip("\n"))
        counts[(p.kind, p.event_type, p.principal)] += 1
    return counts


def parse_tree(root: Path) -> Counter[tuple[str, str | None, str | None]]:
    """Every log file under `root` (the generator's layout), skipping its JSON side files."""
    counts: Counter[tuple[str, str | None, str | None]] = Counter()
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name not in ("inventory.json", "classification.json", "planted.json"):
            with open(path, encoding="utf-8", errors="replace") as fh:
                counts.update(parse_lines(fh))
    return counts
