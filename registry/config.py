"""Schema-registry settings (section `[registry]`, environment `KGOV_REGISTRY__*`)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class RegistryConfig(BaseModel):
    anonymous_read: bool = False
    max_body_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
