"""Human review: a blinded sheet of document states for two reviewers, and their answers back.

The sheet shows the task, one factor with its endpoints as ALPHA/BETA (a fresh orientation by
hash of the item, so the canonical P/Q order stays hidden) and the document in numbered
paragraphs; no run, arm, model or instrument label. The key that restores P/Q and holds the
instrument's state stays on the program side under ``ARCHIVE/reviews/<evaluator_id>/``. Imported
answer files are stored as blobs (hashed) and compared with the instrument and between reviewers.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from typing import Literal, cast

from pydantic import TypeAdapter

from draligned.archive.store import Archive, write_once
from draligned.archive.tables import ArchiveTables
from draligned.evaluator.agreement import Agreement, cohen
from draligned.evaluator.orientation import ShownSide, restore
from draligned.evaluator.packets import paragraphs
from draligned.evaluator.reading import load_card
from draligned.evaluator.states import StateRow
from draligned.hashing import sha256_text
from draligned.records import Record

ANSWERS = ("ALPHA_SIDE", "BETA_SIDE", "BOTH", "NEITHER", "UNKNOWN")
QUESTION = ("On this factor, which side is the report's main recommendation on? Answer ALPHA_SIDE, "
            "BETA_SIDE, BOTH, NEITHER (main advice that expresses neither) or UNKNOWN (no main advice, "
            "or it cannot be told).")


class KeyEntry(Record):
    """Program-side key of one sheet item."""

    item_id: str
    """Blinded id shown on the sheet."""
    run_id: str
    """Run of the document."""
    document: str
    """Document role (final, draft:<v>)."""
    axis_id: str
    """Factor asked about."""
    alpha_is_p: bool
    """Whether ALPHA on the sheet is endpoint P."""
    instrument: str
    """The instrument's answer restored to P_SIDE/Q_SIDE/BOTH/NEITHER/UNKNOWN."""


class AnswersImport(Record):
    """An import of answer files (``reviews/<evaluator_id>/imports/<sha256>.json``)."""

    answers_blobs: list[str]
    """sha256 of each imported answer file."""


class ReviewReport(AnswersImport):
    """Agreement of imported answers with the instrument and between reviewers."""

    with_instrument: dict[str, Agreement]
    """Per reviewer: exact agreement (and kappa) with the instrument."""
    between_reviewers: Agreement | None
    """First two reviewers against each other, on the items both answered."""


def _instrument_side(row: StateRow) -> str:
    """The instrument's state as a P/Q side; UNKNOWN and missing states map to UNKNOWN."""
    other = "Q" if row.assigned == "P" else "P"
    sides = {"OWN": f"{row.assigned}_SIDE", "OTHER": f"{other}_SIDE", "BOTH": "BOTH", "NONE": "NEITHER"}
    return sides.get(row.decision.state, "UNKNOWN")


def sheet_text(rows: list[dict[str, str]], fmt: Literal["jsonl", "csv"], columns: list[str]) -> str:
    """A review sheet's text: CSV with a header of ``columns``, or one JSON object per line."""
    if fmt == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def export_sheet(archive: Archive, evaluator_id: str, rows: list[StateRow], fmt: Literal["jsonl", "csv"] = "jsonl",
                 limit: int | None = None) -> tuple[str, str]:
    """(sheet text, sheet id) for the document rows given; the key is written under the archive."""
    records = {r.run_id: r for r in archive.records()}
    reviewable = [r for r in rows if r.phase != "requests" and r.decision.state != "NO_DOCUMENT"
                  and r.decision.reason != "LEAK_BLOCKED"]  # a document that failed the leak check stays unseen
    chosen = sorted(reviewable,
                    key=lambda r: sha256_text(f"{evaluator_id}|{r.run_id}|{r.document}|{r.axis_id}"))[:limit]
    sheet, key = [], []
    for r in chosen:
        record = records[r.run_id]
        card = load_card(archive, record)
        item_id = sha256_text(f"review|{evaluator_id}|{r.run_id}|{r.document}|{r.axis_id}")[:16]
        alpha_p = int(item_id[0], 16) % 2 == 0
        factor = next(f for f in card.factors if f.factor_id == r.axis_id)
        alpha, beta = (factor.endpoints.P, factor.endpoints.Q) if alpha_p else (factor.endpoints.Q, factor.endpoints.P)
        blob = record.final_blob if r.document == "final" else next(
            e.blob for e in record.events if e.type == "draft" and f"draft:{e.version}" == r.document)
        if blob is None:
            raise ValueError(f"run {r.run_id}: final_blob is missing but its final has state {r.decision.state}")
        doc = "\n".join(f"[p{i + 1:03d}] {p}" for i, p in enumerate(paragraphs(archive.get_text(blob))))
        sheet.append({"item_id": item_id, "task": card.task.text, "factor": r.axis_id,
                      "scope": factor.scope, "ALPHA": alpha, "BETA": beta,
                      "rubric": factor.final_action_rubric, "document": doc, "question": QUESTION,
                      "reviewer": "", "answer": ""})
        key.append(KeyEntry(item_id=item_id, run_id=r.run_id, document=r.document, axis_id=r.axis_id,
                            alpha_is_p=alpha_p, instrument=_instrument_side(r)))
    text = sheet_text(sheet, fmt, list(sheet[0]) if sheet else ["item_id"])
    sheet_id = sha256_text(text)[:16]
    body = json.dumps([k.model_dump(mode="json") for k in key], indent=1, ensure_ascii=False) + "\n"
    write_once(archive.root / "reviews" / evaluator_id / f"{sheet_id}.key.json", body.encode())
    return text, sheet_id


def _read_answers(text: str) -> list[dict[str, str]]:
    """Answer rows from JSONL or CSV text (item_id, reviewer, answer)."""
    if text.lstrip().startswith("{"):
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return list(csv.DictReader(io.StringIO(text)))


def import_answers(archive: Archive, evaluator_id: str, texts: list[str]) -> ReviewReport:
    """Store answer files as blobs and report agreement with the instrument and between reviewers."""
    keys = {}
    for path in sorted((archive.root / "reviews" / evaluator_id).glob("*.key.json")):
        keys.update({k["item_id"]: KeyEntry.model_validate(k) for k in json.loads(path.read_text())})
    blobs = [archive.put_blob(t) for t in texts]
    write_once(archive.root / "reviews" / evaluator_id / "imports" / f"{sha256_text('|'.join(blobs))}.json",
               (json.dumps(AnswersImport(answers_blobs=blobs).model_dump(), indent=1) + "\n").encode())
    by_reviewer: dict[str, dict[str, str]] = defaultdict(dict)
    for text in texts:
        for row in _read_answers(text):
            if row.get("item_id") not in keys or row.get("answer") not in ANSWERS or not row.get("reviewer"):
                raise ValueError(f"bad answer row {row!r}: needs a known item_id, a reviewer and one of {ANSWERS}")
            key = keys[row["item_id"]]
            by_reviewer[row["reviewer"]][key.item_id] = restore(cast(ShownSide, row["answer"]), key.alpha_is_p)
    with_instrument = {}
    for reviewer, answers in sorted(by_reviewer.items()):
        ids = sorted(answers)
        with_instrument[reviewer] = cohen([answers[i] for i in ids], [keys[i].instrument for i in ids], reviewer)
    between = None
    if len(by_reviewer) >= 2:
        (ra, a), (rb, b) = sorted(by_reviewer.items())[:2]
        common = sorted(set(a) & set(b))
        between = cohen([a[i] for i in common], [b[i] for i in common], f"{ra} vs {rb}")
    return ReviewReport(answers_blobs=blobs, with_instrument=with_instrument, between_reviewers=between)


_KEY_FILE = TypeAdapter(list[KeyEntry])


def verify_reviews(archive: Archive) -> list[str]:
    """Problems in the review files: unreadable sheet keys or imports, missing answer blobs (blob
    contents themselves are checked by ``archive verify``)."""
    problems: list[str] = []
    base = archive.root / "reviews"
    for path in sorted(base.glob("*/*.key.json")):
        try:
            _KEY_FILE.validate_json(path.read_bytes())
        except ValueError as exc:
            problems.append(f"{path}: unreadable review key ({str(exc).splitlines()[0]})")
    for path in sorted(base.glob("*/imports/*.json")):
        try:
            imported = AnswersImport.model_validate_json(path.read_bytes())
        except ValueError as exc:
            problems.append(f"{path}: unreadable AnswersImport ({str(exc).splitlines()[0]})")
            continue
        problems += [f"{archive.blob_path(s)}: missing answers blob referenced by {path}"
                     for s in imported.answers_blobs if not archive.blob_path(s).exists()]
    return problems


REVIEW_FILES = ArchiveTables(name="reviews", verify=verify_reviews)
"""Review sheet keys and answer imports under ``ARCHIVE/reviews/`` (no index tables)."""
