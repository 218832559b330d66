"""Frame reading: whole frames out whatever the chunking, pulled one at a time; bad sizes close the
connection after the frames before them; the limit in force when a frame is reached is the one applied."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.framing import INITIAL_SCRATCH_BYTES, SCRATCH_BYTES, FrameError, FrameReader


def framed(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def test_splits_concatenated_frames_and_keeps_the_remainder() -> None:
    r = FrameReader(1024)
    data = framed(b"abc") + framed(b"") + framed(b"defg")[:5]
    assert r.feed(data) == [b"abc", b""]
    assert r.buffered == 5
    assert r.feed(framed(b"defg")[5:]) == [b"defg"]
    assert r.buffered == 0


def test_a_frame_larger_than_the_scratch_buffer_is_read_into_its_own_buffer() -> None:
    r = FrameReader(10_000, scratch_bytes=64)
    big = bytes(range(256)) * 20
    data = framed(b"small") + framed(big) + framed(b"after")
    out = r.feed(data)
    assert out == [b"small", big, b"after"]
    assert isinstance(out[1], bytearray)  # handed over without a copy


def test_the_kernel_fills_large_frames_in_place() -> None:
    r = FrameReader(10_000, scratch_bytes=64)
    payload = b"x" * 1000
    stream = framed(payload)
    first = r.get_buffer()
    first[:10] = stream[:10]
    r.buffer_updated(10)
    assert r.next_frame() is None and r.needs_bytes
    tail = r.get_buffer()
    assert len(tail) == 1000 - 6  # exactly the rest of the frame
    tail[:] = stream[10:]
    r.buffer_updated(len(tail))
    assert not r.needs_bytes
    assert r.next_frame() == payload
    assert r.needs_bytes


def test_negative_size_is_refused() -> None:
    with pytest.raises(FrameError, match="negative"):
        FrameReader(1024).feed(b"\xff\xff\xff\xfe")


def test_size_above_the_limit_is_refused_before_the_body_arrives() -> None:
    r = FrameReader(10)
    assert r.feed(framed(b"x" * 10)) == [b"x" * 10]
    with pytest.raises(FrameError, match="exceeds"):
        r.feed((11).to_bytes(4, "big"))


def test_frames_before_an_oversized_one_in_the_same_read_are_pulled_first() -> None:
    r = FrameReader(10)
    r.get_buffer()[:18] = framed(b"one") + framed(b"two") + (11).to_bytes(4, "big")
    r.buffer_updated(18)
    assert (r.next_frame(), r.next_frame()) == (b"one", b"two")
    with pytest.raises(FrameError) as refused:
        r.next_frame()
    assert (refused.value.size, refused.value.limit) == (11, 10)
    assert refused.value.kafka_message == "Invalid receive (size = 11 larger than 10)"


def test_a_negative_size_has_kafkas_message() -> None:
    with pytest.raises(FrameError) as refused:
        FrameReader(10).feed((-5).to_bytes(4, "big", signed=True))
    assert refused.value.kafka_message == "Invalid receive (size = -5)"


def test_the_limit_in_force_when_a_frame_is_reached_applies_to_it() -> None:
    # One read holds a small frame and a large one: the large one is checked only when it is pulled,
    # under the limit the caller set after the small one (a login raising it, a re-authentication
    # lowering it).
    data = framed(b"login") + framed(b"x" * 600)
    raised = FrameReader(100, scratch_bytes=4096)
    raised.get_buffer()[: len(data)] = data
    raised.buffer_updated(len(data))
    assert raised.next_frame() == b"login"
    raised.max_frame_bytes = 1000
    assert raised.next_frame() == b"x" * 600
    lowered = FrameReader(1000, scratch_bytes=4096)
    lowered.get_buffer()[: len(data)] = data
    lowered.buffer_updated(len(data))
    assert lowered.next_frame() == b"login"
    lowered.max_frame_bytes = 100
    with pytest.raises(FrameError):
        lowered.next_frame()


def test_a_large_frames_buffer_is_allocated_only_once_its_size_passed_the_check() -> None:
    r = FrameReader(100, scratch_bytes=64)
    head = framed(b"a") + (1_000_000).to_bytes(4, "big")
    r.get_buffer()[: len(head)] = head
    r.buffer_updated(len(head))
    assert r.held_bytes == 64  # nothing allocated for the announced frame while it is not reached
    assert r.next_frame() == b"a"
    with pytest.raises(FrameError):
        r.next_frame()
    assert r.held_bytes == 64


def test_unread_frames_wait_in_the_scratch_buffer_and_the_socket_is_not_needed() -> None:
    r = FrameReader(1000, scratch_bytes=64)
    assert r.needs_bytes
    data = framed(b"a" * 10) + framed(b"b" * 10)
    r.get_buffer()[: len(data)] = data
    r.buffer_updated(len(data))
    assert not r.needs_bytes  # the caller serves these before it reads again
    assert r.next_frame() == b"a" * 10
    assert not r.needs_bytes
    assert r.next_frame() == b"b" * 10
    assert r.needs_bytes and r.next_frame() is None


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError):
        FrameReader(0)


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=7000), max_size=30),
    scratch=st.sampled_from([16, 64, 1000, 256 * 1024]),
    initial=st.sampled_from([16, 64, 4096]),
)
def test_any_chunking_yields_the_same_frames(payloads: list[bytes], cuts: list[int], scratch: int,
                                             initial: int) -> None:
    stream = b"".join(framed(p) for p in payloads)
    points = sorted({c for c in cuts if c < len(stream)} | {0, len(stream)})
    r = FrameReader(1000, scratch_bytes=scratch, initial_scratch_bytes=initial)
    out: list[bytes] = []
    for a, b in itertools.pairwise(points):
        out.extend(bytes(f) for f in r.feed(stream[a:b]))
    assert out == payloads
    assert r.buffered == 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000), st.sampled_from([16, 128, 4096]))
def test_garbage_only_ever_raises_frame_error_and_memory_stays_bounded(data: bytes, scratch: int) -> None:
    r = FrameReader(512, scratch_bytes=scratch)
    try:
        for i in range(0, len(data), 97):
            r.feed(data[i : i + 97])
    except FrameError:
        return
    assert r.buffered <= max(512, scratch) + 4


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=700), min_size=1, max_size=12),
    limits=st.lists(st.sampled_from([50, 300, 700]), min_size=1, max_size=12),
    chunk=st.integers(min_value=1, max_value=900),
    scratch=st.sampled_from([16, 128, 1024]),
    initial=st.sampled_from([16, 32, 4096]),
)
def test_memory_stays_within_scratch_and_one_frame_of_the_limit_in_force(
    sizes: list[int], limits: list[int], chunk: int, scratch: int, initial: int,
) -> None:
    """The limit changes between frames; whatever the chunking, frames come out in order up to the
    first one over the limit in force when it is reached, and memory never exceeds the scratch buffer
    plus one frame within that limit (the pre-authentication bound)."""
    stream = b"".join(framed(bytes([i % 256]) * n) for i, n in enumerate(sizes))
    r = FrameReader(limits[0], scratch_bytes=scratch, initial_scratch_bytes=initial)
    expected = []
    for i, n in enumerate(sizes):
        if n > limits[i % len(limits)]:
            break
        expected.append(bytes([i % 256]) * n)
    out: list[bytes] = []
    pos = 0
    try:
        while pos < len(stream):
            buf = r.get_buffer()
            assert len(buf) > 0
            n = min(len(buf), chunk, len(stream) - pos)
            buf[:n] = stream[pos : pos + n]
            pos += n
            r.buffer_updated(n)
            while True:
                r.max_frame_bytes = limits[len(out) % len(limits)]
                frame = r.next_frame()
                assert r.held_bytes <= max(scratch, 16) + r.max_frame_bytes
                if frame is None:
                    break
                out.append(bytes(frame))
    except FrameError:
        assert len(out) < len(sizes)
    assert out == expected


def test_an_idle_reader_holds_a_small_scratch_buffer() -> None:
    # 1,000 idle connections (and as many upstream connections) must not cost 256 KiB each.
    r = FrameReader(100 * 1024 * 1024)
    assert r.held_bytes == r.scratch_bytes == INITIAL_SCRATCH_BYTES == 4096


def test_a_frame_under_the_ceiling_grows_the_scratch_buffer_and_arrives_whole() -> None:
    r = FrameReader(1 << 20)
    payload = bytes(range(256)) * 400  # 102,400 bytes: more than the initial buffer, less than the ceiling
    stream = framed(b"first") + framed(payload) + framed(b"after")
    out = [bytes(f) for f in r.feed(stream[:1500])]
    # Its size checked, the frame has room in the scratch buffer (grown for it, under the ceiling).
    assert 4 + len(payload) <= r.scratch_bytes <= SCRATCH_BYTES
    assert r.held_bytes == r.scratch_bytes  # no buffer of its own
    for i in range(1500, len(stream), 1500):  # TCP-sized reads
        out.extend(bytes(f) for f in r.feed(stream[i : i + 1500]))
    assert out == [b"first", payload, b"after"]


def test_reads_that_fill_the_buffer_double_it_up_to_the_ceiling() -> None:
    r = FrameReader(1 << 20, scratch_bytes=64 * 1024)
    stream = framed(b"x" * 100) * 5000  # more than the socket gives at once: every read fills the buffer
    pos, sizes, frames = 0, [r.scratch_bytes], 0
    while pos < len(stream):
        buf = r.get_buffer()
        n = min(len(buf), len(stream) - pos)
        buf[:n] = stream[pos : pos + n]
        pos += n
        r.buffer_updated(n)
        while r.next_frame() is not None:
            frames += 1
        sizes.append(r.scratch_bytes)
    assert frames == 5000
    assert sizes[0] == 4096 and max(sizes) == 64 * 1024
    # It only grows while reads fill it, by doublings, and never past the ceiling.
    assert all(a <= b and b % a == 0 for a, b in itertools.pairwise(sizes)) and sizes[-1] == 64 * 1024


def test_the_scratch_buffer_shrinks_back_once_reads_are_small_again() -> None:
    r = FrameReader(1 << 20)
    r.feed(framed(b"x" * 200_000))
    assert r.scratch_bytes == SCRATCH_BYTES
    for _ in range(3):  # a quiet connection: one small request per read
        assert r.feed(framed(b"heartbeat")) == [b"heartbeat"]
    assert r.scratch_bytes == SCRATCH_BYTES  # not at the first small read: bursts have gaps
    assert r.feed(framed(b"heartbeat")) == [b"heartbeat"]
    assert r.scratch_bytes == INITIAL_SCRATCH_BYTES
