"""Proposal: an LLM proposes factor cards for PDR-Bench (task, user) pairs (``draligned cards propose``).

For each pair the proposer sees the task and the user's persona and answers one JSON object (the
card schema's factors and message, the shared profile, and where in the persona each factor comes
from); the persona's value is endpoint P, a counterfactual Q. The answer is schema-checked without
repair, assembled into a card whose decisions record the prompt's and schema's sha256 and the raw
reply's, and run through the deterministic validator and a language check: a card that fails is kept
with status FAIL and the reasons. A two-factor design proposes factor 1 and 2 plus alternative second
factors; each alternative is its own candidate card (the assignment rule later picks one).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from draligned.archive.store import write_once
from draligned.cards import Card, CardProblem, LoadedCard, validate_loaded
from draligned.construction.pdrbench import (
    PdrPair,
    PdrPersona,
    PdrTask,
    check_pairs,
    default_pairs,
    load_pairs,
    load_personas,
    load_tasks,
)
from draligned.construction.prompts import (
    PROPOSAL_PROMPT,
    PROPOSAL_SCHEMA,
    PromptFile,
    ask,
    make_model,
    prompt_file,
    simulated,
)
from draligned.construction.store import card_bytes, save_card, today
from draligned.hashing import sha256_bytes, sha256_text
from draligned.models.base import ModelAPI, ModelDeclaration
from draligned.records import Record

Design = Literal["single", "two"]
LANGUAGE_NAMES = {"en": "English (en)", "zh": "Chinese (zh)"}
DESIGNS = {"single": "single-factor design: propose exactly one factor (in \"factors\"), no alternatives.",
           "two": "two-factor design: propose exactly two factors (factor 1, then factor 2, in \"factors\") and, "
                  "in \"second_factor_alternatives\", up to three further candidates for factor 2."}
_CJK = re.compile(r"[\u3400-\u9fff]")
_LETTER = re.compile(r"[A-Za-z\u3400-\u9fff]")


class ProposalRecord(Record):
    """One proposal call: what was asked, the raw reply's hash, and the cards it gave (or why none)."""

    pair: str
    """Pair key: language, task number, user and design."""
    taskid: int
    """PDR-Bench task number."""
    userid: str
    """PDR-Bench user id."""
    model: str
    """Proposer model name (a SIMULATOR's name says so)."""
    model_sha256: str
    """Hash of the proposer's model declaration."""
    prompt: str
    """Prompt template file name and sha256 (name@sha256)."""
    schema_file: str
    """Answer schema file name and sha256 (name@sha256)."""
    response_sha256: str
    """sha256 of the stored raw reply (DIR/responses/<sha256>.txt)."""
    error: str | None = None
    """Why the reply gave no card (schema failure, wrong number of factors); None when cards were built."""
    cards: list[str] = []
    """Card ids built from the reply, FAIL ones included."""


class ProposeSummary(Record):
    """What ``cards propose`` did."""

    pairs: int = 0
    """Pairs considered."""
    already: int = 0
    """Pairs proposed before (their record exists; no model call)."""
    cards: dict[str, str] = {}
    """Card id -> status of the cards built now."""
    unusable: dict[str, str] = {}
    """Pair -> why its reply gave no card."""
    model_errors: list[str] = []
    """Pairs left without a proposal because the model call raised (tried again next time)."""


def language_problems(card: Card) -> list[tuple[str, str]]:
    """(field, message) for proposal texts not written in the task's language."""
    lang = card.task.language
    texts = [("profile", card.profile)]
    for i, f in enumerate(card.factors):
        texts += [(f"factors[{i}].endpoints.P", f.endpoints.P), (f"factors[{i}].endpoints.Q", f.endpoints.Q),
                  (f"factors[{i}].final_action_rubric", f.final_action_rubric)]
    out = []
    for field, text in texts:
        letters = _LETTER.findall(text)
        cjk = len(_CJK.findall(text)) / max(1, len(letters))
        if letters and ((lang == "zh" and cjk < 0.3) or (lang == "en" and cjk > 0.3)):
            wrote = "English" if lang == "zh" else "Chinese"
            out.append((field, f"written in {wrote}, but the task is in {LANGUAGE_NAMES[lang]}"))
    return out


def render_prompt(template: PromptFile, task: PdrTask, persona: PdrPersona, design: Design) -> str:
    """The proposal prompt for one pair."""
    return (template.text.replace("{{design}}", DESIGNS[design])
            .replace("{{language}}", LANGUAGE_NAMES[task.language])
            .replace("{{task}}", task.task)
            .replace("{{persona}}", json.dumps(persona.groups, ensure_ascii=False, indent=1)))


def _card_data(answer: dict[str, Any], factors: list[dict[str, Any]], rename: tuple[str, str] | None) -> dict:
    """Card fields from an answer with ``factors``; ``rename`` moves slot references of one factor id."""
    message = json.loads(json.dumps(answer["message"]))
    if rename is not None:
        for slot in message["slots"].values():
            if slot.get("factor") == rename[0]:
                slot["factor"] = rename[1]
            if "factors" in slot:
                slot["factors"] = [rename[1] if x == rename[0] else x for x in slot["factors"]]
    return {"profile": answer["profile"], "factors": factors, "message": message}


def _source_text(task: PdrTask, persona: PdrPersona, answer: dict[str, Any], factor_ids: list[str]) -> str:
    lines = [f"PDR-Bench {task.language} task {task.taskid} ({task.domain}), user {persona.userid}; "
             "derived from PDR-Bench (Apache-2.0, Copyright 2025 OPPO)"]
    for fid in factor_ids:
        src = next((s for s in answer["sources"] if s["factor_id"] == fid), None)
        lines.append(f"{fid} <- {src['attribute']}: {src['value']}" if src else f"{fid} <- (source not given)")
    return "\n".join(lines)


def build_cards(answer: dict[str, Any], task: PdrTask, persona: PdrPersona,
                design: Design) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
    """(card id, card data without status) for each candidate the answer gives, or the reason for none."""
    n = len(answer["factors"])
    if n != (2 if design == "two" else 1):
        return [], f"the {design}-factor design needs {2 if design == 'two' else 1} factor(s), the answer has {n}"
    base = f"pdr_{task.language}_t{task.taskid}_{persona.userid.lower()}" + ("_2f" if design == "two" else "")
    variants: list[tuple[str, list[dict[str, Any]], tuple[str, str] | None]] = [(base, answer["factors"], None)]
    if design == "two":
        f1, f2 = answer["factors"]
        variants += [(f"{base}_alt{k}", [f1, alt], (f2["factor_id"], alt["factor_id"]))
                     for k, alt in enumerate(answer.get("second_factor_alternatives", []), 1)]
    task_card = {"task_id": f"pdr_{task.language}_t{task.taskid}", "text": task.task, "language": task.language}
    out = []
    for card_id, factors, rename in variants:
        data = {"card_id": card_id, "task": task_card, **_card_data(answer, factors, rename),
                "source": _source_text(task, persona, answer, [f["factor_id"] for f in factors])}
        out.append((card_id, data))
    return out, None


def decide(data: dict[str, Any], path: Path, proposer: str, provenance: str) -> LoadedCard | str:
    """The candidate as a card with its proposer and validator decisions, or why it is not a card."""
    proposed = {"outcome": "PASS", "by": f"proposer:{proposer}", "reason": provenance, "at": today()}
    try:
        card = Card.model_validate({**data, "status": {"current": "PASS", "decisions": [proposed]}})
    except ValidationError as exc:
        first = exc.errors()[0]
        return f"not a valid card: {'.'.join(str(x) for x in first['loc'])}: {first['msg']}"
    problems = validate_loaded(LoadedCard(card=card, path=path, file_sha256=sha256_bytes(card_bytes(card))))
    problems += [CardProblem(str(path), card.card_id, f, m) for f, m in language_problems(card)]
    reason = ("Deterministic validator passed: schema, slots and placement, endpoints, matched diff, "
              "no leakage, language.") if not problems else \
        "Deterministic validator failed: " + "; ".join(f"{p.field}: {p.message}" for p in problems)
    outcome = "FAIL" if problems else "PASS"
    decision = {"outcome": outcome, "by": "validator:draligned-construction-v1", "reason": reason, "at": today()}
    card = Card.model_validate({**data, "status": {"current": outcome, "decisions": [proposed, decision]}})
    return save_card(path, card)


async def _propose_pair(model: ModelAPI, declaration: ModelDeclaration, template: PromptFile, schema: PromptFile,
                        task: PdrTask, persona: PdrPersona, design: Design, out: Path) -> ProposalRecord:
    key = f"{task.language}_t{task.taskid}_{persona.userid}_{design}"
    prompt = render_prompt(template, task, persona, design)
    answer, error, response_sha = await ask(model, prompt, int(sha256_text(key)[:8], 16), out / "responses", schema)
    record = ProposalRecord(pair=key, taskid=task.taskid, userid=persona.userid, model=declaration.name,
                            model_sha256=declaration.sha256, prompt=f"{template.name}@{template.sha256}",
                            schema_file=f"{schema.name}@{schema.sha256}", response_sha256=response_sha)
    provenance = (f"Proposed by {simulated(declaration)} for PDR-Bench task {task.taskid}, user {persona.userid}; "
                  f"prompt {template.name} sha256 {template.sha256}; schema {schema.name} sha256 {schema.sha256}; "
                  f"raw response sha256 {response_sha}.")
    if error is None:
        candidates, error = build_cards(answer, task, persona, design)
        for card_id, data in candidates:
            built = decide(data, out / f"{card_id}.json", declaration.name, provenance)
            if isinstance(built, str):
                error = f"{card_id}: {built}"
                break
            record.cards.append(card_id)
    record.error = error
    write_once(out / "proposals" / f"{key}.json",
               (json.dumps(record.model_dump(mode="json"), indent=1, ensure_ascii=False) + "\n").encode())
    return record


def load_inputs(tasks: str | Path, personas: str | Path, pairs: str | Path | None
                ) -> tuple[dict[int, PdrTask], dict[str, PdrPersona], list[PdrPair]]:
    """Tasks, personas and the pairs to propose for (default: task k with the k-th persona)."""
    t, p = load_tasks(tasks), load_personas(personas)
    if pairs is None:
        return t, p, default_pairs(t, p)
    chosen = load_pairs(pairs)
    check_pairs(chosen, t, p, pairs)
    return t, p, chosen


async def propose_cards(tasks: dict[int, PdrTask], personas: dict[str, PdrPersona], pairs: list[PdrPair],
                        declaration: ModelDeclaration, out: str | Path, design: Design = "single",
                        concurrency: int = 4) -> ProposeSummary:
    """Propose cards for every pair not proposed before into ``out``."""
    out = Path(out)
    template, schema = prompt_file(PROPOSAL_PROMPT), prompt_file(PROPOSAL_SCHEMA)
    summary = ProposeSummary(pairs=len(pairs))
    todo = []
    for pair in pairs:
        key = f"{tasks[pair.taskid].language}_t{pair.taskid}_{pair.userid}_{design}"
        if (out / "proposals" / f"{key}.json").exists():
            summary.already += 1
        else:
            todo.append(pair)
    if not todo:
        return summary
    model = make_model(declaration)
    sem = asyncio.Semaphore(concurrency)

    async def one(pair: PdrPair) -> None:
        async with sem:
            try:
                rec = await _propose_pair(model, declaration, template, schema, tasks[pair.taskid],
                                          personas[pair.userid], design, out)
            except Exception as exc:  # noqa: BLE001 - no reply: leave the pair unproposed, report it
                summary.model_errors.append(f"task {pair.taskid} / {pair.userid}: {type(exc).__name__}: {exc}")
                return
        if rec.error is not None:
            summary.unusable[rec.pair] = rec.error
        for card_id in rec.cards:
            summary.cards[card_id] = Card.model_validate_json((out / f"{card_id}.json").read_bytes()).status.current

    await asyncio.gather(*(one(p) for p in todo))
    summary.cards = dict(sorted(summary.cards.items()))
    return summary
