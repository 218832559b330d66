"""`kgov audit generate`, `run`, `classify`, `verify` and `seal-public-key`, registered by `kgov.cli`."""

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
    from audit.kafka_sink import DEFAULT_TOPIC
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
    ver = sub.add_parser("verify", help="check the integrity chains of kgov's audit files or topic (exit 0: all "
                                        "verify; 1: some fail; 3: a topic's newest records are not signed yet)")
    where = ver.add_mutually_exclusive_group()
    where.add_argument("--dir", metavar="DIR", help="every audit file in DIR (default: [audit] dir)")
    where.add_argument("files", nargs="*", default=[], metavar="FILE",
                       help="audit files (with their rotations) to check instead of a directory")
    where.add_argument("--kafka-bootstrap", metavar="HOST:PORT[,...]",
                       help="check the seals of the audit topic on this cluster instead of files (audit.kafka_seal)")
    ver.add_argument("--key", metavar="FILE",
                     help="the key file the writers sealed with (default: [audit] integrity_key_file)")
    ver.add_argument("--anchor", action="append", default=[], metavar="SEAL",
                     help="a newest seal printed by an earlier verify (files: WRITER:SEQ:MAC, topic: "
                          "WRITER:EPOCH:SEQ:LINK), kept elsewhere: it must still be there (repeatable)")
    topic = ver.add_argument_group("topic mode (--kafka-bootstrap); the SASL password comes from "
                                   "KGOV_AUDIT__KAFKA_SASL_PASSWORD or --sasl-password-stdin")
    topic.add_argument("--topic", help=f"the audit topic (default: [audit] kafka_topic, {DEFAULT_TOPIC})")
    topic.add_argument("--public-key", action="append", default=[], metavar="FILE",
                       help="a writer's public key (PEM, from `kgov audit seal-public-key`; repeatable, one per "
                            "node; default: the public half of [audit] kafka_seal_key_file)")
    topic.add_argument("--security-protocol", default="PLAINTEXT",
                       choices=["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])
    topic.add_argument("--sasl-mechanism", default="SCRAM-SHA-512", choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
    topic.add_argument("--sasl-username", metavar="USER", help="needs READ and DESCRIBE on the topic")
    topic.add_argument("--sasl-password-stdin", action="store_true", help="read the SASL password from standard input")
    topic.add_argument("--ssl-ca-file", metavar="PEM")
    topic.add_argument("--ssl-cert-file", metavar="PEM")
    topic.add_argument("--ssl-key-file", metavar="PEM")
    topic.add_argument("--client", default="auto", choices=["auto", "librdkafka", "kafka-python"])
    topic.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                       help="to reach the cluster and read the topic to its end (default 60)")
    topic.add_argument("--missing-start-ok", action="store_true",
                       help="a chain whose first records are gone is a note, not a failure (a topic whose "
                            "retention deletes old records)")
    ver.set_defaults(func=_verify)
    pub = sub.add_parser("seal-public-key",
                         help="print the public key (PEM) that verifies the audit topic's seals of this node")
    pub.add_argument("--key", metavar="FILE",
                     help="the seal's private key file (default: [audit] kafka_seal_key_file, generated if absent)")
    pub.set_defaults(func=_seal_public_key)


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


_TOPIC_ONLY = ("topic", "public_key", "sasl_username", "sasl_password_stdin", "ssl_ca_file", "ssl_cert_file",
               "ssl_key_file", "missing_start_ok")


def counted(n: int, noun: str) -> str:
    """`1 record`, `2 records`."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _verify(args: argparse.Namespace) -> int:
    if args.kafka_bootstrap:
        if args.key:
            print("kgov audit verify: --key is the audit files' chain key; a topic's seals are checked with "
                  "--public-key FILE", file=sys.stderr)
            return 2
        return _verify_topic(args)
    if given := [name for name in _TOPIC_ONLY if getattr(args, name)]:
        print(f"kgov audit verify: --{given[0].replace('_', '-')} is for a topic: pass --kafka-bootstrap HOST:PORT",
              file=sys.stderr)
        return 2
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
        if report.ok:
            print(f"{report.file}: OK, {counted(report.records, 'record')}, {counted(report.writers, 'writer')}")
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


def _seal_public_key(args: argparse.Namespace) -> int:
    from audit.kafka_seal import SealKeyError, load_private_key, public_key_pem

    try:
        if args.key:
            key = load_private_key(Path(args.key))
        elif hasattr(args, "settings"):
            key = args.settings().audit_seal_private_key()
        else:
            print("kgov audit seal-public-key: pass --key FILE", file=sys.stderr)
            return 2
    except (SealKeyError, ValueError) as e:
        print(f"kgov audit seal-public-key: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(public_key_pem(key))
    return 0


def _verify_topic(args: argparse.Namespace) -> int:
    """`kgov audit verify --kafka-bootstrap`: reads the topic to its current end and checks every chain."""
    from pydantic import SecretStr, ValidationError

    from audit.kafka_seal import Anchor, SealKeyError, load_public_keys, verify_records
    from audit.kafka_sink import DEFAULT_TOPIC, KafkaAuditSettings
    from audit.kafka_topic_reader import TopicReadError, read_topic

    def fail(message: str) -> int:
        print(f"kgov audit verify: {message}", file=sys.stderr)
        return 2

    try:
        anchors = [Anchor.parse(a) for a in args.anchor]
    except ValueError as e:
        return fail(str(e))
    if args.topic is None:
        args.topic = args.settings().audit.kafka_topic if hasattr(args, "settings") else DEFAULT_TOPIC
    password = (sys.stdin.readline().rstrip("\r\n") if args.sasl_password_stdin
                else os.environ.get("KGOV_AUDIT__KAFKA_SASL_PASSWORD"))
    try:
        # The sink's own settings model: the same checks (a SASL protocol needs a user and a password, TLS
        # files only with TLS) and the same connection code (audit.kafka_topic_reader).
        settings = KafkaAuditSettings(
            kafka_bootstrap_servers=args.kafka_bootstrap, kafka_topic=args.topic,
            kafka_security_protocol=args.security_protocol, kafka_sasl_mechanism=args.sasl_mechanism,
            kafka_sasl_username=args.sasl_username,
            kafka_sasl_password=SecretStr(password) if password is not None and args.security_protocol.startswith(
                "SASL_") else None,
            kafka_ssl_ca_file=args.ssl_ca_file, kafka_ssl_cert_file=args.ssl_cert_file,
            kafka_ssl_key_file=args.ssl_key_file, kafka_client=args.client)
    except ValidationError as e:
        return fail("; ".join(str(err["msg"]).removeprefix("Value error, ") for err in e.errors()))
    try:
        if args.public_key:
            keys = load_public_keys(Path(k) for k in args.public_key)
        elif hasattr(args, "settings"):
            keys = load_public_keys([args.settings().audit_seal_key_file])
        else:
            return fail("pass --public-key FILE")
    except (SealKeyError, ValueError) as e:
        return fail(f"{e}; pass --public-key FILE, a writer's public key (kgov audit seal-public-key)")
    try:
        report = verify_records(read_topic(settings, args.topic, timeout_s=args.timeout), keys, anchors=anchors,
                                missing_start_ok=args.missing_start_ok)
    except (TopicReadError, ImportError, OSError) as e:
        return fail(f"cannot read topic {args.topic}: {e}")
    print(f"topic {args.topic}: {counted(report.records, 'record')}, {counted(len(report.chains), 'chain')}")
    for chain in report.chains:
        verified = f"{counted(chain.verified, 'record')} verified (seq {chain.first_seq}-{chain.last_seq})" + (
            f", {chain.duplicates} duplicate(s) sent again" if chain.duplicates else "")
        if chain.pending_seqs is not None:
            # Neither verified nor disproved: no checkpoint (signed record) after them yet.
            first, last = chain.pending_seqs
            verified += f", {chain.pending} NOT YET SIGNED (seq {first}-{last}: no checkpoint after them yet)"
        state = "FAILED" if not chain.ok else "OK" if not chain.pending else "OK so far"
        print(f"{chain.name} (key {chain.key_id.hex()}): {state}, {verified}")
        for problem in chain.problems:
            print(f"  problem: {problem}")
        for note in chain.notes:
            print(f"  note: {note}")
        if chain.newest is not None:
            # Keep it elsewhere: records cut from the end of this chain show against it (--anchor).
            print(f"  newest seal: {chain.newest}")
    for what, found in (("without a kgov-seal header (unsigned)", [(p, o, "") for p, o in report.unsigned]),
                        ("with a malformed kgov-seal header", report.malformed),
                        ("whose seal does not verify (forged or signed by another key)", report.forged)):
        if found:
            print(f"FAILED: {len(found)} record(s) {what}:")
            for partition, offset, why in found[:20]:
                print(f"  partition {partition} offset {offset}{': ' + why if why else ''}")
            if len(found) > 20:
                print(f"  and {len(found) - 20} more")
    for anchor in anchors:
        gone = anchor in report.anchors_missing
        print(f"anchor {anchor}: {'MISSING (records cut from the end, or replaced)' if gone else 'found'}")
    if not report.ok:
        return 1
    if report.pending:
        # A distinct exit: nothing failed, but not every record is verified yet (verify again later).
        print(f"{report.pending} record(s) not yet signed: verify again after their writer's next checkpoint")
        return 3
    return 0


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (`python -m spark_compliance.cli audit ...`) until `kgov.cli` wires `register`."""
    parser = argparse.ArgumentParser(prog="kgov")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
