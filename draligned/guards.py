"""The one refusal rule of every command: an archive, evaluator, plan or phase that does not exist or does not
match is refused with a message naming what is wrong (the CLI's exit 2), never answered with an empty
result, and a mistyped path is never created. Numbers are produced only from an archive whose files still
match their hashes, unless the caller says to skip that check (and the report records the skip).
"""

from __future__ import annotations

from pathlib import Path

from draligned.analysis.plan import LoadedPlan, PlanError, load_plan, parse_plan, starter_plan
from draligned.archive import Archive, ArchiveError
from draligned.archive.fingerprint import holds, known_intact, remember
from draligned.archive.verify import record_problems
from draligned.data import data_dir
from draligned.evaluator.config import Evaluator, EvaluatorError, load_evaluator

REFUSALS = (ArchiveError, EvaluatorError, PlanError)
"""What a command raises when it refuses its input (the CLI prints ``error: ...`` and exits 2)."""

NO_EVALUATOR = "(no evaluator has read this archive)"
"""The evaluator a report names when none was given and none has read the archive (it has no states)."""

_SHOWN_PROBLEMS = 10
"""Damaged files named in a refusal (``archive verify`` lists all of them)."""


def open_archive(path: str | Path) -> Archive:
    """The archive at ``path``; ArchiveError when it is no directory or a directory no run ever wrote to
    (reading it would create files in a mistyped path and answer with nothing)."""
    archive = Archive(path)
    if not archive.root.is_dir():
        raise ArchiveError(f"{archive.root}: no archive here (not a directory)")
    if not archive.runs_dir.is_dir():
        raise ArchiveError(f"{archive.root}: not an archive (it has no runs/ folder; archives are made by "
                           f"'draligned run')")
    return archive


def check_intact(archive: Archive, enabled: bool = True, records_only: bool = False, files: str | None = None) -> None:
    """ArchiveError naming each altered or missing file (records, blobs, reads, leftovers) unless the
    archive verifies (files unchanged since a verify found them intact, at fingerprint ``files`` when the
    caller just took it, are not hashed again); ``records_only`` checks just the run records (what ``run``
    reads: no blob is hashed); ``enabled`` False is the caller's ``--no-verify``."""
    if not enabled or (files is not None and known_intact(archive, files)):
        return  # not asked, or a verify found these very files intact and the index is the one built from them
    from draligned.indexing import verify_changed  # here: an archive known intact loads no supplier nor DuckDB

    problems = record_problems(archive) if records_only else verify_changed(archive, files)
    if problems:
        more = len(problems) - _SHOWN_PROBLEMS
        raise ArchiveError(f"{archive.root}: damaged archive ({len(problems)} problem(s)); refusing to produce "
                           f"numbers from it:\n" + "\n".join(problems[:_SHOWN_PROBLEMS])
                           + (f"\n... and {more} more" if more > 0 else "")
                           + f"\n(see 'draligned archive verify {archive.root}'; --no-verify skips this check)")


def evaluator_id_of(spec: str) -> str:
    """An evaluator id, given as the id itself or as the evaluator's TOML file."""
    if spec.endswith(".toml") or Path(spec).is_file():
        return load_evaluator(spec).evaluator_id
    return spec


def require_reader(archive: Archive, spec: str) -> str:
    """The id of an evaluator (id or TOML file) that has read the archive; ArchiveError naming who has."""
    from draligned.evaluator.storage import ReadStore  # here: a read of an evaluator's file does not need it

    evaluator_id = evaluator_id_of(spec)
    if not ReadStore(archive, evaluator_id).exists():
        known = ", ".join(ReadStore.evaluator_ids(archive)) or "none"
        raise ArchiveError(f"evaluator {evaluator_id!r} has not read {archive.root} (read by: {known})")
    return evaluator_id


def default_reader(archive: Archive) -> str:
    """The archive's one evaluator, or NO_EVALUATOR; ArchiveError when several have read it."""
    from draligned.evaluator.storage import ReadStore

    known = ReadStore.evaluator_ids(archive)
    if len(known) > 1:
        raise ArchiveError(f"{archive.root} was read by several evaluators ({', '.join(known)}); choose one "
                           f"with --evaluator")
    return known[0] if known else NO_EVALUATOR


def bundled_evaluators() -> dict[str, Path]:
    """The evaluator files shipped with draligned, by id."""
    out = {}
    for path in sorted(data_dir("evaluators").glob("*.toml")):
        try:
            out[load_evaluator(path).evaluator_id] = path
        except EvaluatorError:  # an example that needs its own files next to it
            continue
    return out


def evaluator_to_read(archive: Archive, spec: str) -> Evaluator:
    """The evaluator to read with: a TOML file, or the id of a bundled one (reading needs its templates,
    which an id the archive knows does not carry)."""
    if spec.endswith(".toml") or Path(spec).is_file():
        return load_evaluator(spec)
    bundled = bundled_evaluators()
    if spec in bundled:
        return load_evaluator(bundled[spec])
    from draligned.evaluator.storage import ReadStore

    known = ", ".join(ReadStore.evaluator_ids(archive)) or "none"
    raise EvaluatorError(f"evaluator {spec!r}: no such TOML file and no bundled evaluator with that id "
                         f"(bundled: {', '.join(bundled) or 'none'}; this archive was read by: {known}); "
                         f"pass the evaluator's TOML file")


def archive_studies(archive: Archive, files: str | None = None) -> list[str]:
    """The study names of every run the archive holds (its started markers); remembered at the archive's
    fingerprint ``files`` when given, so that a report with nothing new does not parse every marker again."""
    if files is not None and (known := holds(archive, STUDIES, files)) is not None:
        return list(known["studies"])
    studies = sorted({r.slot.study for r in archive.started()})
    if files is not None:
        remember(archive, STUDIES, files, studies=studies)
    return studies


STUDIES = "studies"
"""The mark of the archive's study names."""


def report_plan(archive: Archive, plan: str | Path | None, files: str | None = None
                ) -> tuple[LoadedPlan, str | None]:
    """The plan file, or without one a starter plan over the archive's own studies (remembered at its
    fingerprint ``files``, when given) and a note saying so."""
    if plan is not None:
        return load_plan(plan), None
    studies = archive_studies(archive, files)
    if not studies:
        raise ArchiveError(f"{archive.root}: the archive has no runs, so there is nothing to report")
    origin = f"(default plan over the studies of {archive.root})"
    note = (f"no --plan given: using a default plan over the archive's studies ({', '.join(studies)}); "
            f"'draligned plan init {archive.root}' prints it to start your own")
    return parse_plan(starter_plan(studies).encode(), origin), note
