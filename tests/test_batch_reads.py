"""``read --batch`` against loopback OpenAI Batch and Anthropic Message Batches servers (tests/batch_servers.py),
through the real ``openai`` and ``anthropic`` SDKs: same bodies and reads as synchronous reads, partial
failures, expiry, results fetched twice, validation errors naming the line, status, cancel, and a kill
mid-poll resumed without a second submission."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest

from draligned.archive import Archive
from draligned.cli import main
from draligned.evaluator.batching import batch_views, cancel_batches, read_archive_batch
from draligned.evaluator.config import Evaluator, load_evaluator
from draligned.evaluator.reading import read_archive
from draligned.evaluator.storage import ReadStore
from draligned.indexing import connect
from draligned.models.batch import BatchLine, chunks
from draligned.models.batch_openai import OpenAIBatch
from tests.batch_servers import AnthropicBatchServer, OpenAIBatchServer
from tests.processes import fork_cli
from tests.study_helpers import REPO, run, write_evaluator, write_study

KEY = "sk-batch-test-secret"
PHASES = ("final",)


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Archive:
    """A two-card study's archive (8 final packets: enough for every plan below); each test reads it with
    its own evaluator id."""
    tmp = tmp_path_factory.mktemp("batch")
    result = run(write_study(tmp, ["travel_budget_en.json", "career_mobility_en.json"], name="batch"))
    assert result.slots == len(result.runs) == 4 and not result.not_started
    return result.archive


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCH_TEST_KEY", KEY)


def evaluator_file(tmp: Path, evaluator_id: str, protocol: str, base_url: str) -> Path:
    return write_evaluator(tmp / f"{evaluator_id}.toml", f"""
evaluator_id = "{evaluator_id}"
max_tokens = 2048
concurrency = 4""", f"""
name = "batch-evaluator"
protocol = "{protocol}"
model = "reader-1"
base_url = "{base_url}"
api_key_env = "BATCH_TEST_KEY"
omit = ["parallel_tool_calls"]
[model.request]
temperature = 0.0
[model.retry]
max_attempts = 2""")


def make(tmp: Path, evaluator_id: str, protocol: str, server) -> Evaluator:
    return load_evaluator(evaluator_file(tmp, evaluator_id, protocol, server.base_url))


def server_for(protocol: str, **kw):
    return AnthropicBatchServer(**kw) if protocol == "anthropic" else OpenAIBatchServer(**kw)


def batch(archive: Archive, ev: Evaluator):
    return asyncio.run(read_archive_batch(archive, ev, PHASES, poll_s=0))


def read_files(archive: Archive, evaluator_id: str) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_bytes())
            for p in sorted((ReadStore(archive, evaluator_id).root / "reads").glob("*.json"))}


@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses", "anthropic"])
def test_batch_reads_send_the_synchronous_bodies_and_ingest_the_same_reads(archive, tmp_path, protocol):
    with server_for(protocol) as server:
        sync_ev, batch_ev = (make(tmp_path, f"{k}-{protocol}", protocol, server) for k in ("sync", "batch"))
        sync = asyncio.run(read_archive(archive, sync_ev, PHASES))
        summary = batch(archive, batch_ev)
    assert sync.read_ok > 0 and not sync.model_errors
    assert summary.read_ok == sync.read_ok and summary.read_failed == sync.read_failed == 0
    assert server.creates == 1 and summary.batches_submitted == [next(iter(server.batches))]
    sync_bodies = [raw for _, path, raw in server.log if path.endswith(("/completions", "/responses", "/messages"))]
    assert len(sync_bodies) == sync.read_ok
    if protocol == "anthropic":
        create = next(raw for _, path, raw in server.log if path == "/v1/messages/batches")
        lines = json.loads(create)["requests"]
        assert sorted(json.dumps(x["params"], sort_keys=True) for x in lines) == \
            sorted(json.dumps(json.loads(b), sort_keys=True) for b in sync_bodies)
    else:
        uploaded = server.files["file-1"]
        lines = [json.loads(x) for x in uploaded.splitlines()]
        assert all(body in uploaded for body in sync_bodies)  # byte for byte, each inside its line
        assert {x["url"] for x in lines} == {"/v1/chat/completions" if protocol == "openai-chat" else "/v1/responses"}
    sync_files, batch_files = read_files(archive, sync_ev.evaluator_id), read_files(archive, batch_ev.evaluator_id)
    assert sorted(sync_files) == sorted(batch_files) == sorted(x["custom_id"] for x in lines)
    bid = summary.batches_submitted[0]
    for pid, rec in batch_files.items():
        assert (rec.pop("transport"), rec.pop("batch_id"), rec.pop("line_id")) == ("batch", bid, pid)
        theirs = sync_files[pid]
        assert "transport" not in theirs  # a synchronous read file is exactly what it was before batches
        for field in ("status", "items", "labels", "usage", "model_echo", "finish_reason", "file_sha256"):
            assert rec[field] == theirs[field], field
        raw = archive.get_text(rec["raw_response_blob"])
        assert json.loads(raw)["custom_id"] == pid and KEY not in raw  # the result line as received
    assert ReadStore(archive, batch_ev.evaluator_id).open_batches() == []


@pytest.mark.parametrize("protocol", ["openai-chat", "anthropic"])
def test_partial_failures_are_read_failed_with_the_raw_line_and_read_again_next_time(archive, tmp_path, protocol):
    with server_for(protocol, plan={0: "errored", 1: "garbage"}) as server:
        ev = make(tmp_path, f"partial-{protocol}", protocol, server)
        first = batch(archive, ev)
        store = ReadStore(archive, ev.evaluator_id)
        job = store.batches()[0][0]
        errored, garbage = job.custom_ids[0], job.custom_ids[1]
        reads = store.reads()
        assert reads[errored].status == "READ_FAILED" and reads[errored].error.startswith("batch line errored: ")
        assert "invalid_request_error" in archive.get_text(reads[errored].raw_response_blob)
        assert not store.has_read(errored) and store.has_failed_line(job.batch_id, errored)
        # A reply that is not the schema's JSON is an ordinary ingest failure: a read, as synchronously.
        assert store.has_read(garbage) and reads[garbage].status == "READ_FAILED"
        assert "this is not JSON" in archive.get_text(reads[garbage].raw_response_blob)
        assert first.read_failed == 1 and len(first.lines_failed) == 1
        assert first.read_ok == len(job.custom_ids) - 2
        server.plan = {}
        second = batch(archive, ev)
    assert server.creates == 2 and second.already_read > 0 and second.read_ok == 1 and not second.lines_failed
    second_job = store.batches()[1][0]
    assert second_job.custom_ids == [errored]  # only the missing read is submitted again
    assert store.reads()[errored].status == "OK" and store.reads()[errored].batch_id == second_job.batch_id
    assert store.has_failed_line(job.batch_id, errored)  # the failed attempt is kept


@pytest.mark.parametrize("protocol", ["openai-responses", "anthropic"])
def test_an_expired_batch_keeps_what_ran_and_marks_the_rest_expired(archive, tmp_path, protocol):
    with server_for(protocol, expire=True, done_before_expiry=2) as server:
        ev = make(tmp_path, f"expiry-{protocol}", protocol, server)
        summary = batch(archive, ev)
    store = ReadStore(archive, ev.evaluator_id)
    job, closed = store.batches()[0]
    assert closed is not None and closed.status == ("ended" if protocol == "anthropic" else "expired")
    assert summary.read_ok == 2 and len(summary.lines_failed) == len(job.custom_ids) - 2
    reads = store.reads()
    assert all(reads[c].status == "OK" for c in job.custom_ids[:2])
    assert all(reads[c].error.startswith("batch line expired") for c in job.custom_ids[2:])
    assert main(["archive", "verify", str(archive.root)]) == 0


def test_results_fetched_twice_are_ingested_once(archive, tmp_path):
    with OpenAIBatchServer() as server:
        ev = make(tmp_path, "twice", "openai-chat", server)
        store = ReadStore(archive, ev.evaluator_id)
        summary = batch(archive, ev)
        job = store.batches()[0][0]
        before = read_files(archive, ev.evaluator_id)
        # As if the process died after ingesting but before closing the job: the next call downloads the
        # results again, finds every line already read and writes nothing new.
        closed = store.root / "batches" / f"{job.batch_id}.closed.json"
        closed.unlink()
        again = batch(archive, ev)
        downloads = [p for m, p, _ in server.log if m == "GET" and p.endswith("/content")]
    assert summary.read_ok == len(job.custom_ids) and again.batches_resumed == [job.batch_id]
    assert again.read_ok == again.read_failed == 0 and server.creates == 1 and len(downloads) == 2
    assert read_files(archive, ev.evaluator_id) == before and closed.exists()


@pytest.mark.parametrize("protocol", ["openai-chat", "anthropic"])
def test_a_batch_that_fails_validation_names_the_first_bad_line(archive, tmp_path, protocol, capsys):
    with server_for(protocol, plan={2: "invalid", 4: "invalid"}) as server:
        ev = make(tmp_path, f"invalid-{protocol}", protocol, server)
        toml = evaluator_file(tmp_path, ev.evaluator_id, protocol, server.base_url)
        code = main(["read", str(archive.root), "--evaluator", str(toml), "--phase", "final", "--batch",
                     "--poll-s", "0"])
    err = capsys.readouterr().err
    store = ReadStore(archive, ev.evaluator_id)
    if protocol == "anthropic":  # refused at creation: nothing was submitted
        assert code == 2 and "requests.2" in err and "line 3 (custom_id" in err and store.batches() == []
        ids = json.loads(next(raw for _, p, raw in server.log if p == "/v1/messages/batches"))["requests"]
    else:
        job, closed = store.batches()[0]
        ids = [{"custom_id": c} for c in job.custom_ids]
        assert code == 1 and closed is not None and closed.status == "failed"
        assert "the batch failed validation: line 3 (custom_id" in " ".join(err.split())
    assert ids[2]["custom_id"][:12] in err.replace("\n", "")
    assert read_files(archive, ev.evaluator_id) == {}  # nothing read: the next call submits them again


@pytest.mark.parametrize("protocol", ["openai-chat", "anthropic"])
def test_status_and_cancel(archive, tmp_path, protocol, capsys):
    with server_for(protocol, hold=True, done_before_expiry=1) as server:
        ev = make(tmp_path, f"cancel-{protocol}", protocol, server)
        toml = evaluator_file(tmp_path, ev.evaluator_id, protocol, server.base_url)
        store = ReadStore(archive, ev.evaluator_id)
        # Submit, and stop polling after the first status: as if the process had been stopped.
        with pytest.raises(Stopped):
            asyncio.run(read_archive_batch(archive, ev, PHASES, poll_s=0, seen=_stop))
        job = store.open_batches()[0]
        views = asyncio.run(batch_views(archive, ev))
        assert [(v.batch_id, v.closed, v.status.ended, v.lines) for v in views] == \
            [(job.batch_id, False, False, len(job.custom_ids))]
        capsys.readouterr()
        assert main(["read", str(archive.root), "--evaluator", str(toml), "--batch", "--status"]) == 0
        shown = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        assert [s["batch_id"] for s in shown] == [job.batch_id] and not shown[0]["closed"]
        assert main(["read", str(archive.root), "--evaluator", str(toml), "--batch", "--cancel"]) == 0
        assert json.loads(capsys.readouterr().out)["status"] in ("cancelling", "canceling")
        summary = batch(archive, ev)
    assert server.creates == 1 and summary.batches_resumed == [job.batch_id] and summary.read_ok == 1
    reads = store.reads()
    assert all(reads[c].error.startswith("batch line canceled") for c in job.custom_ids[1:])
    assert asyncio.run(cancel_batches(archive, ev)) == []  # nothing open any more
    assert asyncio.run(batch_views(archive, ev))[0].closed


class Stopped(Exception):
    """Raised from the poll callback: the call stops as a killed one would, with its batch persisted."""


def _stop(status) -> None:
    raise Stopped


def test_the_simulator_refuses_batch_mode_before_writing_anything(archive, capsys):
    code = main(["read", str(archive.root), "--evaluator", str(REPO / "evaluators" / "sim.toml"), "--batch"])
    assert code == 2 and "has no batch API" in capsys.readouterr().err
    assert main(["read", str(archive.root), "--evaluator", str(REPO / "evaluators" / "sim.toml"), "--status"]) == 2


def test_a_synchronous_read_leaves_packets_of_an_open_batch_to_it(archive, tmp_path):
    with OpenAIBatchServer(hold=True) as server:
        ev = make(tmp_path, "mixed", "openai-chat", server)
        with pytest.raises(Stopped):
            asyncio.run(read_archive_batch(archive, ev, PHASES, poll_s=0, seen=_stop))
        sync = asyncio.run(read_archive(archive, ev, PHASES))
        assert sync.read_ok == 0 and sync.in_batch > 0
        server.release()
        summary = batch(archive, ev)
    assert summary.read_ok == len(ReadStore(archive, ev.evaluator_id).batches()[0][0].custom_ids)


@pytest.mark.slow
@pytest.mark.parametrize(("protocol", "how"), [("openai-chat", signal.SIGINT), ("anthropic", signal.SIGKILL)])
def test_a_killed_read_resumes_polling_the_same_batch_without_resubmitting(archive, tmp_path, capsys, protocol,
                                                                          how):
    """The read is killed in a child process (Ctrl-C or kill -9) once it polled its submitted batch; the
    same command, run again (here, in this process), resumes polling that batch and submits nothing."""
    with server_for(protocol, hold=True) as server:
        toml = evaluator_file(tmp_path, f"killed-{protocol}", protocol, server.base_url)
        args = ["read", str(archive.root), "--evaluator", str(toml), "--phase", "final", "--batch", "--poll-s", "0.05"]
        proc = fork_cli(args, tmp_path / "killed.log")
        try:
            while not server.retrieved.wait(0.05):  # until the submitted batch has been polled once
                assert proc.is_alive(), (tmp_path / "killed.log").read_text()
        finally:
            assert proc.pid is not None
            os.kill(proc.pid, how)
            proc.join()
        code = proc.exitcode
        assert code == (130 if how == signal.SIGINT else -signal.SIGKILL), (tmp_path / "killed.log").read_text()
        store = ReadStore(archive, f"killed-{protocol}")
        [job] = store.open_batches()  # persisted before polling began
        assert server.creates == 1 and read_files(archive, job.evaluator_id) == {}
        server.release()
        capsys.readouterr()
        assert main(args) == 0, capsys.readouterr().err
    summary = json.loads(capsys.readouterr().out)
    assert server.creates == 1 and summary["batches_resumed"] == [job.batch_id] and not summary["batches_submitted"]
    assert summary["read_ok"] == len(job.custom_ids) and store.open_batches() == []
    with connect(archive) as con:
        rows = con.execute("SELECT DISTINCT transport, batch_id FROM reads WHERE evaluator_id = ?",
                           [job.evaluator_id]).fetchall()
    assert rows == [("batch", job.batch_id)]


def test_jobs_are_split_by_lines_and_by_bytes():
    lines = [BatchLine(f"id{n}", {"model": "m", "text": "x" * size}) for n, size in enumerate([10, 10, 10, 200, 10])]
    one = len(json.dumps(lines[0].body, separators=(",", ":")))
    by_count = chunks(lines, 2, 10_000)
    assert [[x.custom_id for x in job] for job in by_count] == [["id0", "id1"], ["id2", "id3"], ["id4"]]
    by_size = chunks(lines, 100, 3 * one)
    assert [[x.custom_id for x in job] for job in by_size] == [["id0", "id1", "id2"], ["id3"], ["id4"]]


def test_many_jobs_are_submitted_once_each_and_all_ingested(archive, tmp_path, monkeypatch):
    monkeypatch.setattr(OpenAIBatch, "max_lines", 3)
    with OpenAIBatchServer() as server:
        ev = make(tmp_path, "many-jobs", "openai-chat", server)
        summary = batch(archive, ev)
    jobs = ReadStore(archive, ev.evaluator_id).batches()
    lines = [c for job, _ in jobs for c in job.custom_ids]
    assert server.creates == len(jobs) == len(summary.batches_submitted) == -(-len(lines) // 3) > 1
    assert len(set(lines)) == len(lines) == summary.read_ok and all(end is not None for _, end in jobs)
