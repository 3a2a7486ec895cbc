"""The archive: content-addressed blobs, append-only run records and a derived DuckDB index.

The ground floor: it imports nothing from ``draligned`` but ``records`` and ``hashing``.
"""

from draligned.archive.store import Archive, ArchiveError

__all__ = ["Archive", "ArchiveError"]
