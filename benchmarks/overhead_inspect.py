"""inspect_ai's side of ``benchmarks/overhead.py``: the same workload shape through inspect_ai 0.3.285.

A Task of ``runs`` samples, each solved by ``use_tools`` + ``generate`` (inspect's tool loop) against a
scripted in-process model registered with ``@modelapi``: 4 tool calls (search, read, write_report,
search), then a text-only final, at zero latency. Tools return fixed texts of about the size draligned's
corpus search returns. Two logging settings: inspect's default (the full ``.eval`` log with every sample,
event and message) and minimised (``log_samples=False``: only the header and results are written).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessage, GenerateConfig, ModelAPI, ModelOutput, modelapi
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import Tool, ToolChoice, ToolInfo, tool

SEARCH_RESULT = "\n\n".join(f"[{i}] Kansai on a budget, part {i}\nhttps://budget.example/{i}\n" + "snippet " * 60
                            for i in range(6))
PAGE = "A week in Kansai on 6,000 yuan for two. " * 100

STAMPS: list[float] = []
"""perf_counter at every scripted model call (the harness-time window)."""
CPU: list[float] = []
"""process_time at the first and the last expected model call (a syscall: not taken at every call)."""
EXPECTED_CALLS = [0]


class ScriptedInspect(ModelAPI):
    """The benchmark script (4 tool calls, then a final), answered from the number of assistant turns."""

    def __init__(self, model_name: str, base_url: str | None = None, api_key: str | None = None,
                 config: GenerateConfig = GenerateConfig(), **model_args: Any) -> None:  # noqa: B008 - inspect's own default
        super().__init__(model_name, base_url, api_key, [], config)

    async def generate(self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice,
                       config: GenerateConfig) -> ModelOutput:
        STAMPS.append(time.perf_counter())
        if len(STAMPS) in (1, EXPECTED_CALLS[0]):
            CPU.append(time.process_time())
        turn = sum(m.role == "assistant" for m in input)
        script: list[tuple[str, dict[str, str]]] = [
            ("search", {"query": "japan budget trip for two"}), ("read", {"url": "https://budget.example/0"}),
            ("write_report", {"text": "Draft: Kansai for a week on the budget."}),
            ("search", {"query": "kyoto cheap hotels"})]
        if turn < len(script):
            name, args = script[turn]
            return ModelOutput.for_tool_call(self.model_name, name, args, tool_call_id=f"call_{turn}")
        return ModelOutput.from_content(self.model_name,
                                        "Final report: a week in Kansai (Osaka, Kyoto, Nara) fits the budget.")


@modelapi(name="benchscripted")
def benchscripted() -> type[ModelAPI]:
    return ScriptedInspect


@tool
def search() -> Tool:
    async def execute(query: str) -> str:
        """Search the web.

        Args:
            query: The search query.
        """
        return SEARCH_RESULT
    return execute


@tool
def read() -> Tool:
    async def execute(url: str) -> str:
        """Read a page.

        Args:
            url: The page URL.
        """
        return PAGE
    return execute


@tool
def write_report() -> Tool:
    async def execute(text: str) -> str:
        """Save a draft of the report.

        Args:
            text: The draft.
        """
        return "Draft saved."
    return execute


def run_inspect(runs: int, log_dir: Path, minimised: bool, concurrency: int) -> tuple[float, int]:
    """Run the task; (wall seconds of ``eval``, model calls made)."""
    task = Task(dataset=[Sample(input="Plan a week in Japan for two on 6,000 yuan.", id=i) for i in range(runs)],
                solver=[use_tools([search(), read(), write_report()]), generate()])
    STAMPS.clear()
    CPU.clear()
    EXPECTED_CALLS[0] = 5 * runs
    t0 = time.perf_counter()
    logs = eval(task, model="benchscripted/bench-1", log_dir=str(log_dir), display="none", max_samples=concurrency,
                log_samples=not minimised, score=False, log_level="error")
    wall = time.perf_counter() - t0
    if logs[0].status != "success":
        raise SystemExit(f"inspect eval ended {logs[0].status}: {logs[0].error}")
    return wall, len(STAMPS)
