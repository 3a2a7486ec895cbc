"""Studies across processes and machines: which slots a part of a study runs, and the locks that let several
parts write one archive.

``draligned run STUDY --shard K/N`` runs the slots with ``int(sha256(slot_id)) mod N == K - 1``: every
process computes the same split without talking to the others. A part writes into an archive of its own or,
with the others, into one shared archive. A whole-study ``run`` holds ``ARCHIVE/.run.lock`` exclusively; a part
holds it shared, plus its own lock exclusively (``.run.shard-K-of-N.lock``: the same shard twice is refused)
and ``.run.group-of-N.lock`` shared: parts of two different splits (``--shard 1/2`` and ``--shard 1/3``) would
run some slots twice, so a split is refused while another split's parts are writing. ``merge_archives`` unions
the parts' archives (``draligned archive merge``).
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from draligned.archive import Archive, ArchiveError
from draligned.hashing import sha256_bytes
from draligned.study import StudyError

LOCK_NAME = ".run.lock"
"""The archive's run lock: exclusive for a whole-study run, shared by the parts of a split."""
_GROUP_LOCK = ".run.group-{}.lock"
_PLAN_LOCK = ".run.group.lock"


class StudyPart(Protocol):
    """What the runner needs of a part of a study: which slots it runs, and its locks on the archive."""

    def owns(self, slot_id: str) -> bool: ...

    def locked(self, archive: Archive) -> AbstractContextManager[None]: ...


def shard_of(slot_id: str, count: int) -> int:
    """The shard (1-based, of ``count``) a slot falls to: ``int(sha256(slot_id)) mod count + 1``."""
    return int(sha256_bytes(slot_id.encode("utf-8")), 16) % count + 1


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (``--shard K/N``)."""

    index: int
    count: int

    @property
    def group(self) -> str:
        return f"of-{self.count}"

    @property
    def name(self) -> str:
        return f"{self.index}-of-{self.count}"

    def owns(self, slot_id: str) -> bool:
        return shard_of(slot_id, self.count) == self.index

    @contextmanager
    def locked(self, archive: Archive) -> Iterator[None]:
        with lock_part(archive, self.group, f".run.shard-{self.name}.lock", f"shard {self.index}/{self.count}"):
            yield


def parse_shard(text: str) -> Shard:
    """``K/N`` with 1 ≤ K ≤ N as a Shard; ValueError saying what is wrong."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m:
        raise ValueError(f"--shard {text!r}: expected K/N, e.g. 2/8")
    k, n = int(m[1]), int(m[2])
    if not 1 <= k <= n:
        raise ValueError(f"--shard {text!r}: K must be between 1 and N")
    return Shard(k, n)


def hold_lock(path: Path, mode: int, refusal: str, error: type[Exception] = StudyError) -> int:
    """An open fd on ``path`` holding ``mode`` (non-blocking); ``error(refusal)`` when it is taken."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise error(f"{path.parent}: cannot use it as the archive directory: {exc.strerror}") from None
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise error(refusal) from None
    return fd


@contextmanager
def lock_part(archive: Archive, group: str, lock_name: str, what: str) -> Iterator[None]:
    """Hold the locks of one part of a split (see the module docstring), its own in ``lock_name``, while the
    block runs."""
    root = archive.root
    with ExitStack() as held:
        held.callback(os.close, hold_lock(root / LOCK_NAME, fcntl.LOCK_SH,
                                       f"{root}: a whole-study 'draligned run' or a merge holds this archive; "
                                       f"let it finish before starting {what}"))
        plan = os.open(root / _PLAN_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(plan, fcntl.LOCK_EX)  # held only while checking the other splits: a short wait
            for other in sorted(root.glob(_GROUP_LOCK.format("*"))):
                if other.name != _GROUP_LOCK.format(group):
                    os.close(hold_lock(other, fcntl.LOCK_EX, f"{root}: parts of another split "
                                    f"({other.name[len('.run.group-'):-len('.lock')]}) are writing to this "
                                    f"archive; {what} would run some of their slots again"))
            held.callback(os.close, hold_lock(root / _GROUP_LOCK.format(group), fcntl.LOCK_SH, ""))
        finally:
            os.close(plan)
        held.callback(os.close, hold_lock(root / lock_name, fcntl.LOCK_EX,
                                       f"{root}: {what} is already running on this archive"))
        yield


@contextmanager
def lock_whole(archive: Archive, what: str) -> Iterator[None]:
    """Hold ``ARCHIVE/.run.lock`` exclusively (no run and no part writes) while the block runs: ``what``
    (a merge, a Ray driver) is refused with ArchiveError while any run writes."""
    fd = hold_lock(archive.root / LOCK_NAME, fcntl.LOCK_EX,
                f"{archive.root}: a 'draligned run' is writing to this archive; let it finish before {what}",
                ArchiveError)
    try:
        yield
    finally:
        os.close(fd)


@dataclass(frozen=True)
class MergeResult:
    """What ``archive merge`` did."""

    into: Path
    """The merged archive."""
    copied: int
    """Files copied into it."""
    present: int
    """Files of the shards it already held (a second merge copies nothing)."""
    runs: int
    """Run records in the merged archive."""
    kept_first: list[str] = field(default_factory=list)
    """First-writer-wins store entries a shard held with other bytes (the first one was kept)."""


def merge_archives(sources: list[str | Path], into: str | Path) -> MergeResult:
    """Union the shard archives ``sources`` into ``into`` (made if missing) and rebuild its index.

    Every archive is verified and the whole union planned before a file is copied, so a refusal (a
    damaged shard, a path with different bytes, a slot finished in two shards) copies nothing; no run may
    write to any of them meanwhile. Raises ArchiveError naming each file.
    """
    from draligned.guards import open_archive  # the merges' modules load only for a merge, not for a run's locks

    shards = [open_archive(s) for s in sources]
    target = Archive(into)
    if target.root.exists() and any(target.root.iterdir()):
        target = open_archive(into)
    if any(s.root.resolve() == target.root.resolve() for s in shards):
        raise ArchiveError(f"{target.root}: is also one of the shards to merge")
    target.runs_dir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as held:
        for archive in (target, *shards):
            held.enter_context(lock_whole(archive, "merging"))
        return merge_locked(shards, target)


def merge_locked(shards: list[Archive], target: Archive, index: bool = True) -> MergeResult:
    """``merge_archives`` for a caller that holds the archives' run locks (the Ray driver); ``index`` False
    leaves the index to the caller (the Ray driver removes the merged shards from the archive first, which
    would make a fresh index stale)."""
    from draligned.archive.merge import apply_merge, plan_merge
    from draligned.indexing import rebuild, verify

    damaged = [line for archive in (target, *shards) for line in verify(archive)]
    if damaged:
        raise ArchiveError("refusing to merge damaged archives, nothing was copied:\n" + "\n".join(damaged))
    plan = plan_merge(shards, target)
    copied = apply_merge(plan)
    if index:
        rebuild(target)
    return MergeResult(into=target.root, copied=copied, present=plan.present, runs=len(target.record_paths()),
                       kept_first=plan.kept_first)
