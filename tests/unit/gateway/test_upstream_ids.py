"""`gateway.upstream_ids`: the gateway's own correlation ids upstream, and which answers are to acks=0
produce requests, against a naive model (the upstream answers in order; it may skip any acks=0 one)."""

from __future__ import annotations

from collections import deque

from hypothesis import given
from hypothesis import strategies as st

from gateway.upstream_ids import WIRE_MASK, UpstreamIds, wire_id


def take(ids: UpstreamIds, awaiting: deque[int], correlation: int) -> str:
    """What the gateway does with an upstream answer (`ClientConnection.on_upstream_frame`)."""
    if awaiting and correlation == wire_id(awaiting[0]):
        ids.answered(awaiting.popleft())
        return "answer"
    return "dropped" if ids.drops(correlation, awaiting[0] if awaiting else None) else "unexpected"


# each request: (has an answer, whether the upstream answers it when it has none: Tansu yes, Kafka no)
requests = st.lists(st.tuples(st.booleans(), st.booleans()), max_size=60)


@given(requests, st.integers(0, 3))
def test_every_answer_in_order_is_taken_or_dropped(reqs: list[tuple[bool, bool]],
                                                                   start_round: int) -> None:
    ids = UpstreamIds()
    ids.sent = ids.passed = start_round * (WIRE_MASK + 1) - 20 if start_round else 0  # across the wrap too
    awaiting: deque[int] = deque()
    answers: list[tuple[int, str]] = []
    for awaited, acks_0_answered in reqs:
        seq = ids.assign()
        if awaited:
            awaiting.append(seq)
            answers.append((wire_id(seq), "answer"))
        elif acks_0_answered:
            answers.append((wire_id(seq), "dropped"))
    for correlation, expected in answers:
        assert take(ids, awaiting, correlation) == expected
    assert not awaiting


@given(requests, st.integers(-(2**31), 2**31 - 1))
def test_an_id_no_outstanding_request_carries_is_never_dropped(reqs: list[tuple[bool, bool]], foreign: int) -> None:
    """Only ids numbered after the last answer and before the next awaited request are dropped: any
    other (an id answered already, one not sent yet, a negative one) is left to close the connection."""
    ids = UpstreamIds()
    awaiting: deque[int] = deque()
    for awaited, _ in reqs:
        seq = ids.assign()
        if awaited:
            awaiting.append(seq)
    head = awaiting[0] if awaiting else ids.sent
    if foreign >= 0 and foreign < head:  # an acks=0 produce before the next awaited one may carry it
        return
    assert not ids.drops(foreign, awaiting[0] if awaiting else None)


def test_a_dropped_answer_passes_over_the_acks_0_requests_before_it() -> None:
    """Answers come in order: once the answer to the third acks=0 request is dropped, the first two will
    not be answered any more (a Kafka broker answers none), so their ids are no longer dropped."""
    ids = UpstreamIds()
    first, second, third = ids.assign(), ids.assign(), ids.assign()
    awaited = ids.assign()
    assert ids.drops(wire_id(third), awaited)
    assert not ids.drops(wire_id(first), awaited) and not ids.drops(wire_id(second), awaited)
    assert not ids.drops(wire_id(third), awaited)  # its answer came already
    ids.answered(awaited)
    assert not ids.drops(wire_id(awaited), None)


def test_a_million_unanswered_acks_0_requests_and_the_gateways_sasl_ids() -> None:
    """A Kafka broker never answers acks=0: a million of them leave two numbers behind, and the answer
    to a later awaited request is still taken. Negative ids (the gateway's own SASL exchange upstream)
    are never taken for acks=0 answers."""
    ids = UpstreamIds()
    for _ in range(1_000_000):
        ids.assign()
    awaiting = deque([ids.assign()])
    assert not ids.drops(-2, awaiting[0])
    assert take(ids, awaiting, wire_id(1_000_000)) == "answer"
    assert (ids.sent, ids.passed) == (1_000_001, 1_000_001)
