"""Run the H-W / H-D executors on scripted replies, and the marker for tests that need bubblewrap."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from draligned.archive import Archive
from draligned.archive.writer import RunWriter, new_record
from draligned.executors import Budget, RunSetup, executor_for
from draligned.harness import load_contract
from draligned.records import Event, RunRecord, Slot, ToolCallEvent
from draligned.tools.corpus import Corpus, load_corpus

#: Sandbox tests are skipped only when bubblewrap is not installed.
needs_bwrap = [pytest.mark.sandbox,
               pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")]

USER = "I live in Kyoto.\n\nPlan a Kyoto trip."


def small_corpus(tmp: Path) -> Corpus:
    """Three short pages about Kyoto."""
    path = tmp / "corpus.jsonl"
    path.write_text("".join(json.dumps({"id": f"d{i}", "url": f"https://t.example/{i}", "title": f"Kyoto {i}",
                                        "text": f"Kyoto temple guide number {i}.", "lang": "en"}) + "\n"
                            for i in range(3)))
    return load_corpus(path)


def run_harness(tmp: Path, harness: str, model, budget: Budget | None = None, run_id: str = "rtest",
                arm: str = "P", study: str = "t", archive_dir: str = "archive") -> tuple[RunRecord, Archive]:
    """One run of ``harness`` with ``model`` (a ScriptedModel) over a small corpus."""
    archive = Archive(tmp / archive_dir)
    contract = load_contract(harness)
    corpus = small_corpus(tmp)
    budget = budget or Budget()
    slot = Slot(study=study, card_id="c", card_sha256="0" * 64, arm=arm, model="scripted", model_sha256="1",
                harness=harness, contract_sha256=contract.sha256, search_sha256=corpus.sha256,
                budget=budget.model_dump(), seed=0)
    record = new_record(run_id=run_id, attempt=1, slot_id=slot.slot_id, slot=slot, study_sha256="2" * 64,
                        card_path="c.json", protocol="scripted", requested_model="scripted-1",
                        system_prompt_blob=archive.put_blob(contract.contract.system_prompt),
                        user_message_blob=archive.put_blob(USER), tools_blob=archive.put_blob("[]"))
    setup = RunSetup(writer=RunWriter(archive, record), contract=contract, model=model,
                     system_prompt=contract.contract.system_prompt, user_message=USER, seed=0,
                     budget=budget)
    return asyncio.run(executor_for(harness)(setup, corpus).run()), archive


def of_type(rec: RunRecord, kind: type, role: str | None = None) -> list[Event]:
    """Events of one type, optionally of one role."""
    return [e for e in rec.events if isinstance(e, kind) and (role is None or getattr(e, "role", None) == role)]


def returns(rec: RunRecord, archive: Archive, tool: str | None = None, role: str | None = None) -> list[str]:
    """Tool return texts in order (optionally of one tool / role)."""
    return [archive.get_text(e.return_blob) for e in of_type(rec, ToolCallEvent, role)
            if tool is None or e.tool == tool]
