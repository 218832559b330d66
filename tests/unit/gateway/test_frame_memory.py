"""The gateway-wide pool of large frames' memory (Kafka's queued.max.request.bytes): bounded, first
come first served, nothing kept by a connection that left."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gateway.config import GatewayConfig
from gateway.frame_memory import DEFAULT_QUEUED_MAX_REQUEST_BYTES, FrameMemory, FrameMemoryPool
from gateway.framing import SCRATCH_BYTES, FrameReader


def accounts(pool: FrameMemoryPool, n: int) -> tuple[list[FrameMemory], list[int]]:
    granted: list[int] = []
    return [pool.connection(lambda i=i: granted.append(i)) for i in range(n)], granted


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


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.sampled_from(["reserve", "release", "close"]),
                          st.integers(1, 100)), max_size=60))
def test_the_pool_never_exceeds_its_capacity_and_counts_exactly_what_is_held(
    ops: list[tuple[int, str, int]],
) -> None:
    pool = FrameMemoryPool(100)
    conns, _ = accounts(pool, 5)
    for n, op, size in ops:
        conn = conns[n]
        if op == "reserve":
            conn.reserve(size)
        elif op == "release":
            conn.release()
        else:
            conn.close()
            conns[n] = pool.connection(lambda: None)
        assert pool.used == sum(c.held for c in conns) <= pool.capacity
        assert pool.waiting == sum(1 for c in conns if c.wanted)
        # Nobody waits while the head of the line would fit: memory is never left idle before it.
        assert not conns or all(c.wanted == 0 for c in conns) or pool.used + next(
            c.wanted for c in pool._line) > pool.capacity
    for conn in conns:
        conn.close()
    assert pool.used == 0 and pool.waiting == 0


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
