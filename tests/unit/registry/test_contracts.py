"""registry.contracts: the shapes and merges of metadata and rule sets (Confluent's Metadata.mergeMetadata,
RuleSet.mergeRuleSets) and the confluent:version property."""

from __future__ import annotations

from typing import Any

import pytest

from registry.contracts import (
    check_metadata,
    check_rule_set,
    confluent_version,
    merge_metadata,
    merge_rule_sets,
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
