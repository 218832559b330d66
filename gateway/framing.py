"""Splitting a Kafka byte stream into frames (`Size int32` + payload) with one copy per frame.

The hot path feeds whatever `data_received` got; complete frames come out as `bytes`. Whole frames
inside one read are sliced straight out of it; a frame spread over many reads is collected as a list
of chunks and joined once when complete (no quadratic re-buffering of large produce requests or
fetch responses). A negative size or one above the limit is a protocol violation: the connection is
closed (Kafka closes it too, `InvalidReceiveException`), so the splitter raises.
"""

from __future__ import annotations

from typing import Final

_SIZE_BYTES: Final = 4


class FrameError(ValueError):
    """The stream is not valid Kafka framing; the connection must be closed."""


class FrameSplitter:
    __slots__ = ("_chunks", "_have", "_max", "_need")

    def __init__(self, max_frame_bytes: int) -> None:
        if max_frame_bytes <= 0:
            raise ValueError("max_frame_bytes must be positive")
        self._chunks: list[bytes] = []
        self._have = 0
        self._need = _SIZE_BYTES  # bytes needed before the held chunks can yield something
        self._max = max_frame_bytes

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete (bounded by the maximum frame size + 4)."""
        return self._have

    def _check(self, size: int) -> None:
        if size < 0:
            raise FrameError(f"negative frame size {size}")
        if size > self._max:
            raise FrameError(f"frame of {size} bytes exceeds the maximum of {self._max}")

    def feed(self, data: bytes) -> list[bytes]:
        if self._chunks:
            self._chunks.append(data)
            self._have += len(data)
            if self._have < self._need:
                return []
            data = b"".join(self._chunks)
            self._chunks = []
            self._have = 0
            self._need = _SIZE_BYTES
        frames: list[bytes] = []
        pos = 0
        end = len(data)
        while end - pos >= _SIZE_BYTES:
            size = int.from_bytes(data[pos : pos + _SIZE_BYTES], "big", signed=True)
            self._check(size)
            stop = pos + _SIZE_BYTES + size
            if stop > end:
                self._need = _SIZE_BYTES + size
                break
            frames.append(data[pos + _SIZE_BYTES : stop])
            pos = stop
        else:
            self._need = _SIZE_BYTES
        if pos < end:
            rest = data[pos:] if pos else data
            self._chunks = [rest]
            self._have = len(rest)
        return frames
