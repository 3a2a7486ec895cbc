"""File layout and append-only, atomic writes.

Layout under an archive root::

    blobs/ab/<sha256>             every text that matters, named by the sha256 of its bytes
    runs/<run_id>.started.json    written when a run starts (kept forever, even if interrupted)
    runs/<run_id>.json            the sealed run record, written once when the run ends
    index.duckdb                  derived; ``draligned archive reindex`` rebuilds it

Nothing is ever replaced: writing an existing path with different bytes raises. During a study run
(``Archive.group_commit``) the writes go to a writer thread that makes many files durable per sync
(``draligned/archive/commit.py``); ``Archive.durable`` waits for them.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from json.encoder import encode_basestring as _quote  # the C encoder json.dumps itself uses
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from draligned.archive.commit import GroupCommit
from draligned.archive.errors import ArchiveError, refuse_overwrite
from draligned.hashing import canonical_json, sha256_bytes
from draligned.records import RunRecord

__all__ = ["Archive", "ArchiveError", "indented_json", "is_stale_temp", "json_file_bytes", "record_bytes",
           "remove_stale_temp_files", "stale_temp_files", "write_once"]


def write_once(path: Path, data: bytes) -> bool:
    """Atomically create ``path`` with ``data``; True if written, False if identical bytes exist.

    Uses a temp file in the same directory and ``os.link`` (which never clobbers), so a
    crash leaves either no file or the complete file, and an existing file is never replaced.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        if path.read_bytes() == data:
            return False
        refuse_overwrite(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            if path.read_bytes() != data:
                refuse_overwrite(path)
            return False
    finally:
        os.unlink(tmp)
    return True


KNOWN_BLOBS = 65536
"""Blob names a group commit remembers as queued (then it forgets them: a repeat is checked on disk)."""

STALE_TEMP_S = 300
"""A ``write_once`` temp file older than this was left by a killed writer (a live write takes far less)."""


def stale_temp_files(archive: Archive, blob_folders: bool = True) -> list[Path]:
    """``.tmp-*`` files that killed ``write_once`` calls left (in ``blobs/xx/`` unless not ``blob_folders``,
    ``runs/``, ``reads/``, ``reviews/``), sorted (listed with ``os.listdir`` and ``os.walk``: pathlib's recursive
    glob took half a second at 50,000 evaluator files)."""
    now = time.time()
    root = str(archive.root)
    shards = _names(os.path.join(root, "blobs")) if blob_folders else []
    listed = [(folder, _names(folder)) for folder in [os.path.join(root, "runs")] + [
        os.path.join(root, "blobs", p) for p in shards if len(p) == 2]]
    for top in ("reads", "reviews"):  # os.walk has listed each folder's files already
        listed += [(dirpath, files) for dirpath, _, files in os.walk(os.path.join(root, top))]
    out = []
    for folder, names in listed:
        for name in names:
            if not name.startswith(".tmp-"):
                continue
            path = os.path.join(folder, name)
            if is_stale_temp(path, now):
                out.append(Path(path))
    return sorted(out)


def is_stale_temp(path: str, now: float) -> bool:
    """Whether the ``.tmp-*`` file ``path`` is older than :data:`STALE_TEMP_S` at ``now`` (gone: its writer
    just finished)."""
    try:
        return now - os.stat(path).st_mtime > STALE_TEMP_S
    except FileNotFoundError:
        return False


def _names(folder: str) -> list[str]:
    """The entry names of a folder (none when it does not exist)."""
    try:
        return os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []


def remove_stale_temp_files(archive: Archive) -> list[Path]:
    """Remove the leftovers ``stale_temp_files`` finds (they never were part of the archive); returns them."""
    stale = stale_temp_files(archive)
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def json_file_bytes(obj: Any) -> bytes:
    """The on-disk bytes of an archive's JSON file (a run record, a packet, a read): indented JSON with sorted
    keys and a newline."""
    return (indented_json(obj) + "\n").encode()


def record_bytes(record: RunRecord) -> bytes:
    """The on-disk bytes of a run record."""
    return json_file_bytes(record.model_dump(mode="json"))


def sealed_record_bytes(record: RunRecord) -> tuple[RunRecord, bytes]:
    """``record.sealed()`` and its ``record_bytes``, from one dump of the record (``RunRecord.sealed_dump``):
    every run writes a started marker and a final record. The bytes are those of
    ``record_bytes(record.sealed())``."""
    sealed, body = record.sealed_dump()
    return sealed, json_file_bytes(body)


def indented_json(obj: Any) -> str:
    """``json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False)``, the same characters, about twice as
    fast: with ``indent`` the standard library falls back to its pure-Python encoder, and every finished run
    writes its record through here. Anything beyond plain JSON types (non-str keys, subclasses) goes to
    ``json.dumps`` itself."""
    out: list[str] = []
    try:
        _indent(obj, 0, out)
    except TypeError:
        return json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False)
    return "".join(out)


def _indent(o: Any, depth: int, out: list[str]) -> None:
    kind = type(o)
    if kind is str:
        out.append(_quote(o))
    elif kind is dict or kind is list:
        mapping = kind is dict
        if not o:
            out.append("{}" if mapping else "[]")
            return
        sep = "\n" + " " * (depth + 1)
        out.append("{" if mapping else "[")
        for i, item in enumerate(sorted(o) if mapping else o):
            out.append(sep if i == 0 else "," + sep)
            if mapping:
                out.append(_quote(item))  # TypeError for a non-str key (json.dumps converts those)
                out.append(": ")
                item = o[item]
            _indent(item, depth + 1, out)
        out.append("\n" + " " * depth + ("}" if mapping else "]"))
    elif o is None:
        out.append("null")
    elif o is True:
        out.append("true")
    elif o is False:
        out.append("false")
    elif kind is int:
        out.append(int.__repr__(o))
    elif kind is float and math.isfinite(o):
        out.append(float.__repr__(o))
    else:
        raise TypeError(kind.__name__)


class Archive:
    """An archive root on disk."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._commit: GroupCommit | None = None
        self._known: set[str] = set()
        """Blob names put during the current group commit (a repeated text is not queued again)."""

    # ------------------------------------------------------------------ group commit
    @contextmanager
    def group_commit(self) -> Iterator[None]:
        """Within: writes go to a writer thread that makes them durable in batches (``await durable()``
        before telling anyone a run has ended, or a read is counted). On leaving, everything queued is made
        durable. Not re-entrant: an inner one would close the outer's writer."""
        if self._commit is not None:
            raise RuntimeError(f"{self.root}: a group commit is already open on this archive")
        self._commit, self._known = GroupCommit(self.root), set()
        try:
            yield
        finally:
            commit, self._commit = self._commit, None
            commit.close()

    async def durable(self) -> None:
        """Return once every write made so far is durable (at once outside ``group_commit``); raises the
        ArchiveError of a write that was refused."""
        if self._commit is not None:
            await asyncio.wrap_future(self._commit.barrier())

    def put_file(self, path: Path, data: bytes) -> None:
        """Write a file (never replaced) that names blobs put before it, such as an evaluator's packet or read:
        under ``group_commit`` linked only once those blobs are durable, as a run record is; else
        ``write_once``."""
        if self._commit is None:
            write_once(path, data)
        else:
            self._commit.write(str(path), data, record=True)

    # ------------------------------------------------------------------ blobs
    def blob_path(self, sha: str) -> Path:
        """Where the blob with this sha256 lives."""
        return self.root / "blobs" / sha[:2] / sha

    def put_blob(self, data: bytes | str) -> str:
        """Store bytes (str is UTF-8 encoded) and return their sha256."""
        raw = data.encode("utf-8") if isinstance(data, str) else data
        sha = sha256_bytes(raw)
        if self._commit is None:
            write_once(self.blob_path(sha), raw)
        elif sha not in self._known:  # a blob's name is its bytes' hash: a repeat is the same file
            if len(self._known) >= KNOWN_BLOBS:  # bounded: a long study's memory must not grow with it
                self._known.clear()
            self._known.add(sha)
            self._commit.write(f"{self.root}/blobs/{sha[:2]}/{sha}", raw)
        return sha

    def put_json_blob(self, obj: object) -> str:
        """Store the canonical JSON of ``obj`` and return its sha256."""
        return self.put_blob(canonical_json(obj))

    def get_blob(self, sha: str, verify: bool = True) -> bytes:
        """Read a blob; with ``verify`` raise ArchiveError if its bytes no longer match its name."""
        path = self.blob_path(sha)
        queued = None if self._commit is None else self._commit.pending.get(str(path))
        if queued is not None:
            return queued
        if not path.exists():
            raise ArchiveError(f"{path}: blob missing")
        data = path.read_bytes()
        if verify and sha256_bytes(data) != sha:
            raise ArchiveError(f"{path}: blob altered (sha256 {sha256_bytes(data)})")
        return data

    def get_text(self, sha: str) -> str:
        """Read a verified blob as UTF-8 text."""
        return self.get_blob(sha).decode("utf-8")

    def blob_files(self) -> dict[str, str]:
        """Every blob on disk: its name (the sha256 it must have) -> its path (one directory scan per prefix,
        no path object per blob: pathlib's glob took most of a second at 120,000 blobs)."""
        base = str(self.root / "blobs")
        found: dict[str, str] = {}
        for prefix in _names(base):
            if len(prefix) == 2:
                folder = os.path.join(base, prefix)
                found.update((n, os.path.join(folder, n)) for n in _names(folder) if not n.startswith(".tmp-"))
        return found

    def blob_names(self) -> set[str]:
        """The names of every blob on disk (what :meth:`blob_files` lists, without building a path per blob)."""
        base = str(self.root / "blobs")
        return {n for prefix in _names(base) if len(prefix) == 2
                for n in _names(os.path.join(base, prefix)) if not n.startswith(".tmp-")}

    def blob_shas(self) -> list[str]:
        """All blob names on disk, sorted."""
        return sorted(self.blob_files())

    # ------------------------------------------------------------------ run records
    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    def write_started(self, record: RunRecord) -> bytes:
        """Write the started marker of a run (status ``started``); returns the marker's bytes."""
        data = sealed_record_bytes(record)[1]
        self.put_file(self.runs_dir / f"{record.run_id}.started.json", data)
        return data

    def write_record(self, record: RunRecord) -> RunRecord:
        """Seal and write the final record of a run; returns the sealed record."""
        sealed, data = sealed_record_bytes(record)
        self.put_file(self.runs_dir / f"{record.run_id}.json", data)
        return sealed

    def run_names(self) -> tuple[list[str], list[str]]:
        """The names of the sealed run records and of the started markers, each sorted (no hidden files),
        from one directory scan and without a path object per file (a third of the time of planning a
        resume at 20,000 runs)."""
        try:
            with os.scandir(self.runs_dir) as entries:
                names = sorted(e.name for e in entries if e.name.endswith(".json") and not e.name.startswith("."))
        except (FileNotFoundError, NotADirectoryError):  # no runs yet, or a path that is no archive
            return [], []
        return [n for n in names if not n.endswith(".started.json")], [n for n in names if n.endswith(".started.json")]

    def record_paths(self) -> list[Path]:
        """Final run record files, sorted by name."""
        return [self.runs_dir / n for n in self.run_names()[0]]

    def started_paths(self) -> list[Path]:
        """Started markers, sorted by name."""
        return [self.runs_dir / n for n in self.run_names()[1]]

    @staticmethod
    def load_record(path: Path) -> RunRecord:
        """Parse a run record file (no hash check; see ``verify``); ArchiveError naming it if unreadable."""
        try:
            return RunRecord.model_validate_json(path.read_bytes())
        except ValidationError as exc:
            raise ArchiveError(f"{path}: unreadable run record ({exc.errors()[0]['msg']}); "
                               f"run 'draligned archive verify' on the archive") from None

    def records(self) -> list[RunRecord]:
        """All final run records."""
        return [self.load_record(p) for p in self.record_paths()]

    def started(self) -> list[RunRecord]:
        """All started markers."""
        return [self.load_record(p) for p in self.started_paths()]

    def find_run(self, run_id: str) -> RunRecord:
        """The final record of a run, or its started marker if it never ended."""
        for path in (self.runs_dir / f"{run_id}.json", self.runs_dir / f"{run_id}.started.json"):
            if path.exists():
                return self.load_record(path)
        raise ArchiveError(f"{self.runs_dir}: no run {run_id!r}")
