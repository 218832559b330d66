"""Authorizer settings (section `[authz]`, environment `KGOV_AUTHZ__*`)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from pydantic import BaseModel, Field, field_validator, model_validator

from authz.decide import DEFAULT_CACHE_MAX_BYTES, DEFAULT_CACHE_SIZE
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
    decision_cache_size: int = Field(default=DEFAULT_CACHE_SIZE, ge=0)
    # With decision_cache_size, bounds the memory of a snapshot's caches keyed by callers' names
    # (authz.decide.AuthorizerData): the decision API takes names up to 32,767 characters.
    decision_cache_max_bytes: int = Field(default=DEFAULT_CACHE_MAX_BYTES, ge=0)
    refresh_interval_s: float = Field(default=0.2, gt=0, le=1.0)
    # Networks whose brokers may call the OPA-compatible decision API without credentials.
    decision_api_networks: list[str] = Field(default_factory=lambda: ["127.0.0.0/8", "::1/128"])
    log_allowed: bool = Field(default=False, description="audit allowed decisions too (Kafka logs them at DEBUG)")
    # Opt-in fail-closed bound on how old a node's ACL snapshot may get while the database cannot be
    # reached: past it every decision is DENIED except super users'. 0 = unlimited (serve the last
    # snapshot for as long as the outage lasts, as a Kafka broker cut off from the quorum does).
    max_snapshot_age_s: float = Field(
        default=0.0, ge=0, description="deny all but super users once the ACL snapshot is this old; 0 = unlimited"
    )

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
        if v.lstrip().startswith("["):
            # Kafka would read `["User:bob"]` as a principal of type `["User`, which no login ever has:
            # a JSON list here (the environment takes lists as JSON elsewhere) would leave no super user.
            raise ValueError("authz.super_users takes Kafka's super.users syntax, User:alice;User:bob, "
                             "not a JSON list")
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

    @model_validator(mode="after")
    def _age_above_poll_interval(self) -> AuthzConfig:
        if 0 < self.max_snapshot_age_s <= self.refresh_interval_s:
            raise ValueError(
                f"authz.max_snapshot_age_s ({self.max_snapshot_age_s}) must be 0 (unlimited) or longer than "
                f"authz.refresh_interval_s ({self.refresh_interval_s}), or every poll would race the deadline; "
                "a few seconds or more is sensible"
            )
        return self

    @property
    def super_user_set(self) -> frozenset[Principal]:
        return parse_super_users(self.super_users)
