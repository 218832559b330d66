"""A small synchronous client of the Confluent-compatible REST API, for `registry.serdes`.

Talks to kgov or to any Confluent-compatible registry. Ids are immutable, so schemas fetched by id,
ids obtained for (subject, schema), numbered versions (as confluent-kafka's `get_version` caches
them; `latest` is always asked) and the subject whose context an id's references resolve in
(`registry.serdes.id_referrer`) are cached for the life of the client: deserializers sharing a client
ask the registry about an id once. A URL ending in
`/contexts/<ctx>` (Confluent's context base URL) binds the client to that context: the server reads
the subjects it names as `:.<ctx>:<subject>` (`qualified`).
"""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from authz.cleartext_credentials import refuse_cleartext_credentials
from registry.contexts import qualifier, qualify
from registry.model import DEFAULT_CONTEXT, Reference

_ACCEPT = "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, application/json"
_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryClientError(Exception):
    """A non-2xx answer: `status` is the HTTP status, `code` Confluent's error code (or -1)."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(f"{message} (HTTP {status}, error code {code})")
        self.status = status
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class FetchedSchema:
    """`subject` is the subject the registry says it found the schema under, when it says one (by id,
    Confluent's newer servers do; kgov does not)."""

    schema: str
    schema_type: str = "AVRO"
    references: tuple[Reference, ...] = ()
    subject: str | None = None


@dataclass(frozen=True, slots=True)
class RegisteredVersion:
    subject: str
    version: int
    id: int
    schema: FetchedSchema


@dataclass
class RegistryClient:
    """`url` like `http://127.0.0.1:8080`; `basic_auth` is `(user, password)` or None. With `basic_auth`,
    a plain `http://` URL to a host other than loopback is refused (`CleartextCredentials`, a ValueError)
    unless `allow_plain_http` (the password would cross the network in clear text;
    `authz.cleartext_credentials`). Redirects are not followed, so an https URL never sends them on."""

    url: str
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)
    timeout_s: float = 10.0
    allow_plain_http: bool = False
    _http: httpx.Client = field(init=False, repr=False)
    _by_id: dict[int, FetchedSchema] = field(init=False, default_factory=dict, repr=False)
    _ids: dict[tuple[str, str, str, tuple[Reference, ...]], int] = field(init=False, default_factory=dict,
                                                                         repr=False)
    _versions: dict[tuple[bool, str, int], RegisteredVersion] = field(init=False, default_factory=dict, repr=False)
    _referrers: dict[int, str] = field(init=False, default_factory=dict, repr=False)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock, repr=False)
    context: str = field(init=False, default=DEFAULT_CONTEXT)
    _root: str = field(init=False, default="", repr=False)

    def __post_init__(self) -> None:
        if self.basic_auth is not None:
            refuse_cleartext_credentials(self.url, allowed=self.allow_plain_http,
                                         how_to_allow="allow_plain_http=True")
        base = self.url.rstrip("/")
        self._http = httpx.Client(base_url=base, auth=self.basic_auth, timeout=self.timeout_s,
                                  headers={"Accept": _ACCEPT})
        self.context, self._root = _bound_context(base)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Content-Type": _CONTENT_TYPE} if body is not None else None
        response = self._http.request(method, path, json=body, headers=headers)
        if response.status_code >= 300:
            try:
                doc = response.json()
                code, message = int(doc.get("error_code", -1)), str(doc.get("message", response.text))
            except (ValueError, AttributeError):
                code, message = -1, response.text or response.reason_phrase
            raise RegistryClientError(response.status_code, code, message)
        return response.json() if response.content else None

    @staticmethod
    def _body(schema: str, schema_type: str, references: Sequence[Reference]) -> dict[str, Any]:
        return {"schema": schema, "schemaType": schema_type, "references": [r.to_json() for r in references]}

    def register(self, subject: str, schema: str, schema_type: str = "AVRO",
                 references: Sequence[Reference] = (), *, normalize: bool = False) -> int:
        key = (subject, schema, schema_type, tuple(references))
        cached = self._ids.get(key)
        if cached is not None:
            return cached
        doc = self._request("POST", f"/subjects/{_quote(subject)}/versions?normalize={str(normalize).lower()}",
                            self._body(schema, schema_type, references))
        schema_id = int(doc["id"])
        with self._lock:
            self._ids[key] = schema_id
        return schema_id

    def lookup(self, subject: str, schema: str, schema_type: str = "AVRO",
               references: Sequence[Reference] = (), *, normalize: bool = False) -> RegisteredVersion:
        doc = self._request("POST", f"/subjects/{_quote(subject)}?normalize={str(normalize).lower()}",
                            self._body(schema, schema_type, references))
        return _version(doc)

    def schema_by_id(self, schema_id: int) -> FetchedSchema:
        cached = self._by_id.get(schema_id)
        if cached is not None:
            return cached
        doc = self._request("GET", f"/schemas/ids/{int(schema_id)}")
        fetched = _fetched(doc)
        with self._lock:
            self._by_id[schema_id] = fetched
        return fetched

    def qualified(self, subject: str) -> str:
        """The subject the registry reads for `subject` sent through this client's URL."""
        return qualify(qualifier(self.context), subject)

    def version(self, subject: str, version: int | str = "latest", *, qualified: bool = False) -> RegisteredVersion:
        """With `qualified`, `subject` is the registry's own name for it (`qualified`), asked of the
        registry's root: a client bound to a context can reach the default context's subjects too.
        A numbered version is asked once per client; `latest` (or -1) every time."""
        key = (qualified, subject, version) if isinstance(version, int) and version > 0 else None
        cached = self._versions.get(key) if key is not None else None
        if cached is not None:
            return cached
        path = f"/subjects/{_quote(subject)}/versions/{version}"
        found = _version(self._request("GET", self._root + path if qualified else path))
        if key is not None:
            with self._lock:
                self._versions[key] = found
        return found

    def id_usages(self, schema_id: int) -> list[tuple[str, int]]:
        """(subject, version) of the versions, soft-deleted ones included, that use `schema_id` and
        that the caller may read."""
        doc = self._request("GET", f"/schemas/ids/{int(schema_id)}/versions?deleted=true")
        return [(str(d["subject"]), int(d["version"])) for d in doc or []]

    def known_referrer(self, schema_id: int) -> str | None:
        """The subject `remember_referrer` kept for `schema_id`, if any."""
        return self._referrers.get(schema_id)

    def remember_referrer(self, schema_id: int, subject: str) -> None:
        """Keeps the subject in whose context the references of `schema_id` resolve
        (`registry.serdes.id_referrer`), for the life of the client."""
        with self._lock:
            self._referrers[schema_id] = subject


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _bound_context(base_url: str) -> tuple[str, str]:
    """(context, root URL) of a base URL: `http://h/contexts/.ctx` -> (`.ctx`, `http://h`); a URL without
    a context suffix is bound to the default context and is its own root."""
    parts = urllib.parse.urlsplit(base_url)
    head, sep, name = parts.path.rpartition("/contexts/")
    if not sep or not name or "/" in name:
        return DEFAULT_CONTEXT, base_url
    prefix = qualifier(urllib.parse.unquote(name))
    context = prefix[1:-1] if prefix else DEFAULT_CONTEXT
    return context, urllib.parse.urlunsplit(parts._replace(path=head))


def _fetched(doc: dict[str, Any]) -> FetchedSchema:
    refs = tuple(Reference(r["name"], r["subject"], int(r["version"])) for r in doc.get("references") or [])
    subject = doc.get("subject")
    return FetchedSchema(doc["schema"], doc.get("schemaType") or "AVRO", refs,
                         subject if isinstance(subject, str) else None)


def _version(doc: dict[str, Any]) -> RegisteredVersion:
    return RegisteredVersion(doc["subject"], int(doc["version"]), int(doc["id"]), _fetched(doc))
