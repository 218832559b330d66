"""Data contracts: the `metadata` and `ruleSet` of a version, their shape, and how they are merged.

Pure functions over the JSON objects the REST API carries. A registration's annotations are merged as
Confluent's `KafkaSchemaRegistry.maybeSetMetadataRuleSet` merges them: the config's default, then the
request's (or, when the request gives none, the latest live version's), then the config's override,
each later one winning (`Metadata.mergeMetadata`, `RuleSet.mergeRuleSets`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from registry.model import RegistryError

# The property Confluent keeps equal to the version a registration created, once a caller asked for
# it by giving a `version` (KafkaSchemaRegistry.CONFLUENT_VERSION).
CONFLUENT_VERSION: Final = "confluent:version"
RULE_KINDS: Final = ("migrationRules", "domainRules", "encodingRules")

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
    (the rules, merged by their `name`)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise RegistryError(422, f"Field '{field}' must be an object")
    for kind in RULE_KINDS:
        rules = value.get(kind)
        if rules is not None and not (isinstance(rules, list) and all(isinstance(r, dict) for r in rules)):
            raise RegistryError(422, f"Field '{field}.{kind}' must be an array of rule objects")
    return value


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
