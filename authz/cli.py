"""`kgov acls` (kafka-acls.sh's options), `kgov roles`, `kgov groups`.

Each talks either to the database directly (`--db`, or the default SQLite) or to a running
control plane (`--url http://host:port`, with `--user` and the password from `KGOV_PASSWORD` or
`--password-stdin`).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import httpx

from authz.cleartext_credentials import (
    ALLOW_PLAIN_HTTP_FLAG,
    CleartextCredentials,
    refuse_cleartext_credentials,
)
from authz.database import open_engine
from authz.decide import validate_new_acl
from authz.model import (
    CLUSTER_RESOURCE_NAME,
    WILDCARD_HOST,
    Acl,
    AclFilter,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    Principal,
    ResourceType,
)
from authz.roles import PREDEFINED_ROLES, RoleBinding
from authz.service import AuthorizerService, acl_to_json, binding_to_json

# ---------------------------------------------------------------------------- backends


class Backend(Protocol):
    def create(self, acls: list[Acl]) -> list[str]: ...
    def delete(self, filters: list[AclFilter]) -> list[Acl]: ...
    def describe(self, flt: AclFilter) -> list[Acl]: ...
    def bindings(self) -> list[RoleBinding]: ...
    def bind(self, binding: RoleBinding, add: bool) -> None: ...
    def groups(self) -> dict[str, list[str]]: ...
    def member(self, group: Principal, member: Principal, add: bool) -> None: ...
    def super_users(self) -> list[str]: ...
    def cluster_id(self) -> str: ...
    def close(self) -> None: ...


class DbBackend:
    def __init__(self, args: argparse.Namespace) -> None:
        self.settings = args.settings()
        self.service = AuthorizerService(open_engine(self.settings.database_url), self.settings.authz)
        self.service.start(background=False)
        self.actor = Principal("User", f"local:{getpass.getuser()}")

    def create(self, acls: list[Acl]) -> list[str]:
        return [str(e) for e in self.service.create_acls(acls, actor=self.actor) if e is not None]

    def delete(self, filters: list[AclFilter]) -> list[Acl]:
        return sorted({a for group in self.service.delete_acls(filters, actor=self.actor) for a in group})

    def describe(self, flt: AclFilter) -> list[Acl]:
        return self.service.describe_acls(flt)

    def bindings(self) -> list[RoleBinding]:
        return self.service.role_bindings()

    def bind(self, binding: RoleBinding, add: bool) -> None:
        if add:
            self.service.add_role_binding(binding, actor=self.actor)
        else:
            self.service.remove_role_binding(binding, actor=self.actor)

    def groups(self) -> dict[str, list[str]]:
        return self.service.groups()

    def member(self, group: Principal, member: Principal, add: bool) -> None:
        if add:
            self.service.add_group_member(group, member, actor=self.actor)
        else:
            self.service.remove_group_member(group, member, actor=self.actor)

    def super_users(self) -> list[str]:
        return sorted(str(p) for p in self.settings.authz.super_user_set)

    def cluster_id(self) -> str:
        return str(self.settings.cluster_id)

    def close(self) -> None:
        self.service.close()
        self.service.store.engine.dispose()


class CliError(Exception):
    pass


class HttpBackend:
    def __init__(self, args: argparse.Namespace) -> None:
        try:  # before the password is read: nothing is sent, or asked for, over a path that would expose it
            refuse_cleartext_credentials(args.url, allowed=args.allow_plain_http)
        except CleartextCredentials as exc:
            raise CliError(str(exc)) from None
        password = os.environ.get("KGOV_PASSWORD")
        if args.password_stdin:
            password = sys.stdin.readline().rstrip("\n")
        if not args.user or password is None:
            raise CliError("--url needs --user and a password (KGOV_PASSWORD or --password-stdin)")
        self.client = httpx.Client(base_url=args.url, auth=(args.user, password), timeout=30)
        try:
            clusters = self._call("GET", "/v3/clusters")
        except BaseException:
            self.client.close()
            raise
        self._cluster = str(clusters["data"][0]["cluster_id"])

    def close(self) -> None:
        self.client.close()

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            resp = self.client.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise CliError(f"cannot reach the control plane at {self.client.base_url}: {exc}") from None
        if resp.status_code >= 400:
            try:
                message = resp.json().get("message", resp.text)
            except ValueError:
                message = resp.text
            raise CliError(f"{method} {path}: HTTP {resp.status_code}: {message}")
        return resp.json() if resp.content else None

    def create(self, acls: list[Acl]) -> list[str]:
        self._call("POST", f"/v3/clusters/{self._cluster}/acls:batch", json={"data": [acl_to_json(a) for a in acls]})
        return []

    def delete(self, filters: list[AclFilter]) -> list[Acl]:
        out: set[Acl] = set()
        for f in filters:
            data = self._call("DELETE", f"/v3/clusters/{self._cluster}/acls", params=_filter_params(f))
            out.update(_acl_from_json(d) for d in data["data"])
        return sorted(out)

    def describe(self, flt: AclFilter) -> list[Acl]:
        data = self._call("GET", f"/v3/clusters/{self._cluster}/acls", params=_filter_params(flt))
        return [_acl_from_json(d) for d in data["data"]]

    def bindings(self) -> list[RoleBinding]:
        raise CliError("listing every role binding needs --db; over HTTP use the MDS lookup endpoints")

    def bind(self, binding: RoleBinding, add: bool) -> None:
        method = "POST" if add else "DELETE"
        base = f"/security/1.0/principals/{binding.principal}/roles/{binding.role}"
        scope = {"clusters": {"kafka-cluster": self._cluster}}
        if binding.resource_type is None:
            self._call(method, base, json={"scope": scope})
        else:
            pattern = {"resourceType": binding.resource_type.name, "name": binding.resource_name,
                       "patternType": binding.pattern_type.name}
            self._call(method, base + "/bindings", json={"scope": scope, "resourcePatterns": [pattern]})

    def groups(self) -> dict[str, list[str]]:
        result: dict[str, list[str]] = self._call("GET", "/v1/groups")
        return result

    def member(self, group: Principal, member: Principal, add: bool) -> None:
        self._call("PUT" if add else "DELETE", f"/v1/groups/{group}/members/{member}")

    def super_users(self) -> list[str]:
        return []

    def cluster_id(self) -> str:
        return self._cluster


def _filter_params(f: AclFilter) -> dict[str, str]:
    params = {"resource_type": f.resource_type.name, "pattern_type": f.pattern_type.name,
              "operation": f.operation.name, "permission": f.permission.name}
    if f.resource_name is not None:
        params["resource_name"] = f.resource_name
    if f.principal is not None:
        params["principal"] = f.principal
    if f.host is not None:
        params["host"] = f.host
    return params


def _acl_from_json(d: dict[str, str]) -> Acl:
    return Acl(ResourceType.parse(d["resource_type"]), d["resource_name"], PatternType.parse(d["pattern_type"]),
               d["principal"], d["host"], Operation.parse(d["operation"]), Permission.parse(d["permission"]))


@contextmanager
def _backend(args: argparse.Namespace) -> Iterator[Backend]:
    backend: Backend = HttpBackend(args) if args.url else DbBackend(args)
    try:
        yield backend
    finally:
        backend.close()


def _add_connection_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default=None, help="control plane URL; without it the database is used directly")
    p.add_argument("--user", default=None, help="user for --url (HTTP Basic)")
    p.add_argument("--password-stdin", action="store_true", help="read the --url password from standard input")
    p.add_argument(ALLOW_PLAIN_HTTP_FLAG, action="store_true",
                   help="allow an http:// --url to a host other than loopback (the password then crosses the "
                        "network in clear text)")


# ---------------------------------------------------------------------------- kgov acls


def _resources(args: argparse.Namespace, pattern: PatternType) -> list[tuple[ResourceType, str]]:
    out: list[tuple[ResourceType, str]] = []
    out += [(ResourceType.TOPIC, t) for t in args.topic]
    out += [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    out += [(ResourceType.DELEGATION_TOKEN, t) for t in args.delegation_token]
    out += [(ResourceType.USER, u) for u in args.user_principal]
    out += [(ResourceType.SUBJECT, s) for s in args.subject]
    if (args.cluster or (args.idempotent and args.producer)) and pattern is PatternType.LITERAL:
        out.append((ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME))
    return out


def _acls_to_add(args: argparse.Namespace) -> list[Acl]:
    pattern = PatternType.parse(args.resource_pattern_type)
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise CliError(f"A '--resource-pattern-type' value of '{args.resource_pattern_type}' is not valid when adding acls.")
    if not args.allow_principal and not args.deny_principal:
        raise CliError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    if args.producer and not args.topic:
        raise CliError("With --producer you must specify a --topic")
    # As Kafka's AclCommand: --cluster and --transactional-id belong to --producer when both are given.
    if args.consumer and (not args.topic or not args.group
                          or (not args.producer and (args.cluster or args.transactional_id))):
        raise CliError("With --consumer you must specify a --topic and a --group and no --cluster or "
                       "--transactional-id option should be specified.")
    if (args.producer or args.consumer) and (args.operation or args.deny_principal or args.deny_host):
        raise CliError("--producer and --consumer cannot be combined with --operation, --deny-principal or --deny-host")
    if args.idempotent and not args.producer:
        raise CliError("The --idempotent option is only available if --producer is set")
    resources = _resources(args, pattern)
    if not resources:
        raise CliError("You must provide at least one resource: --topic <topic> or --cluster or --group <group> or "
                       "--delegation-token <Delegation Token ID> or --subject <subject>")
    # Both may be given in one command: Kafka's AclCommand adds the two sets of ACLs.
    ops_for: dict[ResourceType, list[Operation]] = {}
    if args.producer:
        ops_for = {ResourceType.TOPIC: [Operation.WRITE, Operation.DESCRIBE, Operation.CREATE],
                   ResourceType.TRANSACTIONAL_ID: [Operation.WRITE, Operation.DESCRIBE],
                   ResourceType.CLUSTER: [Operation.IDEMPOTENT_WRITE]}
    if args.consumer:
        for rt, ops in ((ResourceType.TOPIC, [Operation.READ, Operation.DESCRIBE]),
                        (ResourceType.GROUP, [Operation.READ])):
            ops_for[rt] = [*ops_for.get(rt, []), *(op for op in ops if op not in ops_for.get(rt, []))]
    operations = [Operation.parse(o) for o in (args.operation or ["All"])]
    acls: list[Acl] = []
    for perm, principals, hosts in ((Permission.ALLOW, args.allow_principal, args.allow_host),
                                    (Permission.DENY, args.deny_principal, args.deny_host)):
        for principal in principals:
            Principal.parse_given(principal)
            for host in hosts or [WILDCARD_HOST]:
                for rt, name in resources:
                    ops = ops_for.get(rt, []) if (args.producer or args.consumer) else operations
                    for op in ops:
                        if op is not Operation.ALL and op not in _supported(rt):
                            raise CliError(f"ResourceType {rt.name.title().replace('_', '')} only supports "
                                           f"operations {', '.join(sorted(o.camel for o in _supported(rt)))}")
                        acl = Acl(rt, name, pattern, principal, host, op, perm)
                        validate_new_acl(acl)
                        acls.append(acl)
    return acls


def _supported(rt: ResourceType) -> frozenset[Operation]:
    from authz.model import SUPPORTED_OPERATIONS

    return SUPPORTED_OPERATIONS.get(rt, frozenset())


def _filters(args: argparse.Namespace) -> list[AclFilter]:
    pattern = PatternType.parse(args.resource_pattern_type)
    resources = _resources(args, pattern) if any(
        (args.topic, args.group, args.transactional_id, args.delegation_token, args.user_principal, args.subject,
         args.cluster)
    ) else [(ResourceType.ANY, None)]
    principals: list[str | None] = list(args.principal or []) or [None]
    filters = []
    for rt, name in resources:
        for principal in principals:
            filters.append(AclFilter(rt, name, pattern if name is not None else PatternType.ANY, principal))
    return filters


def _print_acls(acls: list[Acl], heading: str = "Current ACLs") -> None:
    by_pattern: dict[tuple[ResourceType, str, PatternType], list[Acl]] = {}
    for acl in acls:
        by_pattern.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(acl)
    for (rt, name, pt), group in by_pattern.items():
        print(f"{heading} for resource `ResourcePattern(resourceType={rt.name}, name={name}, patternType={pt.name})`: ")
        for a in group:
            print(f" \t(principal={a.principal}, host={a.host}, operation={a.operation.name}, "
                  f"permissionType={a.permission.name})")
        print()


def _print_current_acls(backend: Backend, changed: list[Acl]) -> None:
    """As kafka-acls.sh after --add/--remove: every ACL now on the resource patterns just changed."""
    current: dict[Acl, None] = {}
    for rt, name, pt in dict.fromkeys((a.resource_type, a.resource_name, a.pattern_type) for a in changed):
        current.update(dict.fromkeys(backend.describe(AclFilter(rt, name, pt))))
    _print_acls(list(current))


def _confirm(question: str, force: bool) -> bool:
    if force:
        return True
    if not sys.stdin.isatty():
        print(f"{question} (y/n)\nNot confirmed (no terminal); use --force.", file=sys.stderr)
        return False
    return input(f"{question} (y/n)\n").strip().lower() == "y"


def _acls_command(args: argparse.Namespace) -> int:
    try:
        if args.export is not None:
            return _export(args)
        chosen = [a for a in ("add", "remove", "list") if getattr(args, a)]
        if len(chosen) != 1:
            raise CliError("Command must include exactly one action: --list, --add, --remove.")
        if args.principal and not args.list:
            raise CliError("The --principal option is only available if --list is set")
        with _backend(args) as backend:
            return _acls_action(args, backend)
    except (CliError, InvalidAclError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1


def _acls_action(args: argparse.Namespace, backend: Backend) -> int:
    if args.add:
        acls = _acls_to_add(args)
        errors = backend.create(acls)
        if errors:
            raise CliError("; ".join(errors))
        _print_acls(acls, "Adding ACLs")
        _print_current_acls(backend, acls)
    elif args.remove:
        pattern = PatternType.parse(args.resource_pattern_type)
        if not _resources(args, pattern):
            raise CliError("You must provide at least one resource to remove ACLs from")
        if not _confirm("Are you sure you want to remove ACLs matching the given resources?", args.force):
            return 1
        removed = backend.delete(_filters(args))
        print(f"Removed {len(removed)} ACLs")
        _print_acls(removed, "Removed ACLs")
        _print_current_acls(backend, removed)
    else:
        found: dict[Acl, None] = {}
        for flt in _filters(args):
            found.update(dict.fromkeys(backend.describe(flt)))
        _print_acls(list(found))
    return 0


def _export(args: argparse.Namespace) -> int:
    with _backend(args) as backend:
        return _export_with(args, backend)


def _export_with(args: argparse.Namespace, backend: Backend) -> int:
    doc = {
        "exported_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cluster_id": backend.cluster_id(),
        "acls": [acl_to_json(a) for a in backend.describe(AclFilter())],
        "role_bindings": [binding_to_json(b) for b in backend.bindings()],
        "super_users": backend.super_users(),
    }
    text = json.dumps(doc, indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n")
    else:
        print(text)
    return 0


# ---------------------------------------------------------------------------- kgov roles / groups


def _parse_binding(args: argparse.Namespace) -> RoleBinding:
    if args.resource:
        kind, sep, name = args.resource.partition(":")
        if not sep:
            raise CliError("--resource takes Type:name, e.g. Topic:orders")
        return RoleBinding(args.principal, args.role, ResourceType.parse(kind), name,
                           PatternType.PREFIXED if args.prefix else PatternType.LITERAL)
    return RoleBinding(args.principal, args.role)


def _roles_command(args: argparse.Namespace) -> int:
    try:
        if args.roles_action == "list":
            for name in sorted(PREDEFINED_ROLES):
                role = PREDEFINED_ROLES[name]
                grants = "; ".join(f"{rt.name}: {', '.join(sorted(o.name for o in ops))}" for rt, ops in role.grants)
                print(f"{name:16} {'cluster' if role.cluster_scoped else 'resource':8} {grants}")
            return 0
        with _backend(args) as backend:
            if args.roles_action == "bindings":
                for b in backend.bindings():
                    if args.principal in (None, b.principal):
                        where = "cluster-wide" if b.resource_type is None else (
                            f"{b.resource_type.name}:{b.resource_name} ({b.pattern_type.name})")
                        print(f"{b.principal}\t{b.role}\t{where}")
                return 0
            backend.bind(_parse_binding(args), add=args.roles_action == "bind")
        print(f"{'Bound' if args.roles_action == 'bind' else 'Unbound'} {args.role} for {args.principal}")
    except (CliError, InvalidAclError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


def _groups_command(args: argparse.Namespace) -> int:
    try:
        with _backend(args) as backend:
            if args.groups_action == "list":
                for group, members in backend.groups().items():
                    print(f"{group}: {', '.join(members)}")
                return 0
            group_p, member_p = Principal.parse_given(args.group), Principal.parse_given(args.member)
            if group_p.type != "Group":
                raise CliError(f"expected a Group: principal, got {args.group}")
            backend.member(group_p, member_p, add=args.groups_action == "add-member")
    except (CliError, InvalidAclError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


_ACL_SWITCHES = {
    "--add": "add the ACLs the other options describe",
    "--remove": "remove the ACLs on the given resources (asks first unless --force)",
    "--list": "list ACLs (all, or those on the given resources)",
    "--producer": "with --topic: WRITE, DESCRIBE and CREATE on it (and WRITE, DESCRIBE on --transactional-id)",
    "--consumer": "with --topic and --group: READ, DESCRIBE on the topic and READ on the group",
    "--idempotent": "with --producer: IDEMPOTENT_WRITE on the cluster",
    "--force": "remove without asking",
    "--cluster": "the cluster resource (kafka-cluster)",
}
_ACL_REPEATABLE = {
    "--allow-principal": "User:NAME or Group:NAME to allow",
    "--deny-principal": "User:NAME or Group:NAME to deny",
    "--allow-host": "host the allow applies to (default *)",
    "--deny-host": "host the deny applies to (default *)",
    "--operation": "Read, Write, Create, Describe, Alter, Delete, ... (default All)",
    "--topic": "topic name (or prefix with --resource-pattern-type prefixed)",
    "--group": "consumer group name",
    "--transactional-id": "transactional id",
    "--delegation-token": "delegation token id",
    "--user-principal": "User:NAME whose tokens the ACL covers (CreateTokens, DescribeTokens)",
    "--subject": "schema registry subject (READ to fetch, WRITE to register; a kgov extension)",
    "--principal": "with --list: only this principal's ACLs",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    acls = subparsers.add_parser("acls", help="add, remove, list and export ACLs (kafka-acls.sh options)")
    acls.add_argument("export", nargs="?", choices=["export"], default=None, help="write the ACL inventory as JSON")
    acls.add_argument("--output", default=None, help="file for `acls export` (default: standard output)")
    for flag, text in _ACL_SWITCHES.items():
        acls.add_argument(flag, action="store_true", help=text)
    for flag, text in _ACL_REPEATABLE.items():
        acls.add_argument(flag, action="append", default=[], help=f"{text} (repeatable)")
    acls.add_argument("--resource-pattern-type", default="literal",
                      choices=["literal", "prefixed", "any", "match", "LITERAL", "PREFIXED", "ANY", "MATCH"])
    _add_connection_options(acls)
    acls.set_defaults(func=_acls_command)

    roles = subparsers.add_parser("roles", help="predefined roles and role bindings")
    roles_sub = roles.add_subparsers(dest="roles_action", required=True)
    roles_sub.add_parser("list", help="the predefined roles and what they grant")
    listing = roles_sub.add_parser("bindings", help="list role bindings")
    listing.add_argument("--principal", default=None)
    _add_connection_options(listing)
    for action in ("bind", "unbind"):
        p = roles_sub.add_parser(action)
        p.add_argument("--principal", required=True, help="User:alice or Group:sales")
        p.add_argument("--role", required=True, choices=sorted(PREDEFINED_ROLES))
        p.add_argument("--resource", default=None, help="Type:name (e.g. Topic:orders); none = cluster-wide")
        p.add_argument("--prefix", action="store_true", help="treat the resource name as a prefix")
        _add_connection_options(p)
    roles.set_defaults(func=_roles_command)

    groups = subparsers.add_parser("groups", help="group memberships")
    groups_sub = groups.add_subparsers(dest="groups_action", required=True)
    _add_connection_options(groups_sub.add_parser("list"))
    for action in ("add-member", "remove-member"):
        p = groups_sub.add_parser(action)
        p.add_argument("group", help="Group:sales")
        p.add_argument("member", help="User:alice")
        _add_connection_options(p)
    groups.set_defaults(func=_groups_command)
