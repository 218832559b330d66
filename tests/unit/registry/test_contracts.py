"""registry.contracts: the shapes and merges of metadata and rule sets (Confluent's Metadata.mergeMetadata,
RuleSet.mergeRuleSets) and the confluent:version property."""

from __future__ import annotations

from typing import Any

import pytest

from registry.contracts import (
    check_metadata,
    check_rule_set,
    compatibility_group_value,
    confluent_version,
    merge_metadata,
    merge_rule_sets,
    merge_with_config,
    validate_rule_set,
    with_confluent_version,
    without_confluent_version,
)
from registry.model import RegistryError


def test_either_side_alone_is_kept_as_it_is() -> None:
    odd = {"properties": {"b": "1", "a": "2"}, "extra": True}
    assert merge_metadata(None, odd) is odd
    assert merge_metadata(odd, None) is odd
    assert merge_metadata(None, None) is None
    rules = {"domainRules": [{"name": "x"}]}
    assert merge_rule_sets(None, rules) is rules
    assert merge_rule_sets(rules, None) is rules


def test_metadata_merge_newer_wins_per_key_and_unions_sensitive() -> None:
    old = {"tags": {"f": ["PII", "A"], "g": ["X"]}, "properties": {"owner": "old", "keep": "1"}, "sensitive": ["s1"]}
    new = {"tags": {"f": ["B"]}, "properties": {"owner": "new"}, "sensitive": ["s0", "s1"]}
    assert merge_metadata(old, new) == {
        "tags": {"f": ["B"], "g": ["X"]},  # a path's tags are replaced, not unioned (map-level putAll)
        "properties": {"keep": "1", "owner": "new"},
        "sensitive": ["s0", "s1"],
    }
    assert merge_metadata({}, {}) == {}  # empty parts are left out, as Confluent serialises them
    assert list(merge_metadata({"properties": {"b": "1"}}, {"properties": {"a": "1"}})["properties"]) == ["a", "b"]


def test_rule_sets_merge_by_name_per_kind_newer_last() -> None:
    a, b, b2, c = {"name": "a"}, {"name": "b", "expr": "1"}, {"name": "b", "expr": "2"}, {"name": "c"}
    merged = merge_rule_sets({"domainRules": [a, b], "migrationRules": [c]}, {"domainRules": [b2], "encodingRules": [c]})
    assert merged == {"migrationRules": [c], "domainRules": [a, b2], "encodingRules": [c]}
    assert merge_rule_sets({"domainRules": []}, {"enableAt": "x"}) == {}


def test_confluent_version_is_set_read_and_set_aside() -> None:
    assert confluent_version(None) is None
    assert confluent_version({"properties": {"confluent:version": 3}}) is None  # not a string: not Confluent's
    tagged = with_confluent_version({"properties": {"owner": "a"}, "sensitive": ["x"]}, 4)
    assert tagged == {"properties": {"confluent:version": "4", "owner": "a"}, "sensitive": ["x"]}
    assert confluent_version(tagged) == "4"
    assert with_confluent_version(None, 1) == {"properties": {"confluent:version": "1"}}
    assert without_confluent_version(tagged) == {"properties": {"owner": "a"}, "sensitive": ["x"]}
    assert without_confluent_version({"properties": {"confluent:version": "1"}}) == {}
    plain = {"properties": {"owner": "a"}}
    assert without_confluent_version(plain) is plain


@pytest.mark.parametrize("value", [
    [], "x", {"tags": []}, {"tags": {"f": "PII"}}, {"tags": {"f": [1]}}, {"properties": []},
    {"properties": {"a": None}}, {"sensitive": "s"}, {"sensitive": [None]},
])
def test_malformed_metadata_is_422_naming_the_field(value: Any) -> None:
    with pytest.raises(RegistryError) as raised:
        check_metadata(value, "defaultMetadata")
    assert raised.value.code == 422 and "defaultMetadata" in raised.value.message


@pytest.mark.parametrize("value", [[], "x", {"domainRules": {}}, {"migrationRules": ["r"]}, {"encodingRules": [None]}])
def test_malformed_rule_sets_are_422_naming_the_field(value: Any) -> None:
    with pytest.raises(RegistryError) as raised:
        check_rule_set(value, "ruleSet")
    assert raised.value.code == 422 and "ruleSet" in raised.value.message


def test_well_formed_annotations_pass_unchanged() -> None:
    metadata = {"tags": {"f": ["PII"]}, "properties": {"a": "b"}, "sensitive": ["s"], "unknown": 1}
    assert check_metadata(metadata, "metadata") is metadata
    assert check_metadata(None, "metadata") is None
    rules = {"domainRules": [{"name": "r"}], "enableAt": "2026"}
    assert check_rule_set(rules, "ruleSet") is rules
    assert check_rule_set(None, "ruleSet") is None


@pytest.mark.parametrize("rule", [
    {"name": 1}, {"type": ["CEL"]}, {"kind": "condition"}, {"mode": "READWRITE"}, {"tags": "PII"},
    {"params": {"k": 1}}, {"disabled": "true"}, {"onFailure": 0},
])
def test_rule_fields_of_the_wrong_shape_are_422_naming_the_rule(rule: dict[str, Any]) -> None:
    with pytest.raises(RegistryError) as raised:
        check_rule_set({"domainRules": [{"name": "ok", "type": "CEL"}, rule]}, "ruleSet")
    assert raised.value.code == 422 and "ruleSet.domainRules[1]." in raised.value.message


def _refusal(rule_set: dict[str, Any]) -> str:
    with pytest.raises(RegistryError) as raised:
        validate_rule_set(rule_set)
    assert raised.value.code == 42210 and raised.value.status == 422
    return raised.value.message


@pytest.mark.parametrize(("name", "message"), [
    ("r" * 63 + "\N{GRINNING FACE}", "Rule name too long"),  # 65 UTF-16 units, as Java counts them
    ("a\N{GRINNING FACE}", "Illegal character in rule name: a\N{GRINNING FACE}"),  # a surrogate pair
    ("\N{MATHEMATICAL BOLD CAPITAL A}", "Illegal initial character in rule name: \N{MATHEMATICAL BOLD CAPITAL A}"),
    ("a\N{MATHEMATICAL BOLD DIGIT ZERO}", "Illegal character in rule name: a\N{MATHEMATICAL BOLD DIGIT ZERO}"),
    ("a\u00b2", "Illegal character in rule name: a\u00b2"),  # superscript two: No, not a Java digit
    ("a b", "Illegal character in rule name: a b"),
    ("\u0661x", "Illegal initial character in rule name: \u0661x"),  # a digit, though Arabic-Indic
])
def test_rule_names_are_read_as_java_reads_them(name: str, message: str) -> None:
    assert _refusal({"domainRules": [{"name": name, "type": "CEL"}]}) == message


@pytest.mark.parametrize("name", ["r" * 64, "_", "x\u0661", "\u00e9t\u00e9-2", "\u01c5a", "\u02b0"])
def test_java_letters_and_digits_make_valid_names(name: str) -> None:
    validate_rule_set({"domainRules": [{"name": name, "type": "CEL"}]})


def test_the_first_failure_in_confluents_order_is_reported() -> None:
    # The duplicate is found before the second rule is validated; lists are walked migration first.
    duplicate = {"domainRules": [{"name": "x", "type": "T"}], "migrationRules": [{"name": "x", "mode": "UPGRADE"}]}
    assert _refusal(duplicate) == "Missing rule type"
    duplicate["migrationRules"][0]["type"] = "T"
    assert _refusal(duplicate) == "Found rule with duplicate name 'x'"
    # Rule.validate (name, type, actions) before the list's modes.
    assert _refusal({"domainRules": [{"name": "x", "mode": "UPGRADE"}]}) == "Missing rule type"
    assert _refusal({"domainRules": [{"name": "x", "type": "T", "mode": "READ", "onSuccess": "a,b"}]}) == (
        "Multiple actions only valid with WRITEREAD and UPDOWN")
    validate_rule_set({"migrationRules": [{"name": "m", "type": "T", "mode": "UPDOWN", "onSuccess": "a,b"}],
                       "domainRules": [{"name": "d", "type": "T", "onFailure": "ERROR,NONE"}]})
    validate_rule_set(None)
    validate_rule_set({})


def test_merge_with_config_is_default_then_given_or_previous_then_override() -> None:
    config = {"defaultMetadata": {"properties": {"a": "default", "b": "default"}},
              "overrideMetadata": {"properties": {"b": "override"}},
              "overrideRuleSet": {"domainRules": [{"name": "o"}]}}
    previous = ({"properties": {"a": "previous"}}, {"domainRules": [{"name": "p"}]})
    assert merge_with_config(config, None, None, previous) == (
        {"properties": {"a": "previous", "b": "override"}}, {"domainRules": [{"name": "p"}, {"name": "o"}]})
    assert merge_with_config(config, {"properties": {"c": "mine"}}, {"domainRules": []}, previous) == (
        {"properties": {"a": "default", "b": "override", "c": "mine"}}, {"domainRules": [{"name": "o"}]})
    assert merge_with_config({}, None, None, None) == (None, None)


def test_the_compatibility_group_value_is_a_string_property_or_none() -> None:
    assert compatibility_group_value({"properties": {"major": "2"}}, "major") == "2"
    assert compatibility_group_value({"properties": {"minor": "2"}}, "major") is None
    assert compatibility_group_value({"tags": {}}, "major") is None
    assert compatibility_group_value(None, "major") is None
