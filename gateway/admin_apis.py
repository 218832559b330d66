"""Security admin APIs answered by the gateway itself (never forwarded): ACLs, SCRAM credentials and
client quotas, so Kafka's AdminClient and CLI tools manage kgov's stores through the Kafka protocol.

Authorization follows Kafka's table: Describe/Alter on the Cluster for ACLs and SCRAM credentials,
DescribeConfigs/AlterConfigs on the Cluster for quotas. Error codes and messages are Kafka's.

ACL requests that name an UNKNOWN element are refused as Kafka refuses them while it parses the
request (CreateAclsRequest, DescribeAclsRequest, DeleteAclsRequest `validate`, before authorization):
the IllegalArgumentException becomes RequestContext.parseRequest's InvalidRequestException, and
SocketServer.processCompletedReceives logs it at ERROR and closes the connection without an answer.
Here the handler raises `InvalidRequestError`, which closes the connection the same way, with Kafka's
log lines (`gateway.invalid_request`, `ClientConnection._refuse_invalid_request`).
Create and Describe compare the wire codes with UNKNOWN's (0); Delete compares after `fromCode`, so
an unassigned code (99) is refused there too, while in Create it gets a per-ACL error and in Describe
it matches nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from authz.model import (
    CLUSTER_RESOURCE_NAME,
    Acl,
    AclFilter,
    Action,
    Authorizer,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    RequestContext,
    ResourceType,
)
from gateway.codec import SPECS
from gateway.invalid_request import InvalidRequestError
from gateway.quota_model import (
    DEFAULT_PART,
    NONE_PART,
    EntityPart,
    Part,
    QuotaEntity,
    QuotaError,
    ip_lookup_key,
)
from gateway.quota_store import QuotaOp, QuotaStore
from gateway.quotas import QuotaEnforcer
from gateway.request_authz import ANONYMOUS, CLUSTER_AUTHORIZATION_FAILED

INVALID_REQUEST: Final = 42
SECURITY_DISABLED: Final = 54
UNSUPPORTED_SASL_MECHANISM: Final = 33
RESOURCE_NOT_FOUND: Final = 91
DUPLICATE_RESOURCE: Final = 92
UNACCEPTABLE_CREDENTIAL: Final = 93
INVALID_CONFIG: Final = 40
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: Final = 64
SCRAM_MECHANISMS: Final = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
SCRAM_CODES: Final = {v: k for k, v in SCRAM_MECHANISMS.items()}

Handler = Callable[[RequestContext, int, Any], Any]


def _allowed(authorizer: Authorizer, ctx: RequestContext, op: Operation) -> bool:
    action = Action(ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, op)
    return authorizer.authorize(ctx, [action])[0].allowed


def _enum(cls: Any, value: int) -> Any:
    try:
        return cls(value)
    except ValueError:
        return cls.UNKNOWN


def _filter(resource_type: int, name: str | None, pattern: int, principal: str | None, host: str | None,
            op: int, permission: int) -> AclFilter:
    return AclFilter(_enum(ResourceType, resource_type), name, _enum(PatternType, pattern), principal, host,
                     _enum(Operation, op), _enum(Permission, permission))


def _names_unknown(*codes: int) -> bool:
    """Kafka's wire check in CreateAclsRequest and DescribeAclsRequest `validate`: a code equal to
    UNKNOWN's (0); an unassigned code is not caught there."""
    return any(code == 0 for code in codes)


def refuse_unknown_acl_elements(api_key: int, request: Any) -> None:
    """Raises InvalidRequestError (the connection is closed, unanswered) when an ACL request names an UNKNOWN
    element where Kafka's request parser refuses it; see the module docstring."""
    if api_key == 29:
        unknown = _names_unknown(request.pattern_type_filter, request.resource_type_filter,
                                 request.permission_type, request.operation)
        message = "DescribeAclsRequest contains UNKNOWN elements"
    elif api_key == 30:
        unknown = any(_names_unknown(c.resource_pattern_type, c.resource_type, c.permission_type, c.operation)
                      for c in request.creations)
        message = "CreatableAcls contain unknown elements"
    else:
        unknown = any(_filter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                              f.principal_filter, f.host_filter, f.operation, f.permission_type).is_unknown
                      for f in request.filters)
        message = "Filters contain UNKNOWN elements"
    if unknown:
        raise InvalidRequestError(message)


class AclApis:
    def __init__(self, service: Any) -> None:
        self.service = service  # authz.service.AuthorizerService

    def describe(self, ctx: RequestContext, version: int, request: Any) -> Any:
        refuse_unknown_acl_elements(29, request)
        resp = SPECS[29].response
        if not _allowed(self.service, ctx, Operation.DESCRIBE):
            return resp(error_code=CLUSTER_AUTHORIZATION_FAILED, error_message="Cluster authorization failed.",
                        resources=[])
        flt = _filter(request.resource_type_filter, request.resource_name_filter, request.pattern_type_filter,
                      request.principal_filter, request.host_filter, request.operation, request.permission_type)
        if flt.is_unknown:  # an unassigned code: Kafka's filter (fromCode: UNKNOWN) matches no binding
            return resp(error_code=0, error_message=None, resources=[])
        groups: dict[tuple[int, str, int], list[Acl]] = {}
        for acl in self.service.describe_acls(flt):
            groups.setdefault((int(acl.resource_type), acl.resource_name, int(acl.pattern_type)), []).append(acl)
        resource = resp.fields["resources"].data_class
        acl_cls = resource.fields["acls"].data_class
        return resp(error_code=0, error_message=None, resources=[
            resource(resource_type=rt, resource_name=name, pattern_type=pt, acls=[
                acl_cls(principal=a.principal, host=a.host, operation=int(a.operation),
                        permission_type=int(a.permission)) for a in acls])
            for (rt, name, pt), acls in groups.items()
        ])

    def create(self, ctx: RequestContext, version: int, request: Any) -> Any:
        refuse_unknown_acl_elements(30, request)
        resp = SPECS[30].response
        result = resp.fields["results"].data_class
        if not _allowed(self.service, ctx, Operation.ALTER):
            return resp(results=[result(error_code=CLUSTER_AUTHORIZATION_FAILED,
                                        error_message="Cluster authorization failed.") for _ in request.creations])
        acls = [
            Acl(_enum(ResourceType, c.resource_type), c.resource_name, _enum(PatternType, c.resource_pattern_type),
                c.principal, c.host, _enum(Operation, c.operation), _enum(Permission, c.permission_type))
            for c in request.creations
        ]
        try:
            outcomes = self.service.create_acls(acls, actor=ctx.principal, client_address=ctx.client_address)
        except InvalidAclError as exc:
            return resp(results=[result(error_code=INVALID_REQUEST, error_message=str(exc)) for _ in acls])
        return resp(results=[
            result(error_code=0, error_message=None) if err is None
            else result(error_code=INVALID_REQUEST, error_message=str(err))
            for err in outcomes
        ])

    def delete(self, ctx: RequestContext, version: int, request: Any) -> Any:
        refuse_unknown_acl_elements(31, request)
        resp = SPECS[31].response
        fr = resp.fields["filter_results"].data_class
        match_cls = fr.fields["matching_acls"].data_class
        if not _allowed(self.service, ctx, Operation.ALTER):
            return resp(filter_results=[fr(error_code=CLUSTER_AUTHORIZATION_FAILED,
                                           error_message="Cluster authorization failed.", matching_acls=[])
                                        for _ in request.filters])
        filters = [_filter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                           f.principal_filter, f.host_filter, f.operation, f.permission_type) for f in request.filters]
        try:
            matches = self.service.delete_acls(filters, actor=ctx.principal, client_address=ctx.client_address)
        except InvalidAclError as exc:
            return resp(filter_results=[fr(error_code=INVALID_REQUEST, error_message=str(exc), matching_acls=[])
                                        for _ in filters])
        return resp(filter_results=[
            fr(error_code=0, error_message=None, matching_acls=[
                match_cls(error_code=0, error_message=None, resource_type=int(a.resource_type),
                          resource_name=a.resource_name, pattern_type=int(a.pattern_type), principal=a.principal,
                          host=a.host, operation=int(a.operation), permission_type=int(a.permission))
                for a in group])
            for group in matches
        ])


class ScramApis:
    def __init__(self, authorizer: Authorizer, credentials: Any, audit: Any = None) -> None:
        self.authorizer = authorizer
        self.credentials = credentials  # sasl.service.CredentialService

    def describe(self, ctx: RequestContext, version: int, request: Any) -> Any:
        resp = SPECS[50].response
        if not _allowed(self.authorizer, ctx, Operation.DESCRIBE):
            return resp(error_code=CLUSTER_AUTHORIZATION_FAILED, error_message="Cluster authorization failed.",
                        results=[])
        result = resp.fields["results"].data_class
        info = result.fields["credential_infos"].data_class
        wanted = None if request.users is None else [u.name for u in request.users]
        users = {u.name: u for u in self.credentials.describe_scram_users(wanted)}
        names = sorted(users) if wanted is None else wanted
        seen: dict[str, int] = {}
        for n in names:
            seen[n] = seen.get(n, 0) + 1
        out = []
        for name in dict.fromkeys(names):
            if seen[name] > 1:
                out.append(result(user=name, error_code=DUPLICATE_RESOURCE,
                                  error_message=f"Cannot describe SCRAM credentials for the same user twice in a "
                                                f"single request: {name}", credential_infos=[]))
            elif name not in users:
                out.append(result(user=name, error_code=RESOURCE_NOT_FOUND,
                                  error_message=f"Attempt to describe a user credential that does not exist: {name}",
                                  credential_infos=[]))
            else:
                out.append(result(user=name, error_code=0, error_message=None, credential_infos=[
                    info(mechanism=SCRAM_CODES[m.mechanism], iterations=m.iterations)
                    for m in users[name].mechanisms if m.mechanism in SCRAM_CODES]))
        return resp(error_code=0, error_message=None, results=out)

    def alter(self, ctx: RequestContext, version: int, request: Any) -> Any:
        from sasl.service import CredentialError

        resp = SPECS[51].response
        result = resp.fields["results"].data_class
        names = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
        if not _allowed(self.authorizer, ctx, Operation.ALTER):
            return resp(results=[result(user=n, error_code=CLUSTER_AUTHORIZATION_FAILED,
                                        error_message="Cluster authorization failed.") for n in dict.fromkeys(names)])
        errors: dict[str, tuple[int, str]] = {}
        pairs = [(d.name, d.mechanism) for d in request.deletions] + [(u.name, u.mechanism) for u in request.upsertions]
        if len(set(pairs)) != len(pairs):
            for p in {p for p in pairs if pairs.count(p) > 1}:
                errors[p[0]] = (DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
        for op in [*request.deletions, *request.upsertions]:
            if op.name in errors:
                continue
            if not op.name:
                errors[op.name] = (UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
            elif op.mechanism not in SCRAM_MECHANISMS:
                errors[op.name] = (UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        for d in request.deletions:
            if d.name in errors:
                continue
            try:
                self.credentials.delete_scram_credential(d.name, SCRAM_MECHANISMS[d.mechanism], actor=ctx.principal,
                                                         client_address=ctx.client_address)
            except CredentialError as exc:
                errors[d.name] = (exc.code, str(exc))
        for u in request.upsertions:
            if u.name in errors:
                continue
            # The client sends the salted password (never the password); the credential service
            # derives the keys and writes the audit record inside the same transaction.
            try:
                self.credentials.set_scram_salted_credential(
                    u.name, SCRAM_MECHANISMS[u.mechanism], salt=bytes(u.salt),
                    salted_password=bytes(u.salted_password), iterations=u.iterations,
                    actor=ctx.principal, client_address=ctx.client_address,
                )
            except CredentialError as exc:
                errors[u.name] = (exc.code, str(exc))
        return resp(results=[
            result(user=n, error_code=errors[n][0] if n in errors else 0,
                   error_message=errors[n][1] if n in errors else None)
            for n in dict.fromkeys(names)
        ])


_ENTITY_TYPES: Final = ("user", "client-id", "ip")


def _entity_from_wire(parts: list[Any]) -> QuotaEntity:
    values: dict[str, EntityPart] = {}
    for p in parts:
        if p.entity_type not in _ENTITY_TYPES or p.entity_type in values:
            raise QuotaError(f"Unexpected entity type {p.entity_type}")
        values[p.entity_type] = DEFAULT_PART if p.entity_name is None else EntityPart.of(p.entity_name)
    return QuotaEntity(values.get("user", NONE_PART), values.get("client-id", NONE_PART), values.get("ip", NONE_PART))


def _entity_to_wire(cls: Any, entity: QuotaEntity) -> list[Any]:
    out = []
    for label, part in zip(_ENTITY_TYPES, (entity.user, entity.client_id, entity.ip), strict=True):
        if part.kind is not Part.NONE:
            out.append(cls(entity_type=label, entity_name=part.render()))
    return out


class QuotaApis:
    def __init__(self, authorizer: Authorizer, store: QuotaStore, enforcer: QuotaEnforcer) -> None:
        self.authorizer = authorizer
        self.store = store
        self.enforcer = enforcer

    def describe(self, ctx: RequestContext, version: int, request: Any) -> Any:
        resp = SPECS[48].response
        if not _allowed(self.authorizer, ctx, Operation.DESCRIBE_CONFIGS):
            return resp(error_code=CLUSTER_AUTHORIZATION_FAILED, error_message="Cluster authorization failed.",
                        entries=None)
        _, configs = self.store.load()
        entry = resp.fields["entries"].data_class
        entity_cls = entry.fields["entity"].data_class
        value_cls = entry.fields["values"].data_class
        out = []
        for entity, values in sorted(configs.items()):
            if matches_components(entity, request.components, request.strict):
                out.append(entry(entity=_entity_to_wire(entity_cls, entity), values=[
                    value_cls(key=k, value=v) for k, v in sorted(values.items())]))
        return resp(error_code=0, error_message=None, entries=out)

    def alter(self, ctx: RequestContext, version: int, request: Any) -> Any:
        resp = SPECS[49].response
        entry = resp.fields["entries"].data_class
        entity_cls = entry.fields["entity"].data_class

        def answer(e: Any, code: int, message: str | None) -> Any:
            return entry(error_code=code, error_message=message,
                         entity=[entity_cls(entity_type=p.entity_type, entity_name=p.entity_name) for p in e.entity])

        if not _allowed(self.authorizer, ctx, Operation.ALTER_CONFIGS):
            return resp(entries=[answer(e, CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
                                 for e in request.entries])
        results = []
        changes = []
        for e in request.entries:
            try:
                entity = _entity_from_wire(list(e.entity))
                ops = [QuotaOp(o.key, float(o.value), bool(o.remove)) for o in e.ops]
                from gateway.quota_store import validate_ops

                validate_ops(entity, ops)
            except QuotaError as exc:
                results.append(answer(e, INVALID_REQUEST, str(exc)))
                continue
            changes.append((entity, ops))
            results.append(answer(e, 0, None))
        if changes and not request.validate_only:
            self.store.alter(changes)
            self.enforcer.refresh()
        return resp(entries=results)


def matches_components(entity: QuotaEntity, components: list[Any], strict: bool) -> bool:
    """DescribeClientQuotas filter: match types 0 exact name, 1 default, 2 any specified."""
    parts = {"user": entity.user, "client-id": entity.client_id, "ip": entity.ip}
    named = set()
    for c in components:
        part = parts.get(c.entity_type)
        if part is None:
            return False
        named.add(c.entity_type)
        # An ip is kept in its lookup form (`QuotaEntity.normalised`): `::ffff:10.0.0.7` finds 10.0.0.7.
        match = (ip_lookup_key(c.match) or c.match) if c.entity_type == "ip" and c.match is not None else c.match
        if c.match_type == 0 and not (part.kind is Part.NAME and part.name == match):
            return False
        if c.match_type == 1 and part.kind is not Part.DEFAULT:
            return False
        if c.match_type == 2 and part.kind is Part.NONE:
            return False
    if strict:
        return all(p.kind is Part.NONE or t in named for t, p in parts.items())
    return True


class DelegationTokenApis:
    """KIP-48 over the Kafka protocol, backed by the credential service. kgov keeps only a lookup key
    of each token's HMAC, so DescribeDelegationToken answers an empty HMAC (creation returns it once)."""

    def __init__(self, authorizer: Authorizer, credentials: Any) -> None:
        self.authorizer = authorizer
        self.credentials = credentials

    @staticmethod
    def _principal(kind: str | None, name: str | None) -> Any:
        from authz.model import Principal

        return None if kind is None or name is None else Principal(kind, name)

    def _error(self, exc: Exception) -> tuple[int, str]:
        return int(getattr(exc, "code", INVALID_REQUEST)), str(exc)

    @staticmethod
    def _allowed(ctx: RequestContext) -> bool:
        """Kafka's `KafkaApis.allowTokenRequests`, for all four token APIs: not over a session that logged
        in with a delegation token, not over PLAINTEXT, not over SSL without a client certificate (the
        anonymous principal). Anyone reaching such a listener would otherwise manage tokens of its
        principal (on PLAINTEXT, User:ANONYMOUS: everyone's)."""
        protocol = ctx.security_protocol
        return not (ctx.token_authenticated or protocol == "PLAINTEXT"
                    or (protocol == "SSL" and ctx.principal == ANONYMOUS))

    def create(self, ctx: RequestContext, version: int, request: Any) -> Any:
        from authz.model import Principal
        from sasl.delegation import DelegationTokenError

        resp = SPECS[38].response
        requester = ctx.principal
        owner = self._principal(request.owner_principal_type, request.owner_principal_name) if version >= 3 else None
        empty = {"principal_type": "", "principal_name": "", "token_requester_principal_type": "",
                 "token_requester_principal_name": "", "issue_timestamp_ms": -1, "expiry_timestamp_ms": -1,
                 "max_timestamp_ms": -1, "token_id": "", "hmac": b""}
        if not self._allowed(ctx):
            return resp(error_code=DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, **empty)
        if owner is not None and owner != requester:
            action = Action(ResourceType.USER, str(owner), Operation.CREATE_TOKENS)
            if not self.authorizer.authorize(ctx, [action])[0].allowed:
                return resp(error_code=65, **empty)  # DELEGATION_TOKEN_AUTHORIZATION_FAILED
        renewers = [Principal(r.principal_type, r.principal_name) for r in request.renewers]
        try:
            created = self.credentials.create_token(
                requester, renewers=renewers, max_lifetime_ms=request.max_lifetime_ms, owner=owner,
                token_authenticated=ctx.token_authenticated, client_address=ctx.client_address)
        except DelegationTokenError as exc:
            return resp(error_code=int(exc.code), **empty)
        info = created.info
        return resp(error_code=0, principal_type=info.owner.type, principal_name=info.owner.name,
                    token_requester_principal_type=info.requester.type,
                    token_requester_principal_name=info.requester.name, issue_timestamp_ms=info.issue_ms,
                    expiry_timestamp_ms=info.expiry_ms, max_timestamp_ms=info.max_ms, token_id=info.token_id,
                    hmac=created.hmac)

    def _by_hmac(self, key: int, ctx: RequestContext, request: Any, period: int, renew: bool) -> Any:
        import base64

        from sasl.delegation import DelegationTokenError

        resp = SPECS[key].response
        if not self._allowed(ctx):
            return resp(error_code=DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, expiry_timestamp_ms=-1)
        hmac_b64 = base64.b64encode(bytes(request.hmac)).decode()
        try:
            if renew:
                expiry = self.credentials.renew_token(ctx.principal, hmac_b64, period,
                                                      token_authenticated=ctx.token_authenticated,
                                                      client_address=ctx.client_address).expiry_ms
            else:
                expiry = self.credentials.expire_token(ctx.principal, hmac_b64, period,
                                                       token_authenticated=ctx.token_authenticated,
                                                       client_address=ctx.client_address)
        except DelegationTokenError as exc:
            return resp(error_code=int(exc.code), expiry_timestamp_ms=-1)
        return resp(error_code=0, expiry_timestamp_ms=expiry)

    def renew(self, ctx: RequestContext, version: int, request: Any) -> Any:
        return self._by_hmac(39, ctx, request, request.renew_period_ms, True)

    def expire(self, ctx: RequestContext, version: int, request: Any) -> Any:
        return self._by_hmac(40, ctx, request, request.expiry_time_period_ms, False)

    def describe(self, ctx: RequestContext, version: int, request: Any) -> Any:
        from sasl.delegation import DelegationTokenError

        resp = SPECS[41].response
        token_cls = resp.fields["tokens"].data_class
        renewer_cls = token_cls.fields["renewers"].data_class
        owners = None if request.owners is None else [
            self._principal(o.principal_type, o.principal_name) for o in request.owners]

        def may_describe(info: Any) -> bool:
            actions = [
                Action(ResourceType.DELEGATION_TOKEN, info.token_id, Operation.DESCRIBE, log_if_allowed=False,
                       log_if_denied=False),
                Action(ResourceType.USER, str(info.owner), Operation.DESCRIBE_TOKENS, log_if_allowed=False,
                       log_if_denied=False),
            ]
            return any(d.allowed for d in self.authorizer.authorize(ctx, actions))

        if not self._allowed(ctx):
            return resp(error_code=DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, tokens=[])
        try:
            tokens = self.credentials.describe_tokens(ctx.principal, owners=owners, may_describe=may_describe,
                                                      token_authenticated=ctx.token_authenticated)
        except DelegationTokenError as exc:
            return resp(error_code=int(exc.code), tokens=[])
        return resp(error_code=0, tokens=[
            token_cls(principal_type=t.owner.type, principal_name=t.owner.name,
                      token_requester_principal_type=t.requester.type,
                      token_requester_principal_name=t.requester.name, issue_timestamp=t.issue_ms,
                      expiry_timestamp=t.expiry_ms, max_timestamp=t.max_ms, token_id=t.token_id, hmac=b"",
                      renewers=[renewer_cls(principal_type=r.type, principal_name=r.name) for r in t.renewers])
            for t in tokens])


def admin_handlers(authorizer: Any, credentials: Any, quota_store: QuotaStore | None,
                   quotas: QuotaEnforcer | None) -> dict[int, Any]:
    acl = AclApis(authorizer)
    handlers: dict[int, Any] = {29: acl.describe, 30: acl.create, 31: acl.delete}
    if credentials is not None:
        scram = ScramApis(authorizer, credentials)
        handlers.update({50: scram.describe, 51: scram.alter})
        tokens = DelegationTokenApis(authorizer, credentials)
        handlers.update({38: tokens.create, 39: tokens.renew, 40: tokens.expire, 41: tokens.describe})
    if quota_store is not None and quotas is not None:
        q = QuotaApis(authorizer, quota_store, quotas)
        handlers.update({48: q.describe, 49: q.alter})
    return handlers
