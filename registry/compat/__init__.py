"""Schema compatibility checks with the verdicts and messages of Confluent's registry.

`check_compatibility(new, previous, level)` returns `[]` when `new` may be registered after
`previous` (oldest first, non-deleted versions only) under `level`, otherwise one message per
incompatibility in the wording of Confluent's verbose mode.

Direction (Confluent's `CompatibilityChecker`): BACKWARD reads old data with the new schema
(reader = new, writer = old); FORWARD reads new data with the old schema; FULL is both. The
non-transitive levels compare with the latest version only; the transitive ones walk the versions
newest first and stop at the first that fails, as Confluent's `validateAll` does.

All the comparisons of one check (every version, both directions) spend from one `WorkBudget`
(`registry.compat.work_budget`), of `max_work` units unless the caller passes its own; when it is
spent, `TooComplexError` propagates and the schema must be refused, never taken as compatible.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from registry.compat.work_budget import DEFAULT_MAX_WORK, TooComplexError, WorkBudget
from registry.schemas import ParsedSchema, SchemaType


class CompatibilityLevel(enum.StrEnum):
    NONE = "NONE"
    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @property
    def transitive(self) -> bool:
        return self.value.endswith("_TRANSITIVE")


DIFFERENT_SCHEMA_TYPE = "Incompatible because of different schema type"
_NEW = "new"
_OLD = "old"


def reader_incompatibilities(reader: ParsedSchema, writer: ParsedSchema, *,
                             budget: WorkBudget | None = None) -> list[str]:
    """Why data written with `writer` cannot be read with `reader` (Confluent's
    `isBackwardCompatible(reader, writer)`); the messages still hold `%s` placeholders for the
    reader's and the writer's role ("new"/"old"), filled in by `check_compatibility`."""
    if reader.schema_type is not writer.schema_type:
        return [DIFFERENT_SCHEMA_TYPE]
    if reader == writer:
        # Same type, canonical text and references: structurally identical, so every checker
        # finds nothing; skip the walk (re-registrations and lookups hit this constantly).
        return []
    if reader.schema_type is SchemaType.AVRO:
        from registry.compat.avro import avro_incompatibilities

        return avro_incompatibilities(reader, writer, budget=budget)
    if reader.schema_type is SchemaType.JSON:
        from registry.compat.json_schema import json_schema_incompatibilities

        return json_schema_incompatibilities(reader, writer, budget=budget)
    return [f"Compatibility of {reader.schema_type.value} schemas is not supported"]


def _fill(messages: list[str], reader_role: str, writer_role: str) -> list[str]:
    return [m.replace("%s", reader_role, 1).replace("%s", writer_role, 1) for m in messages]


_MAX_SCHEMA_IN_MESSAGE = 10 * 1024


def _old_schema_notes(old: ParsedSchema, version: int | None) -> list[str]:
    """What Confluent appends after the messages about one previous version
    (`SchemaValidatorBuilder.formatErrorMessages`): a text over 10240 UTF-16 units (Java's
    `String.length`) is cut there and ends with `...` (half of a cut surrogate pair is dropped)."""
    notes = [] if version is None else [f"{{oldSchemaVersion: {version}}}"]
    text = old.canonical
    units = text.encode("utf-16-le")
    if len(units) <= 2 * _MAX_SCHEMA_IN_MESSAGE:
        notes.append(f"{{oldSchema: '{text}'}}")
    else:
        head = units[: 2 * _MAX_SCHEMA_IN_MESSAGE].decode("utf-16-le", errors="ignore")
        notes.append(f"{{oldSchema: <truncated> '{head}...'}}")
    return notes


def _against(new: ParsedSchema, old: ParsedSchema, version: int | None, level: CompatibilityLevel,
             budget: WorkBudget) -> list[str]:
    messages: list[str] = []
    if level in (CompatibilityLevel.FORWARD, CompatibilityLevel.FORWARD_TRANSITIVE,
                 CompatibilityLevel.FULL, CompatibilityLevel.FULL_TRANSITIVE):
        forward = _fill(reader_incompatibilities(old, new, budget=budget), _OLD, _NEW)
        messages.extend(forward)
        if forward and level in (CompatibilityLevel.FORWARD, CompatibilityLevel.FORWARD_TRANSITIVE):
            messages.extend(_old_schema_notes(old, version))
    if level in (CompatibilityLevel.BACKWARD, CompatibilityLevel.BACKWARD_TRANSITIVE,
                 CompatibilityLevel.FULL, CompatibilityLevel.FULL_TRANSITIVE):
        backward = _fill(reader_incompatibilities(new, old, budget=budget), _NEW, _OLD)
        messages.extend(backward)
        if backward:
            messages.extend(_old_schema_notes(old, version))
    return messages


def check_compatibility(
    new: ParsedSchema,
    previous: Sequence[ParsedSchema],
    level: CompatibilityLevel,
    *,
    versions: Sequence[int] | None = None,
    max_work: int = DEFAULT_MAX_WORK,
    budget: WorkBudget | None = None,
) -> list[str]:
    """[] when compatible; otherwise one message per incompatibility (each naming its path).

    `versions`, when given, are the version numbers of `previous` (same order); Confluent names
    the version that failed (`{oldSchemaVersion: N}`) in its messages. Raises `TooComplexError`
    when all the comparisons together need more than `max_work` units, or more than `budget` has
    left when one is given (a caller that checks more than once per request shares one).
    """
    level = CompatibilityLevel(str(level).upper())  # as Confluent's CompatibilityLevel.forName
    if level is CompatibilityLevel.NONE or not previous:
        return []
    numbered: list[tuple[ParsedSchema, int | None]] = list(
        zip(previous, versions if versions is not None else [None] * len(previous), strict=True)
    )
    candidates = list(reversed(numbered)) if level.transitive else [numbered[-1]]
    shared = budget if budget is not None else WorkBudget(max_work)
    for old, version in candidates:
        messages = _against(new, old, version, level, shared)
        if messages:
            messages.append(f"{{validateFields: 'false', compatibility: '{level.value}'}}")
            return messages
    return []


__all__ = ["DEFAULT_MAX_WORK", "DIFFERENT_SCHEMA_TYPE", "CompatibilityLevel", "TooComplexError", "WorkBudget",
           "check_compatibility", "reader_incompatibilities"]
