"""Executors run one agent context (or a root and its workers) through a frozen harness contract."""

from draligned.executors.base import Budget, Executor, Ledger, RunSetup
from draligned.executors.h00 import H00Executor
from draligned.executors.hd import HDExecutor
from draligned.executors.hw import HWExecutor

EXECUTORS: dict[str, type[Executor]] = {"H00": H00Executor, "H-W": HWExecutor, "H-D": HDExecutor}
"""The executor of each harness id; every harness with a contract in ``harnesses/`` has one."""


class UnknownHarness(LookupError):
    """A harness id with no executor."""


def executor_for(harness: str) -> type[Executor]:
    """The executor class of ``harness``; UnknownHarness naming the known harnesses when it has none."""
    try:
        return EXECUTORS[harness]
    except KeyError:
        raise UnknownHarness(f"no executor for harness {harness!r} (known: {', '.join(sorted(EXECUTORS))})") from None


__all__ = ["EXECUTORS", "Budget", "Executor", "H00Executor", "HDExecutor", "HWExecutor", "Ledger", "RunSetup",
           "UnknownHarness", "executor_for"]
