"""A run's workspace on the host, as the file tools and the snapshotter see it.

The agent names files as ``/workspace/x`` or ``x``. Resolution is the safety rule: a path
with a ``..`` component, an absolute path outside ``/workspace``, or one that resolves
(through symlinks) outside the workspace directory is refused with a clear tool error, so
the file tools never touch a host file; so is a path too long for the file system, and no error
text names the host directory. Snapshots never follow symlinks either (a symlink is recorded by
its target text). A file name that is not UTF-8 (a shell can create one) is recorded in an
escaped form (``bad\\xffname``). A workspace has a quota: write_file and edit_file refuse to go
over it, and ``usage`` lets the shell tool report a command that went over it; a snapshot lists
at most ``MAX_ENTRIES`` paths and counts the rest.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

MOUNT = PurePosixPath("/workspace")
DELIVERABLE = "deliverable.md"
MAX_PATH_CHARS = 1024
"""Longest path the file tools accept (Linux allows 4096 bytes; no report needs more than this)."""
MAX_NAME_BYTES = 255
"""Longest file name component in bytes (NAME_MAX)."""
MAX_ENTRIES = 10_000
"""Paths one snapshot lists at most; the rest are counted (``Manifest.omitted``)."""


def escaped(name: str) -> str:
    """A file name as the archive records it: valid UTF-8 as is, other bytes as ``\\xNN``."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def shown(path: str) -> str:
    """An agent's path as an error quotes it: repr, cut to 120 characters."""
    return repr(path) if len(path) <= 120 else repr(path[:100]) + f"... ({len(path)} characters)"


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
    omitted: int = 0
    """Paths not listed because the snapshot already lists ``MAX_ENTRIES``."""


class Workspace:
    """A host directory mounted at /workspace; ``read_only`` is a subdirectory the tools must not change."""

    def __init__(self, root: Path, owner: int | None = None, read_only: str | None = None,
                 quota_bytes: int | None = None) -> None:
        self.root = root.resolve()
        self.owner = owner
        self.read_only = read_only
        self.quota_bytes = quota_bytes
        """Total bytes of regular files the workspace may hold (None: no quota)."""

    def relative(self, path: str) -> str:
        """The workspace-relative form of an agent's path, or PathRefused saying why not."""
        if "\0" in path:
            raise PathRefused("the path contains a NUL character")
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            raise PathRefused(f"{shown(path)} is not valid Unicode text") from None
        if len(path) > MAX_PATH_CHARS:
            raise PathRefused(f"{shown(path)} is longer than {MAX_PATH_CHARS} characters")
        if long := next((c for c in PurePosixPath(path).parts if len(c.encode("utf-8", "surrogateescape"))
                         > MAX_NAME_BYTES), None):
            raise PathRefused(f"{shown(path)} has a name longer than {MAX_NAME_BYTES} bytes ({shown(long)})")
        p = PurePosixPath(path.strip())
        if p.is_absolute():
            if p != MOUNT and MOUNT not in p.parents:
                raise PathRefused(f"{shown(path)} is outside /workspace; only files under /workspace can be used")
            p = p.relative_to(MOUNT)
        if ".." in p.parts:
            raise PathRefused(f"{shown(path)} contains '..'; paths may not leave /workspace")
        rel = str(p)
        if rel in ("", "."):
            raise PathRefused(f"{shown(path)} is the workspace directory itself, not a file")
        return rel

    def resolve(self, path: str, write: bool = False) -> Path:
        """The host path for an agent's path after checking every rule (symlinks resolved)."""
        rel = self.relative(path)
        try:
            real = Path(os.path.realpath(self.root / rel))
        except (OSError, ValueError) as exc:  # never the host path in the message: it reaches the archive
            raise PathRefused(f"{shown(path)} cannot be used: {getattr(exc, 'strerror', None) or 'invalid'}") from exc
        if real != self.root and self.root not in real.parents:
            raise PathRefused(f"{path!r} is a symlink that points outside /workspace; refused")
        inside = real.relative_to(self.root).as_posix()
        if write and self.read_only and (inside == self.read_only or inside.startswith(self.read_only + "/")):
            raise PathRefused(f"{path!r} is in the read-only input snapshot /workspace/{self.read_only}")
        return real

    def read_text(self, path: str) -> str:
        """A file's text (UTF-8); PathRefused when it is missing, a directory or not text."""
        real = self.resolve(path)
        try:
            if not real.is_file():
                raise PathRefused(f"{shown(path)} does not exist or is not a file")
            return real.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PathRefused(f"{shown(path)} is not UTF-8 text") from exc
        except OSError as exc:  # e.g. made unreadable by the agent: a tool error, not a failed run
            raise PathRefused(f"{shown(path)} cannot be read: {exc.strerror}") from exc

    def write_text(self, path: str, text: str) -> None:
        """Create or replace a file (parent directories too), owned by the sandbox uid."""
        real = self.resolve(path, write=True)
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            raise PathRefused(f"the content for {shown(path)} is not valid Unicode text") from None
        try:
            if real.exists() and not real.is_file():
                raise PathRefused(f"{shown(path)} exists and is not a regular file")
            if self.quota_bytes is not None:
                after = self.usage() - (real.stat().st_size if real.exists() else 0) + len(data)
                if after > self.quota_bytes:
                    raise PathRefused(f"writing {shown(path)} would put the workspace over its quota "
                                      f"({after >> 20} of {self.quota_bytes >> 20} MiB); remove files first")
            missing = [d for d in [real.parent, *real.parent.parents] if self.root in d.parents and not d.exists()]
            real.parent.mkdir(parents=True, exist_ok=True)
            real.write_bytes(data)
        except OSError as exc:  # e.g. a parent is a file ('notes.md/x'): a tool error, not a failed run
            raise PathRefused(f"{shown(path)} cannot be written: {exc.strerror}") from exc
        if self.owner is not None:
            for p in [real, *missing]:
                os.chown(p, self.owner, self.owner)

    def usage(self) -> int:
        """Bytes of the regular files under the root (symlinks not followed, unreadable parts skipped)."""
        total = 0
        for dirpath, _, filenames in os.walk(self.root):
            for name in filenames:
                try:
                    st = os.lstat(os.path.join(dirpath, name))
                except OSError:
                    continue
                total += st.st_size if stat.S_ISREG(st.st_mode) else 0
        return total

    def over_quota(self) -> str | None:
        """What the agent is told when the workspace holds more than its quota; None when within it."""
        if self.quota_bytes is None or (used := self.usage()) <= self.quota_bytes:
            return None
        return (f"the workspace holds {used >> 20} MiB, over its quota of {self.quota_bytes >> 20} MiB; "
                f"remove files (file writes are refused until it is back under the quota)")

    def manifest(self, max_bytes: int) -> Manifest:
        """Every regular file and symlink under the root, never following a symlink; files are read
        in path order until ``max_bytes`` in total, larger remainders are listed by size only."""
        files: dict[str, bytes] = {}
        symlinks: dict[str, str] = {}
        oversize: dict[str, int] = {}
        unreadable: dict[str, str] = {}
        total = omitted = 0

        def note(exc: OSError) -> None:  # recorded, never a crash of the run nor a silent gap
            rel = escaped(Path(exc.filename).relative_to(self.root).as_posix())
            unreadable[rel] = exc.strerror or type(exc).__name__

        for dirpath, dirnames, filenames in os.walk(self.root, onerror=note):
            for name in sorted(dirnames + filenames):
                if len(files) + len(symlinks) + len(oversize) + len(unreadable) >= MAX_ENTRIES:
                    omitted += 1
                    continue
                full = Path(dirpath) / name
                rel = escaped(full.relative_to(self.root).as_posix())
                if full.is_symlink():
                    symlinks[rel] = escaped(os.readlink(full))
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
                        oversize=dict(sorted(oversize.items())), unreadable=dict(sorted(unreadable.items())),
                        omitted=omitted)
