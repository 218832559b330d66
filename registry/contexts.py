"""Confluent's context base URLs: `http://host/contexts/.staging` as a client's registry URL.

Confluent's `ContextFilter` lets a client point at `/contexts/<ctx>` and then speak the plain API;
the server qualifies subjects as `:.<ctx>:<subject>`. This ASGI middleware rewrites such requests
onto the ordinary routes before routing, so every route (and its authorization, on the qualified
subject name) stays in one place.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Receive, Scope, Send

from registry.model import DEFAULT_CONTEXT

_PREFIX = "/contexts/"
_SUBJECT_ROUTES = ("subjects", "config", "mode")


def qualifier(context: str) -> str:
    """`.staging` or `staging` -> `:.staging:`; the default context `.` -> ``."""
    name = context if context.startswith(".") else "." + context
    return "" if name == DEFAULT_CONTEXT else f":{name}:"


def qualify(prefix: str, subject: str) -> str:
    """The subject a request names through a context base URL (`prefix` from `qualifier`); names that
    start with a context (`:.other:x`, `:.:x`) are left as they are."""
    return subject if subject.startswith(":.") or not prefix else prefix + subject


def rewrite(path: str, query: str) -> tuple[str, str] | None:
    """(path, query) on the plain API for a context-prefixed request; None when `path` is not one."""
    if not path.startswith(_PREFIX):
        return None
    context, sep, tail = path[len(_PREFIX):].partition("/")
    if not sep or not tail or not context:
        return None
    prefix = qualifier(context)
    parts = tail.split("/")
    head = parts[0]
    if head in _SUBJECT_ROUTES and len(parts) >= 2 and parts[1]:
        parts[1] = qualify(prefix, parts[1])
    elif head == "compatibility" and len(parts) >= 3 and parts[1] == "subjects":
        parts[2] = qualify(prefix, parts[2])
    elif head in ("config", "mode") and len(parts) == 1:
        if prefix:
            parts.append(prefix)  # the context's own level, consulted before the global one
    elif head in ("subjects", "schemas") and len(parts) == 1:
        params = dict(parse_qsl(query, keep_blank_values=True))
        params["subjectPrefix"] = qualify(prefix, params.get("subjectPrefix", ""))
        query = urlencode(params)
    elif head != "schemas":
        return None
    return "/" + "/".join(parts), query


class ContextPathRewrite:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(_PREFIX):
            query = scope.get("query_string", b"").decode("latin-1")
            rewritten = rewrite(scope["path"], query)
            if rewritten is not None:
                path, query = rewritten
                scope = {**scope, "path": path, "raw_path": path.encode("utf-8"),
                         "query_string": query.encode("latin-1")}
        await self.app(scope, receive, send)
