"""`kgov` subcommands of `sasl`, registered by `kgov.cli`."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds this package's subcommands; each sets `func(args) -> int`."""
