"""The correlation ids of one client's upstream connection, chosen by the gateway (sans-I/O).

Every request the gateway sends upstream for a client (the client's own, and the gateway's topic listing
on that connection) carries the next number of a per-connection sequence instead of the client's id; the
answer gets the client's id back (`gateway.codec.with_correlation_id`). Kroxylicious does the same
(`CorrelationManager`: "the correlation id with the upstream broker"). Two things follow:

- A produce request with acks=0 has no answer from a Kafka broker (`KafkaApis.handleProduceRequest`:
  `sendNoOpResponseExemptThrottle`), but Tansu answers it. Answers come in the order of the requests, so
  such an answer can only carry an id between the last answer taken and the next awaited request's: the
  gateway recognises it from two counters, however many acks=0 produce requests are outstanding (a fast
  acks=0 producer in front of a slow Tansu) and without remembering any of them (a Kafka broker, which
  never answers them, makes nothing grow).
- A client may reuse a correlation id (Kafka's broker does not look at it: it answers in order); the
  upstream never sees the reuse, so it cannot make an awaited answer look like an acks=0 one or the
  other way round.

Departure: the upstream's own request logs show the gateway's ids, not the client's (the client id,
API and principal are unchanged); the gateway's request log and audit events keep the client's.
"""

from __future__ import annotations

from typing import Final

WIRE_MASK: Final = 0x7FFF_FFFF  # ids on the wire: 0 .. 2**31-1, then round again (negative ones stay free)


def wire_id(seq: int) -> int:
    """The correlation id the request numbered `seq` carries upstream."""
    return seq & WIRE_MASK


class UpstreamIds:
    """The numbering of one upstream connection's requests: `sent` numbers handed out, `passed` the
    first number whose answer may still come (every earlier one was answered or passed over)."""

    __slots__ = ("passed", "sent")

    def __init__(self) -> None:
        self.sent = 0
        self.passed = 0

    def assign(self) -> int:
        """The number of the next request sent upstream (its id on the wire: `wire_id`)."""
        seq = self.sent
        self.sent = seq + 1
        return seq

    def answered(self, seq: int) -> None:
        """The awaited request `seq` has its answer: nothing sent before it will be answered any more."""
        self.passed = seq + 1

    def drops(self, correlation: int, next_awaited: int | None) -> bool:
        """Whether an upstream answer carrying `correlation`, which is not the next awaited request's
        (`next_awaited`, its number; None when none is awaited), answers an acks=0 produce sent since the
        last answer and before that request (so it is dropped). Those before it were not answered (a
        Kafka broker answers none) and are passed over. Negative ids are never the gateway's own
        numbering (its SASL exchange upstream uses them)."""
        if correlation < 0:
            return False
        bound = self.sent if next_awaited is None else next_awaited
        skipped = (correlation - self.passed) & WIRE_MASK
        if skipped < bound - self.passed:
            self.passed += skipped + 1
            return True
        return False
