"""A gateway-wide bound on the bytes of large request frames being read or served: Kafka's
`queued.max.request.bytes` (`SocketServer` hands the `Selector` a `MemoryPool`; a channel whose next
receive cannot get memory is muted, not closed, and is read again once memory returns).

What counts: the buffer `gateway.framing.FrameReader` gives a frame larger than its scratch buffer's
ceiling (256 KiB), from the moment its size prefix is read until the gateway has served the frame
(answered it, or forwarded it and the upstream transport's buffer is back under its high-water mark:
`gateway.proxy.ClientConnection._release_served_frame`) or the connection closed (but a frame an admin
handler still reads on its thread stays counted until the handler is done). Smaller frames live in the
connection's scratch buffer, which is bounded per connection already. Frames read before a client's
login (at most 512 KiB each) do not count, as Kafka's `SaslServerAuthenticator` reads them outside the
pool: an unauthenticated client cannot take memory that logged-in producers wait for.

Fairness: connections that could not get memory wait in line (first come, first served), and memory
that returns goes to the head of the line first; a newcomer does not pass a connection already waiting,
even when its smaller frame would fit (so a large frame cannot be starved by a stream of small ones).

Departures from Kafka: Kafka's default pool is unbounded (`queued.max.request.bytes = -1`), and its
`SimpleMemoryPool` may overshoot its size by one allocation when it is not strict; the gateway's pool is
always bounded and never exceeds its capacity (`used <= capacity` at every instant).

Everything runs on the event loop's thread (no locks).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Final

# 512 MiB: five requests of the largest size (`max_request_bytes`, 100 MiB), or 512 producers' 1 MiB
# batches (Java's and librdkafka's default `max.request.size` / `message.max.bytes`) at once.
DEFAULT_QUEUED_MAX_REQUEST_BYTES: Final = 512 * 1024 * 1024


class FrameMemoryPool:
    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError("the frame memory pool's capacity must be positive")
        self.capacity = capacity
        self.used = 0
        self.peak = 0  # the most ever used at once (for tests and metrics; never above `capacity`)
        self.waits = 0  # how often a connection had to wait for memory
        self._line: deque[FrameMemory] = deque()

    def connection(self, on_granted: Callable[[], None]) -> FrameMemory:
        """One connection's account; `on_granted` is called (on the loop) when memory it waited for is
        reserved for it."""
        return FrameMemory(self, on_granted)

    @property
    def waiting(self) -> int:
        """Connections waiting for memory."""
        return len(self._line)

    def _take(self, nbytes: int) -> None:
        self.used += nbytes
        self.peak = max(self.peak, self.used)

    def _try(self, nbytes: int) -> bool:
        if self._line or self.used + nbytes > self.capacity:
            return False
        self._take(nbytes)
        return True

    def _wait(self, account: FrameMemory) -> None:
        self.waits += 1
        self._line.append(account)

    def _leave(self, account: FrameMemory) -> None:
        try:
            self._line.remove(account)
        except ValueError:
            return
        self._grant()  # the one that left may have blocked the line

    def _give_back(self, nbytes: int) -> None:
        self.used -= nbytes
        self._grant()

    def _grant(self) -> None:
        """Hands returned memory to the connections waiting, in their order, as long as it suffices for
        the one at the head."""
        line = self._line
        while line and self.used + line[0].wanted <= self.capacity:
            account = line.popleft()
            self._take(account.wanted)
            account.granted()


class FrameMemory:
    """One connection's share of the pool: the bytes held for its large frame (at most one at a time:
    the gateway reads a connection's next frame only once the previous one is served), or the bytes it
    waits for."""

    __slots__ = ("_on_granted", "_pool", "closed", "held", "wanted")

    def __init__(self, pool: FrameMemoryPool, on_granted: Callable[[], None]) -> None:
        self._pool = pool
        self._on_granted = on_granted
        self.held = 0
        self.wanted = 0  # > 0 while waiting in line
        self.closed = False

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
        if self._pool._try(nbytes):
            self.held = nbytes
            return True
        self.wanted = nbytes
        self._pool._wait(self)
        return False

    def granted(self) -> None:
        self.held, self.wanted = self.wanted, 0
        self._on_granted()

    def release(self) -> None:
        """The frame was served: its bytes go back to the pool (and to whoever waits for them)."""
        held, self.held = self.held, 0
        if held:
            self._pool._give_back(held)

    def close(self, *, keep_held: bool = False) -> None:
        """The connection is gone: leaves the line, and returns what it held, unless `keep_held` (its
        frame is still read elsewhere: the caller's `release` returns it when that ends). Idempotent."""
        self.closed = True
        if self.wanted:
            self.wanted = 0
            self._pool._leave(self)
        if not keep_held:
            self.release()
