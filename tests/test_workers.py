"""``draligned run --workers N``: slots in worker processes, one archive, limits held across workers, and a
study killed with SIGKILL mid-run resumed to exactly one finished run per slot."""

from __future__ import annotations

import asyncio
import gc
import multiprocessing.forkserver
import operator
import os
import pickle
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from draligned.archive import Archive
from draligned.cli import main
from draligned.models.limits import ConnectionLimit, LeasedLimit, Lender
from draligned.records import FINISHED
from draligned.study import load_study
from draligned.workers import GC_THRESHOLD, fork_server, lanes, run_loop
from tests.loopback_wire import WireServer
from tests.processes import start_cli
from tests.study_helpers import REPO, write_study
from tests.test_gateway import sim_study  # the priced sim study of the cost-cap checks


def test_the_study_concurrency_is_split_over_the_workers_and_bounds_them():
    assert lanes(8, 2) == [4, 4] and lanes(7, 2) == [4, 3] and lanes(3, 8) == [1, 1, 1] and lanes(5, 1) == [5]


def _finished_per_slot(archive: Archive) -> dict[str, int]:
    counts: dict[str, int] = {}
    for rec in archive.records():
        if rec.status in FINISHED:
            counts[rec.slot_id] = counts.get(rec.slot_id, 0) + 1
    return counts


@pytest.mark.slow
def test_a_study_killed_mid_run_with_two_workers_resumes_to_one_finished_run_per_slot(tmp_path):
    """kill -9 of the parent's whole process group (parent and both workers) once two runs are sealed and a
    third has started, then resume with two workers: every slot finished exactly once, the killed attempts
    kept, verify clean."""
    study = write_study(tmp_path, ["car_insurance_2f_en.json", "career_mobility_en.json"], seeds=2,
                        latency_s=0.02)
    proc = start_cli(["run", str(study), "--workers", "2"], tmp_path / "killed.log", new_session=True)
    runs = tmp_path / "archive" / "runs"
    try:
        deadline = time.monotonic() + 300  # a guard against a hang, not a timing
        def sealed_and_started() -> tuple[int, int]:
            names = [p.name for p in runs.glob("*.json")]
            started = sum(n.endswith(".started.json") for n in names)
            return len(names) - started, started

        # Kill once two runs are sealed and another has started (markers and records land in group commits).
        while (counts := sealed_and_started())[0] < 2 or counts[1] <= counts[0]:
            assert proc.poll() is None, (tmp_path / "killed.log").read_text()
            assert time.monotonic() < deadline
            time.sleep(0.005)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    archive = Archive(tmp_path / "archive")
    killed = {p.name: p.read_bytes() for p in archive.record_paths()}
    assert len(archive.started_paths()) > len(killed) >= 2  # really interrupted mid-study
    assert main(["run", str(study), "--workers", "2"]) == 0
    slots = 12  # car_insurance: 4 cells, career_mobility: 2 arms, 2 seeds each
    assert _finished_per_slot(archive) == dict.fromkeys(_finished_per_slot(archive), 1)
    assert len(_finished_per_slot(archive)) == slots
    assert all(archive.runs_dir.joinpath(n).read_bytes() == b for n, b in killed.items())  # nothing lost
    assert main(["archive", "verify", str(archive.root)]) == 0


class CountingServer(WireServer):
    """An openai-chat loopback server that counts the requests it is answering at once (each held briefly,
    so that requests the limit lets through overlap)."""

    def __init__(self) -> None:
        super().__init__("openai-chat", ["submit"])
        self.now, self.most, self.count_lock = 0, 0, threading.Lock()

    def reply(self, kind: str, number: int) -> dict[str, Any]:
        with self.count_lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(0.05)
        with self.count_lock:
            self.now -= 1
        return super().reply(kind, number)


class PairedServer(WireServer):
    """An openai-chat loopback server that answers no request until two are in flight at once: with one lane
    in each of two processes, the study finishes only if the worker sent one of them."""

    def __init__(self) -> None:
        super().__init__("openai-chat", ["submit"])
        self.pair, self.paired = threading.Barrier(2), []

    def reply(self, kind: str, number: int) -> dict[str, Any]:
        try:
            self.pair.wait(timeout=30)
            self.paired.append(True)
        except threading.BrokenBarrierError:
            self.paired.append(False)
        return super().reply(kind, number)


def openai_study(path: Path, seeds: int, concurrency: int, base_url: str, key_env: str, retry: str = "") -> Path:
    """A study at ``path`` of the demo travel card with one ``openai-chat`` model at ``base_url`` (archive
    ``archive`` beside it)."""
    path.write_text(f"""name = "{path.stem}"
cards = ["{REPO / 'factor_cards' / 'travel_budget_en.json'}"]
seeds = {seeds}
concurrency = {concurrency}
archive = "archive"
corpus = "{REPO / 'corpora' / 'demo' / 'corpus.jsonl'}"

[[models]]
name = "m"
protocol = "openai-chat"
model = "requested"
base_url = "{base_url}"
api_key_env = "{key_env}"
{retry}
""")
    return path


@pytest.mark.slow
def test_a_model_connection_limit_holds_across_two_workers(tmp_path, monkeypatch):
    """max_connections = 2 with 8 runs in flight over two processes (4 lanes each, so a limit per process
    would let 4 through): the server never answers more than 2 requests at once, and does answer 2."""
    monkeypatch.setenv("WORKERS_KEY", "sk-workers")
    with CountingServer() as server:
        study = openai_study(tmp_path / "limit.toml", 8, 8, server.base_url, "WORKERS_KEY",
                             "retry = { max_connections = 2 }")
        assert main(["run", str(study), "--workers", "2"]) == 0
    assert len(server.log) == 16 and server.most == 2
    assert len(_finished_per_slot(Archive(tmp_path / "archive"))) == 16


@pytest.mark.slow
def test_workers_run_in_the_environment_of_their_study_not_of_the_fork_server(tmp_path, monkeypatch):
    """Workers are forks of a server that outlives a study: a study's workers see the environment as it is
    when the study runs (a key set after the server started), and fail without it. The server answers only
    once both runs' requests are in (one lane per process), so the worker surely sent one."""
    with PairedServer() as server:
        later = openai_study(tmp_path / "later.toml", 1, 2, server.base_url, "LATER_KEY")
        fork_server(load_study(later))
        multiprocessing.forkserver.ensure_running()  # as an earlier study of this process would have
        monkeypatch.setenv("LATER_KEY", "sk-later")
        assert main(["run", str(later), "--workers", "2"]) == 0  # a worker without the key fails the study
    assert server.paired == [True, True] and len(server.log) == 2
    assert {e["headers"]["authorization"] for e in server.log} == {"Bearer sk-later"}
    assert len(_finished_per_slot(Archive(tmp_path / "archive"))) == 2


def test_a_bad_worker_count_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    study = write_study(tmp_path, ["travel_budget_en.json"])
    monkeypatch.setenv("DRALIGNED_WORKERS", "two")
    assert main(["run", str(study)]) == 2
    assert "error: environment variable DRALIGNED_WORKERS: must be a whole number from 1 to 256 (got 'two')" \
        in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_code:
        main(["run", str(study), "--workers", "0"])
    assert exit_code.value.code == 2 and "--workers: must be a whole number from 1 to 256 (got '0')" \
        in capsys.readouterr().err
    assert not (tmp_path / "archive").exists()


class Leases:
    """Workers' LeasedLimits over the parent's Lender, in one event loop: notices both ways are delivered in
    order as the socket would (the parent's handling of each in a task of its own), requests are counted."""

    def __init__(self, limit: ConnectionLimit) -> None:
        self.lender = Lender("m", limit, lambda source, msg: self.leases[source].told(msg["limit"], msg["keep"]))
        self.leases: dict[int, LeasedLimit] = {}
        self.requests, self.tasks = 0, []

    def lease(self, source: int, adaptive: bool) -> LeasedLimit:
        async def ask(msg: dict[str, Any]) -> dict[str, Any]:
            assert msg == {"op": "acquire", "model": "m"}
            self.requests += 1
            return await self.lender.grant(source)

        def notify(msg: dict[str, Any]) -> None:
            op = self.lender.give_back(source, msg["n"]) if msg["op"] == "release" else \
                self.lender.report(msg["outcome"], msg["n"])
            self.tasks.append(asyncio.ensure_future(op))

        self.leases[source] = LeasedLimit(ask, notify, "m", adaptive)
        return self.leases[source]

    async def settle(self) -> None:
        for _ in range(5):
            await asyncio.sleep(0)
        await asyncio.gather(*self.tasks)


def test_leased_limits_of_two_workers_count_against_one_adaptive_limit():
    """Two workers' leases of the parent's one adaptive limit (start 2, max 4): the third acquire waits for a
    release from either, successes from both raise the limit, a 429 from one halves it for all."""
    held = ConnectionLimit(2, 1, 4)
    leases = Leases(held)

    async def scenario() -> None:
        a, b = leases.lease(1, adaptive=True), leases.lease(2, adaptive=True)
        await a.acquire()
        await b.acquire()
        third = asyncio.create_task(a.acquire())
        await leases.settle()
        assert not third.done()  # 2 in flight across both workers
        await b.release("ok")
        await leases.settle()
        await third
        await a.release("ok")
        await leases.settle()
        assert a.limit == 3 == held.limit  # two successes (one from each worker) at limit 2: +1
        await a.release("throttled")
        await leases.settle()
        assert held.limit == 1 and leases.lender.held == {1: 0, 2: 0}  # a gave its kept places back
        await b.acquire()
        assert b.limit == 1 and a.adaptive and b.adaptive
        blocked = asyncio.create_task(a.acquire())
        await leases.settle()
        assert not blocked.done()  # the halved limit holds across both
        blocked.cancel()

    asyncio.run(scenario())


def test_a_worker_keeps_its_leased_places_while_no_one_waits_and_gives_them_back_when_one_does():
    """A fixed limit of 2 over two workers: a worker's repeated requests ask the parent once (it keeps the
    freed place); when the other's request must wait, the kept place goes back and is granted to it."""
    held = ConnectionLimit(2)
    leases = Leases(held)

    async def scenario() -> None:
        a, b = leases.lease(1, adaptive=False), leases.lease(2, adaptive=False)
        for _ in range(3):
            await a.acquire()
            await a.acquire()
            await a.release("ok")
            await a.release("ok")
        assert leases.requests == 2 and leases.lender.held == {1: 2}  # both kept, asked for once each
        await b.acquire()  # waits until the parent has told a to give its kept places back
        assert leases.lender.held == {1: 0, 2: 1} and leases.requests == 3
        await a.acquire()
        second = asyncio.create_task(a.acquire())
        await leases.settle()
        assert not second.done()  # 2 in flight: b's and a's
        await b.release("ok")
        await second
        assert leases.lender.held == {1: 2, 2: 0}

    asyncio.run(scenario())


def test_a_notice_read_before_a_grant_resumes_its_request_overrides_the_grant_s_keep():
    """a's second request is granted (keep: no one waits) and, before a resumes, b's request must wait, so
    the parent tells a to give its places back: a must not keep them on the grant's older word, or b
    waits for ever (two workers, no lanes in the parent: the study hung)."""
    held = ConnectionLimit(2)
    leases = Leases(held)

    async def scenario() -> None:
        a, b = leases.lease(1, adaptive=False), leases.lease(2, adaptive=False)
        await a.acquire()
        second, waiting = asyncio.create_task(a.acquire()), asyncio.create_task(b.acquire())
        await leases.settle()
        assert second.done() and not waiting.done()  # the limit's 2 places are a's
        await a.release("ok")
        await leases.settle()
        assert waiting.done() and leases.lender.held == {1: 1, 2: 1}
        await a.release("ok")
        await b.release("ok")
        await leases.settle()
        assert leases.lender.held == {1: 0, 2: 1}  # a gave its place back, b keeps its one

    asyncio.run(scenario())


@pytest.mark.slow
def test_the_study_cost_cap_holds_across_two_workers_and_a_later_run_resumes(tmp_path, capsys):
    """One lane per process, every run costs more than the cap: the parent counts every process's runs, so
    once one has ended no process starts another (at most the two that started together finish)."""
    path = sim_study(tmp_path, "max_cost_usd = 1.0")
    path.write_text(path.read_text().replace("concurrency = 1", "concurrency = 2"))
    assert main(["run", str(path), "--workers", "2"]) == 1
    out = capsys.readouterr().out
    records = Archive(tmp_path / "archive").records()
    # Which runs start is the race the rule is about: the first worker to ask always takes a slot, the
    # other takes one only if it asks before that run has ended. Never a third: once one run has ended,
    # its cost (above the cap) is counted for every process.
    assert len(records) in (1, 2)
    costs = [r.counters.cost_usd for r in records]
    assert costs == [round((r.counters.usage.input_tokens + r.counters.usage.output_tokens) * 1000.0 / 1e6, 8)
                     for r in records]  # each its own tokens at the $1,000 per million price
    assert all(c is not None and c > 1.0 for c in costs)  # each alone spends the cap
    assert f"spent: ${round(sum(c or 0.0 for c in costs), 8):.4f} of max_cost_usd $1" in out
    assert f"not started: {6 - len(records)} slot(s): study cost cap reached" in out
    path.write_text(path.read_text().replace("max_cost_usd = 1.0", "max_cost_usd = 1000.0"))
    assert main(["run", str(path), "--workers", "2"]) == 0
    assert len(_finished_per_slot(Archive(tmp_path / "archive"))) == 6


def test_a_study_loop_runs_with_fewer_collections_and_puts_the_collector_back():
    """run_loop (the event loop of ``run`` and of each worker): the objects alive before it frozen out of the
    collector's passes and the study's thresholds while it runs; Python's settings again after, even when
    the study raised, and only after the last of two studies running in two threads."""
    before = gc.get_threshold()

    async def study() -> tuple[tuple[int, int, int], int]:
        return gc.get_threshold(), gc.get_freeze_count()

    threshold, frozen = run_loop(study())
    assert threshold == GC_THRESHOLD != before and frozen > 1000
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0

    async def failing() -> None:
        raise ValueError("a study that failed")

    with pytest.raises(ValueError, match="a study that failed"):
        run_loop(failing())
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0

    first_started, first_may_end, seen = threading.Event(), threading.Event(), []

    async def first() -> None:  # starts first, ends first
        first_started.set()
        await asyncio.to_thread(first_may_end.wait)

    async def second() -> None:  # starts while the first runs, ends after it
        first_may_end.set()
        await asyncio.to_thread(one.join)
        seen.append(gc.get_threshold())

    one = threading.Thread(target=run_loop, args=(first(),))
    one.start()
    first_started.wait()
    two = threading.Thread(target=run_loop, args=(second(),))
    two.start()
    two.join()
    assert seen == [GC_THRESHOLD]  # the first's end left the second's settings alone
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0  # put back by the last to end


def test_an_interrupt_while_the_workers_start_starts_no_more_of_them_and_gives_out_no_slot(tmp_path, monkeypatch):
    """A cancel (Ctrl-C, SIGTERM) arriving while the first of two workers is being started: the second is
    never started, the first is given no slot and is gone when the study returns, and nothing ran."""
    from multiprocessing.context import ForkServerProcess

    from draligned.runner import run_study
    from draligned.workers import in_workers

    path = sim_study(tmp_path, price=False)
    path.write_text(path.read_text().replace("concurrency = 1", "concurrency = 2"))
    study = load_study(path)
    first_started, go_on, starts = threading.Event(), threading.Event(), []
    start = ForkServerProcess.start

    def held_start(proc: ForkServerProcess) -> None:  # the starting thread, held after the first start
        start(proc)
        starts.append(proc)
        if len(starts) == 1:
            first_started.set()
            go_on.wait()

    monkeypatch.setattr(ForkServerProcess, "start", held_start)

    async def interrupted() -> None:
        task = asyncio.create_task(run_study(study, execute=in_workers(2)))
        await asyncio.to_thread(first_started.wait)
        task.cancel()
        for _ in range(10):  # the cancel reaches the serving coroutine's finally, which stops the starts
            await asyncio.sleep(0)
        go_on.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(interrupted())
    assert len(starts) == 1 and not starts[0].is_alive()
    assert Archive(tmp_path / "archive").records() == []  # no slot was given out


def test_workers_that_refuse_their_input_stop_the_study_with_its_error_and_a_rerun_resumes(tmp_path, monkeypatch,
                                                                                              capsys):
    """The key is gone by the time the two workers start (the parent had it when it checked its models): each
    worker that starts refuses and exits 2 (a refusal stops the starts still to come), the study ends with that
    refusal as its error (exit 2, the message naming the model and the variable, as the parent's own check
    would), no request was sent and no run finished; run again with the key, every slot finishes."""
    from multiprocessing.context import ForkServerProcess

    import draligned.workers as workers

    monkeypatch.setenv("GONE_KEY", "sk-gone")
    start_workers, join, exit_codes = workers.fork_server, ForkServerProcess.join, []

    def key_gone_then_start(study: Any) -> Any:
        monkeypatch.delenv("GONE_KEY")
        return start_workers(study)

    def join_and_note(proc: ForkServerProcess, timeout: float | None = None) -> None:
        join(proc, timeout)
        exit_codes.append(proc.exitcode)

    with CountingServer() as server:
        study = openai_study(tmp_path / "gone.toml", 2, 2, server.base_url, "GONE_KEY")
        with monkeypatch.context() as held:
            held.setattr(workers, "fork_server", key_gone_then_start)
            held.setattr(ForkServerProcess, "join", join_and_note)
            assert main(["run", str(study), "--workers", "2"]) == 2
        assert exit_codes and set(exit_codes) == {2}  # each worker that started refused: no traceback, no crash
        out = capsys.readouterr().err
        assert "error: model 'm'" in out and "GONE_KEY (api_key_env) is not set" in out
        assert "in a worker process" in out and "Traceback" not in out
        assert server.log == [] and _finished_per_slot(Archive(tmp_path / "archive")) == {}
        monkeypatch.setenv("GONE_KEY", "sk-gone")
        assert main(["run", str(study), "--workers", "2"]) == 0
    assert sorted(_finished_per_slot(Archive(tmp_path / "archive")).values()) == [1, 1, 1, 1]


class _Unloadable:
    """Pickles in the parent; its unpickling in a worker raises (ZeroDivisionError) before the worker runs."""

    def __reduce__(self) -> tuple[Any, tuple[int, int]]:
        return operator.truediv, (1, 0)


def test_workers_that_die_at_their_start_fail_the_study_and_run_nothing(tmp_path, monkeypatch):
    """Both workers die before they reach the parent (the study they are sent does not load): the study
    raises WorkerFailed with their exit codes (not a refusal: a bug), and no run was started."""
    import draligned.workers as workers

    path = sim_study(tmp_path, price=False)
    path.write_text(path.read_text().replace("concurrency = 1", "concurrency = 2"))
    monkeypatch.setattr(workers, "pickle", SimpleNamespace(dumps=lambda _study: pickle.dumps(_Unloadable())))
    with pytest.raises(workers.WorkerFailed, match=r"worker processes died \(exit codes \[1, 1\]\)"):
        main(["run", str(path), "--workers", "2"])
    assert Archive(tmp_path / "archive").records() == []
