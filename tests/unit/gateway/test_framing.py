"""Frame splitting: whole frames out whatever the chunking; bad sizes close the connection."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.framing import FrameError, FrameSplitter


def framed(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def test_splits_concatenated_frames_and_keeps_the_remainder() -> None:
    s = FrameSplitter(1024)
    data = framed(b"abc") + framed(b"") + framed(b"defg")[:5]
    assert s.feed(data) == [b"abc", b""]
    assert s.buffered == 5
    assert s.feed(framed(b"defg")[5:]) == [b"defg"]
    assert s.buffered == 0


def test_negative_size_is_refused() -> None:
    with pytest.raises(FrameError, match="negative"):
        FrameSplitter(1024).feed(b"\xff\xff\xff\xfe")


def test_size_above_the_limit_is_refused_before_the_body_arrives() -> None:
    s = FrameSplitter(10)
    assert s.feed(framed(b"x" * 10)) == [b"x" * 10]
    with pytest.raises(FrameError, match="exceeds"):
        s.feed((11).to_bytes(4, "big"))


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError):
        FrameSplitter(0)


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=7000), max_size=30),
)
def test_any_chunking_yields_the_same_frames(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(framed(p) for p in payloads)
    points = sorted({c for c in cuts if c < len(stream)} | {0, len(stream)})
    s = FrameSplitter(1000)
    out: list[bytes] = []
    for a, b in itertools.pairwise(points):
        out.extend(s.feed(stream[a:b]))
    assert out == payloads
    assert s.buffered == 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_garbage_only_ever_raises_frame_error_and_memory_stays_bounded(data: bytes) -> None:
    s = FrameSplitter(512)
    try:
        for i in range(0, len(data), 97):
            s.feed(data[i : i + 97])
    except FrameError:
        return
    assert s.buffered <= 512 + 4
