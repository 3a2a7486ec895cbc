"""Blinded packets: what an evaluator sees, and the manifest the program keeps (paper Table 13).

A packet shows the task, each factor's endpoint texts as ALPHA/BETA with type, scope, unknown
cases and one rubric, and either the run's request texts (at most 32 per packet, 12 with two
factors) or exactly one document in numbered paragraphs. It never shows tool returns, other
document versions, the profile, the user message, the assigned endpoint, run, model or condition:
every rendered prompt is checked against those strings for its run and, if it would leak, is
blocked (fail closed) with the reason kept in the manifest.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

from draligned.cards import Card
from draligned.evaluator.config import Evaluator, PacketKind
from draligned.evaluator.orientation import ReadNo, alpha_is_p
from draligned.hashing import sha256_json, sha256_text
from draligned.records import DraftEvent, Record, RunRecord, ToolCallEvent

Phase = Literal["requests", "draft", "final"]
MAX_REQUESTS = {1: 32, 2: 12}  # per packet, by number of factors (Table 13)
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_IDENTIFIER = re.compile(r"[\w.:/-]+", re.ASCII)
_CONDITION = re.compile(r"\b(?i:arm|cell|condition|endpoint)\s*[:=]?\s*(?:PP|PQ|QP|QQ|P|Q)\b"
                        r"|\b[PQ]_(?:SIDE|LEAN)\b|\b(?i:assigned (?:endpoint|arm|condition))\b")


class Unit(Record):
    """One thing read twice: a chunk of a run's requests, or one document; program side."""

    run_id: str
    """The run the text comes from."""
    phase: Phase
    """requests, draft or final."""
    document: str
    """requests, draft:<version> or final."""
    chunk: int = 0
    """Index of the request chunk (0 for documents)."""
    kind: PacketKind
    """requests or document."""
    unit_ids: list[str]
    """Request ids (r001...) or paragraph ids (p001...) in packet order."""
    texts: list[str]
    """The request texts or paragraph texts, aligned with ``unit_ids``."""
    source_events: list[str]
    """Event ids the texts come from (the request events, or the draft/final event)."""
    content_sha256: str
    """Hash of the orientation-free content; decides read 1's orientation."""


class Manifest(Record):
    """Program-side record of one packet (one read of one unit); never shown to the evaluator."""

    packet_id: str
    """sha256 of the prompt text."""
    evaluator_id: str
    """Evaluator the packet was built for."""
    run_id: str
    """Run the packet reads."""
    card_id: str
    """Card of the run."""
    arm: str
    """Arm of the run (kept here, never in the prompt)."""
    phase: Phase
    """requests, draft or final."""
    document: str
    """requests, draft:<version> or final."""
    chunk: int
    """Request chunk index (0 for documents)."""
    kind: PacketKind
    """requests or document."""
    read: ReadNo
    """1 or 2 (mirrored)."""
    alpha_is_p: bool
    """Whether ALPHA showed endpoint P in this read."""
    axes: list[str]
    """Factor ids in the packet."""
    unit_ids: list[str]
    """Request or paragraph ids in the packet."""
    source_events: list[str]
    """Event ids the packet's texts come from."""
    content_sha256: str
    """Orientation-free content hash shared by the two reads of the unit."""
    template_sha256: str
    """sha256 of the prompt template file."""
    schema_sha256: str
    """sha256 of the response schema file."""
    prompt_blob: str
    """Blob of the prompt text (equal to packet_id)."""
    blocked: list[str] = []
    """Leak findings; a non-empty list means the packet was not sent (fail closed)."""


class Packet(Record):
    """A rendered prompt and its manifest."""

    prompt: str
    """The single user message sent to the evaluator."""
    manifest: Manifest
    """What the program keeps about it."""


def paragraphs(text: str) -> list[str]:
    """A document split at blank lines into non-empty paragraphs."""
    return [p.strip() for p in _PARAGRAPH_BREAK.split(text) if p.strip()]


def request_units(record: RunRecord, n_factors: int) -> list[Unit]:
    """The run's search queries and read URLs in order, in chunks of at most 32 (12 with two factors)."""
    events = [e for e in record.events if isinstance(e, ToolCallEvent) and e.request_text is not None]
    size = MAX_REQUESTS[n_factors]
    units = []
    for chunk, start in enumerate(range(0, len(events), size)):
        part = events[start:start + size]
        texts = [f"{e.tool}: {e.request_text}" for e in part]
        units.append(Unit(run_id=record.run_id, phase="requests", document="requests", chunk=chunk,
                          kind="requests", unit_ids=[f"r{i + 1:03d}" for i in range(len(part))],
                          texts=texts, source_events=[e.event_id for e in part],
                          content_sha256=sha256_json({"kind": "requests", "card": record.slot.card_sha256,
                                                      "texts": texts})))
    return units


def document_units(record: RunRecord, get_text: Callable[[str], str]) -> list[Unit]:
    """One unit per saved draft version and one for the final; ``get_text`` reads a verified blob."""
    docs: list[tuple[Phase, str, str, str]] = [
        ("draft", f"draft:{e.version}", e.event_id, e.blob) for e in record.events if isinstance(e, DraftEvent)]
    if record.final_blob:
        final_event = next((e.event_id for e in record.events if e.type == "final"), "final")
        docs.append(("final", "final", final_event, record.final_blob))
    units = []
    for phase, document, event_id, blob in docs:
        paras = paragraphs(get_text(blob))
        units.append(Unit(run_id=record.run_id, phase=phase, document=document, kind="document",
                          unit_ids=[f"p{i + 1:03d}" for i in range(len(paras))], texts=paras,
                          source_events=[event_id],
                          content_sha256=sha256_json({"kind": "document", "card": record.slot.card_sha256,
                                                      "blob": blob})))
    return units


def _factor_block(card: Card, kind: PacketKind, alpha_p: bool) -> str:
    blocks = []
    for f in card.factors:
        alpha, beta = (f.endpoints.P, f.endpoints.Q) if alpha_p else (f.endpoints.Q, f.endpoints.P)
        rubric = f.request_support_rubric if kind == "requests" else f.final_action_rubric
        unknown = "\n".join(f"- {u}" for u in f.unknown_cases)
        blocks.append(f"FACTOR {f.factor_id}\nType: {f.type}\nScope: {f.scope}\nALPHA: {alpha}\n"
                      f"BETA: {beta}\nUnknown cases:\n{unknown}\nRubric: {rubric}")
    return "\n\n".join(blocks)


def render(evaluator: Evaluator, card: Card, unit: Unit, read: ReadNo) -> str:
    """The prompt of one read of a unit: the evaluator's template filled with blinded content."""
    alpha_p = alpha_is_p(unit.content_sha256, read)
    body = "\n".join(f"[{i}] {t}" for i, t in zip(unit.unit_ids, unit.texts, strict=True))
    return (evaluator.templates[unit.kind].replace("{{task}}", card.task.text)
            .replace("{{factors}}", _factor_block(card, unit.kind, alpha_p))
            .replace("{{body}}", body))


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def _contains(text: str, needle: str) -> bool:
    """Substring test; an identifier-like needle (model name, id) must stand as a whole token."""
    if not needle or needle not in text:  # a plain scan first: most needles are absent, the regex is slow
        return False
    if _IDENTIFIER.fullmatch(needle):
        return re.search(rf"(?<![\w.-]){re.escape(needle)}(?![\w-])", text) is not None
    return needle in text


def leak_findings(prompt: str, forbidden: dict[str, str]) -> list[str]:
    """What of the run's forbidden strings (profile, user message, ids, model) or condition labels
    the prompt contains, compared with whitespace normalised and case folded."""
    text = _norm(prompt)
    found = [f"contains the {what}" for what, needle in forbidden.items() if _contains(text, _norm(needle))]
    if m := _CONDITION.search(prompt):
        found.append(f"contains a condition label {m.group(0)!r}")
    return found


def forbidden_strings(record: RunRecord, card: Card, user_message: str, paired: list[str]) -> dict[str, str]:
    """The strings of a run that no packet may contain (Table 13, last row)."""
    out = {"profile": card.profile, "user message": user_message, "run id": record.run_id,
           "slot id": record.slot_id, "model name": record.slot.model,
           "requested model": record.requested_model}
    out.update({f"paired run id {i + 1}": rid for i, rid in enumerate(paired)})
    return out


def build_packets(evaluator: Evaluator, card: Card, record: RunRecord, units: list[Unit],
                  forbidden: dict[str, str]) -> list[Packet]:
    """Both mirrored packets of every unit, each checked for leaks (blocked ones are kept, unsent)."""
    packets = []
    for unit in units:
        for read in (1, 2):
            prompt = render(evaluator, card, unit, read)
            packet_id = sha256_text(prompt)
            manifest = Manifest(
                packet_id=packet_id, evaluator_id=evaluator.evaluator_id, run_id=record.run_id,
                card_id=card.card_id, arm=record.slot.arm, phase=unit.phase, document=unit.document,
                chunk=unit.chunk, kind=unit.kind, read=read,
                alpha_is_p=alpha_is_p(unit.content_sha256, read),
                axes=[f.factor_id for f in card.factors], unit_ids=unit.unit_ids,
                source_events=unit.source_events, content_sha256=unit.content_sha256,
                template_sha256=evaluator.file_sha256[f"prompt:{unit.kind}"],
                schema_sha256=evaluator.file_sha256[f"schema:{unit.kind}"], prompt_blob=packet_id,
                blocked=leak_findings(prompt, forbidden))
            packets.append(Packet(prompt=prompt, manifest=manifest))
    return packets
