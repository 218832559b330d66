"""Splitting a Kafka byte stream into frames (`Size int32` + payload) for `asyncio.BufferedProtocol`.

The transport reads straight into buffers we hand out (`get_buffer`/`buffer_updated`): small frames
land in a scratch buffer and are copied out once; a frame larger than the scratch buffer's ceiling (a
batched produce request, a fetch response) gets a buffer of its exact size that the kernel fills
directly, and that buffer *is* the frame (no copy at all).

The scratch buffer starts small (`INITIAL_SCRATCH_BYTES`: an idle connection costs 4 KiB, not the
ceiling) and grows by doubling, up to its ceiling (`SCRATCH_BYTES`), when a frame does not fit or a
read filled it (more was waiting in the socket: bigger reads mean fewer system calls). It goes back to
its start when it is empty after `_SHRINK_AFTER` reads in a row that used less than a quarter of it
(the burst is over: a producer gone quiet must not keep 256 KiB until its next burst). Growing copies
the unread bytes once; shrinking happens only when nothing is unread, so it copies nothing.

Frames are pulled one at a time (`next_frame`), as Kafka's broker reads them (`NetworkReceive`, one
receive per channel until it is answered): each size prefix is checked when its frame is reached,
under the limit in force then, so a caller that changes the limit between frames (the SASL login
raises it, a re-authentication's SaslHandshake lowers it) has it applied to exactly the frames that
follow, even those that arrived in the same read. A negative size or one above the limit is a protocol
violation (Kafka's `InvalidReceiveException`): `next_frame` raises, after every frame before it was
pulled. Memory per connection is bounded by the scratch buffer's ceiling plus one frame within the limit: a
frame's own buffer is allocated only after its size passed the check, and bytes the caller has not
pulled yet wait in the scratch buffer (the caller stops reading the socket meanwhile).

Across connections, a large frame's buffer is allocated only once `memory` (when set: the gateway-wide
pool of `gateway.frame_memory`, Kafka's `queued.max.request.bytes`) reserved its size. Until it does,
`next_frame` answers None and `awaiting_memory` is True: the caller stops reading the socket and asks
again when the pool says the memory is there (Kafka's Selector mutes such a channel).
"""

from __future__ import annotations

from typing import Final, Protocol

_SIZE_BYTES: Final = 4
# The scratch buffer's ceiling, and its size when a reader starts (and shrinks back to).
SCRATCH_BYTES: Final = 256 * 1024
INITIAL_SCRATCH_BYTES: Final = 4 * 1024
_MIN_SCRATCH_BYTES: Final = 16
# Reads in a row that filled less than a quarter of the scratch buffer before it shrinks (when empty).
_SHRINK_AFTER: Final = 4

Frame = bytes | bytearray


class FrameError(ValueError):
    """The stream is not valid Kafka framing; the connection must be closed."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        if size < 0:
            super().__init__(f"negative frame size {size}")
        else:
            super().__init__(f"frame of {size} bytes exceeds the maximum of {limit}")

    @property
    def kafka_message(self) -> str:
        """The message of Kafka's InvalidReceiveException (NetworkReceive.readFrom)."""
        if self.size < 0:
            return f"Invalid receive (size = {self.size})"
        return f"Invalid receive (size = {self.size} larger than {self.limit})"


class FrameBudget(Protocol):
    def reserve(self, nbytes: int) -> bool:
        """True when `nbytes` may be allocated for a frame now; False: ask again later."""
        ...


class FrameReader:
    __slots__ = ("_awaiting_memory", "_big", "_big_filled", "_end", "_grow", "_max", "_min_scratch", "_needs_bytes",
                 "_offered", "_scratch", "_scratch_ceiling", "_small_reads", "_start", "_view", "memory")

    def __init__(self, max_frame_bytes: int, scratch_bytes: int = SCRATCH_BYTES,
                 initial_scratch_bytes: int = INITIAL_SCRATCH_BYTES) -> None:
        if max_frame_bytes <= 0:
            raise ValueError("max_frame_bytes must be positive")
        self._max = max_frame_bytes
        self._scratch_ceiling = max(scratch_bytes, _MIN_SCRATCH_BYTES)
        self._min_scratch = min(max(initial_scratch_bytes, _MIN_SCRATCH_BYTES), self._scratch_ceiling)
        self._scratch = bytearray(self._min_scratch)
        self._view = memoryview(self._scratch)
        self._start = 0  # unread data is scratch[start:end]
        self._end = 0
        self._big: bytearray | None = None
        self._big_filled = 0
        self._needs_bytes = True  # `next_frame` cannot make progress before more bytes arrive
        self._offered = 0  # the length of the last buffer handed out by `get_buffer`
        self._grow = False  # the last read filled the scratch buffer: double it at the next `get_buffer`
        self._small_reads = 0  # reads in a row that used less than a quarter of the scratch buffer
        # Reserves the buffer of each frame larger than the scratch buffer's ceiling (None: no bound).
        self.memory: FrameBudget | None = None
        self._awaiting_memory = False

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
        """Bytes read but not yet pulled as frames."""
        return self._big_filled if self._big is not None else self._end - self._start

    @property
    def held_bytes(self) -> int:
        """Memory held for unread data: the scratch buffer, plus the buffer of a large frame in progress."""
        return len(self._scratch) + (len(self._big) if self._big is not None else 0)

    @property
    def large_frame_size(self) -> int:
        """The size of the large frame being read into its own buffer (its memory granted), 0 when none."""
        return len(self._big) if self._big is not None else 0

    @property
    def large_frame_filled(self) -> int:
        """How much of that frame has arrived."""
        return self._big_filled if self._big is not None else 0

    @property
    def scratch_bytes(self) -> int:
        """The scratch buffer's current size (between its initial size and its ceiling)."""
        return len(self._scratch)

    @property
    def awaiting_memory(self) -> bool:
        """The next frame's size is known but `memory` could not reserve it yet: `next_frame` answers
        None until it does, and reading the socket would only fill the scratch buffer."""
        return self._awaiting_memory

    @property
    def needs_bytes(self) -> bool:
        """True when `next_frame` would answer None until more bytes are read: the socket may be read.
        False while frames (or a size prefix not yet checked) wait to be pulled."""
        return self._needs_bytes

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        if self._big is not None:
            view = memoryview(self._big)[self._big_filled :]
        else:
            if self._grow or (self._end == len(self._scratch) and len(self._scratch) < self._scratch_ceiling):
                # The last read filled the buffer, or reads keep reaching its end: more arrives than it
                # holds, so double it rather than compact it (fewer reads, fewer copies).
                self._grow = False
                self._resize(min(2 * len(self._scratch), self._scratch_ceiling))
            elif self._end == len(self._scratch):
                self._compact()
            view = self._view[self._end :]
        self._offered = len(view)
        return view

    def _compact(self) -> None:
        n = self._end - self._start
        self._view[:n] = self._view[self._start : self._end]
        self._start, self._end = 0, n

    def _resize(self, size: int) -> None:
        """A new scratch buffer of `size` bytes holding the unread bytes at its start (one copy)."""
        n = self._end - self._start
        if size == len(self._scratch):
            if self._start:
                self._compact()
            return
        scratch = bytearray(size)
        scratch[:n] = self._view[self._start : self._end]
        self._scratch, self._view = scratch, memoryview(scratch)
        self._start, self._end = 0, n

    def buffer_updated(self, nbytes: int) -> None:
        if self._big is not None:
            self._big_filled += nbytes
            self._needs_bytes = self._big_filled < len(self._big)
            return
        self._end += nbytes
        self._needs_bytes = self._end - self._start < _SIZE_BYTES
        size = len(self._scratch)
        if nbytes >= self._offered and 2 * self._offered >= size:
            # The read filled (at least half) the buffer: more may be waiting in the socket.
            self._small_reads = 0
            self._grow = size < self._scratch_ceiling
        elif 4 * nbytes < size:
            self._small_reads += 1
        else:
            self._small_reads = 0

    def _drained(self) -> None:
        """Nothing unread is left: start at the buffer's beginning again, and give back a buffer the
        last reads hardly used (no copy: nothing is unread)."""
        self._start = self._end = 0
        self._needs_bytes = True
        if self._small_reads >= _SHRINK_AFTER and len(self._scratch) > self._min_scratch and not self._grow:
            self._small_reads = 0
            self._resize(self._min_scratch)

    def next_frame(self) -> Frame | None:
        """The next complete frame, or None when it is not complete yet. Raises FrameError when the
        next frame's size is negative or above the current limit (frames before it were pulled)."""
        big = self._big
        if big is not None:
            if self._big_filled < len(big):
                self._needs_bytes = True
                return None
            self._big = None
            self._big_filled = 0
            self._needs_bytes = True
            return big
        start = self._start
        if self._end - start < _SIZE_BYTES:
            self._needs_bytes = True
            return None
        view = self._view
        size = int.from_bytes(view[start : start + _SIZE_BYTES], "big", signed=True)
        if size < 0 or size > self._max:
            raise FrameError(size, self._max)
        stop = start + _SIZE_BYTES + size
        if stop <= self._end:
            frame = bytes(view[start + _SIZE_BYTES : stop])
            if stop == self._end:
                self._drained()
            else:
                self._start = stop
                self._needs_bytes = self._end - stop < _SIZE_BYTES
            return frame
        if _SIZE_BYTES + size > self._scratch_ceiling:
            # A large frame, its size checked: give it its own buffer, filled in place from now on, once
            # the gateway-wide pool has room for it.
            if self.memory is not None and not self.memory.reserve(size):
                self._awaiting_memory = True
                self._needs_bytes = False
                return None
            self._awaiting_memory = False
            have = self._end - start - _SIZE_BYTES
            big = bytearray(size)
            big[:have] = view[start + _SIZE_BYTES : self._end]
            self._big, self._big_filled = big, have
            self._start = self._end = 0
        elif _SIZE_BYTES + size > len(self._scratch):
            # Its size checked, it fits under the ceiling: grow the scratch buffer to hold it whole.
            grown = len(self._scratch)
            while grown < _SIZE_BYTES + size:
                grown *= 2
            self._resize(min(grown, self._scratch_ceiling))
        elif stop > len(self._scratch):
            # The frame runs past the buffer's end: its start moves to the front (one copy either way);
            # below the ceiling the buffer doubles meanwhile, as reads keep outrunning it.
            self._resize(min(2 * len(self._scratch), self._scratch_ceiling))
        self._needs_bytes = True
        return None

    def feed(self, data: bytes) -> list[Frame]:
        """Every frame `data` completes, pulled as soon as it is (the non-buffered path: tests and
        fuzzing drive this)."""
        frames: list[Frame] = []
        pos = 0
        while pos < len(data):
            buf = self.get_buffer()
            n = min(len(buf), len(data) - pos)
            buf[:n] = data[pos : pos + n]
            pos += n
            self.buffer_updated(n)
            while (frame := self.next_frame()) is not None:
                frames.append(frame)
        return frames
