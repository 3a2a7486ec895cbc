"""Pydantic records that cross a boundary: model messages and replies, run events and run records.

Everything here is what gets archived or exchanged with a provider; the rules that
produce these records live in the executors, the storage in ``draligned.archive``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from draligned.hashing import sha256_json


def _is_none(value: Any) -> bool:
    return value is None


def later(default: Any = None) -> Any:
    """A field added after archives existed: None by default and left out of dumps while None, so the
    ``record_sha256`` of an older record and the replay-cache key of an older context are unchanged."""
    return Field(default=default, exclude_if=_is_none)


class Record(BaseModel):
    """Base for every archived record: strict fields, attribute docstrings as descriptions."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


# --------------------------------------------------------------------------- model I/O
class ToolCall(Record):
    """One tool call requested by the model."""

    id: str
    """Call id assigned by the provider (or the simulator); echoed in the tool result."""
    name: str
    """Name of the tool the model asked for."""
    arguments: dict[str, Any] | None = None
    """Arguments parsed as a JSON object; None when the raw text was not a JSON object."""
    raw_arguments: str = ""
    """The argument text exactly as the provider returned it."""
    parse_error: str | None = None
    """Why ``raw_arguments`` could not be parsed, when it could not."""


class ToolSpec(Record):
    """A tool offered to the model, in the order the harness contract lists it."""

    name: str
    """Tool name as sent."""
    description: str
    """Tool description as sent."""
    parameters: dict[str, Any]
    """JSON Schema of the tool's arguments as sent."""


class Message(Record):
    """One message of an agent context in a provider-neutral form."""

    role: Literal["system", "user", "assistant", "tool"]
    """Who speaks: the harness (system), the user, the model, or a tool result."""
    content: str | None = None
    """Message text; None for an assistant turn that only calls tools."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """Tool calls of an assistant turn, in the order the model gave them."""
    tool_call_id: str | None = None
    """For a tool result: the id of the call it answers."""
    name: str | None = None
    """For a tool result: the tool's name."""
    reasoning: ReasoningState | None = later()
    """For an assistant turn: the provider's reasoning state to send back unchanged (responses-API
    reasoning items, Anthropic thinking blocks with their signatures); None when there is none."""


class ReasoningState(Record):
    """Provider-specific reasoning of one assistant turn, carried opaquely across the tool loop."""

    protocol: str
    """The protocol that produced it (only that protocol sends it back)."""
    items: list[dict[str, Any]] = Field(default_factory=list)
    """The reasoning items / thinking blocks exactly as received, in order."""
    response_id: str | None = None
    """The responses-API id of the reply (used as ``previous_response_id`` when ``store = true``)."""


class Usage(Record):
    """Token usage of one model call as reported by the provider."""

    input_tokens: int = 0
    """Prompt tokens, including the ones served from the provider's cache."""
    output_tokens: int = 0
    """Completion tokens, including reasoning tokens where the provider counts them there."""
    reasoning_tokens: int = 0
    """Reasoning tokens reported by the provider (0 when not reported)."""
    cached_tokens: int = 0
    """Prompt tokens served from the provider's cache."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
        )


class ModelAttempt(Record):
    """One failed attempt at a model call (the successful attempt is the model call itself)."""

    attempt: int
    """1-based attempt number within the call."""
    error: str
    """Error class, e.g. RateLimitError, InternalServerError, APITimeoutError."""
    status_code: int | None = None
    """HTTP status when the server answered; None for timeouts and connection errors."""
    wait_s: float | None = None
    """Seconds waited before the next attempt; None when no further attempt was made."""
    detail: str = ""
    """Short error message (credentials redacted)."""
    connection_limit: int | None = later()
    """The adaptive connection limit of the model after this failure (``max_connections = "auto"``)."""


class ModelReply(Record):
    """A provider reply normalised into the project's reply model."""

    text: str | None = None
    """Assistant text (None or empty when the model only called tools)."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """Tool calls in order, merged across choices/blocks where a gateway split them."""
    finish_reason: str | None = None
    """Normalised finish reason: stop, tool_calls, length, content_filter, refusal or None."""
    refusal: str | None = None
    """Provider-level refusal text, when the provider reported one."""
    usage: Usage = Field(default_factory=Usage)
    """Token usage of the call."""
    model_echo: str | None = None
    """Model identifier the server echoed back (may differ from the requested id)."""
    request_body: dict[str, Any]
    """The request body exactly as sent, minus credentials."""
    raw_response: str
    """The response body as received (JSON text), archived before anything is interpreted."""
    latency_s: float = 0.0
    """Wall-clock seconds from send to full reply."""
    anomalies: list[str] = Field(default_factory=list)
    """Protocol anomalies noticed while normalising (e.g. split reply merged, dropped tool call)."""
    attempts: list[ModelAttempt] = Field(default_factory=list)
    """Failed attempts (retried) before this reply arrived; empty when the first attempt succeeded."""
    cache_hit: bool = False
    """True when the reply was replayed from the exact-input cache instead of sent."""
    reasoning: ReasoningState | None = later()
    """Reasoning state the next request of the context must carry back (see ``Message.reasoning``)."""
    request_headers: dict[str, str] | None = later()
    """The model's declared ``headers``, sent verbatim with the request; None when it declares none."""
    response_headers: dict[str, str] | None = later()
    """HTTP response headers of the successful attempt, secrets removed; None for the simulator."""
    gateway: GatewayInfo | None = later()
    """What a gateway's headers (or body fields) said about the call; None when no gateway showed itself."""
    connection_limit: int | None = later()
    """The adaptive connection limit of the model after this call (``max_connections = "auto"``)."""


class GatewayInfo(Record):
    """What a gateway in front of the provider reported about one call (LiteLLM, OpenRouter, ...)."""

    gateway: str
    """Which gateway's documented headers or fields were read (litellm, openrouter, portkey, ngrok)."""
    served_model: str | None = None
    """The upstream model that answered, as the gateway names it."""
    upstream_provider: str | None = None
    """The upstream provider (or its API base) the gateway routed to."""
    retries: int | None = None
    """Retries the gateway made itself (draligned never sees them as attempts)."""
    cost_usd: float | None = None
    """Cost the gateway reported for the call."""


# --------------------------------------------------------------------------- run events
class EventColumns(TypedDict, total=False):
    """The event-specific columns of the index's ``events`` table, in column order; absent ones are NULL."""

    role: str
    tool: str
    request_text: str | None
    blob: str | None
    chars: int
    version: int
    error: str | None
    code: str
    model_echo: str | None
    finish_reason: str | None
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    latency_s: float


class RunEvent(Record):
    """Base of every event of a run record: its place in the run's one event sequence.

    Every event type says itself which blobs it references and what it shows in the index, so a
    new event type is one class (``tests/test_events.py`` checks each member of :data:`Event`).
    """

    event_id: str
    """Sequential id within the run (e0001, e0002, ...), root and workers in one sequence."""

    def blob_refs(self) -> list[tuple[str, str]]:
        """(sha256, kind) of every blob this event references, in a stable order."""
        raise NotImplementedError(f"{type(self).__name__} does not list its blob references")

    def index_columns(self) -> EventColumns:
        """Its event-specific columns of the index's ``events`` table."""
        raise NotImplementedError(f"{type(self).__name__} does not give its index columns")


class ModelAttemptEvent(RunEvent):
    """A failed attempt at a model call, recorded before the call's outcome."""

    type: Literal["model_attempt"] = "model_attempt"
    """The event type, which tells the events of a record apart."""
    role: str = "executor"
    """Which context made the call."""
    attempt: ModelAttempt
    """What happened on this attempt."""

    def blob_refs(self) -> list[tuple[str, str]]:
        return []

    def index_columns(self) -> EventColumns:
        return EventColumns(role=self.role, code=self.attempt.error, error=self.attempt.detail)


class FetchAttemptEvent(RunEvent):
    """A failed attempt at a web provider call (search, extract or page fetch), recorded before the tool call
    it belongs to, like a model attempt."""

    type: Literal["fetch_attempt"] = "fetch_attempt"
    """The event type, which tells the events of a record apart."""
    role: str = "executor"
    """Which context made the tool call."""
    tool: str
    """search or read."""
    attempt: ModelAttempt
    """What happened on this attempt (``error`` is the tool-error code, e.g. rate_limited)."""

    def blob_refs(self) -> list[tuple[str, str]]:
        return []

    def index_columns(self) -> EventColumns:
        return EventColumns(role=self.role, tool=self.tool, code=self.attempt.error, error=self.attempt.detail)


class ModelCallEvent(RunEvent):
    """A model call made by the executor."""

    type: Literal["model_call"] = "model_call"
    """The event type, which tells the events of a record apart."""
    role: str = "executor"
    """Which context made the call (executor, or a worker id in delegating harnesses)."""
    request_blob: str
    """sha256 of the canonical JSON request body as sent (credentials never included)."""
    response_blob: str
    """sha256 of the raw response text."""
    request_fields: dict[str, Any]
    """The request fields as sent (body minus messages and tools)."""
    model_echo: str | None
    """Model id echoed by the server."""
    finish_reason: str | None
    """Normalised finish reason."""
    usage: Usage
    """Token usage of this call."""
    latency_s: float
    """Seconds from send to reply."""
    n_tool_calls: int
    """Number of tool calls in the reply."""
    anomalies: list[str] = Field(default_factory=list)
    """Protocol anomalies noticed in this reply."""
    violations: list[str] = Field(default_factory=list)
    """Failed per-model checks declared in the study (any violation fails the run)."""
    cache_hit: bool = False
    """True when the reply was replayed from the exact-input cache."""
    cost_usd: float | None = None
    """Cost of the call from the model's price table; None when the model is not priced."""
    request_headers: dict[str, str] | None = later()
    """The declared headers sent verbatim with the request (e.g. x-litellm-num-retries); None without."""
    headers_blob: str | None = later()
    """sha256 of the canonical JSON of the reply's HTTP response headers (secrets removed)."""
    gateway: GatewayInfo | None = later()
    """Served model, upstream provider, retries and cost a gateway reported; None when none showed itself."""
    connection_limit: int | None = later()
    """The model's adaptive connection limit after this call (``max_connections = "auto"``)."""

    def blob_refs(self) -> list[tuple[str, str]]:
        refs = [(self.request_blob, "model_request"), (self.response_blob, "model_response")]
        return refs + ([(self.headers_blob, "model_response_headers")] if self.headers_blob else [])

    def index_columns(self) -> EventColumns:
        u = self.usage
        return EventColumns(role=self.role, blob=self.response_blob, model_echo=self.model_echo,
                            finish_reason=self.finish_reason, input_tokens=u.input_tokens,
                            output_tokens=u.output_tokens, reasoning_tokens=u.reasoning_tokens,
                            latency_s=self.latency_s)


class Acquisition(Record, frozen=True):
    """Where a web ``search``/``read`` return came from: the acquisition store entry and the provider call
    behind it (web backends only; corpus and pool returns have none)."""

    store_key: str
    """sha256 key of the acquisition store entry (provider, endpoint, normalised query or URL, options, reader)."""
    live: bool
    """True when this call fetched from the provider; False when it was served by the store (or by an
    identical request in flight)."""
    provider: str
    """Backend that answered (tavily, brave, searxng, exa) or ``http`` for the http reader."""
    endpoint: str
    """What was called: the provider endpoint URL (search, extract, contents) or the page URL fetched."""
    fetched_at: str | None = None
    """UTC ISO time at which the provider answered (the entry's time for a store hit; None: nothing fetched)."""
    request_id: str | None = None
    """The provider's request id, when its reply carries one."""
    raw_blob: str | None = None
    """sha256 of the raw provider body as received (archived before anything is interpreted)."""
    entry_blob: str | None = None
    """sha256 of the store entry (request, outcome: hits, page text or named failure) as canonical JSON,
    so an archive alone can be exported as a corpus."""


class ToolCallEvent(RunEvent):
    """A tool call executed (or refused) by the harness."""

    type: Literal["tool_call"] = "tool_call"
    """The event type, which tells the events of a record apart."""
    role: str = "executor"
    """Which context made the call."""
    call_id: str
    """Provider call id."""
    tool: str
    """Tool name."""
    request_text: str | None = None
    """For acquisition tools: the query (search) or URL (read), verbatim; what request packets show."""
    arguments_blob: str
    """sha256 of the raw argument text as the model sent it."""
    return_blob: str
    """sha256 of the tool return text the model received."""
    return_chars: int
    """Length of the return text in characters."""
    error: str | None = None
    """Set when the tool returned an error to the agent (malformed arguments, unknown URL, ...)."""
    acquisition: Acquisition | None = None
    """Web backends: the store entry and provider call behind the return (omitted when None, so records
    written before web acquisition serialise and hash as they did)."""

    @model_serializer(mode="wrap")
    def _omit_no_acquisition(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if data.get("acquisition", 0) is None:
            del data["acquisition"]
        return data

    def blob_refs(self) -> list[tuple[str, str]]:
        a = self.acquisition
        web = [(sha, kind) for sha, kind in ((a.raw_blob, "acquisition_body"), (a.entry_blob, "acquisition_entry"))
               if sha] if a else []
        return [(self.arguments_blob, "tool_arguments"), (self.return_blob, "tool_return"), *web]

    def index_columns(self) -> EventColumns:
        return EventColumns(role=self.role, tool=self.tool, request_text=self.request_text,
                            blob=self.return_blob, chars=self.return_chars, error=self.error)


class DraftEvent(RunEvent):
    """A saved draft version of the report."""

    type: Literal["draft"] = "draft"
    """The event type, which tells the events of a record apart."""
    version: int
    """Draft version, 1-based, in saving order."""
    blob: str
    """sha256 of the draft text."""
    chars: int
    """Draft length in characters."""
    tool_event: str
    """Event id of the tool call that saved it."""

    def blob_refs(self) -> list[tuple[str, str]]:
        return [(self.blob, "draft")]

    def index_columns(self) -> EventColumns:
        return EventColumns(blob=self.blob, chars=self.chars, version=self.version)


DeliveredBy = Literal["submit_report", "text_reply", "submit_file"]
"""How a final is delivered: a submit tool (H00's submit_report, H-W/H-D's submit_file) or a text-only reply."""


class FinalEvent(RunEvent):
    """The delivered final report."""

    type: Literal["final"] = "final"
    """The event type, which tells the events of a record apart."""
    blob: str
    """sha256 of the final text."""
    chars: int
    """Final length in characters."""
    delivered_by: DeliveredBy
    """How the final was delivered: a submit tool or a natural text-only reply."""

    def blob_refs(self) -> list[tuple[str, str]]:
        return [(self.blob, "final")]

    def index_columns(self) -> EventColumns:
        return EventColumns(blob=self.blob, chars=self.chars, code=self.delivered_by)


class NoticeEvent(RunEvent):
    """Something the harness did that a reader of the run must know about."""

    type: Literal["notice"] = "notice"
    """The event type, which tells the events of a record apart."""
    code: str
    """Machine-readable notice code, e.g. multiple_tool_calls_in_order, tool_call_not_executed."""
    detail: str
    """Human-readable detail."""

    def blob_refs(self) -> list[tuple[str, str]]:
        return []

    def index_columns(self) -> EventColumns:
        return EventColumns(code=self.code)


class SnapshotEvent(RunEvent):
    """The workspace files after a tool call (H-W/H-D); content-addressed, so unchanged files cost nothing."""

    type: Literal["snapshot"] = "snapshot"
    """The event type, which tells the events of a record apart."""
    role: str = "executor"
    """Whose workspace: the root (executor) or a worker's private one."""
    tool_event: str
    """Event id of the tool call after which the snapshot was taken."""
    manifest_blob: str
    """sha256 of the canonical JSON {"files": {path: sha256}, "symlinks": {path: target},
    "oversize": {path: bytes}} (oversize: beyond the contract's snapshot_mb cap, content not archived)."""
    changed: dict[str, str | None] = Field(default_factory=dict)
    """Files added or changed since this role's previous snapshot (path -> sha256) or removed (None)."""
    files: int = 0
    """Number of regular files in the workspace."""
    bytes: int = 0
    """Total size of those files."""

    def blob_refs(self) -> list[tuple[str, str]]:
        return [(self.manifest_blob, "snapshot_manifest")] + [(sha, "workspace_file")
                                                              for sha in self.changed.values() if sha]

    def index_columns(self) -> EventColumns:
        return EventColumns(role=self.role, blob=self.manifest_blob)


class WorkerRun(Record):
    """One worker of a delegate_batch call; its model and tool events carry its role."""

    worker: str
    """Role of the worker's events (worker-1, worker-2, ... numbered across the run)."""
    assignment_blob: str
    """sha256 of the assignment text as the root wrote it."""
    input_files: list[str]
    """Root workspace files copied read-only into the worker's /workspace/inputs."""
    status: str
    """completed, failed or budget_exhausted."""
    status_reason: str | None = None
    """Why the worker did not complete, when it did not."""
    reply_blob: str | None = None
    """sha256 of the worker's reply text (returned verbatim to the root), None without a reply."""
    transcript_blob: str
    """sha256 of the canonical JSON of the worker's full message list."""


class DelegateEvent(RunEvent):
    """A delegate_batch call (H-D): links the root's tool call to the workers' transcripts."""

    type: Literal["delegate"] = "delegate"
    """The event type, which tells the events of a record apart."""
    tool_event: str
    """Event id of the root's delegate_batch tool call."""
    workers: list[WorkerRun]
    """The batch's workers, in task order."""

    def blob_refs(self) -> list[tuple[str, str]]:
        refs = []
        for w in self.workers:
            refs += [(w.assignment_blob, "worker_assignment"), (w.transcript_blob, "worker_transcript")]
            refs += [(w.reply_blob, "worker_reply")] if w.reply_blob else []
        return refs

    def index_columns(self) -> EventColumns:
        return EventColumns()  # the workers' own events carry their calls


class PoolRoundEvent(RunEvent):
    """One round of logged candidate-pool search (CESS paper, Eq. 5): the controller's full
    probability vector, the sampled document and the stop decision, so the run's trajectory
    and its pool estimates can be rebuilt from the record alone."""

    type: Literal["pool_round"] = "pool_round"
    """The event type, which tells the events of a record apart."""
    round: int
    """Round number t, starting at 1 (a sampled stop before round t is logged as round t)."""
    query: str
    """The search query as the agent issued it."""
    pool_blob: str
    """sha256 of the pool file (its exact bytes are in the archive)."""
    budget: int
    """Maximum number of rounds K of this pool search."""
    wish_stop: bool
    """The agent's wish as the controller read it (a draft saved since the previous search = wish to stop)."""
    stop_prob: float
    """Logged probability c_t of stopping before this round (0 under fixed stopping and at t = 1)."""
    u_stop: float | None = None
    """The common uniform draw of the stop decision (None when no decision was sampled)."""
    probs_blob: str | None = None
    """sha256 of the canonical JSON list of selection probabilities (pool order); None when stopped."""
    chosen: str | None = None
    """Id of the sampled document; None when the sampled decision was to stop."""
    p_chosen: float | None = None
    """Selection probability p_t of the chosen document."""
    u_select: float | None = None
    """The common uniform draw of the inverse-CDF selection."""

    def blob_refs(self) -> list[tuple[str, str]]:
        return [(self.pool_blob, "pool")] + ([(self.probs_blob, "pool_probs")] if self.probs_blob is not None else [])

    def index_columns(self) -> EventColumns:
        return EventColumns(request_text=self.query, blob=self.probs_blob)


Event = Annotated[
    ModelCallEvent | ModelAttemptEvent | ToolCallEvent | DraftEvent | FinalEvent | NoticeEvent
    | PoolRoundEvent | SnapshotEvent | DelegateEvent | FetchAttemptEvent,
    Field(discriminator="type"),
]

RunStatus = Literal["started", "completed", "failed", "budget_exhausted"]

FINISHED: tuple[RunStatus, ...] = ("completed", "budget_exhausted")
"""Statuses that finish a slot: outcomes of the protocol, so resume skips them and readouts use them
(an interrupted ``started`` or a ``failed`` run is rerun as a new attempt)."""


class SearchCondition(Record):
    """The pool-search cell of a slot: the paper's selection × stopping intervention and ranking."""

    selection: Literal["agent", "uniform"]
    """``agent``: query-driven controller probabilities; ``uniform``: 1/N for every document."""
    stopping: Literal["fixed", "adaptive"]
    """``fixed``: K searches; ``adaptive``: the agent's wish becomes a sampled decision."""
    ranking: Literal["original", "pro", "anti"]
    """Ranking condition: original, supporting-first (pro, P side first) or opposing-first (anti)."""


class Slot(Record):
    """One cell of a study's cartesian product; its id is a hash of this definition."""

    study: str
    """Study name."""
    card_id: str
    """Factor card id."""
    card_sha256: str
    """sha256 of the card file."""
    arm: str
    """Arm (P/Q) or cell (PP/QP/PQ/QQ) whose message the agent receives."""
    model: str
    """Model declaration name in the study."""
    model_sha256: str
    """sha256 of the model declaration (protocol, id, base_url, request fields, options)."""
    harness: str
    """Harness id (H00, H-W, H-D)."""
    contract_sha256: str
    """sha256 of the harness contract file."""
    search_sha256: str
    """sha256 of the search backend's data (corpus or pool file)."""
    budget: dict[str, int | float]
    """Per-run budget (max_model_calls, max_tool_calls)."""
    seed: int
    """Replicate seed; the same for the arms of one replicate so paired runs share randomness."""
    search_condition: SearchCondition | None = None
    """Pool-search cell (None for corpus search; omitted from the id then, so corpus slot ids are unchanged)."""

    @property
    def slot_id(self) -> str:
        """Deterministic id: the first 20 hex digits of the sha256 of the definition."""
        return "s" + sha256_json(self.model_dump(mode="json", exclude_none=True))[:20]


class Counters(Record):
    """Totals of a run."""

    model_calls: int = 0
    """Model calls made."""
    tool_calls: int = 0
    """Tool calls executed (including ones that returned an error)."""
    drafts: int = 0
    """Draft versions saved."""
    usage: Usage = Field(default_factory=Usage)
    """Token usage summed over the run's model calls."""
    cache_hits: int = 0
    """Model calls replayed from the exact-input cache."""
    failed_attempts: int = 0
    """Model call attempts that failed (and were retried or ended the run)."""
    cost_usd: float | None = None
    """Summed cost of the priced model calls; None when the model is not priced."""


class RunRecord(Record):
    """The archived record of one run attempt. ``record_sha256`` covers every other field."""

    run_id: str
    """Opaque id (random); reveals nothing about the arm."""
    attempt: int
    """1 for the first attempt at a slot, 2 after an interrupted or failed attempt, ..."""
    slot_id: str
    """Id of the slot this run fills."""
    slot: Slot
    """The slot definition."""
    study_sha256: str
    """sha256 of the study file this run was started from."""
    card_path: str
    """Card file path as given to the study (for humans; identity is ``slot.card_sha256``)."""
    protocol: str
    """Model protocol (sim, openai-chat, openai-responses, anthropic)."""
    requested_model: str
    """Model id requested."""
    base_url: str | None = None
    """Endpoint base URL, when not the provider default."""
    system_prompt_blob: str
    """sha256 of the system prompt text."""
    user_message_blob: str
    """sha256 of the rendered user message for the arm."""
    tools_blob: str
    """sha256 of the canonical JSON of the tools as sent."""
    status: RunStatus
    """started (only in the started marker), completed, failed or budget_exhausted."""
    status_reason: str | None = None
    """Why the run failed or ended, when it did not complete normally."""
    started_at: str
    """UTC ISO timestamp."""
    ended_at: str | None = None
    """UTC ISO timestamp."""
    counters: Counters = Field(default_factory=Counters)
    """Run totals."""
    events: list[Event] = Field(default_factory=list)
    """Ordered events."""
    final_blob: str | None = None
    """sha256 of the final report, None when there is no final."""
    record_sha256: str = ""
    """sha256 of the canonical JSON of this record without this field."""

    def sealed(self) -> RunRecord:
        """A copy with ``record_sha256`` computed over all other fields."""
        return self.sealed_dump()[0]

    def sealed_dump(self) -> tuple[RunRecord, dict[str, Any]]:
        """The sealed copy and its JSON-mode dump, from the one dump the hash is computed over (a writer needs
        both: dumping the sealed copy again was the larger part of writing a record)."""
        body = self.model_dump(mode="json", exclude={"record_sha256"})
        body["record_sha256"] = sha256_json(body)
        return self.model_copy(update={"record_sha256": body["record_sha256"]}), body

    def blob_refs(self) -> list[tuple[str, str]]:
        """(sha256, kind) of every blob this record references, in a stable order."""
        refs = [
            (self.study_sha256, "study"),
            (self.slot.card_sha256, "card"),
            (self.slot.contract_sha256, "contract"),
            (self.system_prompt_blob, "system_prompt"),
            (self.user_message_blob, "user_message"),
            (self.tools_blob, "tools"),
        ]
        return refs + [ref for ev in self.events for ref in ev.blob_refs()]
