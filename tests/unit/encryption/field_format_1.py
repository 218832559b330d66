"""Field-level records of format version 1 (not bound to their record), written by the field serializer
of commit 2223f76 under the KEK "orders" v1 = bytes(range(32)), topic "customers", no headers; the `fixed_kms` fixture (conftest.py) holds that KEK."""

from __future__ import annotations

import base64
from typing import Any

from encryption.datakeys import DataKeyIssuer
from encryption.envelope import MAGIC
from encryption.kms import Kms
from encryption.serdes import PayloadSealer

PII = {"type": "string", "confluent:tags": ["PII"]}
_V1_DATA_KEY = ("S0dFAQEABm9yZGVycwAAAAEAPFO5jgPOSawzCwan/jQWWkB+C1dAxk9w/9E9nHgxnYCQ4ptAxKGpKAKYrxLCBGPmbg5P"
                "2fuDyKLvxDTyWAAAAAAAAAAAAAAA")
V1_ALICE = {"ssn": _V1_DATA_KEY + "AL9OcfVBecVK+JuI5iS6kGkZOMGfWgRigI4=", "name": "Alice",
            "phones": [_V1_DATA_KEY + "Aa9HWhTcCuLeSMi/zC56218D6kvaEU9yLw==",
                       _V1_DATA_KEY + "AuzTDS3Wkz7A/f7EgPaI1dQ3Gza/wpnmmw=="]}
V1_MALLORY = {"ssn": _V1_DATA_KEY + "A4iMeh1lmevhTCAegIOnng5xKy3oID9j4stiAw==", "name": "Mallory", "phones": []}
V1_SCHEMA = {"type": "object", "properties": {"ssn": PII, "name": {"type": "string"},
                                              "phones": {"type": "array", "items": PII}}}


def sealed_in_format_1(kms: Kms, key_name: str, topic: str, record: dict[str, Any]) -> dict[str, Any]:
    """`record` (of V1_SCHEMA) as the field serializer wrote it before format version 2, on any topic:
    each tagged value sealed alone, bound to topic and rule path only."""
    sealer = PayloadSealer(DataKeyIssuer(kms), key_name)

    def seal(rule: str, value: str) -> str:
        header, ciphertext = sealer.seal(0, b"F" + rule.encode() + b"\0", topic, None, value.encode())
        return base64.b64encode(MAGIC + header + ciphertext).decode()

    return {**record, "ssn": seal("ssn", record["ssn"]), "phones": [seal("phones.[]", p) for p in record["phones"]]}
