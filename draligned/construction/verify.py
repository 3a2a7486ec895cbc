"""Two verifiers and the frozen gates (``draligned cards verify``; paper Tables 6 and 18).

Each verifier answers, per card, the five construction criteria H1-H5 (yes / no / cannot_tell, with a
reason) and, for each soft preference, whether its endpoints are mutually exclusive. The replies take
the structured-output path (raw reply stored, schema-checked, no repair). The gate rule
``construction-gates-v1`` is frozen; in order:

1. FAIL when both verifiers answer "no" on the same criterion (gate; H3 is gate G2, a single
   dimension), or both judge the same soft preference mutually exclusive;
2. RETAINED when a verifier's reply is unreadable (it keeps the card out of PASS, with that reason);
3. DISPUTED when one verifier judges a soft preference mutually exclusive and the other agrees with
   the design (the t46_x1 case);
4. RETAINED, with a flag, when a verifier flags a criterion (no or cannot_tell) that the other does
   not fail (the t23 case);
5. PASS otherwise.

Cards the validator failed are not sent to the verifiers. A card's gate outcome becomes its status;
each verifier's answers and the gate's reason are appended to its decisions.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Literal

from draligned.archive.store import write_once
from draligned.cards import Card, LoadedCard
from draligned.cards.model import Outcome
from draligned.construction import prompts
from draligned.construction.store import construction_cards, save_card, with_decision
from draligned.hashing import sha256_text
from draligned.models.base import ModelAPI, ModelDeclaration
from draligned.records import Record

CRITERIA = ("H1", "H2", "H3", "H4", "H5")
CRITERION_NAMES = {"H1": "faithful to source", "H2": "same core factor", "H3": "one factor changed (gate G2)",
                   "H4": "clear and plausible", "H5": "no answer leakage"}
GATE_RULE = "construction-gates-v1"
Answer = Literal["yes", "no", "cannot_tell"]


class CriterionAnswer(Record, frozen=True):
    """One verifier's answer to one criterion."""

    answer: Answer
    """yes, no or cannot_tell."""
    reason: str
    """The verifier's one-sentence reason."""


class SoftPreference(Record, frozen=True):
    """One verifier's judgement of a soft-preference factor."""

    factor_id: str
    """The factor (type preference)."""
    mutually_exclusive: bool
    """True: the endpoints are a hard either/or, against the soft-preference design."""
    reason: str
    """Why."""


class Verdict(Record):
    """One verifier's reading of one card (``DIR/verifications/<card_id>/<verifier>.json``)."""

    card_id: str
    """The card."""
    card_sha256: str
    """sha256 of the card file the verifier saw (before any verifier decision)."""
    verifier: str
    """Verifier model name (a SIMULATOR's name says so)."""
    model_sha256: str
    """Hash of the verifier's model declaration."""
    model: str
    """The verifier as decisions name it (protocol, model id; a SIMULATOR says so)."""
    prompt: str
    """Template file name@sha256."""
    schema_file: str
    """Answer schema file name@sha256."""
    response_sha256: str
    """sha256 of the stored raw reply."""
    error: str | None = None
    """Why the reply is unreadable (not JSON, schema); None when read."""
    criteria: dict[str, CriterionAnswer] = {}
    """Answers by criterion H1-H5 (empty when unreadable)."""
    soft_preferences: list[SoftPreference] = []
    """Judgements of the card's soft preferences."""


class GateResult(Record, frozen=True):
    """The frozen rule's outcome for one card."""

    outcome: Outcome
    """FAIL, RETAINED, DISPUTED or PASS."""
    reason: str
    """Which rule applied, naming criteria and verifiers."""


def gate(verdicts: list[Verdict]) -> GateResult:
    """The frozen gate rule over two verdicts (see the module docstring)."""
    a, b = verdicts
    ex_a = {s.factor_id: s.mutually_exclusive for s in a.soft_preferences}
    ex_b = {s.factor_id: s.mutually_exclusive for s in b.soft_preferences}
    if a.error is None and b.error is None:
        failed = [h for h in CRITERIA if a.criteria[h].answer == "no" and b.criteria[h].answer == "no"]
        if failed:
            names = ", ".join(f"{h} {CRITERION_NAMES[h]}" for h in failed)
            first = failed[0]
            return GateResult(outcome="FAIL", reason=f"{GATE_RULE}: both verifiers failed {names}: {a.verifier}: "
                              f"{a.criteria[first].reason} / {b.verifier}: {b.criteria[first].reason}")
        both = sorted(f for f in ex_a if ex_a[f] and ex_b.get(f))
        if both:
            return GateResult(outcome="FAIL", reason=f"{GATE_RULE}: both verifiers judge the soft preference "
                              f"{both[0]} mutually exclusive")
    unreadable = [v for v in verdicts if v.error is not None]
    if unreadable:
        return GateResult(outcome="RETAINED", reason=f"{GATE_RULE}: kept out of PASS: unreadable reply from "
                          + "; ".join(f"{v.verifier} ({v.error})" for v in unreadable))
    for f in sorted(ex_a.keys() | ex_b.keys()):
        if f in ex_a and f in ex_b and ex_a[f] != ex_b[f]:
            judge, other = (a, b) if ex_a[f] else (b, a)
            return GateResult(outcome="DISPUTED", reason=f"{GATE_RULE}: designed as a soft preference; "
                              f"{judge.verifier} judged {f} mutually exclusive, {other.verifier} agreed with the "
                              "design")
    flags = [(h, v) for h in CRITERIA for v in verdicts if v.criteria[h].answer != "yes"]
    if flags:
        text = "; ".join(f"{v.verifier} flagged {h} {CRITERION_NAMES[h]} ({v.criteria[h].answer}: "
                         f"{v.criteria[h].reason})" for h, v in flags)
        return GateResult(outcome="RETAINED", reason=f"{GATE_RULE}: flag registered, exclusion requires both "
                          f"verifiers to fail one gate: {text}")
    return GateResult(outcome="PASS", reason=f"{GATE_RULE}: both verifiers answered yes to H1-H5 and agree "
                      "with the design")


def render_prompt(template: prompts.PromptFile, card: Card) -> str:
    """The verifier prompt for one card: task, profile, source persona lines, factors (P as SOURCE)."""
    blocks = []
    for f in card.factors:
        lines = [f"FACTOR {f.factor_id}", f"TYPE: {f.type}", f"SCOPE: {f.scope}", f"SOURCE: {f.endpoints.P}",
                 f"COUNTERFACTUAL: {f.endpoints.Q}", f"UNKNOWN CASES: {' | '.join(f.unknown_cases)}",
                 f"REQUEST-SUPPORT RUBRIC: {f.request_support_rubric}", f"FINAL-ACTION RUBRIC: {f.final_action_rubric}"]
        blocks.append("\n".join(" ".join(line.split()) for line in lines))
    return (template.text.replace("{{task}}", card.task.text).replace("{{profile}}", card.profile)
            .replace("{{source}}", card.source or "(not recorded)").replace("{{factors}}", "\n\n".join(blocks)))


def cross_check(data: dict, card: Card) -> str | None:
    """What the schema cannot check: one judgement per soft preference of the card; None when it holds."""
    wanted = sorted(f.factor_id for f in card.factors if f.type == "preference")
    given = sorted(s["factor_id"] for s in data["soft_preferences"])
    if given != wanted:
        return f"soft_preferences: expected exactly the soft preferences {wanted}, got {given}"
    return None


async def _verdict(model: ModelAPI, decl: ModelDeclaration, loaded: LoadedCard, out: Path) -> Verdict:
    path = out / "verifications" / loaded.card.card_id / f"{decl.name}.json"
    if path.exists():
        return Verdict.model_validate_json(path.read_bytes())
    template, schema = prompts.prompt_file(prompts.VERIFY_PROMPT), prompts.prompt_file(prompts.VERIFY_SCHEMA)
    seed = int(sha256_text(f"{decl.name}|{loaded.card.card_id}")[:8], 16)
    data, error, response_sha = await prompts.ask(model, render_prompt(template, loaded.card), seed,
                                                  out / "responses", schema)
    if error is None and (error := cross_check(data, loaded.card)) is not None:
        data = None
    verdict = Verdict(card_id=loaded.card.card_id, card_sha256=loaded.file_sha256, verifier=decl.name,
                      model_sha256=decl.sha256, model=prompts.simulated(decl),
                      prompt=f"{template.name}@{template.sha256}",
                      schema_file=f"{schema.name}@{schema.sha256}", response_sha256=response_sha, error=error,
                      **({"criteria": data["criteria"], "soft_preferences": data["soft_preferences"]} if data else {}))
    write_once(path, (json.dumps(verdict.model_dump(mode="json"), indent=1, ensure_ascii=False) + "\n").encode())
    return verdict


def _verifier_decision(v: Verdict) -> tuple[Outcome, str]:
    if v.error is not None:
        return "RETAINED", f"{v.model}: unreadable reply (response sha256 {v.response_sha256}): {v.error}"
    answers = ", ".join(f"{h} {v.criteria[h].answer}" for h in CRITERIA)
    soft = "".join(f"; {s.factor_id} mutually exclusive: {s.mutually_exclusive}" for s in v.soft_preferences)
    worst = {c.answer for c in v.criteria.values()}
    outcome: Outcome = "FAIL" if "no" in worst else "RETAINED" if "cannot_tell" in worst else "PASS"
    return outcome, (f"{v.model}: {answers}{soft}; prompt {v.prompt}; schema {v.schema_file}; "
                     f"response sha256 {v.response_sha256}")


class VerifySummary(Record):
    """What ``cards verify`` did."""

    outcomes: dict[str, str] = {}
    """Card id -> gate outcome of the cards gated now."""
    skipped: dict[str, str] = {}
    """Card id -> why it was not verified (validator FAIL, already gated)."""
    model_errors: list[str] = []
    """Cards left ungated because a model call raised (tried again next time)."""


async def verify_dir(directory: str | Path, declarations: tuple[ModelDeclaration, ModelDeclaration],
                     concurrency: int = 4) -> VerifySummary:
    """Verify every validated, not yet gated card of a construction directory with two verifiers."""
    out = Path(directory)
    if declarations[0].name == declarations[1].name:
        raise ValueError(f"the two verifiers need different names, both are {declarations[0].name!r}")
    summary = VerifySummary()
    todo = []
    for loaded in construction_cards(out):
        decisions = loaded.card.status.decisions
        if any(d.by == f"gate:{GATE_RULE}" for d in decisions):
            summary.skipped[loaded.card.card_id] = f"already gated: {loaded.card.status.current}"
        elif loaded.card.status.current != "PASS":
            summary.skipped[loaded.card.card_id] = f"status {loaded.card.status.current}: not sent to the verifiers"
        else:
            todo.append(loaded)
    if not todo:
        return summary
    models = [prompts.make_model(d) for d in declarations]
    sem = asyncio.Semaphore(concurrency)

    async def one(loaded: LoadedCard) -> None:
        try:
            async with sem:
                verdicts = [await _verdict(m, d, loaded, out) for m, d in zip(models, declarations, strict=True)]
        except Exception as exc:  # noqa: BLE001 - no reply: the card stays ungated, tried again next time
            summary.model_errors.append(f"{loaded.card.card_id}: {type(exc).__name__}: {exc}")
            return
        card = loaded.card
        for v in verdicts:
            outcome, reason = _verifier_decision(v)
            card = with_decision(card, outcome, f"verifier:{v.verifier}", reason)
        result = gate(verdicts)
        card = with_decision(card, result.outcome, f"gate:{GATE_RULE}", result.reason, current=result.outcome)
        save_card(loaded.path, card)
        summary.outcomes[card.card_id] = result.outcome

    await asyncio.gather(*(one(c) for c in todo))
    summary.outcomes = dict(sorted(summary.outcomes.items()))
    return summary
