"""A Ray task's node-local archive shard: it streams its run's started marker (with the files it names) to
the driver once the marker is durable, and is held under a lock while its task lives, so the next task on
the node removes the shards of workers that died. Imports no Ray (draligned.distributed.ray_run uses it)."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from draligned.archive import Archive
from draligned.archive.merge import archive_files
from draligned.records import RunRecord

SCRATCH_PREFIX = "draligned-shard-"
"""The name of a task's node-local scratch shard (in the node's temporary directory) begins so."""

Event = tuple[str, Any, Any]
"""What a task sends its driver: ("started", files, None), ("retrying", slot id, +1 | -1) or
("ended", files, RunOutcome)."""


class StreamingShard(Archive):
    """A task's node-local shard that sends its run's started marker, with the files it names, to the driver
    as soon as the marker is durable here: a try lost with its worker or node is then archived as an
    interrupted attempt, as a killed local run is."""

    def __init__(self, root: Path, send: Callable[[Event], None]) -> None:
        super().__init__(root)
        self.send, self.sent = send, set[str]()

    def write_started(self, record: RunRecord) -> bytes:
        data = super().write_started(record)
        files = self.unsent()  # the provenance (nothing is sent yet); its blobs may still wait for their commit:
        files |= {self.blob_path(sha).relative_to(self.root).as_posix(): self.get_blob(sha)
                  for sha, _ in record.blob_refs()}
        files[f"runs/{record.run_id}.started.json"] = data
        if self._commit is None:
            self._send_started(files)
            return data

        def send_once_durable(done: Future[None]) -> None:  # on the writer thread; a refused write fails the run
            if done.exception() is None:
                self._send_started(files)

        self._commit.barrier().add_done_callback(send_once_durable)
        return data

    def _send_started(self, files: dict[str, bytes]) -> None:
        self.sent |= files.keys()
        self.send(("started", files, None))

    def unsent(self) -> dict[str, bytes]:
        """The shard's files the driver has not been sent (once the run ended: the rest of the shard)."""
        return {rel: (self.root / rel).read_bytes() for rel in archive_files(self) if rel not in self.sent}


def new_scratch(base: Path) -> tuple[Path, int]:
    """A fresh scratch shard in ``base`` and the descriptor of its lock, held while its task lives (the lock
    file is locked before it gets its name, so no sweep sees it free)."""
    scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=base))
    held = os.open(scratch / ".lock-new", os.O_CREAT | os.O_WRONLY, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)
    os.rename(scratch / ".lock-new", scratch / ".lock")
    return scratch, held


def remove_dead_scratch(base: Path) -> int:
    """Remove the scratch shards in ``base`` whose task's worker died (their lock free: a live task holds
    its own); returns how many. The driver holds what such a try had sent; the rest is lost with it."""
    removed = 0
    for scratch in base.glob(f"{SCRATCH_PREFIX}*"):
        try:
            fd = os.open(scratch / ".lock", os.O_RDONLY)
        except OSError:  # being made, or being removed
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # its task is running
            continue
        else:
            shutil.rmtree(scratch, ignore_errors=True)
            removed += 1
        finally:
            os.close(fd)
    return removed
