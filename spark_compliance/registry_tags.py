"""The topic-classification file derived from a schema registry's tags (`kgov audit classify`).

Data contracts carry their own classification: Confluent's schema metadata holds tags per field path
(`"metadata": {"tags": {"Customer.ssn": ["PII"]}}`), and Avro and JSON schemas tag fields inline
(`"confluent:tags": ["PII"]`). This module reads every version of every subject from any
registry that speaks Confluent's REST API (kgov's, Confluent's, Karapace) with `GET /schemas` (paged), and
writes the `subjects` part of the classification file `kgov audit run` reads (see `inventory.py`).

- A subject's tags are the union over all its versions: records written with an older version
  are still in the topic. Soft-deleted versions count too: deleting a schema version deletes no record
  written with it, and deserializers still read those by id. Hard-deleted ones are gone from the
  registry. Tags of referenced schemas count too, transitively (a value that embeds a tagged `Address`
  holds that data).
- Protobuf schemas are read for their metadata tags only (inline tags are field options, not JSON).
- Only the default context is listed (the registry's `GET /schemas`), as Confluent's endpoint does.
- An existing classification file can be merged (`--merge`): its `topics` are kept, its subjects'
  `approved_principals` are kept and their tags are joined with the registry's.

Uses the standard library's HTTP client only: this package runs on Spark clusters with nothing but
itself installed. Credentials never appear in errors.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

TIMEOUT_S = 30.0
# The schema listing is held whole (all its pages); this bounds the memory a wrong URL or a hostile server
# can make the command use (Confluent's own listing of 10,000 subjects with history is well under this).
MAX_RESPONSE_BYTES = 256 * 1024 * 1024
_MAX_DEPTH = 200  # nesting depth of a schema document walked for inline tags
# Schemas asked for per request: Confluent's `schema.search.max.limit` default. A registry with a lower
# maximum answers shorter pages; the listing ends at an empty one.
PAGE_SIZE = 1000


class ClassifyError(ValueError):
    """The registry could not be read or answered something unusable; the message says what."""


@dataclass(frozen=True, slots=True)
class RegistryAccess:
    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    bearer_token: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    allow_plain_http: bool = False  # credentials over http:// to a host other than loopback

    def headers(self) -> dict[str, str]:
        h = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
        if self.bearer_token is not None:
            h["Authorization"] = f"Bearer {self.bearer_token}"
        elif self.user is not None:
            pair = f"{self.user}:{self.password or ''}".encode()
            h["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        return h


def fetch_schemas(access: RegistryAccess) -> list[dict[str, Any]]:
    """Every version of every subject in the default context, soft-deleted ones included:
    `GET /schemas?deleted=true&latestOnly=false`,
    page after page. Confluent answers at most `schema.search.max.limit` (1,000 by default) schemas per
    request, so a single request left every version after the first thousand unclassified."""
    parts = urllib.parse.urlsplit(access.url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ClassifyError(f"--registry must be an http:// or https:// URL, not {access.url!r}")
    if parts.username is not None or parts.password is not None:
        raise ClassifyError("--registry must not carry credentials in the URL; use --user with KGOV_PASSWORD "
                            "or --password-stdin")
    sends_secret = access.user is not None or access.bearer_token is not None
    if parts.scheme == "http" and sends_secret and not access.allow_plain_http and not _is_loopback(parts.hostname):
        raise ClassifyError(f"refusing to send credentials over plain http to {parts.hostname}: use an https:// "
                            "registry URL (or --allow-plain-http behind a TLS-terminating proxy you trust)")
    handlers: list[urllib.request.BaseHandler] = [_NoRedirects()]
    if parts.scheme == "https":
        handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=access.ca_file)))
    opener = urllib.request.build_opener(*handlers)
    listing: list[dict[str, Any]] = []
    seen: set[tuple[Any, Any]] = set()
    budget = MAX_RESPONSE_BYTES
    while True:
        url = f"{access.url.rstrip('/')}/schemas?deleted=true&latestOnly=false&offset={len(listing)}&limit={PAGE_SIZE}"
        page, used = _get_page(opener, access, url, budget)
        budget -= used
        new = [entry for entry in page if (entry.get("subject"), entry.get("version")) not in seen]
        # An empty page is the end; a page of versions already read comes from a registry that ignores
        # `offset` and so listed everything at once.
        if not new:
            return listing
        seen.update((entry.get("subject"), entry.get("version")) for entry in new)
        listing.extend(new)


def _get_page(opener: urllib.request.OpenerDirector, access: RegistryAccess, url: str,
              budget: int) -> tuple[list[dict[str, Any]], int]:
    """One page of `GET /schemas` and its size in bytes, read up to `budget` bytes."""
    request = urllib.request.Request(url, headers=access.headers(), method="GET")  # noqa: S310 (scheme checked)
    try:
        with opener.open(request, timeout=TIMEOUT_S) as response:
            body = response.read(budget + 1)
    except urllib.error.HTTPError as e:
        hint = " (redirects are not followed: they would carry the credentials elsewhere)" if 300 <= e.code < 400 else ""
        raise ClassifyError(f"the registry at {access.url} answered HTTP {e.code}{_confluent_error(e)}{hint}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = e.reason if isinstance(e, urllib.error.URLError) else e
        raise ClassifyError(f"cannot reach the registry at {access.url}: {reason}") from None
    if len(body) > budget:
        raise ClassifyError(f"the registry's schema listing exceeds {MAX_RESPONSE_BYTES} bytes")
    try:
        doc = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise ClassifyError(f"the registry at {access.url} did not answer JSON for GET /schemas") from None
    if not isinstance(doc, list) or not all(isinstance(s, dict) for s in doc):
        raise ClassifyError("GET /schemas did not answer a list of schemas")
    return doc, len(body)


def _is_loopback(host: str | None) -> bool:
    # A deliberate copy of sasl.config.is_loopback_host (plus urlsplit's None host): spark_compliance
    # imports nothing of kgov's but audit (ARCHITECTURE.md), so that it runs on a Spark cluster with only
    # its own package installed. A change to one is a change to both.
    if host is None:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A registry's API does not redirect; following one would send the Authorization header along."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> None:
        return None


def _confluent_error(e: urllib.error.HTTPError) -> str:
    """`: <message> (error_code N)` from a Confluent error body, if it has one."""
    try:
        body = json.loads(e.read(64 * 1024))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        return ""
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return f": {body['message'][:200]} (error_code {body.get('error_code')})"
    return ""


def inline_tags(node: Any, depth: int = 0) -> Iterator[str]:
    """`confluent:tags` anywhere in an Avro or JSON Schema document."""
    if depth > _MAX_DEPTH:
        raise ClassifyError(f"schema nested deeper than {_MAX_DEPTH} levels")
    if isinstance(node, dict):
        tags = node.get("confluent:tags")
        if isinstance(tags, list):
            yield from (t for t in tags if isinstance(t, str))
        for value in node.values():
            yield from inline_tags(value, depth + 1)
    elif isinstance(node, list):
        for value in node:
            yield from inline_tags(value, depth + 1)


def metadata_tags(schema: Mapping[str, Any]) -> Iterator[str]:
    metadata = schema.get("metadata")
    tags = metadata.get("tags") if isinstance(metadata, dict) else None
    if isinstance(tags, dict):
        for values in tags.values():
            if isinstance(values, list):
                yield from (t for t in values if isinstance(t, str))


def own_tags(schema: Mapping[str, Any]) -> set[str]:
    """The tags one registered version carries itself (metadata and inline), upper-cased."""
    found = set(metadata_tags(schema))
    if str(schema.get("schemaType") or "AVRO").upper() in ("AVRO", "JSON"):
        text = schema.get("schema")
        try:
            document = json.loads(text) if isinstance(text, str) else None
        except json.JSONDecodeError:
            document = None  # a registry stores valid schemas; an odd one contributes metadata tags only
        except RecursionError:  # deeper than the parser goes: its inline tags cannot be read, say so
            raise ClassifyError(f"schema nested deeper than {_MAX_DEPTH} levels") from None
        found.update(inline_tags(document))
    return {t.strip().upper() for t in found if t.strip()}


def subject_tags(schemas: Sequence[Mapping[str, Any]]) -> dict[str, set[str]]:
    """Each subject's tags over all its versions, including those of referenced versions (transitively)."""
    by_version: dict[tuple[str, int], Mapping[str, Any]] = {}
    for s in schemas:
        if isinstance(s.get("subject"), str) and isinstance(s.get("version"), int):
            by_version[(s["subject"], s["version"])] = s
    tags = {key: own_tags(schema) for key, schema in by_version.items()}
    refs: dict[tuple[str, int], list[tuple[str, int]]] = {
        key: [(r["subject"], r["version"]) for r in _listed(schema.get("references"))
              if isinstance(r, dict) and (r.get("subject"), r.get("version")) in by_version]
        for key, schema in by_version.items()}
    changed = True
    while changed:  # to a fixed point: references are usually a short chain, and a cycle ends here too
        changed = False
        for key, targets in refs.items():
            for target in targets:
                if not tags[target] <= tags[key]:
                    tags[key] |= tags[target]
                    changed = True
    out: dict[str, set[str]] = {}
    for key, found in tags.items():
        out.setdefault(key[0], set()).update(found)
    return out


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def topic_of(subject: str) -> str | None:
    """The topic of a TopicNameStrategy subject (`orders-value`, `:.ctx:orders-key`), else None."""
    # The context qualifier is read as registry.model._split_qualified reads it (Confluent's
    # QualifiedSubject): a deliberate copy, not an import, for the reason given in _is_loopback.
    name = subject
    if name.startswith(":.") and ":" in name[2:]:
        name = name[name.index(":", 2) + 1:]
    for suffix in ("-value", "-key"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return None


def classification(tags: Mapping[str, Iterable[str]], merge: Mapping[str, Any] | None = None,
                   ) -> tuple[dict[str, Any], list[str]]:
    """The classification document, and the tagged subjects left out because no topic can be derived."""
    base = dict(merge or {})
    kept: dict[str, dict[str, Any]] = {}
    for entry in base.get("subjects") or []:
        if isinstance(entry, dict) and isinstance(entry.get("subject"), str):
            kept[entry["subject"]] = dict(entry)
    skipped: list[str] = []
    for subject in sorted(tags):
        found = set(tags[subject])
        if not found:
            continue
        if topic_of(subject) is None:
            skipped.append(subject)
            continue
        entry = kept.setdefault(subject, {"subject": subject, "tags": [], "approved_principals": []})
        earlier = [t for t in entry.get("tags") or [] if isinstance(t, str)]
        entry["tags"] = sorted({t.upper() for t in earlier} | found)
    base["subjects"] = [kept[s] for s in sorted(kept)]
    base.setdefault("topics", [])
    return base, skipped
