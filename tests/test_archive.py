"""Archive integrity: write-once blobs and records, verify, reindex, resume."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
from collections.abc import Callable
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path

import duckdb
import pytest

from draligned.archive import Archive, ArchiveError
from draligned.archive.index import bulk_insert
from draligned.archive.store import indented_json, record_bytes, sealed_record_bytes, write_once
from draligned.archive.tables import record_batches
from draligned.cli import main
from draligned.hashing import sha256_bytes, sha256_json
from draligned.indexing import rebuild, verify
from draligned.runner import RunProgress, plan_resume, run_study
from draligned.study import load_study
from draligned.tools.corpus import load_corpus
from tests.processes import fork_cli, fork_server
from tests.study_helpers import records, run, write_study


@pytest.fixture(scope="module")
def small_archive(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("study")
    study = write_study(tmp, ["career_mobility_en.json"])
    result = run(study)
    assert result.statuses["completed"] == 2
    return study, result.archive


def test_bulk_insert_keeps_every_value_the_json_line_writer_is_given(tmp_path):
    """Rows go to DuckDB as JSON lines (orjson's, json's for what orjson would change or refuses): NaN and
    infinities stay themselves (orjson alone would write null), an int beyond 64 bits, non-ASCII text and
    NULLs arrive as they were."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t (n INTEGER, x DOUBLE, big HUGEINT, s TEXT, tags TEXT[])")
    rows = [(1, float("nan"), 1, "é\u2028\x01", ["a"]), (2, float("-inf"), 2 ** 70, None, []),
            (3, 0.1, -5, "plain", None), (4, 1e-05, 0, "", ["", "β"])]
    bulk_insert(con, "t", rows, tmp_path, [("n", "INTEGER"), ("x", "DOUBLE"), ("big", "HUGEINT"), ("s", "TEXT"),
                                         ("tags", "TEXT[]")])
    got = con.execute("SELECT n, isnan(x), x, big, s, tags FROM t ORDER BY n").fetchall()
    assert got[0][:2] == (1, True) and got[0][3:] == (1, "é\u2028\x01", ["a"])
    assert got[1][1:] == (False, float("-inf"), 2 ** 70, None, [])
    assert got[2][1:] == (False, 0.1, -5, "plain", None) and got[3][1:] == (False, 1e-05, 0, "", ["", "β"])


def test_write_once_never_replaces_different_bytes(tmp_path):
    p = tmp_path / "x"
    assert write_once(p, b"a") is True
    assert write_once(p, b"a") is False
    with pytest.raises(ArchiveError, match="refusing to overwrite"):
        write_once(p, b"b")
    assert p.read_bytes() == b"a"
    assert [f.name for f in tmp_path.iterdir()] == ["x"]  # no temp files left behind


def test_group_commit_writes_once_and_reports_a_refused_write_at_durable(tmp_path):
    """Under group commit a queued blob is readable before it lands, everything is on disk after ``durable``,
    nothing is overwritten (write_once's message, raised at ``durable``) and no temp file is left."""
    a = Archive(tmp_path)
    damaged = a.blob_path(sha256_bytes(b"kept"))
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"other bytes")  # a blob altered on disk: its name no longer matches

    async def study_run() -> None:
        with a.group_commit():
            sha = a.put_blob("hello")
            assert a.get_text(sha) == "hello"  # queued or written, a reader sees it
            await a.durable()
            assert a.blob_path(sha).read_bytes() == b"hello"
            a.put_blob("kept")
            with pytest.raises(ArchiveError, match="refusing to overwrite"):
                await a.durable()

    with pytest.raises(ArchiveError, match="refusing to overwrite"):  # and again when the writer closes
        asyncio.run(study_run())
    assert damaged.read_bytes() == b"other bytes"
    assert not list(tmp_path.glob("blobs/*/.tmp-*"))


def test_the_writer_stops_at_its_first_error_and_links_nothing_after_it(tmp_path):
    """Fail-stop: once a write is refused, a later write raises at once and never lands, so no packet, read or
    record queued after the failed batch can name a blob that went down with it (the archive remembers such
    a blob as put and would not queue it again)."""
    a = Archive(tmp_path)
    damaged = a.blob_path(sha256_bytes(b"kept"))
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"other bytes")
    later = tmp_path / "reads" / "e" / "reads" / "r.json"

    async def read_run() -> None:
        with a.group_commit():
            sha = a.put_blob("kept")
            with pytest.raises(ArchiveError, match="refusing to overwrite"):
                await a.durable()
            with pytest.raises(ArchiveError, match="refusing to overwrite"):
                a.put_file(later, json.dumps({"names": sha}).encode())

    with pytest.raises(ArchiveError, match="refusing to overwrite"):
        asyncio.run(read_run())
    assert not later.exists() and not list(tmp_path.glob("reads/**/.tmp-*"))


def test_a_durable_wait_given_up_leaves_the_writer_committing(tmp_path):
    """A run cancelled while it waits for ``durable`` (Ctrl-C) gives its wait up; the writer thread goes on
    and makes what is queued after it durable (setting the given-up wait used to kill the thread silently)."""
    a = Archive(tmp_path)

    async def study_run() -> str:
        with a.group_commit():
            a.put_blob("first")
            waiting = asyncio.ensure_future(a.durable())
            await asyncio.sleep(0)
            waiting.cancel()
            later = a.put_blob("queued after the given-up wait")
            await asyncio.wait_for(a.durable(), 60)  # a guard against a hang (the dead thread), not a timing
            return later

    sha = asyncio.run(study_run())
    assert a.blob_path(sha).read_bytes() == b"queued after the given-up wait"
    assert a.blob_path(sha256_bytes(b"first")).read_bytes() == b"first"


def _handed_over(monkeypatch: pytest.MonkeyPatch) -> tuple[list[object], threading.Event]:
    """What the writer thread is handed, item by item (each wakes it), and an event set at each."""
    import queue
    from types import SimpleNamespace

    import draligned.archive.commit as commit

    items, handed = [], threading.Event()

    class Counted(queue.SimpleQueue):  # type: ignore[type-arg]
        def put(self, item: object, block: bool = True, timeout: float | None = None) -> None:
            items.append(item)
            super().put(item, block, timeout)
            handed.set()

    monkeypatch.setattr(commit, "queue", SimpleNamespace(SimpleQueue=Counted, Empty=queue.Empty))  # its own only
    return items, handed


def test_the_writes_of_one_loop_step_reach_the_writer_as_one_item(tmp_path, monkeypatch):
    """Waking the writer thread for each file cost the loop a tenth of its CPU per model call at 256 runs in
    flight: the files written in one step of the event loop are handed over together, at the end of the step
    without any wait for them, or at ``durable``."""
    items, handed = _handed_over(monkeypatch)
    a = Archive(tmp_path)

    async def study_run() -> None:
        with a.group_commit():
            shas = [a.put_blob(f"at durable {n}") for n in range(5)]
            await a.durable()
            assert [len(i) if isinstance(i, list) else type(i).__name__ for i in items] == [5, "Future"]
            assert [w[0] for w in items[0]] == [str(a.blob_path(sha)) for sha in shas]  # in the order made
            handed.clear()
            a.put_blob("at the end of the step")
            a.put_blob("at the end of the step, too")
            await asyncio.sleep(0)  # the step ends; no one waits for these two
            assert handed.is_set() and len(items[2]) == 2

    asyncio.run(study_run())
    assert a.get_text(sha256_bytes(b"at the end of the step, too")) == "at the end of the step, too"


def test_a_write_made_outside_an_event_loop_reaches_the_writer_at_once(tmp_path, monkeypatch):
    items, handed = _handed_over(monkeypatch)
    a = Archive(tmp_path)
    with a.group_commit():
        sha = a.put_blob("no loop to end a step")
        assert handed.is_set() and [len(i) for i in items] == [1]  # no durable wait needed
    assert a.blob_path(sha).read_bytes() == b"no loop to end a step"


@pytest.mark.parametrize("value", [
    {}, [], {"a": [], "b": {}}, {"z": 1, "a": [1.5, -0.0, 1e-07, 1e16, 3], "m": None, "t": True, "f": False},
    {"text": "caf\u00e9 \u676d\u5dde \"q\" \\ \n\t\u0001 \u2028 \U0001f600", "nested": [[{"k": [[]]}]]},
    {"nan": float("nan"), "inf": [float("inf")]}, {"tuple": (1, 2)}, {1: "int key"},
])
def test_record_json_is_exactly_the_standard_librarys(value):
    assert indented_json(value) == json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False)


def test_record_bytes_are_unchanged_for_a_real_record(small_archive):
    _, archive = small_archive
    for path in [*archive.record_paths(), *archive.started_paths()]:
        record = Archive.load_record(path)
        assert record_bytes(record) == path.read_bytes() == (json.dumps(
            record.model_dump(mode="json"), indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


def test_a_record_is_sealed_and_written_from_one_dump_with_the_same_bytes(small_archive):
    _, archive = small_archive
    for path in [*archive.record_paths(), *archive.started_paths()]:
        record = Archive.load_record(path).model_copy(update={"record_sha256": "", "status_reason": "changed"})
        sealed, data = sealed_record_bytes(record)
        assert sealed == record.sealed() and sealed.record_sha256 != Archive.load_record(path).record_sha256
        assert data == record_bytes(record.sealed())


def test_blobs_are_content_addressed(tmp_path):
    a = Archive(tmp_path)
    sha = a.put_blob("hello")
    assert sha == sha256_bytes(b"hello") and a.get_text(sha) == "hello"


def test_verify_passes_then_names_a_flipped_byte_and_a_deleted_blob(small_archive, tmp_path):
    _, archive = small_archive
    assert verify(archive) == []
    copy = Archive(tmp_path / "copy")
    subprocess.run(["cp", "-a", str(archive.root), str(copy.root)], check=True)
    rec = copy.records()[0]
    flipped = copy.blob_path(rec.final_blob)
    data = bytearray(flipped.read_bytes())
    data[0] ^= 0x01
    flipped.write_bytes(bytes(data))
    deleted = copy.blob_path(rec.user_message_blob)
    deleted.unlink()
    problems = verify(copy)
    assert any(str(flipped) in p and "altered" in p for p in problems)
    assert any(str(deleted) in p and "missing" in p for p in problems)
    assert main(["archive", "verify", str(copy.root)]) == 1


def test_verify_detects_an_edited_run_record(small_archive, tmp_path):
    _, archive = small_archive
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(archive.root), str(copy)], check=True)
    path = Archive(copy).record_paths()[0]
    data = json.loads(path.read_text())
    data["status"] = "failed"
    path.write_text(json.dumps(data))
    problems = verify(Archive(copy))
    assert any(path.name in p and "altered run record" in p for p in problems)


def test_verify_checks_records_orjson_writes_otherwise_the_json_way(small_archive, tmp_path):
    """verify hashes a record through orjson first; one whose canonical JSON orjson writes otherwise than
    ``json`` (a float written 1e-05, an integer beyond 64 bits, which orjson reads as a float) is checked as
    ``json`` checks it: resealed it is intact, edited afterwards it is altered."""
    _, archive = small_archive
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(archive.root), str(copy)], check=True)
    paths = Archive(copy).record_paths()[:2]

    def rewrite(path: Path, edit: Callable[[dict], None], seal: bool) -> None:
        data = json.loads(path.read_text())
        edit(data)
        if seal:
            data["record_sha256"] = sha256_json({k: v for k, v in data.items() if k != "record_sha256"})
        path.write_text(indented_json(data) + "\n")

    rewrite(paths[0], lambda d: d["counters"].update(cost_usd=1e-05), seal=True)
    rewrite(paths[1], lambda d: d.update(attempt=2**70), seal=True)
    assert verify(Archive(copy)) == []
    for path in paths:
        rewrite(path, lambda d: d.update(status_reason="edited by hand"), seal=False)
    assert [p for p in verify(Archive(copy)) if "run record" in p] == [
        f"{path}: altered run record (record_sha256 does not match its content)" for path in paths]


def _index_tables(root: Path) -> dict[str, tuple[list[str], list[tuple]]]:
    """Every table and view of an archive's index (found in the database itself): columns and sorted rows."""
    with duckdb.connect(str(root / "index.duckdb"), read_only=True) as con:
        names = [n for (n,) in con.execute("SELECT table_name FROM information_schema.tables "
                                           "WHERE table_schema = 'main' ORDER BY table_name").fetchall()]
        out = {}
        for name in names:
            cur = con.execute(f'SELECT * FROM "{name}" ORDER BY ALL')
            out[name] = ([c[0] for c in cur.description], cur.fetchall())
        return out


@pytest.mark.parametrize(("name", "filled"), [
    ("archive", ("runs", "events", "artifacts", "packets", "reads", "items", "labels", "states")),  # evaluator reads
    ("pool-archive", ("runs", "events", "artifacts", "cess_runs")),  # pool runs
])
def test_reindex_reproduces_every_table_of_the_index(demo_run, tmp_path, name, filled):
    """The index is derived: rebuilt from a copy of the files alone (no old index), every table is the same."""
    shared = demo_run.out / name
    copy = Archive(demo_run.linked_copy(tmp_path / name, name))
    (copy.root / "index.duckdb").unlink()
    rebuild(copy)
    before, after = _index_tables(shared), _index_tables(copy.root)
    assert set(filled) <= set(before) and all(before[t][1] for t in filled), "the demo index lost a table"
    assert list(after) == list(before)
    for table, content in before.items():
        assert after[table] == content, f"table {table} differs after rebuild"


@pytest.mark.parametrize("name", ["archive", "pool-archive"])
def test_an_index_built_a_few_records_at_a_time_has_every_table_the_same(demo_run, tmp_path, monkeypatch, name):
    """Suppliers get the run records in batches and yield rows batch by batch (bounded memory): three
    batches give the tables of the demo's index, built from one batch of all."""
    copy = Archive(demo_run.linked_copy(tmp_path / name, name))
    size = len(copy.started_paths()) // 3 + 1
    sizes = [len(b) for b in record_batches(copy, size)]
    assert sizes[:2] == [size, size] and len(sizes) == 3
    monkeypatch.setattr("draligned.archive.index.record_batches", lambda archive: record_batches(archive, size))
    (copy.root / "index.duckdb").unlink()
    rebuild(copy)
    assert _index_tables(copy.root) == _index_tables(demo_run.out / name)


def test_record_batches_give_each_run_once_in_run_id_order_its_sealed_record_else_its_marker(small_archive, tmp_path):
    _, archive = small_archive
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(archive.root), str(copy)], check=True)
    copy_archive = Archive(copy)
    sealed = {r.run_id: r for r in copy_archive.records()}
    first = next(iter(sealed.values()))
    copy_archive.write_started(first.model_copy(update={"run_id": "r0interrupted", "status": "started"}))
    batches = list(record_batches(copy_archive, 2))
    assert [len(b) for b in batches] == [2, 1]
    got = {r.run_id: r for b in batches for r in b}
    assert list(got) == sorted(got) == sorted([*sealed, "r0interrupted"])
    assert got["r0interrupted"].status == "started"
    assert all(got[run_id] == record for run_id, record in sealed.items())  # the sealed record, not its marker


def test_rerun_skips_completed_slots_with_zero_model_calls(small_archive):
    study, archive = small_archive
    before = sorted(p.name for p in archive.runs_dir.iterdir())
    result = run(study)
    assert result.skipped == 2 and result.runs == []
    assert sorted(p.name for p in archive.runs_dir.iterdir()) == before


def test_interrupted_run_is_rerun_as_new_attempt_and_old_attempt_kept(tmp_path):
    study = write_study(tmp_path, ["career_mobility_en.json"])
    loaded = load_study(study)
    archive = Archive(loaded.archive_root)
    slots = loaded.slots(load_corpus(loaded.corpus_path).sha256)
    # Simulate a crash: a started marker for slot 0 and no final record.
    result = run(study)
    first = {r.slot_id: r for r in records(result)}
    crashed = first[slots[0].slot_id].model_copy(update={"run_id": "rcrashed0000", "status": "started"})
    archive.write_started(crashed)
    for p in archive.record_paths():  # forget that slot 0 finished
        if archive.load_record(p).slot_id == slots[0].slot_id:
            p.rename(p.with_suffix(".bak"))
    (archive.root / "index.duckdb").unlink()  # a crash before sealing: no index ever listed it as ended
    plan = plan_resume(archive, slots)
    assert [s.slot_id for s in plan.todo] == [slots[0].slot_id]
    again = run(study)
    (new,) = records(again)
    assert new.slot_id == slots[0].slot_id and new.attempt == plan.attempts[slots[0].slot_id] + 1
    assert (archive.runs_dir / "rcrashed0000.started.json").exists()


def _one_lane_noting_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[str], asyncio.Event]:
    """A one-card study run by a single lane, with every started run's id noted in order and an event set
    when the second run's started marker is queued."""
    study = write_study(tmp_path, ["career_mobility_en.json"])
    study.write_text(study.read_text().replace("concurrency = 3", "concurrency = 1"))
    markers: list[str] = []
    second_started = asyncio.Event()
    write_started = Archive.write_started

    def started(self: Archive, record) -> None:
        write_started(self, record)
        markers.append(record.run_id)
        if len(markers) == 2:
            second_started.set()

    monkeypatch.setattr(Archive, "write_started", started)
    return study, markers, second_started


def test_a_lane_runs_its_next_slot_while_its_last_run_is_made_durable(tmp_path, monkeypatch):
    """One lane, two slots: the second run starts while the first waits to be durable (its wait is held until
    the second's started marker is queued), and each run is still reported only once its record is on disk."""
    study, markers, second_started = _one_lane_noting_starts(tmp_path, monkeypatch)
    durable = Archive.durable

    async def held(self: Archive) -> None:
        await asyncio.wait_for(second_started.wait(), 60)  # a guard against a hang (a lane waiting), not a timing
        await durable(self)

    monkeypatch.setattr(Archive, "durable", held)
    on_disk: list[bool] = []

    def progress(p: RunProgress) -> None:
        if p.run is not None:
            on_disk.append((tmp_path / "archive" / "runs" / f"{p.run.run_id}.json").exists())

    result = asyncio.run(run_study(load_study(study), progress=progress))
    assert [r.run_id for r in result.runs] == markers and result.statuses["completed"] == 2
    assert on_disk == [True, True]


def test_a_refused_durable_wait_stops_the_run_in_progress_and_is_the_error_raised(tmp_path, monkeypatch):
    """One lane: the first run's durable wait fails while the second run is under way; the second run stops
    there (no record of it is sealed) and the study raises the archive's error, not a cancellation."""
    study, _, second_started = _one_lane_noting_starts(tmp_path, monkeypatch)

    async def refused(self: Archive) -> None:
        await asyncio.wait_for(second_started.wait(), 60)  # a guard against a hang, not a timing
        raise ArchiveError("a write was refused")

    monkeypatch.setattr(Archive, "durable", refused)
    with pytest.raises(ArchiveError, match="a write was refused"):
        asyncio.run(run_study(load_study(study)))
    archive = Archive(tmp_path / "archive")
    assert len(archive.started_paths()) == 2 and len(archive.record_paths()) == 1


def hold_after_sealing(said: Connection, seal_at: int) -> None:
    """In a ``draligned run`` child: stand still (event loop blocked, nothing more written) once ``seal_at``
    run records are durable (a run counts as ended only then: the group-commit writer thread made them so)
    while another run is under way, and say so on ``said``: the test kills it there."""
    durable = Archive.durable

    async def held(self: Archive) -> None:
        await durable(self)
        if seal_at <= len(self.record_paths()) < len(self.started_paths()):
            said.send("sealed")
            threading.Event().wait()  # until SIGKILL

    Archive.durable = held


@pytest.mark.slow
def test_killed_study_resumes_without_redoing_finished_runs(tmp_path):
    """A real interruption: kill the process mid-study, rerun, every slot ends up finished once."""
    study = write_study(tmp_path, ["car_insurance_2f_en.json", "career_mobility_en.json"], seeds=2,
                        latency_s=0.01)
    heard, said = fork_server().Pipe(duplex=False)
    proc = fork_cli(["run", str(study)], tmp_path / "run.log", partial(hold_after_sealing, said, 2))
    said.close()
    try:
        told = heard.recv() if heard.poll(300) else None  # a guard against a hang, not a timing
    except EOFError:  # the child ended first
        told = None
    finally:
        heard.close()
        proc.kill()
        proc.join()
    assert told == "sealed", (tmp_path / "run.log").read_text()
    archive = Archive(tmp_path / "archive")
    assert len(archive.record_paths()) >= 2  # killed once two runs were sealed
    assert len(archive.started_paths()) > len(archive.record_paths())  # really interrupted
    done_before = {p.name: p.read_bytes() for p in archive.record_paths()}
    assert main(["run", str(study)]) == 0
    finished = [r for r in archive.records() if r.status in ("completed", "budget_exhausted")]
    assert len({r.slot_id for r in finished}) == len(finished) == 12
    for name, data in done_before.items():  # nothing already archived was rewritten
        assert (archive.runs_dir / name).read_bytes() == data
    assert verify(archive) == []


@pytest.mark.parametrize("command", ["reindex", "ls", "stats"])
def test_archive_commands_on_a_missing_archive_say_so_without_a_traceback(tmp_path, capsys, command):
    missing = tmp_path / "no-such-archive"
    assert main(["archive", command, str(missing)]) == 2
    assert f"{missing}: no archive here" in capsys.readouterr().err
    assert not missing.exists()


def test_an_unreadable_run_record_is_named_by_reindex_and_run(small_archive, tmp_path, capsys):
    study, archive = small_archive
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(archive.root), str(copy)], check=True)
    record = Archive(copy).record_paths()[0]
    record.write_bytes(record.read_bytes()[:-40])
    assert main(["archive", "reindex", str(copy)]) == 2
    assert f"{record}: unreadable run record" in capsys.readouterr().err
    assert main(["run", str(study), "--archive", str(copy)]) == 2
    assert f"{record}: unreadable run record" in capsys.readouterr().err


def test_verify_names_a_deleted_run_record_and_a_deleted_started_marker(small_archive, tmp_path):
    _, archive = small_archive
    rebuild(archive)
    copy = Archive(tmp_path / "copy")
    subprocess.run(["cp", "-a", str(archive.root), str(copy.root)], check=True)
    sealed, other = copy.record_paths()[:2]
    marker = copy.runs_dir / other.name.replace(".json", ".started.json")
    sealed.unlink()  # without the index this would look like an interrupted run
    marker.unlink()
    assert verify(copy) == sorted([
        f"{sealed}: missing run record (completed in index.duckdb)",
        f"{marker}: missing started marker of sealed run {other.name.removesuffix('.json')}"])


def test_a_second_run_on_the_same_archive_at_once_is_refused(tmp_path, capsys):
    import fcntl

    study = write_study(tmp_path, ["career_mobility_en.json"])
    (tmp_path / "archive").mkdir()
    with open(tmp_path / "archive" / ".run.lock", "w") as held:  # as a running 'draligned run' holds it
        fcntl.flock(held, fcntl.LOCK_EX)
        assert main(["run", str(study)]) == 2
        assert "another 'draligned run' is writing to this archive" in capsys.readouterr().err
        assert Archive(tmp_path / "archive").started_paths() == []
    assert main(["run", str(study)]) == 0  # released: the study runs


def test_a_fingerprint_skips_a_temporary_file_renamed_while_its_folder_is_listed(tmp_path, monkeypatch):
    """Another writer (a second shard, a worker) renames its ``.tmp-`` file between the listing of a folder
    and the file's stat: the fingerprint counts the files that exist, rather than fail."""
    import contextlib
    import os

    from draligned.archive import verify as verify_module

    folder = tmp_path / "blobs" / "39"
    folder.mkdir(parents=True)
    (folder / "kept").write_text("a")
    (folder / ".tmp-123").write_text("b")
    listing = os.scandir

    @contextlib.contextmanager
    def renamed_after_listing(path):
        with listing(path) as entries:
            listed = list(entries)
        if path == str(folder):
            (folder / ".tmp-123").unlink()  # its writer renamed it meanwhile
        yield iter(listed)

    monkeypatch.setattr(verify_module.os, "scandir", renamed_after_listing)
    found = verify_module.unit_stats(len(str(tmp_path)) + 1, str(tmp_path / "blobs"), recursive=True)
    assert [path for path, _ in found] == ["blobs/39/kept"]
