"""The archive's index and verify, composed from every concept that derives tables or owns files.

The archive (:mod:`draligned.archive`) knows only its run records and blobs; the evaluator, the
CESS estimates and the reviews each supply an :class:`~draligned.archive.tables.ArchiveTables`.
This module sits above them all and is the one place that lists them: adding a derived table
means adding its supplier here, never editing the storage layer.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from draligned.archive.index import connect as _open_index
from draligned.archive.index import index_path, rebuild_index
from draligned.archive.runs import RUN_TABLES
from draligned.archive.store import Archive
from draligned.archive.tables import ArchiveTables
from draligned.archive.verify import verify_archive
from draligned.cess.archive_runs import CESS_TABLES
from draligned.evaluator.index import EVALUATOR_TABLES
from draligned.evaluator.review import REVIEW_FILES

DERIVED: tuple[ArchiveTables, ...] = (RUN_TABLES, CESS_TABLES, EVALUATOR_TABLES, REVIEW_FILES)
"""Every supplier, in the order their tables are created and filled."""


def rebuild(archive: Archive) -> Path:
    """Rebuild ``index.duckdb`` with every supplier's tables; returns its path."""
    return rebuild_index(archive, DERIVED)


def verify(archive: Archive) -> list[str]:
    """One problem line per missing or altered file of any supplier; empty when the archive is intact."""
    return verify_archive(archive, DERIVED)


def ensure(archive: Archive) -> None:
    """Build the index if the archive has none yet (for readers of the index below this layer)."""
    if archive.root.is_dir() and not index_path(archive).exists():
        rebuild(archive)


def connect(archive: Archive) -> duckdb.DuckDBPyConnection:
    """Open the index read-only, building it first if it does not exist."""
    ensure(archive)
    return _open_index(archive)
