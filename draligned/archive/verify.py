"""Recompute every hash in an archive and name each missing or altered file.

The archive checks its own files (blobs and run records); every other concept's files are checked
by the verify of the :class:`~draligned.archive.tables.ArchiveTables` it supplies.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import orjson
from pydantic import ValidationError

from draligned.archive.store import Archive, is_stale_temp, stale_temp_files
from draligned.archive.tables import ArchiveTables
from draligned.forked import fork_pool
from draligned.hashing import sha256_bytes, sha256_json
from draligned.records import RunRecord

Item = TypeVar("Item")
T = TypeVar("T")
R = TypeVar("R")

PARALLEL_FROM = 2000
"""Files from which verify checks them in worker processes (forking workers costs about 20 ms each)."""

CHUNK = 256
"""Files checked at a time in this process (the run records' blob references are reduced chunk by chunk)."""


BLOBS_PARALLEL_FROM = 10_000
"""Blobs from which their folders are hashed in worker processes (below it one process is done first: forking
the workers costs more than hashing a few thousand small files, about 20 µs each)."""

SAMPLE = 8
"""Folders listed to judge how many files a list of alike folders holds (:func:`about_as_many`)."""


def verify_archive(archive: Archive, tables: Sequence[ArchiveTables], seen: dict[str, str] | None = None,
                   stat_first: Callable[[], dict[str, str]] | None = None) -> list[str]:
    """One problem line per missing or altered file: altered blobs (hashed here, a ``blobs/xx`` folder at a
    time in a worker process per core) and the files of every supplier (sorted); empty when the archive is
    intact. ``seen`` gets each blob folder's :func:`stats_digest`, its files stat'ed just before they were
    read (a fingerprint's part that costs no second pass over 120,000 blobs), and what ``stat_first``
    returns: it runs while the workers hash the blobs, before any supplier reads a file.

    One pool of workers, forked before anything else starts, checks everything (:func:`shared_workers`):
    the blobs first, then each supplier's files as it hands them over. The suppliers run side by side in
    threads of this process, so their listing and reducing overlaps the workers' hashing instead of
    leaving a core idle between one check and the next (a small archive is checked here, in order)."""
    if not archive.root.exists():
        return [f"{archive.root}: archive does not exist"]
    base = os.path.join(archive.root, "blobs")
    shards = sorted(os.path.join(base, p) for p in _folders(base) if len(p) == 2)
    prefix = len(str(archive.root)) + 1
    parallel = about_as_many(shards, BLOBS_PARALLEL_FROM)
    with shared_workers(parallel):
        hashing = in_chunks(partial(_altered_shards, prefix), shards, 0 if parallel else math.inf)
        if stat_first is not None and seen is not None:
            seen.update(stat_first())
        if _POOL:
            with ThreadPoolExecutor(max(1, len(tables))) as suppliers:
                owned = list(suppliers.map(lambda supplier: supplier.verify(archive), tables))
        else:  # a small archive: everything in this process, one check after the other
            owned = [supplier.verify(archive) for supplier in tables]
        checked = [found for part in hashing for found in part]
    if seen is not None:
        seen.update((shard, digest) for shard, (digest, _) in zip(shards, checked, strict=True))
    problems = {line for _, found in checked for line in found}
    return sorted(problems | {line for found in owned for line in found})


_POOL: list[ProcessPoolExecutor] = []
"""The pool of :func:`shared_workers` while one is open (every :func:`in_chunks` inside it uses it)."""

_HERE: list[bool] = []
"""Not empty while a :func:`shared_workers` that declined is open: every :func:`in_chunks` inside checks in
this process (one rule decides for a whole verify, not one per supplier)."""


@contextmanager
def shared_workers(wanted: bool = True) -> Iterator[None]:
    """One forked worker process per core for every :func:`in_chunks` inside (when ``wanted`` and there are
    two cores or more): forked once, here, before any thread starts, instead of a pool per check; when not
    ``wanted``, every check inside runs in this process."""
    workers = min(os.cpu_count() or 1, 8)
    if _POOL or workers < 2:
        yield
        return
    if not wanted:
        _HERE.append(True)
        try:
            yield
        finally:
            _HERE.pop()
        return
    with fork_pool(workers) as pool:
        _POOL.append(pool)
        try:
            yield
        finally:
            _POOL.pop()


def about_as_many(folders: Sequence[str], files: int) -> bool:
    """Whether ``folders`` hold about ``files`` files or more, judged from :data:`SAMPLE` of them spread evenly
    (the folders it is asked about hold alike numbers: blobs fall evenly into their ``blobs/xx`` shards)."""
    if not folders:
        return False
    picked = folders[::max(1, len(folders) // SAMPLE)]
    listed = 0
    for folder in picked:
        with suppress(FileNotFoundError, NotADirectoryError), os.scandir(folder) as entries:
            listed += sum(1 for _ in entries)
    return listed * len(folders) >= files * len(picked)


def _folders(path: str) -> list[str]:
    """The names of the folders in ``path`` (none when it is no folder)."""
    try:
        with os.scandir(path) as entries:
            return [e.name for e in entries if e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _altered_shards(prefix: int, shards: list[str]) -> list[tuple[str, list[str]]]:
    """Per blob folder: the digest of its files' stats (each blob's taken on its open file just before it
    is read: one stat per blob, not two) and a problem line per blob whose bytes no longer hash to its name
    and per leftover of an interrupted write (the other folders' leftovers are :func:`verify_records`')."""
    checked = []
    for shard in shards:
        with os.scandir(shard) as entries:
            listed = sorted((e.path, e.name, e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False))
                            for e in entries)
        found: list[tuple[str, os.stat_result]] = []
        problems = []
        now = time.time()
        for path, name, is_dir, is_file in listed:
            if name.startswith(".tmp-") and is_stale_temp(path, now):
                problems.append(leftover(path))
            if is_dir:  # no blob: its files count in the fingerprint as the fingerprint stats them
                found += unit_stats(prefix, path, recursive=True)
                continue
            if name.startswith(".tmp-"):  # a write in progress or a leftover (named above)
                with suppress(FileNotFoundError):  # its writer just finished
                    found.append((path[prefix:], os.lstat(path)))
                continue
            data, st = _read_stat(path) if is_file else (read_file(path), os.lstat(path))  # a link: lstat'ed
            found.append((path[prefix:], st))
            if (actual := sha256_bytes(data)) != name:
                problems.append(f"{path}: altered blob (content sha256 {actual})")
        checked.append((stats_digest(found), problems))
    return checked


def unit_stats(prefix: int, path: str, recursive: bool) -> list[tuple[str, os.stat_result]]:
    """Every file in the folder ``path`` (and in its subfolders when ``recursive``): its path after ``prefix``
    characters, and its ``lstat``."""
    found: list[tuple[str, os.stat_result]] = []
    stack = [path]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if recursive:
                        stack.append(entry.path)
                else:
                    with suppress(FileNotFoundError):  # a write's temporary file, just renamed by its writer
                        found.append((entry.path[prefix:], entry.stat(follow_symlinks=False)))
    return found


def stats_digest(found: list[tuple[str, os.stat_result]]) -> str:
    """The sha256 of each file's path, size, inode, mtime and ctime, in path order."""
    found.sort(key=lambda f: f[0])
    return hashlib.sha256(repr([(p, st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
                                for p, st in found]).encode()).hexdigest()


def verify_records(archive: Archive) -> list[str]:
    """Unreadable or altered run records, missing blobs they reference, missing run record files and
    leftovers of interrupted writes outside the blob folders (checked in a worker process per core; the blobs'
    bytes and the blob folders' leftovers are checked by :func:`verify_archive` as it hashes them)."""
    problems = record_problems(archive, parallel=True)
    return problems + [leftover(str(p)) for p in stale_temp_files(archive, blob_folders=False)]


def leftover(path: str) -> str:
    """The problem line of a leftover ``.tmp-*`` file of an interrupted write."""
    return (f"{path}: leftover of an interrupted write (removed by the next 'draligned run' or "
            f"'draligned archive reindex')")


def in_parallel(check: Callable[[list[Item]], list[T]], items: list[Item], at_least: float = PARALLEL_FROM,
                first: Sequence[int] = ()) -> list[T]:
    """``check`` over ``items`` in chunks, in one forked worker process per core when there are ``at_least``
    items (fewer are checked here: starting workers would cost more); results in order. The items at the
    indexes ``first`` (the ones known to be large) are checked first, each in a chunk of its own: a worker
    starts on each while the others share the rest, and none is left alone with one at the end."""
    alone = set(first)
    order = [*first, *(i for i in range(len(items)) if i not in alone)]
    found = [f for part in in_chunks(check, [items[i] for i in order], at_least, len(first)) for f in part]
    by_index = dict(zip(order, found, strict=True))  # one result per item
    return [by_index[i] for i in range(len(items))]


def in_chunks(check: Callable[[list[Item]], R], items: list[Item], at_least: float = PARALLEL_FROM,
              alone: int = 0) -> Iterator[R]:
    """What :func:`in_parallel` finds, chunk by chunk as the chunks are checked (a caller that reduces each
    chunk's results holds one chunk's, not all of them); in workers, each of the first ``alone`` items is a
    chunk of its own. In the pool of :func:`shared_workers` the chunks are handed over at once (their results
    are taken in order as they come), else to a pool of its own."""
    workers = min(os.cpu_count() or 1, 8)
    if workers < 2 or len(items) < at_least or (_HERE and not _POOL):
        return (check(items[start:start + CHUNK]) for start in range(0, len(items), CHUNK))
    size = -(-(len(items) - alone) // (workers * 4)) or 1
    chunks = [items[i:i + 1] for i in range(alone)] + [items[i:i + size] for i in range(alone, len(items), size)]
    if _POOL:
        return _POOL[-1].map(check, chunks)
    return _own_pool(check, chunks, workers)


def _own_pool(check: Callable[[list[Item]], R], chunks: list[list[Item]], workers: int) -> Iterator[R]:
    """``check`` over ``chunks`` in a pool of ``workers`` forked processes, results in order."""
    with fork_pool(workers) as pool:
        yield from pool.map(check, chunks)


def read_file(path: str) -> bytes:
    """A file's bytes in one ``read`` of its size (a third less time per small file than ``open().read()``);
    read on to the end should it have grown."""
    return _read_stat(path)[0]


def _read_stat(path: str) -> tuple[bytes, os.stat_result]:
    """A file's bytes (as :func:`read_file` reads them) and the ``fstat`` of the open file taken first."""
    fd = os.open(path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        data = os.read(fd, st.st_size + 1)  # a regular file reads whole up to its end: fewer bytes means the end
        while len(data) > st.st_size and (more := os.read(fd, 1 << 20)):
            data += more
    finally:
        os.close(fd)
    return data, st


def record_problems(archive: Archive, parallel: bool = False) -> list[str]:
    """The run records' part of verify (no blob is hashed, so it is cheap enough for every ``run``):
    unreadable or altered records, missing blobs they reference, missing record files; ``parallel`` checks
    the records in worker processes.

    Another process may be writing the archive (shards sharing it): a record is linked only after the blobs
    it names, so the run files are listed before the blobs, and a blob missing from a listing made earlier
    is looked up again before it is called missing."""
    sealed, started = archive.run_names()
    blobs = archive.blob_names()
    paths = [os.path.join(archive.runs_dir, name) for name in started + sealed]

    def missing_of(shas: set[str]) -> set[str]:
        return {sha for sha in shas if sha not in blobs and not archive.blob_path(sha).exists()}

    def name_missing(chunk: list[str], missing: set[str]) -> list[str]:
        named: list[str] = []
        for found, refs in _record_chunk(chunk):
            named += found
            named += [f"{archive.blob_path(sha)}: missing {kind} blob referenced by {name}"
                      for sha, kind, name in refs if sha in missing]
        return named

    return blob_referencing_problems(_record_chunk_shas, paths, missing_of, name_missing,
                                     PARALLEL_FROM if parallel else math.inf) + missing_records(archive)


def blob_referencing_problems(check: Callable[[list[Item]], tuple[list[str], set[str]]], items: list[Item],
                              missing_of: Callable[[set[str]], set[str]],
                              name_missing: Callable[[list[Item], set[str]], list[str]],
                              at_least: float = PARALLEL_FROM) -> list[str]:
    """The problems ``check`` finds in files that reference blobs, chunk by chunk (in worker processes from
    ``at_least`` items): a chunk sends back its problem lines and the blobs it references, each once (a few
    thousand names, not a reference per file); a chunk with blobs ``missing_of`` calls missing is checked
    again here by ``name_missing``, which names every reference, in order."""
    problems: list[str] = []
    for found, shas, chunk in in_chunks(partial(_echoed, check), items, at_least):
        missing = missing_of(shas)
        problems += name_missing(chunk, missing) if missing else found
    return problems


def _echoed(check: Callable[[list[Item]], tuple[list[str], set[str]]], chunk: list[Item]
            ) -> tuple[list[str], set[str], list[Item]]:
    """``check``'s problems and blobs for ``chunk``, with the chunk (its items are named again if need be)."""
    found, shas = check(chunk)
    return found, shas, chunk


def _record_chunk_shas(paths: list[str]) -> tuple[list[str], set[str]]:
    """The records' problems and the blobs they reference (each once)."""
    checked = _record_chunk(paths)
    return [p for found, _ in checked for p in found], {sha for _, refs in checked for sha, _, _ in refs}


def _record_chunk(paths: list[str]) -> list[tuple[list[str], list[tuple[str, str, str]]]]:
    """Each record's problems and its blob references (sha256, kind, record file name)."""
    checked = []
    for path in paths:
        problems: list[str] = []
        record = _check_record(Path(path), problems)
        name = os.path.basename(path)
        refs = [] if record is None else [
            (sha, kind, name) for sha, kind in record.blob_refs() + [(e, "final") for e in [record.final_blob] if e]]
        checked.append((problems, refs))
    return checked


def _check_record(path: Path, problems: list[str]) -> RunRecord | None:
    """Parse a record and check its ``record_sha256``; append problems, return it if usable."""
    raw = read_file(str(path))
    data, intact = _sealed_as_written(raw)
    try:
        if not intact:
            data = json.loads(raw)
        record = RunRecord.model_validate(data)
    except (ValueError, ValidationError) as exc:
        problems.append(f"{path}: unreadable run record ({str(exc).splitlines()[0]})")
        return None
    if not intact and sha256_json({k: v for k, v in data.items() if k != "record_sha256"}) != data.get("record_sha256"):
        problems.append(f"{path}: altered run record (record_sha256 does not match its content)")
    return record


def _sealed_as_written(raw: bytes) -> tuple[Any, bool]:
    """The record parsed by orjson and whether its canonical JSON, as orjson writes it, hashes to its
    ``record_sha256`` (less than half the time of ``json`` and :func:`sha256_json`). When it does, orjson
    wrote the very bytes the record's writer hashed, so ``json`` parses the file to the same data and
    :func:`sha256_json` agrees; when it does not (a float orjson writes otherwise, an integer beyond 64 bits
    it reads as a float, ``NaN``, an unreadable file), the caller parses and hashes as before."""
    try:
        data = orjson.loads(raw)
        if not isinstance(data, dict) or not isinstance(sha := data.get("record_sha256"), str):
            return data, False
        body = orjson.dumps({k: v for k, v in data.items() if k != "record_sha256"}, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return None, False
    return data, sha256_bytes(body) == sha


def missing_records(archive: Archive) -> list[str]:
    """Run record files that must exist but do not. Every run writes its started marker before
    anything else, so a sealed record without one lost a file; and a run the index lists as ended
    whose sealed record is gone would otherwise pass for an interrupted run (and be rerun)."""
    sealed_names, started_names = archive.run_names()
    started = {n.removesuffix(".started.json") for n in started_names}
    sealed = {n.removesuffix(".json") for n in sealed_names}
    problems = [f"{archive.runs_dir / (r + '.started.json')}: missing started marker of sealed run {r}"
                for r in sorted(sealed - started)]
    index = archive.root / "index.duckdb"
    if index.exists():
        import duckdb  # here: the commands whose marks say the archive is intact never load DuckDB

        try:
            with duckdb.connect(str(index), read_only=True) as con:
                ended = con.execute("SELECT run_id, status FROM runs WHERE status <> 'started'").fetchall()
        except duckdb.Error:  # an index from another version or a damaged one: it is derived, skip it
            ended = []
        problems += [f"{archive.runs_dir / (r + '.json')}: missing run record ({status} in index.duckdb)"
                     for r, status in ended if r not in sealed]
    return problems
