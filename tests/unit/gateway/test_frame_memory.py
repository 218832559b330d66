"""The gateway-wide pool of large frames' memory (Kafka's queued.max.request.bytes): bounded, first
come first served, one client address at most its share, nothing kept by a connection that left."""

from __future__ import annotations

from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gateway.config import GatewayConfig
from gateway.frame_memory import (
    DEFAULT_QUEUED_MAX_REQUEST_BYTES,
    FrameMemory,
    FrameMemoryPool,
    default_share,
    large_frame_deadline_s,
)
from gateway.framing import SCRATCH_BYTES, FrameReader


def accounts(pool: FrameMemoryPool, n: int, sources: str = "") -> tuple[list[FrameMemory], list[int]]:
    """`n` accounts; `sources`: the source of each (one letter each; default: all of source "")."""
    granted: list[int] = []
    return [pool.connection(lambda i=i: granted.append(i), sources[i] if sources else "")
            for i in range(n)], granted


def test_memory_is_reserved_up_to_the_capacity_and_handed_on_in_order_when_it_returns() -> None:
    pool = FrameMemoryPool(100)
    (a, b, c, d), granted = accounts(pool, 4)
    assert a.reserve(60) and (pool.used, a.held) == (60, 60)
    assert not b.reserve(50)  # 110 > 100: b waits
    assert not c.reserve(10)  # would fit, but b waits already: no passing
    assert not b.reserve(50)  # asking again does not queue twice
    assert (pool.used, pool.waiting, pool.waits) == (60, 2, 2)
    a.release()
    assert granted == [1, 2] and (pool.used, b.held, c.held) == (60, 50, 10)  # b, then c (it fits too)
    assert b.reserve(50) and c.reserve(10)  # the grant is theirs: no second reservation
    assert pool.used == 60
    assert not d.reserve(45)
    b.release()
    assert granted == [1, 2, 3] and pool.used == 55
    c.release()
    d.release()
    assert (pool.used, pool.peak, pool.waiting) == (0, 60, 0)


def test_a_connection_that_leaves_returns_what_it_held_and_its_place_in_line() -> None:
    pool = FrameMemoryPool(100)
    (a, b, c), granted = accounts(pool, 3)
    assert a.reserve(90)
    assert not b.reserve(80)
    assert not c.reserve(10)
    b.close()  # left while waiting: c, behind it, now gets the 10 that were free all along
    assert granted == [2] and pool.used == 100 and pool.waiting == 0
    a.close()  # left while holding (a frame half read): its bytes return
    assert pool.used == 10
    a.close()
    assert pool.used == 10  # idempotent
    assert not a.reserve(1)  # a closed account takes nothing
    c.close()
    assert pool.used == 0


def test_a_connection_that_leaves_while_its_frame_is_still_read_keeps_it_counted_until_released() -> None:
    pool = FrameMemoryPool(100)
    (a, b), granted = accounts(pool, 2)
    assert a.reserve(70)
    assert not b.reserve(40)
    a.close(keep_held=True)  # an admin handler still reads a's frame on its thread
    assert (pool.used, a.held, granted) == (70, 70, [])
    assert not a.reserve(1)  # closed all the same
    a.release()  # the handler is done
    assert (pool.used, a.held, granted) == (40, 0, [1])
    a.close()
    assert pool.used == 40  # nothing returned twice


def test_a_grant_not_yet_used_is_returned_when_its_connection_leaves() -> None:
    pool = FrameMemoryPool(10)
    (a, b), granted = accounts(pool, 2)
    assert a.reserve(10)
    assert not b.reserve(10)
    a.release()
    assert granted == [1] and b.held == 10
    b.close()
    assert pool.used == 0


def test_one_source_holds_at_most_its_share_and_does_not_hold_up_the_others() -> None:
    pool = FrameMemoryPool(100, share=50)
    (a1, a2, a3, b, c), granted = accounts(pool, 5, "aaabc")
    assert a1.reserve(40)
    assert not a2.reserve(30)  # 70 > a's share of 50: a2 waits for a's memory
    assert (pool.waits, pool.share_waits) == (1, 1) and a2.waits_for_share and not a1.waits_for_share
    assert not a3.reserve(5)  # would fit a's share, but a2 waits already: no passing within a source
    assert b.reserve(50)  # another source is not held up by a's connections waiting
    assert (pool.used, pool.used_by("a"), pool.used_by("b"), pool.waiting) == (90, 40, 50, 2)
    assert not c.reserve(20)  # the pool is full: c waits, and is now the one nobody passes
    assert not c.waits_for_share and pool.share_waits == 1
    b.release()  # 50 return: c (its source has room) gets them; a's wait for a's memory
    assert granted == [4] and (pool.used, c.held, a2.wanted) == (60, 20, 30)
    a1.release()  # a's memory returns: its connections get it, in their order
    assert granted == [4, 1, 2] and (pool.used_by("a"), a2.held, a3.held) == (35, 30, 5)
    for account in (a2, a3, c):
        account.close()
    assert (pool.used, pool.waiting, pool.used_by("a")) == (0, 0, 0)


def test_a_connection_whose_source_has_room_but_the_pool_has_not_is_passed_by_nobody() -> None:
    pool = FrameMemoryPool(100, share=60)
    (a, b, c, d), granted = accounts(pool, 4, "abcd")
    assert a.reserve(60)
    assert b.reserve(30)
    assert not c.reserve(50)  # c's source has room, the pool has not: c waits at the head
    assert not d.reserve(10)  # would fit, but may not pass c
    a.release()
    assert granted == [2, 3] and pool.used == 90
    # A waiting connection whose source is at its share does not stall the line.
    (a2, a3, e), granted2 = accounts(pool, 3, "aae")
    b.release()  # 60 used (c 50, d 10)
    assert a2.reserve(30)
    assert not a3.reserve(40)  # 70 > a's share of 60: waits for a's memory, though the pool has 10 free
    assert e.reserve(10) and granted2 == []  # a3 does not stall the line: e takes the last 10
    assert (pool.used, pool.waiting) == (100, 1)
    for account in (c, d, a2, a3, e):
        account.close()
    assert pool.used == 0


class CountedSource(str):
    """A source key that counts how often the pool looks it up (each lookup hashes it)."""

    lookups = 0

    def __hash__(self) -> int:
        CountedSource.lookups += 1
        return str.__hash__(self)


def test_memory_returning_to_one_address_costs_nothing_per_connection_of_another_waiting_for_its_share() -> None:
    """One address's 1,000 connections (an address is allowed 1,000 by default) each wait for its share, which
    it holds: another address's large frames come and go. Handing their memory on must not walk those
    waiting connections at every return, or each of them would add to the loop's work for every large
    request of every other client (about 0.6 ms a return with 10,000 of them, the connection limit)."""
    pool = FrameMemoryPool(100, share=50)
    hog = CountedSource("a")
    holder = pool.connection(lambda: None, hog)
    assert holder.reserve(50)
    waiting = [pool.connection(lambda: None, hog) for _ in range(1_000)]
    for account in waiting:
        assert not account.reserve(10)
    other = pool.connection(lambda: None, "b")
    CountedSource.lookups = 0
    for _ in range(10):
        assert other.reserve(40)
        other.release()
    assert CountedSource.lookups < 100, CountedSource.lookups  # not ~1,000 a return
    holder.release()  # the address's own memory returns: its connections get it in their order
    assert [a.held for a in waiting[:5]] == [10] * 5 and pool.waiting == 995
    for account in (holder, *waiting, other):
        account.close()
    assert (pool.used, pool.waiting) == (0, 0)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["reserve", "release", "close"]),
                          st.integers(1, 100)), max_size=60),
       st.sampled_from([None, 30, 60]))
def test_the_pool_never_exceeds_its_capacity_nor_a_share_and_counts_exactly_what_is_held(
    ops: list[tuple[int, str, int]], share: int | None,
) -> None:
    pool = FrameMemoryPool(100, share)
    sources = "aabbcd"
    conns, _ = accounts(pool, 6, sources)
    for n, op, size in ops:
        conn = conns[n]
        if op == "reserve":
            conn.reserve(size)
        elif op == "release":
            conn.release()
        else:
            conn.close()
            conns[n] = pool.connection(lambda: None, sources[n])
        assert pool.used == sum(c.held for c in conns) <= pool.capacity
        for source in set(sources):
            assert pool.used_by(source) == sum(c.held for c in conns if c.source == source) <= pool.share
        assert pool.waiting == sum(1 for c in conns if c.wanted)
        # Memory is never left idle before a connection that could take it: walking the line as
        # `_grant` does, the first connection whose source has room finds no room in the pool.
        # That one stalls the line: no newcomer passes it (and with no such one, nothing stalls it).
        blocked: set[str] = set()
        stalled = False
        for waiting in sorted((c for c in conns if c.wanted), key=lambda c: c.turn):  # the line, in its order
            if waiting.source in blocked:
                continue
            if pool.used_by(waiting.source) + waiting.wanted > pool.share:
                blocked.add(waiting.source)
                continue
            assert pool.used + waiting.wanted > pool.capacity
            stalled = True
            break
        assert pool._stalled == stalled
    for conn in conns:
        conn.close()
    assert pool.used == 0 and pool.waiting == 0


class LineModel:
    """The pool's rules as one line walked from its head at every change: the reference for the pool,
    which keeps the line per source with a heap of the sources' first connections instead."""

    def __init__(self, capacity: int, share: int | None) -> None:
        self.capacity, self.share = capacity, min(share or capacity, capacity)
        self.held: dict[int, int] = {}
        self.source: dict[int, str] = {}
        self.line: list[tuple[int, int]] = []  # (account, bytes wanted), in arrival order
        self.granted: list[int] = []  # accounts granted while they waited, in the order they were told

    def used(self, source: str | None = None) -> int:
        return sum(n for i, n in self.held.items() if source is None or self.source[i] == source)

    def grant(self) -> bool:
        """Walks the line; answers whether it stopped at one whose source has room (nobody passes it)."""
        blocked: set[str] = set()
        for i, wanted in list(self.line):
            source = self.source[i]
            if source in blocked or self.used(source) + wanted > self.share:
                blocked.add(source)
                continue
            if self.used() + wanted > self.capacity:
                return True
            self.held[i] = wanted
            self.line.remove((i, wanted))
            self.granted.append(i)
        return False

    def reserve(self, i: int, nbytes: int) -> bool:
        if self.held.get(i, 0) >= nbytes:
            return True
        if any(j == i for j, _ in self.line):
            return False
        self.release(i)
        told = len(self.granted)
        self.line.append((i, nbytes))
        self.grant()
        if self.granted[told:] == [i]:  # at once: not told through the callback
            self.granted.pop()
            return True
        return False

    def release(self, i: int) -> None:
        if self.held.pop(i, 0):
            self.grant()

    def close(self, i: int) -> None:
        self.line = [(j, n) for j, n in self.line if j != i]
        self.held.pop(i, None)
        self.grant()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.sampled_from(["reserve", "release", "close"]),
                          st.integers(1, 100)), max_size=80),
       st.sampled_from([None, 30, 50, 60]))
def test_the_pool_grants_as_a_walk_of_one_line_would(ops: list[tuple[int, str, int]], share: int | None) -> None:
    pool, model = FrameMemoryPool(100, share), LineModel(100, share)
    sources = "aabbccde"
    told: list[int] = []
    ids = list(range(8))  # the model's id of each slot's current account (a closed one is replaced)
    conns = [pool.connection(partial(told.append, i), sources[i]) for i in ids]
    for i in ids:
        model.source[i] = sources[i]
    for n, op, size in ops:
        conn, i = conns[n], ids[n]
        if op == "reserve":
            assert conn.reserve(size) == model.reserve(i, size)
        elif op == "release":
            conn.release()
            model.release(i)
        else:
            conn.close()
            model.close(i)
            ids[n] = i = len(model.source)
            model.source[i] = sources[n]
            conns[n] = pool.connection(partial(told.append, i), sources[n])
        assert told == model.granted
        assert [(c.held, c.wanted) for c in conns] == [
            (model.held.get(j, 0), next((w for k, w in model.line if k == j), 0)) for j in ids]
        assert (pool.used, pool.waiting) == (model.used(), len(model.line))
        assert pool._stalled == model.grant()


def test_default_share_and_the_large_frame_deadline() -> None:
    mib = 1024 * 1024
    assert default_share(512 * mib, 100 * mib) == 100 * mib  # one request of the largest size fits
    assert default_share(512 * mib, mib) == 64 * mib  # else an eighth
    assert default_share(mib, mib) == mib
    assert FrameMemoryPool(100, share=500).share == 100  # never above the capacity
    with pytest.raises(ValueError):
        FrameMemoryPool(100, share=0)
    assert large_frame_deadline_s(mib, 256 * 1024) == 34.0  # 30 s, plus 4 s at 256 KiB/s
    assert large_frame_deadline_s(100 * mib, 256 * 1024) == 430.0
    assert large_frame_deadline_s(1000, 1000, grace_s=0.5) == 1.5


def test_sizes() -> None:
    assert DEFAULT_QUEUED_MAX_REQUEST_BYTES == 512 * 1024 * 1024
    with pytest.raises(ValueError):
        FrameMemoryPool(0)


def test_the_reader_allocates_a_large_frame_only_once_the_pool_has_room() -> None:
    pool = FrameMemoryPool(2 * SCRATCH_BYTES)
    (other, mine), granted = accounts(pool, 2)
    reader = FrameReader(4 * SCRATCH_BYTES)
    reader.memory = mine
    size = SCRATCH_BYTES + 10
    payload = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    assert other.reserve(SCRATCH_BYTES + SCRATCH_BYTES // 2)
    data = size.to_bytes(4, "big") + payload
    assert reader.feed(data[:1000]) == []
    assert reader.awaiting_memory and not reader.needs_bytes  # its size is known; nothing allocated
    assert reader.held_bytes == reader.scratch_bytes and mine.wanted == size
    assert reader.next_frame() is None  # asking again does not allocate either
    other.release()
    assert granted == [1] and mine.held == size
    assert reader.next_frame() is None  # now allocated; the rest is read into the frame's own buffer
    assert not reader.awaiting_memory and reader.needs_bytes
    assert reader.feed(data[1000:]) == [payload]
    assert pool.used == size  # held until the caller served it
    mine.release()
    assert pool.used == 0
    # Small frames never touch the pool.
    assert reader.feed((3).to_bytes(4, "big") + b"abc") == [b"abc"] and pool.used == 0 and pool.waits == 1


def test_settings_default_and_refusal() -> None:
    assert GatewayConfig().queued_max_request_bytes == 512 * 1024 * 1024
    assert GatewayConfig(max_request_bytes=1 << 20, queued_max_request_bytes=1 << 20)
    with pytest.raises(ValidationError, match=r"queued_max_request_bytes \(1048575\) must be at least "
                                              r"gateway.max_request_bytes \(1048576\)"):
        GatewayConfig(max_request_bytes=1 << 20, queued_max_request_bytes=(1 << 20) - 1)
    with pytest.raises(ValidationError, match=r"at least gateway\.max_request_bytes"):
        GatewayConfig(max_request_bytes=600 * 1024 * 1024)  # above the default pool: raise both
    with pytest.raises(ValidationError):
        GatewayConfig(queued_max_request_bytes=0)


def test_per_ip_share_and_minimum_rate_settings() -> None:
    config = GatewayConfig()
    assert config.queued_max_request_bytes_per_ip is None  # the default share: `default_share`
    assert config.large_request_min_bytes_per_s == 256 * 1024
    assert GatewayConfig(max_request_bytes=1 << 20, queued_max_request_bytes_per_ip=1 << 20)
    for share in (1 << 19, 513 * 1024 * 1024):
        with pytest.raises(ValidationError, match=r"queued_max_request_bytes_per_ip \(\d+\) must be between "
                                                  r"gateway.max_request_bytes \(1048576\) and "
                                                  r"gateway.queued_max_request_bytes \(536870912\)"):
            GatewayConfig(max_request_bytes=1 << 20, queued_max_request_bytes_per_ip=share)
    with pytest.raises(ValidationError):
        GatewayConfig(large_request_min_bytes_per_s=0)
