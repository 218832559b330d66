"""Benchmark of the encrypting serdes against raw AES-256-GCM (issue 6).

Prints records/s to encrypt and to decrypt 100 B, 1 KiB and 16 KiB values through
`EncryptingSerializer` / `DecryptingDeserializer` (header form, LocalKms, an empty headers list per
record), next to raw `cryptography` AESGCM in the same run, the ratio serdes/raw, and the KMS calls
needed for 1M records; then records/s through `FieldEncryptingSerializer` / `FieldDecryptingDeserializer`
(a JSON Schema record with three randomized string fields and one array of two tagged strings, no inner
serializer; decrypting without an inner deserializer, which checks the record against the schema, and
with one that passes the dict on). Building the SerializationContext is the client's cost and is left out: the
contexts are built before the timed rounds and their headers lists cleared before each call.
Targets (issue 6): serdes >= 0.5 of raw AES-GCM at 1 KiB; >= 300,000 records/s per core encrypting 1 KiB.

    .venv/bin/python bench/encryption_bench.py [--records N] [--rounds N] [--kms-records N] [--field-records N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka.serialization import MessageField, SerializationContext
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from encryption import DecryptingDeserializer, EncryptingSerializer, LocalKms
from encryption.fields import FieldDecryptingDeserializer, FieldEncryptingSerializer, FieldPolicy

SIZES = (100, 1024, 16 * 1024)
TOPIC = "bench-orders"


def interleaved_rates(runs: dict[str, Callable[[int], None]], records: int, rounds: int) -> dict[str, float]:
    """Records/s of each run, alternating short rounds so that load from other processes on a shared
    machine hits all of them alike; the fastest round of each counts."""
    per_round = max(1, records // rounds)
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(rounds):
        for name, run in runs.items():
            start = time.perf_counter()
            run(per_round)
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: per_round / seconds for name, seconds in best.items()}


def measure(size: int, records: int, rounds: int, kms: LocalKms) -> dict[str, float]:
    payload = os.urandom(size)
    aead = AESGCM(os.urandom(32))
    per_round = max(1, records // rounds)
    nonces = [i.to_bytes(12, "big") for i in range(per_round)]
    aad = b"x" * 100  # about our header + topic
    sealed = [aead.encrypt(nonce, payload, aad) for nonce in nonces]

    def raw_encrypt(n: int) -> None:
        for nonce in nonces[:n]:
            aead.encrypt(nonce, payload, aad)

    def raw_decrypt(n: int) -> None:
        for i in range(n):
            aead.decrypt(nonces[i], sealed[i], aad)

    serializer = EncryptingSerializer(kms, "bench", bind_key=False)
    deserializer = DecryptingDeserializer(kms, kek_names=["bench"])
    # The client builds one SerializationContext per record whatever the serializer; building them
    # (~0.25 us each) is kept out of the timed loop, as it is out of the raw baseline.
    contexts = [SerializationContext(TOPIC, MessageField.VALUE, []) for _ in range(per_round)]

    def serdes_encrypt(n: int) -> None:
        for ctx in contexts[:n]:
            ctx.headers.clear()  # type: ignore[union-attr]
            serializer(payload, ctx)

    produced = []
    for _ in range(per_round):
        headers: list[tuple[str, bytes]] = []
        value = serializer(payload, SerializationContext(TOPIC, MessageField.VALUE, headers))
        produced.append((value, SerializationContext(TOPIC, MessageField.VALUE, headers)))

    def serdes_decrypt(n: int) -> None:
        for value, ctx in produced[:n]:
            deserializer(value, ctx)

    return interleaved_rates(
        {"raw_enc": raw_encrypt, "enc": serdes_encrypt, "raw_dec": raw_decrypt, "dec": serdes_decrypt},
        records, rounds,
    )


def kms_calls(records: int, kms: LocalKms) -> tuple[int, int]:
    serializer = EncryptingSerializer(kms, "bench", bind_key=False)
    deserializer = DecryptingDeserializer(kms, kek_names=["bench"])
    payload = os.urandom(100)
    for _ in range(records):
        headers: list[tuple[str, bytes]] = []
        value = serializer(payload, SerializationContext(TOPIC, MessageField.VALUE, headers))
        deserializer(value, SerializationContext(TOPIC, MessageField.VALUE, headers))
    return serializer.issuer.kms_calls, deserializer.cache.kms_calls


_PII = {"type": "string", "confluent:tags": ["PII"]}
FIELD_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "string"}, "ssn": _PII, "email": _PII, "address": _PII, "amount": {"type": "number"},
        "phones": {"type": "array", "items": _PII},
    },
}
FIELD_RECORD = {"id": "c-1", "ssn": "078-05-1120", "email": "alice@example.com",
                "address": "1 Main Street, Springfield", "amount": 12.5, "phones": ["+1 555 0100", "+1 555 0101"]}


def measure_fields(records: int, rounds: int, kms: LocalKms) -> dict[str, float]:
    """Records/s of field-level encryption (five randomized values per record), without inner serdes."""
    policy = FieldPolicy.from_json_schema(FIELD_SCHEMA)
    serializer = FieldEncryptingSerializer(kms, "bench", policy)
    deserializer = FieldDecryptingDeserializer(kms, policy, kek_names=["bench"])
    # With an inner deserializer (here one that passes the dict on), the record's shape is the inner
    # one's to check: this is the cost of the field format alone, without the schema check.
    with_inner = FieldDecryptingDeserializer(kms, policy, lambda data, _: data, kek_names=["bench"])
    per_round = max(1, records // rounds)
    contexts = [SerializationContext(TOPIC, MessageField.VALUE, []) for _ in range(per_round)]

    def encrypt(n: int) -> None:
        for ctx in contexts[:n]:
            ctx.headers.clear()  # type: ignore[union-attr]
            serializer(FIELD_RECORD, ctx)

    produced = []
    for _ in range(per_round):
        ctx = SerializationContext(TOPIC, MessageField.VALUE, [])
        produced.append((serializer(FIELD_RECORD, ctx), ctx))
    assert deserializer(*produced[0]) == FIELD_RECORD

    def decrypt(n: int) -> None:
        for value, ctx in produced[:n]:
            deserializer(value, ctx)

    def decrypt_with_inner(n: int) -> None:
        for value, ctx in produced[:n]:
            with_inner(value, ctx)

    return interleaved_rates({"enc": encrypt, "dec": decrypt, "dec_inner": decrypt_with_inner}, records, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="records per measurement")
    parser.add_argument("--rounds", type=int, default=40, help="alternating rounds per measurement")
    parser.add_argument("--kms-records", type=int, default=1_000_000, help="records for the KMS-call count")
    parser.add_argument("--field-records", type=int, default=50_000, help="records per field-level measurement")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        kms = LocalKms(Path(tmp) / "ring.json")
        kms.create_key("bench")
        print(f"{'size':>7} {'raw enc/s':>11} {'serdes enc/s':>13} {'ratio':>6} "
              f"{'raw dec/s':>11} {'serdes dec/s':>13} {'ratio':>6}")
        results = {}
        for size in SIZES:
            r = results[size] = measure(size, args.records, args.rounds, kms)
            print(f"{size:>7} {r['raw_enc']:>11,.0f} {r['enc']:>13,.0f} {r['enc'] / r['raw_enc']:>6.2f} "
                  f"{r['raw_dec']:>11,.0f} {r['dec']:>13,.0f} {r['dec'] / r['raw_dec']:>6.2f}")
        wraps, unwraps = kms_calls(args.kms_records, kms)
        print(f"KMS calls for {args.kms_records:,} records: {wraps} wrap (producer), {unwraps} unwrap (consumer)")
        one_k = results[1024]
        print(f"target 1 KiB encrypt ratio >= 0.50: {one_k['enc'] / one_k['raw_enc']:.2f}; "
              f"target >= 300,000 records/s encrypting 1 KiB: {one_k['enc']:,.0f}")
        fields = measure_fields(args.field_records, args.rounds, kms)
        print(f"field-level (5 randomized values per record): {fields['enc']:,.0f} records/s encrypt, "
              f"{fields['dec']:,.0f} records/s decrypt without inner, {fields['dec_inner']:,.0f} with inner")


if __name__ == "__main__":
    main()
