"""The one error of schema parsing (kept apart so that every parser module can raise it)."""

from __future__ import annotations


class InvalidSchemaError(ValueError):
    """The schema text is not a valid schema of its type; `str(exc)` is the parser's message."""


class InvalidDefaultError(InvalidSchemaError):
    """An Avro field default that does not match its type: refused for new schemas only (Confluent
    parses stored, imported and looked-up schemas without checking defaults)."""
