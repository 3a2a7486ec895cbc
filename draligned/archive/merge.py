"""Merge archive shards into one archive: a union of files, checked whole before anything is copied.

Blobs are named by their sha256 and run ids are random, so the shards of one study never write the same
path with different bytes; a merge copies every file the target lacks with ``write_once`` (never over an
existing file), which makes merging twice the same as merging once. It refuses, before copying anything,
a path two archives hold with different bytes, and a slot with a finished run in two archives (only
overlapping shards make one: a study promises exactly one finished run per slot). The first-writer-wins
stores (the replay cache, the acquisition store) keep the entry the target, or the first shard, holds.
Derived and transient files (``index.duckdb``, locks, ``.tmp-*`` leftovers, dot folders) are not copied:
the caller rebuilds the index.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from draligned.archive.store import Archive, ArchiveError, write_once
from draligned.hashing import sha256_bytes
from draligned.records import FINISHED

FIRST_WRITER_WINS = ("cache", "acquisition")
"""Top-level folders whose entries are written once by whoever is first: a later different entry is skipped."""


@dataclass
class MergePlan:
    """What a merge would copy, checked whole."""

    copies: list[tuple[Path, Path]] = field(default_factory=list)
    """(source file, target file) in copy order: blobs first, sealed run records last."""
    present: int = 0
    """Files the target already holds with the same bytes."""
    kept_first: list[str] = field(default_factory=list)
    """First-writer-wins entries a shard holds with other bytes than the one kept (not copied)."""


def archive_files(archive: Archive) -> list[str]:
    """The relative paths of an archive's own files (derived, transient and dot entries left out), sorted."""
    out = []
    for path in archive.root.rglob("*"):
        rel = path.relative_to(archive.root)
        if path.is_file() and rel.parts[0] != "index.duckdb" and not any(p.startswith(".") for p in rel.parts):
            out.append(rel.as_posix())
    return sorted(out)


def _order(rel: str) -> int:
    """Copy order: what a record references exists before the record (a killed merge leaves no dangling one)."""
    if rel.startswith("runs/"):
        return 2 if rel.endswith(".started.json") else 3
    return 0 if rel.startswith("blobs/") else 1


def plan_merge(sources: list[Archive], into: Archive) -> MergePlan:
    """The files to copy from ``sources`` into ``into``; ArchiveError naming every conflicting file
    and every slot finished in two archives."""
    plan = MergePlan()
    owner: dict[str, tuple[Path, str]] = {}  # rel -> (file holding it, sha256 of its bytes)
    conflicts: list[str] = []
    for archive in (into, *sources):
        for rel in archive_files(archive) if archive.root.is_dir() else []:
            path = archive.root / rel
            sha = rel.rsplit("/", 1)[-1] if rel.startswith("blobs/") else sha256_bytes(path.read_bytes())
            if rel not in owner:
                owner[rel] = (path, sha)
                if archive is not into:
                    plan.copies.append((path, into.root / rel))
            elif owner[rel][1] == sha:
                plan.present += archive is not into
            elif rel.split("/", 1)[0] in FIRST_WRITER_WINS:
                plan.kept_first.append(f"{path}: differs from {owner[rel][0]} (first writer kept)")
            else:
                conflicts.append(f"{path}: differs from {owner[rel][0]} (same path, different bytes)")
    conflicts += overlapping_slots([into, *sources])
    if conflicts:
        raise ArchiveError("refusing to merge, nothing was copied:\n" + "\n".join(conflicts))
    plan.copies.sort(key=lambda c: _order(c[1].relative_to(into.root).as_posix()))
    return plan


def overlapping_slots(archives: list[Archive]) -> list[str]:
    """One line per slot that has finished runs with different run ids (in one or several archives)."""
    finished: dict[str, dict[str, Path]] = defaultdict(dict)  # slot id -> run id -> its record file
    for archive in archives:
        if not archive.root.is_dir():
            continue
        for path in archive.record_paths():
            record = archive.load_record(path)
            if record.status in FINISHED:
                finished[record.slot_id].setdefault(record.run_id, path)
    return [f"slot {slot}: finished in {len(runs)} runs ({', '.join(str(p) for p in runs.values())}); "
            f"the shards overlapped (one finished run per slot is the promise)"
            for slot, runs in sorted(finished.items()) if len(runs) > 1]


def apply_merge(plan: MergePlan) -> int:
    """Copy the planned files (write_once: an existing file is never replaced); returns how many were written."""
    return sum(write_once(dst, src.read_bytes()) for src, dst in plan.copies)
