"""The one settings object: `kgov.toml` (or `--config FILE`), overridden by `KGOV_*` variables.

Nested sections use `__` in the environment: `KGOV_AUTHZ__SUPER_USERS="User:alice;User:bob"`.
Validated at start-up; insecure combinations are refused with the fix in the message.
"""

from __future__ import annotations

import ipaddress
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from audit.config import AuditConfig
from audit.integrity import IntegrityKey, IntegrityKeyError, load_key
from audit.kafka_seal import SealKeyError, generated_private_key, load_private_key
from authz.config import AuthzConfig, parse_super_users
from authz.model import InvalidAclError, Principal
from gateway.config import GatewayConfig
from kgov.http_server import DEFAULT_MAX_CONNECTIONS_PER_IP
from kgov.private_files import local_secret, private_dir, saved_secret, sqlite_file
from registry.config import RegistryConfig
from sasl.config import AdminConfig, OAuthConfig, SaslConfig

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

DEFAULT_CONFIG_FILE = Path("kgov.toml")
_DEFAULT_PORTS = {"http": 80, "https": 443}
# `http_request_max_bytes` (8 MiB).
DEFAULT_HTTP_REQUEST_MAX_BYTES = 8 * 1024 * 1024


def web_origin(text: str) -> str:
    """An origin as browsers serialise it in an `Origin` header (RFC 6454): `scheme://host[:port]`, in
    lower case, without the scheme's default port. ValueError for anything else (a path, `*`, `null`)."""
    value = text.strip()
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        raise ValueError(f"{value!r} is not an origin (scheme://host[:port])") from None
    scheme = parts.scheme.lower()
    if (scheme not in _DEFAULT_PORTS or not parts.hostname or parts.username is not None
            or parts.password is not None or parts.path not in ("", "/") or parts.query or parts.fragment
            or "*" in value):
        raise ValueError(f"{value!r} is not an origin: give scheme://host[:port], as a browser's Origin header "
                         "shows it (http or https, no path, no wildcard)")
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}" + ("" if port is None or port == _DEFAULT_PORTS[scheme] else f":{port}")


class MetricsConfig(BaseModel):
    """`GET /metrics` (section `[metrics]`, environment `KGOV_METRICS__*`).

    By default a scrape needs credentials (HTTP Basic or Bearer) of a principal listed in `principals`
    (it gets nothing else) or one allowed DESCRIBE on the cluster (super users, the Operator role, ...).
    Kafka's own metrics (JMX) sit outside its ACLs; kgov's name its deny counts, so they are not public
    unless `public = true`.
    """

    public: bool = False
    principals: str = Field(default="", description="User principals allowed to scrape: User:prometheus;User:b")

    @field_validator("public", mode="before")
    @classmethod
    def _strict_boolean(cls, v: object) -> object:
        # Only true/false: pydantic alone would read "yes", "on", "1" as true, and this opens a route.
        if isinstance(v, str):
            text = v.strip().lower()
            if text not in ("true", "false"):
                raise ValueError(f"metrics.public must be true or false, got {v.strip()!r}")
            return text == "true"
        return v

    @field_validator("principals")
    @classmethod
    def _user_principals(cls, v: str) -> str:
        try:
            principals = parse_super_users(v)
        except InvalidAclError as exc:
            raise ValueError(f"metrics.principals: {exc}") from exc
        others = sorted(str(p) for p in principals if p.type != "User" or not p.name)
        if others:
            # An HTTP caller is always User:<name>; a group here would match nobody, silently.
            raise ValueError(f"metrics.principals takes User:<name> entries only, got {', '.join(others)}")
        return v

    @property
    def principal_set(self) -> frozenset[Principal]:
        return parse_super_users(self.principals)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="KGOV_", env_nested_delimiter="__", extra="forbid", validate_default=True,
        # A validation error would otherwise echo the inputs, secrets included (admin.password, ...).
        hide_input_in_errors=True,
    )

    cluster_id: str = Field(default="kgov-cluster", min_length=1)
    data_dir: Path = Path(".kgov")
    # repr=False: a PostgreSQL URL carries its password.
    db: str | None = Field(default=None, description="SQLAlchemy URL; default SQLite under data_dir", repr=False)
    dev_mode: bool = False
    # Largest HTTP request body the control plane reads (Karapace's http_request_max_size; aiohttp's
    # default is 1 MiB). Bodies are read before authentication, so without a cap anyone could fill memory.
    http_request_max_bytes: int = Field(default=DEFAULT_HTTP_REQUEST_MAX_BYTES, ge=1024)
    # Reverse proxies whose X-Forwarded-For / X-Forwarded-Proto the control plane believes (IPs or networks).
    # Empty: none, the peer is the client. uvicorn alone believes any loopback peer (and FORWARDED_ALLOW_IPS
    # from the environment): every local process could then pick the address that ACL host rules, the
    # failed-login limit and the audit trail see.
    http_forwarded_allow_ips: list[str] = Field(default_factory=list)
    # Kafka's max.connections.per.ip (/.overrides) for the control plane (kgov.http_server.ConnectionCap):
    # connections from one TCP peer address beyond this get 503 and are closed. Listed proxies
    # (http_forwarded_allow_ips) are not capped unless an override names them.
    http_max_connections_per_ip: int = Field(default=DEFAULT_MAX_CONNECTIONS_PER_IP, ge=1, le=2**31 - 1)
    http_max_connections_per_ip_overrides: dict[str, int] = Field(default_factory=dict)
    # Origins (scheme://host[:port]) of the pages allowed to change things besides this server's own Host:
    # the public address behind a proxy that rewrites Host (kgov.app.CrossSiteWriteGuard). Empty: none.
    http_public_origins: list[str] = Field(default_factory=list)

    authz: AuthzConfig = AuthzConfig()
    audit: AuditConfig = AuditConfig()
    admin: AdminConfig = AdminConfig()
    sasl: SaslConfig = SaslConfig()
    oauth: OAuthConfig = OAuthConfig()
    registry: RegistryConfig = RegistryConfig()
    gateway: GatewayConfig = GatewayConfig()
    metrics: MetricsConfig = MetricsConfig()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if settings_cls.model_config.get("toml_file"):
            sources.append(TomlConfigSettingsSource(settings_cls))
        return tuple(sources)

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown_section_keys(cls, data: Any) -> Any:
        """A misspelt key in a section would otherwise be ignored and its default used silently."""
        if not isinstance(data, dict):
            return data
        for name, field in cls.model_fields.items():
            section = data.get(name)
            model = field.annotation
            if isinstance(section, dict) and isinstance(model, type) and issubclass(model, BaseModel):
                known = set(model.model_fields) | {f.alias for f in model.model_fields.values() if f.alias}
                unknown = sorted(set(section) - known)
                if unknown:
                    raise ValueError(
                        f"unknown setting(s) in [{name}]: {', '.join(unknown)}; known: {', '.join(sorted(known))}"
                    )
        return data

    @field_validator("http_forwarded_allow_ips")
    @classmethod
    def _proxy_addresses(cls, v: list[str]) -> list[str]:
        for entry in v:
            if entry.strip() == "*":
                raise ValueError("http_forwarded_allow_ips = * would let every client choose its own address: "
                                 "list the reverse proxies' addresses")
            try:
                ipaddress.ip_network(entry.strip(), strict=False)
            except ValueError as exc:
                raise ValueError(f"http_forwarded_allow_ips: {exc}") from exc
        # A network with host bits set (10.0.0.7/24) as its network (10.0.0.0/24): uvicorn reads entries
        # strictly and would take that one for a name that matches no peer.
        return [str(ipaddress.ip_network(e.strip(), strict=False)) if "/" in e else e.strip() for e in v]

    @field_validator("http_max_connections_per_ip_overrides")
    @classmethod
    def _connection_overrides(cls, v: dict[str, int]) -> dict[str, int]:
        for address, limit in v.items():
            try:
                ipaddress.ip_address(address.strip("[]"))
            except ValueError:
                raise ValueError(f"http_max_connections_per_ip_overrides: {address!r} is not an IP address (host "
                                 "names are not resolved; write the address, e.g. \"10.0.0.7\" or \"2001:db8::7\")"
                                 ) from None
            if not 0 <= limit <= 2**31 - 1:
                raise ValueError(f"http_max_connections_per_ip_overrides: the limit of {address} must be 0 or more")
        return v

    @field_validator("http_public_origins")
    @classmethod
    def _origins(cls, v: list[str]) -> list[str]:
        try:
            return [web_origin(entry) for entry in v]
        except ValueError as exc:
            raise ValueError(f"http_public_origins: {exc}") from None

    @property
    def weak_admin_password(self) -> bool:
        password = self.admin.password.get_secret_value() if self.admin.password else None
        return password is not None and (
            len(password) < 12 or password.lower() in {"admin", "password", "changeme", "admin-secret"}
        )

    @model_validator(mode="after")
    def _refuse_insecure(self) -> Settings:
        if self.weak_admin_password and not self.dev_mode:
            raise ValueError(
                "admin.password is too weak for a non-dev deployment: set KGOV_ADMIN__PASSWORD to at "
                "least 12 characters (or run `kgov up`, whose dev mode generates one)"
            )
        return self

    @property
    def database_url(self) -> str:
        if self.db:
            return self.db
        private_dir(self.data_dir)
        return f"sqlite:///{(self.data_dir / 'kgov.db').resolve()}"

    @property
    def audit_dir(self) -> Path:
        return self.audit.dir if self.audit.dir is not None else self.data_dir / "audit"

    @property
    def audit_integrity_key_file(self) -> Path:
        # Beside the database, not in the audit directory: whoever ships or rotates the audit files away
        # (a log collector) does not get the key that seals them.
        return self.audit.integrity_key_file or self.data_dir / "audit-integrity.key"

    @property
    def audit_seal_key_file(self) -> Path:
        # Beside the chain key, for the same reason: not where the audit files are shipped from.
        return self.audit.kafka_seal_key_file or self.data_dir / "audit-seal.key"

    def audit_seal_key(self) -> Ed25519PrivateKey | None:
        """The Ed25519 key the Kafka audit sink seals its records with (audit.kafka_seal); None when no
        topic is configured or `[audit] kafka_seal = false`."""
        if self.audit.kafka_bootstrap_servers is None or not self.audit.kafka_seal:
            return None
        return self.audit_seal_private_key()

    def audit_seal_private_key(self) -> Ed25519PrivateKey:
        """The seal key whether shipping is on or not (`kgov audit seal-public-key`). The default key file is
        generated on first use; a configured one must exist (a typo must not start a new key)."""
        path = self.audit_seal_key_file
        try:
            if self.audit.kafka_seal_key_file is None:
                private_dir(path.parent)
                return generated_private_key(path)
            return load_private_key(path)
        except SealKeyError as exc:  # `kgov` prints a ValueError as a usage error, not a trace
            raise ValueError(f"{exc} ([audit] kafka_seal_key_file)") from None

    @property
    def delegation_token_key_file(self) -> Path:
        """Where `kgov up` keeps the `sasl.delegation_token_secret_key` it generates when none is set."""
        return self.data_dir / "delegation-token.key"

    @property
    def signing_key_secret_file(self) -> Path:
        """Where `kgov up` keeps the `oauth.signing_key_secret` it generates when none is set."""
        return self.data_dir / "signing-key.secret"

    def adopt_saved_secrets(self) -> None:
        """Sets `sasl.delegation_token_secret_key` and `oauth.signing_key_secret`, where they are unset,
        from the files `kgov up` keeps in the data directory, when they exist and the database is that
        directory's own (`kgov.db`): the credential commands then act on `kgov up`'s database with its
        keys, as they find its database there. Never creates a file (a key of their own would make tokens
        the platform refuses, or seal a signing key it cannot open), and leaves another database alone: a
        `.kgov` left by a trial of `kgov up` must not seal a production database's new signing key."""
        own = (self.data_dir / "kgov.db").resolve()
        database = sqlite_file(self.db) if self.db is not None else own
        if database is None or database.resolve() != own:
            return
        for section, name, path in ((self.sasl, "delegation_token_secret_key", self.delegation_token_key_file),
                                    (self.oauth, "signing_key_secret", self.signing_key_secret_file)):
            if getattr(section, name) is not None:
                continue
            try:
                saved = saved_secret(path)
            except (RuntimeError, OSError) as exc:  # `kgov` prints a ValueError as a usage error
                raise ValueError(f"{exc} (the key `kgov up` keeps for {name})") from None
            if saved is not None:
                setattr(section, name, SecretStr(saved))

    def audit_integrity_key(self) -> IntegrityKey | None:
        """The key the audit sinks seal their chain with; None with `[audit] integrity = false`. The default
        key file is generated on first use; a configured one must exist (a typo must not start a new key)."""
        if not self.audit.integrity:
            return None
        path = self.audit_integrity_key_file
        if self.audit.integrity_key_file is None:
            private_dir(path.parent)
            try:
                return IntegrityKey(local_secret(path).encode("ascii"))
            except RuntimeError as exc:  # cut short: `kgov` prints ValueErrors as a usage error, not a trace
                raise ValueError(str(exc)) from None
        try:
            return load_key(path)
        except IntegrityKeyError as exc:
            raise ValueError(f"{exc} ([audit] integrity_key_file)") from None


def _refuse_untrusted_config(path: Path, *, implicit: bool) -> None:
    """The file decides super users and default-allow: anyone else able to write it owns the cluster.
    A world-writable file is refused; so is an implicit ./kgov.toml owned by another user (a shared
    working directory such as /tmp), as OpenSSH's StrictModes does for its files."""
    st = path.stat()
    if st.st_mode & stat.S_IWOTH:
        raise ValueError(f"configuration file {path} is writable by every user: run `chmod o-w {path}`")
    if implicit and st.st_uid not in (os.geteuid(), 0):
        raise ValueError(
            f"./{path} belongs to another user (uid {st.st_uid}); refusing to take settings from it: "
            "pass --config explicitly if it is meant to be used"
        )


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Settings from `config_file` (or ./kgov.toml when present), environment, then `overrides`."""
    if config_file is not None and not config_file.exists():
        raise FileNotFoundError(f"configuration file {config_file} does not exist")
    path = config_file or (DEFAULT_CONFIG_FILE if DEFAULT_CONFIG_FILE.exists() else None)
    if path is not None:
        _refuse_untrusted_config(path, implicit=config_file is None)
    values = {k: v for k, v in overrides.items() if v is not None}
    if path is None:
        return Settings(**values)

    class FileSettings(Settings):
        model_config = SettingsConfigDict(**{**Settings.model_config, "toml_file": path})

    return FileSettings(**values)
