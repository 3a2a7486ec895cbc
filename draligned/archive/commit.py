"""Group commit: a study run's (or an evaluator read's) archive writes made durable on a writer thread, many
files per sync.

``write_once`` costs a temp file, an fsync and a link per file, and a study's runs would pay it on
the event loop, every fsync stalling every run in flight. Under :meth:`Archive.group_commit` the
archive hands its writes to one thread instead. The writes of one step of an event loop are handed over
together, at the end of the step (or at the next :meth:`GroupCommit.barrier`): waking the thread for each
file cost the loop about a tenth of its CPU per model call at 256 runs in flight (benchmarks/README.md).
The thread takes everything handed over as one batch:

1. each new file's bytes go to a ``.tmp-*`` file beside it (as ``write_once``);
2. one ``syncfs`` makes all their data durable;
3. the blobs and other files are linked to their names (``os.link`` never clobbers), then, after a
   second ``syncfs`` has made those names durable, the files that name blobs (run records, an
   evaluator's packets and reads: ``Archive.put_file``) are linked, so none is durable before a blob
   it names;
4. a last ``syncfs`` makes the names durable and the batch's waiters are told.

A crash therefore leaves each file absent or complete, and a run is reported finished (the runner
awaits :meth:`Archive.durable` first) only once its record and everything it names are on disk.
Writing an existing name with other bytes raises ArchiveError with ``write_once``'s message, at the
next ``durable``; readers of the archive see queued files through :meth:`GroupCommit.pending`. The writer
stops at its first error (fail-stop): that batch and everything queued after it are never linked, and each
later write raises the error at once. A batch that failed is gone as a whole, blobs included, so a later
record or packet naming one of its blobs (not queued again: the archive remembers it as put) must not land.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import queue
import secrets
import threading
from concurrent.futures import Future
from pathlib import Path

from draligned.archive.errors import ArchiveError, refuse_overwrite

_LIBC = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def sync_filesystem(fd: int) -> None:
    """Flush every written file and name of the filesystem holding ``fd`` (``syncfs``; ``sync`` elsewhere)."""
    syncfs = getattr(_LIBC, "syncfs", None)
    if syncfs is None:  # not Linux: the whole machine's writes
        os.sync()
    elif syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


Write = tuple[str, bytes, bool]
"""(path, bytes, names blobs (a run record, a packet, a read): linked only after the files it names are durable)."""


class GroupCommit:
    """The writer thread of one archive during a study run (see module docstring)."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self._root_fd = os.open(root, os.O_RDONLY)
        self._queue: queue.SimpleQueue[list[Write] | Future[None] | None] = queue.SimpleQueue()
        self.pending: dict[str, bytes] = {}
        """Path -> bytes of every queued write not yet under its name (readers look here first)."""
        self._dirs: set[str] = set()
        self._error: ArchiveError | OSError | None = None
        self._held: list[Write] = []
        """Writes not yet handed to the thread, in the order they were made (see :meth:`write`)."""
        self._handing = threading.Lock()
        """Held while a write joins ``_held`` or ``_held`` goes to the queue: the writes reach the thread in
        the order they were made, from whichever thread."""
        self._thread = threading.Thread(target=self._run, name="archive-group-commit", daemon=True)
        self._thread.start()

    def write(self, path: str, data: bytes, record: bool = False) -> None:
        """Queue ``data`` for ``path`` (never overwritten; identical bytes already there are fine); raises the
        writer's error once it has stopped at one. Made on an event loop, the write is handed to the thread
        with the others of the loop's step, at its end; elsewhere, at once."""
        if self._error is not None:
            raise self._error
        self.pending[path] = data
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # no loop in this thread: nothing would hand it over later
            loop = None
        with self._handing:
            self._held.append((path, data, record))
            first = len(self._held) == 1
        if loop is None:
            self._hand_over()
        elif first:
            loop.call_soon(self._hand_over)

    def _hand_over(self) -> None:
        """Give the thread every write held so far, as one item of its queue."""
        with self._handing:
            held, self._held = self._held, []
            if held:
                self._queue.put(held)

    def barrier(self) -> Future[None]:
        """A future done when every write made so far is durable (or failed: the first ArchiveError)."""
        self._hand_over()
        done: Future[None] = Future()
        self._queue.put(done)
        return done

    def close(self) -> None:
        """Make everything queued durable and stop the thread; raise the first write error, if any."""
        self._hand_over()
        self._queue.put(None)
        self._thread.join()
        os.close(self._root_fd)
        if self._error is not None:
            raise self._error

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            writes = [w for b in batch if isinstance(b, list) for w in b]
            try:
                if self._error is None:  # fail-stop: nothing is linked after the first error
                    self._commit(writes)
            except (ArchiveError, OSError) as exc:
                self._error = exc
            finally:
                for path, _, _ in writes:
                    self.pending.pop(path, None)
            for waiter in batch:
                # a waiter given up (its run cancelled) is skipped: setting it would kill this thread
                if isinstance(waiter, Future) and waiter.set_running_or_notify_cancel():
                    if self._error is not None:
                        waiter.set_exception(self._error)
                    else:
                        waiter.set_result(None)
            if any(b is None for b in batch):
                return

    def _commit(self, writes: list[Write]) -> None:
        staged: list[tuple[str, str, bytes, bool]] = []
        try:
            for path, data, record in writes:
                if (tmp := self._stage(path, data)) is not None:
                    staged.append((tmp, path, data, record))
            if not staged:
                return
            sync_filesystem(self._root_fd)  # the bytes, before any name points at them
            files = [s for s in staged if not s[3]]
            records = [s for s in staged if s[3]]
            for tmp, path, data, _ in files:
                self._link(tmp, path, data)
            if records:
                if files:
                    sync_filesystem(self._root_fd)  # the blobs' names, before a record naming them
                for tmp, path, data, _ in records:
                    self._link(tmp, path, data)
            sync_filesystem(self._root_fd)
        finally:
            for tmp, *_ in staged:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass

    def _stage(self, path: str, data: bytes) -> str | None:
        """Write ``data`` to a temp file beside ``path``; None when ``path`` already holds these bytes."""
        parent = os.path.dirname(path)
        if parent not in self._dirs:
            os.makedirs(parent, exist_ok=True)
            self._dirs.add(parent)
        if os.path.exists(path):
            if Path(path).read_bytes() != data:
                refuse_overwrite(Path(path))
            return None
        tmp = os.path.join(parent, f".tmp-{secrets.token_hex(8)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # as mkstemp
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        return tmp

    @staticmethod
    def _link(tmp: str, path: str, data: bytes) -> None:
        try:
            os.link(tmp, path)
        except FileExistsError:
            if Path(path).read_bytes() != data:
                refuse_overwrite(Path(path))
