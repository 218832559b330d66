"""Schema-registry settings (section `[registry]`, environment `KGOV_REGISTRY__*`)."""

from __future__ import annotations

import os

from pydantic import BaseModel, Field

from registry.compat.work_budget import DEFAULT_MAX_WORK

# Confluent's registry stores a schema as one Kafka record, so its default limits (1 MB records)
# refuse schemas of about 1 MB; parsing is linear but costs up to 2 s of CPU per MiB (JSON Schema's
# meta-schema check). 2 MiB accepts anything Confluent's defaults accept, with room.
DEFAULT_MAX_BODY_BYTES = 2 * 1024 * 1024


def _cores() -> int:
    return os.cpu_count() or 1


class RegistryConfig(BaseModel):
    anonymous_read: bool = False
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, gt=0)
    # Work all the compatibility comparisons of one request may do (see registry.compat.work_budget).
    max_diff_work: int = Field(default=DEFAULT_MAX_WORK, gt=0)
    # Requests comparing schemas at once per process, and how long one waits for a turn (see
    # registry.check_slots); past the wait: HTTP 500, error_code 50002, as Confluent's timeouts.
    max_concurrent_checks: int = Field(default_factory=_cores, gt=0)
    check_wait_s: float = Field(default=10.0, gt=0, le=300)
