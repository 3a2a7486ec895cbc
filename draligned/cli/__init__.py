"""The `draligned` command line: each concept registers its own subcommands.

Only the module of the command being run is imported (a command's handlers pull in what they need: DuckDB,
the evaluator, the report); the others appear in the top-level help through COMMANDS alone.
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import sys
from collections.abc import Iterable

EVALUATOR_HELP = ("an evaluator id this archive was read by, or the evaluator's TOML file (either is accepted "
                  "by every command)")
"""The ``--evaluator`` help shared by every command that takes one."""
NO_VERIFY_HELP = "do not check the archive's hashes first (faster on a big archive; not recommended)"
"""The ``--no-verify`` help shared by the commands that check the archive first."""

COMMANDS: dict[str, tuple[str, str]] = {
    "cards": ("cards", "validate, export and construct factor cards"),
    "run": ("run", "run a study (resumes: finished slots are skipped)"),
    "demo": ("demo", "run the bundled offline demo study with the simulated agent"),
    "archive": ("archive", "inspect, verify and index an archive"),
    "acquisition": ("acquisition", "web acquisition: export what an archive saw as a corpus, or its figures"),
    "read": ("evaluate", "read an archive with an evaluator (idempotent, resumable)"),
    "states": ("evaluate", "directional states from an evaluator's reads"),
    "agreement": ("evaluate", "exact agreement and Cohen's kappa per phase"),
    "review": ("evaluate", "blinded human review sheets"),
    "cess": ("cess", "CESS candidate-pool estimates (estimate, simulate, bench)"),
    "report": ("report", "write the audit report (md, html, CSV, Parquet) of an archive"),
    "plan": ("report", "analysis plans"),
    "sandbox": ("sandbox", "run a command in the H-W/H-D shell sandbox"),
}
"""Each top-level command: the module ``draligned.cli.<module>`` whose ``register(subparsers)`` adds it (and
sets ``func`` on its parsers), and its one-line help."""


def add_command(sub: argparse._SubParsersAction, name: str, description: str | None = None
                ) -> argparse.ArgumentParser:
    """The parser of top-level command ``name``, with its help from COMMANDS (what a module's register calls)."""
    return sub.add_parser(name, help=COMMANDS[name][1], description=description)


def package_version() -> str:
    """The installed distribution's version; a checkout that was never installed says so instead."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("draligned")
    except PackageNotFoundError:
        return "unknown (not installed: running from a source checkout)"


class _VersionAction(argparse.Action):
    """``--version``: print the version and exit (looked up only when asked)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show program's version number and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print(f"{parser.prog} {package_version()}")
        parser.exit()


def build_parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser with every command registered, or only the modules of ``commands`` (the other
    commands are named with their help, so the top-level help and an unknown-command error list them all)."""
    parser = argparse.ArgumentParser(
        prog="draligned",
        description="Counterfactual behavioural evaluation of deep-research agents.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True)
    wanted = {COMMANDS[c][0] for c in (COMMANDS if commands is None else commands)}
    registered: set[str] = set()
    for name, (module, help_) in COMMANDS.items():
        if module not in wanted:
            sub.add_parser(name, help=help_)
        elif module not in registered:
            importlib.import_module(f"draligned.cli.{module}").register(sub)
            registered.add(module)
    return parser


def reader_gone(fd: int) -> bool:
    """Whether ``fd`` is the write end of a pipe that its reader has closed (poll reports POLLERR on it). Only
    then is a BrokenPipeError the output's reader stopping early; one from any other pipe or socket the
    command used (a sandbox's, a model server's) is a fault to report, never an exit code of 0."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def one_blas_thread() -> None:
    """Numpy's OpenBLAS to one thread unless the user chose (``OPENBLAS_NUM_THREADS``). The commands spread their
    own work over the cores (row groups in threads, slots in worker processes, which inherit this), and OpenBLAS
    starts a thread per core at import that spins for about 0.1 s beside them: 0.13 of the 1.6 CPU-s of `cess
    estimate` on 10^6 trajectories. Ray gives its workers OMP_NUM_THREADS=1 for the same reason. It takes effect
    where numpy is imported after it, as every command imports it."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    one_blas_thread()
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)  # top-level options take no values
    parser = build_parser([command] if command in COMMANDS else [])
    args = parser.parse_args(argv)
    try:
        code = args.func(args)
    except BrokenPipeError:
        if not reader_gone(sys.stdout.fileno()):  # a pipe inside the command broke: a fault, not `| head`
            raise
        # The output's reader stopped early (`| head`): what is left to print goes nowhere, quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        from draligned.guards import REFUSALS

        if not isinstance(exc, REFUSALS):
            raise
        print(f"error: {exc}", file=sys.stderr)  # one rule for every command: name what is wrong, exit 2
        return 2
    return int(code or 0)
