"""SIMULATOR evaluator, not a language model: a deterministic lexical reader of packets.

``protocol = "sim-evaluator"`` lets the demo run the whole instrument offline. It sees only the
packet prompt (one user message), exactly like a real evaluator, and answers raw JSON text that
goes through the same archive -> ingest -> aggregate path. Its rules: a factor's ALPHA words are
the words of the ALPHA text absent from BETA (and vice versa); a request or paragraph is on the
side whose words it contains. Paragraph cues give kind and status: "Your situation" is a user
restatement, "Main recommendation" the main advice, "Backup" a backup, "Plan" a comparison.
With option ``order_bias = true`` it calls a paragraph holding words of both sides for whichever
endpoint is listed first (ALPHA): the position bias that mirrored reads expose as UNKNOWN.
"""

from __future__ import annotations

import json
import re
import time

from draligned.evaluator.config import SimEvaluatorOptions
from draligned.models.base import ModelAPI
from draligned.records import Message, ModelReply, ToolSpec, Usage
from draligned.tools.corpus import tokenize

SIM_EVALUATOR_LABEL = "SIMULATOR (draligned lexical sim evaluator, not a language model)"
_FACTOR = re.compile(r"^FACTOR (\S+)\n(?:.*\n)*?ALPHA: (.*)\nBETA: (.*)$", re.MULTILINE)
_ENTRY = re.compile(r"^\[([pr]\d{3,})\] ", re.MULTILINE)
_CUES = (("your situation", "USER_RESTATEMENT", "MENTION_ONLY"),
         ("main recommendation", "ACTOR_ADVICE", "MAIN"),
         ("backup", "ACTOR_ADVICE", "BACKUP"),
         ("plan", "ACTOR_ADVICE", "COMPARE"))


def _section(prompt: str, name: str) -> str:
    start = prompt.find(f"=== {name} ===")
    end = prompt.find(f"=== END {name} ===")
    return prompt[start + len(name) + 8:end] if start >= 0 and end > start else ""


def _entries(section: str) -> list[tuple[str, str]]:
    """(id, text) of the numbered entries of a packet section; an entry runs to the next id."""
    marks = list(_ENTRY.finditer(section))
    return [(m.group(1), section[m.end():(marks[k + 1].start() if k + 1 < len(marks) else len(section))].strip())
            for k, m in enumerate(marks)]


def _side(text: str, alpha: set[str], beta: set[str], order_bias: bool = False) -> str:
    words = set(tokenize(text))
    a, b = bool(words & alpha), bool(words & beta)
    if a and b:
        return "ALPHA_SIDE" if order_bias else "BOTH"
    return "ALPHA_SIDE" if a else "BETA_SIDE" if b else "NEITHER"


def answer(prompt: str, order_bias: bool = False) -> dict:
    """The simulator's JSON answer to one packet prompt."""
    factors = []
    for fid, alpha, beta in _FACTOR.findall(_section(prompt, "FACTORS")):
        wa, wb = set(tokenize(alpha)), set(tokenize(beta))
        factors.append((fid, wa - wb, wb - wa))
    if "=== REQUESTS ===" in prompt:
        return {"labels": [{"request_id": rid, "axis_id": fid, "label": _side(text, wa, wb)}
                           for rid, text in _entries(_section(prompt, "REQUESTS")) for fid, wa, wb in factors]}
    items = []
    for pid, text in _entries(_section(prompt, "DOCUMENT")):
        head = text.splitlines()[0].casefold()
        cue = next(((k, s) for word, k, s in _CUES if word in head), None)
        if cue is None:
            continue
        for fid, wa, wb in factors:
            side = _side(text, wa, wb, order_bias)
            if side != "NEITHER" or cue[1] == "MAIN":
                items.append({"axis_id": fid, "kind": cue[0], "status": cue[1], "side": side,
                              "source_ids": [pid], "entity_key": head.lstrip("#* ")[:60] or pid,
                              "condition_status": "UNDETERMINED"})
    return {"items": items}


class SimEvaluator(ModelAPI):
    """The lexical SIMULATOR evaluator behind the ordinary model interface."""

    async def generate(self, messages: list[Message], tools: list[ToolSpec], seed: int) -> ModelReply:
        started = time.perf_counter()
        prompt = next(m.content or "" for m in messages if m.role == "user")
        text = json.dumps(answer(prompt, SimEvaluatorOptions.model_validate(self.declaration.options).order_bias),
                          ensure_ascii=False)
        usage = Usage(input_tokens=len(prompt) // 4 + 1, output_tokens=len(text) // 4 + 1)
        raw = {"object": "draligned.sim_evaluator.reply", "simulator": SIM_EVALUATOR_LABEL,
               "model": self.declaration.model, "content": text, "finish_reason": "stop"}
        body = {"model": self.declaration.model, "messages": [m.model_dump(mode="json", exclude_defaults=True)
                                                              for m in messages],
                "seed": seed, **self.declaration.request_fields()}
        return ModelReply(text=text, finish_reason="stop", usage=usage, model_echo=self.declaration.model,
                          request_body=body, raw_response=json.dumps(raw, ensure_ascii=False, sort_keys=True),
                          latency_s=time.perf_counter() - started)
