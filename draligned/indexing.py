"""The archive's index and verify, composed from every concept that derives tables or owns files.

The archive (:mod:`draligned.archive`) knows only its run records and blobs; the evaluator, the
CESS estimates and the reviews each supply an :class:`~draligned.archive.tables.ArchiveTables`.
This module sits above them all and is the one place that lists them: adding a derived table
means adding its supplier here, never editing the storage layer.

Both remember what they found at the archive's fingerprint (:mod:`draligned.archive.fingerprint`): a
command that finds the files unchanged since a verify found them intact, or since the index was built
from them, need not hash or index them again.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

from draligned.archive.fingerprint import (
    INDEXED,
    VERIFIED,
    file_stamp,
    fingerprint,
    holds,
    index_built_from,
    known_intact,
    remember,
    unit_digests,
)
from draligned.archive.index import connect as _open_index
from draligned.archive.index import index_path, rebuild_index
from draligned.archive.runs import RUN_TABLES
from draligned.archive.store import Archive
from draligned.archive.tables import ArchiveTables
from draligned.archive.verify import missing_records, verify_archive
from draligned.cess.archive_runs import CESS_TABLES
from draligned.evaluator.index import EVALUATOR_TABLES
from draligned.evaluator.review import REVIEW_FILES

DERIVED: tuple[ArchiveTables, ...] = (RUN_TABLES, CESS_TABLES, EVALUATOR_TABLES, REVIEW_FILES)
"""Every supplier, in the order their tables are created and filled."""

def rebuild(archive: Archive, files: str | None = None) -> Path:
    """Rebuild ``index.duckdb`` with every supplier's tables and mark it as built from the files at their
    fingerprint before the build (``files``, when the caller just took it); returns its path."""
    files = files or fingerprint(archive)
    path = rebuild_index(archive, DERIVED)
    remember(archive, INDEXED, files, index=file_stamp(path))
    return path


def refresh(archive: Archive, files: str | None = None) -> Path:
    """The index, rebuilt unless it was built from the files as they are now (fingerprint ``files``)."""
    files = files or fingerprint(archive)
    if not index_built_from(archive, files):
        rebuild(archive, files)
    return index_path(archive)


def verify(archive: Archive, files: str | None = None) -> list[str]:
    """One problem line per missing or altered file of any supplier; empty when the archive is intact (then
    marked verified at its fingerprint ``files`` taken by the caller before the check; or, without one, at
    the fingerprint of every file as stat'ed before it was read: the folders other than the blobs' before
    their files are read, while the blobs are hashed, and each blob folder as its blobs are hashed)."""
    if not archive.root.is_dir():
        return verify_archive(archive, DERIVED)
    if files is None:
        seen: dict[str, str] = {}
        problems = verify_archive(archive, DERIVED, seen, lambda: unit_digests(
            archive, lambda unit: not _is_blob_folder(archive, unit)))
        files = fingerprint(archive, known=seen)
    else:
        problems = verify_archive(archive, DERIVED)
    if not problems:
        remember(archive, VERIFIED, files)
    return problems


def _is_blob_folder(archive: Archive, unit: str) -> bool:
    """Whether a fingerprint unit is a ``blobs/xx`` folder (its digest is taken as its blobs are hashed)."""
    parent, name = os.path.split(unit)
    return len(name) == 2 and parent == os.path.join(archive.root, "blobs")


def verify_changed(archive: Archive, files: str | None = None) -> list[str]:
    """What :func:`verify` finds, without rehashing files that are unchanged since a verify found them
    intact (fingerprint ``files``): then only the run records the index lists and the disk lost are checked,
    unless the index is the one built from those files (another may list other runs). ``archive verify``
    always rehashes everything."""
    if not archive.root.is_dir():
        return verify(archive)
    files = files or fingerprint(archive)
    if known_intact(archive, files):
        return []
    if holds(archive, VERIFIED, files) is not None:
        return missing_records(archive)
    return verify(archive, files)


def ensure(archive: Archive) -> None:
    """Build the index if the archive has none yet (for readers of the index below this layer)."""
    if archive.root.is_dir() and not index_path(archive).exists():
        rebuild(archive)


def connect(archive: Archive) -> duckdb.DuckDBPyConnection:
    """Open the index read-only, building it first if it does not exist."""
    ensure(archive)
    return _open_index(archive)
