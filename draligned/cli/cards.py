"""`draligned cards`: validate factor card files, export the card JSON Schema, and construct cards
(the construction subcommands are in ``construction``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from draligned.cards import (
    SCHEMA_FILE_NAME,
    CardError,
    card_schema_json,
    load_card,
    validate_loaded,
)
from draligned.cli import add_command, construction


def card_paths(paths: list[str]) -> list[Path]:
    """Expand directories to their *.json cards (sorted, without schema.json); files pass through.

    A missing path is passed through too, so that loading it reports the problem.
    """
    out: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            out += sorted(p for p in path.glob("*.json") if p.name != SCHEMA_FILE_NAME)
        else:
            out.append(path)
    return out


def cmd_validate(args: argparse.Namespace) -> int:
    """Print OK or every problem per card file; exit 1 if any card has a problem, 2 if there is no card."""
    files = card_paths(args.paths)
    if not files:  # a mistyped path is not a set of valid cards
        print(f"error: no card files found in {' '.join(args.paths)}", file=sys.stderr)
        return 2
    failed = False
    for path in files:
        try:
            loaded = load_card(path)
            problems = validate_loaded(loaded)
        except CardError as exc:
            problems = exc.problems
        if problems:
            failed = True
            for problem in problems:
                print(problem)
        else:
            print(f"OK {path} ({loaded.card.card_id}, {len(loaded.card.arms())} arms)")
    return 1 if failed else 0


def cmd_schema(args: argparse.Namespace) -> int:
    """Print the card JSON Schema, or write it to --out (never into the working directory unasked)."""
    text = card_schema_json()
    if args.out in (None, "-"):
        sys.stdout.write(text)
    else:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        print(f"wrote {out}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `cards` command with its `validate` and `schema` subcommands."""
    cards = add_command(sub, "cards", description="Factor cards: one matched counterfactual task per JSON file.")
    cards_sub = cards.add_subparsers(dest="cards_command", required=True)
    validate = cards_sub.add_parser(
        "validate", help="check card files deterministically",
        description="Check card files (or every *.json but schema.json in a directory).")
    validate.add_argument("paths", nargs="+", metavar="PATH", help="card file or directory")
    validate.set_defaults(func=cmd_validate)
    schema = cards_sub.add_parser("schema", help="export the card JSON Schema")
    schema.add_argument("--out", help=f"output file, e.g. factor_cards/{SCHEMA_FILE_NAME} (default or '-': print it)")
    schema.set_defaults(func=cmd_schema)
    construction.register(cards_sub)
