"""H-W, the file-workspace harness: search, read, a sandboxed shell, file tools and submit_file.

One root context plus a persistent per-run ``/workspace`` (an opaque host directory, removed
when the run ends; its every state is in the archive). After every tool call the workspace
is snapshotted; the successive versions of ``/workspace/deliverable.md`` are the draft
chain; the final is the exact file text read at submit_file, or a text-only reply. Because
the saved file can itself be the submitted report, draft–final identity may be structural:
each run records a notice saying so.
"""

from __future__ import annotations

import shutil

from draligned.archive.writer import RunWriter
from draligned.executors.base import Executor, Handler, Loop, RunSetup, ToolOutcome, acquisition_handlers, harness_error
from draligned.harness import Contract
from draligned.records import Message, RunRecord, ToolCallEvent
from draligned.sandbox import SandboxLimits, new_workspace, redact_host_paths, run_in_sandbox, sandbox_uid
from draligned.tools.acquisition import AcquisitionTools, Backend
from draligned.tools.errors import ToolError
from draligned.tools.workspace import DELIVERABLE, PathRefused, Workspace

STRUCTURAL_NOTICE = (
    "In this harness the saved file /workspace/deliverable.md can be the submitted report: a final "
    "identical to the last draft may be structural, not a choice (analysis must allow for this).")


class WorkspaceTools:
    """search, read, shell, view_file, write_file and edit_file over one workspace (root or worker)."""

    def __init__(self, contract: Contract, backend: Backend, workspace: Workspace) -> None:
        limits = contract.workspace_limits()
        self.acquisition = AcquisitionTools(backend, limits)
        self.workspace = workspace
        workspace.quota_bytes = limits.workspace_mb << 20
        self.limits = SandboxLimits.from_contract(limits)
        self.view_chars = limits.view_chars
        self.returns = contract.returns

    def handlers(self) -> dict[str, Handler]:
        return {**acquisition_handlers(self.acquisition), "shell": self._shell,
                "view_file": self._view_file, "write_file": self._write_file, "edit_file": self._edit_file}

    async def _shell(self, args: dict) -> ToolOutcome:
        if not args["command"].strip():
            return ToolOutcome("Error: the command is empty.", error=ToolError.EMPTY_COMMAND)
        result = await run_in_sandbox(self.workspace.root, ["/bin/sh", "-c", args["command"]], self.limits,
                                      read_only=self.workspace.read_only)
        # the host workspace path (in /proc/self/mountinfo, say) is shown as /workspace: it is archived
        text, error = redact_host_paths(result.render(self.limits)), ToolError.TIMEOUT if result.timed_out else None
        if over := self.workspace.over_quota():
            text, error = f"{text}\n[Error: {over}]", error or ToolError.OVER_QUOTA
        return ToolOutcome(text, error=error)

    async def _view_file(self, args: dict) -> ToolOutcome:
        try:
            text = self.workspace.read_text(args["path"])
        except PathRefused as exc:
            return refused(exc)
        start = min(args.get("offset", 0), len(text))
        end = min(len(text), start + min(args.get("length", self.view_chars), self.view_chars))
        shown = text[start:end]
        if start > 0 or end < len(text):
            shown += f"\n[characters {start}-{end} of {len(text)}" + (
                f"; call view_file with offset={end} for more]" if end < len(text) else "]")
        return ToolOutcome(shown)

    async def _write_file(self, args: dict) -> ToolOutcome:
        try:
            self.workspace.write_text(args["path"], args["content"])
        except PathRefused as exc:
            return refused(exc)
        return ToolOutcome(self.returns["write_file"].format(chars=len(args["content"]), path=args["path"]))

    async def _edit_file(self, args: dict) -> ToolOutcome:
        try:
            text = self.workspace.read_text(args["path"])
            count = text.count(args["old_text"]) if args["old_text"] else 0
            if count != 1:
                raise PathRefused(f"old_text occurs {count} times in {args['path']!r}; it must occur exactly once")
            self.workspace.write_text(args["path"], text.replace(args["old_text"], args["new_text"], 1))
        except PathRefused as exc:
            return refused(exc)
        return ToolOutcome(self.returns["edit_file"].format(path=args["path"]))


def refused(exc: PathRefused) -> ToolOutcome:
    """The tool error the agent receives for a refused path or file operation."""
    return ToolOutcome(f"Error: {exc}", error=ToolError.REFUSED)


class Snapshotter:
    """After each tool call: the workspace into the archive; for the root, deliverable.md versions are drafts."""

    def __init__(self, writer: RunWriter, workspace: Workspace, role: str, drafts: bool, max_mb: int) -> None:
        self.writer, self.workspace, self.role, self.drafts = writer, workspace, role, drafts
        self.max_bytes = max_mb << 20
        self.previous: dict[str, str] = {}
        self.last_draft: bytes | None = None

    def __call__(self, ev: ToolCallEvent) -> None:
        state = self.workspace.manifest(self.max_bytes)
        shas = {path: self.writer.archive.put_blob(data) for path, data in state.files.items()}
        changed: dict[str, str | None] = {p: s for p, s in shas.items() if self.previous.get(p) != s}
        changed.update({p: None for p in self.previous if p not in shas})
        self.previous = shas
        manifest: dict[str, object] = {"files": shas, "symlinks": state.symlinks, "oversize": state.oversize}
        if state.unreadable:  # only when present, so ordinary manifests keep their bytes
            manifest["unreadable"] = state.unreadable
        if state.omitted:
            manifest["omitted"] = state.omitted
        self.writer.snapshot(self.role, ev.event_id, manifest, changed, len(shas),
                             sum(len(d) for d in state.files.values()))
        current = state.files.get(DELIVERABLE)
        if self.drafts and current is not None and current != self.last_draft:
            self.last_draft = current
            self.writer.draft(current.decode("utf-8", "replace"), ev.event_id)


class HWExecutor(Executor):
    """The H-W root context over a fresh workspace; subclasses add tools (H-D)."""

    needs_sandbox = True

    def __init__(self, setup: RunSetup, backend: Backend) -> None:
        self.setup = setup
        self.backend = backend
        self.contract = setup.contract.contract
        self.writer = setup.writer
        self.workspace = Workspace(new_workspace(), owner=sandbox_uid())
        self.tools = WorkspaceTools(self.contract, backend, self.workspace)
        self.snapshot = Snapshotter(self.writer, self.workspace, "executor", drafts=True,
                                    max_mb=self.contract.workspace_limits().snapshot_mb)

    def handlers(self) -> dict[str, Handler]:
        return {**self.tools.handlers(), "submit_file": self._submit_file}

    def after_tool(self, ev: ToolCallEvent) -> None:
        self.snapshot(ev)

    async def _submit_file(self, args: dict) -> ToolOutcome:
        try:
            text = self.workspace.read_text(args["path"])
        except PathRefused as exc:
            return refused(exc)
        if not text.strip():
            return ToolOutcome(f"Error: {args['path']!r} is empty; nothing was submitted.", error=ToolError.EMPTY_FILE)
        return ToolOutcome(self.contract.returns["submit_file"].format(path=args["path"]), final=text,
                           final_by="submit_file")

    async def run(self) -> RunRecord:
        s = self.setup
        self.writer.start()
        self.writer.notice("draft_final_identity_structural", STRUCTURAL_NOTICE)
        limits = self.contract.workspace_limits()  # defaults in code are not in the contract file: say them
        self.writer.notice("workspace_limits", f"workspace quota {limits.workspace_mb} MiB; shell /tmp "
                                               f"{limits.shell_tmp_mb} MiB")
        loop = Loop(setup=s, tools=self.contract.tools, handlers=self.handlers(),
                    messages=[Message(role="system", content=s.system_prompt),
                              Message(role="user", content=s.user_message)],
                    after_tool=self.after_tool)
        try:
            result = await loop.run()
        except Exception as exc:  # recorded, never silent: the run must not look like a report
            result = harness_error(exc)
        finally:
            self.cleanup()
        return self.writer.finish(result.status, result.reason)

    def cleanup(self) -> None:
        """Remove the host workspace; its every state is already in the archive."""
        shutil.rmtree(self.workspace.root, ignore_errors=True)
