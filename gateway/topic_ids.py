"""Topic ids (KIP-516) at the gateway: which name each upstream topic id stands for.

Fetch v13+ and Produce v13+ name topics by id only, but ACLs name topics, so the gateway authorizes
them by the names their ids stand for, as Kafka's `KafkaApis.handleFetchRequest` (and Kafka 4.1's
`handleProduceRequest`) does with its metadata cache.
The gateway has no metadata cache of its own: it learns the pairs from the upstream, from every
Metadata v10+ response that crosses it (the only way a client learns an id) and, when a Fetch names
an id it has not seen (a client that learned it through another gateway node, or before a restart),
from a Metadata request of its own for all topics (`refresh_request`). An id still unknown after
that refresh is answered UNKNOWN_TOPIC_ID (fail closed), never forwarded. Such listings are the
gateway's, not a connection's (`ListingGate`): one at a time, at most one per `REFRESH_INTERVAL_S`,
and a miss during a listing waits for it, so many connections cannot make many listings.

A pair never goes wrong: Kafka never reuses an id and cannot rename a topic, so an id names one
topic for life. A pair of a deleted topic at worst authorizes a Fetch by the name the topic had,
which the upstream then answers UNKNOWN_TOPIC_ID; a full refresh drops such pairs.

`TopicIds` is one immutable snapshot swapped whole (STYLE 4): readers on the event loop never see a
half-built map.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, Generic, TypeGuard, TypeVar

# Fetch and Produce v13 are the first to name topics by id, Metadata v10 the first to answer topic ids.
BY_ID_VERSION: Final = 13
METADATA_WITH_IDS_VERSION: Final = 10
# The newest Metadata version the refresh asks for (the bundled schema's and Kafka 4's ceiling is 13;
# 12 is what the bundled Tansu answers).
_REFRESH_METADATA_MAX: Final = 12
# The gateway lists the upstream's topics at most this often, whatever the number of connections: a
# client naming random ids cannot turn each Fetch into a listing of every topic upstream. Within it,
# an unknown id is answered UNKNOWN_TOPIC_ID at once.
REFRESH_INTERVAL_S: Final = 1.0
# Requests waiting for another connection's listing go on without it after this long (their unknown
# ids answered UNKNOWN_TOPIC_ID): one stuck upstream connection must not hold every other one.
LISTING_WAIT_S: Final = 10.0
# Learning only adds pairs, so pairs of deleted topics pile up between listings; past this many the
# map starts again from what is being learned (a miss then lists the cluster anew).
MAX_PAIRS: Final = 200_000

_Pairs = Iterable[tuple[uuid.UUID | None, str | None]]


def has_id(topic_id: uuid.UUID | None) -> TypeGuard[uuid.UUID]:
    """Kafka's Uuid.ZERO_UUID means "no id" (kafka-python decodes it as None)."""
    return topic_id is not None and topic_id.int != 0


def _usable(pairs: _Pairs) -> dict[uuid.UUID, str]:
    # Pairs without an id (`has_id`) or with a null name carry nothing.
    return {i: n for i, n in pairs if has_id(i) and n is not None}


class TopicIds:
    """The gateway's topic id -> name map, shared by its connections."""

    def __init__(self, max_pairs: int = MAX_PAIRS) -> None:
        self._names: Mapping[uuid.UUID, str] = MappingProxyType({})
        self._max = max_pairs

    def __len__(self) -> int:
        return len(self._names)

    def name(self, topic_id: uuid.UUID | None) -> str | None:
        return self._names.get(topic_id) if topic_id is not None else None

    def missing(self, topic_ids: Iterable[uuid.UUID | None]) -> bool:
        """Whether any of `topic_ids` has no name here."""
        names = self._names
        return any(i is None or i not in names for i in topic_ids)

    def learn(self, pairs: _Pairs) -> None:
        """Adds pairs seen in a partial answer (a Metadata response naming some topics)."""
        new = _usable(pairs)
        if any(self._names.get(i) != n for i, n in new.items()):
            merged = {**self._names, **new}
            self._names = MappingProxyType(merged if len(merged) <= self._max else new)

    def replace(self, pairs: _Pairs) -> None:
        """Takes a listing of every topic as the whole map (ids of deleted topics drop out)."""
        self._names = MappingProxyType(_usable(pairs))

    def learn_from_metadata(self, response: Any) -> None:
        """A response patch for Metadata v10+; it runs before the authorization patches filter the
        topics the principal may not describe (the pairs are the upstream's, whoever asked)."""
        self.learn((t.topic_id, t.name) for t in response.topics if t.error_code == 0)


# Produce v13+ and Fetch v13+ name topics by id only, Metadata v12+ may (KIP-516): the API keys
# whose ids need names, and the first version that has them.
BY_ID_SINCE: Final[Mapping[int, int]] = MappingProxyType({0: 13, 1: 13, 3: 12})


def request_ids(api_key: int, request: Any) -> list[uuid.UUID | None]:
    """The topic ids a Produce v13+ writes, a Fetch v13+ reads (a Fetch's forgotten topics are not
    read: no check) or a Metadata v12+ describes (its topics with no name, and those with an id
    besides their name: Kafka describes those by the id, gateway.request_authz)."""
    if api_key == 3:
        return [t.topic_id for t in request.topics or ()
                if t.name is None or has_id(t.topic_id)]
    topics = request.topic_data if api_key == 0 else request.topics
    return [t.topic_id for t in topics or ()]


def ids_supported(upstream_versions: Mapping[int, tuple[int, int]]) -> bool:
    """Versions naming topics by id are only advertised when the upstream can also tell the gateway
    what the ids mean."""
    metadata = upstream_versions.get(3)
    return metadata is not None and metadata[1] >= METADATA_WITH_IDS_VERSION


def refresh_version(upstream_versions: Mapping[int, tuple[int, int]]) -> int:
    return min(_REFRESH_METADATA_MAX, upstream_versions[3][1])


def refresh_request(metadata_request: Any, version: int) -> Any:
    """A Metadata request for every topic (with ids), never creating one."""
    return metadata_request[version](topics=None, allow_auto_topic_creation=False,
                                     include_topic_authorized_operations=False)


class Miss(enum.Enum):
    """What a request naming an unknown id does (`ListingGate.on_miss`)."""

    LIST = "list"  # it starts a listing on its connection and waits for it
    WAIT = "wait"  # a listing is under way: it waits for that one
    ANSWER = "answer"  # a listing began less than REFRESH_INTERVAL_S ago: unknown ids are answered now


W = TypeVar("W")


class ListingGate(Generic[W]):
    """Single flight for the gateway's topic listings: at most one under way, and at most one begun
    per `interval_s`, for the whole gateway. The waiters (connections holding a request) are handed
    back when the listing ends, answered or not. Event-loop only, no locks; the clock is the caller's."""

    def __init__(self, interval_s: float = REFRESH_INTERVAL_S) -> None:
        self._interval = interval_s
        self._began_at: float | None = None
        self._waiters: list[W] | None = None  # None: no listing under way
        self._owner: W | None = None
        self.listings = 0  # listings begun so far (also each listing's token)

    @property
    def under_way(self) -> bool:
        return self._waiters is not None

    def on_miss(self, waiter: W, now: float) -> Miss:
        if self._waiters is not None:
            self._waiters.append(waiter)
            return Miss.WAIT
        if self._began_at is not None and now - self._began_at < self._interval:
            return Miss.ANSWER
        self._began_at = now
        self._waiters, self._owner = [waiter], waiter
        self.listings += 1
        return Miss.LIST

    def finish(self, token: int) -> list[W]:
        """The listing `token` (the value of `listings` when it began) ended, with its answer, a
        failure or its wait running out: its waiters, to serve their requests again. A later call for
        the same listing, or one for a listing already replaced, answers nobody."""
        if token != self.listings or self._waiters is None:
            return []
        waiters, self._waiters, self._owner = self._waiters, None, None
        return waiters

    def abandon(self, owner: W) -> list[W]:
        """`owner`'s connection closed: its listing, if under way, ends unanswered."""
        return self.finish(self.listings) if self._waiters is not None and self._owner is owner else []
