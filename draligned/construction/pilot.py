"""Construction pilot: the gates on fictitious fixtures with planted defects (paper Table 19).

``construction/pilot/fixtures.toml`` lists four fixture cards: a clean one and one each with a
polarity (R2), binding (R3) and mapping (R1) defect, each with the criterion that targets it. The pilot
copies them into a fresh construction directory, runs the two verifiers and the frozen gates, and
reports per gate which fixtures it caught (both verifiers answered "no") and per fixture whether its
planted defect was caught by its target gate (the clean fixture: whether it passed).
"""

from __future__ import annotations

import asyncio
import shutil
import tomllib
from pathlib import Path

from draligned.construction.store import construction_cards
from draligned.construction.verify import CRITERIA, GATE_RULE, Verdict, verify_dir
from draligned.data import data_dir
from draligned.models.base import ModelDeclaration
from draligned.records import Record


class PilotFixture(Record, frozen=True):
    """One fixture as listed in fixtures.toml."""

    card: str
    """Card file name under construction/pilot/."""
    defect: str
    """Planted defect: none, polarity, binding or mapping."""
    relation: str | None = None
    """Relation family of the defect (R1, R2, R3)."""
    gate: str | None = None
    """The criterion (H1-H5) that targets the defect."""


class PilotResult(Record):
    """What the gates did with one fixture."""

    card_id: str
    """The fixture card."""
    defect: str
    """Planted defect (none for the clean fixture)."""
    relation: str | None
    """Relation family."""
    gate: str | None
    """Target criterion."""
    outcome: str
    """Gate outcome (FAIL, RETAINED, DISPUTED, PASS)."""
    answers: dict[str, dict[str, str]]
    """Verifier -> criterion -> answer (or {"error": ...} for an unreadable reply)."""
    failed_gates: list[str]
    """Criteria both verifiers answered "no"."""
    caught: bool
    """Defect: its target gate failed. Clean fixture: it passed."""


class PilotReport(Record):
    """The pilot's report."""

    verifiers: list[str]
    """The two verifier names."""
    fixtures: list[PilotResult]
    """One per fixture."""
    per_gate: dict[str, list[str]]
    """Criterion -> fixtures that gate caught."""
    all_caught: bool
    """Every planted defect caught by its target gate and the clean fixture passed."""


def fixtures() -> list[PilotFixture]:
    """The bundled pilot fixtures."""
    data = tomllib.loads((data_dir("construction") / "pilot" / "fixtures.toml").read_text(encoding="utf-8"))
    return [PilotFixture.model_validate(f) for f in data["fixture"]]


def run_pilot(declarations: tuple[ModelDeclaration, ModelDeclaration], out: str | Path) -> PilotReport:
    """Verify the fixtures in ``out`` (a new directory) and report what the gates caught."""
    out = Path(out)
    listed = fixtures()
    out.mkdir(parents=True, exist_ok=True)
    for f in listed:
        target = out / f.card
        if not target.exists():
            shutil.copyfile(data_dir("construction") / "pilot" / f.card, target)
    asyncio.run(verify_dir(out, declarations))
    cards = {lc.path.name: lc.card for lc in construction_cards(out)}
    results = []
    for f in listed:
        card = cards[f.card]
        verdicts = [Verdict.model_validate_json((out / "verifications" / card.card_id / f"{d.name}.json").read_bytes())
                    for d in declarations]
        answers: dict[str, dict[str, str]] = {
            v.verifier: {h: str(v.criteria[h].answer) for h in CRITERIA} if v.error is None else {"error": v.error}
            for v in verdicts}
        failed = [h for h in CRITERIA if all(a.get(h) == "no" for a in answers.values())]
        outcome = next(d.outcome for d in reversed(card.status.decisions) if d.by == f"gate:{GATE_RULE}")
        caught = outcome == "PASS" if f.gate is None else f.gate in failed
        results.append(PilotResult(card_id=card.card_id, defect=f.defect, relation=f.relation, gate=f.gate,
                                   outcome=outcome, answers=answers, failed_gates=failed, caught=caught))
    per_gate = {h: [r.card_id for r in results if h in r.failed_gates] for h in CRITERIA}
    return PilotReport(verifiers=[d.name for d in declarations], fixtures=results, per_gate=per_gate,
                       all_caught=all(r.caught for r in results))
