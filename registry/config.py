"""Schema-registry settings (section `[registry]`, environment `KGOV_REGISTRY__*`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from registry.compat.work_budget import DEFAULT_MAX_WORK


class RegistryConfig(BaseModel):
    anonymous_read: bool = False
    max_body_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    # Work one schema-to-schema compatibility check may do (see registry.compat.work_budget).
    max_diff_work: int = Field(default=DEFAULT_MAX_WORK, gt=0)
