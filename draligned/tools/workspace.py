"""A run's workspace on the host, as the file tools and the snapshotter see it.

The agent names files as ``/workspace/x`` or ``x``. Resolution is the safety rule: a path
with a ``..`` component, an absolute path outside ``/workspace``, or one that resolves
(through symlinks) outside the workspace directory is refused with a clear tool error, so
the file tools never touch a host file. Snapshots never follow symlinks either (a symlink
is recorded by its target text).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

MOUNT = PurePosixPath("/workspace")
DELIVERABLE = "deliverable.md"


class PathRefused(Exception):
    """A path the file tools will not touch; the message is returned to the agent."""


@dataclass(frozen=True)
class Manifest:
    """The state of a workspace: regular files by relative path (bytes), symlinks by target, and
    the sizes of files left out because the snapshot cap was reached."""

    files: dict[str, bytes]
    symlinks: dict[str, str]
    oversize: dict[str, int]
    unreadable: dict[str, str] = field(default_factory=dict)
    """Files or directories the orchestrator could not read (e.g. the agent ran chmod 000), with why."""


class Workspace:
    """A host directory mounted at /workspace; ``read_only`` is a subdirectory the tools must not change."""

    def __init__(self, root: Path, owner: int | None = None, read_only: str | None = None) -> None:
        self.root = root.resolve()
        self.owner = owner
        self.read_only = read_only

    def relative(self, path: str) -> str:
        """The workspace-relative form of an agent's path, or PathRefused saying why not."""
        if "\0" in path:
            raise PathRefused("the path contains a NUL character")
        p = PurePosixPath(path.strip())
        if p.is_absolute():
            if p != MOUNT and MOUNT not in p.parents:
                raise PathRefused(f"{path!r} is outside /workspace; only files under /workspace can be used")
            p = p.relative_to(MOUNT)
        if ".." in p.parts:
            raise PathRefused(f"{path!r} contains '..'; paths may not leave /workspace")
        rel = str(p)
        if rel in ("", "."):
            raise PathRefused(f"{path!r} is the workspace directory itself, not a file")
        return rel

    def resolve(self, path: str, write: bool = False) -> Path:
        """The host path for an agent's path after checking every rule (symlinks resolved)."""
        rel = self.relative(path)
        real = Path(os.path.realpath(self.root / rel))
        if real != self.root and self.root not in real.parents:
            raise PathRefused(f"{path!r} is a symlink that points outside /workspace; refused")
        inside = real.relative_to(self.root).as_posix()
        if write and self.read_only and (inside == self.read_only or inside.startswith(self.read_only + "/")):
            raise PathRefused(f"{path!r} is in the read-only input snapshot /workspace/{self.read_only}")
        return real

    def read_text(self, path: str) -> str:
        """A file's text (UTF-8); PathRefused when it is missing, a directory or not text."""
        real = self.resolve(path)
        if not real.is_file():
            raise PathRefused(f"{path!r} does not exist or is not a file")
        try:
            return real.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PathRefused(f"{path!r} is not UTF-8 text") from exc
        except OSError as exc:  # e.g. made unreadable by the agent: a tool error, not a failed run
            raise PathRefused(f"{path!r} cannot be read: {exc.strerror}") from exc

    def write_text(self, path: str, text: str) -> None:
        """Create or replace a file (parent directories too), owned by the sandbox uid."""
        real = self.resolve(path, write=True)
        if real.exists() and not real.is_file():
            raise PathRefused(f"{path!r} exists and is not a regular file")
        missing = [d for d in [real.parent, *real.parent.parents] if self.root in d.parents and not d.exists()]
        try:
            real.parent.mkdir(parents=True, exist_ok=True)
            real.write_text(text, encoding="utf-8")
        except OSError as exc:  # e.g. a parent is a file ('notes.md/x'): a tool error, not a failed run
            raise PathRefused(f"{path!r} cannot be written: {exc.strerror}") from exc
        if self.owner is not None:
            for p in [real, *missing]:
                os.chown(p, self.owner, self.owner)

    def manifest(self, max_bytes: int) -> Manifest:
        """Every regular file and symlink under the root, never following a symlink; files are read
        in path order until ``max_bytes`` in total, larger remainders are listed by size only."""
        files: dict[str, bytes] = {}
        symlinks: dict[str, str] = {}
        oversize: dict[str, int] = {}
        unreadable: dict[str, str] = {}
        total = 0

        def note(exc: OSError) -> None:  # recorded, never a crash of the run nor a silent gap
            unreadable[Path(exc.filename).relative_to(self.root).as_posix()] = exc.strerror or type(exc).__name__

        for dirpath, dirnames, filenames in os.walk(self.root, onerror=note):
            for name in sorted(dirnames + filenames):
                full = Path(dirpath) / name
                rel = full.relative_to(self.root).as_posix()
                if full.is_symlink():
                    symlinks[rel] = os.readlink(full)
                elif name in filenames and full.is_file():
                    size = full.stat().st_size
                    if total + size > max_bytes:
                        oversize[rel] = size
                        continue
                    try:
                        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW)
                    except OSError as exc:
                        note(exc)
                        continue
                    with os.fdopen(fd, "rb") as fh:
                        files[rel] = fh.read()
                    total += len(files[rel])
        return Manifest(files=dict(sorted(files.items())), symlinks=dict(sorted(symlinks.items())),
                        oversize=dict(sorted(oversize.items())), unreadable=dict(sorted(unreadable.items())))
