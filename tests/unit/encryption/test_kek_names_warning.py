"""A consumer built without `kek_names` accepts records under any KEK its KMS serves: it still does
(refusing would break every such consumer), but the first one of each kind in a process says so in the
log, once; `kek_names=ANY_KEK` chooses that on purpose, without the warning."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from encryption import (
    ANY_KEK,
    DecryptingDeserializer,
    EncryptingSerializer,
    LocalKms,
    RecordKeyDeserializer,
)
from encryption.fields import FieldDecryptingDeserializer, FieldPolicy

PII_SCHEMA = {"type": "object", "properties": {"ssn": {"type": "string", "confluent:tags": ["PII"]}}}


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("encryption.serdes._WARNED", set())


def warnings_in(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "encryption" and r.levelno == logging.WARNING]


def test_the_first_consumer_without_kek_names_warns_once_per_kind(kms: LocalKms,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "encryption")
    DecryptingDeserializer(kms)
    DecryptingDeserializer(kms)
    RecordKeyDeserializer(kms)
    FieldDecryptingDeserializer(kms, FieldPolicy.from_json_schema(PII_SCHEMA))
    messages = warnings_in(caplog)
    assert [m.split(" ")[0] for m in messages] == [
        "DecryptingDeserializer", "RecordKeyDeserializer", "FieldDecryptingDeserializer"]
    assert "without kek_names accepts records under every KEK" in messages[0]
    assert "kek_names=ANY_KEK" in messages[0]


def test_kek_names_or_any_kek_on_purpose_say_nothing(kms: LocalKms, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "encryption")
    kms.create_key("payments")
    DecryptingDeserializer(kms, kek_names=["orders"])
    RecordKeyDeserializer(kms, kek_names=ANY_KEK)
    reader = DecryptingDeserializer(kms, kek_names=ANY_KEK)
    # Every rule naming its KEK (encrypt.kek.name): each field is held to it, nothing to choose.
    FieldDecryptingDeserializer(kms, FieldPolicy.from_json_schema(PII_SCHEMA, rule_set={"domainRules": [
        {"name": "e", "type": "ENCRYPT", "tags": ["PII"], "params": {"encrypt.kek.name": "orders"}}]}))
    assert warnings_in(caplog) == []
    headers: list[tuple[str, bytes]] = []
    value = EncryptingSerializer(kms, "payments", bind_key=False)(b"any", SerializationContext(
        "orders", MessageField.VALUE, headers))
    assert reader(value, SerializationContext("orders", MessageField.VALUE, headers)) == b"any"
