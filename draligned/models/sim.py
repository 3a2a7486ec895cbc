"""SIMULATOR, not a language model: a deterministic, seeded, offline agent for pipeline checks.

``protocol = "sim"`` exists so a new user can run the whole pipeline with no keys. It goes
through the same interface as real providers: it sees only the messages and tools it is
sent, answers with tool calls, and is archived like any model. Its behaviour is a fixed
script (search, read, draft, search again, revise, submit) whose *content* depends on the
user message: with probability ``sensitivity`` a query carries words of one background
sentence, the result it reads is the one closest to the user's background, and the main
recommendation is the read page closest to the background (sentences nearer the task
weigh more: see ``background_weights``). With ``sensitivity = 0`` the
arms of a pair issue identical requests. Nothing it writes is advice; reports label it.

When offered the workspace tools (H-W, H-D) the same script writes its drafts to
``deliverable.md`` with write_file, checks them with one shell command, (H-D) delegates one
batch of one or two tasks (the first with the draft as input file) before searching again,
turns the last draft into the final with edit_file and delivers it with submit_file. Offered
worker tools (no submit_file), it views its input file or searches and reads, runs one shell
command and replies with its notes.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
import time
from dataclasses import dataclass, field

from draligned.models.base import ModelAPI, ModelDeclaration
from draligned.models.options import SimOptions
from draligned.records import Message, ModelReply, ToolCall, ToolSpec, Usage
from draligned.tools.corpus import tokenize
from draligned.tools.workspace import DELIVERABLE

SIM_LABEL = "SIMULATOR (draligned sim agent, not a language model)"
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s*")
_RESULT = re.compile(r"^\[\d+\] (.*)\nURL: (\S+)\nSnippet: (.*)$", re.M)
_CJK = re.compile(r"[\u3400-\u9fff]")
_CLAUSE = re.compile(r"[，。、；：！？,.;:!?\s]+")


@dataclass
class _History:
    """What the simulator has done so far, reconstructed from the conversation it was sent."""

    searches: list[str] = field(default_factory=list)
    results: list[list[tuple[str, str]]] = field(default_factory=list)
    reads: list[tuple[str, str]] = field(default_factory=list)
    drafts: int = 0
    last_tool: str | None = None
    outputs: dict[str, str] = field(default_factory=dict)
    """Last return text per tool name (workspace harnesses)."""

    @classmethod
    def parse(cls, messages: list[Message]) -> _History:
        hist = cls()
        calls = {tc.id: tc for m in messages if m.role == "assistant" for tc in m.tool_calls}
        for m in messages:
            if m.role != "tool" or m.tool_call_id not in calls:
                continue
            call = calls[m.tool_call_id]
            args = call.arguments or {}
            hist.last_tool = call.name
            hist.outputs[call.name] = m.content or ""
            if call.name == "search":
                hist.searches.append(str(args.get("query", "")))
                hist.results.append([(url, f"{title} {snip}") for title, url, snip in _RESULT.findall(m.content or "")])
            elif call.name == "read":
                hist.reads.append((str(args.get("url", "")), m.content or ""))
            elif call.name in ("write_report", "write_file"):
                hist.drafts += 1
        return hist


def split_message(text: str) -> tuple[str, list[str]]:
    """(task, background sentences): the last paragraph is the task, the rest is background."""
    paragraphs = [p.strip() for p in text.split("\n\n") if p.strip()]
    task = paragraphs[-1] if paragraphs else text
    background = [s for p in paragraphs[:-1] for s in _SENTENCE.split(p) if s.strip()]
    return task, background


def phrases(text: str) -> list[str]:
    """Query building blocks: clauses for Chinese text, content words otherwise (order kept)."""
    if _CJK.search(text):
        return [c for c in _CLAUSE.split(text) if c]
    return list(dict.fromkeys(tokenize(text)))


def background_weights(background: list[str]) -> dict[str, float]:
    """Word weights of the user's background: the closer a sentence is to the task (the most
    recent thing the user said), the more its words weigh (1, 1/2, 1/4, ... going back)."""
    weights: dict[str, float] = {}
    for distance, sentence in enumerate(reversed(background)):
        for w in tokenize(sentence):
            weights.setdefault(w, 0.5**distance)
    return weights


def affinity(texts: list[str], weights: dict[str, float]) -> list[float]:
    """How strongly each text matches the user's background: shared words weighted by the
    background weight and by how few of the texts contain them (a word all share says nothing)."""
    bags = [set(tokenize(t)) & weights.keys() for t in texts]
    df = {w: sum(w in b for b in bags) for w in weights}
    return [sum(weights[w] * math.log((len(texts) + 1) / df[w]) for w in sorted(b)) for b in bags]


class SimAgent(ModelAPI):
    """The offline simulated agent (see module docstring).

    Options: ``SimOptions`` (sensitivity, revise, final_mode, latency_s), validated when built.
    """

    def __init__(self, declaration: ModelDeclaration) -> None:
        super().__init__(declaration)
        self.options = SimOptions.model_validate(declaration.options)

    @property
    def sensitivity(self) -> float:
        return self.options.sensitivity

    async def generate(self, messages: list[Message], tools: list[ToolSpec], seed: int) -> ModelReply:
        started = time.perf_counter()
        await asyncio.sleep(self.options.latency_s)
        user = next(m.content or "" for m in messages if m.role == "user")
        task, background = split_message(user)
        hist = _History.parse(messages)
        step = sum(1 for m in messages if m.role == "assistant")
        rng = random.Random(f"{seed}:{step}")
        plan = random.Random(f"{seed}:plan")
        n_first = plan.choice((2, 3))
        revise = self.options.revise
        tool_names = {t.name for t in tools}

        call: ToolCall | None = None
        text: str | None = None
        workspace = "write_file" in tool_names  # H-W / H-D: a file workspace and a shell
        if workspace and "submit_file" not in tool_names:
            call, text = self._work(user, hist)
        elif hist.last_tool == "search" and hist.results[-1]:
            call = self._read(hist, background, rng)
        elif workspace and hist.drafts == 1 and "shell" not in hist.outputs:
            call = self._tool("shell", {"command": "wc -w deliverable.md && ls -l"})
        elif "delegate_batch" in tool_names and hist.drafts == 1 and "delegate_batch" not in hist.outputs:
            call = self._delegate(task, plan.choice((1, 2)))
        elif len(hist.searches) < n_first or (revise and hist.drafts == 1 and len(hist.searches) == n_first):
            call = self._search(task, background, len(hist.searches), rng)
        elif hist.drafts < 1 + int(revise):
            call = self._write(task, background, hist, seed, workspace)
        elif workspace and self.options.final_mode == "submit":
            edit = {"path": DELIVERABLE, "old_text": "# Draft:", "new_text": "# Final report:"}
            call = (self._tool("edit_file", edit)
                    if "edit_file" not in hist.outputs else self._tool("submit_file", {"path": DELIVERABLE}))
        elif (self.options.final_mode == "text"
              or ("submit_report" not in tool_names and not workspace)):
            text = self._report(task, background, hist, True, seed)
        else:
            call = self._tool("submit_report", {"content": self._report(task, background, hist, True, seed)})
        if call is not None:
            call = call.model_copy(update={"id": f"sim_{seed}_{step}"})
        return self._reply(messages, tools, seed, text, call, started)

    # ------------------------------------------------------------------ actions
    @staticmethod
    def _tool(name: str, args: dict) -> ToolCall:
        """A well-formed call; the caller assigns the call id."""
        return ToolCall(id="", name=name, arguments=args, raw_arguments=json.dumps(args, ensure_ascii=False))

    def _search(self, task: str, background: list[str], i: int, rng: random.Random) -> ToolCall:
        words = phrases(task)
        rng.shuffle(words)
        query = words[: 2 + (i % 3)] if _CJK.search(task) else words[: 4 + (i % 3)]
        if background and rng.random() < self.sensitivity:
            query += phrases(background[i % len(background)])[:5]
        return self._tool("search", {"query": " ".join(query)})

    def _read(self, hist: _History, background: list[str], rng: random.Random) -> ToolCall:
        seen = {r for r, _ in hist.reads}
        results = [r for r in hist.results[-1] if r[0] not in seen] or hist.results[-1]
        url = results[0][0]
        if rng.random() < self.sensitivity:
            scores = affinity([text for _, text in results], background_weights(background))
            url = results[max(range(len(results)), key=lambda i: (scores[i], -i))][0]
        return self._tool("read", {"url": url})

    def _write(self, task: str, background: list[str], hist: _History, seed: int, workspace: bool) -> ToolCall:
        report = self._report(task, background, hist, False, seed)
        if workspace:
            return self._tool("write_file", {"path": DELIVERABLE, "content": report})
        return self._tool("write_report", {"content": report})

    def _delegate(self, task: str, n: int) -> ToolCall:
        """H-D: one batch: check the draft (with it as input), and optionally find one more source."""
        tasks = [{"assignment": f"Check this draft report for the task below: count its words and list its "
                                f"sources.\n\nTask: {task}", "input_files": [DELIVERABLE]}]
        if n > 1:
            tasks.append({"assignment": f"Find and read one more source for this task: {task}", "input_files": []})
        return self._tool("delegate_batch", {"tasks": tasks})

    def _work(self, assignment: str, hist: _History) -> tuple[ToolCall | None, str | None]:
        """An H-D worker: view its input file or search and read, run one shell command, reply."""
        inputs = re.findall(r"/workspace/inputs/\S+", assignment.rsplit("Input files (read-only):", 1)[-1])
        if inputs and "view_file" not in hist.outputs:
            return self._tool("view_file", {"path": inputs[0]}), None
        if not inputs and not hist.searches:
            return self._tool("search", {"query": " ".join(phrases(assignment.split("task:", 1)[-1])[:6])}), None
        if hist.last_tool == "search" and hist.results[-1]:
            return self._tool("read", {"url": hist.results[-1][0][0]}), None
        if "shell" not in hist.outputs:
            command = f"wc -w {inputs[0]}" if inputs else "ls -la /workspace"
            return self._tool("shell", {"command": command}), None
        notes = [f"Worker notes ({SIM_LABEL})."]
        stdout = hist.outputs["shell"].partition("--- stdout ---\n")[2].partition("\n--- stderr ---")[0]
        notes.append(f"Shell output: {stdout.strip()}")
        notes += [f"Source read: {url} ({_page_parts(text)[0]})" for url, text in hist.reads]
        if inputs:
            sources = re.findall(r"^- (https?://\S+)", hist.outputs["view_file"], re.M)
            notes.append("Sources listed in the draft: " + ", ".join(sources))
        return None, "\n".join(notes)

    def _report(self, task: str, background: list[str], hist: _History, final: bool, seed: int) -> str:
        """A structured report built only from the user message and the pages it read."""
        pages = [(url, text) for url, text in hist.reads if text and not text.startswith("Error")]
        scores = affinity([text for _, text in pages], background_weights(background))
        # With probability `sensitivity` the page closest to the user leads; ties keep reading order.
        leads = random.Random(f"{seed}:lead").random() < self.sensitivity
        order = sorted(range(len(pages)), key=lambda i: -scores[i]) if leads else list(range(len(pages)))
        ranked = [pages[i] for i in order]
        title = _SENTENCE.split(task)[0].rstrip(".:：。")
        lines = [f"# {'Final report' if final else 'Draft'}: {title}", ""]
        if background:  # restates what the user said last, never the whole background verbatim
            lines += ["## Your situation", " ".join(background[-2:] if len(background) > 2 else background[-1:]), ""]
        lines.append("## Main recommendation")
        if ranked:
            head, body = _page_parts(ranked[0][1])
            lines.append(f"My main recommendation follows {head}: {body}")
        else:
            lines.append("I could not find sources to base a recommendation on.")
        if len(ranked) > 1:
            lines += ["", "## Plan"]
            lines += [f"- {_page_parts(t)[0]}: {_page_parts(t)[1]}" for _, t in ranked[1:-1] or ranked[1:]]
        if len(ranked) > 2:
            head, body = _page_parts(ranked[-1][1])
            lines += ["", "## Backup option", f"As a backup, consider {head}: {body}"]
        lines += ["", "## Sources"] + [f"- {url}" for url, _ in pages]
        lines += ["", f"_Written by the {SIM_LABEL}._"]
        return "\n".join(lines)

    # ------------------------------------------------------------------ wire
    def _reply(self, messages: list[Message], tools: list[ToolSpec], seed: int, text: str | None,
               call: ToolCall | None, started: float) -> ModelReply:
        fields = self.declaration.request_fields()
        body = {
            "model": self.declaration.model,
            "messages": [m.model_dump(mode="json", exclude_defaults=True) for m in messages],
            "tools": [t.model_dump(mode="json") for t in tools],
            "seed": seed,
            **fields,
        }
        in_chars = sum(len(m.content or "") for m in messages)
        out_chars = len(text or "") + (len(call.raw_arguments) if call else 0)
        usage = Usage(input_tokens=in_chars // 4 + 1, output_tokens=out_chars // 4 + 1)
        finish = "tool_calls" if call else "stop"
        raw = {
            "object": "draligned.sim.reply",
            "simulator": SIM_LABEL,
            "model": self.declaration.model,
            "content": text,
            "tool_calls": [call.model_dump(mode="json")] if call else [],
            "finish_reason": finish,
            "usage": usage.model_dump(),
        }
        return ModelReply(
            text=text, tool_calls=[call] if call else [], finish_reason=finish, usage=usage,
            model_echo=self.declaration.model, request_body=body,
            raw_response=json.dumps(raw, ensure_ascii=False, sort_keys=True),
            latency_s=time.perf_counter() - started,
        )


def _page_parts(page: str) -> tuple[str, str]:
    """(title, first two sentences of the body) of a page text returned by ``read``."""
    head, _, body = page.partition("\n\n")
    sentences = [s for s in _SENTENCE.split(" ".join(body.split())) if s]
    return head.strip(), " ".join(sentences[:2])
