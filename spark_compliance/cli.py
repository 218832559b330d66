"""`kgov audit generate`, `run`, `classify` and `verify`, registered by `kgov.cli`."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds this package's subcommands; each sets `func(args) -> int`."""
    from spark_compliance.job import add_run_arguments

    audit = subparsers.add_parser("audit", help="compliance audits of Kafka and kgov logs on Spark")
    sub = audit.add_subparsers(dest="audit_command", required=True)
    gen = sub.add_parser("generate", help="write synthetic mixed-format logs with planted incidents")
    gen.add_argument("--lines", type=int, required=True, metavar="N",
                     help="log lines in all, at least 5000 (a week of logs from 11 files)")
    gen.add_argument("--seed", type=int, default=1, metavar="S", help="the same seed writes the same logs (default 1)")
    gen.add_argument("--out", required=True, metavar="DIR",
                     help="where the logs go, with planted.json, inventory.json and classification.json")
    gen.set_defaults(func=_generate)
    run = sub.add_parser("run", help="ingest logs, write the reports, findings.json and report.html")
    add_run_arguments(run)
    run.set_defaults(func=_run)
    cls = sub.add_parser("classify", help="write the topic-classification file from a schema registry's tags")
    cls.add_argument("--registry", required=True, metavar="URL",
                     help="base URL of a registry speaking Confluent's REST API (kgov, Confluent, Karapace)")
    cls.add_argument("--user", help="HTTP Basic user; the password comes from KGOV_PASSWORD or --password-stdin")
    cls.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    cls.add_argument("--bearer-token-env", metavar="VAR",
                     help="send the bearer token held in this environment variable instead of HTTP Basic")
    cls.add_argument("--ca-file", metavar="PEM", help="CA bundle for an https:// registry")
    cls.add_argument("--allow-plain-http", action="store_true",
                     help="send credentials over http:// to a registry that is not on loopback")
    cls.add_argument("--merge", metavar="FILE",
                     help="an existing classification file: its topics and approved principals are kept")
    cls.add_argument("--out", required=True, metavar="FILE")
    cls.set_defaults(func=_classify)
    ver = sub.add_parser("verify", help="check the integrity chains of kgov's audit files (exit 0: all verify)")
    where = ver.add_mutually_exclusive_group()
    where.add_argument("--dir", metavar="DIR", help="every audit file in DIR (default: [audit] dir)")
    where.add_argument("files", nargs="*", default=[], metavar="FILE",
                       help="audit files (with their rotations) to check instead of a directory")
    ver.add_argument("--key", metavar="FILE",
                     help="the key file the writers sealed with (default: [audit] integrity_key_file)")
    ver.add_argument("--anchor", action="append", default=[], metavar="SEAL",
                     help="a newest seal printed by an earlier verify (WRITER:SEQ:MAC), kept elsewhere: it must "
                          "still be there (repeatable)")
    ver.set_defaults(func=_verify)


def _generate(args: argparse.Namespace) -> int:
    from spark_compliance.generator import generate

    try:
        planted = generate(Path(args.out), args.lines, args.seed, progress=lambda m: print(m, file=sys.stderr))
    except ValueError as e:
        print(f"kgov audit generate: {e}", file=sys.stderr)
        return 2
    print(f"{args.lines} lines, {len(planted)} planted incidents: {Path(args.out) / 'planted.json'}")
    return 0


_URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def missing_local_paths(args: argparse.Namespace) -> list[str]:
    """The local paths among `--input`, `--inventory` and `--classification` that do not exist.

    Checked before Spark starts, which takes half a minute or more before Spark itself would say
    so. Paths with another scheme (`hdfs://nn/`, `hdfs:/`, `s3a://`: Hadoop's `Path` takes `NAME:` before
    the first `/` as one) and Spark's glob patterns are left to Spark."""
    named = [*args.input, args.inventory, args.classification]
    missing = []
    for path in (str(p) for p in named if p is not None):
        local = path.removeprefix("file://") if path.startswith("file://") else path.removeprefix("file:")
        if _URI_SCHEME.match(local) or any(c in local for c in "*?[{"):
            continue
        if not Path(local).exists():
            missing.append(path)
    return missing


def _run(args: argparse.Namespace) -> int:
    from pyspark.errors import AnalysisException

    from spark_compliance.inventory import InventoryError
    from spark_compliance.job import OutputError, options_from_args, run
    from spark_compliance.session import SessionError

    missing = missing_local_paths(args)
    if missing:
        print(f"kgov audit run: no such file or directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        summary = run(options_from_args(args))
    except (InventoryError, SessionError, OutputError) as e:
        print(f"kgov audit run: {e}", file=sys.stderr)
        return 2
    except AnalysisException as e:  # e.g. an input path that does not exist
        print(f"kgov audit run: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    found = sum(summary["findings_by_rule"].values())
    print(f"{summary['events']} events, {summary['bad_lines']} bad lines, {found} findings: "
          f"{args.out}/findings.json, {args.out}/report.html")
    return 0


def _classify(args: argparse.Namespace) -> int:
    from spark_compliance.registry_tags import (
        ClassifyError,
        RegistryAccess,
        classification,
        fetch_schemas,
        subject_tags,
    )

    def fail(message: str) -> int:
        print(f"kgov audit classify: {message}", file=sys.stderr)
        return 2

    password = token = None
    if args.bearer_token_env:
        token = os.environ.get(args.bearer_token_env)
        if not token:
            return fail(f"--bearer-token-env: the environment variable {args.bearer_token_env} is empty or unset")
    elif args.user is not None:
        password = sys.stdin.readline().rstrip("\r\n") if args.password_stdin else os.environ.get("KGOV_PASSWORD")
        if not password:
            return fail("--user needs a password (KGOV_PASSWORD or --password-stdin)")
    merge = None
    if args.merge:
        try:
            merge = json.loads(Path(args.merge).read_text())
        except (OSError, ValueError) as e:
            return fail(f"--merge {args.merge}: {e}")
        if not isinstance(merge, dict):
            return fail(f"--merge {args.merge}: expected a JSON object")
    try:
        schemas = fetch_schemas(RegistryAccess(args.registry, args.user, password, token, args.ca_file,
                                                 args.allow_plain_http))
        tags = subject_tags(schemas)
        doc, skipped = classification(tags, merge)
    except ClassifyError as e:
        return fail(str(e))
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    for subject in skipped:
        print(f"kgov audit classify: {subject!r} is tagged but names no topic (not '<topic>-key' or "
              "'<topic>-value'); list its topics under 'topics' by hand", file=sys.stderr)
    tagged = sum(1 for v in tags.values() if v)
    print(f"{len(schemas)} schema versions, {len(tags)} subjects, {tagged} tagged: {args.out}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from audit.integrity import (
        IntegrityKeyError,
        audit_files_in,
        load_key,
        missing_anchors,
        verify_directory,
        verify_paths,
    )

    def fail(message: str) -> int:
        print(f"kgov audit verify: {message}", file=sys.stderr)
        return 2

    settings: Any = None
    if not args.key or not (args.dir or args.files):
        if not hasattr(args, "settings"):  # the standalone entry has no settings to take defaults from
            return fail("pass --key FILE and --dir DIR (or the files)")
        settings = args.settings()
    try:
        key = load_key(Path(args.key) if args.key else settings.audit_integrity_key_file)
    except IntegrityKeyError as e:
        return fail(f"{e}; pass --key FILE, the key the audit files were sealed with")
    directory: Path | None = None
    if args.files:
        paths = [Path(f) for f in args.files]
        if missing := [str(p) for p in paths if not p.exists()]:
            return fail(f"no such file: {', '.join(missing)}")
        if folders := [p for p in paths if p.is_dir()]:
            return fail(f"{folders[0]} is a directory: pass --dir {folders[0]}")
    else:
        directory = Path(args.dir) if args.dir else settings.audit_dir
        if not directory.is_dir():
            return fail(f"{directory} is not a directory")
        paths = audit_files_in(directory)
        if not paths:
            return fail(f"no audit files in {directory}")
    try:
        # A directory is listed again under each family's lock: kgov may be writing and rotating it.
        reports = verify_paths(paths, key) if directory is None else verify_directory(directory, key)
    except OSError as e:  # unreadable, or a directory where a file was
        return fail(f"cannot read {e.filename}: {e.strerror}")
    for report in reports:
        writers = f"{report.writers} writer{'s' if report.writers != 1 else ''}"
        if report.ok:
            print(f"{report.file}: OK, {report.records} records, {writers}")
        else:
            more = f" (and {len(report.problems) - 1} more)" if len(report.problems) > 1 else ""
            print(f"{report.file}: FAILED, {report.problems[0]}{more}")
        for note in report.notes:
            print(f"  note: {note}")
        if report.head is not None and report.newest:
            # Keep this elsewhere (a ticket, another host): records cut from the tail show against it.
            print(f"  newest seal: {report.head}")
    gone = missing_anchors(paths, args.anchor)
    for anchor in args.anchor:
        print(f"anchor {anchor}: {'MISSING (records cut from the end, or files replaced)' if anchor in gone else 'found'}")
    return 0 if all(r.ok for r in reports) and not gone else 1


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (`python -m spark_compliance.cli audit ...`) until `kgov.cli` wires `register`."""
    parser = argparse.ArgumentParser(prog="kgov")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
