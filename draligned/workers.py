"""Run a study's slots in N processes, each with its own event loop (``draligned run --workers N``).

The parent plans, holds the archive's ``.run.lock``, archives the provenance files and rebuilds the index
at the end (draligned.runner). Here it starts N worker processes, each running one share of the study's
lanes on its own event loop, and serves them over one Unix socket (JSON lines). The parent runs no lanes
itself: every run start waits for its ``take`` to be answered, and a parent whose loop also ran a share of
the runs answered the workers' only between its own runs' work, 0.1-1 s late at 64-256 runs in flight on
2 cores, so the workers' lanes idled at every run's start and the parent's ended most runs
(benchmarks/README.md). A study with a single share (one lane, or one slot to do) runs on the parent's loop
and starts no worker.

- **slots**: a lane asks for its next slot whenever it is free (a queue, so a slow slot holds up no one)
  and reports each run that ended; the parent's ``Dispatch`` applies the study cost cap and the
  stop-after-connection-failures rule at every start, counts every run and tells the progress callback;
- **connection limits**: each model's limit (fixed, or adaptive AIMD) is the parent's own model's
  ``ConnectionLimit``; a worker's model holds a ``LeasedLimit``, a lease of places of it that the worker
  keeps between its requests while no one waits for a place (draligned.models.limits), so
  ``max_connections = 8`` means 8 requests in flight across all processes, an adaptive limit adapts on
  all of their outcomes, and an uncontended request costs no message to the parent.

Workers write their runs into the one archive directly (its files are write-once and content-addressed,
each run has its own writer). They are forked by multiprocessing's fork server: a fresh interpreter (never a
fork of the running event loop) started once per parent process, which has imported this module and the
study's model protocols (the ``openai`` SDK: about a second of CPU), so each worker starts as a fork of it
instead of importing all of that again (N workers, and every later study of the same process). A worker
takes the parent's environment and directory as they are when it starts, and dies with the parent: its kill
closes the socket, and a worker whose parent is gone stops. The workers start from a thread while the
parent's loop serves those already started. The study's ``concurrency`` is split over the workers, so it
still bounds the runs in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
import multiprocessing
import os
import pickle
import shutil
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Coroutine, Iterator
from multiprocessing.context import ForkServerContext, ForkServerProcess
from pathlib import Path
from typing import Any

from draligned.archive import Archive
from draligned.models import ModelAPI
from draligned.models.base import PROTOCOLS
from draligned.models.limits import ConnectionLimit, LeasedLimit, Lender
from draligned.records import Slot
from draligned.runner import (
    STUDY_ERRORS,
    Dispatch,
    Execute,
    RunOutcome,
    in_process,
    open_study_search,
    prepare_models,
    run_slots,
)
from draligned.study import Study, StudyError
from draligned.tools.pool_search import StudySearch

LINE_LIMIT = 1 << 22
"""Longest message line (a slot, a run's outcome with its status reason)."""
LINE_DRAIN_S = 5.0
"""How long the parent reads the lines of workers that ended (their last messages: a refusal, an error) before
it decides how the study ended; bounded in case a process a worker started still holds its end open."""


class WorkerFailed(RuntimeError):
    """A worker process ended with an error or died; its running runs stay interrupted (run again to resume)."""


class WorkerRefused(StudyError):
    """A worker process refused its input (one of STUDY_ERRORS: a key not set where it runs, an archive it
    cannot write): the study's error, as the parent's own refusal of it would be (the CLI's exit 2)."""


GC_THRESHOLD = (100_000, 50, 100)
"""The cyclic collector's generation thresholds while a study runs (Python's default: 700, 10, 10)."""


class _Collector:
    """The collector's settings for studies: the first study to start (of those running in this process's
    threads at once) sets them, the last to end puts Python's back."""

    def __init__(self) -> None:
        self._lock, self._studies, self._saved = threading.Lock(), 0, gc.get_threshold()

    @contextlib.contextmanager
    def for_a_study(self) -> Iterator[None]:
        with self._lock:
            if self._studies == 0:
                self._saved = gc.get_threshold()
                gc.freeze()
                gc.set_threshold(*GC_THRESHOLD)
            self._studies += 1
        try:
            yield
        finally:
            with self._lock:
                self._studies -= 1
                if self._studies == 0:
                    gc.set_threshold(*self._saved)
                    gc.unfreeze()


_COLLECTOR = _Collector()


def run_loop(main: Coroutine[Any, Any, Any]) -> Any:
    """Run ``main`` on a fresh event loop, as ``asyncio.run``, with the cyclic garbage collector set for a
    study: the objects alive at its start (modules, schemas, the study) frozen out of its passes, and a young
    generation of 100,000 objects instead of 700. With the default, a study with many requests in flight
    collected every few requests and walked every live run context each time: about a fifth of the CPU of an
    SDK call (benchmarks/README.md). Reference counting frees everything else as before; the collector's
    settings are put back after (after the last, when studies run in several threads)."""
    with _COLLECTOR.for_a_study():
        return asyncio.run(main)


def lanes(concurrency: int, workers: int) -> list[int]:
    """The study's ``concurrency`` split over at most ``workers`` processes (none gets 0 lanes)."""
    n = max(1, min(workers, concurrency))
    return [concurrency // n + (i < concurrency % n) for i in range(n)]


def limited(model: ModelAPI) -> ConnectionLimit | None:
    """The connection limit of a model that has one (the remote protocols; behind the replay cache too)."""
    inner = getattr(model, "inner", model)
    limit = getattr(inner, "connections", None)
    return limit if isinstance(limit, ConnectionLimit) else None


def in_workers(workers: int) -> Execute:
    """An ``Execute`` for draligned.runner.run_study that runs the slots in ``workers`` worker processes
    (``workers`` 1, or a study with one share of lanes: on the parent's own event loop)."""
    if workers <= 1:
        return in_process

    async def execute(study: Study, search: StudySearch, models: dict[str, ModelAPI], dispatch: Dispatch) -> None:
        shares = lanes(study.spec.concurrency, min(workers, dispatch.total))
        if len(shares) == 1:
            await in_process(study, search, models, dispatch)
        else:
            await _serve(study, models, dispatch, shares)
    return execute


async def _serve(study: Study, models: dict[str, ModelAPI], dispatch: Dispatch, shares: list[int]) -> None:
    """Start one worker process per share of lanes and serve them until every one has ended, then raise if
    one failed."""
    writers: dict[int, asyncio.StreamWriter] = {}

    def tell(source: int, msg: dict[str, Any]) -> None:
        if (writer := writers.get(source)) is not None and not writer.is_closing():
            writer.write(json.dumps(msg).encode() + b"\n")

    lenders = {name: Lender(name, limit, tell) for name, m in models.items() if (limit := limited(m)) is not None}
    errors: list[str] = []  # a worker's failure: a bug, with its traceback
    refusals: list[str] = []  # a worker's refusal of its input: the error's message
    stopping = threading.Event()  # the study ended or was interrupted: no worker starts, none takes a slot
    sources = itertools.count(1)
    lines: set[asyncio.Task[Any]] = set()  # each worker's line being served: read to its end before the verdict

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        source, waiting = next(sources), set()
        writers[source] = writer
        if (this := asyncio.current_task()) is not None:
            lines.add(this)

        async def grant(rid: int, model: str) -> None:
            tell(source, {"id": rid, **await lenders[model].grant(source)})

        try:
            while line := await reader.readline():
                msg = json.loads(line)
                op = msg["op"]
                if op == "take":
                    got = None if errors or refusals or stopping.is_set() else dispatch.take(source, msg["running"])
                    tell(source, {"id": msg["id"], "slot": None if got is None else got[0].model_dump(mode="json"),
                                  "attempt": None if got is None else got[1]})
                elif op == "end":
                    dispatch.end(RunOutcome.model_validate(msg["outcome"]), source, msg["running"])
                elif op == "retrying":
                    dispatch.retrying(msg["slot"], msg["delta"])
                elif op == "acquire":
                    task = asyncio.create_task(grant(msg["id"], msg["model"]))
                    waiting.add(task)
                    task.add_done_callback(waiting.discard)
                elif op == "release":
                    await lenders[msg["model"]].give_back(source, msg["n"])
                elif op == "outcome":
                    await lenders[msg["model"]].report(msg["outcome"], msg["n"])
                elif op == "error":
                    errors.append(msg["message"])
                    stopping.set()  # no more workers start: they would fail the same way
                elif op == "refused":
                    refusals.append(msg["message"])
                    stopping.set()
        finally:  # a worker that ended or died holds no place in any limit
            for task in waiting:
                task.cancel()
            del writers[source]
            for lender in lenders.values():
                await lender.drop(source)
            writer.close()

    tmp = Path(tempfile.mkdtemp(prefix="draligned-workers-"))
    path = tmp / "parent.sock"
    server = await asyncio.start_unix_server(serve, path, limit=LINE_LIMIT)
    context = fork_server(study)
    # The study as loaded: the parent runs none of its runs, so nothing unpicklable is attached to it.
    common = (sorted(models), sorted(lenders), dict(os.environ), os.getcwd())
    frozen = pickle.dumps(study)
    procs: list[ForkServerProcess] = [
        context.Process(target=worker_main, args=(frozen, str(path), share, *common), daemon=True,
                        name="draligned-worker")
        for share in shares]
    # From a thread: a fork server that is still importing answers only once it has (the loop meanwhile
    # serves the workers already started). Shielded: a cancel (Ctrl-C, SIGTERM) must not leave the thread
    # starting workers unseen; it stops before the next start instead, and a worker started meanwhile is
    # given no slot.
    starting = asyncio.ensure_future(asyncio.to_thread(_start, procs, stopping))
    try:
        await asyncio.shield(starting)
        for proc in procs:
            await asyncio.to_thread(proc.join)
    finally:
        stopping.set()
        await asyncio.wait([starting])  # no worker starts after the study ended
        if not starting.cancelled():
            starting.exception()  # seen here when the cancel above was raised instead
        started = [proc for proc in procs if proc.pid is not None]
        for proc in started:  # interrupted (Ctrl-C, SIGTERM): each worker cancels its runs, which clean up
            if proc.is_alive():
                proc.terminate()
        for proc in started:
            await asyncio.to_thread(proc.join)
        if lines:  # every worker has ended, so each line is at its end: read what it still holds
            await asyncio.wait(lines, timeout=LINE_DRAIN_S)
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    if errors:
        raise WorkerFailed("a worker process failed; its running runs stay interrupted (run again to resume):\n"
                           + errors[0])
    if refusals:  # before the exit codes: a worker that refused ends with 2
        raise WorkerRefused(f"{refusals[0]} (in a worker process; its running runs stay interrupted: run again "
                            f"to resume)")
    if dead := [p.exitcode for p in procs if p.exitcode != 0]:
        raise WorkerFailed(f"worker processes died (exit codes {dead}); their running runs stay interrupted "
                           f"(run again to resume)")


def _start(procs: list[ForkServerProcess], stopping: threading.Event) -> None:
    """Start the worker processes (each a fork of the fork server; blocks while that server is importing),
    none once ``stopping`` is set."""
    for proc in procs:
        if stopping.is_set():
            return
        proc.start()


class Channel:
    """A worker's line to the parent: requests answered by id, and notices that need no answer. When the
    parent goes away (killed: the archive lock is free, so another ``run`` may start those slots) before
    the worker closes the line, ``gone`` is called: the worker cancels its runs rather than finish them."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gone: Callable[[], Any],
                 notice: Callable[[dict[str, Any]], None]) -> None:
        self._writer, self._ids, self._gone, self._notice = writer, itertools.count(), gone, notice
        self._closing = False
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reading = asyncio.create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(ConnectionError):
            while line := await reader.readline():
                msg = json.loads(line)
                if "id" not in msg:
                    self._notice(msg)
                elif not (fut := self._pending.pop(msg["id"])).done():
                    fut.set_result(msg)
        for fut in self._pending.values():
            fut.set_exception(ConnectionError("the study's parent process is gone"))
        self._pending.clear()
        if not self._closing:
            self._gone()

    def send(self, msg: dict[str, Any]) -> None:
        if not self._reading.done():
            self._writer.write(json.dumps(msg).encode() + b"\n")

    async def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        if self._reading.done():
            raise ConnectionError("the study's parent process is gone")
        rid = next(self._ids)
        fut = self._pending[rid] = asyncio.get_running_loop().create_future()
        self.send({**msg, "id": rid})
        return await fut

    async def close(self) -> None:
        """Flush what is written and close the line (the parent then sees this worker end)."""
        self._closing = True
        with contextlib.suppress(ConnectionError):
            await self._writer.drain()
        self._writer.close()


def fork_server_context(preload: list[str]) -> ForkServerContext:
    """multiprocessing's fork server context, the modules ``preload`` loaded in the server when this call
    starts it: a process has one fork server, so one already running keeps what it loaded, and its children
    import the rest."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(preload)
    return context


CLIENT_MODULES = ["httpx", "httpcore2"]
"""What a worker's first SDK client imports for its TLS context (draligned.tls, httpx2's): about 0.2 CPU-s
per worker and study when each imported them itself (py-spy, benchmarks/README.md). The fork server skips
one that is not installed."""


def fork_server(study: Study) -> ForkServerContext:
    """The fork server's context, with what a worker of ``study`` imports (this module, its SDKs and their
    HTTP clients) preloaded."""
    protocols = {PROTOCOLS[m.protocol].partition(":")[0] for m in study.spec.models if m.protocol in PROTOCOLS}
    remote = any(m.protocol != "sim" for m in study.spec.models)  # the offline simulator makes no client
    return fork_server_context([__name__, *sorted(protocols), *(CLIENT_MODULES if remote else [])])


def adopt(environ: dict[str, str], cwd: str) -> None:
    """Take the parent's environment and directory in a fork server's child (it has the server's, as they
    were when the server started)."""
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)


def worker_main(study: bytes, path: str, concurrency: int, names: list[str], shared: list[str],
                environ: dict[str, str], cwd: str) -> None:
    """A worker process: run slots of the (pickled) ``study`` from the parent at ``path``, ``concurrency`` at a
    time, until it has no more; SIGTERM and Ctrl-C cancel the running runs (they clean their workspaces up)
    and end it. It runs in the parent's ``environ`` and ``cwd`` (the fork server's are those of its start)."""
    adopt(environ, cwd)
    try:
        run_loop(_work(pickle.loads(study), path, concurrency, set(names), set(shared)))
    except (KeyboardInterrupt, asyncio.CancelledError):
        sys.exit(130)
    except STUDY_ERRORS:
        sys.exit(2)  # told to the parent, which reports it as the study's error (no traceback: not a bug)


async def _work(study: Study, path: str, concurrency: int, names: set[str], shared: set[str]) -> None:
    main = asyncio.current_task()
    assert main is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
    reader, writer = await asyncio.open_unix_connection(path, limit=LINE_LIMIT)
    leased: dict[str, LeasedLimit] = {}
    channel = Channel(reader, writer, main.cancel, lambda msg: leased[msg["model"]].told(msg["limit"], msg["keep"]))
    try:
        search = open_study_search(study)
        try:
            models = prepare_models(study, names)

            for name in shared:
                own = limited(models[name])
                assert own is not None  # the parent shares only the limits its models have
                inner: Any = getattr(models[name], "inner", models[name])
                inner.connections = leased[name] = LeasedLimit(channel.request, channel.send, name, own.adaptive)

            async def take(running: float) -> tuple[Slot, int] | None:
                got = await channel.request({"op": "take", "running": running})
                return None if got["slot"] is None else (Slot.model_validate(got["slot"]), got["attempt"])

            async def end(outcome: RunOutcome, running: float) -> None:
                channel.send({"op": "end", "outcome": outcome.model_dump(mode="json"), "running": running})

            def retrying(slot_id: str, delta: int) -> None:
                channel.send({"op": "retrying", "slot": slot_id, "delta": delta})

            await run_slots(study, Archive(study.archive_root), search, models, take, end, concurrency, retrying)
        finally:
            await search.aclose()
    except STUDY_ERRORS as exc:
        channel.send({"op": "refused", "message": str(exc)})
        raise
    except Exception as exc:
        if not isinstance(exc, ConnectionError):  # a bug, not the parent going away
            channel.send({"op": "error", "message": traceback.format_exc()})
        raise
    finally:
        await channel.close()
