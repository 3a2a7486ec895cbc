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

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from draligned.archive.store import Archive
from draligned.archive.verify import in_parallel

CHUNK = 8192
"""Files stat'ed per chunk of a fingerprint."""

MARKS = ".marks.json"
"""The marks file in the archive root."""


def fingerprint(archive: Archive, *folders: str) -> str:
    """The sha256 of every file's path, size, inode, mtime and ctime under the archive's folders (only the
    top-level ``folders`` given, when some are)."""
    if not archive.root.is_dir():
        return "no archive"
    return tree_fingerprint(archive.root, lambda e: e.is_dir(follow_symlinks=False)
                            and (not folders or e.name in folders))


def tree_fingerprint(root: Path, chosen: Callable[[os.DirEntry[str]], bool]) -> str:
    """The sha256 of the path, size, inode, mtime and ctime of every file under the ``chosen`` entries of
    ``root`` (a chosen file counts itself, a chosen folder everything in it). The files are listed here and
    stat'ed in chunks of CHUNK (one worker process per core for several chunks): each chunk's digest, in
    path order, goes into the fingerprint, so it does not depend on the number of cores."""
    paths: list[str] = []
    prefix = len(str(root)) + 1
    with os.scandir(root) as top:
        stack = [e for e in top if chosen(e)]
    while stack:
        entry = stack.pop()
        if entry.is_dir(follow_symlinks=False):
            with os.scandir(entry.path) as entries:
                stack.extend(entries)
        else:
            paths.append(entry.path[prefix:])
    paths.sort()
    chunks = [(str(root), paths[i:i + CHUNK]) for i in range(0, len(paths), CHUNK)]
    return hashlib.sha256("\n".join(in_parallel(_stat_digest, chunks, at_least=2)).encode()).hexdigest()


def _stat_digest(chunks: list[tuple[str, list[str]]]) -> list[str]:
    """Per chunk (root, relative paths): the sha256 of each file's path, size, inode, mtime and ctime."""
    digests = []
    for root, paths in chunks:
        stats: list[tuple[str, int, int, int, int] | tuple[str]] = []
        for rel in paths:
            try:
                st = os.lstat(os.path.join(root, rel))
            except FileNotFoundError:  # removed since it was listed: that changes the fingerprint too
                stats.append((rel,))
                continue
            stats.append((rel, st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns))
        digests.append(hashlib.sha256(repr(stats).encode()).hexdigest())
    return digests


def file_stamp(path: Path) -> str | None:
    """One file's size, inode, mtime and ctime (None when it does not exist): who replaced it changed it."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return f"{st.st_size}:{st.st_ino}:{st.st_mtime_ns}:{st.st_ctime_ns}"


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
    command its shortcut)."""
    path = archive.root / MARKS
    try:
        marks = json.loads(path.read_bytes())
        if not isinstance(marks, dict):
            marks = {}
    except (OSError, ValueError):
        marks = {}
    marks[key] = value
    try:
        fd, tmp = tempfile.mkstemp(dir=archive.root, prefix=".marks-", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(marks, f, sort_keys=True)
        os.replace(tmp, path)
    except OSError:  # a read-only archive: the shortcut is lost, nothing else
        return


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
