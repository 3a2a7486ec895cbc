"""``draligned`` in child processes for the tests where the process boundary is the point (signals, kill -9,
locks and indexes shared between processes)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from pathlib import Path

from draligned.workers import adopt, fork_server_context
from tests.study_helpers import REPO

#: ``python -m draligned.cli`` with Ctrl-C restored first: a child inherits an *ignored* SIGINT from a test
#: process started as a background job, and Python then installs no KeyboardInterrupt handler, so a SIGINT
#: sent by the test would be lost (and the test wait forever). Set in the child itself, not by a
#: ``preexec_fn`` (unsafe while the test's loopback server threads run).
CLI = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
       "runpy.run_module('draligned.cli', run_name='__main__', alter_sys=True)")


def start_cli(args: list[str], log: Path, new_session: bool = False) -> subprocess.Popen[bytes]:
    """Start ``draligned ARGS`` (this checkout's) with its stdout and stderr in the file ``log``: a pipe the
    test does not read while it waits would fill with progress lines and stall the child. ``new_session``
    gives it a process group of its own (to kill it with the workers it starts)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-c", CLI, *args], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=new_session)


#: What the forked commands load (``draligned.cli`` imports a command's modules only when it runs): loaded
#: once, in the fork server, rather than once per child.
PRELOAD = ["draligned.cli.archive", "draligned.cli.run", "draligned.cli.evaluate", "draligned.cli.report",
           "draligned.archive_summary", "draligned.indexing", "draligned.workflow", "draligned.analysis.render",
           "draligned.analysis.plan", "draligned.guards", "draligned.evaluator.config", "draligned.workers",
           "tests.processes"]


def _cli_in_child(args: list[str], log: str, env: dict[str, str], cwd: str,
                  setup: Callable[[], object] | None) -> None:
    """A forked child's body: this test's environment and directory, Ctrl-C as in a fresh interpreter,
    output to ``log``, ``setup`` (a test's patch), then exit with ``draligned ARGS``'s code."""
    from draligned.cli import main

    adopt(env, cwd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(out, 1)
    os.dup2(out, 2)
    if setup is not None:
        setup()
    try:
        code = main(args)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(code)


def fork_server() -> multiprocessing.context.ForkServerContext:
    """The fork server's context: its children are forked from a server that loaded draligned once, so they
    start cheaply, each with its own locks, file handles and DuckDB connections, as separate ``draligned``
    commands have. The one server of the process also forks ``--workers`` workers, hence
    ``draligned.workers`` in its preload whichever starts it first."""
    return fork_server_context(PRELOAD)


def fork_cli(args: list[str], log: Path, setup: Callable[[], object] | None = None) -> BaseProcess:
    """Start ``draligned ARGS`` in a process forked by the fork server, output in the file ``log``; a
    picklable ``setup`` (e.g. a ``functools.partial`` of a module-level function) runs in the child first.
    Signal it with ``os.kill(proc.pid, ...)``; ``proc.join()`` then gives ``proc.exitcode`` (the command's
    code, or minus the signal that killed it)."""
    proc = fork_server().Process(target=_cli_in_child, args=(args, str(log), dict(os.environ), os.getcwd(), setup))
    proc.start()
    return proc


def run_cli_at_once(commands: list[list[str]], logs: Path) -> list[tuple[int | None, str]]:
    """Run ``draligned C`` for each command ``C`` in a process of its own (:func:`fork_cli`), all at the
    same time, and return each one's exit code and output (written to ``logs/<n>.log``)."""
    logs.mkdir(parents=True, exist_ok=True)
    procs = [fork_cli(c, logs / f"{n}.log") for n, c in enumerate(commands)]
    for proc in procs:
        proc.join()
    return [(p.exitcode, (logs / f"{n}.log").read_text()) for n, p in enumerate(procs)]
