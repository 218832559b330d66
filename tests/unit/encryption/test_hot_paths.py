"""The inlined hot paths of EncryptingSerializer / DecryptingDeserializer against their general paths
(`_encrypt`, `_decrypt`): the same bytes for the same record, and the same refusals."""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from encryption import (
    DataKeyCache,
    DecryptingDeserializer,
    DecryptionError,
    EncryptingSerializer,
    EncryptionError,
    LocalKms,
    RecordContext,
)
from encryption.envelope import HEADER

VALUE = MessageField.VALUE
UNKNOWN = object()  # no key serializer left the record's key: a plain SerializationContext
PAYLOADS = (b"", b"x", b"a kibibyte-ish payload " * 45)


def context(key: object, headers: Any, topic: str = "orders") -> SerializationContext:
    if key is UNKNOWN:
        return SerializationContext(topic, VALUE, headers)
    return RecordContext(topic, VALUE, headers, key=key)


def must_not_run(*_: object) -> None:
    raise AssertionError("the general path ran: the inlined one should have handled this record")


def twins(kms: LocalKms, monkeypatch: pytest.MonkeyPatch, bind_key: bool) -> tuple[EncryptingSerializer, ...]:
    """Two serializers with the same data key and nonce counter (deterministic randomness), both past
    their first record (which takes the general path and makes the data key and the topic known)."""
    draws = itertools.count()
    monkeypatch.setattr(os, "urandom", lambda n: hashlib.sha256(b"hot-%d" % next(draws)).digest()[:n])
    pair = []
    for _ in range(2):
        draws = itertools.count()  # the lambda reads the rebound name: both draw the same bytes
        serializer = EncryptingSerializer(kms, "orders", bind_key=bind_key)
        serializer(b"first", context(b"k" if bind_key else UNKNOWN, []))
        pair.append(serializer)
    return tuple(pair)


@pytest.mark.parametrize(
    ("bind_key", "key", "inlined"),
    [
        (False, UNKNOWN, True),
        (False, b"alice", True),  # a known key that is not bound
        (True, b"alice", True),
        (True, b"", True),
        (True, None, True),  # a null Kafka key
        (True, bytearray(b"alice"), False),  # left to the general path
    ],
)
def test_the_inlined_serializer_writes_the_bytes_of_the_general_path(
    kms: LocalKms, monkeypatch: pytest.MonkeyPatch, bind_key: bool, key: object, inlined: bool
) -> None:
    fast, reference = twins(kms, monkeypatch, bind_key)
    if inlined:
        monkeypatch.setattr(fast, "_encrypt", must_not_run)
    for payload in PAYLOADS:
        fast_headers: list[tuple[str, bytes]] = []
        reference_headers: list[tuple[str, bytes]] = []
        value = fast(payload, context(key, fast_headers))
        expected = reference._encrypt(payload, context(key, reference_headers))
        assert (value, fast_headers) == (expected, reference_headers)
        assert len(fast_headers) == 1 and fast_headers[0][0] == HEADER


@pytest.mark.parametrize(
    ("bind_key", "key", "headers", "payload", "error"),
    [
        (True, UNKNOWN, [], b"p", "key is not known"),
        (True, UNKNOWN, None, b"p", "key is not known"),
        (False, UNKNOWN, [(HEADER, b"stale")], b"p", "already carry"),
        (True, b"alice", [(HEADER, b"stale")], b"p", "already carry"),
        (False, UNKNOWN, [], "not bytes", "must be bytes"),
        (True, None, {}, b"p", None),  # dict headers: not inlined, written by the general path
    ],
)
def test_the_inlined_serializer_refuses_what_the_general_path_refuses(
    kms: LocalKms, monkeypatch: pytest.MonkeyPatch, bind_key: bool, key: object, headers: Any, payload: Any,
    error: str | None,
) -> None:
    fast, reference = twins(kms, monkeypatch, bind_key)
    outcomes = []
    for run in (fast, reference._encrypt):
        given = type(headers)(headers) if headers is not None else None
        try:
            outcomes.append(("written", run(payload, context(key, given)), given))
        except EncryptionError as exc:
            outcomes.append(("refused", str(exc), given))
    assert outcomes[0] == outcomes[1]
    if error is None:
        assert outcomes[0][0] == "written"
    else:
        assert outcomes[0][0] == "refused" and error in outcomes[0][1]
        assert outcomes[0][2] == headers  # nothing half-written


def _records(kms: LocalKms) -> list[tuple[bytes, list[tuple[str, bytes]], object]]:
    """(value, headers, key) of bound records (bytes, empty and null keys) and unbound ones."""
    bound = EncryptingSerializer(kms, "orders")
    unbound = EncryptingSerializer(kms, "orders", bind_key=False)
    records = []
    for serializer, key in ((bound, b"alice"), (bound, b""), (bound, None), (unbound, UNKNOWN)):
        for payload in PAYLOADS:
            headers: list[tuple[str, bytes]] = []
            value = serializer(payload, context(key, headers))
            assert value is not None
            records.append((value, headers, key))
    return records


def test_the_inlined_deserializer_reads_what_the_general_path_reads(
    kms: LocalKms, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = _records(kms)
    warm = DecryptingDeserializer(kms)
    for value, headers, key in records:  # the first of each data key takes the general path
        warm(value, context(key, headers))
    general = DecryptingDeserializer(kms, cache=warm.cache)._decrypt
    monkeypatch.setattr(warm, "_decrypt", must_not_run)
    for value, headers, key in records:
        assert warm(value, context(key, headers)) == general(value, context(key, headers))


def _outcome(run: Callable[[bytes, SerializationContext], Any], value: bytes, headers: list[Any], key: object) -> tuple[str, Any]:
    try:
        return "read", run(value, context(key, list(headers)))
    except DecryptionError as exc:
        return "refused", exc.reason
    except EncryptionError as exc:  # a str key: RecordContext refuses it before either path runs
        return "EncryptionError", str(exc)


def _variants(value: bytes, headers: list[tuple[str, bytes]], key: object) -> list[tuple[bytes, list[Any], object]]:
    header = headers[0][1]
    return [
        (value, headers, key),
        (value[:-1] + bytes([value[-1] ^ 1]), headers, key),
        (value, headers, b"mallory"),  # moved onto another key
        (value, headers, None),
        (value, headers, UNKNOWN),
        (value, headers, bytearray(b"alice")),  # left to the general path
        (value, headers, "alice"),
        (value, [(HEADER, header[:-1])], key),  # an 11-byte nonce
        (value, [(HEADER, header + b"\x00")], key),  # a 13-byte nonce
        (value, [(HEADER, header[:1] + bytes([header[1] | 1]) + header[2:])], key),  # "compressed"
        (value, [(HEADER, header[:1] + bytes([header[1] ^ 2]) + header[2:])], key),  # bound <-> unbound
        (value, [(HEADER, b"\x02" + header[1:])], key),  # unknown version
        (value, [(HEADER, header[:2])], key),
        (value, [(HEADER, b"")], key),
        (value, [(HEADER, header), (HEADER, header)], key),
        (value, [(HEADER, bytearray(header))], key),
        (value, [("kgov.other", header)], key),
        (value, [], key),
    ]


@pytest.mark.parametrize("require_key_bound", [False, True])
def test_the_inlined_deserializer_refuses_what_the_general_path_refuses(
    kms: LocalKms, require_key_bound: bool
) -> None:
    records = _records(kms)
    lenient = DecryptingDeserializer(kms)
    for value, headers, key in records:  # both data keys cached
        lenient(value, context(key, headers))
    warm = DecryptingDeserializer(kms, cache=lenient.cache, require_key_bound=require_key_bound)
    value, headers, key = records[0]
    assert warm(value, context(key, headers)) == PAYLOADS[0]  # a bound record: the topic is known too
    general = DecryptingDeserializer(kms, cache=lenient.cache, require_key_bound=require_key_bound)._decrypt
    refused = 0
    for value, headers, key in records:
        for case in _variants(value, headers, key):
            outcome = _outcome(warm, *case)
            assert outcome == _outcome(general, *case), case
            refused += outcome[0] != "read"
    assert lenient.cache.kms_calls == 2  # one unwrap per data key; no variant reached the KMS
    assert refused > len(records) * 10  # most variants are refused
    genuine = {headers[0][1][:-12] for _, headers, _ in records}
    assert warm._last[0] in genuine  # a header that never authenticated is not remembered


def test_the_remembered_header_is_forgotten_with_its_expired_data_key(
    kms: LocalKms, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    cache = DataKeyCache(kms, ttl_seconds=60, now=lambda: clock[0])
    deserializer = DecryptingDeserializer(kms, cache=cache)
    serializer = EncryptingSerializer(kms, "orders", bind_key=False)
    records = []
    for i in range(4):
        headers: list[tuple[str, bytes]] = []
        records.append((serializer(b"record %d" % i, context(UNKNOWN, headers)), headers))
    for value, headers in records[:2]:  # the first takes the general path, the second is remembered
        deserializer(value, context(UNKNOWN, headers))
    assert cache.kms_calls == 1 and deserializer._last[0] is not None
    clock[0] += 60  # the data key's time in the cache is up: the general path unwraps it again
    value, headers = records[2]
    assert deserializer(value, context(UNKNOWN, headers)) == b"record 2"
    assert cache.kms_calls == 2 and deserializer._last[0] is None
    monkeypatch.setattr(deserializer, "_decrypt", must_not_run)  # then the inlined path, with the new entry
    value, headers = records[3]
    assert deserializer(value, context(UNKNOWN, headers)) == b"record 3"
    assert deserializer._last[2] is cache.entries[headers[0][1][2:-12]]
