"""Audit trail settings (section `[audit]`, environment `KGOV_AUDIT__*`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from audit.kafka_sink import KafkaAuditSettings


class AuditConfig(KafkaAuditSettings):
    # The kafka_* settings (shipping the events to a Kafka topic) are KafkaAuditSettings'.
    # None: `<data_dir>/audit`. Holds events.jsonl (CloudEvents) and kafka-authorizer.log (Kafka's lines).
    dir: Path | None = None
    max_bytes: int = Field(default=100 * 1024 * 1024, gt=0)
    backups: int = Field(default=10, ge=0)
    # Seal every audit line in a chain file beside it (audit.integrity), verified by `kgov audit verify`.
    integrity: bool = True
    # None: `<data_dir>/audit-integrity.key`, generated (0600) on first start. Set: the file must exist.
    integrity_key_file: Path | None = None
    # (Events name their source `crn:///kafka=<cluster_id>`, from the top-level `cluster_id`.)
