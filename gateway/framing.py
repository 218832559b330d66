"""Splitting a Kafka byte stream into frames (`Size int32` + payload) for `asyncio.BufferedProtocol`.

The transport reads straight into buffers we hand out (`get_buffer`/`buffer_updated`): small frames
land in a fixed scratch buffer and are copied out once; a frame larger than the scratch buffer (a
batched produce request, a fetch response) gets a buffer of its exact size that the kernel fills
directly, and that buffer *is* the frame (no copy at all). A negative size or one above the limit is
a protocol violation: the connection is closed (Kafka closes it too, `InvalidReceiveException`), so
the reader raises. Memory per connection is bounded by the scratch buffer plus one frame.
"""

from __future__ import annotations

from typing import Final

_SIZE_BYTES: Final = 4
SCRATCH_BYTES: Final = 256 * 1024

Frame = bytes | bytearray


class FrameError(ValueError):
    """The stream is not valid Kafka framing; the connection must be closed."""


class FrameReader:
    __slots__ = ("_big", "_big_filled", "_end", "_max", "_scratch", "_start", "_view")

    def __init__(self, max_frame_bytes: int, scratch_bytes: int = SCRATCH_BYTES) -> None:
        if max_frame_bytes <= 0:
            raise ValueError("max_frame_bytes must be positive")
        self._max = max_frame_bytes
        self._scratch = bytearray(max(scratch_bytes, 16))
        self._view = memoryview(self._scratch)
        self._start = 0  # unread data is scratch[start:end]
        self._end = 0
        self._big: bytearray | None = None
        self._big_filled = 0

    @property
    def max_frame_bytes(self) -> int:
        return self._max

    @max_frame_bytes.setter
    def max_frame_bytes(self, value: int) -> None:
        if value <= 0:
            raise ValueError("max_frame_bytes must be positive")
        self._max = value

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete."""
        return self._big_filled if self._big is not None else self._end - self._start

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        if self._big is not None:
            return memoryview(self._big)[self._big_filled :]
        if self._end == len(self._scratch):
            self._compact()
        return self._view[self._end :]

    def _compact(self) -> None:
        n = self._end - self._start
        self._view[:n] = self._view[self._start : self._end]
        self._start, self._end = 0, n

    def buffer_updated(self, nbytes: int) -> list[Frame]:
        if self._big is not None:
            self._big_filled += nbytes
            if self._big_filled < len(self._big):
                return []
            frame = self._big
            self._big = None
            self._big_filled = 0
            return [frame]
        self._end += nbytes
        frames: list[Frame] = []
        view = self._view
        while self._end - self._start >= _SIZE_BYTES:
            start = self._start
            size = int.from_bytes(view[start : start + _SIZE_BYTES], "big", signed=True)
            if size < 0:
                raise FrameError(f"negative frame size {size}")
            if size > self._max:
                raise FrameError(f"frame of {size} bytes exceeds the maximum of {self._max}")
            stop = start + _SIZE_BYTES + size
            if stop <= self._end:
                frames.append(bytes(view[start + _SIZE_BYTES : stop]))
                self._start = stop
                continue
            if _SIZE_BYTES + size > len(self._scratch):
                # A large frame: give it its own buffer, filled in place from now on.
                have = self._end - start - _SIZE_BYTES
                big = bytearray(size)
                big[:have] = view[start + _SIZE_BYTES : self._end]
                self._big, self._big_filled = big, have
                self._start = self._end = 0
            elif stop > len(self._scratch):
                self._compact()
            break
        if self._start == self._end:
            self._start = self._end = 0
        return frames

    def feed(self, data: bytes) -> list[Frame]:
        """Everything `data` completes (the non-buffered path: tests and fuzzing drive this)."""
        frames: list[Frame] = []
        pos = 0
        while pos < len(data):
            buf = self.get_buffer()
            n = min(len(buf), len(data) - pos)
            buf[:n] = data[pos : pos + n]
            pos += n
            frames.extend(self.buffer_updated(n))
        return frames
