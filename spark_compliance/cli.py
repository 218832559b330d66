"""`kgov audit generate` and `kgov audit run`, registered by `kgov.cli`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds this package's subcommands; each sets `func(args) -> int`."""
    from spark_compliance.job import add_run_arguments

    audit = subparsers.add_parser("audit", help="compliance audits of Kafka and kgov logs on Spark")
    sub = audit.add_subparsers(dest="audit_command", required=True)
    gen = sub.add_parser("generate", help="write synthetic mixed-format logs with planted incidents")
    gen.add_argument("--lines", type=int, required=True, metavar="N")
    gen.add_argument("--seed", type=int, default=1, metavar="S")
    gen.add_argument("--out", required=True, metavar="DIR")
    gen.set_defaults(func=_generate)
    run = sub.add_parser("run", help="ingest logs, write the reports, findings.json and report.html")
    add_run_arguments(run)
    run.set_defaults(func=_run)


def _generate(args: argparse.Namespace) -> int:
    from spark_compliance.generator import generate

    try:
        planted = generate(Path(args.out), args.lines, args.seed, progress=lambda m: print(m, file=sys.stderr))
    except ValueError as e:
        print(f"kgov audit generate: {e}", file=sys.stderr)
        return 2
    print(f"{args.lines} lines, {len(planted)} planted incidents: {Path(args.out) / 'planted.json'}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from pyspark.errors import AnalysisException

    from spark_compliance.inventory import InventoryError
    from spark_compliance.job import options_from_args, run
    from spark_compliance.session import SessionError

    try:
        summary = run(options_from_args(args))
    except (InventoryError, SessionError) as e:
        print(f"kgov audit run: {e}", file=sys.stderr)
        return 2
    except AnalysisException as e:  # e.g. an input path that does not exist
        print(f"kgov audit run: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    found = sum(summary["findings_by_rule"].values())
    print(f"{summary['events']} events, {summary['bad_lines']} bad lines, {found} findings: "
          f"{args.out}/findings.json, {args.out}/report.html")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (`python -m spark_compliance.cli audit ...`) until `kgov.cli` wires `register`."""
    parser = argparse.ArgumentParser(prog="kgov")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
