"""Loading and deterministic validation of factor cards.

The checks make sure a card that passes renders arms that differ only inside the changed
factor's endpoint spans, leaks no endpoint into the shared text, and that only PASS cards
without problems reach the runner.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import cast

from pydantic import BaseModel, ValidationError

from draligned.cards.model import (
    _TAG,
    CORE_MIN_CHARS,
    ByArmSlot,
    Card,
    Comparison,
    FactorSlot,
    FactorsSlot,
    Issue,
    Piece,
    Renders,
    SourceSlot,
    _render,
    comparisons,
    parse_template,
)
from draligned.hashing import sha256_bytes
from draligned.strict_json import JSONInputError, loads


@dataclass(frozen=True)
class CardProblem:
    """One finding, naming file, card and field (dotted path) so it can be fixed directly."""
    path: str
    card_id: str | None
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: card {self.card_id or '(unknown)'}: {self.field}: {self.message}"


class CardError(ValueError):
    """A card cannot be loaded or run; ``problems`` says why."""

    def __init__(self, problems: list[CardProblem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@dataclass(frozen=True)
class LoadedCard:
    """A schema-valid card, the file it came from and the sha256 of that file's exact bytes."""
    card: Card
    path: Path
    file_sha256: str


def _field_path(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a dotted path such as factors[0].endpoints.Q."""
    out = ""
    for item in loc:
        if isinstance(item, int):
            out += f"[{item}]"
        elif not item.startswith(_TAG):
            out += f".{item}" if out else item
    return out or "(card)"


def load_card(path: str | Path) -> LoadedCard:
    """Read and schema-check one card file; CardError names file, card and field on failure."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        data = loads(raw)  # a repeated key (e.g. a slot written twice) would silently lose data
    except OSError as exc:
        raise CardError([CardProblem(str(path), None, "(file)", f"cannot read: {exc.strerror}")]) from exc
    except JSONInputError as exc:  # JSON, UTF-8, repeated keys, nesting
        raise CardError([CardProblem(str(path), None, "(file)", f"not valid JSON: {exc}")]) from exc
    card_id = data.get("card_id") if isinstance(data, dict) else None
    card_id = card_id if isinstance(card_id, str) else None
    try:
        card = Card.model_validate(data)
    except ValidationError as exc:
        raise CardError([CardProblem(str(path), card_id, _field_path(e["loc"]), e["msg"])
                         for e in exc.errors()]) from None
    return LoadedCard(card=card, path=path, file_sha256=sha256_bytes(raw))


def _factor_refs(slot: BaseModel) -> list[str]:
    """The factor ids whose endpoint texts a slot places."""
    if isinstance(slot, FactorSlot):
        return [slot.factor]
    return list(slot.factors) if isinstance(slot, FactorsSlot) else []


def _structure_issues(card: Card) -> list[Issue]:
    """Cross-references the schema cannot express: ids, endpoints, placeholders, placements."""
    issues: list[Issue] = []
    ids = [f.factor_id for f in card.factors]
    for i, factor in enumerate(card.factors):
        if factor.factor_id in ids[:i]:
            issues.append((f"factors[{i}].factor_id", f"duplicate factor id {factor.factor_id!r}"))
        ends = {"P": factor.endpoints.P.strip(), "Q": factor.endpoints.Q.strip()}
        issues += [(f"factors[{i}].endpoints.{e}", "endpoint text is empty")
                   for e, t in ends.items() if not t]
        if ends["P"] and ends["P"] == ends["Q"]:
            issues.append((f"factors[{i}].endpoints", "endpoints P and Q are identical"))
    slots = card.message.slots
    try:
        used = Counter(n for k, n in parse_template(card.message.template) if k == "slot")
    except ValueError as exc:
        issues.append(("message.template", str(exc)))
        used = Counter(slots.keys())  # unknown; do not also report every slot as unused
    issues += [("message.template", f"placeholder {{{n}}} has no slot") for n in used if n not in slots]
    issues += [(f"message.slots.{n}", "slot is not used in the template") for n in slots if not used[n]]
    placed: dict[str, list[str]] = {fid: [] for fid in ids}
    for name, slot in slots.items():
        refs = _factor_refs(slot)
        for ref in refs:
            if ref in placed:
                placed[ref].append(name)
            else:
                key = "factor" if isinstance(slot, FactorSlot) else "factors"
                issues.append((f"message.slots.{name}.{key}", f"unknown factor {ref!r}"))
        if refs and used[name] > 1:
            issues.append(("message.template", f"placeholder {{{name}}} places endpoints; use it once"))
        if isinstance(slot, ByArmSlot) and sorted(slot.by_arm) != sorted(card.arms()):
            issues.append((f"message.slots.{name}.by_arm", f"keys must be exactly {card.arms()}"))
    for i, fid in enumerate(ids):
        if fid not in ids[:i] and len(placed[fid]) != 1:
            where = f" ({', '.join(placed[fid])})" if placed[fid] else ""
            issues.append((f"factors[{i}]", f"factor {fid!r} must be placed in exactly one slot, "
                           f"found {len(placed[fid])}{where}"))
    return issues


def _field_at(card: Card, pieces: list[Piece], pos: int) -> str:
    """The card field that produced the rendered character at ``pos``."""
    slot = next((s for a, b, s in pieces if a <= pos < b),
                next((s for a, b, s in reversed(pieces) if b == pos), None))
    kind = card.message.slots[slot] if slot is not None else None
    if isinstance(kind, SourceSlot):
        return "task.text" if kind.source == "task" else "profile"
    return f"message.slots.{slot}" if slot is not None else "message.template"


def _uncovered(lo: int, hi: int, spans: list[tuple[int, int]]) -> int | None:
    """First offset of [lo, hi) outside ``spans``; an insertion (lo == hi) may touch a span edge."""
    if lo == hi:
        return None if any(s <= lo <= e for s, e in spans) else lo
    for s, e in sorted(spans):
        lo = e if s <= lo < e else lo
    return lo if lo < hi else None


def _outside(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The (start, end) segments of ``text`` between sorted, disjoint ``spans``."""
    bounds = [0] + [x for span in sorted(spans) for x in span] + [len(text)]
    return list(zip(bounds[::2], bounds[1::2], strict=True))


@lru_cache(maxsize=512)
def _opcodes(a: str, b: str) -> tuple[tuple[str, int, int, int, int], ...]:
    """The character diff of two rendered arms (quadratic in their length, so kept: a card is validated at every
    study load, assignment and run, always with the same texts)."""
    return tuple(difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes())


def _comparison_issues(card: Card, comp: Comparison, renders: Renders) -> list[Issue]:
    """The two arms must differ in the changed factor only, and only inside its spans."""
    (ra, pa), (rb, pb) = renders[comp.arm_a], renders[comp.arm_b]
    label = f"{comp.arm_a} vs {comp.arm_b} (changing {comp.factor_id})"
    issues: list[Issue] = []
    for fid in (f.factor_id for f in card.factors):
        ta, tb = ([r.text[s.start:s.end] for s in r.spans if s.factor_id == fid] for r in (ra, rb))
        if fid == comp.factor_id and ta == tb:
            issues.append(("message", f"{label}: factor {fid} does not change"))
        elif fid != comp.factor_id and ta != tb:
            issues.append(("message", f"{label}: factor {fid} changes too"))
    sa, sb = ([(s.start, s.end) for s in r.spans if s.factor_id == comp.factor_id] for r in (ra, rb))
    for tag, i1, i2, j1, j2 in _opcodes(ra.text, rb.text):
        out_a, out_b = _uncovered(i1, i2, sa), _uncovered(j1, j2, sb)
        if tag != "equal" and (out_a is not None or out_b is not None):
            arm, pos, pieces = (comp.arm_a, out_a, pa) if out_a is not None else (comp.arm_b, out_b, pb)
            excerpts = f"{ra.text[max(0, i1 - 10):i2 + 10]!r} vs {rb.text[max(0, j1 - 10):j2 + 10]!r}"
            return issues + [(_field_at(card, pieces, cast(int, pos)),
                              f"{label}: differs outside the endpoint spans at offset {pos} of "
                              f"{arm}: {excerpts}")]
    # The diff can align shared text with span text; compare the outside segments one by one too.
    # strict=False: a faulty card can give the changed factor a different number of spans per arm;
    # the segments both arms have are paired here, the diff above has checked the whole text.
    for (a1, a2), (b1, b2) in zip(_outside(ra.text, sa), _outside(rb.text, sb), strict=False):
        x, y = ra.text[a1:a2], rb.text[b1:b2]
        if x != y:
            j = len(os.path.commonprefix([x, y]))
            field = _field_at(card, pa, a1 + j) if a1 + j < a2 else _field_at(card, pb, b1 + j)
            return issues + [(field, f"{label}: text outside the endpoint spans differs at offset "
                              f"{a1 + j} of {comp.arm_a}: {x[j:j + 20]!r} vs {y[j:j + 20]!r}")]
    return issues


def endpoint_core(a: str, b: str) -> tuple[str, str]:
    """Each endpoint with the common prefix and suffix of both removed, stripped."""
    p = len(os.path.commonprefix([a, b]))
    s = len(os.path.commonprefix([a[p:][::-1], b[p:][::-1]]))
    return a[p:len(a) - s].strip(), b[p:len(b) - s].strip()


#: A number as written: digits with optional thousands commas and decimals, and an optional
#: multiplier (k/K, or 万 = 10,000) that is not the start of a unit word ("5km" is not 5,000).
#: Never a digit run inside a longer number, word or version string.
_NUMBER = re.compile(r"(?<![A-Za-z0-9.,])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?![.,]?\d)(?:([kK万])(?![A-Za-z]))?")
_MULTIPLIER = {"k": 1000, "K": 1000, "万": 10_000}
_NUMBER_FRAGMENT = re.compile(r"[\d.,]+")


def numbers(text: str) -> list[tuple[int, str, Fraction]]:
    """Every whole number token of ``text``: (offset, token, value), separators and multipliers
    normalised so that 5,000 = 5000 = 5k."""
    out = []
    for m in _NUMBER.finditer(text):
        whole, decimals, mult = m.groups()
        value = Fraction(whole.replace(",", "")) + (Fraction(f"0.{decimals}") if decimals else 0)
        out.append((m.start(), m.group(0), value * _MULTIPLIER.get(mult or "", 1)))
    return out


def _number_issues(card: Card, renders: Renders, factor_index: int) -> list[Issue]:
    """A number of one endpoint that the other lacks (e.g. 5,000 vs 12,000) must not appear as a
    whole number in the shared text; a digit inside another number (12 in 12,000) is no match."""
    factor = card.factors[factor_index]
    values = {e: {v for _, _, v in numbers(t)} for e, t in (("P", factor.endpoints.P), ("Q", factor.endpoints.Q))}
    distinctive = {"P": values["P"] - values["Q"], "Q": values["Q"] - values["P"]}
    issues: list[Issue] = []
    for rendered, pieces in renders.values():
        for lo, hi in _outside(rendered.text, [(s.start, s.end) for s in rendered.spans]):
            for at, token, value in numbers(rendered.text[lo:hi]):
                for e in ("P", "Q"):
                    if value in distinctive[e]:
                        issues.append((_field_at(card, pieces, lo + at), f"shared text contains the number "
                                       f"{token!r} of endpoint {e} of factor {factor.factor_id} ({value})"))
    return issues


def _leak_issues(card: Card, renders: Renders) -> list[Issue]:
    """No endpoint text or distinctive core in the shared text, nor the other core in an endpoint.
    A core that is only part of a number ("5" of "5,000" vs "12,000") is compared as a whole number."""
    issues: list[Issue] = []
    for i, factor in enumerate(card.factors):
        ends = {"P": factor.endpoints.P.strip(), "Q": factor.endpoints.Q.strip()}
        cores = dict(zip("PQ", endpoint_core(factor.endpoints.P, factor.endpoints.Q), strict=True))
        cores = {e: c for e, c in cores.items() if len(c) >= CORE_MIN_CHARS and not _NUMBER_FRAGMENT.fullmatch(c)}
        needles = [(f"the text of endpoint {e}", t) for e, t in ends.items()]
        needles += [(f"the core of endpoint {e}", c) for e, c in cores.items()]
        for rendered, pieces in renders.values():
            for lo, hi in _outside(rendered.text, [(s.start, s.end) for s in rendered.spans]):
                for what, needle in needles:
                    if hit := re.search(re.escape(needle), rendered.text[lo:hi], re.IGNORECASE):
                        field = _field_at(card, pieces, lo + hit.start())
                        msg = f"shared text contains {what} of factor {factor.factor_id}: {needle!r}"
                        issues.append((field, msg))
        issues += _number_issues(card, renders, i)
        for e, other in (("P", "Q"), ("Q", "P")):
            core = cores.get(other, "")
            if core and re.search(re.escape(core), ends[e], re.IGNORECASE):
                msg = f"contains the core of endpoint {other}: {core!r}"
                issues.append((f"factors[{i}].endpoints.{e}", msg))
    return issues


def validate_loaded(loaded: LoadedCard) -> list[CardProblem]:
    """Every deterministic check beyond the schema, for an already loaded card."""
    card = loaded.card
    issues: list[Issue] = []
    structure = _structure_issues(card)
    issues += structure
    renders: Renders = {}
    if not structure:  # rendering relies on sound cross-references
        for arm in card.arms():
            try:
                renders[arm] = _render(card, arm)
            except ValueError as exc:
                issues.append(("message", f"arm {arm} does not render: {exc}"))
    if len(renders) == len(card.arms()):
        for comp in comparisons(card):
            issues += _comparison_issues(card, comp, renders)
        issues += _leak_issues(card, renders)
    return [CardProblem(str(loaded.path), card.card_id, f, m) for f, m in dict.fromkeys(issues)]


def validate_card_file(path: str | Path) -> list[CardProblem]:
    """Schema and content problems of one card file; empty when the card is well formed."""
    try:
        return validate_loaded(load_card(path))
    except CardError as exc:
        return exc.problems


def runnable(loaded: LoadedCard) -> bool:
    """Whether the card may be run: status PASS and no validation problems."""
    return loaded.card.status.current == "PASS" and not validate_loaded(loaded)


def require_runnable(path: str | Path) -> LoadedCard:
    """Load a card for the runner; CardError unless it validates cleanly with status PASS."""
    loaded = load_card(path)
    problems = validate_loaded(loaded)
    if problems:
        raise CardError(problems)
    if (current := loaded.card.status.current) != "PASS":
        raise CardError([CardProblem(str(loaded.path), loaded.card.card_id, "status.current",
                                     f"status is {current}; only PASS cards can be run")])
    return loaded


def card_schema_json() -> str:
    """The card JSON Schema as committed in factor_cards/schema.json (indent 2, final newline)."""
    return json.dumps(Card.model_json_schema(), indent=2, ensure_ascii=False) + "\n"
