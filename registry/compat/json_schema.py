"""JSON Schema compatibility (Confluent's SchemaDiff rules). Placeholder until the diff lands."""

from __future__ import annotations

from registry.schemas import ParsedSchema


def json_schema_incompatibilities(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    return []
