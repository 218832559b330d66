"""The one error of schema parsing (kept apart so that every parser module can raise it)."""

from __future__ import annotations


class InvalidSchemaError(ValueError):
    """The schema text is not a valid schema of its type; `str(exc)` is the parser's message."""
