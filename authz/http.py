"""FastAPI glue every package's routers share: who is calling, and may they do this.

`app.state.authenticator` (an `HttpAuthenticator`, provided by `sasl`) turns the Authorization
header into a principal; `app.state.authorizer` (an `authz.model.Authorizer`) decides. Errors use
the `{"error_code", "message"}` body that Confluent's REST APIs use.
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
from collections.abc import Callable, Coroutine, Sequence
from typing import Annotated, Any, Protocol

from fastapi import Depends, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute

from authz.model import Action, Decision, Operation, Principal, RequestContext, ResourceType


class HttpAuthenticator(Protocol):
    async def authenticate(self, authorization: str | None, client_address: str) -> Principal | None:
        """The principal the header proves, or None. Never raises for bad credentials."""
        ...


class ApiError(Exception):
    """An error answered as `{"error_code": code, "message": message}` with HTTP `status`."""

    def __init__(self, status: int, code: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


def logged_incident(logger: logging.Logger, what: str, request: Request, exc: BaseException) -> str:
    """Logs an unexpected failure of a request with its traceback under a new random id, and returns the
    id for the answer: the client gets only the id to quote, the operator finds the detail by it. The
    path is logged quoted (`%r`): a percent-encoded line break in it would otherwise start a forged line."""
    incident = secrets.token_hex(8)
    logger.error("%s on %s %r (incident %s)", what, request.method, request.url.path, incident, exc_info=exc)
    return incident


def api_error_response(exc: ApiError) -> JSONResponse:
    return JSONResponse(
        status_code=exc.status, content={"error_code": exc.code, "message": exc.message}, headers=exc.headers
    )


WWW_AUTHENTICATE = 'Basic realm="kgov", Bearer realm="kgov"'


# ASGI scope key under which the server (kgov.http_server) keeps the connection's peer, `(host, port)`:
# uvicorn's proxy-header middleware replaces `client` with the address a listed proxy forwarded.
PEER_SCOPE_KEY = "kgov.peer"


def client_address(request: Request) -> str:
    return request.client.host if request.client else "0.0.0.0"


def listed_proxy(peer: str | None, proxies: Sequence[str]) -> bool:
    """Whether `peer` is in `http_forwarded_allow_ips`, read as uvicorn's ProxyHeadersMiddleware reads it
    (`ipaddress.ip_network` without strict=False: an entry with host bits set believes nobody there)."""
    try:
        addr = ipaddress.ip_address(peer or "")
    except ValueError:
        return False
    for entry in proxies:
        try:
            if addr in ipaddress.ip_network(entry):
                return True
        except ValueError:
            continue
    return False


def peer_address(request: Request) -> str | None:
    """The address the connection came from, before any proxy header; None when the server did not say
    (a server other than kgov.http_server's: then no proxy header was believed either, so it is
    `client_address`)."""
    peer = request.scope.get(PEER_SCOPE_KEY)
    return str(peer[0]) if peer else None


def unauthenticated() -> ApiError:
    """The one answer to missing or refused credentials, whatever the reason."""
    return ApiError(401, 40101, "Unauthorized", headers={"WWW-Authenticate": WWW_AUTHENTICATE})


# Request state key of the principal a request's credentials proved (`authenticated_principal`).
_PRINCIPAL_STATE = "kgov_principal"


async def authenticated_principal(request: Request) -> Principal:
    """The caller's principal, or 401. Checked once per request, however many times it is asked for
    (`AuthenticatedRoute` before the body, then the route's dependency): a second check would count and
    audit a failure twice, and pay a password's PBKDF2 twice."""
    known: Principal | None = getattr(request.state, _PRINCIPAL_STATE, None)
    if known is not None:
        return known
    authenticator: HttpAuthenticator = request.app.state.authenticator
    principal = await authenticator.authenticate(request.headers.get("authorization"), client_address(request))
    if principal is None:
        raise unauthenticated()
    setattr(request.state, _PRINCIPAL_STATE, principal)
    return principal


CurrentPrincipal = Annotated[Principal, Depends(authenticated_principal)]


class AuthenticatedRoute(APIRoute):
    """A route whose caller is authenticated before its body is read. FastAPI reads and parses a declared
    body (a pydantic model) before it solves the dependencies, `CurrentPrincipal` among them: anyone
    without credentials could have the event loop parse `http_request_max_bytes` of JSON (half a second
    for 8 MB, every other request waiting) before being told 401. For routers whose every route needs
    credentials; the registry's read their bodies themselves, after authorizing."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def authenticated_first(request: Request) -> Response:
            await authenticated_principal(request)
            return await handler(request)

        return authenticated_first


def http_context(request: Request, principal: Principal, *, api_name: str = "") -> RequestContext:
    return RequestContext(
        principal=principal,
        client_address=client_address(request),
        listener="HTTP",
        security_protocol="HTTPS" if request.url.scheme == "https" else "HTTP",
        client_id=request.headers.get("user-agent", "")[:200],
    )


def authorize_http(
    request: Request,
    principal: Principal,
    resource_type: ResourceType,
    resource_name: str,
    operation: Operation,
    *,
    method_name: str = "",
) -> Decision:
    """Decides one action for an HTTP caller; denials raise 403 (error_code 40301)."""
    authorizer: Any = request.app.state.authorizer
    ctx = http_context(request, principal)
    action = Action(resource_type, resource_name, operation)
    decision: Decision = authorizer.authorize_http(ctx, action, method_name or request.url.path)
    if not decision.allowed:
        raise ApiError(
            403,
            40301,
            f"User {principal} is not authorized to {operation.name} {resource_type.name} {resource_name}",
        )
    return decision
