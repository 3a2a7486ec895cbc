"""A fingerprint of an archive's files, and the marks that remember what was true at one fingerprint.

The fingerprint is one sha256 over every file under the archive's folders (``blobs/``, ``runs/``, ``reads/``,
...): its path, size, inode, mtime and ctime (ns). Adding, removing, replacing or writing to any file changes
it, and ctime cannot be set back by a user tool, so an equal fingerprint means the same files with the same
bytes as when it was taken, bar damage below the filesystem (which ``archive verify`` always rehashes). Files
directly in the archive root (the derived index, the locks, the marks) are not part of it.

The marks (``ARCHIVE/.marks.json``, derived and disposable like the index) say what a command found at a
fingerprint, made by code with one source fingerprint: a clean verify, an index built from those files, a
read that left nothing to read. A command that finds its mark at the current fingerprints can skip
recomputing it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Callable, Mapping
from functools import cache, partial
from pathlib import Path
from typing import Any

from draligned.archive.store import Archive
from draligned.archive.verify import about_as_many, in_parallel, stats_digest, unit_stats

MARKS = ".marks.json"
"""The marks file in the archive root."""

STAT_PARALLEL_FROM = 20_000
"""Files from which a fingerprint stats its units in worker processes (below it one process is done first:
forking the workers costs more than a few thousand ``stat`` calls, about 5 µs each)."""

VERIFIED, INDEXED = "verified", "indexed"
"""The marks of a clean verify and of an index build (made by :mod:`draligned.indexing`)."""

INDEX = "index.duckdb"
"""The derived index's file in the archive root (built and read by :mod:`draligned.archive.index`)."""


def fingerprint(archive: Archive, *folders: str, known: Mapping[str, str] | None = None) -> str:
    """The sha256 of every file's path, size, inode, mtime and ctime under the archive's folders (only the
    top-level ``folders`` given, when some are); with ``known`` (:func:`unit_digests` taken earlier, or
    while the files were read), no file is stat'ed: a unit not in it makes a fingerprint no later one equals."""
    if not archive.root.is_dir():
        return "no archive"
    return tree_fingerprint(archive.root, lambda e: e.is_dir(follow_symlinks=False)
                            and (not folders or e.name in folders), known)


def unit_digests(archive: Archive, take: Callable[[str], bool]) -> dict[str, str]:
    """The digests of the archive's fingerprint units (folders) whose path ``take`` accepts, stat'ed now."""
    all_units, _, nested = _units(archive.root, lambda e: e.is_dir(follow_symlinks=False))
    units = [u for u in all_units if take(u[0])]
    digests = _digests(archive.root, units, nested)
    return {path: digest for (path, _), digest in zip(units, digests, strict=True)}


def tree_fingerprint(root: Path, chosen: Callable[[os.DirEntry[str]], bool],
                     known: Mapping[str, str] | None = None) -> str:
    """The sha256 of the path, size, inode, mtime and ctime of every file under the ``chosen`` entries of
    ``root`` (a chosen file counts itself, a chosen folder everything in it). Each chosen folder's own files
    and each of its subfolders are one unit, stat'ed in a worker process per core when there are many
    (or taken from ``known``: then a unit not in it counts as unseen); each unit's digest, in path order,
    goes into the fingerprint, so it does not depend on the number of cores."""
    units, files, nested = _units(root, chosen)
    if known is None:
        digests = _digests(root, units, nested)
    else:
        digests = [known.get(path, "unseen") for path, _ in units]
    lines = [f"{path}:{digest}" for (path, _), digest in zip(units, digests, strict=True)]
    lines += [f"{name}:{stats_digest([(name, os.lstat(root / name))])}" for name in sorted(files)]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _units(root: Path, chosen: Callable[[os.DirEntry[str]], bool]
           ) -> tuple[list[tuple[str, bool]], list[str], set[str]]:
    """The fingerprint's units under ``root`` (a chosen folder, not recursive; each of its subfolders,
    recursive), sorted; the chosen files directly in ``root``; and the recursive units known to hold
    folders (a folder's link count is 2 plus its subfolders on most filesystems; where it says nothing,
    a unit only loses its place at the front)."""
    units: list[tuple[str, bool]] = []  # (a folder, whether its subfolders count too)
    files: list[str] = []
    nested: set[str] = set()
    with os.scandir(root) as top:
        for entry in top:
            if not chosen(entry):
                continue
            if not entry.is_dir(follow_symlinks=False):
                files.append(entry.name)
                continue
            units.append((entry.path, False))
            with os.scandir(entry.path) as entries:
                for e in entries:
                    if e.is_dir(follow_symlinks=False):
                        units.append((e.path, True))
                        if e.stat(follow_symlinks=False).st_nlink > 2:
                            nested.add(e.path)
    return sorted(units), files, nested


def _digests(root: Path, units: list[tuple[str, bool]], nested: set[str]) -> list[str]:
    """Each unit's digest, in order; in a worker process per core when the units hold many files, the
    ``nested`` units (folders of folders: at 4,000 runs an evaluator's 52,000 files in one unit, 0.3 of the
    archive) first, each on its own, so that the other workers share the rest meanwhile."""
    many = about_as_many([path for path, _ in units], STAT_PARALLEL_FROM)
    first = [i for i, (path, _) in enumerate(units) if path in nested]
    return in_parallel(partial(_unit_digests, len(str(root)) + 1), units, 0 if many else math.inf, first)


def _unit_digests(prefix: int, units: list[tuple[str, bool]]) -> list[str]:
    """Per unit (folder, recursive): the digest of every file's path (after ``prefix`` characters) and stat."""
    return [stats_digest(unit_stats(prefix, path, recursive)) for path, recursive in units]


def file_stamp(path: Path) -> str | None:
    """One file's size, inode, mtime and ctime (None when it does not exist): who replaced it changed it."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return f"{st.st_size}:{st.st_ino}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def index_built_from(archive: Archive, files: str) -> bool:
    """Whether the index file there now is the one this code built from the files at fingerprint ``files``
    (an index written to or replaced since has another stamp)."""
    return holds(archive, INDEXED, files, index=file_stamp(archive.root / INDEX)) is not None


def index_state(archive: Archive, files: str) -> str | None:
    """What the index holds: "built from the files" when this code built it from the files at fingerprint
    ``files``, otherwise its file stamp (None when there is none): an index written to since is told apart."""
    return "built from the files" if index_built_from(archive, files) else file_stamp(archive.root / INDEX)


def known_intact(archive: Archive, files: str) -> bool:
    """Whether a verify by this code found the files at fingerprint ``files`` intact and the index there now
    was built from those same files: then nothing a verify checks has changed since, the run records the
    index lists included (it lists those files' runs), and the archive needs no check at all."""
    return holds(archive, VERIFIED, files) is not None and index_built_from(archive, files)


def holds(archive: Archive, key: str, files: str, **facts: Any) -> dict[str, Any] | None:
    """The mark under ``key`` if it was made at the fingerprint ``files`` by this code with these ``facts``."""
    mark = read_mark(archive, key)
    want = {"files": files, "code": code_fingerprint(), **facts}
    return mark if isinstance(mark, dict) and all(mark.get(k) == v for k, v in want.items()) else None


def remember(archive: Archive, key: str, files: str, **facts: Any) -> None:
    """Mark ``key`` as found at the fingerprint ``files`` by this code, with ``facts``."""
    write_mark(archive, key, {"files": files, "code": code_fingerprint(), **facts})


def read_mark(archive: Archive, key: str) -> Any:
    """The mark stored under ``key``, or None (no marks file, an unreadable one, or no such mark)."""
    try:
        return json.loads((archive.root / MARKS).read_bytes()).get(key)
    except (OSError, ValueError, AttributeError):
        return None


def write_mark(archive: Archive, key: str, value: Any) -> None:
    """Store ``value`` under ``key`` (atomic replace; a mark lost to a concurrent writer only costs the next
    command its shortcut). A mark already stored as ``value`` is left as it is: a command that found what
    the marks said writes nothing."""
    path = archive.root / MARKS
    try:
        marks = json.loads(path.read_bytes())
        if not isinstance(marks, dict):
            marks = {}
    except (OSError, ValueError):
        marks = {}
    if marks.get(key) == value:
        return
    marks[key] = value
    try:
        fd, tmp = tempfile.mkstemp(dir=archive.root, prefix=".marks-", suffix=".tmp")
    except OSError:  # a read-only archive: the shortcut is lost, nothing else
        return
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(marks, f, sort_keys=True)
        os.replace(tmp, path)
    except OSError:  # e.g. a full disk: the shortcut is lost, and no temporary file is left in the archive
        with contextlib.suppress(OSError):
            os.unlink(tmp)


@cache
def code_fingerprint() -> str:
    """The sha256 of this installation's source files: a mark made by other code is never trusted."""
    h = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]
    for dirpath, _, names in sorted(os.walk(package)):
        for name in sorted(n for n in names if n.endswith(".py")):
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                h.update(path[len(str(package)):].encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()
