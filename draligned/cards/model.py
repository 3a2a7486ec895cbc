"""Factor card model and rendering: the card schema, arms, endpoint spans and comparisons.

A card holds a task, a shared profile, one or two user factors with P/Q endpoint texts, and a
message template whose slots place those endpoints (paper Tables 5 and 6).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, Discriminator, Field, Tag, field_validator

from draligned.records import Record

Endpoint = Literal["P", "Q"]
Outcome = Literal["PASS", "NOT_SELECTED", "FAIL", "DISPUTED", "RETAINED"]
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
SLOT_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
SINGLE_FACTOR_ARMS = ("P", "Q")
TWO_FACTOR_CELLS = ("PP", "QP", "PQ", "QQ")
CORE_MIN_CHARS = 2
SCHEMA_FILE_NAME = "schema.json"
_TAG = "slot:"  # prefix of union tags; stripped from error paths
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class Task(Record):
    """The research request shared by every arm of the card."""
    task_id: str = Field(pattern=ID_PATTERN)
    """Stable task identifier, shared by all cards built on the same task."""
    text: str = Field(min_length=1)
    """The task request exactly as the agent receives it."""
    language: Literal["en", "zh"]
    """Language of the task, profile and endpoint texts."""


class Endpoints(Record):
    """The two endpoint texts of a factor; arms differ only by which one they carry."""
    P: str
    """Endpoint P text, inserted verbatim into the message of arms on the P side."""
    Q: str
    """Endpoint Q text, inserted verbatim into the message of arms on the Q side."""


class Factor(Record):
    """One task-relevant user factor varied between its two endpoints."""
    factor_id: str = Field(pattern=ID_PATTERN)
    """Identifier of the factor, unique within the card and referenced by slots."""
    type: Literal["persona_field", "preference", "constraint"]
    """Kind of user information: a persona field, a soft preference or a hard constraint."""
    scope: str = Field(min_length=1)
    """What parts of the research and recommendation the factor bears on."""
    endpoints: Endpoints
    """The P and Q endpoint texts."""
    unknown_cases: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)
    """Definitions of the cases in which no direction can be told (label UNKNOWN)."""
    request_support_rubric: str = Field(min_length=1)
    """When a search query or opened URL supports one endpoint, the other, or neither."""
    final_action_rubric: str = Field(min_length=1)
    """When the report's main recommendation is on one endpoint's side."""


class SourceSlot(Record):
    """Slot filled with the task text or the shared profile."""
    source: Literal["task", "profile"]
    """Which shared card text fills the slot."""


class TextSlot(Record):
    """Slot filled with a literal text shared by all arms."""
    text: str
    """The literal shared text."""


class FactorSlot(Record):
    """Slot filled with one factor's endpoint text for the arm."""
    factor: str = Field(pattern=ID_PATTERN)
    """The factor whose endpoint text fills the slot."""


class FactorsSlot(Record):
    """Slot filled with several factors' endpoint texts, joined by a shared separator."""
    factors: list[Annotated[str, Field(pattern=ID_PATTERN)]] = Field(min_length=1)
    """The factors whose endpoint texts fill the slot, in this order."""
    separator: str = " "
    """Shared text placed between consecutive endpoint texts."""


class ByArmSlot(Record):
    """Slot with hand-written arm-varying text that is not a declared endpoint.

    It represents hand-authored matched messages; the diff check rejects it whenever the
    variants differ, because the arms then differ outside endpoint spans.
    """

    by_arm: dict[str, str]
    """Text per arm; keys are exactly the card's arms (P, Q or the four cells)."""


def _slot_kind(value: Any) -> str | None:
    """Union tag of a slot: the kind is told by which key is present."""
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if isinstance(value, dict):
        for key in ("source", "text", "factor", "factors", "by_arm"):
            if key in value:
                return _TAG + key
    return None


Slot = Annotated[
    (
        Annotated[SourceSlot, Tag(_TAG + "source")]
        | Annotated[TextSlot, Tag(_TAG + "text")]
        | Annotated[FactorSlot, Tag(_TAG + "factor")]
        | Annotated[FactorsSlot, Tag(_TAG + "factors")]
        | Annotated[ByArmSlot, Tag(_TAG + "by_arm")]
    ),
    Discriminator(
        _slot_kind,
        custom_error_type="slot_kind",
        custom_error_message="a slot needs one of the keys source, text, factor, factors, by_arm",
    ),
]


class Message(Record):
    """How the single user message is assembled from shared text and endpoint texts."""
    template: str = Field(min_length=1)
    """Message text with {name} placeholders; write {{ and }} for literal braces."""
    slots: dict[Annotated[str, Field(pattern=SLOT_NAME_PATTERN)], Slot]
    """What fills each placeholder, by placeholder name."""


class Decision(Record):
    """One recorded construction decision about the card."""
    outcome: Outcome
    """The decision taken."""
    by: str = Field(pattern=r"^[a-z][a-z_-]*:\S.*$")
    """Who or what decided, as kind:name, e.g. validator:draligned-0.1 or reviewer:CR1."""
    reason: str = Field(min_length=1)
    """Why, in a sentence or two."""
    at: str
    """ISO 8601 date (or date-time) of the decision."""

    @field_validator("at")
    @classmethod
    def _iso(cls, value: str) -> str:
        datetime.fromisoformat(value)  # accepts dates too; raises ValueError otherwise
        return value


class Status(Record):
    """Current outcome of the card and the decisions that led to it."""
    current: Outcome
    """Outcome in force; only PASS cards can be run."""
    decisions: list[Decision] = Field(min_length=1)
    """Recorded decisions, oldest first."""


class EndpointSpan(Record):
    """Where one endpoint text sits in a rendered message."""
    factor_id: str
    """The factor whose endpoint text this is."""
    endpoint: Endpoint
    """Which endpoint of that factor the arm carries."""
    start: int
    """Offset of the first character of the endpoint text."""
    end: int
    """Offset just past the last character of the endpoint text."""


class RenderedMessage(Record):
    """The exact user message of one arm and the positions of its endpoint texts."""
    arm: str
    """The arm (P/Q) or cell (PP, QP, PQ, QQ) rendered."""
    text: str
    """The exact user message the agent receives."""
    spans: list[EndpointSpan]
    """Endpoint spans in message order."""


class Comparison(Record, frozen=True):
    """Two arms that differ in exactly one factor (paper Table 5)."""
    arm_a: str
    """First arm of the pair."""
    arm_b: str
    """Second arm of the pair."""
    factor_id: str
    """The factor the comparison changes."""


class Card(Record):
    """A factor card: one task, a shared profile and one or two factors varied between endpoints."""
    card_id: str = Field(pattern=ID_PATTERN)
    """Identifier of the card; by convention also the file name without .json."""
    task: Task
    """The research request."""
    profile: str = Field(min_length=1)
    """Background text shared by every arm."""
    factors: list[Factor] = Field(min_length=1, max_length=2)
    """The varied factors; with two, the arms are the four cells PP, QP, PQ, QQ."""
    message: Message
    """How the user message is assembled."""
    status: Status
    """Construction outcome; only PASS cards can be run."""
    source: str | None = None
    """Free-text provenance, e.g. the PDR-Bench task the card was built from."""

    def arms(self) -> list[str]:
        """Arm names: P, Q for one factor; cells PP, QP, PQ, QQ (factor 1 letter first) for two."""
        return list(SINGLE_FACTOR_ARMS if len(self.factors) == 1 else TWO_FACTOR_CELLS)

    def endpoint_for(self, arm: str, factor_id: str) -> Endpoint:
        """The endpoint of ``factor_id`` that ``arm`` carries."""
        if arm not in self.arms():
            raise ValueError(f"card {self.card_id}: unknown arm {arm!r}; arms are {self.arms()}")
        ids = [f.factor_id for f in self.factors]
        if factor_id not in ids:
            raise ValueError(f"card {self.card_id}: unknown factor {factor_id!r}")
        return cast(Endpoint, arm[ids.index(factor_id)])

    def render(self, arm: str) -> RenderedMessage:
        """The user message of ``arm`` with its endpoint spans; ValueError for unknown arms."""
        return _render(self, arm)[0]


Piece = tuple[int, int, str | None]  # (start, end, slot name; None for template text)
Renders = dict[str, tuple[RenderedMessage, list[Piece]]]
Issue = tuple[str, str]  # (field, message)


def parse_template(template: str) -> list[tuple[Literal["text", "slot"], str]]:
    """Split a template into literal text and placeholder names; ValueError on stray braces."""
    parts: list[tuple[Literal["text", "slot"], str]] = []
    buf, i = "", 0
    while i < len(template):
        if template.startswith(("{{", "}}"), i):
            buf, i = buf + template[i], i + 2
        elif template[i] == "{":
            match = _PLACEHOLDER.match(template, i)
            if match is None:
                raise ValueError(f"unmatched or invalid '{{' at offset {i}: {template[i:i + 20]!r}")
            parts += [("text", buf)] if buf else []
            parts.append(("slot", match.group(1)))
            buf, i = "", match.end()
        elif template[i] == "}":
            raise ValueError(f"unmatched '}}' at offset {i}")
        else:
            buf, i = buf + template[i], i + 1
    return parts + ([("text", buf)] if buf else [])


def _render(card: Card, arm: str) -> tuple[RenderedMessage, list[Piece]]:
    """Walk the template (not str.format: endpoint texts may hold braces), tracking offsets."""
    if arm not in card.arms():
        raise ValueError(f"card {card.card_id}: unknown arm {arm!r}; arms are {card.arms()}")
    text = ""
    pieces: list[Piece] = []
    spans: list[EndpointSpan] = []
    factors = {f.factor_id: f for f in card.factors}

    def emit(chunk: str, slot: str | None, factor_id: str | None = None) -> None:
        nonlocal text
        pieces.append((len(text), len(text) + len(chunk), slot))
        if factor_id is not None:
            endpoint = card.endpoint_for(arm, factor_id)
            spans.append(EndpointSpan(factor_id=factor_id, endpoint=endpoint,
                                      start=len(text), end=len(text) + len(chunk)))
        text += chunk

    def put_endpoint(slot: str, factor_id: str) -> None:
        if factor_id not in factors:
            raise ValueError(f"slot {slot!r} names unknown factor {factor_id!r}")
        emit(getattr(factors[factor_id].endpoints, card.endpoint_for(arm, factor_id)), slot, factor_id)

    for kind, name in parse_template(card.message.template):
        if kind == "text":
            emit(name, None)
            continue
        slot = card.message.slots.get(name)
        if slot is None:
            raise ValueError(f"placeholder {{{name}}} has no slot")
        if isinstance(slot, SourceSlot):
            emit(card.task.text if slot.source == "task" else card.profile, name)
        elif isinstance(slot, TextSlot):
            emit(slot.text, name)
        elif isinstance(slot, FactorSlot):
            put_endpoint(name, slot.factor)
        elif isinstance(slot, FactorsSlot):
            for k, factor_id in enumerate(slot.factors):
                if k:
                    emit(slot.separator, name)
                put_endpoint(name, factor_id)
        elif arm in slot.by_arm:
            emit(slot.by_arm[arm], name)
        else:
            raise ValueError(f"slot {name!r} has no text for arm {arm}")
    return RenderedMessage(arm=arm, text=text, spans=spans), pieces


def comparisons(card: Card) -> list[Comparison]:
    """The arm pairs compared, each changing one factor (paper Table 5 for two factors)."""
    ids = [f.factor_id for f in card.factors]
    if len(ids) == 1:
        return [Comparison(arm_a="P", arm_b="Q", factor_id=ids[0])]
    f1, f2 = ids
    pairs = [("PP", "QP", f1), ("PQ", "QQ", f1), ("PP", "PQ", f2), ("QP", "QQ", f2)]
    return [Comparison(arm_a=a, arm_b=b, factor_id=f) for a, b, f in pairs]
