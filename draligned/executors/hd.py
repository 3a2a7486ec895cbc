"""H-D, the delegation harness: the H-W root plus delegate_batch(tasks).

Each task ``{assignment, input_files}`` runs a fresh worker context (role ``worker-N``) with
search, read, shell and the file tools over its own opaque workspace: a private scratch
directory plus read-only copies of the selected root files under ``/workspace/inputs``. A
worker sees its assignment and nothing else: not the root's history, not its siblings, not
other files; it cannot submit or delegate (those tools are not offered, so a call is an
unknown-tool error). Workers run one after another; each reply returns to the root verbatim
inside the contract's ``worker_reply`` template. Every worker event is in the same run record
under its role, its full message list is archived as a transcript blob, and a DelegateEvent
links them to the root's delegate_batch call. All contexts spend one ledger: when workers
spend it, no further worker starts and the root stops too (no draft is promoted).
"""

from __future__ import annotations

import shutil

from draligned.executors.base import BudgetSpent, Handler, Loop, RunSetup, ToolOutcome
from draligned.executors.hw import HWExecutor, Snapshotter, WorkspaceTools, refused
from draligned.harness import ContractError
from draligned.records import Message, ToolCallEvent, WorkerRun
from draligned.sandbox import new_workspace, sandbox_uid
from draligned.tools.acquisition import Backend
from draligned.tools.workspace import PathRefused, Workspace

INPUTS = "inputs"


class HDExecutor(HWExecutor):
    """The H-W root with delegate_batch."""

    def __init__(self, setup: RunSetup, backend: Backend) -> None:
        super().__init__(setup, backend)
        worker_role = self.contract.role("worker")
        if worker_role.system_prompt is None:
            raise ContractError(f"{setup.contract.path}: field roles: the worker role has no system_prompt")
        self.worker_prompt = worker_role.system_prompt
        self.worker_tools = [t for t in self.contract.tools if t.name in worker_role.tools]
        self.workers = 0
        self.pending: list[WorkerRun] | None = None
        self.scratch: list[Workspace] = []

    def handlers(self) -> dict[str, Handler]:
        return {**super().handlers(), "delegate_batch": self._delegate_batch}

    def after_tool(self, ev: ToolCallEvent) -> None:
        if self.pending is not None:
            self.writer.delegate(ev.event_id, self.pending)
            self.pending = None
        super().after_tool(ev)

    async def _delegate_batch(self, args: dict) -> ToolOutcome:
        tasks = args["tasks"]
        try:
            inputs = [{f: self.workspace.read_text(f) for f in t["input_files"]} for t in tasks]
        except PathRefused as exc:
            return refused(exc)
        runs: list[WorkerRun] = []
        replies: list[str] = []
        ledger = self.setup.ledger
        for i, (task, files) in enumerate(zip(tasks, inputs, strict=True), 1):
            if not (ledger.can_call_model() and ledger.can_call_tool()):
                break
            run = await self._worker(task["assignment"], files)
            runs.append(run)
            reply = self.setup.writer.archive.get_text(run.reply_blob) if run.reply_blob else \
                f"(no reply: {run.status_reason})"
            replies.append(self.contract.returns["worker_reply"].format(
                index=i, count=len(tasks), status=run.status, reply=reply))
        self.pending = runs
        spent = not (ledger.can_call_model() and ledger.can_call_tool())
        return ToolOutcome("\n\n".join(replies), stop=BudgetSpent.BY_WORKERS if spent else None)

    async def _worker(self, assignment: str, files: dict[str, str]) -> WorkerRun:
        """One fresh worker context over its own scratch workspace with read-only input copies."""
        self.workers += 1
        role = f"worker-{self.workers}"
        scratch = Workspace(new_workspace(), owner=sandbox_uid())
        self.scratch.append(scratch)
        (scratch.root / INPUTS).mkdir()
        if scratch.owner is not None:
            shutil.chown(scratch.root / INPUTS, scratch.owner, scratch.owner)
        for path, text in files.items():
            scratch.write_text(f"{INPUTS}/{self.workspace.relative(path)}", text)
        scratch.read_only = INPUTS
        listing = ", ".join(f"/workspace/{INPUTS}/{self.workspace.relative(p)}" for p in files) or "none"
        task_text = self.contract.returns["worker_task"].format(assignment=assignment, input_files=listing)
        tools = WorkspaceTools(self.contract, self.backend, scratch)
        loop = Loop(setup=self.setup, tools=self.worker_tools, handlers=tools.handlers(),
                    role=role, messages=[Message(role="system", content=self.worker_prompt),
                                         Message(role="user", content=task_text)],
                    after_tool=Snapshotter(self.writer, scratch, role, drafts=False,
                                           max_mb=self.contract.workspace_limits().snapshot_mb),
                    records_final=False)
        result = await loop.run()
        archive = self.setup.writer.archive
        return WorkerRun(
            worker=role, assignment_blob=archive.put_blob(assignment), input_files=list(files),
            status=result.status, status_reason=result.reason,
            reply_blob=archive.put_blob(result.final) if result.final is not None else None,
            transcript_blob=archive.put_json_blob([m.model_dump(mode="json") for m in loop.messages]))

    def cleanup(self) -> None:
        super().cleanup()
        for ws in self.scratch:
            shutil.rmtree(ws.root, ignore_errors=True)
