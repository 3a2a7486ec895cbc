"""The one forked pool (draligned/forked.py): its workers run tasks, and its fork leaves the caller's own
collector freeze (a study's, draligned.workers.run_loop) as it was."""

from __future__ import annotations

import gc
import os

import pytest

from draligned.forked import fork_pool


@pytest.mark.parametrize("caller_froze", [False, True])
def test_a_fork_pool_leaves_the_callers_freeze_as_it_was(caller_froze: bool) -> None:
    if caller_froze:
        gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        pool = fork_pool(1)
        try:
            assert pool.submit(os.getpid).result() != os.getpid()  # a forked worker ran it
        finally:
            pool.shutdown()
        assert (gc.get_freeze_count() >= frozen > 0) if caller_froze else gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
