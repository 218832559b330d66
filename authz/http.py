"""FastAPI glue every package's routers share: who is calling, and may they do this.

`app.state.authenticator` (an `HttpAuthenticator`, provided by `sasl`) turns the Authorization
header into a principal; `app.state.authorizer` (an `authz.model.Authorizer`) decides. Errors use
the `{"error_code", "message"}` body that Confluent's REST APIs use.
"""

from __future__ import annotations

from typing import Annotated, Any, Protocol

from fastapi import Depends, Request
from fastapi.responses import JSONResponse

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


def peer_address(request: Request) -> str | None:
    """The address the connection came from, before any proxy header; None when the server did not say
    (a server other than kgov.http_server's: then no proxy header was believed either, so it is
    `client_address`)."""
    peer = request.scope.get(PEER_SCOPE_KEY)
    return str(peer[0]) if peer else None


def unauthenticated() -> ApiError:
    """The one answer to missing or refused credentials, whatever the reason."""
    return ApiError(401, 40101, "Unauthorized", headers={"WWW-Authenticate": WWW_AUTHENTICATE})


async def authenticated_principal(request: Request) -> Principal:
    authenticator: HttpAuthenticator = request.app.state.authenticator
    principal = await authenticator.authenticate(request.headers.get("authorization"), client_address(request))
    if principal is None:
        raise unauthenticated()
    return principal


CurrentPrincipal = Annotated[Principal, Depends(authenticated_principal)]


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
