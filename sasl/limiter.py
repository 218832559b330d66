"""Failed-login limits per (client address, claimed name) and per client address.

One client with a stale password (librdkafka retries its login on every reconnect) must not lock out
the other clients that share its address (a NAT, a Kubernetes node, a proxy, every local user of a
loopback kgov). So a login is refused at once when the name it claims has failed too often from its
address (`sasl.max_failed_attempts_per_source`), or when its address as a whole has (the larger
`sasl.max_failed_attempts_per_address`, which stops one place spraying passwords across names).
Kafka has no such limit (only `connection.failed.authentication.delay.ms`, `SaslServerAuthenticator`);
this is a deliberate addition.

The claimed name is what the client sent before any secret is checked (`claim_of_sasl`); a name that
exists and one that does not are counted alike, so the counters and the refusals tell nothing about
which names exist.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Final, TypeVar

from authz.clock import elapsed_clock
from authz.host_address import address_group
from sasl.plain import PlainError, parse_plain
from sasl.scram import ScramError, parse_client_first

# Claims live in separate namespaces, so a user named "token" is not locked out by bad bearer tokens.
BEARER_CLAIM: Final = "bearer\x00"  # OAUTHBEARER and HTTP Bearer: no name before validation
MALFORMED_CLAIM: Final = "malformed\x00"  # a first message that does not parse, an unknown HTTP scheme

_K = TypeVar("_K")

ADDRESS_REFUSAL: Final = "too many failed authentication attempts from this address"
NAME_REFUSAL: Final = "too many failed authentication attempts for this name from this address"


def user_claim(name: str) -> str:
    """A SCRAM user's (SCRAM, PLAIN, HTTP Basic: one password, so one count)."""
    return "user\x00" + name


def token_claim(token_id: str) -> str:
    """A delegation token's (SCRAM with tokenauth=true)."""
    return "token\x00" + token_id


def client_claim(client_id: str) -> str:
    """An OAuth client's (`POST /oauth/token`)."""
    return "client\x00" + client_id


def claim_of_sasl(mechanism: str, first_message: bytes) -> str:
    """The name a SASL exchange's first message claims, from the mechanism's own parser (so both agree);
    `MALFORMED_CLAIM` when it does not parse (the exchange then fails on it)."""
    if mechanism.startswith("SCRAM-"):
        try:
            first = parse_client_first(first_message)
        except ScramError:
            return MALFORMED_CLAIM
        return token_claim(first.username) if first.token_auth else user_claim(first.username)
    if mechanism == "PLAIN":
        try:
            return user_claim(parse_plain(first_message).username)
        except PlainError:
            return MALFORMED_CLAIM
    return BEARER_CLAIM


class FailureLimiter:
    """Failed attempts in a sliding window, per (address group, claim) and per address group (IPv6 by its
    /64, `authz.host_address.address_group`); bounded memory.

    The two counts live in separate maps, each bounded (least recently failed first out): a client
    cycling through names evicts only pair counts, never its address's, which stays the backstop.
    A claim is kept as a 16-byte digest, so a long claimed name costs no more memory than a short one.
    """

    def __init__(
        self,
        limit: int,
        window_s: float,
        *,
        address_limit: int | None = None,
        monotonic: Callable[[], float] = elapsed_clock,
        max_sources: int = 100_000,
        max_pairs: int = 100_000,
    ) -> None:
        self._limit = limit
        self._address_limit = address_limit if address_limit is not None else limit
        self._window = window_s
        self._monotonic = monotonic
        self._max_sources = max_sources
        self._max_pairs = max_pairs
        self._addresses: OrderedDict[str, deque[float]] = OrderedDict()
        self._pairs: OrderedDict[tuple[str, bytes], deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _pair(group: str, claim: str) -> tuple[str, bytes]:
        return group, hashlib.blake2b(claim.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def _count(self, q: deque[float] | None, now: float) -> int:
        if q is None:
            return 0
        while q and now - q[0] > self._window:
            q.popleft()
        return len(q)

    def refusal(self, source: str, claim: str) -> str | None:
        """The reason to refuse a login from `source` claiming `claim` without checking it, or None."""
        group = address_group(source)
        pair = self._pair(group, claim)
        now = self._monotonic()
        with self._lock:
            if self._count(self._addresses.get(group), now) >= self._address_limit:
                return ADDRESS_REFUSAL
            if self._count(self._pairs.get(pair), now) >= self._limit:
                return NAME_REFUSAL
        return None

    def record_failure(self, source: str, claim: str) -> None:
        group = address_group(source)
        pair = self._pair(group, claim)
        now = self._monotonic()
        with self._lock:
            self._append(self._addresses, group, self._address_limit, self._max_sources, now)
            self._append(self._pairs, pair, self._limit, self._max_pairs, now)

    def _append(self, counts: OrderedDict[_K, deque[float]], key: _K, limit: int, size: int, now: float) -> None:
        q = counts.setdefault(key, deque(maxlen=limit))
        counts.move_to_end(key)
        self._count(q, now)
        q.append(now)
        while len(counts) > size:
            counts.popitem(last=False)
