"""A bound on the work of one compatibility check.

The checkers compare every member of a combined schema (JSON Schema `anyOf`/`oneOf`/`allOf`, Avro
unions) with every member of the other, match them (JSON Schema), and walk a subschema reached
through several `$ref`s once per path. Their work grows with the product of the schemas' sizes,
not with their sum: a 150 KB union takes minutes of CPU. Transitive and FULL levels multiply it
again by the number of versions and directions. Every comparison of one check (one request of the
registry: see `registry.service`) spends from one `WorkBudget`, which stops it with
`TooComplexError` when it is spent; callers must refuse the schema then, never take it as
compatible. Confluent's registry has no such limit.
"""

from __future__ import annotations

# One unit is one comparison of two subschemas (about 9 microseconds for JSON Schema objects, 1-3 for
# Avro records) or a matching pass over 64 pairs of JSON subschemas. A FULL_TRANSITIVE check of a
# 50-field record against 100 earlier versions takes 70,000 units (Avro) or 100,000 (JSON); a FULL
# check of a 200-member union that changed every member 160,000. The default passes those with room
# (about 250 such versions) and stops any check within about 2 s of CPU (JSON; Avro well within 1 s).
DEFAULT_MAX_WORK = 250_000


class TooComplexError(Exception):
    """The comparison needs more than `limit` units of work."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} subschema comparisons")
        self.limit = limit


class WorkBudget:
    """What one check may still spend: shared by all its comparisons (not thread-safe: one check runs
    in one thread)."""

    __slots__ = ("_left", "limit")

    def __init__(self, limit: int = DEFAULT_MAX_WORK) -> None:
        if limit <= 0:
            raise ValueError("a work budget must be positive")
        self.limit = limit
        self._left = limit

    @property
    def spent(self) -> int:
        return self.limit - self._left

    def spend(self, units: int = 1) -> None:
        self._left -= units
        if self._left < 0:
            raise TooComplexError(self.limit)
