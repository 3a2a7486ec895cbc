"""Executors run one agent context (or a root and its workers) through a frozen harness contract."""

from draligned.executors.base import Budget, Ledger, RunSetup, RunWriter
from draligned.executors.h00 import H00Executor

EXECUTORS = {"H00": H00Executor}

__all__ = ["Budget", "EXECUTORS", "H00Executor", "Ledger", "RunSetup", "RunWriter"]
