"""What forwarding every consumer Fetch sessionless (KIP-227, `gateway/fetch_session.py`) costs the gateway.

Printed, per call, in microseconds, in this process (no sockets):
- `sessionless_frame` on a Fetch v12 that already carries session 0 / epoch -1 (librdkafka's: a check,
  no copy) and on one asking for a session (kafka-python's and Java's: one copy of the frame);
- the gateway's per-Fetch work on the request path (decode, authorize, patch) for a full Fetch v12
  of 1, 100 and 1,000 partitions (10 topics x 10, 50 x 20), which is what a consumer sends every time
  now that it gets no session, against an incremental Fetch naming nothing, which is what it sent in a
  session. The authorizer is a stub that allows everything (one call per Fetch, as in the gateway); its
  own cost per topic is measured by bench/authz_bench.py. Responses are not included.

    .venv/bin/python bench/fetch_session_bench.py
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.codec import SPECS, RequestHeader, decode_request, encode_request, parse_request_header
from gateway.fetch_session import sessionless_frame
from gateway.request_authz import RequestAuthorizer, plan_request

FETCH = SPECS[1]
VERSION = 12


def frame(topics: int, partitions: int, session_id: int, epoch: int) -> tuple[RequestHeader, bytes]:
    cls = FETCH.request[VERSION]
    t = cls.FetchTopic
    request = cls(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                  session_id=session_id, session_epoch=epoch, forgotten_topics_data=[], rack_id="", topics=[
                      t(topic=f"topic-{i}", partitions=[
                          t.FetchPartition(partition=p, fetch_offset=1000, partition_max_bytes=1 << 20)
                          for p in range(partitions)])
                      for i in range(topics)])
    body = encode_request(FETCH, RequestHeader(1, VERSION, 1, "bench", 0), request)[4:]
    return parse_request_header(body), body


def per_call_us(fn: Any, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=3)) / number * 1e6


def main() -> int:
    az = RequestAuthorizer(lambda actions: [True] * len(actions), lambda _op, _rt: True)
    for sid, epoch, who in ((0, -1, "already sessionless (librdkafka)"), (0, 0, "asking for a session")):
        header, body = frame(1, 1, sid, epoch)
        us = per_call_us(lambda h=header, b=body: sessionless_frame(b, h), 200_000)
        print(f"sessionless_frame, {len(body)} B Fetch v{VERSION}, {who}: {us:.2f} us")

    def request_path(header: RequestHeader, body: bytes) -> None:
        request = decode_request(FETCH, header, body)
        plan = plan_request(az, 1, VERSION, request, FETCH.response)
        if plan.sessionless and not plan.rewritten:
            sessionless_frame(body, header)

    cases = [("incremental, naming nothing", 0, 0, 7, 3), ("full, 1 partition", 1, 1, 0, 0),
             ("full, 100 partitions", 10, 10, 0, 0), ("full, 1,000 partitions", 50, 20, 0, 0)]
    for label, topics, partitions, sid, epoch in cases:
        header, body = frame(topics, partitions, sid, epoch)
        number = 20 if topics * partitions >= 1000 else 500
        us = per_call_us(lambda h=header, b=body: request_path(h, b), number)
        print(f"decode + authorize + patch, {label:28s} ({len(body):6,d} B): {us:8.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
