"""Gateway settings (section `[gateway]`, environment `KGOV_GATEWAY__*`)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class GatewayConfig(BaseModel):
    listen: str = "127.0.0.1:9192"
    upstream: str | None = None
    max_request_bytes: int = Field(default=100 * 1024 * 1024, gt=0)
    idle_timeout_s: float = Field(default=600.0, gt=0)
