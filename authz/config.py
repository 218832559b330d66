"""Authorizer settings (section `[authz]`, environment `KGOV_AUTHZ__*`)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from pydantic import BaseModel, Field, field_validator

from authz.model import InvalidAclError, Principal


def parse_super_users(value: str) -> frozenset[Principal]:
    """Kafka's `super.users`: semicolon-separated, each entry trimmed, empty entries dropped."""
    users = set()
    for entry in value.split(";"):
        entry = entry.strip()
        if entry:
            users.add(Principal.parse(entry))
    return frozenset(users)


class AuthzConfig(BaseModel):
    super_users: str = Field(default="", description="Kafka syntax: User:alice;User:bob")
    allow_everyone_if_no_acl_found: bool = False
    # Membership file: JSON {"Group:sales": ["User:alice", ...]}; the API can add more.
    groups_file: Path | None = None
    decision_cache_size: int = Field(default=200_000, ge=0)
    refresh_interval_s: float = Field(default=0.2, gt=0, le=1.0)
    # Networks whose brokers may call the OPA-compatible decision API without credentials.
    decision_api_networks: list[str] = Field(default_factory=lambda: ["127.0.0.0/8", "::1/128"])
    log_allowed: bool = Field(default=False, description="audit allowed decisions too (Kafka logs them at DEBUG)")

    @field_validator("allow_everyone_if_no_acl_found", mode="before")
    @classmethod
    def _kafka_boolean(cls, v: object) -> object:
        # Kafka: Boolean.parseBoolean(value.trim()), true only for "true" in any case. pydantic
        # alone would also read "yes", "on", "1" as true: opening every ACL-less resource where
        # Kafka keeps it closed.
        return v.strip().lower() == "true" if isinstance(v, str) else v

    @field_validator("super_users")
    @classmethod
    def _valid_super_users(cls, v: str) -> str:
        try:
            parse_super_users(v)
        except InvalidAclError as exc:
            raise ValueError(str(exc)) from exc
        return v

    @field_validator("decision_api_networks")
    @classmethod
    def _valid_networks(cls, v: list[str]) -> list[str]:
        for net in v:
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError as exc:
                raise ValueError(f"decision_api_networks: {exc}") from exc
        return v

    @property
    def super_user_set(self) -> frozenset[Principal]:
        return parse_super_users(self.super_users)
