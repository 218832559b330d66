"""Kafka's client quotas as pure functions: entities, 8-level precedence, windowed rates, throttle time.

Sources (apache/kafka): `ClientQuotaManager` (precedence and quota groups), `Rate.windowSize` (the
elapsed time is padded to N-1 full windows), `QuotaUtils.throttleTime`
(`(rate - bound) / bound * windowSize`), `ClientRequestQuotaManager` (request time bounded by one
window). The gateway enforces them per gateway instance, as Conduktor's gateway does.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Final

from authz.host_address import java_host_address

PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
REQUEST_PERCENTAGE: Final = "request_percentage"
CONNECTION_CREATION_RATE: Final = "connection_creation_rate"
CLIENT_KEYS: Final = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE})
IP_KEYS: Final = frozenset({CONNECTION_CREATION_RATE})
ALL_KEYS: Final = CLIENT_KEYS | IP_KEYS
MAX_ENTITY_NAME_LENGTH: Final = 255  # gateway.quota_store's name columns


class QuotaError(ValueError):
    """An invalid quota entity or value; the message is Kafka's wording where one exists."""


class Part(enum.StrEnum):
    NONE = "none"  # the entity type is not part of the entity
    NAME = "name"
    DEFAULT = "default"


@dataclass(frozen=True, slots=True, order=True)
class EntityPart:
    kind: Part
    name: str = ""

    @classmethod
    def of(cls, name: str) -> EntityPart:
        return cls(Part.NAME, name)

    def render(self) -> str | None:
        """The name as Kafka's APIs show it: the name, None for the default."""
        return self.name if self.kind is Part.NAME else None


NONE_PART: Final = EntityPart(Part.NONE)
DEFAULT_PART: Final = EntityPart(Part.DEFAULT)


@dataclass(frozen=True, slots=True, order=True)
class QuotaEntity:
    user: EntityPart = NONE_PART
    client_id: EntityPart = NONE_PART
    ip: EntityPart = NONE_PART

    def validate(self) -> None:
        if self.ip.kind is not Part.NONE and (self.user.kind is not Part.NONE or self.client_id.kind is not Part.NONE):
            raise QuotaError("Invalid quota entity combination, IP entity should not be combined with User or ClientId")
        if self == QuotaEntity():
            raise QuotaError("Invalid empty client quota entity")
        names = [part.name for part in (self.user, self.client_id, self.ip)]
        if any("\x00" in name for name in names):
            # PostgreSQL cannot store it; see authz.model.refuse_nul (a departure from Kafka's any-string names)
            raise QuotaError("Entity names must not contain the NUL character")
        if any(len(name) > MAX_ENTITY_NAME_LENGTH for name in names):
            raise QuotaError(f"Entity names must be at most {MAX_ENTITY_NAME_LENGTH} characters")
        if self.ip.kind is Part.NAME:
            ip_entity_name(self.ip.name)

    def normalised(self) -> QuotaEntity:
        """This entity validated (`validate`), its ip name in the form the gateway looks a connection's
        address up in (`ip_entity_name`), so that `::ffff:10.0.0.7`, `[10.0.0.7]` and `10.0.0.7` are one
        entity and match the client 10.0.0.7."""
        self.validate()
        if self.ip.kind is not Part.NAME:
            return self
        return replace(self, ip=EntityPart.of(ip_entity_name(self.ip.name)))

    def allows(self, key: str) -> bool:
        return key in (IP_KEYS if self.ip.kind is not Part.NONE else CLIENT_KEYS)

    def describe(self) -> str:
        parts = []
        for label, part in (("user", self.user), ("client-id", self.client_id), ("ip", self.ip)):
            if part.kind is Part.NAME:
                parts.append(f"{label}={part.name}")
            elif part.kind is Part.DEFAULT:
                parts.append(f"{label}=<default>")
        return ", ".join(parts)


QuotaConfigs = Mapping[QuotaEntity, Mapping[str, float]]


def _levels(user: str, client_id: str) -> tuple[QuotaEntity, ...]:
    u, c = EntityPart.of(user), EntityPart.of(client_id)
    return (
        QuotaEntity(u, c),
        QuotaEntity(u, DEFAULT_PART),
        QuotaEntity(u, NONE_PART),
        QuotaEntity(DEFAULT_PART, c),
        QuotaEntity(DEFAULT_PART, DEFAULT_PART),
        QuotaEntity(DEFAULT_PART, NONE_PART),
        QuotaEntity(NONE_PART, c),
        QuotaEntity(NONE_PART, DEFAULT_PART),
    )


@dataclass(frozen=True, slots=True)
class AppliedQuota:
    """The bound for one client and the key of the group that shares it (Kafka's metric tags)."""

    bound: float
    entity: QuotaEntity
    group: tuple[str, str]  # (user, client-id) of the shared sensor; "" where the entity has none


def resolve(configs: QuotaConfigs, key: str, user: str, client_id: str) -> AppliedQuota | None:
    """The most specific of Kafka's 8 levels that sets `key`, or None when unlimited."""
    for entity in _levels(user, client_id):
        values = configs.get(entity)
        if values is not None and key in values:
            group = (
                user if entity.user.kind is not Part.NONE else "",
                client_id if entity.client_id.kind is not Part.NONE else "",
            )
            return AppliedQuota(values[key], entity, group)
    return None


@lru_cache(maxsize=4096)
def ip_lookup_key(address: str) -> str | None:
    """One text per IP address, the key of ip quotas: a connection's address (as the socket gives it) and
    an ip entity's name (`ip_entity_name`) both come to it. Java's `InetAddress.getHostAddress()` form
    (`authz.host_address.java_host_address`: an IPv4-mapped IPv6 address is its IPv4 address, IPv6 in
    Java's full form), without an IPv6 zone (`%eth0`): Kafka's ConnectionQuotas keys its per-IP rates by
    `InetAddress`, whose equality ignores the scope. None when `address` is no IP literal."""
    literal = address[1:-1] if address.startswith("[") and address.endswith("]") else address
    try:
        ip = ipaddress.ip_address(literal)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id is not None:
        ip = ipaddress.IPv6Address(literal.partition("%")[0])
    return java_host_address(str(ip))


def ip_entity_name(name: str) -> str:
    """An ip quota entity's name as the gateway keeps it (`ip_lookup_key`), or QuotaError. Kafka refuses
    a name `InetAddress.getByName` cannot resolve (ClientQuotaControlManager: INVALID_REQUEST, "... is
    not a valid IP or resolvable host."). Departure: host names are refused too, not resolved once (a
    name could later resolve elsewhere, and the gateway's `max_connections_per_ip_overrides` take
    addresses only too); so are networks (CIDR) and Java's legacy short forms (`127.1`)."""
    key = ip_lookup_key(name)
    if key is None:
        raise QuotaError(f"{name} is not a valid IP address (host names are not resolved and networks are not "
                         "accepted: write one address, e.g. 10.0.0.7 or 2001:db8::7).")
    return key


def resolve_ip(configs: QuotaConfigs, ip: str) -> float | None:
    """The `connection_creation_rate` of the client address `ip` (its `ip_lookup_key`), else the default's."""
    key = ip_lookup_key(ip)
    named = () if key is None else (QuotaEntity(ip=EntityPart.of(key)),)
    for entity in (*named, QuotaEntity(ip=DEFAULT_PART)):
        values = configs.get(entity)
        if values is not None and CONNECTION_CREATION_RATE in values:
            return values[CONNECTION_CREATION_RATE]
    return None


class Rate:
    """Kafka's SampledStat + Rate: `window_num` samples of `window_ms`, rate per second.

    Not thread-safe: the gateway records on its event loop only.
    """

    __slots__ = ("_num", "_samples", "_window")

    def __init__(self, window_num: int = 11, window_ms: int = 1000) -> None:
        self._num = window_num
        self._window = window_ms
        self._samples: list[list[float]] = []  # [start_ms, value]

    def record(self, value: float, now_ms: float) -> None:
        samples = self._samples
        if not samples or now_ms >= samples[-1][0] + self._window:
            samples.append([now_ms, 0.0])
            if len(samples) > self._num:
                del samples[0]
        samples[-1][1] += value

    def unrecord(self, value: float) -> None:
        if self._samples:
            self._samples[-1][1] -= value

    def _purge(self, now_ms: float) -> None:
        horizon = now_ms - self._num * self._window
        while self._samples and self._samples[0][0] + self._window <= horizon:
            del self._samples[0]

    def window_size_ms(self, now_ms: float) -> float:
        """Rate.windowSize: elapsed since the oldest sample, padded to N-1 full windows, at least 1 ms."""
        self._purge(now_ms)
        elapsed = now_ms - self._samples[0][0] if self._samples else 0.0
        full = int(elapsed // self._window)
        if full < self._num - 1:
            elapsed += (self._num - 1 - full) * self._window
        return max(elapsed, 1.0)

    def measure(self, now_ms: float) -> float:
        window = self.window_size_ms(now_ms)
        total = sum(v for _, v in self._samples)
        return total / (window / 1000.0)

    @property
    def idle_since_ms(self) -> float:
        return self._samples[-1][0] if self._samples else 0.0


def throttle_time_ms(rate: Rate, bound: float, now_ms: float) -> int:
    """QuotaUtils.throttleTime: 0 when within the bound, else `(rate - bound) / bound * window`."""
    if bound <= 0:
        return int(rate.window_size_ms(now_ms)) if rate.measure(now_ms) > 0 else 0
    observed = rate.measure(now_ms)
    if observed <= bound:
        return 0
    return round((observed - bound) / bound * rate.window_size_ms(now_ms))
