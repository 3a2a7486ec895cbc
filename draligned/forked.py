"""The one pool of forked worker processes, for CPU-bound checks whose Python holds the GIL (the JSON
Lines trajectory load, the archive's verify)."""

from __future__ import annotations

import gc
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context


def fork_pool(workers: int, initializer: Callable[[], object] | None = None) -> ProcessPoolExecutor:
    """``workers`` processes forked now, at once, before the pool's own thread starts (a fork copies other
    threads' locks in an unknown state; spawned workers would import the caller's main module again).
    Idle, they share their pages with this process; their garbage collections skip what they inherited
    (``gc.freeze``), so those pages stay shared rather than copied. A freeze the caller already holds
    (``draligned.workers.run_loop``'s, for a study) is left as it was: ``gc.unfreeze`` would end it too."""
    pool = ProcessPoolExecutor(workers, mp_context=get_context("fork"), initializer=initializer)
    caller_froze = gc.get_freeze_count() > 0
    gc.freeze()
    try:
        pool.submit(int)  # a fork pool forks every worker at its first task, then starts its own thread
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        if not caller_froze:
            gc.unfreeze()
    return pool
