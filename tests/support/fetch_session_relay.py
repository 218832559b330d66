"""A TCP relay in front of Tansu that serves KIP-227 incremental fetch sessions as a Kafka broker does.

Tansu never creates fetch sessions, so through it a gateway that forwards sessions looks exactly like
one that does not. This relay sits between the gateway and Tansu (real sockets, one upstream
connection per accepted connection) and adds what Kafka's `FetchManager.newContext` does, in small:
- a full Fetch (epoch 0 or -1) naming a session id closes that session;
- epoch -1 (FINAL_EPOCH): a sessionless fetch of the partitions listed, answered with session id 0;
- epoch 0 (INITIAL): the partitions listed become a new session, answered with its id;
- epoch > 0: the session's partitions, updated with those listed and without the forgotten ones, are
  fetched, whatever the request lists; an unknown id is FETCH_SESSION_ID_NOT_FOUND (70), a wrong
  epoch INVALID_FETCH_SESSION_EPOCH (71).
Tansu itself is always asked a sessionless fetch. Sessions are the broker's, not a connection's, as in
Kafka. Every Fetch received is recorded in `seen` as (version, session id, epoch).
Unlike Kafka, an incremental answer repeats every partition of the session (clients accept that).
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
from collections import defaultdict
from typing import Any

from gateway.codec import (
    SPECS,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    parse_request_header,
)
from tests.support.sockets import recv_frame

FETCH = SPECS[1]
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71


def _read_frame(sock: socket.socket) -> bytes | None:
    """The next frame, None once the peer closed or the socket failed."""
    try:
        return recv_frame(sock)
    except OSError:  # ConnectionError included
        return None


def _hang_up(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class FetchSessionRelay:
    def __init__(self, upstream: tuple[str, int], first_session_id: int = 1000, *,
                 sessions_on_final_epoch: bool = False) -> None:
        self.upstream = upstream
        # Not Kafka: a broker that creates a session even for a sessionless request (session 0, epoch -1).
        self.sessions_on_final_epoch = sessions_on_final_epoch
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.address = ("127.0.0.1", int(self.sock.getsockname()[1]))
        self.seen: list[tuple[int, int, int]] = []
        # session id -> (the epoch expected next, {(topic name or id, partition): FetchPartition})
        self.sessions: dict[int, tuple[int, dict[tuple[Any, int], Any]]] = {}
        self._ids = itertools.count(first_session_id)
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            up = socket.create_connection(self.upstream, timeout=30)
            up.settimeout(None)
            self._sockets += [conn, up]
            pending: dict[int, tuple[int, int, int]] = {}
            for target, args in ((self._requests, (conn, up, pending)), (self._answers, (up, conn, pending))):
                thread = threading.Thread(target=target, args=args, daemon=True)
                thread.start()
                self._threads.append(thread)

    def _requests(self, client: socket.socket, up: socket.socket, pending: dict[int, tuple[int, int, int]]) -> None:
        while (frame := _read_frame(client)) is not None:
            header = parse_request_header(frame)
            out = len(frame).to_bytes(4, "big") + frame
            if header.api_key == 1 and header.api_version >= 7:
                request = decode_request(FETCH, header, frame)
                with self._lock:
                    answer_session, error = self._context(header.api_version, request)
                pending[header.correlation_id] = (header.api_version, answer_session, error)
                out = encode_request(FETCH, header, request)
            up.sendall(out)
        _hang_up(up)  # wakes the thread reading `up` (a close from this thread would not)

    def _context(self, version: int, request: Any) -> tuple[int, int]:
        """Kafka's FetchManager.newContext: turns `request` into the sessionless fetch Tansu gets and
        returns (the session id to answer, the error to answer)."""
        sid, epoch = request.session_id, request.session_epoch
        self.seen.append((version, sid, epoch))
        by_id = version >= 13

        def key(topic: Any) -> Any:
            return topic.topic_id if by_id else topic.topic

        answer, error = 0, 0
        if epoch in (0, -1):
            if sid != 0:
                self.sessions.pop(sid, None)
            if epoch == 0 or (sid == 0 and self.sessions_on_final_epoch):
                answer = next(self._ids)
                self.sessions[answer] = (1, {(key(t), p.partition): p for t in request.topics for p in t.partitions})
        elif sid not in self.sessions:
            error, request.topics = FETCH_SESSION_ID_NOT_FOUND, []
        elif self.sessions[sid][0] != epoch:
            error, request.topics = INVALID_FETCH_SESSION_EPOCH, []
        else:
            parts = self.sessions[sid][1]
            parts.update({(key(t), p.partition): p for t in request.topics for p in t.partitions})
            for t in request.forgotten_topics_data:
                for p in t.partitions:
                    parts.pop((key(t), p), None)
            self.sessions[sid] = (epoch + 1, parts)
            grouped: dict[Any, list[Any]] = defaultdict(list)
            for (name, _), p in parts.items():
                grouped[name].append(p)
            cls = type(request).FetchTopic
            request.topics = [cls(**({"topic_id": n} if by_id else {"topic": n}), partitions=ps)
                              for n, ps in grouped.items()]
            answer = sid
        if error:
            request.max_wait_ms = 0
        request.session_id, request.session_epoch, request.forgotten_topics_data = 0, -1, []
        return answer, error

    def _answers(self, up: socket.socket, client: socket.socket, pending: dict[int, tuple[int, int, int]]) -> None:
        while (frame := _read_frame(up)) is not None:
            out = len(frame).to_bytes(4, "big") + frame
            correlation = int.from_bytes(frame[:4], "big", signed=True)
            if correlation in pending:
                version, session_id, error = pending.pop(correlation)
                response = decode_response(FETCH, version, frame)
                response.session_id = session_id
                if error:
                    response.error_code, response.responses = error, []
                out = encode_response(FETCH, version, correlation, response)
            client.sendall(out)
        _hang_up(client)

    def close(self) -> None:
        _hang_up(self.sock)  # wakes the accepting thread
        self.sock.close()
        for s in self._sockets:
            _hang_up(s)
        for t in self._threads:
            t.join(timeout=5)
        for s in self._sockets:
            s.close()
