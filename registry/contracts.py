"""Data contracts: the `metadata` and `ruleSet` of a version, their shape, and how they are merged.

Pure functions over the JSON objects the REST API carries. A registration's annotations are merged as
Confluent's `KafkaSchemaRegistry.maybeSetMetadataRuleSet` merges them: the config's default, then the
request's (or, when the request gives none, the latest live version's), then the config's override,
each later one winning (`Metadata.mergeMetadata`, `RuleSet.mergeRuleSets`). A request's rule set is
validated as Confluent's `RuleSet.validate` validates it (`validate_rule_set`, 42210), and a config's
`compatibilityGroup` names the metadata property whose value groups versions for compatibility.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any, Final

from registry.model import RegistryError

# The property Confluent keeps equal to the version a registration created, once a caller asked for
# it by giving a `version` (KafkaSchemaRegistry.CONFLUENT_VERSION).
CONFLUENT_VERSION: Final = "confluent:version"
RULE_KINDS: Final = ("migrationRules", "domainRules", "encodingRules")
# The values of a rule's `kind` and `mode` (Confluent's RuleKind and RuleMode enums; Jackson refuses
# others), and the modes each list of a rule set allows (RuleMode.isMigrationRule, isDomainRule).
RULE_KIND_VALUES: Final = ("TRANSFORM", "CONDITION")
MIGRATION_MODES: Final = ("UPGRADE", "DOWNGRADE", "UPDOWN")
DOMAIN_MODES: Final = ("WRITE", "READ", "WRITEREAD")
# Rule.NAME_MAX_LENGTH, in UTF-16 code units (Java's String.length).
RULE_NAME_MAX_LENGTH: Final = 64
_RULE_STRINGS: Final = ("name", "doc", "type", "expr", "onSuccess", "onFailure")
_MODES_OF: Final = {"migrationRules": MIGRATION_MODES, "domainRules": DOMAIN_MODES, "encodingRules": DOMAIN_MODES}
_ONLY_MODES: Final = {
    "migrationRules": "Migration rules can only be UPGRADE, DOWNGRADE, UPDOWN",
    "domainRules": "Domain rules can only be WRITE, READ, WRITEREAD",
    "encodingRules": "Encoding rules can only be WRITE, READ, WRITEREAD",
}

Annotation = Mapping[str, Any]


def check_metadata(value: object, field: str) -> Annotation | None:
    """`Metadata`'s shape (Jackson refuses others with 422): `tags` an object of string arrays,
    `properties` an object of strings, `sensitive` an array of strings; other keys are kept as sent."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise RegistryError(422, f"Field '{field}' must be an object")
    tags, properties, sensitive = value.get("tags"), value.get("properties"), value.get("sensitive")
    if tags is not None and not (isinstance(tags, dict) and all(_strings(v) for v in tags.values())):
        raise RegistryError(422, f"Field '{field}.tags' must be an object of string arrays")
    if properties is not None and not (isinstance(properties, dict)
                                       and all(isinstance(v, str) for v in properties.values())):
        raise RegistryError(422, f"Field '{field}.properties' must be an object of strings")
    if sensitive is not None and not _strings(sensitive):
        raise RegistryError(422, f"Field '{field}.sensitive' must be an array of strings")
    return value


def check_rule_set(value: object, field: str) -> Annotation | None:
    """`RuleSet`'s shape: each of `migrationRules`, `domainRules`, `encodingRules` an array of objects
    (the rules, merged by their `name`), each rule `Rule`'s shape: `kind` and `mode` one of their
    enum's values (case as written, as Jackson reads enums), the texts strings, `tags` an array of
    strings, `params` an object of strings, `disabled` a boolean; other keys are kept as sent. What
    Confluent's `RuleSet.validate` checks beyond the shape is `validate_rule_set` (42210)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise RegistryError(422, f"Field '{field}' must be an object")
    for kind in RULE_KINDS:
        rules = value.get(kind)
        if rules is not None and not (isinstance(rules, list) and all(isinstance(r, dict) for r in rules)):
            raise RegistryError(422, f"Field '{field}.{kind}' must be an array of rule objects")
        for index, rule in enumerate(rules or ()):
            _check_rule(rule, f"{field}.{kind}[{index}]")
    return value


def _check_rule(rule: Mapping[str, Any], field: str) -> None:
    for key in _RULE_STRINGS:
        if rule.get(key) is not None and not isinstance(rule[key], str):
            raise RegistryError(422, f"Field '{field}.{key}' must be a string")
    for key, allowed in (("kind", RULE_KIND_VALUES), ("mode", (*MIGRATION_MODES, *DOMAIN_MODES))):
        if rule.get(key) is not None and rule[key] not in allowed:
            raise RegistryError(422, f"Field '{field}.{key}' must be one of {', '.join(allowed)}")
    if rule.get("tags") is not None and not _strings(rule["tags"]):
        raise RegistryError(422, f"Field '{field}.tags' must be an array of strings")
    params = rule.get("params")
    if params is not None and not (isinstance(params, dict) and all(isinstance(v, str) for v in params.values())):
        raise RegistryError(422, f"Field '{field}.params' must be an object of strings")
    if rule.get("disabled") is not None and not isinstance(rule["disabled"], bool):
        raise RegistryError(422, f"Field '{field}.disabled' must be a boolean")


def invalid_rule_set(message: str) -> RegistryError:
    """Confluent's RestInvalidRuleSetException: 422, error code 42210, the RuleException's message."""
    return RegistryError(42210, message)


def validate_rule_set(rule_set: Annotation | None) -> None:
    """Confluent's `RuleSet.validate` (then `Rule.validate`) on a rule set whose shape
    `check_rule_set` accepted: names unique across the three lists, each rule named (a letter or `_`,
    then letters, digits, `_` or `-`, at most 64), typed, with several comma-separated actions only in
    the WRITEREAD and UPDOWN modes, and a mode its list allows (absent is WRITEREAD, Rule's default).
    The first failure, in Confluent's order, raises 42210 with Confluent's message."""
    if rule_set is None:
        return
    names: set[str | None] = set()
    for kind in RULE_KINDS:
        for rule in rule_set.get(kind) or ():
            name = rule.get("name")
            if name in names:
                raise invalid_rule_set(f"Found rule with duplicate name '{name}'")
            names.add(name)
            mode = rule.get("mode") or "WRITEREAD"
            _validate_rule(rule, mode)
            if mode not in _MODES_OF[kind]:
                raise invalid_rule_set(_ONLY_MODES[kind])


def _validate_rule(rule: Mapping[str, Any], mode: str) -> None:
    _validate_rule_name(rule.get("name"))
    if rule.get("type") is None:
        raise invalid_rule_set("Missing rule type")
    for action in (rule.get("onSuccess"), rule.get("onFailure")):
        # Rule.validateAction: "none,error" names the WRITE (UP) and READ (DOWN) actions of one rule.
        if mode not in ("WRITEREAD", "UPDOWN") and action is not None and "," in action:
            raise invalid_rule_set("Multiple actions only valid with WRITEREAD and UPDOWN")


def _validate_rule_name(name: str | None) -> None:
    """Rule.validateName. Java reads the name as UTF-16 units: a character outside the BMP is two
    surrogates, neither a letter, so it is illegal anywhere, and counts twice towards the length."""
    if name is None:
        raise invalid_rule_set("Missing rule name")
    if not name:
        raise invalid_rule_set("Empty rule name")
    if len(name.encode("utf-16-le")) // 2 > RULE_NAME_MAX_LENGTH:
        raise invalid_rule_set("Rule name too long")
    if not (_java_letter(name[0]) or name[0] == "_"):
        raise invalid_rule_set(f"Illegal initial character in rule name: {name}")
    if any(not (_java_letter(c, digits=True) or c in "_-") for c in name[1:]):
        raise invalid_rule_set(f"Illegal character in rule name: {name}")


def _java_letter(c: str, *, digits: bool = False) -> bool:
    """Character.isLetter(char) (the categories Lu, Ll, Lt, Lm, Lo), or with `digits`
    Character.isLetterOrDigit(char) (and Nd), of a BMP character."""
    letters = ("Lu", "Ll", "Lt", "Lm", "Lo", "Nd") if digits else ("Lu", "Ll", "Lt", "Lm", "Lo")
    return ord(c) <= 0xFFFF and unicodedata.category(c) in letters


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def merge_metadata(old: Annotation | None, new: Annotation | None) -> Annotation | None:
    """`Metadata.mergeMetadata`: either alone as it is; both: per key of `tags` and `properties` the
    newer value, `sensitive` the union. The result is Confluent's form: keys sorted, empty parts left
    out (as its `@JsonInclude(NON_EMPTY)` serialises them)."""
    if old is None:
        return new
    if new is None:
        return old
    out: dict[str, Any] = {}
    tags = _merge_maps(old.get("tags"), new.get("tags"))
    if tags:
        out["tags"] = {path: sorted(set(names)) for path, names in sorted(tags.items())}
    properties = _merge_maps(old.get("properties"), new.get("properties"))
    if properties:
        out["properties"] = dict(sorted(properties.items()))
    sensitive = sorted(set(old.get("sensitive") or ()) | set(new.get("sensitive") or ()))
    if sensitive:
        out["sensitive"] = sensitive
    return out


def _merge_maps(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> dict[str, Any]:
    return {**(old or {}), **(new or {})}


def merge_rule_sets(old: Annotation | None, new: Annotation | None) -> Annotation | None:
    """`RuleSet.mergeRuleSets`: either alone as it is; both: per kind, the older rules whose name no
    newer rule has, then the newer rules."""
    if old is None:
        return new
    if new is None:
        return old
    out: dict[str, Any] = {}
    for kind in RULE_KINDS:
        older, newer = list(old.get(kind) or ()), list(new.get(kind) or ())
        names = {rule.get("name") for rule in newer}
        merged = [rule for rule in older if rule.get("name") not in names] + newer
        if merged:
            out[kind] = merged
    return out


def merge_with_config(config: Mapping[str, Any], metadata: Annotation | None, rule_set: Annotation | None,
                      previous: tuple[Annotation | None, Annotation | None] | None
                      ) -> tuple[Annotation | None, Annotation | None]:
    """`KafkaSchemaRegistry.maybeSetMetadataRuleSet` without `confluent:version`: the metadata and
    the rule set are each the config's default, then the given one (when it is None, the previous
    version's: `previous` is its metadata and rule set), then the config's override, merged."""
    old_metadata, old_rule_set = previous if previous is not None else (None, None)
    merged_metadata = merge_metadata(
        merge_metadata(config.get("defaultMetadata"), metadata if metadata is not None else old_metadata),
        config.get("overrideMetadata"))
    merged_rule_set = merge_rule_sets(
        merge_rule_sets(config.get("defaultRuleSet"), rule_set if rule_set is not None else old_rule_set),
        config.get("overrideRuleSet"))
    return merged_metadata, merged_rule_set


def compatibility_group_value(metadata: Annotation | None, group: str) -> str | None:
    """The value a version's metadata gives the property a config's `compatibilityGroup` names
    (Confluent's `getCompatibilityGroupValue`): None when it has none."""
    value = ((metadata or {}).get("properties") or {}).get(group)
    return value if isinstance(value, str) else None


def confluent_version(metadata: Annotation | None) -> str | None:
    properties = (metadata or {}).get("properties") or {}
    value = properties.get(CONFLUENT_VERSION)
    return value if isinstance(value, str) else None


def with_confluent_version(metadata: Annotation | None, version: int) -> Annotation | None:
    """`metadata` with `confluent:version` set to `version` (merged as Confluent merges it in)."""
    return merge_metadata(metadata, {"properties": {CONFLUENT_VERSION: str(version)}})


def without_confluent_version(metadata: Annotation | None) -> Annotation | None:
    """`metadata` as compared when `confluent:version` is set aside: a re-registration carries the
    version it would create, its stored twin the version it did create."""
    if confluent_version(metadata) is None:
        return metadata
    assert metadata is not None
    properties = {k: v for k, v in metadata["properties"].items() if k != CONFLUENT_VERSION}
    out = {k: v for k, v in metadata.items() if k != "properties"}
    if properties:
        out["properties"] = properties
    return out
