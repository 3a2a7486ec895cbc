"""The frozen assignment: which PASS cards enter a study (``draligned cards assign``; paper Table 6).

A rule file (TOML) holds ``seed`` and optional ``max_cards``, ``per_task`` and ``languages``. Every
card gets the rank key sha256("<seed>|<card_id>"); the rule, in order:

1. only cards with status PASS that validate are eligible (others: NOT_SELECTED, "status X");
2. two-factor candidates sharing task, user and factor 1: the lowest key is the second factor
   chosen, the others are NOT_SELECTED ("second factor not selected");
3. at most ``per_task`` cards per task (lowest keys);
4. at most ``max_cards`` cards overall (lowest keys).

Selected cards are written to ``OUT/cards/`` with an assignment decision, the others with status
NOT_SELECTED and the reason to ``OUT/not_selected/``, and ``OUT/assignment.json`` records the rule's
parameters, its sha256 and every card's outcome. The same rule and cards give the same selection.
"""

from __future__ import annotations

import json
import tomllib
from collections import defaultdict
from pathlib import Path

from pydantic import Field, ValidationError

from draligned.archive.store import write_once
from draligned.cards import LoadedCard, validate_loaded
from draligned.construction.prompts import ConstructionError
from draligned.construction.store import card_bytes, construction_cards, with_decision
from draligned.hashing import sha256_bytes, sha256_json, sha256_text
from draligned.records import Record

RULE_ID = "frozen-assignment-v1"


class AssignmentRule(Record, frozen=True):
    """The rule file's parameters."""

    seed: int
    """Hash seed of the rank keys; changing it changes the selection."""
    max_cards: int | None = Field(default=None, ge=1)
    """At most this many cards overall (None: no limit)."""
    per_task: int | None = Field(default=None, ge=1)
    """At most this many cards per task (None: no limit)."""
    languages: list[str] | None = None
    """Only cards in these task languages (None: all)."""
    description: str = ""
    """Free text: what the rule is for."""


class CardAssignment(Record, frozen=True):
    """One card's outcome."""

    card_id: str
    """The card."""
    card_sha256: str
    """sha256 of the card file assigned from."""
    selected: bool
    """True: in the study's card set."""
    reason: str
    """Why (rank key, or the step that left it out)."""


class Assignment(Record):
    """``OUT/assignment.json``."""

    rule: str
    """Rule id (the algorithm's version)."""
    rule_file_sha256: str
    """sha256 of the rule file's bytes."""
    parameters: AssignmentRule
    """The rule's parameters as parsed."""
    parameters_sha256: str
    """sha256 of the canonical JSON of the parameters."""
    cards: list[CardAssignment]
    """Every card of the directory, by card id."""


def load_rule(path: str | Path) -> tuple[AssignmentRule, str]:
    """The rule and the sha256 of its file; ConstructionError naming file and field."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        return AssignmentRule.model_validate(tomllib.loads(raw.decode("utf-8"))), sha256_bytes(raw)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConstructionError(f"{path}: {exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConstructionError(f"{path}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None


def _rank(rule: AssignmentRule, card_id: str) -> str:
    return sha256_text(f"{rule.seed}|{card_id}")


def _factor1_group(loaded: LoadedCard) -> str:
    """Two-factor candidates of one proposal share task, source line (user) and factor 1."""
    c = loaded.card
    user = (c.source or "").splitlines()[0] if c.source else ""
    return sha256_json([c.task.task_id, user, c.factors[0].model_dump(mode="json")])


def select(cards: list[LoadedCard], rule: AssignmentRule) -> list[CardAssignment]:
    """Every card's outcome under the rule (pure: no files written)."""
    out: dict[str, CardAssignment] = {}

    def drop(lc: LoadedCard, reason: str) -> None:
        out[lc.card.card_id] = CardAssignment(card_id=lc.card.card_id, card_sha256=lc.file_sha256,
                                              selected=False, reason=reason)

    pool = []
    for lc in cards:
        if lc.card.status.current != "PASS":
            drop(lc, f"status {lc.card.status.current}, not PASS")
        elif validate_loaded(lc):
            drop(lc, "does not validate")
        elif rule.languages is not None and lc.card.task.language not in rule.languages:
            drop(lc, f"language {lc.card.task.language} not in the rule's languages {rule.languages}")
        else:
            pool.append(lc)
    pool.sort(key=lambda lc: _rank(rule, lc.card.card_id))
    groups: dict[str, str] = {}
    kept = []
    for lc in pool:
        if len(lc.card.factors) == 2:
            g = _factor1_group(lc)
            if g in groups:
                drop(lc, f"second factor not selected: the rule chose {groups[g]} for this task, user and factor 1")
                continue
            groups[g] = lc.card.card_id
        kept.append(lc)
    per_task: dict[str, int] = defaultdict(int)
    for lc in kept:
        task = lc.card.task.task_id
        if rule.per_task is not None and per_task[task] >= rule.per_task:
            drop(lc, f"task {task} already has per_task = {rule.per_task} selected card(s)")
        elif rule.max_cards is not None and sum(per_task.values()) >= rule.max_cards:
            drop(lc, f"max_cards = {rule.max_cards} reached")
        else:
            per_task[task] += 1
            out[lc.card.card_id] = CardAssignment(
                card_id=lc.card.card_id, card_sha256=lc.file_sha256, selected=True,
                reason=f"selected: rank key {_rank(rule, lc.card.card_id)[:16]} (seed {rule.seed})")
    return [out[k] for k in sorted(out)]


def assign(directory: str | Path, rule_path: str | Path, out: str | Path) -> Assignment:
    """Apply a rule file to a construction directory and write the study's card set to ``out``."""
    rule, rule_sha = load_rule(rule_path)
    cards = construction_cards(directory)
    result = Assignment(rule=RULE_ID, rule_file_sha256=rule_sha, parameters=rule,
                        parameters_sha256=sha256_json(rule.model_dump(mode="json")), cards=select(cards, rule))
    out = Path(out)
    by_id = {lc.card.card_id: lc for lc in cards}
    for a in result.cards:
        card = by_id[a.card_id].card
        reason = f"{RULE_ID} (rule file sha256 {rule_sha}, seed {rule.seed}): {a.reason}"
        if a.selected:
            card = with_decision(card, "PASS", f"assignment:{RULE_ID}", reason)
        else:
            card = with_decision(card, "NOT_SELECTED", f"assignment:{RULE_ID}", reason, current="NOT_SELECTED")
        write_once(out / ("cards" if a.selected else "not_selected") / f"{a.card_id}.json", card_bytes(card))
    write_once(out / "assignment.json",
               (json.dumps(result.model_dump(mode="json"), indent=1, ensure_ascii=False) + "\n").encode())
    return result
