"""HTTP routers of `sasl`, installed into the control plane by `kgov.app`.

- SCRAM users: `PUT/DELETE /v1/scram/users/{name}`, `GET /v1/scram/users` (Cluster ALTER to change,
  Cluster DESCRIBE to list, as Kafka's Alter/DescribeUserScramCredentials).
- Service accounts of the token issuer: `POST/GET /v1/oauth/clients`, `DELETE /v1/oauth/clients/{id}`.
- Delegation tokens (KIP-48): `POST /v1/delegation-tokens`, `.../renew`, `.../expire`, `GET`.
- The token issuer: `POST /oauth/token` (client credentials), `/.well-known/openid-configuration`,
  `/.well-known/jwks.json` (public, unauthenticated).
Errors map to `{"error_code", "message"}` here, in one place; the token endpoint answers RFC 6749 errors.
"""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, FastAPI, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from authz.http import (
    ApiError,
    AuthenticatedRoute,
    CurrentPrincipal,
    authorize_http,
    client_address,
    http_context,
)
from authz.model import CLUSTER_RESOURCE_NAME, Action, InvalidAclError, Operation, Principal, ResourceType
from sasl.config import OAuthConfig, is_base_url
from sasl.delegation import DelegationTokenError, TokenErrorCode, TokenInfo, format_bearer, token_json
from sasl.http_auth import CredentialAuthenticator, CredentialStoreUnavailable, parse_basic
from sasl.limiter import client_claim
from sasl.mechanism import Failure
from sasl.service import CredentialError, CredentialService, OAuthError
from sasl.store import ServiceAccount

_CREDENTIAL_STATUS = {
    CredentialError.UNSUPPORTED_SASL_MECHANISM: 400,
    CredentialError.RESOURCE_NOT_FOUND: 404,
    CredentialError.DUPLICATE_RESOURCE: 409,
    CredentialError.UNACCEPTABLE_CREDENTIAL: 400,
}
_TOKEN_STATUS = {
    TokenErrorCode.DELEGATION_TOKEN_AUTH_DISABLED: 400,
    TokenErrorCode.DELEGATION_TOKEN_NOT_FOUND: 404,
    TokenErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH: 403,
    TokenErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: 403,
    TokenErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED: 403,
    TokenErrorCode.DELEGATION_TOKEN_EXPIRED: 400,
    TokenErrorCode.INVALID_PRINCIPAL_TYPE: 400,
}


def _credential_error(exc: CredentialError) -> ApiError:
    status = _CREDENTIAL_STATUS.get(exc.code, 400)
    return ApiError(status, status * 100 + exc.code, str(exc))


def _token_error(exc: DelegationTokenError) -> ApiError:
    status = _TOKEN_STATUS[exc.code]
    return ApiError(status, status * 100 + int(exc.code), str(exc))


class ScramCredentialRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    mechanism: str = "SCRAM-SHA-512"
    password: str = Field(min_length=1, repr=False)
    iterations: int | None = None
    shared_principal: bool = Field(
        default=False,
        description="true to create this user although an OAuth client has its name: both are then the "
        "principal User:<name>, with the same ACLs, roles and groups (otherwise 409)",
    )


class MechanismOut(BaseModel):
    mechanism: str
    iterations: int


class ScramUserOut(BaseModel):
    name: str
    mechanisms: list[MechanismOut]


class OAuthClientRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    client_id: str = Field(min_length=1, max_length=255)
    client_secret: str = Field(min_length=1, repr=False)
    scopes: list[str] = []
    shared_principal: bool = Field(
        default=False,
        description="true to create this client although a SCRAM user has its name: both are then the "
        "principal User:<client_id>, with the same ACLs, roles and groups (otherwise 409)",
    )


class OAuthClientOut(BaseModel):
    client_id: str
    scopes: list[str]
    created_timestamp_ms: int


class CreateTokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    renewers: list[str] = []
    max_lifetime_ms: int = -1
    owner: str | None = None


class RenewTokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    hmac: str = Field(repr=False)
    renew_period_ms: int = -1


class ExpireTokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    hmac: str = Field(repr=False)
    expiry_period_ms: int = -1


class TokenOut(BaseModel):
    token_id: str
    owner: str
    requester: str
    renewers: list[str]
    issue_timestamp_ms: int
    expiry_timestamp_ms: int
    max_timestamp_ms: int


class CreatedTokenOut(TokenOut):
    hmac: str
    # kgov's OAUTHBEARER form of the token (`sasl.delegation.format_bearer`), for clients that log in
    # through OAUTHBEARER (librdkafka, kafka-python); what `kgov tokens create` prints as `bearer`.
    bearer: str


class ExpiryOut(BaseModel):
    expiry_timestamp_ms: int


def _client_out(acct: ServiceAccount) -> OAuthClientOut:
    return OAuthClientOut(
        client_id=acct.client_id, scopes=list(acct.scopes), created_timestamp_ms=acct.created_ms
    )


def _principals(values: list[str]) -> list[Principal]:
    try:
        return [Principal.parse_given(v) for v in values]
    except InvalidAclError as exc:
        raise ApiError(400, 40067, str(exc)) from None


def _service(request: Request) -> CredentialService:
    service: CredentialService = request.app.state.credentials
    return service


def _alter(request: Request, principal: Principal) -> None:
    authorize_http(request, principal, ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, Operation.ALTER)


def _describe(request: Request, principal: Principal) -> None:
    authorize_http(request, principal, ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, Operation.DESCRIBE)


def _admin_router() -> APIRouter:
    router = APIRouter(route_class=AuthenticatedRoute, tags=["credentials"])

    @router.put("/v1/scram/users/{name}", response_model=ScramUserOut)
    async def put_scram_user(
        name: str,
        body: ScramCredentialRequest,
        request: Request,
        response: Response,
        principal: CurrentPrincipal,
    ) -> ScramUserOut:
        """Creates or replaces one SCRAM credential of a user (201 when created, 200 when replaced)."""
        _alter(request, principal)
        service = _service(request)
        try:
            replaced = await asyncio.to_thread(
                service.set_scram_credential,
                name,
                body.mechanism,
                body.password,
                iterations=body.iterations,
                actor=principal,
                client_address=client_address(request),
                shared_principal=body.shared_principal,
            )
        except CredentialError as exc:
            raise _credential_error(exc) from None
        response.status_code = 200 if replaced else 201
        return _user_out(service, name)

    @router.delete("/v1/scram/users/{name}", status_code=204)
    def delete_scram_user(
        name: str, request: Request, principal: CurrentPrincipal, mechanism: str | None = None
    ) -> Response:
        """Deletes one mechanism's credential, or all of the user's when `mechanism` is omitted."""
        _alter(request, principal)
        try:
            _service(request).delete_scram_credential(
                name, mechanism, actor=principal, client_address=client_address(request)
            )
        except CredentialError as exc:
            raise _credential_error(exc) from None
        return Response(status_code=204)

    @router.get("/v1/scram/users", response_model=list[ScramUserOut])
    def list_scram_users(
        request: Request, principal: CurrentPrincipal, name: Annotated[list[str] | None, Query()] = None
    ) -> list[ScramUserOut]:
        """Users with their mechanisms and iterations (never a salt, key or password)."""
        _describe(request, principal)
        users = _service(request).describe_scram_users(name)
        return [
            ScramUserOut(
                name=u.name,
                mechanisms=[
                    MechanismOut(mechanism=m.mechanism, iterations=m.iterations) for m in u.mechanisms
                ],
            )
            for u in users
        ]

    @router.get("/v1/scram/users/{name}", response_model=ScramUserOut)
    def get_scram_user(name: str, request: Request, principal: CurrentPrincipal) -> ScramUserOut:
        _describe(request, principal)
        return _user_out(_service(request), name)

    @router.post("/v1/oauth/clients", response_model=OAuthClientOut)
    async def put_oauth_client(
        body: OAuthClientRequest, request: Request, response: Response, principal: CurrentPrincipal
    ) -> OAuthClientOut:
        """Creates or replaces a service account of the token issuer (201 when created)."""
        _alter(request, principal)
        service = _service(request)
        try:
            replaced = await asyncio.to_thread(
                service.set_client,
                body.client_id,
                body.client_secret,
                body.scopes,
                actor=principal,
                client_address=client_address(request),
                shared_principal=body.shared_principal,
            )
        except CredentialError as exc:
            raise _credential_error(exc) from None
        response.status_code = 200 if replaced else 201
        acct = service.store.get_client(body.client_id)
        assert acct is not None
        return _client_out(acct)

    @router.get("/v1/oauth/clients", response_model=list[OAuthClientOut])
    def list_oauth_clients(request: Request, principal: CurrentPrincipal) -> list[OAuthClientOut]:
        _describe(request, principal)
        return [_client_out(a) for a in _service(request).list_clients()]

    @router.delete("/v1/oauth/clients/{client_id}", status_code=204)
    def delete_oauth_client(client_id: str, request: Request, principal: CurrentPrincipal) -> Response:
        _alter(request, principal)
        try:
            _service(request).delete_client(
                client_id, actor=principal, client_address=client_address(request)
            )
        except CredentialError as exc:
            raise _credential_error(exc) from None
        return Response(status_code=204)

    return router


def _user_out(service: CredentialService, name: str) -> ScramUserOut:
    users = service.describe_scram_users([name])
    if not users:
        raise ApiError(404, 40491, f"User {name} has no SCRAM credentials")
    return ScramUserOut(
        name=name,
        mechanisms=[
            MechanismOut(mechanism=m.mechanism, iterations=m.iterations) for m in users[0].mechanisms
        ],
    )


def _token_router() -> APIRouter:
    router = APIRouter(route_class=AuthenticatedRoute, tags=["delegation tokens"])

    @router.post("/v1/delegation-tokens", status_code=201, response_model=CreatedTokenOut)
    def create_token(
        body: CreateTokenRequest, request: Request, principal: CurrentPrincipal
    ) -> dict[str, Any]:
        """Creates a token owned by the caller (or by `owner`, which needs CREATE_TOKENS on User:<owner>)."""
        owner = _principals([body.owner])[0] if body.owner else principal
        if owner != principal:
            authorize_http(request, principal, ResourceType.USER, str(owner), Operation.CREATE_TOKENS)
        try:
            created = _service(request).create_token(
                principal,
                renewers=_principals(body.renewers),
                max_lifetime_ms=body.max_lifetime_ms,
                owner=owner,
                client_address=client_address(request),
            )
        except DelegationTokenError as exc:
            raise _token_error(exc) from None
        return {**token_json(created.info), "hmac": base64.b64encode(created.hmac).decode(),
                "bearer": format_bearer(created.info.token_id, created.hmac)}

    @router.post("/v1/delegation-tokens/renew", response_model=ExpiryOut)
    def renew_token(body: RenewTokenRequest, request: Request, principal: CurrentPrincipal) -> ExpiryOut:
        try:
            info = _service(request).renew_token(
                principal, body.hmac, body.renew_period_ms, client_address=client_address(request)
            )
        except DelegationTokenError as exc:
            raise _token_error(exc) from None
        return ExpiryOut(expiry_timestamp_ms=info.expiry_ms)

    @router.post("/v1/delegation-tokens/expire", response_model=ExpiryOut)
    def expire_token(body: ExpireTokenRequest, request: Request, principal: CurrentPrincipal) -> ExpiryOut:
        try:
            expiry = _service(request).expire_token(
                principal, body.hmac, body.expiry_period_ms, client_address=client_address(request)
            )
        except DelegationTokenError as exc:
            raise _token_error(exc) from None
        return ExpiryOut(expiry_timestamp_ms=expiry)

    @router.get("/v1/delegation-tokens", response_model=list[TokenOut])
    def describe_tokens(
        request: Request, principal: CurrentPrincipal, owner: Annotated[list[str] | None, Query()] = None
    ) -> list[dict[str, Any]]:
        """Tokens visible to the caller: owner, requester, renewer, or DESCRIBE on the token /
        DESCRIBE_TOKENS on the owner. HMACs are only returned once, at creation."""
        owners = _principals(owner) if owner is not None else None
        authorizer = request.app.state.authorizer
        ctx = http_context(request, principal)

        def may_describe(info: TokenInfo) -> bool:
            actions = [
                Action(
                    ResourceType.DELEGATION_TOKEN,
                    info.token_id,
                    Operation.DESCRIBE,
                    log_if_allowed=False,
                    log_if_denied=False,
                ),
                Action(
                    ResourceType.USER,
                    str(info.owner),
                    Operation.DESCRIBE_TOKENS,
                    log_if_allowed=False,
                    log_if_denied=False,
                ),
            ]
            return any(d.allowed for d in authorizer.authorize(ctx, actions))

        try:
            tokens = _service(request).describe_tokens(principal, owners=owners, may_describe=may_describe)
        except DelegationTokenError as exc:
            raise _token_error(exc) from None
        return [token_json(t) for t in tokens]

    return router


def _oauth_error(exc: OAuthError, *, authorization_header: bool = False) -> JSONResponse:
    headers = {"Cache-Control": "no-store", "Pragma": "no-cache"}
    if exc.status == 401 and authorization_header:
        # RFC 6749 §5.2: a client that tried the Authorization header gets a challenge, whatever it
        # sent there (Basic is the only scheme this endpoint takes).
        headers["WWW-Authenticate"] = 'Basic realm="kgov"'
    return JSONResponse(
        status_code=exc.status,
        content={"error": exc.error, "error_description": exc.description},
        headers=headers,
    )


def _client_credentials(request: Request, form: dict[str, str]) -> tuple[str, str]:
    """(client_id, secret): HTTP Basic, read as sent (one guess per request), or the form's.

    RFC 6749 §2.3.1 has the client form-urlencode both before Basic encoding; Kafka's Java client does
    so only with `sasl.oauthbearer.header.urlencode=true` (default false, `HttpAccessTokenRetriever.
    formatAuthorizationHeader` / `ClientCredentialsJwtRetriever`) and librdkafka never
    (`rd_kafka_oidc_build_auth_header` formats "%s:%s" and base64-encodes it). kgov takes the value as
    sent, as those clients' defaults need, and keeps the two spellings the same for every client it
    creates: client ids and secrets are made of characters form-urlencoding leaves as they are
    (`CredentialService.set_client`). Trying both spellings would give a guesser two per counted failure."""
    header = request.headers.get("authorization")
    basic = parse_basic(header)
    if header and basic is None:
        raise OAuthError("invalid_client", "unsupported client authentication", 401)
    if basic is not None:
        if "client_secret" in form:
            raise OAuthError("invalid_request", "use only one client authentication method")
        return basic
    if "client_id" in form and "client_secret" in form:
        return form["client_id"], form["client_secret"]
    raise OAuthError("invalid_client", "client authentication required", 401)


_TOKEN_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/x-www-form-urlencoded": {
                "schema": {
                    "type": "object",
                    "required": ["grant_type"],
                    "properties": {
                        "grant_type": {"type": "string", "enum": ["client_credentials"]},
                        "scope": {"type": "string", "description": "space-separated; default all allowed"},
                        "client_id": {"type": "string", "description": "when not using HTTP Basic"},
                        "client_secret": {"type": "string", "description": "when not using HTTP Basic"},
                    },
                }
            }
        },
    }
}
_OAUTH_ERROR_SCHEMA = {
    "type": "object",
    "properties": {"error": {"type": "string"}, "error_description": {"type": "string"}},
}
_TOKEN_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "RFC 6749 access token response",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "access_token": {"type": "string"},
                        "token_type": {"type": "string", "enum": ["Bearer"]},
                        "expires_in": {"type": "integer"},
                        "scope": {"type": "string"},
                    },
                }
            }
        },
    },
    400: {
        "description": "invalid_request, unsupported_grant_type or invalid_scope",
        "content": {"application/json": {"schema": _OAUTH_ERROR_SCHEMA}},
    },
    401: {"description": "invalid_client", "content": {"application/json": {"schema": _OAUTH_ERROR_SCHEMA}}},
    503: {
        "description": "temporarily_unavailable: the credential store has not answered for sasl.max_snapshot_age_s",
        "content": {"application/json": {"schema": _OAUTH_ERROR_SCHEMA}},
    },
}


# A client-credentials request is a few hundred bytes; the form is read whole, so it is capped.
MAX_TOKEN_REQUEST_BYTES = 16 * 1024


async def _bounded_body(request: Request) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_TOKEN_REQUEST_BYTES:
        raise OAuthError("invalid_request", "request body too large")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_TOKEN_REQUEST_BYTES:
            raise OAuthError("invalid_request", "request body too large")
    return bytes(body)


def discovery_base_url(request: Request, oauth: OAuthConfig) -> str:
    """Where the discovery document says the token endpoint and the JWKS are. Not `request.base_url`:
    that is built from the Host header, so behind a caching proxy one forged Host would serve every
    client a document pointing at the forger's token endpoint (and keys). In order: the configured
    `public_base_url`; `token_issuer` when it is an http(s) URL (OpenID Connect Discovery places the
    document under the issuer); the socket address the server is bound to (the ASGI `server`, which
    no header sets, with the server's `root_path`). None of those: 500 with what to configure."""
    if oauth.public_base_url:
        return oauth.public_base_url.rstrip("/")
    if is_base_url(oauth.token_issuer):
        return oauth.token_issuer.rstrip("/")
    server = request.scope.get("server")
    scheme = request.scope.get("scheme")
    if not server or server[1] is None or scheme not in ("http", "https"):
        raise ApiError(
            500,
            50001,
            "the discovery document needs a base URL: set oauth.public_base_url (KGOV_OAUTH__PUBLIC_BASE_URL) "
            "to the URL clients reach this server at",
        )
    host, port = str(server[0]), int(server[1])
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port == {"http": 80, "https": 443}[scheme] else f"{host}:{port}"
    return f"{scheme}://{netloc}{request.scope.get('root_path', '')}".rstrip("/")


def _issuer_router() -> APIRouter:
    router = APIRouter(tags=["token issuer"])

    @router.post("/oauth/token", openapi_extra=_TOKEN_OPENAPI, responses=_TOKEN_RESPONSES)
    async def token(request: Request) -> JSONResponse:
        """RFC 6749 §4.4 client-credentials grant; answers a short-lived JWT (RS256/ES256)."""
        service = _service(request)
        address = client_address(request)
        authorization_header = "authorization" in request.headers
        try:
            if "application/x-www-form-urlencoded" not in request.headers.get("content-type", ""):
                raise OAuthError("invalid_request", "expected application/x-www-form-urlencoded")
            form_body = await _bounded_body(request)
            # The failure delay counts from here, when the last byte of the credentials (in the body, or
            # the Authorization header with grant_type in the body) has arrived, as sasl.http_auth counts
            # from the head that carries them: counted from the request's start, a body sent slowly over
            # the delay would use it up, and the answer's time would show the check's (which client ids
            # exist, what credential they have).
            started = time.monotonic()
            try:
                pairs = parse_qsl(form_body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
            except UnicodeDecodeError:
                raise OAuthError("invalid_request", "body is not UTF-8") from None
            form: dict[str, str] = {}
            for key, value in pairs:
                if key in form:
                    raise OAuthError("invalid_request", f"parameter {key} repeated")
                form[key] = value
            credentials = _client_credentials(request, form)
            if not form.get("grant_type"):
                raise OAuthError("invalid_request", "grant_type is required")
            if form["grant_type"] != "client_credentials":
                raise OAuthError("unsupported_grant_type", "only grant_type=client_credentials is supported")
            account = None
            cid, secret = credentials
            # Counted per client id at this address, and per address (`sasl.limiter`). A refusal is
            # audited, as at the gateway and over HTTP Basic, but not counted again.
            refusal = service.limiter.refusal(address, client_claim(cid))
            if refusal is not None:
                service.audit_authentication(Failure(refusal, mechanism="OAUTH-CLIENT-CREDENTIALS"), address,
                                             "oauth.Token")
            else:
                try:
                    account = await asyncio.to_thread(service.authenticate_client, cid, secret)
                except CredentialStoreUnavailable as exc:
                    # Not the client's fault: not counted, and said as RFC 6749 §4.1.2.1 says it.
                    raise OAuthError("temporarily_unavailable", str(exc), 503) from None
                if account is None:
                    service.limiter.record_failure(address, client_claim(cid))
                    service.audit_authentication(
                        Failure("invalid client credentials", mechanism="OAUTH-CLIENT-CREDENTIALS"),
                        address,
                        "oauth.Token",
                    )
            if account is None:
                # A blocked source waits too, as in sasl.http_auth: every refusal takes the same time.
                await asyncio.sleep(max(0.0, service.failure_delay_s - (time.monotonic() - started)))
                raise OAuthError("invalid_client", "client authentication failed", 401)
            try:
                issued = await asyncio.to_thread(service.issue_token, account, form.get("scope") or None)
            except CredentialStoreUnavailable as exc:  # the signing keys come from the same snapshot
                raise OAuthError("temporarily_unavailable", str(exc), 503) from None
        except OAuthError as exc:
            return _oauth_error(exc, authorization_header=authorization_header)
        body = {"access_token": issued.access_token, "token_type": "Bearer", "expires_in": issued.expires_in}
        if issued.scope:
            body["scope"] = issued.scope
        return JSONResponse(body, headers={"Cache-Control": "no-store", "Pragma": "no-cache"})

    @router.get("/.well-known/openid-configuration")
    def openid_configuration(request: Request) -> dict[str, Any]:
        # URLs from `oauth.public_base_url`, else an http(s) `oauth.token_issuer`, else the address the
        # server is bound to: never from the request's Host header (see `discovery_base_url`).
        service = _service(request)
        base = discovery_base_url(request, service.oauth)
        return {
            "issuer": service.oauth.token_issuer,
            "token_endpoint": f"{base}/oauth/token",
            "jwks_uri": f"{base}/.well-known/jwks.json",
            "grant_types_supported": ["client_credentials"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "response_types_supported": ["token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": [service.oauth.signing_algorithm],
            "token_endpoint_auth_signing_alg_values_supported": [service.oauth.signing_algorithm],
            "claims_supported": [
                "iss",
                "sub",
                "aud",
                "exp",
                "iat",
                "nbf",
                "jti",
                "client_id",
                service.oauth.scope_claim,
            ],
        }

    @router.get("/.well-known/jwks.json")
    async def jwks(request: Request) -> JSONResponse:
        document = await asyncio.to_thread(_service(request).jwks_document)
        return JSONResponse(document, headers={"Cache-Control": "public, max-age=300"})

    return router


def install(app: FastAPI) -> None:
    """Adds this package's routes to the control plane and replaces the bootstrap authenticator
    with the credential store (HTTP Basic as PLAIN, Bearer JWTs). Reads `app.state`."""
    settings = app.state.settings
    service = CredentialService(
        app.state.engine,
        settings,
        audit=app.state.audit,
        clock=app.state.clock,
        source=f"crn:///kafka={settings.cluster_id}",
    )
    admin_password = settings.admin.password.get_secret_value() if settings.admin.password else None
    service.ensure_admin(settings.admin.user, admin_password)
    app.state.credentials = service
    app.state.authenticator = CredentialAuthenticator(service)
    checks = getattr(app.state, "health_checks", None)
    if isinstance(checks, list):  # /health: 503 while logins fail closed (sasl.max_snapshot_age_s)
        checks.append(service.snapshot_problem)
    app.include_router(_admin_router())
    app.include_router(_token_router())
    app.include_router(_issuer_router())
