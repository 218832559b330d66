"""KIP-227 incremental fetch sessions at the gateway: every consumer Fetch goes upstream sessionless.

In an incremental fetch (Fetch v7+, `session_epoch` > 0) a client lists only the partitions it adds
or changes; the broker keeps answering for every partition of the session. The gateway authorizes
the partitions a request lists, and the upstream authorizes the gateway's own identity, so a
partition added to a session before its READ ACL was revoked would keep returning records. The
gateway therefore never lets a session exist through it: every consumer Fetch it forwards carries
`session_id = 0` and `session_epoch = -1` (Kafka's `FetchMetadata.LEGACY`: INVALID_SESSION_ID and
FINAL_EPOCH), which Kafka's `FetchManager.newContext` serves with a `SessionlessFetchContext`: the
partitions listed, authorized as usual, nothing cached, `session_id = 0` in the answer. Java's
`FetchSessionHandler.handleResponse` and kafka-python's `FetchSessionHandler.handle_response` take
a full fetch answered with session id 0 as a broker that declines sessions: their next fetch is
full again (`FetchMetadata.INITIAL`), no error. The cost is request size: a consumer lists all of its
partitions in every Fetch, as clients did before Kafka 1.1.

Deliberate departure from Kafka: a client that sends an incremental Fetch anyway (its own session
id and epoch, a hostile client or one guessing another session's id) gets a sessionless full fetch
of the partitions it lists (its `forgotten_topics_data` is dropped), where a broker would answer
FETCH_SESSION_ID_NOT_FOUND or serve that session. Follower fetches (a replica id, CLUSTER_ACTION) are
forwarded untouched.

Pure: byte offsets and the decoded request only (STYLE 1).
"""

from __future__ import annotations

import struct
from typing import Any, Final

from gateway.codec import CodecError, RequestHeader, response_body_offset
from gateway.framing import Frame

# Fetch v7 added SessionId and SessionEpoch (KIP-227); v15 moved ReplicaId into a tagged field (KIP-903).
SESSIONS_SINCE: Final = 7
_REPLICA_ID_UNTIL: Final = 14
INVALID_SESSION_ID: Final = 0
FINAL_EPOCH: Final = -1
_SESSION: Final = struct.Struct(">ii")
_SESSIONLESS: Final = (INVALID_SESSION_ID, FINAL_EPOCH)
_SESSION_ID: Final = struct.Struct(">i")


def session_fields_offset(version: int) -> int:
    """Where SessionId starts, counted from the request body: [ReplicaId int32 (v7-v14)], MaxWaitMs
    int32, MinBytes int32, MaxBytes int32, IsolationLevel int8. Tagged fields (ClusterId,
    ReplicaState) come at the end of the body, so they move nothing."""
    if version < SESSIONS_SINCE:
        raise ValueError(f"Fetch v{version} has no session fields")
    return (4 if version <= _REPLICA_ID_UNTIL else 0) + 4 + 4 + 4 + 1


def make_sessionless(version: int, request: Any) -> bool:
    """Sets a decoded consumer Fetch sessionless (nothing to do before v7). Returns True when the
    request must be re-encoded: it named forgotten topics (only an incremental fetch does), which
    mean nothing without a session and are dropped."""
    if version < SESSIONS_SINCE:
        return False
    request.session_id = INVALID_SESSION_ID
    request.session_epoch = FINAL_EPOCH
    if request.forgotten_topics_data:
        request.forgotten_topics_data = []
        return True
    return False


def sessionless_frame(frame: Frame, header: RequestHeader) -> Frame:
    """The original Fetch bytes with SessionId 0 and SessionEpoch -1, everything else byte-identical;
    `frame` itself (no copy) when it already carries them, as every honest client's does."""
    pos = header.body_offset + session_fields_offset(header.api_version)
    if pos + _SESSION.size > len(frame):
        raise CodecError("truncated fetch request")
    if _SESSION.unpack_from(frame, pos) == _SESSIONLESS:
        return frame
    out = bytearray(frame)
    _SESSION.pack_into(out, pos, *_SESSIONLESS)
    return out


def sessionless_response(spec: Any, version: int, frame: Frame) -> Frame:
    """An upstream Fetch answer (v7+, without its size prefix) with SessionId 0. Kafka answers a
    sessionless request with 0 anyway; an upstream that created a session regardless must not make
    the client go incremental (it would then list only changed partitions, and the gateway forwards
    no session to serve the others). `frame` itself when already 0. Body: ThrottleTimeMs int32,
    ErrorCode int16, SessionId int32."""
    pos = response_body_offset(spec, version, frame) + 4 + 2
    if pos + _SESSION_ID.size > len(frame):
        raise CodecError("truncated fetch response")
    if _SESSION_ID.unpack_from(frame, pos)[0] == INVALID_SESSION_ID:
        return frame
    out = bytearray(frame)
    _SESSION_ID.pack_into(out, pos, INVALID_SESSION_ID)
    return out
