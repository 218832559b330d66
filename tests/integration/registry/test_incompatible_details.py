"""The 409 of an incompatible registration quotes the subject's schemas only to callers who may READ it.

Confluent's message (SchemaValidatorBuilder.formatErrorMessages, IncompatibleSchemaException) lists
the incompatibilities, `{oldSchemaVersion: N}`, `{oldSchema: '...'}` and the level; registering needs
only WRITE, so kgov leaves all of that out for a writer without READ (registry/README.md, Access
control). Over HTTP, through the real authorizer, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from fastapi import FastAPI
from fastapi.testclient import TestClient

from authz.model import Acl, Operation, PatternType, Permission, Principal, ResourceType
from registry.model import DETAILS_NEED_READ
from tests.integration.registry.conftest import basic

SUBJECT = "payroll-value"
# The stored version holds a field a writer without READ must not learn: FORWARD names it in the details.
STORED = json.dumps({"type": "record", "name": "Pay", "fields": [
    {"name": "id", "type": "string"}, {"name": "salary_band_secret", "type": "int"}]})
CANONICAL = STORED.replace(" ", "")
INCOMPATIBLE = json.dumps({"type": "record", "name": "Pay", "fields": [{"name": "id", "type": "string"}]})
PREFIX = f'Schema being registered is incompatible with an earlier schema for subject "{SUBJECT}", details: ['
CONFLUENT_DETAILS = (
    "{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'salary_band_secret' at path "
    "'/fields/1' in the old schema has no default value and is missing in the new schema', "
    "additionalInfo:'salary_band_secret'}, {oldSchemaVersion: 1}, "
    f"{{oldSchema: '{CANONICAL}'}}, {{validateFields: 'false', compatibility: 'FORWARD'}}]"
)


def grant(app: FastAPI, user: str, *operations: Operation) -> None:
    acls = [Acl(ResourceType.SUBJECT, SUBJECT, PatternType.LITERAL, f"User:{user}", "*", op, Permission.ALLOW)
            for op in operations]
    assert app.state.authorizer.create_acls(acls, actor=Principal("User", "admin")) == [None] * len(acls)


def test_only_readers_see_the_stored_schema_in_the_409(registry_app_factory: Callable[..., FastAPI],
                                                       db_url: str) -> None:
    app = registry_app_factory(db=db_url)
    grant(app, "alice", Operation.WRITE)  # a producer that registers, and may not read the subject
    grant(app, "bob", Operation.WRITE, Operation.READ)
    with (TestClient(app, headers=basic("admin")) as admin, TestClient(app, headers=basic("alice")) as alice,
          TestClient(app, headers=basic("bob")) as bob):
        assert admin.post(f"/subjects/{SUBJECT}/versions", json={"schema": STORED}).status_code == 200
        assert admin.put(f"/config/{SUBJECT}", json={"compatibility": "FORWARD"}).status_code == 200

        for reader in (bob, admin):  # READ through an ACL, and as a super user: Confluent's message exactly
            r = reader.post(f"/subjects/{SUBJECT}/versions", json={"schema": INCOMPATIBLE})
            assert (r.status_code, r.json()) == (409, {"error_code": 409, "message": PREFIX + CONFLUENT_DETAILS})

        r = alice.post(f"/subjects/{SUBJECT}/versions", json={"schema": INCOMPATIBLE})
        assert (r.status_code, r.json()) == (409, {"error_code": 409, "message": PREFIX + DETAILS_NEED_READ + "]"})
        for secret in ("salary_band_secret", "oldSchema", "READER_FIELD", "FORWARD", "Version"):
            assert secret not in r.text
        # the other ways to the same details need READ too
        assert alice.post(f"/compatibility/subjects/{SUBJECT}/versions/latest?verbose=true",
                          json={"schema": INCOMPATIBLE}).status_code == 403
        assert alice.get(f"/subjects/{SUBJECT}/versions/1").status_code == 403

        # nothing was stored by the refusals, and a compatible registration still works for the writer
        assert admin.get(f"/subjects/{SUBJECT}/versions").json() == [1]
        compatible = json.dumps({"type": "record", "name": "Pay", "fields": [
            {"name": "id", "type": "string"}, {"name": "salary_band_secret", "type": "int"},
            {"name": "note", "type": "string", "default": ""}]})
        assert alice.post(f"/subjects/{SUBJECT}/versions", json={"schema": compatible}).json()["version"] == 2


def test_a_reader_through_a_prefixed_grant_sees_the_details(registry_app_factory: Callable[..., FastAPI]) -> None:
    app = registry_app_factory()
    acls = [Acl(ResourceType.SUBJECT, "payroll-", PatternType.PREFIXED, "User:alice", "*", op, Permission.ALLOW)
            for op in (Operation.READ, Operation.WRITE)]
    assert app.state.authorizer.create_acls(acls, actor=Principal("User", "admin")) == [None, None]
    with TestClient(app, headers=basic("alice")) as alice:
        assert alice.post(f"/subjects/{SUBJECT}/versions", json={"schema": STORED}).status_code == 200
        r = alice.post(f"/subjects/{SUBJECT}/versions", json={"schema": INCOMPATIBLE.replace('"Pay"', '"Pay2"')})
        assert r.status_code == 409
        assert f"{{oldSchemaVersion: 1}}, {{oldSchema: '{CANONICAL}'}}" in r.json()["message"]
