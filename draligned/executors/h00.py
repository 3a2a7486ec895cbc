"""H00, the report-tool harness: search, read, write_report (new draft version), submit_report."""

from __future__ import annotations

from draligned.executors.base import Executor, Loop, RunSetup, ToolOutcome, acquisition_handlers, harness_error
from draligned.records import Message, RunRecord
from draligned.tools.acquisition import AcquisitionTools, Backend


class H00Executor(Executor):
    """One persistent context: system prompt, one user message, own history and raw tool returns."""

    needs_sandbox = False

    def __init__(self, setup: RunSetup, backend: Backend) -> None:
        self.setup = setup
        limits = setup.contract.contract.limits
        self.acquisition = AcquisitionTools(backend, limits)
        self.returns = setup.contract.contract.returns

    async def _write_report(self, args: dict) -> ToolOutcome:
        return ToolOutcome(self.returns["write_report"], draft=args["content"])

    async def _submit_report(self, args: dict) -> ToolOutcome:
        return ToolOutcome(self.returns["submit_report"], final=args["content"])

    async def run(self) -> RunRecord:
        s = self.setup
        writer = s.writer
        writer.start()
        loop = Loop(
            setup=s, tools=s.contract.contract.tools,
            handlers={**acquisition_handlers(self.acquisition),
                      "write_report": self._write_report, "submit_report": self._submit_report},
            messages=[Message(role="system", content=s.system_prompt),
                      Message(role="user", content=s.user_message)],
        )
        try:
            result = await loop.run()
        except Exception as exc:  # recorded, never silent: the run must not look like a report
            result = harness_error(exc)
        return writer.finish(result.status, result.reason)
