"""The request-log entry (Kafka 2.8+ JSON shape), its text line and the kgov events around it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from audit.request_log import authentication_event, request_event, request_log_entry, request_log_line

TS = datetime(2026, 11, 21, 14, 0, 1, 234000, tzinfo=UTC)


def entry() -> dict[str, object]:
    return request_log_entry(
        api_key=0, api_version=9, api_name="PRODUCE", correlation_id=7, client_id="rdkafka",
        connection="127.0.0.1:9192-127.0.0.1:50000-3", principal="User:alice", listener="EXTERNAL",
        security_protocol="SASL_PLAINTEXT", software_name="librdkafka", software_version="2.16.0",
        total_time_ms=1.23456, throttle_time_ms=0, request_bytes=1100, response_bytes=60, records_bytes=1024,
    )


def test_entry_has_kafkas_fields_and_the_gateways_sizes() -> None:
    e = entry()
    assert e["requestHeader"] == {"requestApiKey": 0, "requestApiVersion": 9, "correlationId": 7,
                                  "clientId": "rdkafka", "requestApiKeyName": "PRODUCE"}
    assert e["clientInformation"] == {"softwareName": "librdkafka", "softwareVersion": "2.16.0"}
    assert (e["principal"], e["listener"], e["securityProtocol"]) == ("User:alice", "EXTERNAL", "SASL_PLAINTEXT")
    assert e["totalTimeMs"] == 1.235 and e["throttleTimeMs"] == 0 and e["isForwarded"] is False
    assert (e["requestBytes"], e["responseBytes"], e["recordsBytes"]) == (1100, 60, 1024)
    assert "error" not in e


def test_text_line_is_kafkas_request_logger_line() -> None:
    line = request_log_line(TS, entry())
    prefix = "[2026-11-21 14:00:01,234] DEBUG Completed request:"
    assert line.startswith(prefix) and line.endswith(" (kafka.request.logger)")
    body = line[len(prefix): -len(" (kafka.request.logger)")]
    assert json.loads(body)["requestHeader"]["requestApiKeyName"] == "PRODUCE"


def test_events_are_cloudevents_with_the_entry_as_data() -> None:
    ev = request_event(source="kgov", time=TS, entry=entry()).to_dict()
    assert ev["type"] == "io.kgov.request" and ev["subject"] == "kgov/request=PRODUCE"
    assert ev["data"]["connection"].endswith("-3")
    auth = authentication_event(source="kgov", time=TS, principal=None, mechanism="SCRAM-SHA-512",
                                client_address="10.0.0.1", success=False, reason="unknown user").to_dict()
    assert auth["type"] == "io.kgov.authentication"
    assert auth["data"]["authenticationInfo"] == {"principal": None, "mechanism": "SCRAM-SHA-512"}
    assert auth["data"]["result"] == {"success": False, "reason": "unknown user", "reauthentication": False}


def test_a_named_delegation_token_id_is_bounded_in_the_event() -> None:
    """A SCRAM `tokenauth=true` login names its token by its user name, which the client chooses freely up to
    the SASL frame limit (Kafka's sasl.server.max.receive.size, 512 KiB). The failure's event carried it whole:
    every failed login (unauthenticated, from anyone) could write half a megabyte to the audit file, rotating
    the real audit trail out with a few thousand attempts. No token id is longer than the store's 64 characters."""
    from sasl.mechanism import Challenge, Failure
    from sasl.scram import SCRAM_SHA_256, ScramClient, ScramServer

    name = "t" * 500_000
    client = ScramClient(SCRAM_SHA_256, name, "not-the-hmac", extensions={"tokenauth": "true"})
    server = ScramServer(SCRAM_SHA_256, lambda _name, _token: None)
    challenge = server.step(client.first_message())
    assert isinstance(challenge, Challenge)
    failure = server.step(client.final_message(challenge.data))
    assert isinstance(failure, Failure) and failure.token_id == name
    event = authentication_event(source="kgov", time=TS, principal=None, mechanism="SCRAM-SHA-256",
                                 client_address="10.0.0.1", success=False, reason=failure.reason,
                                 token_id=failure.token_id)
    assert len(event.to_json()) < 2_000
    named = event.to_dict()["data"]["authenticationInfo"]["delegationTokenId"]
    assert named.startswith("t" * 64) and "500000 characters" in named
    real = "0b7cbd0c-4f0e-4a43-9d2e-5e6d1c7f1a2b"
    ok = authentication_event(source="kgov", time=TS, principal="User:alice", mechanism="SCRAM-SHA-256",
                              client_address="10.0.0.1", success=True, token_id=real)
    assert ok.to_dict()["data"]["authenticationInfo"]["delegationTokenId"] == real
