"""`kgov encryption ...`: manage key-encryption keys and re-encrypt topics after a rotation.

    kgov encryption keys create NAME   [--key-ring PATH | --vault-url URL]
    kgov encryption keys rotate NAME   [...]
    kgov encryption keys list          [...]
    kgov encryption reencrypt --bootstrap HOST:PORT --topic TOPIC --key NAME [...]

The local key ring defaults to `<data_dir>/keyring.json` (data_dir from the settings, `.kgov`).
Vault's token is read from the `VAULT_TOKEN` environment variable only, never from the command line
(argv is visible to every user of the machine).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from encryption.errors import EncryptionError
from encryption.kms import Kms, LocalKms


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds `kgov encryption`; each leaf sets `func(args) -> int`."""
    parser = subparsers.add_parser("encryption", help="end-to-end encryption: KEKs and re-encryption")
    commands = parser.add_subparsers(dest="encryption_command", metavar="COMMAND", required=True)

    keys = commands.add_parser("keys", help="create, rotate and list key-encryption keys")
    key_commands = keys.add_subparsers(dest="keys_command", metavar="COMMAND", required=True)
    create = key_commands.add_parser("create", help="create a key-encryption key (version 1)")
    create.add_argument("name")
    create.set_defaults(func=_create)
    rotate = key_commands.add_parser("rotate", help="add a new current version; old versions stay readable")
    rotate.add_argument("name")
    rotate.set_defaults(func=_rotate)
    listing = key_commands.add_parser("list", help="key names and current versions")
    listing.set_defaults(func=_list)

    reencrypt = commands.add_parser(
        "reencrypt", help="rewrite a topic's latest record per key under the current KEK version"
    )
    reencrypt.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers HOST:PORT[,...]")
    reencrypt.add_argument("--topic", required=True)
    reencrypt.add_argument("--key", required=True, help="name of the key-encryption key")
    reencrypt.add_argument(
        "--client-property", action="append", default=[], metavar="NAME=VALUE",
        help="extra librdkafka property for the consumer and producer (repeatable)",
    )
    reencrypt.add_argument(
        "--command-config", type=Path, default=None, metavar="FILE",
        help="librdkafka properties, one NAME=VALUE per line ('#' comments), as Kafka's tools take them: "
             "keeps the SASL password off the command line; --client-property overrides",
    )
    reencrypt.add_argument("--timeout", type=float, default=30.0)
    reencrypt.set_defaults(func=_reencrypt)

    for leaf in (create, rotate, listing, reencrypt):
        leaf.add_argument("--key-ring", type=Path, default=None, help="local key ring (default <data_dir>/keyring.json)")
        leaf.add_argument("--vault-url", default=None, help="use Vault Transit at this URL: https, or http on loopback only (token: $VAULT_TOKEN)")
        leaf.add_argument("--vault-mount", default="transit", help="Transit mount point (default transit)")


def open_kms(args: argparse.Namespace) -> Kms:
    if args.vault_url:
        from encryption.vault import VaultTransitKms

        token = os.environ.get("VAULT_TOKEN")
        if not token:
            raise EncryptionError("set VAULT_TOKEN to use --vault-url")
        return VaultTransitKms(url=args.vault_url, token=token, mount_point=args.vault_mount)
    path = args.key_ring
    if path is None:
        path = Path(args.settings().data_dir) / "keyring.json"
    return LocalKms(path)


def _run(args: argparse.Namespace, action: str) -> int:
    try:
        kms = open_kms(args)
        if action == "create":
            print(f"created {args.name} version {kms.create_key(args.name)}")
        elif action == "rotate":
            print(f"rotated {args.name} to version {kms.rotate_key(args.name)}")
        elif action == "list":
            names = kms.key_names() if hasattr(kms, "key_names") else []
            for name in names:
                print(f"{name}\tversion {kms.current_version(name)}")
        else:
            try:
                from encryption.reencrypt import Reencryptor, reencrypt_topic
            except ImportError as exc:
                raise EncryptionError(f"`kgov encryption reencrypt` needs confluent-kafka ({exc})") from exc

            config = client_config(args.bootstrap, args.command_config, args.client_property)
            report = reencrypt_topic(config, args.topic, Reencryptor(kms, args.key), timeout=args.timeout)
            print(
                f"read {report.read} records; rewrote {report.rewritten}, {report.already_current} already "
                f"current, {report.tombstones} tombstones"
            )
    except EncryptionError as exc:
        print(f"kgov: {exc}", file=sys.stderr)
        for note in getattr(exc, "__notes__", ()):  # e.g. how far a stopped re-encryption got
            print(f"kgov: {note}", file=sys.stderr)
        return 1
    return 0


def client_config(bootstrap: str, command_config: Path | None, properties: list[str]) -> dict[str, str]:
    """The consumer's and producer's librdkafka settings: the bootstrap servers, then the file's
    properties, then each `--client-property`. A line that is not NAME=VALUE is refused by its number,
    never echoed (it may hold a password)."""
    config: dict[str, str] = {"bootstrap.servers": bootstrap}
    if command_config is not None:
        try:
            text = command_config.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise EncryptionError(f"cannot read --command-config {command_config}: "
                                  f"{getattr(exc, 'strerror', None) or 'not UTF-8 text'}") from None
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith(("#", "!")):
                continue
            name, sep, value = line.partition("=")
            if not sep or not name.strip():
                raise EncryptionError(f"--command-config {command_config}, line {number}: not NAME=VALUE")
            config[name.strip()] = value.strip()
    for item in properties:
        name, sep, value = item.partition("=")
        if not sep:
            raise EncryptionError(f"--client-property needs NAME=VALUE, got {item!r}")
        config[name] = value
    return config


def _create(args: argparse.Namespace) -> int:
    return _run(args, "create")


def _rotate(args: argparse.Namespace) -> int:
    return _run(args, "rotate")


def _list(args: argparse.Namespace) -> int:
    return _run(args, "list")


def _reencrypt(args: argparse.Namespace) -> int:
    return _run(args, "reencrypt")
