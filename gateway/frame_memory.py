"""A gateway-wide bound on the bytes of large request frames being read or served: Kafka's
`queued.max.request.bytes` (`SocketServer` hands the `Selector` a `MemoryPool`; a channel whose next
receive cannot get memory is muted, not closed, and is read again once memory returns).

What counts: the buffer `gateway.framing.FrameReader` gives a frame larger than its scratch buffer's
ceiling (256 KiB), from the moment its size prefix is read until the gateway has served the frame
(answered it, or forwarded it and the upstream transport's buffer is back under its high-water mark
and the upstream connection is up: `gateway.proxy.ClientConnection._release_served_frame`) or the
connection closed (but a frame an admin handler still reads on its thread stays counted until the
handler is done). Smaller frames live in the
connection's scratch buffer, which is bounded per connection already. Frames read before a client's
login (at most 512 KiB each) do not count, as Kafka's `SaslServerAuthenticator` reads them outside the
pool: an unauthenticated client cannot take memory that logged-in producers wait for.

Fairness: connections that could not get memory wait in line (first come, first served), and memory
that returns goes to the head of the line first; a newcomer does not pass a connection already waiting,
even when its smaller frame would fit (so a large frame cannot be starved by a stream of small ones).

Shares: the connections of one client address (`gateway.connection_limits.share_key`: an IPv6 client
by its /64, clients behind one NAT together) hold at most `share` bytes together
(`queued_max_request_bytes_per_ip`). A connection whose address holds its share waits for its own
address's memory to return, and does not hold up the line meanwhile: the line's "head" is the first
connection whose address has room for its frame, and within one address the order stays first come,
first served. So a client that trickles large frames (its size prefix, then a few bytes a second) holds
its address's share, not the whole pool; the gateway also closes a connection whose large frame does
not arrive in time (`large_frame_deadline_s`).

Departures from Kafka: Kafka's default pool is unbounded (`queued.max.request.bytes = -1`), and its
`SimpleMemoryPool` may overshoot its size by one allocation when it is not strict; the gateway's pool is
always bounded and never exceeds its capacity (`used <= capacity` at every instant). Kafka's
`MemoryPool` has no per-client share and its `Selector` no deadline for a receive in progress: one
client's slow large receives can hold a broker's whole pool. Both are deliberate additions here.

Everything runs on the event loop's thread (no locks).
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

# One address's default share of the pool: an eighth, as the SASL step queue's per-address share, but
# never less than one request of the largest size (`default_share`).
DEFAULT_SHARE_DIVISOR: Final = 8
# A large frame's body must arrive within this much reading time after its memory is granted, plus the
# time it takes at `DEFAULT_LARGE_REQUEST_MIN_BYTES_PER_S` (`large_frame_deadline_s`). 30 s is the Java
# client's default `request.timeout.ms`, which counts from the moment the request is handed to the
# network layer (`InFlightRequests.hasExpiredRequest`: `now - sendTimeMs`), its sending included: such a
# client has given up on a request (and closed its connection) whose bytes took longer than that to send.
LARGE_FRAME_GRACE_S: Final = 30.0
# 256 KiB/s (2 Mbit/s): a 1 MiB request gets 34 s, a 100 MiB one about 7 minutes.
DEFAULT_LARGE_REQUEST_MIN_BYTES_PER_S: Final = 256 * 1024


def default_share(capacity: int, max_request_bytes: int) -> int:
    """One client address's default share of a pool of `capacity`: an eighth, but at least
    `max_request_bytes` (a request of the largest size must fit in one share), at most `capacity`."""
    return min(max(capacity // DEFAULT_SHARE_DIVISOR, max_request_bytes), capacity)


def large_frame_deadline_s(size: int, min_bytes_per_s: int, grace_s: float = LARGE_FRAME_GRACE_S) -> float:
    """The reading time a large frame of `size` bytes gets for its body once its memory is granted:
    `grace_s`, plus its size at `min_bytes_per_s`. Time the gateway itself does not read the
    connection (a pause for backpressure, a re-authentication) does not count."""
    return grace_s + size / min_bytes_per_s


# 512 MiB: five requests of the largest size (`max_request_bytes`, 100 MiB), or 512 producers' 1 MiB
# batches (Java's and librdkafka's default `max.request.size` / `message.max.bytes`) at once.
DEFAULT_QUEUED_MAX_REQUEST_BYTES: Final = 512 * 1024 * 1024


class FrameMemoryPool:
    def __init__(self, capacity: int, share: int | None = None) -> None:
        """`share`: the most one source (a client address group) may hold at once (None: `capacity`)."""
        if capacity <= 0:
            raise ValueError("the frame memory pool's capacity must be positive")
        if share is not None and share <= 0:
            raise ValueError("a source's share of the frame memory pool must be positive")
        self.capacity = capacity
        self.share = min(share, capacity) if share is not None else capacity
        self.used = 0
        self.peak = 0  # the most ever used at once (for tests and metrics; never above `capacity`)
        self.waits = 0  # how often a connection had to wait for memory
        self.share_waits = 0  # of those, how often because its source held its share
        self._used_by: dict[str, int] = {}  # what each source holds (sources holding nothing left out)
        # The line, kept per source: each source's waiting connections in their order (first come, first
        # served within a source), and the order of arrival across sources (`FrameMemory.turn`).
        self._queues: dict[str, OrderedDict[FrameMemory, None]] = {}
        self._waiting = 0
        self._turns = itertools.count()
        # The first connection of each source whose source had room for it when it got there, by its turn:
        # `_grant` serves the line in this order, and the one at the top (while any) waits for the pool
        # itself, so nobody passes it. A connection whose source holds its share is in no heap: it gets in
        # when its source's memory returns (`_give_back`), so memory returning costs nothing per
        # connection waiting for its own source's share (a walk of the whole line would: one client's
        # many waiting connections would make every other client's large request dearer). Entries of
        # connections that left stay until they reach the top (`_left_in_heap` of them; the heap is
        # rebuilt when they are the most).
        self._heads: list[tuple[int, FrameMemory]] = []
        self._left_in_heap = 0

    def connection(self, on_granted: Callable[[], None], source: str = "") -> FrameMemory:
        """One connection's account, drawing on `source`'s share; `on_granted` is called (on the loop)
        when memory it waited for is reserved for it."""
        return FrameMemory(self, on_granted, source)

    @property
    def waiting(self) -> int:
        """Connections waiting for memory."""
        return self._waiting

    @property
    def _stalled(self) -> bool:
        """A connection whose source has room waits for the pool itself: nobody may pass it (a newcomer
        neither). After every change `_grant` has left such a one at the top of `_heads`, if any."""
        return bool(self._heads)

    def used_by(self, source: str) -> int:
        """The bytes `source`'s connections hold (at most `share`)."""
        return self._used_by.get(source, 0)

    def _has_room(self, source: str, nbytes: int) -> bool:
        return self._used_by.get(source, 0) + nbytes <= self.share

    def _take(self, source: str, nbytes: int) -> None:
        self.used += nbytes
        self.peak = max(self.peak, self.used)
        self._used_by[source] = self._used_by.get(source, 0) + nbytes

    def _try(self, source: str, nbytes: int) -> bool:
        """Takes `nbytes` for `source` if `_grant` would hand them to a newcomer at the end of the line
        now: nobody it may not pass waits (a connection of its own source, or one waiting for the pool
        itself), and both its source's share and the pool have room."""
        if (self._heads or source in self._queues or not self._has_room(source, nbytes)
                or self.used + nbytes > self.capacity):
            return False
        self._take(source, nbytes)
        return True

    def _push_head(self, source: str) -> None:
        """`source`'s first waiting connection, if any, gets in the heap (once) when its source has room."""
        queue = self._queues.get(source)
        if queue is None:
            return
        head = next(iter(queue))
        if not head.in_heap and self._has_room(source, head.wanted):
            head.in_heap = True
            heapq.heappush(self._heads, (head.turn, head))

    def _wait(self, account: FrameMemory) -> None:
        """`account` (which `_try` refused) joins the end of the line: at the end of its source's queue,
        and in the heap if it is its source's first and its source has room (then it waits for the pool
        itself: `_try` found room everywhere else)."""
        self.waits += 1
        account.turn = next(self._turns)
        queue = self._queues.get(account.source)
        if queue is None:
            queue = self._queues[account.source] = OrderedDict()
        queue[account] = None
        self._waiting += 1
        if len(queue) == 1:
            self._push_head(account.source)

    def _unqueue(self, account: FrameMemory) -> None:
        """`account` leaves its source's queue (granted, or gone); the next one there may get in the heap."""
        queue = self._queues[account.source]
        first = next(iter(queue)) is account
        del queue[account]
        self._waiting -= 1
        if not queue:
            del self._queues[account.source]
        elif first:
            self._push_head(account.source)

    def _leave(self, account: FrameMemory) -> None:
        if account not in self._queues.get(account.source, ()):
            return
        if account.in_heap:
            account.in_heap = False
            self._left_in_heap += 1
        self._unqueue(account)
        if self._left_in_heap > 64 and 2 * self._left_in_heap > len(self._heads):
            self._heads = [entry for entry in self._heads if entry[1].in_heap]
            heapq.heapify(self._heads)
            self._left_in_heap = 0
        self._grant()  # the one that left may have blocked the line

    def _give_back(self, source: str, nbytes: int) -> None:
        self.used -= nbytes
        left = self._used_by[source] - nbytes
        if left:
            self._used_by[source] = left
        else:
            del self._used_by[source]
        self._push_head(source)  # its source's first waiting connection may have room now
        self._grant()

    def _grant(self) -> None:
        """Hands memory to the connections waiting, in their order: each whose source has room for its
        frame gets it while the pool has room too; the first whose source has room but the pool has not
        stops the pass (nobody behind it passes it). A connection whose source is at its share is
        passed, and so are the later ones of that source (first come, first served within a source):
        they are not in the heap this walks."""
        heads = self._heads
        granted: list[FrameMemory] = []
        while heads:
            account = heads[0][1]
            if not account.in_heap:  # it left the line
                heapq.heappop(heads)
                self._left_in_heap -= 1
                continue
            if self.used + account.wanted > self.capacity:
                break  # it waits for the pool: nobody passes it
            heapq.heappop(heads)
            account.in_heap = False
            self._take(account.source, account.wanted)
            account.held, account.wanted = account.wanted, 0
            self._unqueue(account)  # its source's next one, if it has room, gets in the heap
            granted.append(account)
        for account in granted:  # once the pool is consistent: a callback may reserve or release again
            account._on_granted()


class FrameMemory:
    """One connection's share of the pool: the bytes held for its large frame (at most one at a time:
    the gateway reads a connection's next frame only once the previous one is served), or the bytes it
    waits for."""

    __slots__ = ("_on_granted", "_pool", "closed", "held", "in_heap", "source", "turn", "wanted")

    def __init__(self, pool: FrameMemoryPool, on_granted: Callable[[], None], source: str = "") -> None:
        self._pool = pool
        self._on_granted = on_granted
        # The share it draws on (`gateway.connection_limits.share_key` of the client's address); set
        # before it holds or waits for anything.
        self.source = source
        self.held = 0
        self.wanted = 0  # > 0 while waiting in line
        self.closed = False
        self.turn = 0  # its place in the line while it waits (`FrameMemoryPool._wait`)
        self.in_heap = False  # among the pool's `_heads` (`FrameMemoryPool._grant`)

    def reserve(self, nbytes: int) -> bool:
        """True when `nbytes` are held for this connection: taken now, or granted while it waited.
        False: it waits in line (once), and `on_granted` is called when they are held."""
        if self.closed:
            return False
        if self.held:
            if self.held >= nbytes:
                return True
            self.release()  # the frame in hand is not this one (cannot happen with one frame at a time)
        if self.wanted:
            return False
        if self._pool._try(self.source, nbytes):
            self.held = nbytes
            return True
        self.wanted = nbytes
        if self.waits_for_share:
            self._pool.share_waits += 1
        self._pool._wait(self)
        return False

    @property
    def waits_for_share(self) -> bool:
        """It waits because its source holds too much of its share, a share smaller than the pool (with
        a share as large as the pool, what a source holds is the pool's to bound)."""
        pool = self._pool
        return bool(self.wanted) and pool.share < pool.capacity and not pool._has_room(self.source, self.wanted)

    def release(self) -> None:
        """The frame was served: its bytes go back to the pool (and to whoever waits for them)."""
        held, self.held = self.held, 0
        if held:
            self._pool._give_back(self.source, held)

    def close(self, *, keep_held: bool = False) -> None:
        """The connection is gone: leaves the line, and returns what it held, unless `keep_held` (its
        frame is still read elsewhere: the caller's `release` returns it when that ends). Idempotent."""
        self.closed = True
        if self.wanted:
            self.wanted = 0
            self._pool._leave(self)
        if not keep_held:
            self.release()
