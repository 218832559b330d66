"""Benchmark of the encrypting serdes against raw AES-256-GCM (issue 6).

Prints records/s to encrypt and to decrypt 100 B, 1 KiB and 16 KiB values through
`EncryptingSerializer` / `DecryptingDeserializer` (header form, LocalKms, a fresh
SerializationContext and headers list per record, as SerializingProducer does), next to raw
`cryptography` AESGCM in the same run, the ratio serdes/raw, and the KMS calls needed for 1M records.
Targets (issue 6): serdes >= 0.5 of raw AES-GCM at 1 KiB; >= 300,000 records/s per core encrypting 1 KiB.

    .venv/bin/python bench/encryption_bench.py [--records N] [--kms-records N]
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

SIZES = (100, 1024, 16 * 1024)
TOPIC = "bench-orders"


def best_rate(run: Callable[[], None], records: int, repeats: int = 3,
              prepare: Callable[[], None] = lambda: None) -> float:
    best = float("inf")
    for _ in range(repeats):
        prepare()
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return records / best


def measure(size: int, records: int, kms: LocalKms) -> dict[str, float]:
    payload = os.urandom(size)
    aead = AESGCM(os.urandom(32))
    nonces = [i.to_bytes(12, "big") for i in range(records)]
    aad = b"x" * 100  # like our header + topic

    def raw_encrypt() -> None:
        for nonce in nonces:
            aead.encrypt(nonce, payload, aad)

    sealed = [aead.encrypt(nonce, payload, aad) for nonce in nonces[:1000]]

    def raw_decrypt() -> None:
        for i in range(records):
            aead.decrypt(nonces[i % 1000], sealed[i % 1000], aad)

    serializer = EncryptingSerializer(kms, "bench")
    deserializer = DecryptingDeserializer(kms)

    # The client builds one SerializationContext per record whatever the serializer; building them
    # (~0.25 us each) is kept out of the timed loop, as it is out of the raw baseline.
    contexts: list[SerializationContext] = []

    def fresh_contexts() -> None:
        contexts[:] = [SerializationContext(TOPIC, MessageField.VALUE, []) for _ in range(records)]

    def serdes_encrypt() -> None:
        for ctx in contexts:
            serializer(payload, ctx)

    produced = []
    for _ in range(1000):
        headers: list[tuple[str, bytes]] = []
        value = serializer(payload, SerializationContext(TOPIC, MessageField.VALUE, headers))
        produced.append((value, headers))

    read_contexts = [SerializationContext(TOPIC, MessageField.VALUE, headers) for _, headers in produced]
    values = [value for value, _ in produced]

    def serdes_decrypt() -> None:
        for i in range(records):
            deserializer(values[i % 1000], read_contexts[i % 1000])

    return {
        "raw_enc": best_rate(raw_encrypt, records),
        "raw_dec": best_rate(raw_decrypt, records),
        "enc": best_rate(serdes_encrypt, records, prepare=fresh_contexts),
        "dec": best_rate(serdes_decrypt, records),
    }


def kms_calls(records: int, kms: LocalKms) -> tuple[int, int]:
    serializer = EncryptingSerializer(kms, "bench")
    deserializer = DecryptingDeserializer(kms)
    payload = os.urandom(100)
    for _ in range(records):
        headers: list[tuple[str, bytes]] = []
        value = serializer(payload, SerializationContext(TOPIC, MessageField.VALUE, headers))
        deserializer(value, SerializationContext(TOPIC, MessageField.VALUE, headers))
    return serializer.issuer.kms_calls, deserializer.cache.kms_calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="records per measurement")
    parser.add_argument("--kms-records", type=int, default=1_000_000, help="records for the KMS-call count")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        kms = LocalKms(Path(tmp) / "ring.json")
        kms.create_key("bench")
        print(f"{'size':>7} {'raw enc/s':>11} {'serdes enc/s':>13} {'ratio':>6} "
              f"{'raw dec/s':>11} {'serdes dec/s':>13} {'ratio':>6}")
        results = {}
        for size in SIZES:
            r = results[size] = measure(size, args.records, kms)
            print(f"{size:>7} {r['raw_enc']:>11,.0f} {r['enc']:>13,.0f} {r['enc'] / r['raw_enc']:>6.2f} "
                  f"{r['raw_dec']:>11,.0f} {r['dec']:>13,.0f} {r['dec'] / r['raw_dec']:>6.2f}")
        wraps, unwraps = kms_calls(args.kms_records, kms)
        print(f"KMS calls for {args.kms_records:,} records: {wraps} wrap (producer), {unwraps} unwrap (consumer)")
        one_k = results[1024]
        print(f"target 1 KiB encrypt ratio >= 0.50: {one_k['enc'] / one_k['raw_enc']:.2f}; "
              f"target >= 300,000 records/s encrypting 1 KiB: {one_k['enc']:,.0f}")


if __name__ == "__main__":
    main()
