"""Studies across processes (issue 14): ``run --shard K/N`` splits the slots without talking, shards share
an archive under their own locks, and ``archive merge`` unions shard archives or refuses without copying."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from draligned.archive import Archive, ArchiveError
from draligned.archive.merge import archive_files
from draligned.archive.store import record_bytes
from draligned.cli import main
from draligned.indexing import verify
from draligned.records import FINISHED
from draligned.shards import Shard, lock_whole, merge_archives, parse_shard, shard_of
from draligned.study import StudyError
from draligned.workflow import run_study_file
from tests.study_helpers import write_study

CARDS = ["travel_budget_en.json", "career_mobility_en.json"]


def finished_slots(archive: Archive) -> Counter[str]:
    """Finished runs per slot id."""
    return Counter(r.slot_id for r in archive.records() if r.status in FINISHED)


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same 4-slot study run whole, and as shards 1/2 and 2/2 into archives of their own."""
    tmp = tmp_path_factory.mktemp("shards")
    study = write_study(tmp, CARDS)
    out = {"study": study, "whole": tmp / "whole", "s1": tmp / "s1", "s2": tmp / "s2"}
    run_study_file(study, out["whole"])
    run_study_file(study, out["s1"], part=Shard(1, 2))
    run_study_file(study, out["s2"], part=Shard(2, 2))
    return out


def test_shards_split_the_slots_by_the_hash_of_their_id(shards):
    whole = finished_slots(Archive(shards["whole"]))
    one, two = finished_slots(Archive(shards["s1"])), finished_slots(Archive(shards["s2"]))
    assert len(whole) == 4 and one and two, "both shards of this study have slots"
    assert set(one).isdisjoint(two) and set(one) | set(two) == set(whole)
    assert all(shard_of(s, 2) == 1 for s in one) and all(shard_of(s, 2) == 2 for s in two)


def test_merged_shards_hold_the_single_process_slots_once_and_a_second_merge_copies_nothing(shards, tmp_path,
                                                                                            capsys):
    into = tmp_path / "merged"
    first = merge_archives([shards["s1"], shards["s2"]], into)
    merged = Archive(into)
    assert verify(merged) == []
    assert finished_slots(merged) == Counter(dict.fromkeys(finished_slots(Archive(shards["whole"])), 1))
    files = {rel: (into / rel).read_bytes() for rel in archive_files(merged)}
    assert first.copied == len(files) and first.runs == 4
    assert main(["archive", "merge", str(shards["s1"]), str(shards["s2"]), "--into", str(into)]) == 0
    assert f"merged 2 shard(s) into {into}: 0 file(s) copied" in capsys.readouterr().out
    assert {rel: (into / rel).read_bytes() for rel in archive_files(merged)} == files
    assert main(["run", str(shards["study"]), "--archive", str(into)]) == 0  # resume: nothing left to run
    assert len(merged.record_paths()) == 4


def test_two_shards_write_one_archive_and_resume_only_their_own_slots(shards, tmp_path):
    shared = tmp_path / "shared"
    shutil.copytree(shards["s1"], shared)  # shard 1 finished here already
    assert main(["run", str(shards["study"]), "--archive", str(shared), "--shard", "1/2"]) == 0
    assert len(Archive(shared).record_paths()) == len(finished_slots(Archive(shards["s1"])))  # nothing rerun
    assert main(["run", str(shards["study"]), "--archive", str(shared), "--shard", "2/2"]) == 0
    assert finished_slots(Archive(shared)) == Counter(dict.fromkeys(finished_slots(Archive(shards["whole"])), 1))
    assert verify(Archive(shared)) == []


def test_parts_of_one_split_share_an_archive_and_everything_else_is_refused(tmp_path):
    archive = Archive(tmp_path / "a")
    with Shard(1, 2).locked(archive):
        with Shard(2, 2).locked(archive):  # the other shard of the same split may write alongside
            pass
        with pytest.raises(StudyError, match=r"shard 1/2 is already running"), Shard(1, 2).locked(archive):
            pass
        with pytest.raises(StudyError, match=r"another split \(of-2\)"), Shard(1, 3).locked(archive):
            pass
        with pytest.raises(ArchiveError, match="a 'draligned run' is writing"), lock_whole(archive, "merging"):
            pass
    with lock_whole(archive, "merging"):
        with pytest.raises(StudyError, match="whole-study 'draligned run' or a merge"), Shard(1, 2).locked(archive):
            pass
    with Shard(1, 3).locked(archive):  # the first split ended: another may start
        pass


def test_shard_argument_is_checked():
    assert parse_shard("2/8") == Shard(2, 8)
    for bad in ("0/2", "3/2", "1", "a/b"):
        with pytest.raises(ValueError, match="--shard"):
            parse_shard(bad)
    with pytest.raises(SystemExit) as exc:
        main(["run", "study.toml", "--shard", "3/2"])
    assert exc.value.code == 2


def _nothing_copied(into: Path) -> None:
    assert not into.exists() or archive_files(Archive(into)) == []


def test_merge_refuses_a_path_with_other_bytes_naming_it(shards, tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(shards["s1"], other)
    path = Archive(other).record_paths()[0]
    record = Archive.load_record(path)
    path.unlink()
    path.write_bytes(record_bytes(record.model_copy(update={"status_reason": "edited"}).sealed()))
    assert verify(Archive(other)) == []  # a well-formed record: only the merge can see the conflict
    into = tmp_path / "into"
    assert main(["archive", "merge", str(shards["s1"]), str(other), "--into", str(into)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: differs from {shards['s1'] / 'runs' / path.name} (same path, different bytes)" in err
    assert "nothing was copied" in err
    _nothing_copied(into)


def test_merge_refuses_overlapping_shards_naming_the_slot(shards, tmp_path):
    into = tmp_path / "into"
    with pytest.raises(ArchiveError, match=r"slot \S+: finished in 2 runs .*the shards overlapped"):
        merge_archives([shards["whole"], shards["s1"]], into)
    _nothing_copied(into)


def test_merge_refuses_a_damaged_shard_naming_the_file(shards, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(shards["s2"], damaged)
    path = Archive(damaged).record_paths()[0]
    path.write_bytes(path.read_bytes().replace(b'"completed"', b'"failed"', 1))
    into = tmp_path / "into"
    with pytest.raises(ArchiveError, match=rf"{path}: altered run record"):
        merge_archives([shards["s1"], damaged], into)
    _nothing_copied(into)
    with pytest.raises(ArchiveError, match="not an archive"):
        merge_archives([tmp_path], tmp_path / "x")


def test_two_shards_running_at_once_into_one_archive_run_every_slot_once(shards, tmp_path):
    """Both shards of a split write one archive at the same time (threads: each holds its own locks)."""
    from concurrent.futures import ThreadPoolExecutor

    shared = tmp_path / "shared"
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda k: run_study_file(shards["study"], shared, part=Shard(k, 2)), (1, 2)))
    assert [r.statuses["completed"] for r in results] == [len(finished_slots(Archive(shards[s]))) for s in ("s1", "s2")]
    assert finished_slots(Archive(shared)) == Counter(dict.fromkeys(finished_slots(Archive(shards["whole"])), 1))
    assert verify(Archive(shared)) == []
