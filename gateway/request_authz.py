"""Kafka's per-API authorization rules, applied to decoded requests (pure: no I/O, no sockets).

For each API the gateway forwards, `plan_request` asks the authorizer (through `Checker`) about every
resource the request names, in one batch, and returns a `Plan`: what to forward (the request, trimmed
of denied resources when some were refused), what to answer locally (when nothing may be forwarded),
and a patch that adds the denied resources back into the broker's response with Kafka's error codes.
Allowed resources of a partly denied request go through, as on a broker (KafkaApis). APIs missing
from `PLANNERS` are refused by the caller (fail closed).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from authz.model import (
    CLUSTER_RESOURCE_NAME,
    SUPPORTED_OPERATIONS,
    Action,
    Operation,
    Principal,
    ResourceType,
)
from gateway.fetch_session import SESSIONS_SINCE, make_sessionless
from gateway.topic_ids import BY_ID_SINCE, has_id

# Kafka's `KafkaPrincipal.ANONYMOUS`: the principal of a connection that did not authenticate.
ANONYMOUS: Final = Principal("User", "ANONYMOUS")

TOPIC_AUTHORIZATION_FAILED: Final = 29
GROUP_AUTHORIZATION_FAILED: Final = 30
CLUSTER_AUTHORIZATION_FAILED: Final = 31
INVALID_REQUEST: Final = 42
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Final = 53
OPERATION_NOT_ATTEMPTED: Final = 55

UNKNOWN_TOPIC_ID: Final = 100

Checker = Callable[[list[Action]], list[bool]]
ByResourceType = Callable[[Operation, ResourceType], bool]
TopicName = Callable[[uuid.UUID | None], str | None]


@dataclass(slots=True)
class Plan:
    """`forward` is the request to send upstream (`rewritten` when it must be re-encoded); when it is
    None, `local` is the whole response. `patches` run on the decoded upstream response.
    `sessionless`: a consumer Fetch v7+; forwarded as the original bytes, those get the session fields
    of `gateway.fetch_session.sessionless_frame` (the decoded `forward` already has them)."""

    forward: Any = None
    rewritten: bool = False
    sessionless: bool = False
    local: Any = None
    patches: list[Callable[[Any], None]] = field(default_factory=list)


def _new(container: Any, field_name: str, **values: Any) -> Any:
    """A nested struct of `container`'s array field `field_name`, other fields at schema defaults."""
    return container.fields[field_name].data_class(**values)


def _cluster(op: Operation, *, log_if_denied: bool = True) -> Action:
    return Action(ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, op, log_if_denied=log_if_denied)


@dataclass(frozen=True, slots=True)
class TopicShape:
    """Where a request lists topics (and partitions) and where its response answers them."""

    req_topics: str
    req_name: str
    req_partitions: str | None  # None: the request names topics only
    req_index: str | None  # None: partitions are plain ints
    resp_topics: str
    resp_name: str
    resp_partitions: str | None
    resp_index: str
    resp_error: str = "error_code"
    extra: tuple[tuple[str, Any], ...] = ()  # Kafka's values for a denied partition (offsets -1)


def _partition_ids(topic: Any, shape: TopicShape) -> list[int]:
    if shape.req_partitions is None:
        return []
    parts = getattr(topic, shape.req_partitions) or []
    if shape.req_index is None:
        return [int(p) for p in parts]
    return [int(getattr(p, shape.req_index)) for p in parts]


def _denied_entry(resp_cls: Any, shape: TopicShape, name: str, partitions: list[int], code: int) -> Any:
    if shape.resp_partitions is None:
        return _new(resp_cls, shape.resp_topics, **{shape.resp_name: name, shape.resp_error: code})
    topic_cls = resp_cls.fields[shape.resp_topics].data_class
    parts = [
        _new(topic_cls, shape.resp_partitions, **{shape.resp_index: p, shape.resp_error: code}, **dict(shape.extra))
        for p in partitions
    ]
    return topic_cls(**{shape.resp_name: name, shape.resp_partitions: parts})


def _split_topics(
    request: Any,
    resp_cls: Any,
    shape: TopicShape,
    allowed: Callable[[str], bool],
    denied_code: Callable[[str], int],
) -> Plan:
    """Keeps allowed topics in the request; denied ones are answered with their code."""
    kept: list[Any] = []
    entries: list[Any] = []
    for topic in getattr(request, shape.req_topics) or []:
        name = getattr(topic, shape.req_name)
        if name is not None and allowed(name):
            kept.append(topic)
        else:
            entries.append(_denied_entry(resp_cls, shape, name or "", _partition_ids(topic, shape),
                                         denied_code(name or "")))
    return _trimmed(request, shape.req_topics, kept, resp_cls, shape.resp_topics, entries)


def _trimmed(request: Any, req_field: str, kept: list[Any], resp_cls: Any, resp_field: str,
             entries: list[Any]) -> Plan:
    """Forwards `request` with only `kept` in `req_field` and adds the denied `entries` to the
    answer's `resp_field`; with nothing kept, the entries are the whole (local) answer."""
    if not entries:
        return Plan(forward=request)
    if not kept:
        return Plan(local=resp_cls(**{resp_field: entries}))
    setattr(request, req_field, kept)

    def add_denied(response: Any) -> None:
        getattr(response, resp_field).extend(entries)

    return Plan(forward=request, rewritten=True, patches=[add_denied])


class RequestAuthorizer:
    """Turns one decoded request into a `Plan` with the authorizer's answers."""

    def __init__(self, check: Checker, by_resource_type: ByResourceType,
                 topic_name: TopicName = lambda _id: None) -> None:
        self._check = check
        self._by_type = by_resource_type
        # The name a topic id (KIP-516) stands for upstream, None when unknown (gateway.topic_ids).
        self.topic_name = topic_name

    def allowed_names(
        self, resource_type: ResourceType, op: Operation, names: dict[str, int], *, log_if_denied: bool = True
    ) -> set[str]:
        """The names (with their reference counts) the principal may `op`; one authorizer call."""
        if not names:
            return set()
        ordered = list(names)
        actions = [
            Action(resource_type, n, op, resource_ref_count=names[n], log_if_denied=log_if_denied) for n in ordered
        ]
        return {n for n, ok in zip(ordered, self._check(actions), strict=True) if ok}

    def allowed(self, resource_type: ResourceType, name: str, op: Operation, *, log_if_denied: bool = True) -> bool:
        action = Action(resource_type, name, op, log_if_denied=log_if_denied)
        return self._check([action])[0]

    def cluster(self, op: Operation, *, log_if_denied: bool = True) -> bool:
        return self._check([_cluster(op, log_if_denied=log_if_denied)])[0]

    def authorized_operations(self, resource_type: ResourceType, name: str) -> set[int]:
        """KIP-430: the operations the principal may perform on one resource (a filtering check:
        nothing is logged). ALL is never reported, as in Kafka's AuthorizerUtils."""
        ops = sorted(SUPPORTED_OPERATIONS[resource_type])
        actions = [Action(resource_type, name, op, log_if_allowed=False, log_if_denied=False) for op in ops]
        return {int(op) for op, ok in zip(ops, self._check(actions), strict=True) if ok}

    def cluster_authorized_operations(self) -> set[int]:
        """KIP-430 for the cluster (Metadata v8-v10, DescribeCluster): none unless the principal may
        DESCRIBE it (a real access, logged), then all it may do (KafkaApis, AuthHelper)."""
        if not self.cluster(Operation.DESCRIBE):
            return set()
        return self.authorized_operations(ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME)

    def topics(
        self, request: Any, shape: TopicShape, op: Operation, *, log_if_denied: bool = True
    ) -> Callable[[str], bool]:
        counts: dict[str, int] = {}
        for topic in getattr(request, shape.req_topics) or []:
            name = getattr(topic, shape.req_name)
            if name is not None:
                counts[name] = counts.get(name, 0) + max(1, len(_partition_ids(topic, shape)))
        ok = self.allowed_names(ResourceType.TOPIC, op, counts, log_if_denied=log_if_denied)
        return ok.__contains__


Planner = Callable[[RequestAuthorizer, int, Any, Any], Plan]


def _topic_planner(shape: TopicShape, op: Operation) -> Planner:
    def plan(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
        ok = az.topics(request, shape, op)
        return _split_topics(request, resp_cls, shape, ok, lambda _n: TOPIC_AUTHORIZATION_FAILED)

    return plan


PRODUCE = TopicShape(
    "topic_data", "name", "partition_data", "index", "responses", "name", "partition_responses", "index",
    extra=(("base_offset", -1),),
)
FETCH = TopicShape("topics", "topic", "partitions", "partition", "responses", "topic", "partitions", "partition_index",
                   extra=(("high_watermark", -1), ("last_stable_offset", -1), ("log_start_offset", -1)))
LIST_OFFSETS = TopicShape("topics", "name", "partitions", "partition_index", "topics", "name", "partitions",
                          "partition_index", extra=(("offset", -1), ("timestamp", -1)))
OFFSET_COMMIT = TopicShape("topics", "name", "partitions", "partition_index", "topics", "name", "partitions",
                           "partition_index")
OFFSET_FETCH = TopicShape("topics", "name", "partition_indexes", None, "topics", "name", "partitions",
                          "partition_index", extra=(("committed_offset", -1),))
DELETE_RECORDS = TopicShape("topics", "name", "partitions", "partition_index", "topics", "name", "partitions",
                            "partition_index", extra=(("low_watermark", -1),))
LEADER_EPOCH = TopicShape("topics", "topic", "partitions", "partition", "topics", "topic", "partitions", "partition",
                          extra=(("end_offset", -1), ("leader_epoch", -1)))
ADD_PARTITIONS = TopicShape("v3_and_below_topics", "name", "partitions", None, "results_by_topic_v3_and_below",
                            "name", "results_by_partition", "partition_index", resp_error="partition_error_code")
OFFSET_DELETE = TopicShape("topics", "name", "partitions", "partition_index", "topics", "name", "partitions",
                           "partition_index")
DESCRIBE_PRODUCERS = TopicShape("topics", "name", "partition_indexes", None, "topics", "name", "partitions",
                                "partition_index")
CREATE_TOPICS = TopicShape("topics", "name", None, None, "topics", "name", None, "")
CREATE_PARTITIONS = TopicShape("topics", "name", None, None, "results", "name", None, "")
DESCRIBE_TOPIC_PARTITIONS = TopicShape("topics", "name", None, None, "topics", "name", None, "")


def _plan_produce(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
    txn = getattr(request, "transactional_id", None) if version >= 3 else None
    if txn is not None and not az.allowed(ResourceType.TRANSACTIONAL_ID, txn, Operation.WRITE):
        if version >= 13:
            return _split_by_id(az, request, resp_cls, PRODUCE, Operation.WRITE,
                                every=TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        return _split_topics(request, resp_cls, PRODUCE, lambda _n: False,
                             lambda _n: TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if version >= 13:
        return _split_by_id(az, request, resp_cls, PRODUCE, Operation.WRITE)
    ok = az.topics(request, PRODUCE, Operation.WRITE)
    return _split_topics(request, resp_cls, PRODUCE, ok, lambda _n: TOPIC_AUTHORIZATION_FAILED)


def _fetch_replica_id(version: int, request: Any) -> int:
    # KIP-903: from v15 the replica id moved into ReplicaState (the old field stays -1).
    if version >= 15:
        state = request.replica_state
        return -1 if state is None else int(state.replica_id)
    return int(request.replica_id)


def _plan_fetch(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
    if _fetch_replica_id(version, request) >= 0:  # a follower fetch: only brokers may do that
        if az.cluster(Operation.CLUSTER_ACTION):
            return Plan(forward=request)
        return Plan(local=resp_cls(error_code=CLUSTER_AUTHORIZATION_FAILED))
    if version >= 13:
        plan = _split_by_id(az, request, resp_cls, FETCH, Operation.READ)
    else:
        ok = az.topics(request, FETCH, Operation.READ)
        plan = _split_topics(request, resp_cls, FETCH, ok, lambda _n: TOPIC_AUTHORIZATION_FAILED)
    # Only the partitions listed here were authorized: no KIP-227 session may serve others upstream
    # (gateway.fetch_session). A local answer already carries session id 0 (the schema default).
    if plan.forward is not None and version >= SESSIONS_SINCE:
        plan.rewritten |= make_sessionless(version, plan.forward)
        plan.sessionless = True
    return plan


def _denied_by_id(resp_cls: Any, shape: TopicShape, topic_id: uuid.UUID | None, partitions: list[int],
                  code: int) -> Any:
    entry = _denied_entry(resp_cls, shape, "", partitions, code)
    entry.topic_id = topic_id
    return entry


def _split_by_id(az: RequestAuthorizer, request: Any, resp_cls: Any, shape: TopicShape, op: Operation,
                 *, every: int | None = None) -> Plan:
    """Fetch/Produce v13+ (KIP-516) in `KafkaApis.handleFetchRequest`'s (and Kafka 4.1's
    `handleProduceRequest`'s) order: an id with no name is UNKNOWN_TOPIC_ID before any authorization
    (nothing is checked or logged for it), then `op` on the names of the others (one batch,
    partitions as reference counts), denied ones TOPIC_AUTHORIZATION_FAILED. A random id thus learns
    nothing a guessed one would not. `every`: the code of every topic (a denied transactional id),
    nothing asked."""
    names: dict[str, int] = {}
    resolved: list[tuple[Any, str | None]] = []
    for topic in getattr(request, shape.req_topics) or []:
        name = az.topic_name(topic.topic_id)
        resolved.append((topic, name))
        if name is not None:
            names[name] = names.get(name, 0) + max(1, len(_partition_ids(topic, shape)))
    ok = set() if every is not None else az.allowed_names(ResourceType.TOPIC, op, names)
    kept: list[Any] = []
    entries: list[Any] = []
    for topic, name in resolved:
        if name is not None and name in ok:
            kept.append(topic)
            continue
        code = every if every is not None else UNKNOWN_TOPIC_ID if name is None else TOPIC_AUTHORIZATION_FAILED
        entries.append(_denied_by_id(resp_cls, shape, topic.topic_id, _partition_ids(topic, shape), code))
    return _trimmed(request, shape.req_topics, kept, resp_cls, shape.resp_topics, entries)


def _plan_metadata(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
    plan = _plan_metadata_topics(az, version, request, resp_cls)
    want_topics = version >= 8 and request.include_topic_authorized_operations
    want_cluster = 8 <= version <= 10 and request.include_cluster_authorized_operations
    if plan.forward is not None and (want_topics or want_cluster):
        # The upstream answers for the gateway's own identity: replace with this principal's rights.
        def authorized_operations(response: Any) -> None:
            if want_topics:
                for t in response.topics:
                    if t.error_code == 0 and t.name is not None:
                        t.authorized_operations = az.authorized_operations(ResourceType.TOPIC, t.name)
            if want_cluster:
                response.authorized_operations = az.cluster_authorized_operations()

        plan.patches.append(authorized_operations)
    return plan


def _plan_metadata_topics(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
    plan = Plan(forward=request)
    if request.topics is None or (version == 0 and not request.topics):
        # All topics: the response lists only those the principal may describe (no denial logged).
        def filter_topics(response: Any) -> None:
            names = {t.name: 1 for t in response.topics if t.name is not None}
            ok = az.allowed_names(ResourceType.TOPIC, Operation.DESCRIBE, names, log_if_denied=False)
            response.topics = [t for t in response.topics if t.name in ok]

        plan.patches.append(filter_topics)
        return plan
    # v12+ may name a topic by id (KIP-516): it is described by the name the upstream gives the id; an id
    # with no name is UNKNOWN_TOPIC_ID before any check, and a denied one is answered by id
    # (KafkaApis.handleTopicMetadataRequest: "Topic IDs are not considered sensitive information").
    # An entry with both a name and an id is an id: Kafka describes the ids of such a request and
    # ignores its names, so checking the name would let `{name: <allowed>, id: <any topic's id>}`
    # describe the other topic. It is forwarded by id alone, whatever the upstream prefers (Tansu
    # answers the name).
    def by_id(t: Any) -> bool:
        return t.name is None or (version >= BY_ID_SINCE[3] and has_id(t.topic_id))

    resolved = [(t, az.topic_name(t.topic_id) if by_id(t) else t.name) for t in request.topics]
    names = {n: 1 for _t, n in resolved if n is not None}
    ok = az.allowed_names(ResourceType.TOPIC, Operation.DESCRIBE, names)
    kept = [t for t, n in resolved if n in ok]
    denied = [(t, n) for t, n in resolved if n not in ok]
    by_name = {t.name for t in kept if not by_id(t)}  # only names can be auto-created
    for t in kept:
        if by_id(t) and t.name is not None:
            t.name = None
            plan.rewritten = True
    if version >= 4 and request.allow_auto_topic_creation and by_name and not az.cluster(
        Operation.CREATE, log_if_denied=False
    ):
        creatable = az.allowed_names(ResourceType.TOPIC, Operation.CREATE, dict.fromkeys(by_name, 1))
        if creatable != by_name:
            # Kafka creates only what the principal may create; the gateway cannot split one
            # request's auto-creation, so it asks the broker for none when any is not allowed.
            request.allow_auto_topic_creation = False
            plan.rewritten = True
    entries = [
        _new(resp_cls, "topics", name=None, topic_id=t.topic_id, partitions=[],
             error_code=UNKNOWN_TOPIC_ID if n is None else TOPIC_AUTHORIZATION_FAILED)
        if by_id(t) else
        _new(resp_cls, "topics", name=t.name, error_code=TOPIC_AUTHORIZATION_FAILED, partitions=[])
        for t, n in denied
    ]
    kept_names = {n for _t, n in resolved if n in ok}
    kept_ids = {t.topic_id for t in kept if by_id(t)}

    def only_asked(response: Any) -> None:
        # Only what was asked and allowed: some brokers (Tansu) answer an empty list with every topic,
        # and an id the upstream no longer knows comes back nameless (UNKNOWN_TOPIC_ID).
        response.topics = [t for t in response.topics
                           if t.name in kept_names or (t.name is None and t.topic_id in kept_ids)]
        response.topics.extend(entries)

    plan.patches.append(only_asked)
    if not denied:
        return plan
    request.topics = kept
    plan.rewritten = True
    if not kept:
        # An empty topic list means "all topics" before v1 and "no topics" after: ask for none.
        request.topics = []
        if version == 0:
            plan.forward = None
            plan.local = resp_cls(brokers=[], topics=entries)
            plan.patches = []
    return plan


def _group_then(op: Operation, inner: Planner | None, *, field_name: str = "group_id") -> Planner:
    """APIs checked on their group first; a denied group fails the whole request with 30."""

    def plan(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
        group = getattr(request, field_name)
        if not az.allowed(ResourceType.GROUP, group, op):
            return Plan(local=_whole_error(request, resp_cls, GROUP_AUTHORIZATION_FAILED))
        if inner is None:
            return Plan(forward=request)
        return inner(az, version, request, resp_cls)

    return plan


def _whole_error(request: Any, resp_cls: Any, code: int) -> Any:
    """A response failing every part of `request` with `code` (top-level error where there is one)."""
    if "error_code" in resp_cls.fields:
        return resp_cls(error_code=code)
    for shape in (OFFSET_COMMIT, TXN_SHAPE, OFFSET_FETCH):
        if shape.req_topics in type(request).fields and shape.resp_topics in resp_cls.fields:
            topics = getattr(request, shape.req_topics) or []
            entries = [
                _denied_entry(resp_cls, shape, t.name, _partition_ids(t, shape), code) for t in topics
            ]
            return resp_cls(**{shape.resp_topics: entries})
    return resp_cls()


TXN_SHAPE = OFFSET_COMMIT


def _plan_offset_fetch(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
    if not az.allowed(ResourceType.GROUP, request.group_id, Operation.DESCRIBE):
        if version >= 2:
            return Plan(local=resp_cls(error_code=GROUP_AUTHORIZATION_FAILED, topics=[]))
        return Plan(local=_whole_error(request, resp_cls, GROUP_AUTHORIZATION_FAILED))
    if request.topics is None:  # all committed offsets: filter the answer
        plan = Plan(forward=request)

        def filter_topics(response: Any) -> None:
            names = {t.name: 1 for t in response.topics}
            ok = az.allowed_names(ResourceType.TOPIC, Operation.DESCRIBE, names, log_if_denied=False)
            response.topics = [t for t in response.topics if t.name in ok]

        plan.patches.append(filter_topics)
        return plan
    ok = az.topics(request, OFFSET_FETCH, Operation.DESCRIBE)
    return _split_topics(request, resp_cls, OFFSET_FETCH, ok, lambda _n: TOPIC_AUTHORIZATION_FAILED)


def _plan_find_coordinator(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
    key_type = request.key_type if version >= 1 else 0
    if key_type == 0:
        rtype, code = ResourceType.GROUP, GROUP_AUTHORIZATION_FAILED
    elif key_type == 1:
        rtype, code = ResourceType.TRANSACTIONAL_ID, TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    else:
        return Plan(local=_find_coordinator_error(version, resp_cls, [], 42))  # INVALID_REQUEST
    if version < 4:
        if az.allowed(rtype, request.key, Operation.DESCRIBE):
            return Plan(forward=request)
        return Plan(local=resp_cls(error_code=code, node_id=-1, host="", port=-1))
    keys = list(request.coordinator_keys)
    ok = az.allowed_names(rtype, Operation.DESCRIBE, dict.fromkeys(keys, 1))
    entries = [_new(resp_cls, "coordinators", key=k, node_id=-1, host="", port=-1, error_code=code)
               for k in keys if k not in ok]
    return _trimmed(request, "coordinator_keys", [k for k in keys if k in ok], resp_cls, "coordinators", entries)


def _find_coordinator_error(version: int, resp_cls: Any, keys: list[str], code: int) -> Any:
    if version < 4:
        return resp_cls(error_code=code, node_id=-1, host="", port=-1)
    return resp_cls(coordinators=[_new(resp_cls, "coordinators", key=k, error_code=code) for k in keys])


@dataclass(frozen=True, slots=True)
class NameListShape:
    """A request naming resources in a plain string array, answered per name in a response array."""

    resource_type: ResourceType
    operation: Operation
    req_field: str
    resp_field: str
    resp_name: str
    error_code: int
    extra: tuple[tuple[str, Any], ...] = ()


def _name_list_planner(shape: NameListShape) -> Planner:
    def plan(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
        names = list(getattr(request, shape.req_field))
        ok = az.allowed_names(shape.resource_type, shape.operation, dict.fromkeys(names, 1))
        entries = [
            _new(resp_cls, shape.resp_field, **{shape.resp_name: n, "error_code": shape.error_code},
                 **dict(shape.extra))
            for n in names if n not in ok
        ]
        kept = [n for n in names if n in ok]
        return _trimmed(request, shape.req_field, kept, resp_cls, shape.resp_field, entries)

    return plan



def _describe_groups_planner() -> Planner:
    inner = _name_list_planner(NameListShape(
        ResourceType.GROUP, Operation.DESCRIBE, "groups", "groups", "group_id", GROUP_AUTHORIZATION_FAILED,
        (("group_state", ""), ("protocol_type", ""), ("protocol_data", ""))))

    def plan(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
        result = inner(az, version, request, resp_cls)
        if result.forward is not None and version >= 3 and request.include_authorized_operations:
            def authorized_operations(response: Any) -> None:
                for g in response.groups:
                    if g.error_code == 0:
                        g.authorized_operations = az.authorized_operations(ResourceType.GROUP, g.group_id)

            result.patches.append(authorized_operations)
        return result

    return plan


def _plan_list_groups(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
    if az.cluster(Operation.DESCRIBE, log_if_denied=False):
        return Plan(forward=request)

    def filter_groups(response: Any) -> None:
        names = {g.group_id: 1 for g in response.groups}
        ok = az.allowed_names(ResourceType.GROUP, Operation.DESCRIBE, names, log_if_denied=False)
        response.groups = [g for g in response.groups if g.group_id in ok]

    return Plan(forward=request, patches=[filter_groups])


def _plan_create_topics(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
    if az.cluster(Operation.CREATE, log_if_denied=False):
        plan = Plan(forward=request)
    else:
        ok = az.topics(request, CREATE_TOPICS, Operation.CREATE)
        plan = _split_topics(request, resp_cls, CREATE_TOPICS, ok, lambda _n: TOPIC_AUTHORIZATION_FAILED)
    if plan.forward is not None and version >= 5:
        plan.patches.append(lambda response: _hide_undescribable_topics(az, response))
    return plan


def _hide_undescribable_topics(az: RequestAuthorizer, response: Any) -> None:
    """KIP-525 (CreateTopics v5+) as Kafka's controller answers (ControllerApis.createTopics,
    ReplicationControlManager.createTopic): a topic created for a principal that may not DESCRIBE_CONFIGS
    it is answered with its id but not its partitions, replication factor or configs, and
    topic_config_error_code 29. The upstream answered for the gateway's own identity."""
    created = {t.name: 1 for t in response.topics if t.error_code == 0 and t.name is not None}
    describable = az.allowed_names(ResourceType.TOPIC, Operation.DESCRIBE_CONFIGS, created, log_if_denied=False)
    for t in response.topics:
        if t.name in created and t.name not in describable:
            t.topic_config_error_code = TOPIC_AUTHORIZATION_FAILED
            t.num_partitions = -1
            t.replication_factor = -1
            t.configs = []


def _plan_init_producer_id(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
    txn = request.transactional_id
    if txn is not None:
        if az.allowed(ResourceType.TRANSACTIONAL_ID, txn, Operation.WRITE):
            return Plan(forward=request)
        return Plan(local=resp_cls(error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1,
                                   producer_epoch=-1))
    # KafkaApis: IdempotentWrite on the cluster, or (KIP-679) Write on any topic.
    if az.cluster(Operation.IDEMPOTENT_WRITE, log_if_denied=False) or az._by_type(
        Operation.WRITE, ResourceType.TOPIC
    ):
        return Plan(forward=request)
    return Plan(local=resp_cls(error_code=CLUSTER_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1))


def _txn_then(inner: Planner | None) -> Planner:
    def plan(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
        txn = request.transactional_id if hasattr(request, "transactional_id") else (
            request.v3_and_below_transactional_id)
        if not az.allowed(ResourceType.TRANSACTIONAL_ID, txn, Operation.WRITE):
            return Plan(local=_txn_error(request, resp_cls))
        if inner is None:
            return Plan(forward=request)
        return inner(az, version, request, resp_cls)

    return plan


def _txn_error(request: Any, resp_cls: Any) -> Any:
    code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if "results_by_topic_v3_and_below" in resp_cls.fields:
        entries = [_denied_entry(resp_cls, ADD_PARTITIONS, t.name, [int(p) for p in t.partitions], code)
                   for t in request.v3_and_below_topics]
        return resp_cls(results_by_topic_v3_and_below=entries)
    return _whole_error(request, resp_cls, code)


def _plan_add_partitions_to_txn(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
    """AddPartitionsToTxn v0-v3 (the gateway stops there) as `KafkaApis.handleAddPartitionsToTxnRequest`:
    WRITE on every topic, and unlike most APIs not partly: when any topic is denied nothing is added to
    the transaction, the denied partitions are answered 29 and the others OPERATION_NOT_ATTEMPTED."""
    ok = az.topics(request, ADD_PARTITIONS, Operation.WRITE)
    topics = request.v3_and_below_topics or []
    if all(ok(t.name) for t in topics):
        return Plan(forward=request)
    entries = [
        _denied_entry(resp_cls, ADD_PARTITIONS, t.name, [int(p) for p in t.partitions],
                      OPERATION_NOT_ATTEMPTED if ok(t.name) else TOPIC_AUTHORIZATION_FAILED)
        for t in topics
    ]
    return Plan(local=resp_cls(results_by_topic_v3_and_below=entries))


def _plan_txn_offset_commit(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
    if not az.allowed(ResourceType.GROUP, request.group_id, Operation.READ):
        return Plan(local=_whole_error(request, resp_cls, GROUP_AUTHORIZATION_FAILED))
    ok = az.topics(request, OFFSET_COMMIT, Operation.READ)
    return _split_topics(request, resp_cls, OFFSET_COMMIT, ok, lambda _n: TOPIC_AUTHORIZATION_FAILED)


# ConfigResource.Type ids, with the resource each is authorized on and the code a denial is answered with
# (KafkaApis.handleDescribeConfigsRequest / handleIncrementalAlterConfigsRequest, ControllerApis'
# authorizeAlterResource): the cluster for broker, broker-logger and client-metrics configs, the topic
# or the group (KIP-848 group configs) named otherwise.
_CONFIG_RESOURCES: Final[dict[int, tuple[ResourceType, int]]] = {
    2: (ResourceType.TOPIC, TOPIC_AUTHORIZATION_FAILED),
    4: (ResourceType.CLUSTER, CLUSTER_AUTHORIZATION_FAILED),
    8: (ResourceType.CLUSTER, CLUSTER_AUTHORIZATION_FAILED),
    16: (ResourceType.CLUSTER, CLUSTER_AUTHORIZATION_FAILED),
    32: (ResourceType.GROUP, GROUP_AUTHORIZATION_FAILED),
}


def _configs_planner(op: Operation, resp_field: str) -> Planner:
    def plan(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
        def named(rtype: ResourceType) -> dict[str, int]:
            return {r.resource_name: 1 for r in request.resources
                    if _CONFIG_RESOURCES.get(r.resource_type, (None, 0))[0] is rtype}

        ok_topics = az.allowed_names(ResourceType.TOPIC, op, named(ResourceType.TOPIC))
        ok_groups = az.allowed_names(ResourceType.GROUP, op, named(ResourceType.GROUP))
        ok_cluster = bool(named(ResourceType.CLUSTER)) and az.cluster(op)
        kept, entries = [], []
        for r in request.resources:
            rtype, code = _CONFIG_RESOURCES.get(r.resource_type, (None, CLUSTER_AUTHORIZATION_FAILED))
            if rtype is ResourceType.TOPIC:
                allowed = r.resource_name in ok_topics
            elif rtype is ResourceType.GROUP:
                allowed = r.resource_name in ok_groups
            else:  # an unknown type is refused (fail closed), as a broker config would be without the ACL
                allowed = rtype is ResourceType.CLUSTER and ok_cluster
            if allowed:
                kept.append(r)
            else:
                entries.append(_new(resp_cls, resp_field, error_code=code, resource_type=r.resource_type,
                                    resource_name=r.resource_name, error_message=None))
        if not entries:
            return Plan(forward=request)
        if not kept:
            return Plan(local=resp_cls(**{resp_field: entries}))
        request.resources = kept

        def add_denied(response: Any) -> None:
            getattr(response, resp_field).extend(entries)

        return Plan(forward=request, rewritten=True, patches=[add_denied])

    return plan


def _plan_describe_cluster(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
    """Kafka authorizes no part of DescribeCluster (AuthHelper.computeDescribeClusterResponse): like
    Metadata's broker list, any authenticated client may read it. Only the KIP-430 operations it
    reports are the principal's, checked as Kafka does."""
    if not request.include_cluster_authorized_operations:
        return Plan(forward=request)

    def authorized_operations(response: Any) -> None:
        response.authorized_operations = az.cluster_authorized_operations()

    return Plan(forward=request, patches=[authorized_operations])


def _plan_leader_epoch(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
    if az.cluster(Operation.CLUSTER_ACTION, log_if_denied=False):
        return Plan(forward=request)
    return _topic_planner(LEADER_EPOCH, Operation.DESCRIBE)(az, version, request, resp_cls)


def _plan_describe_log_dirs(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
    if az.cluster(Operation.DESCRIBE):
        return Plan(forward=request)
    return Plan(local=resp_cls(results=[], error_code=CLUSTER_AUTHORIZATION_FAILED))


def _plan_list_transactions(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
    def filter_states(response: Any) -> None:
        names = {s.transactional_id: 1 for s in response.transaction_states}
        ok = az.allowed_names(ResourceType.TRANSACTIONAL_ID, Operation.DESCRIBE, names, log_if_denied=False)
        response.transaction_states = [s for s in response.transaction_states if s.transactional_id in ok]

    return Plan(forward=request, patches=[filter_states])


def _describe_topic_partitions(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
    plan = _topic_planner(DESCRIBE_TOPIC_PARTITIONS, Operation.DESCRIBE)(az, version, request, resp_cls)
    if plan.forward is not None:
        def authorized_operations(response: Any) -> None:
            for t in response.topics:
                if t.error_code == 0 and t.name is not None:
                    t.topic_authorized_operations = az.authorized_operations(ResourceType.TOPIC, t.name)

        plan.patches.append(authorized_operations)
    return plan


# The gateway's answer to a KIP-848 regular-expression subscription (below).
REGEX_SUBSCRIPTION_REFUSED: Final = (
    "Regular-expression subscriptions (SubscribedTopicRegex) are not supported through the kgov gateway; "
    "subscribe to topic names")


def _plan_consumer_group_heartbeat(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
    """KIP-848's ConsumerGroupHeartbeat as `KafkaApis.handleConsumerGroupHeartbeat` (Kafka 4.x): READ on
    the group, else GROUP_AUTHORIZATION_FAILED; then, when the heartbeat names its subscription
    (`SubscribedTopicNames` is null when unchanged), DESCRIBE on every name in one batch (Kafka's
    `filterByAuthorized`, denials logged), and a single denied name (or one sent twice: Kafka compares
    counts) fails the whole heartbeat with TOPIC_AUTHORIZATION_FAILED (no error message, as Kafka). Both
    answers carry no assignment.

    Departure from Kafka: a regular-expression subscription (`SubscribedTopicRegex`, v1+, non-empty) is
    refused with INVALID_REQUEST and `REGEX_SUBSCRIPTION_REFUSED`, after the checks Kafka makes. Kafka's
    coordinator resolves the expression against the topics the member's own principal may DESCRIBE
    (`GroupMetadataManager`'s regex resolution with the request context); behind the gateway the upstream
    would resolve it with the gateway's identity and could assign topics the user may not see. An empty
    expression is forwarded: Kafka treats it as none (it clears a regex subscription)."""
    if not az.allowed(ResourceType.GROUP, request.group_id, Operation.READ):
        return Plan(local=resp_cls(error_code=GROUP_AUTHORIZATION_FAILED))
    names = request.subscribed_topic_names
    if names:
        counts: dict[str, int] = {}
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        ok = az.allowed_names(ResourceType.TOPIC, Operation.DESCRIBE, counts)
        # Kafka's very test: the distinct allowed names against the names sent, so a name sent twice
        # fails too (`authorizedTopics.size < subscribedTopicNames.size`).
        if len(ok) < len(names):
            return Plan(local=resp_cls(error_code=TOPIC_AUTHORIZATION_FAILED))
    if version >= 1 and request.subscribed_topic_regex:
        return Plan(local=resp_cls(error_code=INVALID_REQUEST, error_message=REGEX_SUBSCRIPTION_REFUSED))
    return Plan(forward=request)


# Kafka's message for a described consumer group that names a topic the principal may not DESCRIBE.
UNDESCRIBABLE_TOPICS: Final = "The group has described topic(s) that the client is not authorized to describe."


def _plan_consumer_group_describe(az: RequestAuthorizer, version: int, request: Any, resp_cls: Any) -> Plan:
    """KIP-848's ConsumerGroupDescribe as `KafkaApis.handleConsumerGroupDescribe` (Kafka 4.x): DESCRIBE
    on each group; a denied group is answered GROUP_AUTHORIZATION_FAILED in place (first, as Kafka lists
    them before the coordinator's results) and never asked upstream. With IncludeAuthorizedOperations the
    described groups carry this principal's KIP-430 rights, not the gateway's. Then, as Kafka ("Clients
    are not allowed to see topics that are not authorized for Describe"), every topic named in a member's
    assignment or target assignment needs DESCRIBE (one batch, denials logged): a group naming any other
    is replaced by a row with only its id, TOPIC_AUTHORIZATION_FAILED, Kafka's message and no members.
    Subscribed topic names and regexes are not checked, as in Kafka."""
    groups = list(request.group_ids)
    ok = az.allowed_names(ResourceType.GROUP, Operation.DESCRIBE, dict.fromkeys(groups, 1))
    denied = [_new(resp_cls, "groups", group_id=g, error_code=GROUP_AUTHORIZATION_FAILED)
              for g in groups if g not in ok]
    kept = [g for g in groups if g in ok]
    if not kept:
        return Plan(local=resp_cls(groups=denied))
    request.group_ids = kept
    include_ops = bool(request.include_authorized_operations)

    def answer_for_principal(response: Any) -> None:
        if include_ops:
            for g in response.groups:
                if g.error_code == 0:
                    g.authorized_operations = _bits(az.authorized_operations(ResourceType.GROUP, g.group_id))
        response.groups[:0] = denied
        _hide_undescribable_assignments(az, response, resp_cls)

    return Plan(forward=request, rewritten=bool(denied), patches=[answer_for_principal])


def _bits(operations: set[int]) -> int:
    """KIP-430's bit field (bit n for AclOperation code n) as the signed int32 the schema carries."""
    value = sum(1 << op for op in operations)
    return value - (1 << 32) if value >= 1 << 31 else value


def _assigned_topics(group: Any) -> list[str]:
    names: list[str] = []
    for member in group.members or []:
        for assignment in (member.assignment, member.target_assignment):
            if assignment is not None:
                names.extend(tp.topic_name for tp in assignment.topic_partitions or [])
    return names


def _hide_undescribable_assignments(az: RequestAuthorizer, response: Any, resp_cls: Any) -> None:
    counts: dict[str, int] = {}
    for group in response.groups:
        for name in _assigned_topics(group):
            counts[name] = counts.get(name, 0) + 1
    if not counts:
        return
    ok = az.allowed_names(ResourceType.TOPIC, Operation.DESCRIBE, counts)
    response.groups = [
        g if all(n in ok for n in _assigned_topics(g)) else
        _new(resp_cls, "groups", group_id=g.group_id, error_code=TOPIC_AUTHORIZATION_FAILED,
             error_message=UNDESCRIBABLE_TOPICS, members=[])
        for g in response.groups
    ]


PLANNERS: Final[dict[int, Planner]] = {
    0: _plan_produce,
    1: _plan_fetch,
    2: _topic_planner(LIST_OFFSETS, Operation.DESCRIBE),
    3: _plan_metadata,
    8: _group_then(Operation.READ, _topic_planner(OFFSET_COMMIT, Operation.READ)),
    9: _plan_offset_fetch,
    10: _plan_find_coordinator,
    11: _group_then(Operation.READ, None),
    12: _group_then(Operation.READ, None),
    13: _group_then(Operation.READ, None),
    14: _group_then(Operation.READ, None),
    15: _describe_groups_planner(),
    16: _plan_list_groups,
    19: _plan_create_topics,
    20: _name_list_planner(NameListShape(ResourceType.TOPIC, Operation.DELETE, "topic_names", "responses", "name",
                                         TOPIC_AUTHORIZATION_FAILED)),
    21: _topic_planner(DELETE_RECORDS, Operation.DELETE),
    22: _plan_init_producer_id,
    23: _plan_leader_epoch,
    24: _txn_then(_plan_add_partitions_to_txn),
    25: _txn_then(_group_then(Operation.READ, None)),
    26: _txn_then(None),
    28: _txn_then(_plan_txn_offset_commit),
    32: _configs_planner(Operation.DESCRIBE_CONFIGS, "results"),
    33: _configs_planner(Operation.ALTER_CONFIGS, "responses"),
    35: _plan_describe_log_dirs,
    37: _topic_planner(CREATE_PARTITIONS, Operation.ALTER),
    42: _name_list_planner(NameListShape(ResourceType.GROUP, Operation.DELETE, "groups_names", "results",
                                         "group_id", GROUP_AUTHORIZATION_FAILED)),
    44: _configs_planner(Operation.ALTER_CONFIGS, "responses"),
    47: _group_then(Operation.DELETE, _topic_planner(OFFSET_DELETE, Operation.READ)),
    60: _plan_describe_cluster,
    61: _topic_planner(DESCRIBE_PRODUCERS, Operation.READ),
    65: _name_list_planner(NameListShape(ResourceType.TRANSACTIONAL_ID, Operation.DESCRIBE, "transactional_ids",
                                         "transaction_states", "transactional_id",
                                         TRANSACTIONAL_ID_AUTHORIZATION_FAILED, (("transaction_state", ""),))),
    66: _plan_list_transactions,
    68: _plan_consumer_group_heartbeat,
    69: _plan_consumer_group_describe,
    75: _describe_topic_partitions,
}


def plan_request(az: RequestAuthorizer, api_key: int, version: int, request: Any, resp_cls: Any) -> Plan:
    return PLANNERS[api_key](az, version, request, resp_cls)


METADATA = TopicShape("topics", "name", None, None, "topics", "name", None, "")

# Where each API that lists topics (and partitions) answers them one by one: an error that fails a
# whole request (Kafka's AbstractRequest.getErrorResponse) is repeated on every one it names.
_ERROR_SHAPES: Final[dict[int, TopicShape]] = {
    0: PRODUCE, 1: FETCH, 2: LIST_OFFSETS, 3: METADATA, 8: OFFSET_COMMIT, 9: OFFSET_FETCH, 19: CREATE_TOPICS,
    21: DELETE_RECORDS, 23: LEADER_EPOCH, 24: ADD_PARTITIONS, 28: TXN_SHAPE, 37: CREATE_PARTITIONS,
    47: OFFSET_DELETE, 61: DESCRIBE_PRODUCERS, 75: DESCRIBE_TOPIC_PARTITIONS,
}


def error_response(api_key: int, request: Any, resp_cls: Any, code: int) -> Any:
    """The response failing all of `request` with `code`: at the top level where the response has an
    error code, and on every topic (partition) the request names where it answers them one by one.
    Other parts keep their schema defaults (empty lists), so a client reads nothing but the error."""
    values: dict[str, Any] = {}
    if "error_code" in resp_cls.fields:
        values["error_code"] = code
    shape = _ERROR_SHAPES.get(api_key)
    if shape is not None and shape.req_topics in type(request).fields and shape.resp_topics in resp_cls.fields:
        values[shape.resp_topics] = [
            _denied_entry(resp_cls, shape, getattr(t, shape.req_name) or "", _partition_ids(t, shape), code)
            for t in getattr(request, shape.req_topics) or []
        ]
        if api_key in (0, 1, 3):  # Produce/Fetch v13+ answer by topic id (the name is not on the wire there)
            for entry, t in zip(values[shape.resp_topics], getattr(request, shape.req_topics) or [], strict=True):
                entry.topic_id = t.topic_id
    if api_key == 69:  # ConsumerGroupDescribeRequest.getErrorResponse: every group named, with the code
        values["groups"] = [_new(resp_cls, "groups", group_id=g, error_code=code) for g in request.group_ids or []]
    return resp_cls(**values)
