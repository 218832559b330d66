"""Confluent conformance of data contracts over HTTP on SQLite and PostgreSQL: rule sets validated as
`RuleSet.validate` does (42210), the config's `compatibilityGroup` (`isCompatibleWithPrevious`), and the
lookup that retries with the config's defaults and overrides merged in (`lookUpSchemaUnderSubject`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.integration.registry.conftest import basic
from tests.integration.registry.test_api import USER_V1, USER_V2, error, record
from tests.integration.registry.test_data_contracts import RULE_A, RULE_B, ok, post

pytestmark = pytest.mark.postgres

USER_INT = record("User", ("name", "int"))  # incompatible with USER_V1 both ways


@pytest.fixture
def client(registry_app_factory: Callable[..., FastAPI], db_url: str) -> Iterator[TestClient]:
    with TestClient(registry_app_factory(db=db_url), headers=basic("admin")) as c:
        yield c


def cel(name: object, **fields: Any) -> dict[str, Any]:
    rule: dict[str, Any] = {"kind": "CONDITION", "type": "CEL", "expr": "true", **fields}
    if name is not None:
        rule["name"] = name
    return rule


# ------------------------------------------------------------------ rule validation (42210)

INVALID_RULE_SETS = [
    ({"domainRules": [cel(None)]}, "Missing rule name"),
    ({"domainRules": [cel("")]}, "Empty rule name"),
    ({"domainRules": [cel("r" * 65)]}, "Rule name too long"),
    ({"domainRules": [cel("1st")]}, "Illegal initial character in rule name: 1st"),
    ({"domainRules": [cel("-x")]}, "Illegal initial character in rule name: -x"),
    ({"domainRules": [cel("a.b")]}, "Illegal character in rule name: a.b"),
    ({"domainRules": [{"name": "untyped", "expr": "true"}]}, "Missing rule type"),
    ({"domainRules": [cel("x"), cel("x", mode="READ")]}, "Found rule with duplicate name 'x'"),
    # Names are unique across the three lists, not per list.
    ({"migrationRules": [cel("x", mode="UPGRADE")], "encodingRules": [cel("x")]}, "Found rule with duplicate name 'x'"),
    # A rule without a mode is WRITEREAD (Rule's default): not a migration mode.
    ({"migrationRules": [cel("m")]}, "Migration rules can only be UPGRADE, DOWNGRADE, UPDOWN"),
    ({"domainRules": [cel("d", mode="UPDOWN")]}, "Domain rules can only be WRITE, READ, WRITEREAD"),
    ({"encodingRules": [cel("e", mode="DOWNGRADE")]}, "Encoding rules can only be WRITE, READ, WRITEREAD"),
    ({"domainRules": [cel("w", mode="WRITE", onFailure="ERROR,NONE")]},
     "Multiple actions only valid with WRITEREAD and UPDOWN"),
    ({"migrationRules": [cel("u", mode="UPGRADE", onSuccess="NONE,ERROR")]},
     "Multiple actions only valid with WRITEREAD and UPDOWN"),
    # The first failure in Confluent's order: the name is checked before the type and the mode.
    ({"migrationRules": [{"name": "9", "mode": "WRITE"}]}, "Illegal initial character in rule name: 9"),
]


@pytest.mark.parametrize(("rule_set", "message"), INVALID_RULE_SETS)
def test_an_invalid_rule_set_is_refused_with_42210_and_nothing_is_stored(
        client: TestClient, rule_set: dict[str, Any], message: str) -> None:
    r = post(client, "ruled", schema=USER_V1, ruleSet=rule_set)
    assert error(r) == (422, 42210)
    assert r.json()["message"] == message
    assert error(client.get("/subjects/ruled/versions")) == (404, 40401)
    for key in ("defaultRuleSet", "overrideRuleSet"):
        for path in ("/config", "/config/ruled"):
            before = client.get(path, params={"defaultToGlobal": "true"}).json()
            r = client.put(path, json={"compatibility": "NONE", key: rule_set})
            assert error(r) == (422, 42210) and r.json()["message"] == message
            assert client.get(path, params={"defaultToGlobal": "true"}).json() == before


def test_valid_rule_sets_are_stored_as_sent(client: TestClient) -> None:
    rule_set = {
        "migrationRules": [cel("up-grade", mode="UPDOWN", onFailure="ERROR,NONE")],
        "domainRules": [cel("_é2", onSuccess="NONE,ERROR"), cel("r" * 64, mode="READ")],
        "encodingRules": [{"name": "enc", "kind": "TRANSFORM", "type": "ENCRYPT", "mode": "WRITEREAD",
                           "tags": ["PII"], "params": {"encrypt.kek.name": "k"}, "disabled": True}],
    }
    created = ok(client, "fine", schema=USER_V1, ruleSet=rule_set)
    assert created["ruleSet"] == rule_set
    assert client.put("/config/fine", json={"defaultRuleSet": rule_set}).status_code == 200


def test_only_the_request_rule_set_is_validated_before_the_subject(client: TestClient) -> None:
    bad = {"domainRules": [cel("")]}
    # SubjectVersionsResource.register validates the rule set before the subject name (42208).
    assert error(post(client, "__GLOBAL", schema=USER_V1, ruleSet=bad)) == (422, 42210)
    assert error(post(client, "__GLOBAL", schema=USER_V1)) == (422, 42208)
    # ConfigResource: the level (42203) first, then the rule sets, then the subject.
    assert error(client.put("/config/__GLOBAL", json={"compatibility": "SOME", "defaultRuleSet": bad})) == (422, 42203)
    assert error(client.put("/config/__GLOBAL", json={"defaultRuleSet": bad})) == (422, 42210)
    # A rule of a wrong shape is Jackson's 422 (RuleMode has no value "write"), before any validation.
    assert error(post(client, "s", schema=USER_V1, ruleSet={"domainRules": [cel("x", mode="write")]})) == (422, 422)
    assert error(post(client, "s", schema=USER_V1, ruleSet={"domainRules": [cel("x", kind="CHECK")]})) == (422, 422)


# ------------------------------------------------------------------ compatibilityGroup


def test_compatibility_is_checked_within_the_group_of_the_new_schema(client: TestClient) -> None:
    assert client.put("/config/g", json={"compatibility": "BACKWARD", "compatibilityGroup": "major"}).status_code == 200
    assert client.get("/config/g").json()["compatibilityGroup"] == "major"
    ok(client, "g", schema=USER_V1, metadata={"properties": {"major": "1"}})
    # Another value: a new group, compared with nothing.
    ok(client, "g", schema=USER_INT, metadata={"properties": {"major": "2"}})
    # Back in group 1: compared with version 1 (the latest of its group), not with version 2.
    v3 = ok(client, "g", schema=USER_V2, metadata={"properties": {"major": "1"}})
    assert v3["version"] == 3
    # Within a group the level holds, against the latest of the group.
    r = post(client, "g", schema=USER_INT, metadata={"properties": {"major": "1"}})
    assert error(r) == (409, 409) and "{oldSchemaVersion: 3}" in r.json()["message"]
    assert error(post(client, "g", schema=USER_V1, metadata={"properties": {"major": "2"}})) == (409, 409)
    # A registration without metadata inherits the latest version's (group 1 now), as Confluent merges it.
    assert error(post(client, "g", schema=USER_INT)) == (409, 409)
    # Metadata without the property: compared only with versions without it (none: compatible).
    absent = ok(client, "g", schema=USER_INT, metadata={"properties": {"owner": "x"}})
    assert absent["version"] == 4
    assert error(post(client, "g", schema=USER_V1, metadata={"properties": {"owner": "y"}})) == (409, 409)
    assert client.get("/subjects/g/versions").json() == [1, 2, 3, 4]


def test_the_group_value_is_the_merged_one_and_transitive_levels_span_the_group(client: TestClient) -> None:
    client.put("/config/t", json={"compatibility": "BACKWARD_TRANSITIVE", "compatibilityGroup": "major",
                                  "overrideMetadata": {"properties": {"major": "1"}}})
    ok(client, "t", schema=USER_V1, metadata={"properties": {"major": "9"}})
    # The override puts every registration in group 1, whatever the request says.
    r = post(client, "t", schema=USER_INT, metadata={"properties": {"major": "2"}})
    assert error(r) == (409, 409)
    client.put("/config/t", json={"overrideMetadata": {"properties": {"other": "x"}},
                                  "defaultMetadata": {"properties": {"major": "1"}}})
    # The default gives the group where the request does not: group 1 again.
    assert error(post(client, "t", schema=USER_INT, metadata={"properties": {"owner": "o"}})) == (409, 409)
    ok(client, "t", schema=USER_INT, metadata={"properties": {"major": "2"}})
    ok(client, "t", schema=USER_V2, metadata={"properties": {"major": "1"}})
    # Transitive: all of group 1 (versions 1 and 3), none of group 2.
    bad_for_v1 = record("User", ("name", "string"), ("age", "int"))
    r = post(client, "t", schema=bad_for_v1, metadata={"properties": {"major": "1"}})
    assert error(r) == (409, 409)


def test_compatibility_tests_use_the_group_of_the_request_metadata(client: TestClient) -> None:
    client.put("/config/c", json={"compatibility": "BACKWARD", "compatibilityGroup": "major"})
    ok(client, "c", schema=USER_V1, metadata={"properties": {"major": "1"}})
    ok(client, "c", schema=USER_INT, metadata={"properties": {"major": "2"}})

    def compatible(path: str, **body: Any) -> bool:
        r = client.post(path, json={"schema": USER_V2, **body})
        assert r.status_code == 200, r.text
        return bool(r.json()["is_compatible"])

    assert compatible("/compatibility/subjects/c/versions", metadata={"properties": {"major": "1"}})
    assert not compatible("/compatibility/subjects/c/versions", metadata={"properties": {"major": "2"}})
    # The version named is filtered too: outside the request's group there is nothing to compare.
    assert compatible("/compatibility/subjects/c/versions/latest", metadata={"properties": {"major": "1"}})
    assert not compatible("/compatibility/subjects/c/versions/2", metadata={"properties": {"major": "2"}})
    # Without metadata: the versions without the property (none here).
    assert compatible("/compatibility/subjects/c/versions")


def test_a_malformed_compatibility_group_is_422(client: TestClient) -> None:
    assert error(client.put("/config/bad", json={"compatibilityGroup": 5})) == (422, 422)
    assert error(client.get("/config/bad")) == (404, 40408)


# ------------------------------------------------------------------ lookup with the config's defaults


def test_a_lookup_retries_with_the_config_defaults_and_overrides_merged_in(client: TestClient) -> None:
    client.put("/config/l", json={"defaultMetadata": {"properties": {"owner": "team"}},
                                  "overrideMetadata": {"properties": {"env": "prod"}},
                                  "defaultRuleSet": {"domainRules": [RULE_A]}})
    created = ok(client, "l", schema=USER_V1, metadata={"properties": {"app": "x"}},
                 ruleSet={"domainRules": [RULE_B]})
    assert created["metadata"] == {"properties": {"app": "x", "env": "prod", "owner": "team"}}
    assert created["ruleSet"] == {"domainRules": [RULE_A, RULE_B]}
    # The client sends only its own annotations, as it registered them.
    r = client.post("/subjects/l", json={"schema": USER_V1, "metadata": {"properties": {"app": "x"}},
                                         "ruleSet": {"domainRules": [RULE_B]}})
    assert r.status_code == 200, r.text
    assert (r.json()["id"], r.json()["version"]) == (created["id"], 1)
    # Merged in, different annotations are still different.
    r = client.post("/subjects/l", json={"schema": USER_V1, "metadata": {"properties": {"app": "y"}}})
    assert error(r) == (404, 40403)
    # The stored annotations themselves are found at the first try.
    r = client.post("/subjects/l", json={"schema": USER_V1, "metadata": created["metadata"]})
    assert r.json()["version"] == 1


def test_the_retry_takes_the_latest_live_version_where_the_request_gives_nothing(client: TestClient) -> None:
    client.put("/config/p", json={"compatibility": "NONE", "overrideRuleSet": {"domainRules": [RULE_B]}})
    v1 = ok(client, "p", schema=USER_V1, metadata={"properties": {"app": "x"}}, ruleSet={"domainRules": [RULE_A]})
    assert v1["ruleSet"] == {"domainRules": [RULE_A, RULE_B]}
    only_rules = {"ruleSet": {"domainRules": [RULE_A]}}
    # The request's rule set with the override is version 1's; its metadata, not sent, is the latest's.
    r = client.post("/subjects/p", json={"schema": USER_V1, **only_rules})
    assert r.status_code == 200 and r.json()["version"] == 1
    ok(client, "p", schema=USER_V2, metadata={"properties": {"app": "y"}}, **only_rules)
    # Now the latest version's metadata ({app: y}) is merged in, which version 1 does not have.
    assert error(client.post("/subjects/p", json={"schema": USER_V1, **only_rules})) == (404, 40403)
    assert client.post("/subjects/p", json={"schema": USER_V2, **only_rules}).json()["version"] == 2


def test_no_retry_without_a_live_version(client: TestClient) -> None:
    client.put("/config/d", json={"defaultMetadata": {"properties": {"owner": "team"}}})
    ok(client, "d", schema=USER_V1, metadata={"properties": {"app": "x"}})
    assert client.delete("/subjects/d").status_code == 200
    mine = {"schema": USER_V1, "metadata": {"properties": {"app": "x"}}}
    # Confluent retries only when getLatestVersion finds a live version.
    assert error(client.post("/subjects/d?deleted=true", json=mine)) == (404, 40403)
    merged = {"schema": USER_V1, "metadata": {"properties": {"app": "x", "owner": "team"}}}
    assert client.post("/subjects/d?deleted=true", json=merged).json()["version"] == 1
