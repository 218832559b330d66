"""A bound on the work of comparing two schemas.

The checkers compare every member of a combined schema (JSON Schema `anyOf`/`oneOf`/`allOf`, Avro
unions) with every member of the other, match them (JSON Schema), and walk a subschema reached
through several `$ref`s once per path. Their work grows with the product of the schemas' sizes,
not with their sum: a 150 KB union takes minutes of CPU. Each comparison of two schemas spends from
one `WorkBudget` and stops with `TooComplexError` when it is spent; callers must refuse the schema
then, never take it as compatible. Confluent's registry has no such limit.
"""

from __future__ import annotations

# One unit is one comparison of two subschemas (about 8 microseconds for JSON Schema objects, 3 for
# Avro records) or a matching pass over 64 pairs of JSON subschemas. The default lets a 200-member
# union change every member (80,000 units) and stops any larger work within about a second.
DEFAULT_MAX_WORK = 120_000


class TooComplexError(Exception):
    """The comparison needs more than `limit` units of work."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} subschema comparisons")
        self.limit = limit


class WorkBudget:
    """What one comparison may still spend; not shared between comparisons."""

    __slots__ = ("_left", "limit")

    def __init__(self, limit: int = DEFAULT_MAX_WORK) -> None:
        if limit <= 0:
            raise ValueError("a work budget must be positive")
        self.limit = limit
        self._left = limit

    def spend(self, units: int = 1) -> None:
        self._left -= units
        if self._left < 0:
            raise TooComplexError(self.limit)
