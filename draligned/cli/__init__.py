"""The `draligned` command line: each concept registers its own subcommands."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from importlib.metadata import PackageNotFoundError, version

from draligned.guards import REFUSALS

# Each module defines ``register(subparsers)`` and sets ``func`` on its parsers.
_COMMAND_MODULES = ("cards", "run", "archive", "acquisition", "evaluate", "cess", "report", "sandbox")


def package_version() -> str:
    """The installed distribution's version; a checkout that was never installed says so instead."""
    try:
        return version("draligned")
    except PackageNotFoundError:
        return "unknown (not installed: running from a source checkout)"


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every registered command."""
    parser = argparse.ArgumentParser(
        prog="draligned",
        description="Counterfactual behavioural evaluation of deep-research agents.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in _COMMAND_MODULES:
        importlib.import_module(f"draligned.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = args.func(args)
    except REFUSALS as exc:  # one rule for every command: name what is wrong, exit 2, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into a reader that stopped early (e.g. `| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return int(code or 0)
