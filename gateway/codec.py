"""The gateway's view of Kafka messages: header parsing by hand, bodies through kafka-python's schemas.

Only what a feature needs is decoded (STYLE 9, Kroxylicious's decode predicate): the request header
of every frame (cheap, hand-written), request bodies whose resource names must be authorized, and
the few responses whose broker addresses are rewritten. Everything else crosses the gateway as the
original bytes.

The version ranges the gateway accepts (`ApiSpec.min_version..max_version`) are what the bundled
schemas can parse, minus versions the gateway cannot authorize or rewrite (`_VERSION_CAPS`). Fetch
v13-v15 and Produce v13 name topics by id: the gateway authorizes them by the names the upstream
gives those ids (`gateway.topic_ids`), and advertises them only when the upstream answers topic ids
in Metadata (`Gateway.api_versions`).
"""

from __future__ import annotations

import re
import struct
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

# kafka-python loads its JSON schemas through a deprecated importlib.resources call when the message
# classes are created (at import); load them all here, once, with that warning silenced.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.protocol.admin
    import kafka.protocol.consumer
    import kafka.protocol.metadata
    import kafka.protocol.producer
    import kafka.protocol.sasl  # noqa: F401  (registers the SASL message classes)
    from kafka.protocol.api_message import ApiMessage
    from kafka.protocol.schemas import BaseField

    import gateway.bundled_messages  # noqa: F401  (delegation-token and KIP-848 APIs, schemas of our own)

API_VERSIONS_KEY: Final = 18
_HEADER = struct.Struct(">hhi")
_FRAMED_HEADER = struct.Struct(">ihhi")  # size prefix, api key, api version, correlation id
_FRAMED_ID = struct.Struct(">ii")  # size prefix, correlation id

# OffsetCommit v10+ and DeleteTopics v6+ name topics by id and have no id-aware planner yet. Fetch
# v16+ answers KIP-951 leader endpoints (NodeEndpoints) that would have to be rewritten to the
# gateway's addresses, which means decoding every Fetch response: the gateway stops at v15. Fetch
# v13-v15 and Produce v13 name topics by id (gateway.topic_ids). OffsetFetch v8+ and AddPartitionsToTxn
# v4+ batch several groups/transactions per request, which clients only need against brokers that
# require them.
_VERSION_CAPS: Final[dict[int, int]] = {0: 13, 1: 15, 8: 9, 9: 7, 20: 5, 24: 3}
# Kafka 4 still advertises Produce v0 because librdkafka refuses to compress otherwise (KAFKA-18659);
# the v3 schema parses v0-v2 bodies (they lack only the transactional id).
_VERSION_FLOORS: Final[dict[int, int]] = {0: 0}


class CodecError(ValueError):
    """A frame that cannot be parsed at the version it claims; the connection is closed."""


@dataclass(frozen=True, slots=True)
class ApiSpec:
    key: int
    name: str  # Kafka's ApiKeys enum name: PRODUCE, SASL_HANDSHAKE, ...
    request: Any = None
    response: Any = None
    min_version: int = 0
    max_version: int = 0

    def request_flexible(self, version: int) -> bool:
        return bool(self.request.flexible_version_q(version))

    def response_flexible(self, version: int) -> bool:
        return bool(self.response.flexible_version_q(version))

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


def _walk(cls: Any) -> Iterator[Any]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _walk(sub)


def _enum_name(message_name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", message_name).upper()


def _build_registry() -> dict[int, ApiSpec]:
    requests: dict[int, Any] = {}
    responses: dict[int, Any] = {}
    for cls in _walk(ApiMessage):
        if getattr(cls, "_class_version", 0) is not None or getattr(cls, "_json", None) is None:
            continue
        (requests if cls.type == "request" else responses)[cls.API_KEY] = cls
    specs: dict[int, ApiSpec] = {}
    for key, req in requests.items():
        resp = responses.get(key)
        if resp is None:
            continue
        low, high = BaseField.parse_versions(req.json["validVersions"])
        low = _VERSION_FLOORS.get(key, low)
        high = min(high, _VERSION_CAPS.get(key, high))
        name = _enum_name(req.name.removesuffix("Request"))
        specs[key] = ApiSpec(key, name, req, resp, low, high)
    return specs


SPECS: Final[dict[int, ApiSpec]] = _build_registry()


def api_name(api_key: int) -> str:
    spec = SPECS.get(api_key)
    return spec.name if spec else f"UNKNOWN_{api_key}"


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise CodecError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise CodecError("varint too long")


def write_uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def skip_tagged_fields(buf: bytes | bytearray | memoryview, pos: int) -> int:
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise CodecError("truncated tagged field")
    return pos


def parse_request_header(frame: bytes | bytearray) -> RequestHeader:
    """Request header v1/v2 (the client id is a classic int16 string even in v2)."""
    if len(frame) < 10:
        raise CodecError("request shorter than its header")
    api_key, version, correlation_id = _HEADER.unpack_from(frame, 0)
    n = int.from_bytes(frame[8:10], "big", signed=True)
    pos = 10
    client_id: str | None = None
    if n >= 0:
        if pos + n > len(frame):
            raise CodecError("truncated client id")
        try:
            client_id = frame[pos : pos + n].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CodecError("client id is not UTF-8") from exc
        pos += n
    elif n != -1:
        raise CodecError("invalid client id length")
    spec = SPECS.get(api_key)
    if spec is not None and 0 <= version <= spec.request.max_version and spec.request_flexible(version):
        pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, version, correlation_id, client_id, pos)


def _encodable(message: Any) -> Any:
    # kafka-python's body-only decode leaves the header slot unset, which `encode` reads.
    message._header = None
    return message


def decode_request(spec: ApiSpec, header: RequestHeader, frame: bytes | bytearray) -> Any:
    try:
        return _encodable(spec.request.decode(memoryview(frame)[header.body_offset :], version=header.api_version))
    except Exception as exc:  # kafka-python raises assorted errors on malformed bodies
        raise CodecError(f"malformed {spec.name} v{header.api_version} request") from exc


def response_body_offset(spec: ApiSpec, version: int, frame: bytes | bytearray) -> int:
    if spec.key != API_VERSIONS_KEY and spec.response_flexible(version):
        return skip_tagged_fields(frame, 4)
    return 4


def decode_response(spec: ApiSpec, version: int, frame: bytes | bytearray) -> Any:
    try:
        offset = response_body_offset(spec, version, frame)
        return _encodable(spec.response.decode(memoryview(frame)[offset:], version=version))
    except Exception as exc:
        raise CodecError(f"malformed {spec.name} v{version} response") from exc


def encode_response(spec: ApiSpec, version: int, correlation_id: int, message: Any) -> bytes:
    """A complete response frame (size prefix, header, body)."""
    body = message.encode(version=version)
    header = correlation_id.to_bytes(4, "big", signed=True)
    if spec.key != API_VERSIONS_KEY and spec.response_flexible(version):
        header += b"\x00"
    return (len(header) + len(body)).to_bytes(4, "big") + header + bytes(body)


def encode_request(spec: ApiSpec, header: RequestHeader, message: Any, correlation_id: int | None = None) -> bytes:
    """A complete request frame carrying the client's header fields (its correlation id replaced by
    `correlation_id` when given) and a (rewritten) body."""
    body = message.encode(version=header.api_version)
    correlation = header.correlation_id if correlation_id is None else correlation_id
    head = _HEADER.pack(header.api_key, header.api_version, correlation)
    if header.client_id is None:
        head += b"\xff\xff"
    else:
        cid = header.client_id.encode()
        head += len(cid).to_bytes(2, "big") + cid
    if spec.request_flexible(header.api_version):
        head += b"\x00"
    return (len(head) + len(body)).to_bytes(4, "big") + head + bytes(body)


_VIEW_FROM: Final = 4096  # below this a frame's rest is copied (cheaper than a memoryview), from it viewed


def request_with_correlation_id(frame: bytes | bytearray, header: RequestHeader,
                                correlation_id: int) -> tuple[bytes, bytes | bytearray | memoryview]:
    """A request frame (without its size prefix) as the parts of a framed request carrying
    `correlation_id` instead: size prefix and fixed header anew, then the rest of `frame` (a view of a
    large one: no copy)."""
    rest = frame[8:] if len(frame) < _VIEW_FROM else memoryview(frame)[8:]
    return _FRAMED_HEADER.pack(len(frame), header.api_key, header.api_version, correlation_id), rest


def response_with_correlation_id(frame: bytes | bytearray,
                                 correlation_id: int) -> tuple[bytes, bytes | bytearray | memoryview]:
    """A response frame (without its size prefix) as the parts of a framed response carrying
    `correlation_id` instead: size prefix and id anew, then the rest of `frame` (a view of a large one:
    no copy)."""
    rest = frame[4:] if len(frame) < _VIEW_FROM else memoryview(frame)[4:]
    return _FRAMED_ID.pack(len(frame), correlation_id), rest


def produce_acks(frame: bytes | bytearray, header: RequestHeader) -> int:
    """`acks` of a Produce request without decoding its records (acks=0 means no response)."""
    pos = header.body_offset
    if header.api_version >= 3:
        if header.api_version >= 9:
            n, pos = read_uvarint(frame, pos)
            pos += max(n - 1, 0)
        else:
            n = int.from_bytes(frame[pos : pos + 2], "big", signed=True)
            pos += 2 + max(n, 0)
    if pos + 2 > len(frame):
        raise CodecError("truncated produce request")
    return int.from_bytes(frame[pos : pos + 2], "big", signed=True)
