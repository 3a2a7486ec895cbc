"""A construction directory: candidate cards (``DIR/<card_id>.json``), proposal and verification
records, stored raw replies (``DIR/responses/<sha256>.txt``) and review sheets and answers.

Records and raw replies are written once; a card file is replaced atomically when a decision is
appended to its status (its earlier decisions stay in it, oldest first).
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import date
from pathlib import Path

from draligned.cards import Card, CardError, Decision, LoadedCard, load_card
from draligned.cards.model import Outcome
from draligned.construction.prompts import ConstructionError
from draligned.hashing import sha256_bytes


def today() -> str:
    """The date decisions are recorded with."""
    return date.today().isoformat()


def card_bytes(card: Card) -> bytes:
    """A card file's bytes (indent 2, final newline), as the committed cards are written."""
    return (json.dumps(card.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def save_card(path: Path, card: Card) -> LoadedCard:
    """Write (or atomically replace) a card file; the loaded card with its new file hash."""
    data = card_bytes(card)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)
    return LoadedCard(card=card, path=path, file_sha256=sha256_bytes(data))


def with_decision(card: Card, outcome: Outcome, by: str, reason: str, current: Outcome | None = None) -> Card:
    """The card with one more decision; ``current`` (default: unchanged) becomes the outcome in force."""
    status = card.status.model_copy(update={
        "decisions": [*card.status.decisions, Decision(outcome=outcome, by=by, reason=reason, at=today())],
        "current": current or card.status.current})
    return card.model_copy(update={"status": status})


def construction_cards(directory: str | Path) -> list[LoadedCard]:
    """Every card of a construction directory, by file name; ConstructionError if it has none."""
    root = Path(directory)
    if not root.is_dir():
        raise ConstructionError(f"{root}: not a directory")
    paths = sorted(p for p in root.glob("*.json") if not p.name.startswith("."))
    if not paths:
        raise ConstructionError(f"{root}: no card files (*.json)")
    try:
        return [load_card(p) for p in paths]
    except CardError as exc:
        raise ConstructionError(str(exc)) from None
