"""The pool-search study is run once per session and shared by the pool tests (read-only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from draligned.archive import Archive
from tests.pool.helpers import write_pool_study
from tests.study_helpers import run


@pytest.fixture(scope="session")
def pool_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The study file: travel card, P and Q, 2 seeds, the four selection x stopping cells, K = 3."""
    return write_pool_study(tmp_path_factory.mktemp("pool-study"))


@pytest.fixture(scope="session")
def pool_archive(pool_study: Path) -> Archive:
    """Its archive after one complete run (16 runs)."""
    result = run(pool_study)
    assert result.statuses["completed"] == result.slots == 16
    return result.archive
