"""What every executor shares: the budget ledger, the run setup and the tool-call loop.

The loop implements the contract rules that do not depend on the harness's tools:
a text-only reply is a natural final; when the budget ends no extra call is made and no
draft is promoted; several tool calls in one reply are executed in order (with a notice);
a truncated, refused or empty reply fails the run with that reason, never a final.
A tool can stop its context (``ToolOutcome.stop``: H-D workers spent the shared ledger), and a
worker context's text-only reply is returned to its caller instead of becoming the final.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar, Literal, Protocol

import jsonschema
from pydantic import SerializerFunctionWrapHandler, model_serializer

from draligned.archive.writer import RunWriter
from draligned.harness import LoadedContract
from draligned.models import ModelAPI, ModelError
from draligned.records import (
    Acquisition,
    Message,
    ModelAttempt,
    ModelReply,
    Record,
    RunRecord,
    RunStatus,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
)
from draligned.sandbox import redact_host_paths
from draligned.strict_json import schema_validator
from draligned.tools.acquisition import AcquisitionTools, Backend
from draligned.tools.errors import ToolError


class Budget(Record, strict=True):
    """Per-run budget from the study."""

    max_model_calls: int = 30
    """Model calls allowed in the run (root and workers together)."""
    max_tool_calls: int = 60
    """Tool calls allowed in the run (root and workers together)."""
    max_tokens: int | None = None
    """Input plus output tokens allowed in the run (root and workers together); None: no limit."""
    max_wall_s: int | None = None
    """Wall-clock seconds from the start of the run after which no model call is made; None: no limit."""
    max_cost_usd: float | None = None
    """US dollars the run's priced model calls may cost (root and workers together); None: no limit."""

    @model_serializer(mode="wrap")
    def _omit_unset_limits(self, handler: SerializerFunctionWrapHandler) -> dict[str, int | float]:
        """Unset (None) limits are left out, so the slot ids of studies that do not set them are unchanged."""
        return {k: v for k, v in handler(self).items() if v is not None}


class BudgetSpent(StrEnum):
    """Why the run's budget ends it (the ``status_reason`` of a ``budget_exhausted`` run)."""

    MODEL_CALLS = "model-call budget spent"
    TOOL_CALLS = "tool-call budget spent"
    TOKENS = "token budget spent"
    WALL_TIME = "wall-time budget spent"
    COST = "cost budget spent"
    BY_WORKERS = "budget spent by delegated workers"


@dataclass
class Ledger:
    """The run's budget checked against its record's counters: the one count of model calls, tool calls
    and tokens (input plus output), kept by the run writer and shared by the root and its H-D workers.
    When spent, everything stops."""

    budget: Budget
    record: RunRecord
    started: float = field(default_factory=time.monotonic)

    def model_budget_spent(self) -> BudgetSpent | None:
        """Why no further model call may be made, or None while one may."""
        b, c = self.budget, self.record.counters
        if c.model_calls >= b.max_model_calls:
            return BudgetSpent.MODEL_CALLS
        if b.max_tokens is not None and c.usage.input_tokens + c.usage.output_tokens >= b.max_tokens:
            return BudgetSpent.TOKENS
        if b.max_wall_s is not None and time.monotonic() - self.started >= b.max_wall_s:
            return BudgetSpent.WALL_TIME
        if b.max_cost_usd is not None and (c.cost_usd or 0.0) >= b.max_cost_usd:
            return BudgetSpent.COST
        return None

    def can_call_model(self) -> bool:
        return self.model_budget_spent() is None

    def can_call_tool(self) -> bool:
        return self.record.counters.tool_calls < self.budget.max_tool_calls


@dataclass
class RunSetup:
    """Everything an executor needs for one run."""

    writer: RunWriter
    """The run's one writer (its archive and record); the run's search backend logs through it too."""
    contract: LoadedContract
    model: ModelAPI
    system_prompt: str
    user_message: str
    seed: int
    budget: Budget
    ledger: Ledger = field(init=False)
    """The budget over this run's record (built here, so it can only count this record)."""

    def __post_init__(self) -> None:
        self.ledger = Ledger(self.budget, self.writer.record)


class Executor(Protocol):
    """A harness's executor: built for one run from its setup and search backend, it runs the run and
    returns the sealed record."""

    needs_sandbox: ClassVar[bool]
    """True when the harness runs a shell, so a study using it refuses to start without a sandbox."""

    def __init__(self, setup: RunSetup, backend: Backend) -> None: ...

    async def run(self) -> RunRecord:
        """Run the run to its end (completed, failed or budget_exhausted) and return the written record."""
        ...


@dataclass(frozen=True)
class ToolOutcome:
    """What a tool handler returns: the text for the agent and what the loop must record."""

    text: str
    error: ToolError | None = None
    request_text: str | None = None
    draft: str | None = None
    final: str | None = None
    final_by: Literal["submit_report", "submit_file"] = "submit_report"
    stop: BudgetSpent | None = None
    """Set when the shared ledger was spent inside the tool (H-D workers): the context stops."""
    acquisition: Acquisition | None = None
    """Web backends: the store entry and provider call behind a search/read return."""
    attempts: tuple[ModelAttempt, ...] = ()
    """Web backends: the failed provider attempts behind it, recorded before the tool call."""


@dataclass(frozen=True)
class LoopResult:
    """How one agent context ended."""

    status: RunStatus
    """``completed``, ``failed`` or ``budget_exhausted`` (never ``started``)."""
    reason: str | None = None
    """Why it failed or stopped (a BudgetSpent text when the budget ended it); None when completed."""
    final: str | None = None
    """The delivered text when completed: the submitted report, or a worker's text-only reply."""


def harness_error(exc: Exception) -> LoopResult:
    """A context that raised: recorded as a failure, never silent, so the run cannot look like a report.
    Host workspace paths (an OSError names its file) are redacted: the reason is archived."""
    return LoopResult("failed", f"harness error: {type(exc).__name__}: {redact_host_paths(str(exc))}")


Handler = Callable[[dict], Awaitable[ToolOutcome]]


def acquisition_handlers(acquisition: AcquisitionTools) -> dict[str, Handler]:
    """The search and read handlers every harness offers (the query or URL is the request text)."""
    async def search(args: dict) -> ToolOutcome:
        r = await acquisition.search(args["query"])
        return ToolOutcome(r.text, r.error, request_text=args["query"], acquisition=r.acquisition,
                           attempts=r.attempts)

    async def read(args: dict) -> ToolOutcome:
        r = await acquisition.read(args["url"])
        return ToolOutcome(r.text, r.error, request_text=args["url"], acquisition=r.acquisition,
                           attempts=r.attempts)

    return {"search": search, "read": read}


@dataclass
class Loop:
    """One agent context driven until it delivers, fails or spends the shared ledger."""

    setup: RunSetup
    tools: list[ToolSpec]
    handlers: dict[str, Handler]
    role: str = "executor"
    messages: list[Message] = field(default_factory=list)
    after_tool: Callable[[ToolCallEvent], None] | None = None
    records_final: bool = True
    """False for H-D workers: their text-only reply goes back to the root, not into a FinalEvent."""
    _validators: dict[str, jsonschema.protocols.Validator] = field(default_factory=dict)

    @property
    def writer(self) -> RunWriter:
        """The run's one writer (root and workers append to the same record)."""
        return self.setup.writer

    def __post_init__(self) -> None:
        known = self.setup.contract.validators  # the contract's tools: checked once, when it was loaded
        contract_tools = {t.name: t for t in self.setup.contract.contract.tools}
        for spec in self.tools:
            same = contract_tools.get(spec.name) is spec or contract_tools.get(spec.name) == spec
            self._validators[spec.name] = known[spec.name] if same else schema_validator(spec.parameters)

    async def run(self) -> LoopResult:
        """Drive the context until it delivers, fails or the budget ends it."""
        s = self.setup
        while True:
            if (spent := s.ledger.model_budget_spent()) is not None:
                return LoopResult("budget_exhausted", spent)
            try:
                reply = await s.model.generate(self.messages, self.tools, s.seed)
            except ModelError as exc:
                self.writer.attempts(exc.attempts, self.role)
                return LoopResult("failed", f"model error: {exc}")
            decl = s.model.declaration
            violations = decl.checks.violations(reply, decl.model)
            self.writer.model_call(reply, self.role, violations, decl.price.cost(reply.usage) if decl.price else None)
            if violations:
                return LoopResult("failed", "model check failed: " + "; ".join(violations))
            self.messages.append(Message(role="assistant", content=reply.text, tool_calls=reply.tool_calls,
                                         reasoning=reply.reasoning))
            if not reply.tool_calls:
                return self._no_tool_reply(reply)
            if len(reply.tool_calls) > 1:
                self.writer.notice("multiple_tool_calls_in_order",
                                   f"{len(reply.tool_calls)} tool calls in one reply; executed in order")
            for i, call in enumerate(reply.tool_calls):
                if not s.ledger.can_call_tool():
                    self._not_executed(reply.tool_calls[i:], BudgetSpent.TOOL_CALLS)
                    return LoopResult("budget_exhausted", BudgetSpent.TOOL_CALLS)
                outcome = await self._execute(call)
                if outcome.final is not None:
                    self._not_executed(reply.tool_calls[i + 1:], "the report was already submitted")
                    return LoopResult("completed", final=outcome.final)
                if outcome.stop is not None:
                    self._not_executed(reply.tool_calls[i + 1:], outcome.stop)
                    return LoopResult("budget_exhausted", outcome.stop)

    def _no_tool_reply(self, reply: ModelReply) -> LoopResult:
        """A reply without tool calls: a natural final only if it is a complete, non-empty text."""
        if reply.refusal:
            return LoopResult("failed", f"refusal: {reply.refusal[:200]}")
        if reply.finish_reason == "length":
            return LoopResult("failed", "truncated: the reply hit the output cap (finish reason length)")
        if reply.finish_reason == "tool_calls":
            return LoopResult("failed", "dropped tool call: finish reason tool_calls but no tool call in the reply")
        if not (reply.text or "").strip():
            return LoopResult("failed", f"empty reply (finish reason {reply.finish_reason})")
        if reply.finish_reason not in ("stop", None):
            return LoopResult("failed", f"reply ended with finish reason {reply.finish_reason}")
        if self.records_final:
            self.writer.final(reply.text or "", "text_reply")
        return LoopResult("completed", final=reply.text)

    def _not_executed(self, calls: list[ToolCall], why: str) -> None:
        for call in calls:
            self.writer.notice("tool_call_not_executed", f"{call.name} ({call.id}) not executed: {why}")

    async def _execute(self, call: ToolCall) -> ToolOutcome:
        """Validate arguments against the tool's schema, run the handler, record the event."""
        spec = next((t for t in self.tools if t.name == call.name), None)
        outcome: ToolOutcome
        if spec is None or call.name not in self.handlers:
            outcome = ToolOutcome(f"Error: there is no tool named {call.name!r}.", error=ToolError.UNKNOWN_TOOL)
        elif call.arguments is None:
            outcome = ToolOutcome(
                f"Error: the arguments of this {call.name} call are not a valid JSON object "
                f"({call.parse_error or 'unparseable'}). Call the tool again with valid JSON arguments.",
                error=ToolError.MALFORMED_ARGUMENTS)
        else:
            problem = jsonschema.exceptions.best_match(self._validators[call.name].iter_errors(call.arguments))
            if problem is not None:
                outcome = ToolOutcome(f"Error: invalid arguments for {call.name}: {problem.message}",
                                      error=ToolError.INVALID_ARGUMENTS)
            else:
                outcome = await self.handlers[call.name](call.arguments)
        ev = self.writer.tool_call(call, outcome.text, outcome.error, outcome.request_text, self.role,
                                   outcome.acquisition, outcome.attempts)
        if outcome.draft is not None:
            self.writer.draft(outcome.draft, ev.event_id)
        if self.after_tool is not None:
            self.after_tool(ev)
        # The final is recorded last: if anything after the tool (the snapshot) fails, the run fails
        # without a final instead of being a failed run that carries a deliverable.
        if outcome.final is not None:
            self.writer.final(outcome.final, outcome.final_by)
        self.messages.append(Message(role="tool", content=outcome.text, tool_call_id=call.id, name=call.name))
        return outcome
