"""The pure parts of `kgov audit classify`: tags found in a registry's schema listing."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import urllib.parse
from collections.abc import Iterator

import pytest

from spark_compliance.inventory import InventoryError, parse_classification
from spark_compliance.registry_tags import ClassifyError, classification, own_tags, subject_tags, topic_of


@pytest.mark.parametrize(("subject", "topic"), [
    ("orders-value", "orders"), ("orders-key", "orders"), ("orders-key-value", "orders-key"),
    (":.eu:orders-value", "orders"), ("-value", None), ("com.acme.Order", None), ("orders", None),
])
def test_topic_of_follows_topic_name_strategy(subject: str, topic: str | None) -> None:
    assert topic_of(subject) == topic


def test_own_tags_reads_metadata_and_inline_tags_not_protobuf_text() -> None:
    avro = {"schema": json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "a", "type": {"type": "array", "items": {"type": "record", "name": "S", "fields": [
            {"name": "b", "type": "string", "confluent:tags": ["pii", " "]}]}}}]}),
        "metadata": {"tags": {"R.a": ["GDPR"]}, "properties": {"owner": "x"}}}
    assert own_tags(avro) == {"PII", "GDPR"}
    proto = {"schemaType": "PROTOBUF", "schema": 'message M { string s = 1 [(confluent.field_meta).tags = "PCI"]; }',
             "metadata": {"tags": {"M.s": ["PHI"]}}}
    assert own_tags(proto) == {"PHI"}
    assert own_tags({"schema": "not json", "metadata": {"tags": "not a map"}}) == set()


def test_deeply_nested_schema_is_refused_clearly() -> None:
    nested: dict[str, object] = {"type": "string"}
    for _ in range(300):
        nested = {"type": "array", "items": nested}
    with pytest.raises(ClassifyError, match="nested deeper than 200"):
        own_tags({"schemaType": "JSON", "schema": json.dumps(nested)})


def test_references_count_transitively_and_cycles_end() -> None:
    listing = [
        {"subject": "a", "version": 1, "schema": "{}", "metadata": {"tags": {"x": ["PII"]}},
         "references": [{"name": "b", "subject": "b", "version": 1}]},
        {"subject": "b", "version": 1, "schema": "{}", "metadata": {"tags": {"y": ["PCI"]}},
         "references": [{"name": "a", "subject": "a", "version": 1}, {"name": "gone", "subject": "z", "version": 9}]},
        {"subject": "t-value", "version": 1, "schema": "{}", "references": [{"name": "a", "subject": "a", "version": 1}]},
        {"subject": "t-value", "version": 2, "schema": "{}"},
    ]
    tags = subject_tags(listing)
    assert tags["t-value"] == {"PII", "PCI"}
    assert tags["a"] == {"PII", "PCI"} and tags["b"] == {"PII", "PCI"}


def test_classification_skips_untagged_and_reports_unmappable() -> None:
    doc, skipped = classification({"t-value": {"PII"}, "quiet-value": set(), "com.acme.R": {"PCI"}})
    assert doc == {"subjects": [{"subject": "t-value", "tags": ["PII"], "approved_principals": []}], "topics": []}
    assert skipped == ["com.acme.R"]


def test_hand_written_subject_without_a_topic_is_refused() -> None:
    with pytest.raises(InventoryError, match=r"'com\.acme\.R' does not name a topic"):
        parse_classification({"subjects": [{"subject": "com.acme.R", "tags": ["PII"]}]})
    rows = parse_classification({"subjects": [{"subject": "orders-key-value", "tags": ["pii"]}]})
    assert rows == [("orders-key", "LITERAL", ["PII"], [])]


def test_redirect_is_not_followed_so_credentials_stay_put() -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from spark_compliance.registry_tags import RegistryAccess, fetch_schemas

    seen: list[str | None] = []

    class Elsewhere(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"[]")

        def log_message(self, *args: object) -> None:
            pass

    elsewhere = ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)

    class Redirecting(Elsewhere):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{elsewhere.server_address[1]}/schemas")
            self.end_headers()

    registry = ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (elsewhere, registry)]
    for t in threads:
        t.start()
    try:
        access = RegistryAccess(f"http://127.0.0.1:{registry.server_address[1]}", "admin", "s3cret-pass")
        with pytest.raises(ClassifyError, match=r"answered HTTP 302.*redirects are not followed") as refused:
            fetch_schemas(access)
        assert "s3cret-pass" not in str(refused.value)
        assert seen == []
    finally:
        for s in (elsewhere, registry):
            s.shutdown()
            s.server_close()


def test_a_schema_too_deep_for_the_json_parser_is_refused_not_a_crash() -> None:
    with pytest.raises(ClassifyError, match="nested deeper than 200"):
        own_tags({"schemaType": "JSON", "schema": "[" * 100_000 + "]" * 100_000})


@contextlib.contextmanager
def _registry(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _listing(count: int) -> list[dict[str, object]]:
    return [{"subject": f"t{i:04d}-value", "version": 1, "id": i + 1, "schema": "{}",
             "metadata": {"tags": {"R.f": ["PII"]}}} for i in range(count)]


class _Quiet(http.server.BaseHTTPRequestHandler):
    def answer(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def test_every_page_of_a_registry_that_caps_its_listing_is_read() -> None:
    """Confluent answers GET /schemas with at most `schema.search.max.limit` (1,000) schemas, whatever the
    limit asked: one request classified only the first thousand versions."""
    from spark_compliance.registry_tags import RegistryAccess, fetch_schemas

    everything = _listing(2_345)
    queries: list[dict[str, list[str]]] = []

    class Capped(_Quiet):
        def do_GET(self) -> None:
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            queries.append(query)
            offset = int(query.get("offset", ["0"])[0])
            limit = min(int(query.get("limit", ["1000"])[0]), 700)  # a registry whose maximum is lower still
            self.answer(everything[offset:offset + limit])

    with _registry(Capped) as url:
        schemas = fetch_schemas(RegistryAccess(url))
    assert [s["subject"] for s in schemas] == [s["subject"] for s in everything]
    assert [q["offset"] for q in queries] == [["0"], ["700"], ["1400"], ["2100"], ["2345"]]
    assert all(q["latestOnly"] == ["false"] and q["deleted"] == ["true"] for q in queries)
    assert len(subject_tags(schemas)) == 2_345


def test_a_registry_that_ignores_offset_is_read_once() -> None:
    from spark_compliance.registry_tags import RegistryAccess, fetch_schemas

    everything = _listing(3)

    class Unpaged(_Quiet):
        def do_GET(self) -> None:
            self.answer(everything)

    with _registry(Unpaged) as url:
        assert fetch_schemas(RegistryAccess(url)) == everything


def test_soft_deleted_versions_are_classified_too() -> None:
    """Soft-deleting a schema version deletes none of the records written with it (deserializers still read
    them by id): its tags still describe the topic."""
    from spark_compliance.registry_tags import RegistryAccess, fetch_schemas

    live = {"subject": "orders-value", "version": 2, "id": 2, "schema": "{}"}
    deleted = {"subject": "orders-value", "version": 1, "id": 1, "schema": "{}", "metadata": {"tags": {"R.f": ["PII"]}}}

    class SoftDeleting(_Quiet):
        def do_GET(self) -> None:
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            listing = [deleted, live] if query.get("deleted") == ["true"] else [live]
            self.answer(listing[int(query.get("offset", ["0"])[0]):])

    with _registry(SoftDeleting) as url:
        assert subject_tags(fetch_schemas(RegistryAccess(url))) == {"orders-value": {"PII"}}


def test_credentials_are_not_sent_over_plain_http_to_a_remote_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_compliance.registry_tags import RegistryAccess, fetch_schemas

    for url in ("http://registry.example.com:8081", "http://192.0.2.7:8081"):
        with pytest.raises(ClassifyError, match="refusing to send credentials over plain http"):
            fetch_schemas(RegistryAccess(url, "admin", "s3cret-pass"))
        with pytest.raises(ClassifyError, match="refusing to send credentials over plain http"):
            fetch_schemas(RegistryAccess(url, bearer_token="tok"))
    # Allowed on request (a trusted TLS proxy in front): the request is then attempted (nothing answers).
    monkeypatch.setattr("spark_compliance.registry_tags.TIMEOUT_S", 0.5)
    with pytest.raises(ClassifyError, match="cannot reach the registry"):
        fetch_schemas(RegistryAccess("http://192.0.2.7:9", "admin", "pw", allow_plain_http=True))


def test_registry_access_repr_holds_no_secret() -> None:
    from spark_compliance.registry_tags import RegistryAccess

    text = repr(RegistryAccess("https://r.example", "admin", "s3cret-pass", "tok-abc"))
    assert "s3cret-pass" not in text and "tok-abc" not in text and "admin" in text
