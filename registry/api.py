"""The Confluent Schema Registry REST API, mounted at the control plane's root path.

Routers parse, authorize and delegate to `registry.service.SchemaRegistry`; `RegistryRoute` maps
every refusal to Confluent's `{"error_code", "message"}` body in one place. Content types follow
Confluent's `Versions`: requests may be sent as `application/vnd.schemaregistry.v1+json`,
`application/vnd.schemaregistry+json`, `application/json` or `application/octet-stream` (treated
as JSON); responses are negotiated from `Accept` (406 when none fits). Query booleans are parsed
case-insensitively, as JAX-RS does (the Python client sends `False`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine, Sequence
from importlib import metadata as importlib_metadata
from json.scanner import py_make_scanner  # type: ignore[attr-defined]
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from audit.model import EventType, change_event
from audit.sinks import AuditWriteError
from authz.database import StorageError
from authz.http import (
    ApiError,
    api_error_response,
    authenticated_principal,
    authorize_http,
    http_context,
    logged_incident,
)
from authz.model import CLUSTER_RESOURCE_NAME, Action, Operation, Principal, ResourceType
from registry import store
from registry.check_slots import ChecksBusy, CheckSlots, ChecksTimedOut
from registry.config import RegistryConfig
from registry.contexts import ContextPathRewrite
from registry.contracts import check_metadata, check_rule_set
from registry.fastpath import SchemaByIdFastPath
from registry.model import (
    MAX_SUBJECT_LENGTH,
    IncompatibleSchemaError,
    Reference,
    RegisterRequest,
    RegistryError,
    StoredSchema,
    SubjectVersion,
    contexts_of,
    parse_version,
    schema_not_found,
)
from registry.service import SUPPORTED_TYPES, Change, ReadCheck, SchemaRegistry, anyone_may_read

log = logging.getLogger(__name__)

V1_JSON = "application/vnd.schemaregistry.v1+json"
DEFAULT_JSON = "application/vnd.schemaregistry+json"
JSON = "application/json"
OCTET_STREAM = "application/octet-stream"
_PRODUCED = {V1_JSON: 1.0, DEFAULT_JSON: 0.9, JSON: 0.5}
_CONSUMED = frozenset({V1_JSON, DEFAULT_JSON, JSON, OCTET_STREAM})
AUDIT_SOURCE = "kgov/registry"
ANONYMOUS = Principal("User", "ANONYMOUS")


# ---------------------------------------------------------------------------- errors and responses


def _error(status: int, code: int, message: str, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps({"error_code": code, "message": message}).encode()
    return Response(body, status_code=status, media_type=V1_JSON, headers=headers)


def media_type_for(accept: str | None) -> str:
    """Content negotiation over the three JSON types Confluent produces (with its server weights)."""
    if not accept:
        return V1_JSON
    best, best_score = None, 0.0
    for part in accept.split(","):
        fields = part.split(";")
        media = fields[0].strip().lower()
        quality = 1.0
        for param in fields[1:]:
            key, _, value = param.partition("=")
            if key.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if media in ("*/*", "application/*", ""):
            candidates: Sequence[str] = list(_PRODUCED)
        elif media in _PRODUCED:
            candidates = [media]
        else:
            continue
        for candidate in candidates:
            score = quality * _PRODUCED[candidate]
            if score > best_score:
                best, best_score = candidate, score
    if best is None:
        raise ApiError(406, 406, "HTTP 406 Not Acceptable")
    return best


def respond(request: Request, content: Any, status: int = 200) -> Response:
    body = json.dumps(content, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(body, status_code=status, media_type=media_type_for(request.headers.get("accept")))


def respond_raw(request: Request, text: str) -> Response:
    return Response(text.encode(), media_type=media_type_for(request.headers.get("accept")))


class RegistryRoute(APIRoute):
    """Answers every refusal of the registry's routes with Confluent's error body."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except RegistryError as exc:
                return _error(exc.status, exc.code, exc.message)
            except ApiError as exc:
                return api_error_response(exc)
            except RequestValidationError:
                return _error(422, 422, "Unprocessable entity")
            except AuditWriteError as exc:
                incident = logged_incident(log, "registry: audit record could not be written", request, exc)
                return _error(500, 50001, f"Error while writing the audit record (incident {incident})")
            except (SQLAlchemyError, StorageError) as exc:
                incident = logged_incident(log, "registry: storage failure", request, exc)
                return _error(500, 50001, f"Error in the backend data store (incident {incident})")

        return guarded


router = APIRouter(route_class=RegistryRoute, tags=["schema-registry"])


# ---------------------------------------------------------------------------- request helpers


def flag(value: str | None, default: bool = False) -> bool:
    """JAX-RS `boolean` parameters: `true` in any case is true, anything else false."""
    if value is None:
        return default
    return value.strip().lower() == "true"


def _int_param(value: str | None, default: int, name: str) -> int:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise RegistryError(400, f"Query parameter {name} must be an integer") from None


def _page(items: list[Any], offset: str | None, limit: str | None) -> list[Any]:
    start = max(_int_param(offset, 0, "offset"), 0)
    count = _int_param(limit, -1, "limit")
    return items[start:] if count < 0 else items[start : start + count]


MAX_SCHEMA_ID = 2**31 - 1  # Confluent's ids are Java ints; a larger number would overflow the database's column
MIN_SCHEMA_ID = -(2**31)  # and so would a smaller one (PostgreSQL's integer; SQLite's past -2**63)


def _schema_id(text: str) -> int:
    try:
        schema_id = int(text)
    except ValueError:
        raise RegistryError(40403, "Schema not found") from None
    if not MIN_SCHEMA_ID <= schema_id <= MAX_SCHEMA_ID:
        raise schema_not_found(schema_id)
    return schema_id


def _registry(request: Request) -> SchemaRegistry:
    registry: SchemaRegistry = request.app.state.schema_registry
    return registry


def _config(request: Request) -> RegistryConfig:
    config: RegistryConfig = request.app.state.settings.registry
    return config


_T = TypeVar("_T")


# Bodies above this parse in more than about 0.1 s and take over 5 MiB of memory once parsed (about
# 90 times their size): they take a check slot for the whole request, so that concurrent large bodies
# cannot take every core or gigabytes of memory either. Real schemas are rarely this large.
LARGE_BODY_BYTES = 64 * 1024


def _timed_out(slots: CheckSlots) -> RegistryError:
    return RegistryError(50002, f"Operation timed out: the registry is busy comparing or parsing large "
                                f"schemas ({slots.limit} at a time) and this request could not start within "
                                f"{slots.wait_s:g} s (registry.max_concurrent_checks, registry.check_wait_s)")


async def run_schema_work(request: Request, work: Callable[[], _T]) -> _T:
    """`work` (a registration, compatibility test or lookup) in the thread pool. If it must compare
    schemas and every check slot is taken, it stops before doing anything (`ChecksBusy`); it then
    waits for a slot here, in the event loop, holding no thread, and runs again holding it (see
    `registry.check_slots`). A large body waits for a slot before it is parsed."""
    if getattr(request.state, "body_bytes", 0) <= LARGE_BODY_BYTES:
        try:
            return await run_in_threadpool(work)
        except ChecksBusy:
            pass
    slots: CheckSlots = request.app.state.registry_check_slots
    try:
        async with slots.waited():
            return await run_in_threadpool(work)
    except ChecksTimedOut:
        raise _timed_out(slots) from None


def parse_large_body(body: bytes) -> Any:
    """`json.loads` for a body over `LARGE_BODY_BYTES`, run in a worker thread. CPython's C parser holds
    the GIL for the whole document, so even in a thread an 8 MiB body of small tokens (`[1,1,...]`)
    stopped the event loop, and every other request, for its whole parse (0.3 to 1 s here). This one
    walks objects and arrays in Python (`json.scanner.py_make_scanner`), so the interpreter hands the
    GIL over every few milliseconds, and still reads strings, a real body's bulk (the schema), with the
    C `scanstring`: a body that is mostly one schema string parses as fast as before; one of millions
    of small tokens, which no registry request has, costs about 20 times the C parser's CPU, in one
    check slot. Its recursion takes two Python frames per level: such a body nested deeper than
    about 490 levels is refused as too deep (400), where `json.loads` goes to about 1000 as Jackson,
    Confluent's parser, does; no registry request nests more than a handful."""
    decoder = json.JSONDecoder()  # per call: the Python scanner keeps a memo of keys
    decoder.scan_once = py_make_scanner(decoder)  # type: ignore[attr-defined]
    # The encodings `json.loads` takes bytes in (UTF-8 with or without a BOM, UTF-16, UTF-32), as it decodes.
    return decoder.decode(body.decode(json.detect_encoding(body), "surrogatepass"))


async def read_json(request: Request) -> dict[str, Any]:
    """The request body as a JSON object: 415 for a foreign type, 413/42209 when too large, 400/422 when not
    an object of JSON."""
    content_type = request.headers.get("content-type")
    if content_type and content_type.split(";")[0].strip().lower() not in _CONSUMED:
        raise ApiError(415, 415, "HTTP 415 Unsupported Media Type")
    limit = _config(request).max_body_bytes
    too_large = RegistryError(42209, f"Request body is larger than {limit} bytes (registry.max_body_bytes)")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, too_large.code, too_large.message)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, too_large.code, too_large.message)
        chunks.append(chunk)
    request.state.body_bytes = size
    body = b"".join(chunks)
    try:
        if size <= LARGE_BODY_BYTES:
            document = json.loads(body)
        else:  # off the event loop, letting the GIL go, one check slot at a time (parse_large_body)
            slots: CheckSlots = request.app.state.registry_check_slots
            try:
                async with slots.waited():
                    document = await run_in_threadpool(parse_large_body, body)
            except ChecksTimedOut:
                raise _timed_out(slots) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise RegistryError(400, f"Malformed JSON in request body: {exc}") from None
    except RecursionError:  # deeper than Python's json goes (about 1000 levels; Jackson refuses over 1000)
        raise RegistryError(400, "Malformed JSON in request body: nested too deeply") from None
    if not isinstance(document, dict):
        raise RegistryError(422, "The request body must be a JSON object")
    return document


def register_request(document: dict[str, Any], *, may_be_empty: bool = False) -> RegisterRequest:
    """`RegisterSchemaRequest`: type errors are 422 (as Jackson's mapping errors are); an empty schema is
    42201, except where `may_be_empty` (a registration, which takes the latest version's schema then)."""
    schema = document.get("schema")
    if may_be_empty and schema is None:
        schema = ""
    if (schema is None or schema == "") and not may_be_empty:
        raise RegistryError(42201, "Empty schema")
    if not isinstance(schema, str):
        raise RegistryError(422, "Field 'schema' must be a string")
    schema_type = document.get("schemaType") or "AVRO"
    if not isinstance(schema_type, str):
        raise RegistryError(422, "Field 'schemaType' must be a string")
    raw_refs = document.get("references")
    raw_refs = [] if raw_refs is None else raw_refs
    if not isinstance(raw_refs, list):
        raise RegistryError(422, "Field 'references' must be a list")
    refs: list[Reference] = []
    names: set[str] = set()
    for ref in raw_refs:
        if not (isinstance(ref, dict) and isinstance(ref.get("name"), str) and isinstance(ref.get("subject"), str)
                and isinstance(ref.get("version"), int) and not isinstance(ref.get("version"), bool)):
            raise RegistryError(422, "Each reference must be an object with string name and subject and an "
                                     "integer version")
        if len(ref["name"]) > MAX_SUBJECT_LENGTH:  # the store's column, as for subjects
            raise RegistryError(42201, f"Invalid schema: a reference name is longer than {MAX_SUBJECT_LENGTH} "
                                       "characters")
        if ref["name"] in names:  # (ambiguous: which one would an import mean?)
            raise RegistryError(42201, f"Invalid schema: the reference name '{ref['name']}' is given twice")
        names.add(ref["name"])
        refs.append(Reference(ref["name"], ref["subject"], ref["version"]))
    metadata = check_metadata(document.get("metadata"), "metadata")
    rule_set = check_rule_set(document.get("ruleSet"), "ruleSet")
    ids = {}
    for name in ("id", "version"):
        value = document.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise RegistryError(422, f"Field '{name}' must be an integer")
        ids[name] = value
    return RegisterRequest(schema, schema_type.upper(), tuple(refs), metadata, rule_set, ids["id"], ids["version"])


# ---------------------------------------------------------------------------- who may do what


async def reader(request: Request) -> Principal | None:
    """The caller of a read; None for an anonymous caller when `registry.anonymous_read` is on."""
    if request.headers.get("authorization") is None and _config(request).anonymous_read:
        return None
    return await authenticated_principal(request)


Reader = Annotated[Principal | None, Depends(reader)]
Writer = Annotated[Principal, Depends(authenticated_principal)]


def allow(request: Request, principal: Principal | None, subject: str, operation: Operation) -> None:
    if principal is None:  # anonymous read, switched on in configuration
        return
    authorize_http(request, principal, ResourceType.SUBJECT, subject, operation)


def reference_reader(request: Request, principal: Principal | None) -> ReadCheck:
    """READ on each subject the caller's schema references, directly or through the references of the
    versions it names, decided by the service before it looks that subject up.

    The caller named the direct ones and may read the versions that name the others, so the 403 of a
    denial (which names the subject) tells it nothing, and it is the same whether or not the version
    exists. Denials and grants are audited like those of the subject routes. Anonymous readers (when
    switched on) may read every subject, so they are not checked."""
    if principal is None:
        return anyone_may_read
    return lambda subject: allow(request, principal, subject, Operation.READ)


def allow_cluster_alter(request: Request, principal: Principal) -> None:
    authorize_http(request, principal, ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, Operation.ALTER)


def readable(request: Request, principal: Principal | None, subjects: Sequence[str]) -> set[str]:
    """The subjects the caller may READ: a filtering check, never audited as a denial."""
    unique = list(dict.fromkeys(subjects))
    if principal is None or not unique:
        return set(unique)
    ctx = http_context(request, principal)
    actions = [Action(ResourceType.SUBJECT, s, Operation.READ, log_if_allowed=False, log_if_denied=False)
               for s in unique]
    decisions = request.app.state.authorizer.authorize(ctx, actions)
    return {s for s, d in zip(unique, decisions, strict=True) if d.allowed}


def readable_ids(request: Request, principal: Principal | None, schema_ids: Sequence[int]) -> list[int]:
    """The ids the caller could read through `/schemas/ids/{id}` (`allow_id` over `subjects_using`): a
    filtering check, never audited as a denial."""
    if principal is None:
        return list(schema_ids)
    registry = _registry(request)
    users = {i: registry.subjects_using(i) for i in schema_ids}
    visible = readable(request, principal, [s for subjects in users.values() for s in subjects])
    return [i for i in schema_ids if visible.intersection(users[i])]


def allow_id(request: Request, principal: Principal | None, schema_id: int, subjects: Sequence[str]) -> None:
    """An id may be read by whoever may read one subject that uses it; unused ids do not exist.

    To a caller who may not read it, an id does not exist either: a 403 would tell which ids are in
    use (and its message would name a subject). The denial is still decided and audited by the
    authorizer; only its answer is the unused id's 40403, byte for byte."""
    if not subjects:
        raise schema_not_found(schema_id)
    if principal is None or readable(request, principal, subjects):
        return
    try:
        allow(request, principal, subjects[0], Operation.READ)  # audited denial
    except ApiError as exc:
        if exc.status != 403:
            raise
        raise schema_not_found(schema_id) from None


def audit(request: Request, principal: Principal, change: Change, event_type: EventType = EventType.SCHEMA_CHANGE
          ) -> None:
    sink = getattr(request.app.state, "audit", None)
    if sink is None:
        return
    sink.write(change_event(
        type=event_type, source=AUDIT_SOURCE, time=request.app.state.clock(), principal=str(principal),
        method_name=f"schema-registry.{change.method}", target=change.target, details=change.details,
        client_address=request.client.host if request.client else None,
    ))


# ---------------------------------------------------------------------------- root, types, ids


@router.get("/", summary="Schema registry root")
def root(request: Request, principal: Reader) -> Response:
    return respond(request, {})


@router.get("/schemas/types", summary="Supported schema types")
def schema_types(request: Request, principal: Reader) -> Response:
    return respond(request, list(SUPPORTED_TYPES))


@router.get("/schemas", summary="List schemas")
def list_schemas(request: Request, principal: Reader, subjectPrefix: str | None = None,
                 deleted: str | None = None, latestOnly: str | None = None, offset: str | None = None,
                 limit: str | None = None) -> Response:
    rows = _registry(request).list_schemas(prefix=subjectPrefix or "", deleted=flag(deleted),
                                            latest_only=flag(latestOnly))
    visible = readable(request, principal, [r.subject for r in rows])
    return respond(request, _page([r.to_json() for r in rows if r.subject in visible], offset, limit))


def _schema_body(schema: StoredSchema, max_id: int | None) -> dict[str, Any]:
    body = schema.body()
    if max_id is not None:
        body["maxId"] = max_id
    return body


async def _schema(registry: SchemaRegistry, schema_id: int) -> StoredSchema:
    cached = registry.cached_schema(schema_id)  # the hot path: no thread hop once an id has been served
    if cached is not None:
        return cached
    return await run_in_threadpool(registry.schema_by_id, schema_id)


@router.get("/schemas/ids/{id}", summary="Get a schema by its global id")
async def schema_by_id(request: Request, principal: Reader, id: str, subject: str | None = None,
                       format: str | None = None, fetchMaxId: str | None = None) -> Response:
    registry = _registry(request)
    schema_id = _schema_id(id)
    schema = await _schema(registry, schema_id)
    subjects = await run_in_threadpool(registry.subjects_using, schema_id)
    if subject:
        subjects = tuple(s for s in subjects if s == subject) or subjects
    allow_id(request, principal, schema_id, subjects)
    max_id = await run_in_threadpool(registry.max_id) if flag(fetchMaxId) else None
    return respond(request, _schema_body(schema, max_id))


@router.get("/schemas/ids/{id}/schema", summary="Get the raw schema text by global id")
async def raw_schema_by_id(request: Request, principal: Reader, id: str, subject: str | None = None) -> Response:
    registry = _registry(request)
    schema_id = _schema_id(id)
    schema = await _schema(registry, schema_id)
    allow_id(request, principal, schema_id, await run_in_threadpool(registry.subjects_using, schema_id))
    return respond_raw(request, schema.schema)


@router.get("/schemas/ids/{id}/subjects", summary="Subjects that use a schema id")
def subjects_by_id(request: Request, principal: Reader, id: str, deleted: str | None = None,
                   subject: str | None = None, offset: str | None = None, limit: str | None = None) -> Response:
    registry = _registry(request)
    schema_id = _schema_id(id)
    usages = registry.id_usages(schema_id, deleted=flag(deleted))
    allow_id(request, principal, schema_id, [s for s, _ in usages] or registry.subjects_using(schema_id))
    visible = readable(request, principal, [s for s, _ in usages])
    subjects = list(dict.fromkeys(s for s, _ in usages if s in visible and (not subject or s == subject)))
    return respond(request, _page(subjects, offset, limit))


@router.get("/schemas/ids/{id}/versions", summary="Subject versions that use a schema id")
def versions_by_id(request: Request, principal: Reader, id: str, deleted: str | None = None,
                   offset: str | None = None, limit: str | None = None) -> Response:
    registry = _registry(request)
    schema_id = _schema_id(id)
    usages = registry.id_usages(schema_id, deleted=flag(deleted))
    allow_id(request, principal, schema_id, [s for s, _ in usages] or registry.subjects_using(schema_id))
    visible = readable(request, principal, [s for s, _ in usages])
    return respond(request, _page([{"subject": s, "version": v} for s, v in usages if s in visible], offset, limit))


# ---------------------------------------------------------------------------- subjects


@router.get("/subjects", summary="List subjects")
def list_subjects(request: Request, principal: Reader, subjectPrefix: str | None = None,
                  deleted: str | None = None, deletedOnly: str | None = None, offset: str | None = None,
                  limit: str | None = None) -> Response:
    prefix = "" if subjectPrefix in (None, ":*:") else subjectPrefix
    subjects = _registry(request).list_subjects(prefix=prefix, deleted=flag(deleted), deleted_only=flag(deletedOnly))
    visible = readable(request, principal, subjects)
    return respond(request, _page([s for s in subjects if s in visible], offset, limit))


@router.get("/subjects/{subject:path}/versions", summary="List the versions of a subject")
def list_versions(request: Request, principal: Reader, subject: str, deleted: str | None = None,
                  deletedOnly: str | None = None, deletedAsNegative: str | None = None, offset: str | None = None,
                  limit: str | None = None) -> Response:
    allow(request, principal, subject, Operation.READ)
    registry = _registry(request)
    found = registry.versions(subject, deleted=flag(deleted), deleted_only=flag(deletedOnly))
    if flag(deletedAsNegative) and flag(deleted):
        gone = set(registry.versions(subject, deleted_only=True))
        found = [-v if v in gone else v for v in found]
    return respond(request, _page(found, offset, limit))


@router.post("/subjects/{subject:path}/versions", summary="Register a schema under a subject")
async def register(request: Request, principal: Writer, subject: str, normalize: str | None = None,
                   format: str | None = None) -> Response:
    allow(request, principal, subject, Operation.WRITE)
    document = register_request(await read_json(request), may_be_empty=True)
    try:
        created, change = await run_schema_work(
            request, lambda: _registry(request).register(subject, document, normalize=flag(normalize),
                                                         may_read=reference_reader(request, principal))
        )
    except IncompatibleSchemaError as exc:
        # Confluent's details (SchemaValidatorBuilder.formatErrorMessages) quote the subject's stored
        # schema, its versions and level to every caller, and registering needs WRITE only, so a writer
        # could read what it may not fetch. kgov departs: without READ on the subject, no details
        # (registry/README.md, Access control).
        if subject not in readable(request, principal, [subject]):
            raise exc.without_details() from None
        raise
    audit(request, principal, change)
    body: dict[str, Any] = {"id": created.schema.id, "version": created.version}
    # The rest comes from the subject, not only from the request: a metadata-only registration copies
    # the latest version's schema and references, and metadata and rule sets are merged with the
    # latest version's and the config's. A writer who may not READ the subject gets Confluent's minimal
    # answer (the id and version) rather than what it may not fetch (README, Data contracts).
    if subject in readable(request, principal, [subject]):
        body.update(created.schema.body())
    return respond(request, body)


def _version(request: Request, principal: Principal | None, subject: str, version: str, deleted: str | None
             ) -> SubjectVersion:
    allow(request, principal, subject, Operation.READ)
    return _registry(request).get_version(subject, parse_version(version), deleted=flag(deleted))


@router.get("/subjects/{subject:path}/metadata", summary="Latest version whose metadata properties match")
def latest_with_metadata(request: Request, principal: Reader, subject: str,
                         key: Annotated[list[str] | None, Query()] = None,
                         value: Annotated[list[str] | None, Query()] = None, deleted: str | None = None,
                         format: str | None = None) -> Response:
    allow(request, principal, subject, Operation.READ)
    keys, values = key or [], value or []
    if len(keys) != len(values):
        raise RegistryError(400, "Query parameters key and value must come in pairs")
    found = _registry(request).latest_with_metadata(subject, dict(zip(keys, values, strict=True)),
                                                    deleted=flag(deleted))
    return respond(request, found.to_json())


@router.get("/subjects/{subject:path}/versions/{version}", summary="Get one version of a subject")
def get_version(request: Request, principal: Reader, subject: str, version: str, deleted: str | None = None,
                format: str | None = None) -> Response:
    return respond(request, _version(request, principal, subject, version, deleted).to_json())


@router.get("/subjects/{subject:path}/versions/{version}/schema", summary="Get the raw schema of one version")
def get_version_schema(request: Request, principal: Reader, subject: str, version: str,
                       deleted: str | None = None, format: str | None = None) -> Response:
    return respond_raw(request, _version(request, principal, subject, version, deleted).schema.schema)


@router.get("/subjects/{subject:path}/versions/{version}/referencedby", summary="Ids of schemas referencing a version")
def referenced_by(request: Request, principal: Reader, subject: str, version: str, deleted: str | None = None,
                  offset: str | None = None, limit: str | None = None) -> Response:
    allow(request, principal, subject, Operation.READ)
    ids = _registry(request).referenced_by(subject, parse_version(version), deleted=flag(deleted))
    return respond(request, _page(readable_ids(request, principal, ids), offset, limit))


@router.delete("/subjects/{subject:path}/versions/{version}", summary="Delete a version (soft, or permanent=true)")
def delete_version(request: Request, principal: Writer, subject: str, version: str,
                   permanent: str | None = None) -> Response:
    allow(request, principal, subject, Operation.DELETE)
    number = parse_version(version)
    deleted, change = _registry(request).delete_version(subject, number, permanent=flag(permanent))
    audit(request, principal, change)
    return respond(request, deleted)


# Declared after the longer subject routes: `{subject:path}` would otherwise swallow `.../versions`.


@router.post("/subjects/{subject:path}", summary="Look up a schema under a subject")
async def lookup(request: Request, principal: Reader, subject: str, normalize: str | None = None,
                 deleted: str | None = None, format: str | None = None) -> Response:
    allow(request, principal, subject, Operation.READ)
    document = register_request(await read_json(request))
    found = await run_schema_work(
        request, lambda: _registry(request).lookup(subject, document, normalize=flag(normalize), deleted=flag(deleted),
                                                   may_read=reference_reader(request, principal))
    )
    return respond(request, found.to_json())


@router.delete("/subjects/{subject:path}", summary="Delete a subject (soft, or permanent=true)")
def delete_subject(request: Request, principal: Writer, subject: str, permanent: str | None = None) -> Response:
    allow(request, principal, subject, Operation.DELETE)
    deleted, change = _registry(request).delete_subject(subject, permanent=flag(permanent))
    audit(request, principal, change)
    return respond(request, deleted)


# ---------------------------------------------------------------------------- compatibility


async def _compatibility(request: Request, principal: Principal | None, subject: str, version: int | None,
                         normalize: str | None, verbose: str | None) -> Response:
    allow(request, principal, subject, Operation.READ)
    document = register_request(await read_json(request))
    verdict = await run_schema_work(
        request, lambda: _registry(request).test_compatibility(subject, version, document, normalize=flag(normalize),
                                                               verbose=flag(verbose),
                                                               may_read=reference_reader(request, principal))
    )
    body: dict[str, Any] = {"is_compatible": verdict.is_compatible}
    if flag(verbose):
        body["messages"] = list(verdict.messages)
    return respond(request, body)


@router.post("/compatibility/subjects/{subject:path}/versions/{version}", summary="Test against one version")
async def compatibility_with_version(request: Request, principal: Reader, subject: str, version: str,
                                     normalize: str | None = None, verbose: str | None = None) -> Response:
    return await _compatibility(request, principal, subject, parse_version(version), normalize, verbose)


@router.post("/compatibility/subjects/{subject:path}/versions", summary="Test against the versions the level selects")
async def compatibility_with_versions(request: Request, principal: Reader, subject: str,
                                      normalize: str | None = None, verbose: str | None = None) -> Response:
    return await _compatibility(request, principal, subject, None, normalize, verbose)


# ---------------------------------------------------------------------------- config


@router.get("/config", summary="Global compatibility configuration")
def get_global_config(request: Request, principal: Reader, defaultToGlobal: str | None = None) -> Response:
    return respond(request, _registry(request).get_config(None))


@router.put("/config", summary="Set the global compatibility configuration")
async def put_global_config(request: Request, principal: Writer) -> Response:
    allow_cluster_alter(request, principal)
    document = await read_json(request)
    echo, change = await run_in_threadpool(_registry(request).set_config, None, document)
    audit(request, principal, change, EventType.CONFIG_CHANGE)
    return respond(request, echo)


@router.delete("/config", summary="Reset the global compatibility configuration")
def delete_global_config(request: Request, principal: Writer) -> Response:
    allow_cluster_alter(request, principal)
    previous, change = _registry(request).delete_config(None)
    audit(request, principal, change, EventType.CONFIG_CHANGE)
    return respond(request, previous)


@router.get("/config/{subject:path}", summary="Compatibility configuration of a subject")
def get_subject_config(request: Request, principal: Reader, subject: str,
                       defaultToGlobal: str | None = None) -> Response:
    allow(request, principal, subject, Operation.READ)
    return respond(request, _registry(request).get_config(subject, default_to_global=flag(defaultToGlobal)))


@router.put("/config/{subject:path}", summary="Set the compatibility configuration of a subject")
async def put_subject_config(request: Request, principal: Writer, subject: str) -> Response:
    allow(request, principal, subject, Operation.ALTER_CONFIGS)
    document = await read_json(request)
    echo, change = await run_in_threadpool(_registry(request).set_config, subject, document)
    audit(request, principal, change, EventType.CONFIG_CHANGE)
    return respond(request, echo)


@router.delete("/config/{subject:path}", summary="Remove the compatibility configuration of a subject")
def delete_subject_config(request: Request, principal: Writer, subject: str) -> Response:
    allow(request, principal, subject, Operation.ALTER_CONFIGS)
    previous, change = _registry(request).delete_config(subject)
    audit(request, principal, change, EventType.CONFIG_CHANGE)
    return respond(request, previous)


# ---------------------------------------------------------------------------- mode


@router.get("/mode", summary="Global mode")
def get_global_mode(request: Request, principal: Reader, defaultToGlobal: str | None = None) -> Response:
    return respond(request, {"mode": _registry(request).get_mode(None).value})


@router.put("/mode", summary="Set the global mode")
async def put_global_mode(request: Request, principal: Writer, force: str | None = None) -> Response:
    allow_cluster_alter(request, principal)
    document = await read_json(request)
    mode, change = await run_in_threadpool(
        lambda: _registry(request).set_mode(None, document.get("mode"), force=flag(force))
    )
    audit(request, principal, change, EventType.CONFIG_CHANGE)
    return respond(request, {"mode": mode.value})


@router.delete("/mode", summary="Reset the global mode to READWRITE")
def delete_global_mode(request: Request, principal: Writer, recursive: str | None = None) -> Response:
    allow_cluster_alter(request, principal)
    previous, change = _registry(request).delete_mode(None)
    audit(request, principal, change, EventType.CONFIG_CHANGE)
    return respond(request, {"mode": previous.value})


@router.get("/mode/{subject:path}", summary="Mode of a subject")
def get_subject_mode(request: Request, principal: Reader, subject: str,
                     defaultToGlobal: str | None = None) -> Response:
    allow(request, principal, subject, Operation.READ)
    mode = _registry(request).get_mode(subject, default_to_global=flag(defaultToGlobal))
    return respond(request, {"mode": mode.value})


@router.put("/mode/{subject:path}", summary="Set the mode of a subject")
async def put_subject_mode(request: Request, principal: Writer, subject: str, force: str | None = None) -> Response:
    allow(request, principal, subject, Operation.ALTER_CONFIGS)
    document = await read_json(request)
    mode, change = await run_in_threadpool(
        lambda: _registry(request).set_mode(subject, document.get("mode"), force=flag(force))
    )
    audit(request, principal, change, EventType.CONFIG_CHANGE)
    return respond(request, {"mode": mode.value})


@router.delete("/mode/{subject:path}", summary="Remove the mode of a subject")
def delete_subject_mode(request: Request, principal: Writer, subject: str, recursive: str | None = None
                        ) -> Response:
    allow(request, principal, subject, Operation.ALTER_CONFIGS)
    previous, change = _registry(request).delete_mode(subject)
    audit(request, principal, change, EventType.CONFIG_CHANGE)
    return respond(request, {"mode": previous.value})


# ---------------------------------------------------------------------------- contexts, metadata, associations


@router.get("/contexts", summary="List contexts")
def list_contexts(request: Request, principal: Reader, contextPrefix: str | None = None,
                  offset: str | None = None, limit: str | None = None) -> Response:
    # A context exists while it holds a stored version; it is listed to callers who may read one of its
    # subjects. The default context is always listed: Confluent's clients expect it.
    stored = _registry(request).list_subjects(deleted=True)
    visible = contexts_of(readable(request, principal, stored))
    found = [c for c in visible if not contextPrefix or c.startswith(contextPrefix)]
    return respond(request, _page(found, offset, limit))


@router.delete("/contexts/{context}", summary="Delete an empty context")
def delete_context(request: Request, principal: Writer, context: str) -> Response:
    allow_cluster_alter(request, principal)
    _registry(request).delete_context(context)
    return Response(status_code=204)


@router.get("/v1/metadata/id", summary="Cluster id of this registry")
def metadata_id(request: Request, principal: Reader) -> Response:
    cluster_id = request.app.state.settings.cluster_id
    return respond(request, {
        "scope": {"path": [], "clusters": {"kafka-cluster": cluster_id, "schema-registry-cluster": "schema-registry"}},
        "id": cluster_id,
    })


@router.get("/v1/metadata/version", summary="Version of this registry")
def metadata_version(request: Request, principal: Reader) -> Response:
    try:
        version = importlib_metadata.version("kgov")
    except importlib_metadata.PackageNotFoundError:
        version = "0"
    return respond(request, {"version": version, "commitId": ""})


@router.get("/associations/resources/{namespace}/{name}", summary="Associations (not supported: always 404)")
def associations(request: Request, principal: Reader, namespace: str, name: str) -> Response:
    # confluent-kafka-python >= 2.14 asks here first and falls back to topic naming on a 404 only.
    raise RegistryError(40410, f"Association for '{name}' not found.")


def install(app: FastAPI) -> None:
    """Adds this package's routes to the control plane. Reads what it needs from `app.state`."""
    store.install_schema(app.state.engine)
    config: RegistryConfig = app.state.settings.registry
    app.state.registry_check_slots = CheckSlots(config.max_concurrent_checks, config.check_wait_s)
    app.state.schema_registry = SchemaRegistry(app.state.engine, max_diff_work=config.max_diff_work,
                                                checks=app.state.registry_check_slots)
    app.include_router(router)
    app.add_middleware(SchemaByIdFastPath, state=app.state)
    app.add_middleware(ContextPathRewrite)
