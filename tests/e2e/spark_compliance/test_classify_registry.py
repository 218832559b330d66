"""`kgov audit classify`: the classification file derived from a real registry's tags.

Schemas are registered by confluent-kafka's registry client against a real `kgov serve`; the command
runs as an operator runs it, in its own process, with the password in KGOV_PASSWORD."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient

from spark_compliance.inventory import parse_classification
from tests.e2e.registry.kgov_process import PASSWORD, ROOT, kgov_serve

ADDRESS = {"type": "record", "name": "Address", "namespace": "com.acme",
           "fields": [{"name": "street", "type": "string", "confluent:tags": ["PII"]}]}
CUSTOMER_V1 = {"type": "record", "name": "Customer", "namespace": "com.acme",
               "fields": [{"name": "id", "type": "string", "confluent:tags": ["PII"]}]}
CUSTOMER_V2 = {"type": "record", "name": "Customer", "namespace": "com.acme",
               "fields": [{"name": "id", "type": "string"},
                          {"name": "card", "type": ["null", "string"], "default": None}]}
PAYMENT = {"type": "record", "name": "Payment", "namespace": "com.acme",
           "fields": [{"name": "id", "type": "string"}, {"name": "address", "type": "com.acme.Address"}]}
PATIENT_JSON = {"type": "object", "properties": {
    "id": {"type": "string"}, "diagnosis": {"type": "string", "confluent:tags": ["phi"]}}}


@pytest.fixture(scope="module")
def registry_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with (kgov_serve(tmp_path_factory.mktemp("classify-serve")) as url,
          SchemaRegistryClient({"url": url, "basic.auth.user.info": f"admin:{PASSWORD}"}) as client):
        # customers-value: v1 tags a field PII inline; v2 drops that tag and tags a field PCI in its metadata.
        # Records of both versions are in the topic: the union counts.
        client.register_schema("customers-value", Schema(json.dumps(CUSTOMER_V1), "AVRO"))
        # (Through plain HTTP: confluent-kafka 2.16's client registers metadata tags, then fails hashing the
        # answer's tag lists in its cache, `MetadataTags.__hash__`.)
        answer = httpx.post(f"{url}/subjects/customers-value/versions", auth=("admin", PASSWORD), json={
            "schema": json.dumps(CUSTOMER_V2), "metadata": {"tags": {"com.acme.Customer.card": ["PCI"]}}})
        assert answer.status_code == 200, answer.text
        # payments-value references a tagged Address: the reference's tags count.
        client.register_schema("address", Schema(json.dumps(ADDRESS), "AVRO"))
        client.register_schema("payments-value", Schema(json.dumps(PAYMENT), "AVRO", references=[
            SchemaReference("com.acme.Address", "address", 1)]))
        client.register_schema("patients-value", Schema(json.dumps(PATIENT_JSON), "JSON"))
        client.register_schema("untagged-value", Schema(json.dumps({"type": "string"}), "AVRO"))
        client.register_schema("com.acme.Tagged", Schema(json.dumps(ADDRESS), "AVRO"))  # RecordNameStrategy
        yield url


def _classify(url: str, out: Path, *extra: str, password: str = PASSWORD,
              stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KGOV_PASSWORD": password}
    return subprocess.run([sys.executable, "-m", "kgov", "audit", "classify", "--registry", url, "--user", "admin",
                           "--out", str(out), *extra], env=env, input=stdin, capture_output=True, text=True,
                          timeout=120)


def _subjects(doc: dict[str, Any]) -> dict[str, list[str]]:
    return {s["subject"]: s["tags"] for s in doc["subjects"]}


def test_tags_from_metadata_inline_history_and_references(registry_url: str, tmp_path: Path) -> None:
    out = tmp_path / "classification.json"
    done = _classify(registry_url, out)
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert _subjects(doc) == {"customers-value": ["PCI", "PII"], "payments-value": ["PII"], "patients-value": ["PHI"]}
    # The subject named by record (no topic to derive) is reported, not silently dropped or guessed.
    assert "'com.acme.Tagged' is tagged but names no topic" in done.stderr
    # What `kgov audit run` reads: one row per topic with the registry's classes.
    rows = {r[0]: r[2] for r in parse_classification(doc)}
    assert rows == {"customers": ["PCI", "PII"], "payments": ["PII"], "patients": ["PHI"]}


def test_merge_keeps_topics_and_approved_principals(registry_url: str, tmp_path: Path) -> None:
    existing = tmp_path / "hand.json"
    existing.write_text(json.dumps({
        "topics": [{"name": "cards.", "pattern_type": "PREFIXED", "classes": ["PCI"]}],
        "subjects": [{"subject": "customers-value", "tags": ["gdpr"], "approved_principals": ["User:crm"]}]}))
    out = tmp_path / "classification.json"
    done = _classify(registry_url, out, "--merge", str(existing))
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert doc["topics"] == [{"name": "cards.", "pattern_type": "PREFIXED", "classes": ["PCI"]}]
    customers = next(s for s in doc["subjects"] if s["subject"] == "customers-value")
    assert customers == {"subject": "customers-value", "tags": ["GDPR", "PCI", "PII"], "approved_principals": ["User:crm"]}


def test_wrong_password_is_a_clear_error_without_the_secret(registry_url: str, tmp_path: Path) -> None:
    out = tmp_path / "classification.json"
    done = _classify(registry_url, out, password="not-the-password-xyz")
    assert done.returncode == 2
    assert "answered HTTP 401" in done.stderr
    assert "not-the-password-xyz" not in done.stderr + done.stdout
    assert not out.exists()


def test_password_from_stdin_and_credentials_in_url_refused(registry_url: str, tmp_path: Path) -> None:
    out = tmp_path / "classification.json"
    done = _classify(registry_url, out, "--password-stdin", password="", stdin=PASSWORD + "\n")
    assert done.returncode == 0, done.stderr
    assert out.exists()
    with_creds = registry_url.replace("http://", f"http://admin:{PASSWORD}@")
    done = _classify(with_creds, tmp_path / "other.json")
    assert done.returncode == 2
    assert "must not carry credentials in the URL" in done.stderr
    assert PASSWORD not in done.stderr


def test_unreachable_registry(tmp_path: Path) -> None:
    from tests.support.ports import free_port

    done = _classify(f"http://127.0.0.1:{free_port()}", tmp_path / "c.json")
    assert done.returncode == 2
    assert "cannot reach the registry" in done.stderr
