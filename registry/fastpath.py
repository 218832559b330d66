"""The hot path of every consumer: `GET /schemas/ids/{id}`, answered from memory below FastAPI.

Deserializers fetch the writer's schema by id; at scale that is most of a registry's traffic. Once
an id has been served through the full route (which loads it, authorizes it and fills the caches),
this ASGI middleware answers repeats without routing, dependency injection or a thread hop: same
authentication, same authorization, same bytes. Anything it is not sure about (no cached schema,
usages due for their refresh, a failed authentication, a denial, an unacceptable Accept header,
a query parameter that changes the answer) falls through to the full route, which gives the proper answer, error and audit.
Refused credentials are the exception: the authenticator has already counted, audited and delayed that
failure, so the fast path answers the full route's 401 itself rather than have the attempt counted twice.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from authz.http import api_error_response, unauthenticated
from authz.model import Action, Operation, Principal, RequestContext, ResourceType

_PREFIX = "/schemas/ids/"
_NO_OP_WHEN_EMPTY = frozenset({"format", "referenceFormat", "reference_format"})
_REFUSED = object()  # `_answer`: the credentials were refused (and that failure recorded)
_PRODUCED = (b"application/vnd.schemaregistry.v1+json", b"application/vnd.schemaregistry+json",
             b"application/json")


def _plain_query(query: bytes) -> str | None:
    """The `subject` of a query string that changes nothing else in the answer ("" when absent); None
    for anything else (`fetchMaxId=true`, a `format`, ...), which the full route handles. Java clients
    send `?fetchMaxId=false` and often `subject=`; Python clients may send `subject=`."""
    subject = ""
    for key, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
        if key == "subject":
            subject = value
            continue
        harmless = (key == "fetchMaxId" and value.lower() != "true") or (key in _NO_OP_WHEN_EMPTY and not value)
        if not harmless:
            return None
    return subject


def _media_type(accept: bytes | None) -> bytes | None:
    """The common cases only; anything subtler is negotiated by the full route."""
    if accept is None or accept.strip() in (b"*/*", b""):
        return _PRODUCED[0]
    first = accept.split(b",", 1)[0].split(b";", 1)[0].strip().lower()
    if first in _PRODUCED:
        return first
    return None


class SchemaByIdFastPath:
    def __init__(self, app: ASGIApp, *, state: Any) -> None:
        self.app = app
        self.state = state
        self._bodies: dict[int, bytes] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            path: str = scope["path"]
            subject = _plain_query(scope.get("query_string", b""))
            digits = path[len(_PREFIX):]
            # ASCII only: str.isdigit() also takes "²", which int() refuses (a 500 before authentication)
            if subject is not None and path.startswith(_PREFIX) and digits.isascii() and digits.isdigit():
                answer = await self._answer(scope, int(digits), subject)
                if answer is _REFUSED:
                    await api_error_response(unauthenticated())(scope, receive, send)
                    return
                if isinstance(answer, tuple):
                    body, media_type = answer
                    await send({"type": "http.response.start", "status": 200, "headers": [
                        (b"content-type", media_type), (b"content-length", str(len(body)).encode())]})
                    await send({"type": "http.response.body", "body": body})
                    return
        await self.app(scope, receive, send)

    async def _answer(self, scope: Scope, schema_id: int, subject: str) -> tuple[bytes, bytes] | object | None:
        registry = getattr(self.state, "schema_registry", None)
        if registry is None:
            return None
        schema = registry.cached_schema(schema_id)
        subjects = registry.cached_usages(schema_id)
        if schema is None or not subjects:
            return None
        if subject in subjects:  # as the full route: `?subject=` narrows the check when it uses the id
            subjects = (subject,)
        headers = dict(scope["headers"])
        media_type = _media_type(headers.get(b"accept"))
        if media_type is None:
            return None
        authorization = headers.get(b"authorization")
        client = scope.get("client")
        address = client[0] if client else "0.0.0.0"
        if authorization is None:
            if not self.state.settings.registry.anonymous_read:
                return None
        else:
            principal = await self.state.authenticator.authenticate(authorization.decode("latin-1"), address)
            if principal is None:
                return _REFUSED
            if not self._may_read(scope, principal, address, subjects):
                return None
        body = self._bodies.get(schema_id)
        if body is None:
            body = self._bodies[schema_id] = json.dumps(schema.body(), separators=(",", ":"),
                                                        ensure_ascii=False).encode()
        return body, media_type

    def _may_read(self, scope: Scope, principal: Principal, address: str, subjects: tuple[str, ...]) -> bool:
        ctx = RequestContext(principal=principal, client_address=address, listener="HTTP",
                             security_protocol="HTTPS" if scope.get("scheme") == "https" else "HTTP")
        actions = [Action(ResourceType.SUBJECT, s, Operation.READ, log_if_allowed=False, log_if_denied=False)
                   for s in subjects]
        return any(d.allowed for d in self.state.authorizer.authorize(ctx, actions))
