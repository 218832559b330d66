"""The `kgov` command. Each package registers its own subcommands; this module adds the shared
options (`--config`, `--db`) and the composition commands (`serve`, `up`)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

import authz.cli
import encryption.cli
import gateway.cli
import sasl.cli
import spark_compliance.cli
from kgov import __version__
from kgov.exposure import (
    REMOTE_FLAG,
    check_control_plane_exposure,
    check_dev_admin_password,
)
from kgov.http_server import server_options
from kgov.settings import Settings, load_settings


def _settings_loader(args: argparse.Namespace) -> Settings:
    overrides = {"db": getattr(args, "db", None)}
    return load_settings(getattr(args, "config", None), **overrides)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from kgov.app import build_app

    check_control_plane_exposure(args.host, args.tls_cert, args.tls_key, args.allow_remote_plaintext)
    os.umask(0o077)  # rotated audit files and anything else written later are owner-only
    settings = args.settings()
    if settings.dev_mode:  # a setting like any other: beyond loopback it must not admit a weak super user
        check_dev_admin_password(settings.weak_admin_password, args.host, settings.gateway)
    # Before the app opens the database: a server that cannot be bounded (no httptools) does not start.
    options = server_options(settings.http_forwarded_allow_ips, max_body_bytes=settings.http_request_max_bytes,
                             max_connections_per_ip=settings.http_max_connections_per_ip,
                             max_connections_per_ip_overrides=settings.http_max_connections_per_ip_overrides)
    app = build_app(settings)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, ssl_certfile=args.tls_cert,
                ssl_keyfile=args.tls_key, **options)
    return 0


def _up(args: argparse.Namespace) -> int:
    from kgov.up import run_up

    return run_up(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kgov", description="Security and governance for Apache Kafka")
    parser.add_argument("--version", action="version", version=f"kgov {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = sub.add_parser("serve", help="run the control plane (REST APIs)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    serve.add_argument("--tls-cert", type=Path, default=None, help="PEM certificate: serve HTTPS")
    serve.add_argument("--tls-key", type=Path, default=None, help="PEM private key for --tls-cert")
    _add_remote_flag(serve)
    serve.set_defaults(func=_serve)

    up = sub.add_parser("up", help="start the whole platform on embedded defaults")
    up.add_argument("--upstream", default=None, help="front an existing Kafka cluster (HOST:PORT)")
    up.add_argument("--data-dir", type=Path, default=None,
                    help="where kgov keeps its files (default: the data_dir setting, .kgov)")
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--port", type=int, default=8080, help="control-plane port")
    _add_remote_flag(up)
    up.set_defaults(func=_up)

    for module in (authz.cli, sasl.cli, encryption.cli, gateway.cli, spark_compliance.cli):
        module.register(sub)
    for child in sub.choices.values():
        _add_common_options(child)
    return parser


def _add_remote_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(REMOTE_FLAG, action="store_true",
                        help="serve plain HTTP/SASL_PLAINTEXT on a non-loopback address (TLS terminated in front)")


def _add_common_options(parser: argparse.ArgumentParser) -> None:
    """Every subcommand (and sub-subcommand) takes --config and --db, after its own name."""
    dests = {a.dest for a in parser._actions}
    if "config" not in dests:
        parser.add_argument("--config", type=Path, default=None, help="TOML settings file")
    if "db" not in dests:
        parser.add_argument("--db", default=None, help="database URL (default SQLite under ./.kgov)")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _add_common_options(child)


def describe_invalid_settings(exc: ValidationError) -> str:
    """One line per refused setting: where (the dotted name and its environment variable) and kgov's
    message, without pydantic's model names, error types and documentation links, which say nothing
    about kgov. The values are never shown (`hide_input_in_errors`: some are secrets)."""
    lines = []
    for error in exc.errors(include_url=False, include_input=False):
        message = str(error["msg"]).removeprefix("Value error, ")
        loc = [str(part) for part in error["loc"]]
        if not loc:
            lines.append(f"  {message}")
            continue
        where = ".".join(loc)
        if len(loc) <= 2 and all(isinstance(part, str) for part in error["loc"]):
            where += f" ({'KGOV_' + '__'.join(loc).upper()})"
        lines.append(f"  {where}: {message}")
    return "\n".join(lines)


# Libraries whose INFO lines are noise on a command line (httpx logs every request, py4j every
# connection it closes); their warnings still show.
_QUIET_LOGGERS = ("httpx", "httpcore", "py4j")


def main(argv: Sequence[str] | None = None) -> int:
    # Whoever configured logging first owns it: the `kgov` process, unless main runs inside another
    # program (the tests), whose logging is left as it was when main returns.
    owns_logging = not logging.getLogger().handlers
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet = [logging.getLogger(name) for name in _QUIET_LOGGERS]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.WARNING)
    try:
        return _main(argv)
    finally:
        if not owns_logging:  # a process of our own keeps them quiet to its end (py4j logs at exit)
            for logger, level in zip(quiet, levels, strict=True):
                logger.setLevel(level)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.settings = lambda: _settings_loader(args)
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # a reader that went away shows here, inside the handler below
    except ValidationError as exc:
        print(f"kgov: invalid settings:\n{describe_invalid_settings(exc)}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as exc:
        print(f"kgov: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`kgov acls --list | head`): stop quietly, as other command-line tools do,
        # and keep Python from writing a traceback when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return code
