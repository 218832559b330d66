"""HTTP routers of `gateway`, installed into the control plane by `kgov.app`: client quotas."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query, Request
from pydantic import BaseModel, Field

from authz.http import ApiError, AuthenticatedRoute, CurrentPrincipal, authorize_http, client_address
from authz.model import CLUSTER_RESOURCE_NAME, Operation, ResourceType
from gateway.cli import entity_json
from gateway.quota_model import DEFAULT_PART, NONE_PART, EntityPart, QuotaEntity, QuotaError
from gateway.quota_store import QuotaOp, QuotaStore

_ENTITY_KEYS = ("user", "client-id", "ip")


class QuotaEntry(BaseModel):
    entity: dict[str, str | None] = Field(
        description='Entity parts: {"user": "alice", "client-id": null}; null = the default entity')
    values: dict[str, float] = Field(default_factory=dict)


class QuotaChange(BaseModel):
    entity: dict[str, str | None] = Field(description="null = the default entity (Kafka's <default>)")
    set: dict[str, float] = Field(default_factory=dict, description="quota key -> value")
    remove: list[str] = Field(default_factory=list, description="quota keys to remove")


def _entity(raw: dict[str, str | None]) -> QuotaEntity:
    unknown = set(raw) - set(_ENTITY_KEYS)
    if unknown:
        raise ApiError(400, 40001, f"Unknown entity types: {', '.join(sorted(unknown))}")
    parts = [NONE_PART if k not in raw else (DEFAULT_PART if raw[k] is None else EntityPart.of(str(raw[k])))
             for k in _ENTITY_KEYS]
    return QuotaEntity(*parts)


def _store(request: Request) -> QuotaStore:
    store: QuotaStore = request.app.state.quota_store
    return store


def install(app: FastAPI) -> None:
    """Adds this package's routes to the control plane. Reads what it needs from `app.state`."""
    store = QuotaStore(app.state.engine)
    store.migrate()
    app.state.quota_store = store
    router = APIRouter(route_class=AuthenticatedRoute, tags=["quotas"])

    @router.get("/v1/quotas", response_model=list[QuotaEntry])
    def list_quotas(
        request: Request, principal: CurrentPrincipal,
        user: Annotated[str | None, Query(description="only entities of this user")] = None,
    ) -> list[dict[str, Any]]:
        """Client quotas the gateways enforce (Kafka's DescribeClientQuotas, as JSON)."""
        authorize_http(request, principal, ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, Operation.DESCRIBE_CONFIGS)
        _, configs = _store(request).load()
        return [{"entity": entity_json(e), "values": dict(sorted(v.items()))} for e, v in sorted(configs.items())
                if user is None or e.user == EntityPart.of(user)]

    @router.put("/v1/quotas", response_model=QuotaEntry)
    def alter_quotas(body: QuotaChange, request: Request, principal: CurrentPrincipal) -> dict[str, Any]:
        """Sets and removes quotas of one entity (Kafka's AlterClientQuotas); gateways apply it within a second."""
        authorize_http(request, principal, ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, Operation.ALTER_CONFIGS)
        ops = [QuotaOp(k, v) for k, v in body.set.items()] + [QuotaOp(k, remove=True) for k in body.remove]
        try:
            entity = _entity(body.entity).normalised()  # an ip as the gateway keeps it (10.0.0.7 for ::ffff:10.0.0.7)
            _store(request).alter([(entity, ops)])
        except QuotaError as exc:
            raise ApiError(400, 40001, str(exc)) from None
        audit = getattr(request.app.state, "audit", None)
        if audit is not None:
            from audit.model import EventType, change_event

            audit.write(change_event(
                type=EventType.CONFIG_CHANGE, source="kgov", time=request.app.state.clock(), principal=str(principal),
                method_name="quotas.Alter", target=f"quota={entity.describe()}",
                details={"set": body.set, "remove": body.remove}, client_address=client_address(request)))
        _, configs = _store(request).load()
        return {"entity": entity_json(entity), "values": dict(sorted(configs.get(entity, {}).items()))}

    app.include_router(router)
