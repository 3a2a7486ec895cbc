"""Typed input rows of the analysis: what the adapters load and the pure readouts consume."""

from __future__ import annotations

from typing import Literal

from draligned.records import Record

Phase = Literal["requests", "draft", "final"]
DIRECTIONAL = ("OWN", "OTHER", "BOTH", "NONE")
"""States that carry a direction relative to the run's assigned endpoint (Table 23)."""
ABSENT = ("NO_RUN", "NOT_READ", "NO_DOCUMENT", "MISSING")
"""Named ways a state can be absent: no run for the arm, run never read, nothing to read, failed read."""
UNDEFINED_REQUESTS = ("NO_REQUEST", "UNDEFINED")
"""Request readouts without a direction (Table 15): no request at all, or none identified; never NONE."""


class Row(Record, frozen=True):
    """Base of the report's typed rows: strict and immutable."""


class RunRow(Row):
    """One run attempt from the index's ``runs`` table, with its request count."""

    run_id: str
    """Opaque run id."""
    attempt: int
    """Attempt number at the slot."""
    slot_id: str
    """Slot the run fills."""
    study: str
    """Study name."""
    card_id: str
    """Factor card id."""
    card_sha256: str
    """sha256 of the card file (the card blob is in the archive)."""
    arm: str
    """P/Q or a two-factor cell."""
    model: str
    """Model declaration name."""
    harness: str
    """Harness id."""
    seed: int
    """Replicate seed; paired arms share it."""
    status: str
    """started (interrupted), completed, failed or budget_exhausted."""
    model_calls: int
    """Model calls made."""
    tool_calls: int
    """Tool calls executed."""
    drafts: int
    """Draft versions saved."""
    requests: int
    """Acquisition requests (search queries and page reads) the run made."""
    has_final: bool
    """Whether a final report was delivered."""
    record_sha256: str
    """Hash of the run record (identity of the run in the archive hash)."""
    search_cell: str = ""
    """Pool-search cell selection/stopping/ranking (from the run's slot); "" for corpus search. Runs of
    one slot key in different cells are different slots and never paired across cells."""


class StateRow(Row):
    """One directional state from an evaluator (issue 5): a run, a document, a factor."""

    run_id: str
    """Run the document belongs to."""
    evaluator_id: str
    """Evaluator whose reads produced the state."""
    phase: Phase
    """requests, draft or final."""
    document: str
    """requests, draft:<version> or final."""
    axis: str
    """Factor id."""
    state: str
    """OWN, OTHER, BOTH, NONE, UNKNOWN, NO_DOCUMENT, MISSING; requests also NO_REQUEST, UNDEFINED."""
    reason: str | None = None
    """Why (e.g. READS_DISAGREE, NO_MAIN_ADVICE, READ_FAILED)."""


class CessRow(Row):
    """Per-run pool estimates (issue 4): the Opened Mean and the CESS estimate or its interval."""

    run_id: str
    """Run (trajectory) id."""
    opened_mean: float
    """Mean outcome over what the run opened; describes what was read, not the pool."""
    estimate: float | None = None
    """CESS point estimate; None where the support interval applies."""
    interval_low: float | None = None
    """Lower end of the support interval, when it applies."""
    interval_high: float | None = None
    """Upper end of the support interval, when it applies."""


class ToolReturn(Row):
    """A tool return the agent received, in order."""

    tool: str
    """search or read."""
    request_text: str | None
    """The query (search) or URL (read) as the agent sent it."""
    text: str
    """Return text as the model received it."""


class RunTexts(Row):
    """The texts of one run that text-based readouts need."""

    run_id: str
    """Run id."""
    drafts: dict[int, str]
    """Draft text by version."""
    final: str | None
    """Final report text, None when there is none."""
    returns_before_first_draft: list[ToolReturn]
    """Search and read returns received before the first saved draft (all of them if none)."""
