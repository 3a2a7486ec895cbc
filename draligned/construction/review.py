"""Human construction review: blinded sheets for two reviewers, their answers back (paper Tables 17, 18).

The sheet shows, per card, the task, the profile, the quoted persona attributes and the factors
(source and counterfactual endpoint, rubrics) with the five criteria H1-H5 to answer yes / no /
cannot_tell, a fatal flag and a comment; no card id, status, decision, verifier answer or model
name. The key (item id -> card) stays in ``DIR/reviews/``. Imported answer files are stored by their
sha256; the report gives per criterion each reviewer's counts, the exact agreement and Cohen's
kappa (the evaluator's ``cohen``: undefined only when neither reviewer varies). A fatal flag
excludes a card (FAIL) only when both reviewers flag it; one flag is registered (RETAINED decision)
and the card's status stays.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from pathlib import Path
from typing import Literal

from draligned.archive.store import write_once
from draligned.construction.store import construction_cards, save_card, with_decision
from draligned.construction.verify import CRITERIA, CRITERION_NAMES
from draligned.evaluator.agreement import Agreement, cohen
from draligned.evaluator.review import sheet_text
from draligned.hashing import sha256_bytes, sha256_text
from draligned.records import Record

ANSWERS = ("yes", "no", "cannot_tell")
SHEET_COLUMNS = ["item_id", "task", "profile", "source_persona", "factors", "questions",
                 "reviewer", *CRITERIA, "fatal", "comment"]
QUESTIONS = " ".join(f"{h} {CRITERION_NAMES[h]}?" for h in CRITERIA) + (
    " Answer each yes, no or cannot_tell. fatal: yes if the card must not be used at all. comment: free text.")
FATAL = {"yes": True, "y": True, "true": True, "1": True, "no": False, "n": False, "false": False, "0": False,
         "": False}
"""Accepted spellings of the fatal flag (empty: no flag)."""
REVIEWABLE = ("PASS", "RETAINED", "DISPUTED")
"""Statuses sent to human review; FAIL cards are not (paper Table 6)."""


class ReviewError(ValueError):
    """An answer file that cannot be imported; the message names file, line and field."""


class SheetKey(Record, frozen=True):
    """Program-side key of one sheet item."""

    item_id: str
    """Blinded id shown on the sheet."""
    card_id: str
    """The card."""
    card_sha256: str
    """sha256 of the card file the sheet was made from."""


class CriterionReport(Record):
    """One criterion: answers per reviewer (yes / no / cannot_tell) and agreement (Table 18)."""

    criterion: str
    """H1-H5."""
    counts: dict[str, dict[str, int]]
    """Reviewer -> answer -> count."""
    agreement: Agreement
    """Exact agreement and Cohen's kappa between the two reviewers on the cards both answered."""


class ReviewImport(Record):
    """What one import stored and found (``DIR/reviews/imports/<sha256>.json``)."""

    answers_sha256: list[str]
    """sha256 of each imported answer file (stored under DIR/reviews/answers/)."""
    reviewers: list[str]
    """The two reviewers compared, in name order."""
    criteria: list[CriterionReport]
    """Per criterion H1-H5."""
    all_five_yes: dict[str, int]
    """Reviewer -> cards with yes on all five criteria."""
    all_five_equal: float | None
    """Share of cards both answered with all five answers equal."""
    excluded: list[str]
    """Cards both reviewers flagged fatal (now FAIL)."""
    flagged: list[str]
    """Cards one reviewer flagged fatal (flag registered, not excluded)."""


def export_sheet(directory: str | Path, fmt: Literal["csv", "jsonl"]) -> tuple[str, str]:
    """(sheet text, sheet id) over the reviewable cards; the key is written under DIR/reviews/."""
    rows, key = [], []
    for loaded in construction_cards(directory):
        card = loaded.card
        if card.status.current not in REVIEWABLE:
            continue
        item_id = sha256_text(f"construction-review|{card.card_id}|{loaded.file_sha256}")[:16]
        persona = "\n".join(line for line in (card.source or "").splitlines() if " <- " in line)
        factors = "\n\n".join(
            f"{f.factor_id} ({f.type}; scope: {f.scope})\nSOURCE: {f.endpoints.P}\nCOUNTERFACTUAL: {f.endpoints.Q}\n"
            f"Unknown cases: {' | '.join(f.unknown_cases)}\nRequest-support rubric: {f.request_support_rubric}\n"
            f"Final-action rubric: {f.final_action_rubric}" for f in card.factors)
        rows.append({"item_id": item_id, "task": card.task.text, "profile": card.profile, "source_persona": persona,
                     "factors": factors, "questions": QUESTIONS, "reviewer": "",
                     **{h: "" for h in CRITERIA}, "fatal": "", "comment": ""})
        key.append(SheetKey(item_id=item_id, card_id=card.card_id, card_sha256=loaded.file_sha256))
    rows.sort(key=lambda r: r["item_id"])  # order by blinded id, not by card
    text = sheet_text(rows, fmt, SHEET_COLUMNS)
    sheet_id = sha256_text(text)[:16]
    body = json.dumps([k.model_dump() for k in sorted(key, key=lambda k: k.item_id)], indent=1) + "\n"
    write_once(Path(directory) / "reviews" / f"{sheet_id}.key.json", body.encode())
    return text, sheet_id


def _rows(name: str, text: str) -> list[tuple[int, dict[str, str]]]:
    """(line, row) of an answer file, JSONL or CSV (with a header line)."""
    if text.lstrip().startswith("{"):
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    out.append((n, {k: str(v) if v is not None else "" for k, v in json.loads(line).items()}))
                except (json.JSONDecodeError, AttributeError) as exc:
                    raise ReviewError(f"{name}:{n}: (line): not a JSON object ({exc})") from None
        return out
    reader = csv.DictReader(io.StringIO(text))
    return [(reader.line_num, row) for row in reader]


def _answer(name: str, n: int, row: dict[str, str], field: str) -> str:
    value = (row.get(field) or "").strip().casefold().replace(" ", "_")
    if value not in ANSWERS:
        raise ReviewError(f"{name}:{n}: {field}: expected one of {', '.join(ANSWERS)}, got {row.get(field)!r}")
    return value


def parse_answers(files: list[tuple[str, str]], keys: dict[str, SheetKey]
                  ) -> tuple[dict[str, dict[str, dict[str, str]]], dict[str, set[str]]]:
    """(reviewer -> card -> criterion -> answer, card -> reviewers flagging it fatal) from answer files."""
    answers: dict[str, dict[str, dict[str, str]]] = {}
    fatal: dict[str, set[str]] = {}
    for name, text in files:
        for n, row in _rows(name, text):
            item = (row.get("item_id") or "").strip()
            if item not in keys:
                raise ReviewError(f"{name}:{n}: item_id: {item!r} is on no exported sheet of this directory")
            reviewer = (row.get("reviewer") or "").strip() or Path(name).stem  # one file per reviewer
            card = keys[item].card_id
            if card in answers.setdefault(reviewer, {}):
                raise ReviewError(f"{name}:{n}: item_id: reviewer {reviewer} answered {item} twice")
            answers[reviewer][card] = {h: _answer(name, n, row, h) for h in CRITERIA}
            flag = FATAL.get((row.get("fatal") or "").strip().casefold())
            if flag is None:
                raise ReviewError(f"{name}:{n}: fatal: expected yes or no (or empty), got {row.get('fatal')!r}")
            if flag:
                fatal.setdefault(card, set()).add(reviewer)
    if len(answers) != 2:
        raise ReviewError(f"expected answers from exactly two reviewers, found {sorted(answers) or 'none'}")
    return answers, fatal


def agreement_report(answers: dict[str, dict[str, dict[str, str]]]) -> tuple[list[CriterionReport], dict[str, int],
                                                                               float | None]:
    """Per criterion counts, agreement and kappa; all-five-yes counts; share of cards with all five equal."""
    (ra, a), (rb, b) = sorted(answers.items())
    common = sorted(set(a) & set(b))
    reports = []
    for h in CRITERIA:
        counts = {r: {x: Counter(c[h] for c in answers[r].values())[x] for x in ANSWERS} for r in (ra, rb)}
        reports.append(CriterionReport(criterion=h, counts=counts, agreement=cohen(
            [a[c][h] for c in common], [b[c][h] for c in common], f"{h} {ra} vs {rb}")))
    five = {r: sum(all(v == "yes" for v in c.values()) for c in answers[r].values()) for r in (ra, rb)}
    equal = sum(a[c] == b[c] for c in common) / len(common) if common else None
    return reports, five, equal


def import_answers(directory: str | Path, files: list[tuple[str, bytes]]) -> ReviewImport:
    """Store answer files (hashed), report agreement, apply the fatal rule to the cards (once per import)."""
    root = Path(directory)
    keys: dict[str, SheetKey] = {}
    for path in sorted((root / "reviews").glob("*.key.json")):
        keys.update({k["item_id"]: SheetKey.model_validate(k) for k in json.loads(path.read_text())})
    if not keys:
        raise ReviewError(f"{root}: no exported review sheet (run cards review export first)")
    texts = []
    for name, raw in files:
        try:
            texts.append((name, raw.decode("utf-8-sig")))
        except UnicodeDecodeError as exc:
            raise ReviewError(f"{name}: (file): not UTF-8 ({exc})") from None
    answers, fatal = parse_answers(texts, keys)
    shas = [sha256_bytes(raw) for _, raw in files]
    reports, five, equal = agreement_report(answers)
    reviewers = sorted(answers)
    excluded = sorted(c for c, who in fatal.items() if len(who) >= 2)
    flagged = sorted(c for c, who in fatal.items() if len(who) == 1)
    result = ReviewImport(answers_sha256=shas, reviewers=reviewers, criteria=reports, all_five_yes=five,
                          all_five_equal=equal, excluded=excluded, flagged=flagged)
    for (name, raw), sha in zip(files, shas, strict=True):
        write_once(root / "reviews" / "answers" / f"{sha}{Path(name).suffix or '.txt'}", raw)
    record = root / "reviews" / "imports" / f"{sha256_text('|'.join(shas))}.json"
    if record.exists():
        return result  # imported before: the decisions are on the cards already
    for loaded in construction_cards(root):
        card, cid = loaded.card, loaded.card.card_id
        by = f"review:{'+'.join(reviewers)}"
        if cid in excluded:
            save_card(loaded.path, with_decision(card, "FAIL", by, "both reviewers flagged a fatal problem", "FAIL"))
        elif cid in flagged:
            who = next(iter(fatal[cid]))
            save_card(loaded.path, with_decision(card, "RETAINED", by, f"{who} flagged a fatal problem, the other "
                                                 "did not; exclusion requires both reviewers: flag registered"))
    write_once(record, (json.dumps(result.model_dump(mode="json"), indent=1) + "\n").encode())
    return result
