"""Splitting a Kafka byte stream into frames (`Size int32` + payload), without copying more than once.

The hot path feeds whatever `data_received` got; complete frames come out as `bytes`. A negative
size or one above the limit is a protocol violation: the connection is closed (Kafka closes it too,
`InvalidReceiveException`), so the splitter raises and keeps no state worth saving.
"""

from __future__ import annotations

from typing import Final

_SIZE_BYTES: Final = 4


class FrameError(ValueError):
    """The stream is not valid Kafka framing; the connection must be closed."""


class FrameSplitter:
    __slots__ = ("_buf", "_max")

    def __init__(self, max_frame_bytes: int) -> None:
        if max_frame_bytes <= 0:
            raise ValueError("max_frame_bytes must be positive")
        self._buf = bytearray()
        self._max = max_frame_bytes

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete (bounded by the maximum frame size + 4)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos = 0
        end = len(buf)
        limit = self._max
        while end - pos >= _SIZE_BYTES:
            size = int.from_bytes(buf[pos : pos + _SIZE_BYTES], "big", signed=True)
            if size < 0:
                raise FrameError(f"negative frame size {size}")
            if size > limit:
                raise FrameError(f"frame of {size} bytes exceeds the maximum of {limit}")
            stop = pos + _SIZE_BYTES + size
            if stop > end:
                break
            frames.append(bytes(buf[pos + _SIZE_BYTES : stop]))
            pos = stop
        if pos:
            del buf[:pos]
        return frames
