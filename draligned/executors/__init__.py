"""Executors run one agent context (or a root and its workers) through a frozen harness contract."""

from draligned.executors.base import Budget, Ledger, RunSetup
from draligned.executors.h00 import H00Executor
from draligned.executors.hd import HDExecutor
from draligned.executors.hw import HWExecutor

EXECUTORS = {"H00": H00Executor, "H-W": HWExecutor, "H-D": HDExecutor}

__all__ = ["EXECUTORS", "Budget", "H00Executor", "HDExecutor", "HWExecutor", "Ledger", "RunSetup"]
