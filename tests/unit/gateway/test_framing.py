"""Frame reading: whole frames out whatever the chunking; bad sizes close the connection."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.framing import FrameError, FrameReader


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
    assert r.buffer_updated(10) == []
    tail = r.get_buffer()
    assert len(tail) == 1000 - 6  # exactly the rest of the frame
    tail[:] = stream[10:]
    assert r.buffer_updated(len(tail)) == [payload]


def test_negative_size_is_refused() -> None:
    with pytest.raises(FrameError, match="negative"):
        FrameReader(1024).feed(b"\xff\xff\xff\xfe")


def test_size_above_the_limit_is_refused_before_the_body_arrives() -> None:
    r = FrameReader(10)
    assert r.feed(framed(b"x" * 10)) == [b"x" * 10]
    with pytest.raises(FrameError, match="exceeds"):
        r.feed((11).to_bytes(4, "big"))


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError):
        FrameReader(0)


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=7000), max_size=30),
    scratch=st.sampled_from([16, 64, 1000, 256 * 1024]),
)
def test_any_chunking_yields_the_same_frames(payloads: list[bytes], cuts: list[int], scratch: int) -> None:
    stream = b"".join(framed(p) for p in payloads)
    points = sorted({c for c in cuts if c < len(stream)} | {0, len(stream)})
    r = FrameReader(1000, scratch_bytes=scratch)
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
