"""The archive: content-addressed blobs, append-only run records and a derived DuckDB index."""

from draligned.archive.store import Archive, ArchiveError

__all__ = ["Archive", "ArchiveError"]
