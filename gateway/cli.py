"""`kgov gateway` (run the Kafka protocol gateway) and `kgov quotas` (client quotas in the database)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from dataclasses import replace
from typing import Any

from authz.database import open_engine
from gateway.quota_model import (
    CONNECTION_CREATION_RATE,
    CONSUMER_BYTE_RATE,
    DEFAULT_PART,
    NONE_PART,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    EntityPart,
    Part,
    QuotaEntity,
    QuotaError,
    ip_entity_name,
)
from gateway.quota_store import QuotaOp, QuotaStore
from gateway.upstream_token import UpstreamLoginError

_RATE_FLAGS = (
    ("--producer-byte-rate", PRODUCER_BYTE_RATE),
    ("--consumer-byte-rate", CONSUMER_BYTE_RATE),
    ("--request-percentage", REQUEST_PERCENTAGE),
    ("--connection-creation-rate", CONNECTION_CREATION_RATE),
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds this package's subcommands; each sets `func(args) -> int`."""
    gw = subparsers.add_parser("gateway", help="run the Kafka protocol gateway in front of a cluster")
    gw.add_argument("--listen", default=None, help="HOST:PORT for clients (default: gateway.listen)")
    gw.add_argument("--upstream", default=None, help="HOST:PORT of the Kafka cluster (default: gateway.upstream)")
    gw.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    gw.set_defaults(func=_gateway_command)

    quotas = subparsers.add_parser("quotas", help="client quotas enforced by the gateway (Kafka's semantics)")
    sub = quotas.add_subparsers(dest="quotas_action", required=True)
    set_p = sub.add_parser("set", help="set or remove quotas of one entity")
    list_p = sub.add_parser("list", help="list configured quotas")
    for p in (set_p, list_p):
        user = p.add_mutually_exclusive_group()
        user.add_argument("--user", default=None)
        user.add_argument("--user-default", action="store_true", help="the default user (<default>)")
        client = p.add_mutually_exclusive_group()
        client.add_argument("--client-id", default=None)
        client.add_argument("--client-id-default", action="store_true", help="the default client id")
        ip = p.add_mutually_exclusive_group()
        ip.add_argument("--ip", default=None, help="one IP address (IPv4 or IPv6; host names are not resolved)")
        ip.add_argument("--ip-default", action="store_true")
    for flag, _key in _RATE_FLAGS:
        set_p.add_argument(flag, type=float, default=None)
    set_p.add_argument("--remove", action="append", default=[], metavar="KEY",
                       help="remove a quota key, e.g. producer_byte_rate (repeatable)")
    list_p.add_argument("--json", action="store_true", help="print JSON")
    quotas.set_defaults(func=_quotas_command)


def _part(name: str | None, default: bool) -> EntityPart:
    if default:
        return DEFAULT_PART
    return EntityPart.of(name) if name is not None else NONE_PART


def _entity(args: argparse.Namespace) -> QuotaEntity:
    return QuotaEntity(_part(args.user, args.user_default), _part(args.client_id, args.client_id_default),
                       _part(args.ip, args.ip_default))


def entity_json(entity: QuotaEntity) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for label, part in (("user", entity.user), ("client-id", entity.client_id), ("ip", entity.ip)):
        if part != NONE_PART:
            out[label] = part.render()
    return out


def _quotas_command(args: argparse.Namespace) -> int:
    settings = args.settings()
    engine = open_engine(settings.database_url)
    store = QuotaStore(engine)
    try:
        store.migrate()
        if args.quotas_action == "set":
            ops = [QuotaOp(key, value) for flag, key in _RATE_FLAGS
                   if (value := getattr(args, flag[2:].replace("-", "_"))) is not None]
            ops += [QuotaOp(key, remove=True) for key in args.remove]
            if not ops:
                print("nothing to change: give a rate (e.g. --producer-byte-rate 1048576) or --remove KEY",
                      file=sys.stderr)
                return 2
            entity = _entity(args)
            if entity == QuotaEntity():
                print("say whose quota to set: --user U or --user-default (with --client-id C or "
                      "--client-id-default), --client-id alone, or --ip A or --ip-default", file=sys.stderr)
                return 2
            entity = entity.normalised()  # an ip as the gateway keeps it (10.0.0.7 for ::ffff:10.0.0.7)
            store.alter([(entity, ops)])
            print(f"Updated quotas of {entity.describe()}")
            return 0
        wanted = _entity(args)
        if wanted.ip.kind is Part.NAME:
            wanted = replace(wanted, ip=EntityPart.of(ip_entity_name(wanted.ip.name)))
        _, configs = store.load()
        rows = [
            (e, v) for e, v in sorted(configs.items())
            if all(w in (NONE_PART, p) for w, p in zip((wanted.user, wanted.client_id, wanted.ip),
                                                             (e.user, e.client_id, e.ip), strict=True))
        ]
        if args.json:
            print(json.dumps([{"entity": entity_json(e), "values": dict(sorted(v.items()))} for e, v in rows],
                             indent=2))
        else:
            for e, v in rows:
                # Exact, as kafka-configs.sh prints them (Double.toString: 1048576.0); `:g` showed 1.04858e+06.
                values = ", ".join(f"{k}={v[k]!r}" for k in sorted(v))
                print(f"Quota configs for {e.describe()} are {values}")
        return 0
    except QuotaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()


def _gateway_command(args: argparse.Namespace) -> int:
    from gateway.runtime import build_runtime

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = args.settings()
    try:
        runtime = build_runtime(settings, listen=args.listen, upstream=args.upstream)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run_until_signal(runtime, announce=lambda: _announce(runtime))


def _announce(runtime: Any) -> None:
    opts = runtime.gateway.options
    print(f"kgov gateway listening on {opts.listen_host}:{runtime.gateway.port} "
          f"({opts.security_protocol}, mechanisms: {', '.join(opts.sasl_mechanisms) or 'none'}), "
          f"upstream {opts.upstream[0]}:{opts.upstream[1]}", flush=True)


def run_until_signal(runtime: Any, *, announce: Any = None) -> int:
    """Runs the gateway until SIGINT/SIGTERM, then stops it cleanly."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await runtime.start()
        except UpstreamLoginError:
            await runtime.stop()
            raise
        if announce is not None:
            announce()
        try:
            await stop.wait()
        finally:
            await runtime.stop()

    try:
        asyncio.run(main())
    except UpstreamLoginError as exc:  # the upstream's token endpoint refused the gateway's credential
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
