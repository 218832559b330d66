"""`kgov users`, `kgov tokens`, `kgov oauth-clients`, `kgov oauth-keys`: credential management on the
database (`--db`, or the default SQLite), as the local operator `User:local:<login>`.

Secrets are never command-line arguments (they would show in `ps` and shell history): passwords and
client secrets come from `--password-stdin` / `--secret-stdin` or an interactive prompt; a token HMAC
may be given as `--hmac -` to read it from stdin. Every change is audited like the REST API's.
"""

from __future__ import annotations

import argparse
import base64
import getpass
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import httpx

from audit.kafka_sink import KafkaSink
from audit.sinks import JsonLinesSink, MultiSink
from authz.cleartext_credentials import (
    ALLOW_PLAIN_HTTP_FLAG,
    CleartextCredentials,
    refuse_cleartext_credentials,
)
from authz.database import open_engine
from authz.model import InvalidAclError, Principal
from sasl.delegation import DelegationTokenError, decode_hmac, format_bearer, hmac_lookup_key, token_json
from sasl.service import CredentialError, CredentialService

Args = argparse.Namespace


class CliError(Exception):
    """A usage problem: printed as `kgov: <message>`, exit status 2."""


class _Session:
    def __init__(self, args: Args) -> None:
        self.settings = args.settings()
        # Without them in the settings, the keys `kgov up` keeps beside the database this command opens
        # (kgov.settings.Settings.adopt_saved_secrets): tokens and rotated signing keys are then the
        # platform's own, as the users and clients written to that database are.
        self.settings.adopt_saved_secrets()
        self.engine = open_engine(self.settings.database_url)
        audit_dir = self.settings.audit_dir
        self.audit = JsonLinesSink(
            audit_dir / "events.jsonl",
            max_bytes=self.settings.audit.max_bytes,
            backups=self.settings.audit.backups,
            integrity=self.settings.audit_integrity_key(),
        )
        # The control plane's topic gets the command's events too; close() waits for them, bounded.
        self.kafka = KafkaSink.from_settings(self.settings.audit, self.settings.audit_seal_key())
        sinks = MultiSink([self.audit] if self.kafka is None else [self.audit, self.kafka])
        self.service = CredentialService(
            self.engine, self.settings, audit=sinks, source=f"crn:///kafka={self.settings.cluster_id}"
        )
        self.actor = Principal("User", f"local:{getpass.getuser()}")

    def close(self) -> None:
        self.audit.close()
        if self.kafka is not None:
            self.kafka.close()
        self.engine.dispose()


def _read_secret(args: Args, what: str, from_stdin: bool) -> str:
    if from_stdin:
        value = sys.stdin.readline().rstrip("\r\n")
    elif sys.stdin.isatty():
        value = getpass.getpass(f"{what}: ")
        if getpass.getpass(f"{what} (again): ") != value:
            raise CliError(f"the two {what.lower()}s differ")
    else:
        raise CliError(f"pass the {what.lower()} on standard input with --{what.split()[-1].lower()}-stdin")
    if not value:
        raise CliError(f"empty {what.lower()}")
    return value


def _read_hmac(value: str) -> str:
    return sys.stdin.readline().strip() if value == "-" else value


def _principal(text: str) -> Principal:
    try:
        return Principal.parse(text)
    except InvalidAclError as exc:
        raise CliError(str(exc)) from None


def _run(args: Args, body: Any) -> int:
    session = _Session(args)
    try:
        return int(body(session))
    except (CredentialError, DelegationTokenError) as exc:
        print(f"kgov: {exc}", file=sys.stderr)
        return 1
    except CliError as exc:
        print(f"kgov: {exc}", file=sys.stderr)
        return 2
    finally:
        session.close()


def _print(args: Args, data: Any, text_lines: list[str]) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2))
    else:
        for line in text_lines:
            print(line)


# ----------------------------------------------------------------------------------- users


def _users_set(args: Args, *, must_exist: bool) -> int:
    def body(s: _Session) -> int:
        mechanisms = args.mechanism or ["SCRAM-SHA-512"]
        if must_exist and not s.service.describe_scram_users([args.name]):
            print(f"kgov: user {args.name} has no SCRAM credentials (use `kgov users add`)", file=sys.stderr)
            return 1
        password = _read_secret(args, "Password", args.password_stdin)
        for mech in mechanisms:
            s.service.set_scram_credential(
                args.name, mech, password, iterations=args.iterations, actor=s.actor,
                shared_principal=getattr(args, "shared_principal", False),
            )
        print(
            f"{'Updated' if must_exist else 'Added'} {', '.join(m.upper() for m in mechanisms)} for {args.name}"
        )
        return 0

    return _run(args, body)


def _users_list(args: Args) -> int:
    def body(s: _Session) -> int:
        users = s.service.describe_scram_users(args.name or None)
        data = [
            {
                "name": u.name,
                "mechanisms": [{"mechanism": m.mechanism, "iterations": m.iterations} for m in u.mechanisms],
            }
            for u in users
        ]
        lines = [
            f"{u.name}\t" + ", ".join(f"{m.mechanism}(iterations={m.iterations})" for m in u.mechanisms)
            for u in users
        ]
        _print(args, data, lines)
        return 0

    return _run(args, body)


def _users_remove(args: Args) -> int:
    def body(s: _Session) -> int:
        mechanisms: list[str | None] = list(args.mechanism) if args.mechanism else [None]
        for mech in mechanisms:
            s.service.delete_scram_credential(args.name, mech, actor=s.actor)
        print(
            f"Removed {'all SCRAM credentials' if mechanisms == [None] else ', '.join(args.mechanism)} of {args.name}"
        )
        return 0

    return _run(args, body)


# ---------------------------------------------------------------------------------- tokens


def _token_line(t: dict[str, Any]) -> str:
    renewers = ",".join(t["renewers"]) or "-"
    return (
        f"{t['token_id']}\towner={t['owner']}\trenewers={renewers}\texpiry={t['expiry_timestamp_ms']}"
        f"\tmax={t['max_timestamp_ms']}"
    )


class _DbTokens:
    """As the local operator on the database: acts for the token's owner (who may always renew it)."""

    def __init__(self, session: _Session) -> None:
        if session.settings.sasl.delegation_token_secret_key is None:
            # The service would answer Kafka's bare "Delegation Token feature is not enabled.", which
            # does not say that this process, not the control plane, lacks the key (neither set nor in
            # the data directory, where `kgov up` keeps the one it generates).
            raise CliError(
                "delegation tokens need sasl.delegation_token_secret_key, the same key as the control plane's: "
                "set KGOV_SASL__DELEGATION_TOKEN_SECRET_KEY, or work on the database of `kgov up` (KGOV_DATA_DIR "
                f"set to its data directory, without --db: {session.settings.delegation_token_key_file} is read "
                "with that directory's kgov.db only), or go through a running control plane with "
                "--url http://HOST:PORT --user NAME"
            )
        self.s = session

    def create(self, owner: str | None, renewers: list[str], max_lifetime_ms: int) -> dict[str, Any]:
        if owner is None:
            raise CliError("--owner-principal is required without --url")
        created = self.s.service.create_token(
            self.s.actor,
            owner=_principal(owner),
            renewers=[_principal(r) for r in renewers],
            max_lifetime_ms=max_lifetime_ms,
        )
        return {**token_json(created.info), "hmac": base64.b64encode(created.hmac).decode()}

    def _owner_for(self, hmac_b64: str) -> Principal:
        info = self.s.service.store.token_by_hmac(hmac_lookup_key(decode_hmac(hmac_b64)))
        # An unknown HMAC fails in the service with DELEGATION_TOKEN_NOT_FOUND.
        return info.owner if info else self.s.actor

    def renew(self, hmac_b64: str, period_ms: int) -> int:
        return self.s.service.renew_token(self._owner_for(hmac_b64), hmac_b64, period_ms).expiry_ms

    def expire(self, hmac_b64: str, period_ms: int) -> int:
        return self.s.service.expire_token(self._owner_for(hmac_b64), hmac_b64, period_ms)

    def describe(self, owners: list[str] | None) -> list[dict[str, Any]]:
        parsed = [_principal(o) for o in owners] if owners is not None else None
        # The local operator has database access, so sees every token (as a DESCRIBE_TOKENS holder would).
        tokens = self.s.service.describe_tokens(self.s.actor, owners=parsed, may_describe=lambda _t: True)
        return [token_json(t) for t in tokens]


class _HttpTokens:
    """Through a running control plane as `--user`: the owner is the authenticated principal, as in Kafka."""

    def __init__(self, args: Args) -> None:
        try:  # before the password is read: nothing is sent, or asked for, over a path that would expose it
            refuse_cleartext_credentials(args.url, allowed=args.allow_plain_http)
        except CleartextCredentials as exc:
            raise CliError(str(exc)) from None
        password = os.environ.get("KGOV_PASSWORD")
        if args.password_stdin:
            password = sys.stdin.readline().rstrip("\r\n")
        if not args.user or not password:
            raise CliError("--url needs --user and a password (KGOV_PASSWORD or --password-stdin)")
        self.client = httpx.Client(base_url=args.url, auth=(args.user, password), timeout=30)

    def close(self) -> None:
        self.client.close()

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            response = self.client.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise CliError(f"cannot reach the control plane: {exc}") from None
        if response.status_code >= 400:
            try:
                message = response.json().get("message", response.text)
            except ValueError:
                message = response.text
            raise CliError(f"{response.status_code}: {message}")
        return response.json()

    def create(self, owner: str | None, renewers: list[str], max_lifetime_ms: int) -> dict[str, Any]:
        body: dict[str, Any] = {"renewers": renewers, "max_lifetime_ms": max_lifetime_ms}
        if owner is not None:
            body["owner"] = owner
        result: dict[str, Any] = self._call("POST", "/v1/delegation-tokens", json=body)
        return result

    def renew(self, hmac_b64: str, period_ms: int) -> int:
        body = {"hmac": hmac_b64, "renew_period_ms": period_ms}
        return int(self._call("POST", "/v1/delegation-tokens/renew", json=body)["expiry_timestamp_ms"])

    def expire(self, hmac_b64: str, period_ms: int) -> int:
        body = {"hmac": hmac_b64, "expiry_period_ms": period_ms}
        return int(self._call("POST", "/v1/delegation-tokens/expire", json=body)["expiry_timestamp_ms"])

    def describe(self, owners: list[str] | None) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call(
            "GET", "/v1/delegation-tokens", params={"owner": owners or []}
        )
        return result


def _with_tokens(args: Args, action: Callable[[_DbTokens | _HttpTokens], int]) -> int:
    if not args.url:
        return _run(args, lambda s: action(_DbTokens(s)))
    try:
        remote = _HttpTokens(args)
        try:
            return action(remote)
        finally:
            remote.close()
    except CliError as exc:
        print(f"kgov: {exc}", file=sys.stderr)
        return 1


def _tokens_create(args: Args) -> int:
    def action(backend: _DbTokens | _HttpTokens) -> int:
        t = backend.create(args.owner_principal, args.renewer_principal or [], args.max_life_time_period)
        # What librdkafka's `oauth_cb` and kafka-python's token provider hand over (OAUTHBEARER).
        t["bearer"] = format_bearer(t["token_id"], base64.b64decode(t["hmac"]))
        _print(args, t, [_token_line(t), f"hmac\t{t['hmac']}", f"bearer\t{t['bearer']}"])
        return 0

    return _with_tokens(args, action)


def _tokens_renew(args: Args) -> int:
    def action(backend: _DbTokens | _HttpTokens) -> int:
        expiry = backend.renew(_read_hmac(args.hmac), args.renew_time_period)
        _print(args, {"expiry_timestamp_ms": expiry}, [f"Renewed: expiry={expiry}"])
        return 0

    return _with_tokens(args, action)


def _tokens_expire(args: Args) -> int:
    def action(backend: _DbTokens | _HttpTokens) -> int:
        expiry = backend.expire(_read_hmac(args.hmac), args.expiry_time_period)
        _print(args, {"expiry_timestamp_ms": expiry}, [f"Expired: expiry={expiry}"])
        return 0

    return _with_tokens(args, action)


def _tokens_describe(args: Args) -> int:
    def action(backend: _DbTokens | _HttpTokens) -> int:
        tokens = backend.describe(args.owner_principal)
        _print(args, tokens, [_token_line(t) for t in tokens])
        return 0

    return _with_tokens(args, action)


# ---------------------------------------------------------------------------- oauth clients


def _clients_add(args: Args) -> int:
    def body(s: _Session) -> int:
        secret = _read_secret(args, "Client secret", args.secret_stdin)
        replaced = s.service.set_client(args.client_id, secret, args.scope or [], actor=s.actor,
                                        shared_principal=args.shared_principal)
        print(f"{'Updated' if replaced else 'Added'} OAuth client {args.client_id}")
        return 0

    return _run(args, body)


def _clients_list(args: Args) -> int:
    def body(s: _Session) -> int:
        clients = s.service.list_clients()
        data = [
            {"client_id": c.client_id, "scopes": list(c.scopes), "created_timestamp_ms": c.created_ms}
            for c in clients
        ]
        _print(args, data, [f"{c.client_id}\tscopes={' '.join(c.scopes) or '-'}" for c in clients])
        return 0

    return _run(args, body)


def _clients_remove(args: Args) -> int:
    def body(s: _Session) -> int:
        s.service.delete_client(args.client_id, actor=s.actor)
        print(f"Removed OAuth client {args.client_id}")
        return 0

    return _run(args, body)


def _keys_rotate(args: Args) -> int:
    def body(s: _Session) -> int:
        key = s.service.rotate_signing_key(force=True)
        print(
            f"Active signing key {key.kid} ({key.alg}); retired keys stay in the JWKS until their tokens expire"
        )
        return 0

    return _run(args, body)


def _keys_list(args: Args) -> int:
    def body(s: _Session) -> int:
        doc = s.service.jwks_document()
        _print(args, doc, [f"{k['kid']}\t{k['alg']}" for k in doc["keys"]])
        return 0

    return _run(args, body)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds this package's subcommands; each sets `func(args) -> int`."""
    users = subparsers.add_parser("users", help="SCRAM users (credentials for SASL and HTTP Basic)")
    usub = users.add_subparsers(dest="users_command", metavar="ACTION", required=True)
    for name, must_exist, help_text in (
        ("add", False, "add (or replace) a user's SCRAM credentials"),
        ("set-password", True, "change an existing user's password"),
    ):
        p = usub.add_parser(name, help=help_text)
        p.add_argument("name")
        p.add_argument(
            "--mechanism",
            action="append",
            choices=["SCRAM-SHA-256", "SCRAM-SHA-512"],
            type=str.upper,
            help="repeatable; default SCRAM-SHA-512",
        )
        p.add_argument(
            "--iterations", type=int, default=None, help="4096..16384 (default: [sasl] scram_iterations)"
        )
        p.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
        if not must_exist:
            p.add_argument("--shared-principal", action="store_true",
                           help="allow a new user named like an OAuth client: both then log in as the one "
                                "principal User:NAME, with its ACLs and roles")
        p.set_defaults(func=lambda a, m=must_exist: _users_set(a, must_exist=m))
    p = usub.add_parser("list", help="users with their mechanisms and iterations")
    p.add_argument("name", nargs="*")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_users_list)
    p = usub.add_parser("remove", help="remove a user's credentials (all, or one mechanism)")
    p.add_argument("name")
    p.add_argument("--mechanism", action="append", choices=["SCRAM-SHA-256", "SCRAM-SHA-512"], type=str.upper)
    p.set_defaults(func=_users_remove)

    tokens = subparsers.add_parser(
        "tokens", help="delegation tokens (KIP-48), like kafka-delegation-tokens.sh"
    )
    tsub = tokens.add_subparsers(dest="tokens_command", metavar="ACTION", required=True)
    p = tsub.add_parser("create", help="create a token (owner: --user with --url, else --owner-principal)")
    p.add_argument("--owner-principal", help="User:name (with --url: needs CREATE_TOKENS on that user)")
    p.add_argument("--renewer-principal", action="append", help="User:name (repeatable)")
    p.add_argument("--max-life-time-period", type=int, default=-1, help="ms; -1 = server maximum")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_tokens_create)
    p = tsub.add_parser("renew", help="renew a token")
    p.add_argument("--hmac", required=True, help="base64 HMAC, or - to read it from stdin")
    p.add_argument("--renew-time-period", type=int, default=-1, help="ms; -1 = server default")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_tokens_renew)
    p = tsub.add_parser("expire", help="expire a token (now with -1, or after a period)")
    p.add_argument("--hmac", required=True, help="base64 HMAC, or - to read it from stdin")
    p.add_argument("--expiry-time-period", type=int, default=-1, help="ms; -1 = remove now")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_tokens_expire)
    p = tsub.add_parser("describe", help="list tokens")
    p.add_argument("--owner-principal", action="append", help="filter by owner/renewer (repeatable)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_tokens_describe)
    for child in tsub.choices.values():
        child.add_argument("--url", help="a running control plane (else the database directly)")
        child.add_argument("--user", help="with --url: the SCRAM user to authenticate as")
        child.add_argument(
            "--password-stdin",
            action="store_true",
            help="with --url: read the password from stdin (else KGOV_PASSWORD)",
        )
        child.add_argument(ALLOW_PLAIN_HTTP_FLAG, action="store_true",
                           help="allow an http:// --url to a host other than loopback (the password then "
                                "crosses the network in clear text)")

    clients = subparsers.add_parser(
        "oauth-clients", help="service accounts of the token issuer (POST /oauth/token)"
    )
    csub = clients.add_subparsers(dest="clients_command", metavar="ACTION", required=True)
    p = csub.add_parser("add", help="add (or replace) a client")
    p.add_argument("client_id")
    p.add_argument("--scope", action="append", help="allowed scope (repeatable)")
    p.add_argument("--secret-stdin", action="store_true", help="read the client secret from standard input")
    p.add_argument("--shared-principal", action="store_true",
                   help="allow a new client named like a SCRAM user: both then are the one principal User:ID, "
                        "with its ACLs and roles")
    p.set_defaults(func=_clients_add)
    p = csub.add_parser("list", help="clients and their scopes")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_clients_list)
    p = csub.add_parser("remove", help="remove a client")
    p.add_argument("client_id")
    p.set_defaults(func=_clients_remove)

    keys = subparsers.add_parser("oauth-keys", help="the token issuer's signing keys")
    ksub = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    p = ksub.add_parser("rotate", help="make a new signing key active now")
    p.set_defaults(func=_keys_rotate)
    p = ksub.add_parser("list", help="the public JWKS")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_keys_list)
