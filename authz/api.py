"""Control-plane routes of `authz`.

- Confluent REST Proxy v3 ACLs: `/v3/clusters`, `/v3/clusters/{id}/acls` (GET/POST/DELETE), `:batch`.
- Role bindings in the shape of Confluent's MDS: `/security/1.0/...`.
- Group memberships: `/v1/groups`.
- An OPA-compatible decision API for brokers running the opa-kafka-plugin:
  `POST /v1/data/kafka/authz/allow` (and `/v1/data/kafka/authz/batch`).

Reading ACLs needs Cluster DESCRIBE and changing them Cluster ALTER, as in Kafka.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any, TypeVar
from urllib.parse import urlencode

from fastapi import APIRouter, Body, Depends, FastAPI, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from authz.decide import validate_new_acl
from authz.http import (
    ApiError,
    AuthenticatedRoute,
    CurrentPrincipal,
    authorize_http,
    client_address,
    listed_proxy,
    peer_address,
)
from authz.model import (
    CLUSTER_RESOURCE_NAME,
    Acl,
    AclFilter,
    Action,
    DecisionCaller,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    Principal,
    RequestContext,
    ResourceType,
    refuse_lone_surrogate,
)
from authz.request_names import request_name
from authz.roles import (
    PREDEFINED_ROLES,
    USER_ADMIN_ROLE_PRINCIPAL,
    RoleBinding,
    user_admin_refusal,
    validate_role_binding,
)
from authz.service import AuthorizerService, acl_to_json

CLUSTER = ResourceType.CLUSTER


def _service(request: Request) -> AuthorizerService:
    service: AuthorizerService = request.app.state.authorizer
    return service


def _cluster_id(request: Request) -> str:
    return str(request.app.state.settings.cluster_id)


def _check_cluster(request: Request, cluster_id: str) -> None:
    if cluster_id != _cluster_id(request):
        raise ApiError(404, 404, f"Cluster {cluster_id} cannot be found.")


_T = TypeVar("_T")


def _enum(parse: Any, value: str | None, default: _T, what: str) -> _T:
    if value is None or value == "":
        return default
    try:
        result: _T = parse(value)
    except InvalidAclError:
        raise ApiError(400, 400, f"Invalid {what}: {value}") from None
    return result


# ---------------------------------------------------------------------------- REST v3 ACLs


class AclData(BaseModel):
    model_config = ConfigDict(extra="forbid")
    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str = "*"
    operation: str
    permission: str


class AclBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    data: list[AclData] = Field(max_length=10_000)


def _acl_from_data(d: AclData) -> Acl:
    try:
        return Acl(
            ResourceType.parse(d.resource_type),
            d.resource_name,
            PatternType.parse(d.pattern_type),
            d.principal,
            d.host,
            Operation.parse(d.operation),
            Permission.parse(d.permission),
        )
    except InvalidAclError as exc:
        raise ApiError(400, 400, str(exc)) from None


def _acl_resource(request: Request, cluster_id: str, acl: Acl) -> dict[str, Any]:
    fields = acl_to_json(acl)
    base = str(request.base_url).rstrip("/")
    return {
        "kind": "KafkaAcl",
        "metadata": {"self": f"{base}/v3/clusters/{cluster_id}/acls?{urlencode(fields)}"},
        "cluster_id": cluster_id,
        **fields,
    }


def _acl_list(request: Request, cluster_id: str, acls: list[Acl]) -> dict[str, Any]:
    return {
        "kind": "KafkaAclList",
        "metadata": {"self": str(request.url), "next": None},
        "data": [_acl_resource(request, cluster_id, a) for a in acls],
    }


def acl_filter_query(
    resource_type: str | None = None,
    resource_name: str | None = None,
    pattern_type: str | None = None,
    principal: Annotated[str | None, Query()] = None,
    host: str | None = None,
    operation: str | None = None,
    permission: str | None = None,
) -> AclFilter:
    """The REST v3 query parameters of a search or delete, as Kafka's AclBindingFilter."""
    return AclFilter(
        _enum(ResourceType.parse, resource_type, ResourceType.ANY, "resource_type"),
        resource_name or None,
        _enum(PatternType.parse, pattern_type, PatternType.ANY, "pattern_type"),
        principal or None,
        host or None,
        _enum(Operation.parse, operation, Operation.ANY, "operation"),
        _enum(Permission.parse, permission, Permission.ANY, "permission"),
    )


AclFilterQuery = Annotated[AclFilter, Depends(acl_filter_query)]


def _create(request: Request, principal: Principal, acls: list[Acl]) -> None:
    """All or nothing: one invalid ACL refuses the whole request before anything is written."""
    errors = []
    for acl in acls:
        try:
            validate_new_acl(acl)
        except InvalidAclError as exc:
            errors.append(str(exc))
    if errors:
        raise ApiError(400, 400, "; ".join(dict.fromkeys(errors)))
    _service(request).create_acls(acls, actor=principal, client_address=client_address(request))


v3 = APIRouter(route_class=AuthenticatedRoute, tags=["acls"])


@v3.get("/v3/clusters")
def list_clusters(request: Request, principal: CurrentPrincipal) -> dict[str, Any]:
    authorize_http(request, principal, CLUSTER, CLUSTER_RESOURCE_NAME, Operation.DESCRIBE)
    return {"kind": "KafkaClusterList", "metadata": {"self": str(request.url), "next": None},
            "data": [_cluster(request)]}


@v3.get("/v3/clusters/{cluster_id}")
def get_cluster(request: Request, cluster_id: str, principal: CurrentPrincipal) -> dict[str, Any]:
    authorize_http(request, principal, CLUSTER, CLUSTER_RESOURCE_NAME, Operation.DESCRIBE)
    _check_cluster(request, cluster_id)
    return _cluster(request)


def _cluster(request: Request) -> dict[str, Any]:
    cid = _cluster_id(request)
    base = str(request.base_url).rstrip("/")
    return {
        "kind": "KafkaCluster",
        "metadata": {"self": f"{base}/v3/clusters/{cid}", "resource_name": f"crn:///kafka={cid}"},
        "cluster_id": cid,
        "acls": {"related": f"{base}/v3/clusters/{cid}/acls"},
    }


@v3.get("/v3/clusters/{cluster_id}/acls")
def search_acls(request: Request, cluster_id: str, caller: CurrentPrincipal, flt: AclFilterQuery
                ) -> dict[str, Any]:
    authorize_http(request, caller, CLUSTER, CLUSTER_RESOURCE_NAME, Operation.DESCRIBE)
    _check_cluster(request, cluster_id)
    return _acl_list(request, cluster_id, _service(request).describe_acls(flt))


@v3.post("/v3/clusters/{cluster_id}/acls", status_code=201)
def create_acl(request: Request, cluster_id: str, principal: CurrentPrincipal, body: AclData) -> Response:
    authorize_http(request, principal, CLUSTER, CLUSTER_RESOURCE_NAME, Operation.ALTER)
    _check_cluster(request, cluster_id)
    _create(request, principal, [_acl_from_data(body)])
    return Response(status_code=201)


@v3.post("/v3/clusters/{cluster_id}/acls:batch", status_code=201)
def create_acls_batch(request: Request, cluster_id: str, principal: CurrentPrincipal, body: AclBatch) -> Response:
    authorize_http(request, principal, CLUSTER, CLUSTER_RESOURCE_NAME, Operation.ALTER)
    _check_cluster(request, cluster_id)
    acls = [_acl_from_data(d) for d in body.data]
    _create(request, principal, acls)
    return Response(status_code=201)


@v3.delete("/v3/clusters/{cluster_id}/acls")
def delete_acls(request: Request, cluster_id: str, caller: CurrentPrincipal, flt: AclFilterQuery
                ) -> dict[str, Any]:
    authorize_http(request, caller, CLUSTER, CLUSTER_RESOURCE_NAME, Operation.ALTER)
    _check_cluster(request, cluster_id)
    if not request.query_params.get("resource_type"):
        # Confluent requires resource_type on delete, so one typo cannot wipe every ACL.
        raise ApiError(400, 400, "resource_type is required to delete ACLs (use ANY to match every type)")
    try:
        matches = _service(request).delete_acls([flt], actor=caller, client_address=client_address(request))
    except InvalidAclError as exc:
        raise ApiError(400, 400, str(exc)) from None
    return {"data": [_acl_resource(request, cluster_id, a) for a in matches[0]]}


# ---------------------------------------------------------------------------- MDS-shaped role bindings


def _role_json(name: str) -> dict[str, Any]:
    role = PREDEFINED_ROLES[name]
    return {
        "name": role.name,
        "description": role.description,
        "policy": {
            "bindingScope": "cluster" if role.cluster_scoped else "resource",
            "bindWithResource": not role.cluster_scoped,
            "allowedOperations": [
                {"resourceType": rt.name, "operations": sorted(op.name for op in ops)} for rt, ops in role.grants
            ],
        },
    }


class ResourcePatternBody(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")
    resource_type: str = Field(alias="resourceType")
    name: str
    pattern_type: str = Field(default="LITERAL", alias="patternType")


class ScopeBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    scope: dict[str, Any] = Field(default_factory=dict)
    resourcePatterns: list[ResourcePatternBody] = Field(default_factory=list, max_length=1000)


def _check_scope(request: Request, body: ScopeBody | None) -> None:
    clusters = (body.scope.get("clusters") or {}) if body else {}
    kafka = clusters.get("kafka-cluster") if isinstance(clusters, dict) else None
    if kafka is not None and kafka != _cluster_id(request):
        raise ApiError(404, 40403, f"Cluster {kafka} is not managed here (this is {_cluster_id(request)})")


def _binding(principal: str, role: str, pattern: ResourcePatternBody | None) -> RoleBinding:
    try:
        Principal.parse_given(principal)
        if pattern is None:
            binding = RoleBinding(principal, role)
        else:
            binding = RoleBinding(principal, role, ResourceType.parse(pattern.resource_type), pattern.name,
                                  PatternType.parse(pattern.pattern_type))
        validate_role_binding(binding)
    except InvalidAclError as exc:
        raise ApiError(400, 40002, str(exc)) from None
    return binding


def _pattern_json(b: RoleBinding) -> dict[str, str]:
    if b.resource_type is None or b.resource_name is None:
        return {"resourceType": "CLUSTER", "name": CLUSTER_RESOURCE_NAME, "patternType": "LITERAL"}
    return {"resourceType": b.resource_type.name, "name": b.resource_name, "patternType": b.pattern_type.name}


def _authorized_bindings(request: Request, caller: Principal, parse: Callable[[], list[RoleBinding]], *,
                         adding: bool) -> list[RoleBinding]:
    """The bindings `parse` reads from the request, once the caller may add (or remove) them.

    ALTER on the cluster may change any binding (SystemAdmin, super users, an ACL). A caller holding
    UserAdmin may change the others, never a SystemAdmin or UserAdmin binding, nor add one for itself
    or a group it is in (`authz.roles.user_admin_refusal`); that right is checked as DESCRIBE on the
    cluster, so a DENY of DESCRIBE (or ALL) on the cluster takes it away as it takes the role's grant.
    Confluent's UserAdmin manages every role binding (shared/reference/authz-sasl.md section 3.2);
    kgov's may not give anyone, itself first, the power to give everything (docs/authorizer.md).
    Callers without UserAdmin are authorized before their input is read, as before."""
    holders = _service(request).data.effective_principals(caller)
    if USER_ADMIN_ROLE_PRINCIPAL not in holders:
        authorize_http(request, caller, CLUSTER, CLUSTER_RESOURCE_NAME, Operation.ALTER)
        return parse()
    bindings = parse()
    refusal = next((r for b in bindings if (r := user_admin_refusal(b, holders, adding=adding)) is not None), None)
    if refusal is None:
        authorize_http(request, caller, CLUSTER, CLUSTER_RESOURCE_NAME, Operation.DESCRIBE)
        return bindings
    try:
        authorize_http(request, caller, CLUSTER, CLUSTER_RESOURCE_NAME, Operation.ALTER)
    except ApiError:
        raise ApiError(403, 40301, refusal) from None
    return bindings


mds = APIRouter(route_class=AuthenticatedRoute, tags=["role bindings"])


@mds.get("/security/1.0/roles")
def list_roles(request: Request, principal: CurrentPrincipal) -> list[dict[str, Any]]:
    return [_role_json(name) for name in sorted(PREDEFINED_ROLES)]


@mds.get("/security/1.0/roles/{role}")
def get_role(request: Request, role: str, principal: CurrentPrincipal) -> dict[str, Any]:
    if role not in PREDEFINED_ROLES:
        raise ApiError(404, 40403, f"Role {role} not found")
    return _role_json(role)


@mds.post("/security/1.0/principals/{target}/roles/{role}", status_code=204)
def bind_cluster_role(request: Request, target: str, role: str, principal: CurrentPrincipal,
                      body: Annotated[ScopeBody | None, Body()] = None) -> Response:
    [binding] = _authorized_bindings(request, principal, lambda: [_binding(target, role, None)], adding=True)
    _check_scope(request, body)
    _service(request).add_role_binding(binding, actor=principal, client_address=client_address(request))
    return Response(status_code=204)


@mds.delete("/security/1.0/principals/{target}/roles/{role}", status_code=204)
def unbind_cluster_role(request: Request, target: str, role: str, principal: CurrentPrincipal,
                        body: Annotated[ScopeBody | None, Body()] = None) -> Response:
    [binding] = _authorized_bindings(request, principal, lambda: [_binding(target, role, None)], adding=False)
    _check_scope(request, body)
    _service(request).remove_role_binding(binding, actor=principal, client_address=client_address(request))
    return Response(status_code=204)


@mds.post("/security/1.0/principals/{target}/roles/{role}/bindings", status_code=204)
def bind_resources(request: Request, target: str, role: str, principal: CurrentPrincipal,
                   body: ScopeBody) -> Response:
    def parse() -> list[RoleBinding]:
        if not body.resourcePatterns:
            raise ApiError(400, 40002, "resourcePatterns must name at least one resource")
        return [_binding(target, role, p) for p in body.resourcePatterns]

    bindings = _authorized_bindings(request, principal, parse, adding=True)
    _check_scope(request, body)
    for b in bindings:
        _service(request).add_role_binding(b, actor=principal, client_address=client_address(request))
    return Response(status_code=204)


@mds.delete("/security/1.0/principals/{target}/roles/{role}/bindings", status_code=204)
def unbind_resources(request: Request, target: str, role: str, principal: CurrentPrincipal,
                     body: ScopeBody) -> Response:
    bindings = _authorized_bindings(
        request, principal, lambda: [_binding(target, role, p) for p in body.resourcePatterns], adding=False
    )
    _check_scope(request, body)
    for b in bindings:
        _service(request).remove_role_binding(b, actor=principal, client_address=client_address(request))
    return Response(status_code=204)


@mds.get("/security/1.0/principals/{target}/roles/{role}/resources")
def role_resources(request: Request, target: str, role: str, principal: CurrentPrincipal
                   ) -> list[dict[str, str]]:
    authorize_http(request, principal, CLUSTER, CLUSTER_RESOURCE_NAME, Operation.DESCRIBE)
    return [_pattern_json(b) for b in _service(request).role_bindings(target) if b.role == role]


@mds.get("/security/1.0/lookup/principal/{target}/resources", operation_id="lookup_principal_resources_get")
@mds.post("/security/1.0/lookup/principal/{target}/resources", operation_id="lookup_principal_resources_post")
def lookup_principal(request: Request, target: str, principal: CurrentPrincipal) -> dict[str, Any]:
    """Bindings of the principal and of every group it belongs to, grouped by holder then role."""
    authorize_http(request, principal, CLUSTER, CLUSTER_RESOURCE_NAME, Operation.DESCRIBE)
    service = _service(request)
    try:
        holders = [target, *(str(g) for g in sorted(service.data.groups.get(Principal.parse(target), ())))]
    except InvalidAclError as exc:
        raise ApiError(400, 40002, str(exc)) from None
    out: dict[str, dict[str, list[dict[str, str]]]] = {}
    for holder in holders:
        for b in service.role_bindings(holder):
            out.setdefault(holder, {}).setdefault(b.role, []).append(_pattern_json(b))
    return out


@mds.get("/security/1.0/lookup/role/{role}/resource/{resource_type}/name/{name}")
def lookup_role_resource(request: Request, role: str, resource_type: str, name: str,
                         principal: CurrentPrincipal) -> list[str]:
    """Principals holding `role` on a resource: through a binding on a pattern matching it, or cluster-wide."""
    authorize_http(request, principal, CLUSTER, CLUSTER_RESOURCE_NAME, Operation.DESCRIBE)
    rt = _enum(ResourceType.parse, resource_type, ResourceType.TOPIC, "resourceType")
    holders = set()
    for b in _service(request).role_bindings():
        if b.role != role:
            continue
        if b.cluster_wide or (
            b.resource_type is rt and b.resource_name is not None and (
                name == b.resource_name if b.pattern_type is PatternType.LITERAL else name.startswith(b.resource_name)
            )
        ):
            holders.add(b.principal)
    return sorted(holders)


# ---------------------------------------------------------------------------- groups


groups_router = APIRouter(route_class=AuthenticatedRoute, tags=["groups"])


@groups_router.get("/v1/groups")
def list_groups(request: Request, principal: CurrentPrincipal) -> dict[str, list[str]]:
    authorize_http(request, principal, CLUSTER, CLUSTER_RESOURCE_NAME, Operation.DESCRIBE)
    return _service(request).groups()


def _group_and_member(group: str, member: str) -> tuple[Principal, Principal]:
    try:
        g, m = Principal.parse_given(group), Principal.parse_given(member)
    except InvalidAclError as exc:
        raise ApiError(400, 40002, str(exc)) from None
    if g.type != "Group" or not g.name:
        raise ApiError(400, 40002, f"expected a Group: principal, got {group}")
    return g, m


@groups_router.put("/v1/groups/{group}/members/{member}", status_code=204)
def add_member(request: Request, group: str, member: str, principal: CurrentPrincipal) -> Response:
    authorize_http(request, principal, CLUSTER, CLUSTER_RESOURCE_NAME, Operation.ALTER)
    g, m = _group_and_member(group, member)
    _service(request).add_group_member(g, m, actor=principal, client_address=client_address(request))
    return Response(status_code=204)


@groups_router.delete("/v1/groups/{group}/members/{member}", status_code=204)
def remove_member(request: Request, group: str, member: str, principal: CurrentPrincipal) -> Response:
    authorize_http(request, principal, CLUSTER, CLUSTER_RESOURCE_NAME, Operation.ALTER)
    g, m = _group_and_member(group, member)
    _service(request).remove_group_member(g, m, actor=principal, client_address=client_address(request))
    return Response(status_code=204)


# ---------------------------------------------------------------------------- OPA-compatible decisions


MAX_OPA_BODY = 4 * 1024 * 1024
MAX_OPA_BATCH = 10_000


async def _body(request: Request) -> bytes:
    raw = await request.body()
    if len(raw) > MAX_OPA_BODY:
        raise ApiError(413, 413, f"Request body larger than {MAX_OPA_BODY} bytes")
    return raw


def _json_field(raw: bytes, key: str) -> Any:
    """`key` of the body read as JSON whatever its Content-Type (brokers' HTTP clients do not all send one)."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, 400, f"Malformed JSON body: {exc}") from None
    except RecursionError:  # nested deeper than Python's json goes
        raise ApiError(400, 400, "Malformed JSON body: nested too deeply") from None
    if not isinstance(doc, dict) or key not in doc:
        raise ApiError(400, 400, f'The body must be a JSON object with an "{key}" field')
    return doc[key]


class OpaInputError(ValueError):
    pass


# What a Python type is called in the JSON the caller sent.
_JSON_KINDS: dict[type, str] = {dict: "a JSON object", str: "a string", int: "an integer", bool: "true or false"}


def _field(doc: Any, key: str, kind: type[_T]) -> _T:
    """`doc[key]`, which must be present and a `kind` (JSON: a bool is not a number)."""
    if not isinstance(doc, dict):
        raise OpaInputError(f"expected a JSON object holding {key!r}")
    if key not in doc:
        raise OpaInputError(f"{key!r} is required")
    value = doc[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise OpaInputError(f"{key!r} must be {_JSON_KINDS.get(kind, kind.__name__)}")
    return value


# Java strings on the wire: Kafka's protocol writes a STRING with an int16 length, so nothing a broker
# authorizes is longer; a longer one would only grow the decision cache's keys.
MAX_OPA_STRING = 32_767


def _text(doc: Any, key: str, *, nullable: bool = False) -> str:
    """A string field; None (JSON null) reads as "" where the plugin may write null (a v0 header's clientId)."""
    if nullable and isinstance(doc, dict) and key in doc and not isinstance(doc[key], str):
        if doc[key] is None:
            return ""
        raise OpaInputError(f"{key!r} must be a string or null")
    value = _field(doc, key, str)
    if len(value) > MAX_OPA_STRING:
        raise OpaInputError(f"{key!r} must be at most {MAX_OPA_STRING} characters")
    try:
        refuse_lone_surrogate(value, repr(key))
    except InvalidAclError as exc:
        raise OpaInputError(str(exc)) from None
    return value


_INT16 = (-(1 << 15), (1 << 15) - 1)
_INT32 = (-(1 << 31), (1 << 31) - 1)


def _number(doc: Any, key: str, low: int, high: int) -> int:
    value = _field(doc, key, int)
    if not low <= value <= high:
        raise OpaInputError(f"{key!r} must be an integer from {low} to {high}")
    return value


def _optional(doc: dict[str, Any], key: str, kind: type) -> None:
    """A field kgov does not read: checked only for its JSON type, and only when present."""
    if key in doc:
        _field(doc, key, kind)


# The names Java's `enum.name()` writes, for values a broker's Action can hold: Kafka's concrete
# ResourceTypes (kgov's SUBJECT is not one) and AclOperations (not the filter-only ANY, nor UNKNOWN).
_OPA_RESOURCE_TYPES: dict[str, ResourceType] = {t.name: t for t in (
    ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID,
    ResourceType.DELEGATION_TOKEN, ResourceType.USER)}
_OPA_OPERATIONS: dict[str, Operation] = {
    op.name: op for op in Operation if op not in (Operation.ANY, Operation.UNKNOWN)}
# org.apache.kafka.common.security.auth.SecurityProtocol
_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _named(names: Mapping[str, _T], value: str, what: str) -> _T:
    try:
        return names[value]
    except KeyError:
        raise OpaInputError(f"{what} must be one of {', '.join(names)}; got {value[:100]!r}") from None


def _opa_client_address(value: str) -> str:
    """The plugin sends Java's `InetAddress.toString()`: `hostname/ip`, or `/ip` when no name is
    known. Only the IP counts (Kafka matches ACL hosts against `getHostAddress()`); anything that
    does not end in `/` and an IP literal is refused, so a host-specific DENY can never be bypassed by
    an address that matches no ACL host."""
    _hostname, slash, literal = value.rpartition("/")
    try:
        if not slash:
            raise ValueError(value)
        ipaddress.ip_address(literal.partition("%")[0])
    except ValueError:
        raise OpaInputError("clientAddress must be Java's InetAddress text: [hostname]/ip") from None
    return literal


@dataclass(frozen=True, slots=True)
class OpaQuestion:
    """One input document, read: `action` is None for the plugin's authorizeByResourceType."""

    ctx: RequestContext
    resource_type: ResourceType
    operation: Operation
    action: Action | None


def _opa_question(doc: Any, caller: DecisionCaller | None = None) -> OpaQuestion:
    """Reads one input document as OpaAuthorizer.scala's serializers write it (fail closed: a missing
    field, a value of another JSON type or outside Java's range, an enum name Java would not write is an
    OpaInputError, answered 400, which the plugin reads as a denial). Fields kgov does not need
    (`connectionId`, `clientInformation`, `headerVersion`) are only type-checked; fields the plugin may
    add later are not read. No side effect: nothing is decided or audited here. `caller` is who sent the
    document (`_opa_caller_allowed`), carried in the context for the audit event."""
    if not isinstance(doc, dict):
        raise OpaInputError("each input document must be a JSON object")
    action_doc = _field(doc, "action", dict)
    ctx_doc = _field(doc, "requestContext", dict)
    pattern = _field(action_doc, "resourcePattern", dict)
    principal_doc = _field(ctx_doc, "principal", dict)
    header = _field(_field(ctx_doc, "header", dict), "name", dict)
    _optional(ctx_doc, "connectionId", str)
    _optional(ctx_doc, "clientInformation", dict)
    _optional(ctx_doc["header"], "headerVersion", int)
    if _field(pattern, "unknown", bool) if "unknown" in pattern else False:
        raise OpaInputError("'unknown' must be false: the resource type or pattern type is one kgov cannot read")
    protocol = _text(ctx_doc, "securityProtocol")
    if protocol not in _SECURITY_PROTOCOLS:
        raise OpaInputError(f"securityProtocol must be one of {', '.join(_SECURITY_PROTOCOLS)}; got {protocol[:100]!r}")
    ctx = RequestContext(
        principal=Principal(_text(principal_doc, "principalType"), _text(principal_doc, "name")),
        client_address=_opa_client_address(_text(ctx_doc, "clientAddress")),
        listener=_text(ctx_doc, "listenerName"),
        security_protocol=protocol,
        client_id=_text(header, "clientId", nullable=True),
        api_key=_number(header, "requestApiKey", 0, _INT16[1]),
        api_version=_number(header, "requestApiVersion", 0, _INT16[1]),
        correlation_id=_number(header, "correlationId", *_INT32),
        decision_caller=caller,
    )
    rt = _named(_OPA_RESOURCE_TYPES, _text(pattern, "resourceType"), "resourceType")
    op = _named(_OPA_OPERATIONS, _text(action_doc, "operation"), "operation")
    pt = _text(pattern, "patternType")
    name = _text(pattern, "name")
    ref_count = _number(action_doc, "resourceReferenceCount", 0, _INT32[1])
    log_if_allowed = _field(action_doc, "logIfAllowed", bool)
    log_if_denied = _field(action_doc, "logIfDenied", bool)
    if pt == "PREFIXED" and name == "":
        # The plugin maps authorizeByResourceType to PREFIXED "" (OpaAuthorizer.authorizeByResourceType).
        return OpaQuestion(ctx, rt, op, None)
    if pt != "LITERAL":
        # The plugin refuses any other pattern type itself (IllegalArgumentException), as Kafka's authorizers do.
        raise OpaInputError(f"Only literal resources are supported. Got: {pt[:100]}")
    return OpaQuestion(ctx, rt, op, Action(rt, name, op, resource_ref_count=ref_count,
                                           log_if_allowed=log_if_allowed, log_if_denied=log_if_denied))


def _opa_answer(service: AuthorizerService, question: OpaQuestion) -> bool:
    """Kafka's answer to a read document, audited as Kafka's authorizer logs it."""
    try:
        if question.action is None:
            return service.authorize_by_resource_type(question.ctx, question.operation, question.resource_type).allowed
        return service.authorize(question.ctx, [question.action])[0].allowed
    except InvalidAclError as exc:
        raise OpaInputError(str(exc)) from None


def _opa_decide(service: AuthorizerService, doc: Any, caller: DecisionCaller | None = None) -> bool:
    """One decision for the input document the opa-kafka-plugin sends."""
    return _opa_answer(service, _opa_question(doc, caller))


_FORWARDING_HEADERS = ("x-forwarded-for", "forwarded", "x-real-ip")


_IPV4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")


def _plain_address(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An IPv4-mapped IPv6 address (`::ffff:10.0.0.5`: what a dual-stack listener, or a proxy on one,
    reports for an IPv4 client) as the IPv4 address it is, as Java's InetAddress reads it."""
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


@lru_cache(maxsize=8)
def _networks(entries: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """`authz.decision_api_networks`, parsed once; an IPv4-mapped IPv6 network as its IPv4 network, so
    that `::ffff:10.0.0.0/104` and `10.0.0.0/8` admit the same callers whichever way they connect."""
    out: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for entry in entries:
        net = ipaddress.ip_network(entry, strict=False)
        mapped = (net.network_address.ipv4_mapped if isinstance(net, ipaddress.IPv6Network)
                  and net.prefixlen >= 96 and net.subnet_of(_IPV4_MAPPED) else None)
        out.append(net if mapped is None else ipaddress.IPv4Network((mapped, net.prefixlen - 96)))
    return tuple(out)


def _opa_caller_allowed(request: Request) -> DecisionCaller:
    """Brokers call the decision API without credentials, so only listed networks may (default: loopback).

    A request carrying forwarding headers came through a reverse proxy, or says it did. The address
    checked is the caller's only when a proxy listed in `http_forwarded_allow_ips` sent it with
    `X-Forwarded-For` (the one header the server reads); any other forwarded request is refused, whether
    or not proxies are listed: its address is the sender's (a proxy on kgov's host makes every client it
    forwards look like loopback, which the default admits). Refused rather than ignored, since ignoring
    would check exactly that proxy's address. Brokers call directly and send none of these headers.

    Returns the caller as checked (an IPv4-mapped address as its IPv4 one) and the listed proxy that
    forwarded it, if any, for the audit events of its decisions."""
    settings = request.app.state.settings
    forwarded = any(h in request.headers for h in _FORWARDING_HEADERS)
    sender = peer_address(request) or client_address(request)
    if forwarded and not listed_proxy(sender, settings.http_forwarded_allow_ips):
        raise ApiError(403, 40301, "The decision API does not answer requests forwarded by a proxy that is not "
                                   "listed in http_forwarded_allow_ips")
    if forwarded and "x-forwarded-for" not in request.headers:
        raise ApiError(403, 40301, "The decision API answers a listed proxy's requests only with X-Forwarded-For, "
                                   "which names the caller (Forwarded and X-Real-IP are not read)")
    try:
        addr = _plain_address(ipaddress.ip_address(client_address(request)))
    except ValueError:
        addr = None
    if addr is not None and any(addr in n for n in _networks(tuple(settings.authz.decision_api_networks))):
        return DecisionCaller(str(addr), sender if forwarded else None)
    raise ApiError(403, 40301, "This address may not use the decision API; add it to authz.decision_api_networks")


opa = APIRouter(tags=["decisions"])


@opa.post("/v1/data/kafka/authz/allow")
async def opa_allow(request: Request) -> dict[str, Any]:
    """Body `{"input": <the plugin's document>}`; answers `{"result": true|false}`."""
    caller = _opa_caller_allowed(request)
    doc = _json_field(await _body(request), "input")
    try:
        return {"result": _opa_decide(_service(request), doc, caller)}
    except OpaInputError as exc:
        raise ApiError(400, 400, str(exc)) from None


@opa.post("/v1/data/kafka/authz/batch")
async def opa_batch(request: Request) -> dict[str, Any]:
    """Body `{"inputs": [<document>, ...]}`; answers `{"result": [true|false, ...]}` in order."""
    caller = _opa_caller_allowed(request)
    raw = await _body(request)
    # Read and decided on a worker thread: a batch of thousands of audited decisions takes seconds, which
    # on the event loop would hold up every other broker's single decision (the plugin gives up after 5 s).
    return await run_in_threadpool(_opa_batch, _service(request), raw, caller)


def _opa_batch(service: AuthorizerService, raw: bytes, caller: DecisionCaller) -> dict[str, Any]:
    docs = _json_field(raw, "inputs")
    if not isinstance(docs, list) or len(docs) > MAX_OPA_BATCH:
        raise ApiError(400, 400, f'"inputs" must be a list of at most {MAX_OPA_BATCH} documents')
    try:
        # Every document is read before any is decided: a refused batch decides and audits nothing.
        questions = []
        for i, doc in enumerate(docs):
            try:
                questions.append(_opa_question(doc, caller))
            except OpaInputError as exc:
                raise OpaInputError(f"inputs[{i}]: {exc}") from None
        return {"result": [_opa_answer(service, q) for q in questions]}
    except OpaInputError as exc:
        raise ApiError(400, 400, str(exc)) from None


def install(app: FastAPI) -> None:
    for router in (v3, mds, groups_router, opa):
        app.include_router(router)


__all__ = ["install", "request_name"]
