"""H00 loop semantics: natural final, budget end, draft versioning, tool caps, malformed replies."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from draligned.archive import Archive
from draligned.archive.writer import RunWriter, new_record
from draligned.executors import Budget, H00Executor, RunSetup
from draligned.harness import load_contract
from draligned.records import DraftEvent, FinalEvent, NoticeEvent, Slot, ToolCall, ToolCallEvent
from draligned.tools.corpus import load_corpus
from tests.scripted import ScriptedModel, call, reply


@pytest.fixture
def corpus(tmp_path: Path):
    """Ten long documents that all match 'kyoto', so caps are exercised."""
    path = tmp_path / "corpus.jsonl"
    with path.open("w") as fh:
        for i in range(10):
            text = f"Kyoto temple guide number {i}. " + ("Gardens and tea houses line the old streets. " * 200)
            fh.write(json.dumps({"id": f"d{i}", "url": f"https://t.example/{i}", "title": f"Kyoto {i}",
                                 "text": text, "lang": "en"}) + "\n")
    return load_corpus(path)


def run(tmp_path: Path, corpus, replies, budget: Budget | None = None):
    archive = Archive(tmp_path / "archive")
    contract = load_contract("H00")
    slot = Slot(study="t", card_id="c", card_sha256="0" * 64, arm="P", model="scripted", model_sha256="1",
                harness="H00", contract_sha256=contract.sha256, search_sha256=corpus.sha256,
                budget=(budget or Budget()).model_dump(), seed=0)
    record = new_record(run_id="rtest", attempt=1, slot_id=slot.slot_id, slot=slot, study_sha256="2" * 64,
                        card_path="c.json", protocol="scripted", requested_model="scripted-1",
                        system_prompt_blob=archive.put_blob("sys"), user_message_blob=archive.put_blob("user"),
                        tools_blob=archive.put_blob("[]"))
    model = ScriptedModel(replies)
    setup = RunSetup(writer=RunWriter(archive, record), contract=contract, model=model,
                     system_prompt="sys", user_message="Plan a Kyoto trip.", seed=0,
                     budget=budget or Budget())
    rec = asyncio.run(H00Executor(setup, corpus).run())
    return rec, model, archive


def events(rec, kind):
    return [e for e in rec.events if isinstance(e, kind)]


def test_text_only_reply_is_natural_final(tmp_path, corpus):
    rec, _, archive = run(tmp_path, corpus, [reply(text="Here is my report.")])
    assert rec.status == "completed"
    (final,) = events(rec, FinalEvent)
    assert final.delivered_by == "text_reply"
    assert archive.get_text(rec.final_blob) == "Here is my report."


def test_submit_report_delivers_separate_final_and_drafts_are_versioned(tmp_path, corpus):
    rec, model, archive = run(tmp_path, corpus, [
        reply(calls=[call("write_report", content="draft one")]),
        reply(calls=[call("write_report", content="draft two")]),
        reply(calls=[call("submit_report", content="the final")]),
    ])
    drafts = events(rec, DraftEvent)
    assert [d.version for d in drafts] == [1, 2]
    assert [archive.get_text(d.blob) for d in drafts] == ["draft one", "draft two"]
    assert archive.get_text(rec.final_blob) == "the final"
    assert events(rec, FinalEvent)[0].delivered_by == "submit_report"
    returns = [archive.get_text(e.return_blob) for e in events(rec, ToolCallEvent)]
    assert returns == ["Draft saved.", "Draft saved.", "Report submitted."]
    assert rec.counters.drafts == 2 and rec.counters.model_calls == 3


def test_budget_end_makes_no_extra_call_and_promotes_no_draft(tmp_path, corpus):
    replies = [reply(calls=[call("write_report", content="a draft")])] + [
        reply(calls=[call("search", query="kyoto")]) for _ in range(5)]
    rec, model, _ = run(tmp_path, corpus, replies, Budget(max_model_calls=3, max_tool_calls=50))
    assert rec.status == "budget_exhausted"
    assert rec.final_blob is None and not events(rec, FinalEvent)
    assert len(model.seen) == 3 and rec.counters.model_calls == 3


def test_tool_budget_stops_mid_reply_and_records_unexecuted_calls(tmp_path, corpus):
    rec, _, _ = run(tmp_path, corpus, [reply(calls=[call("search", "a", query="kyoto"),
                                                     call("search", "b", query="temple")])],
                    Budget(max_model_calls=5, max_tool_calls=1))
    assert rec.status == "budget_exhausted"
    assert len(events(rec, ToolCallEvent)) == 1
    codes = [n.code for n in events(rec, NoticeEvent)]
    assert codes == ["multiple_tool_calls_in_order", "tool_call_not_executed"]


def test_search_and_read_caps(tmp_path, corpus):
    rec, model, archive = run(tmp_path, corpus, [
        reply(calls=[call("search", query="kyoto temple")]),
        reply(calls=[call("read", url="https://t.example/3")]),
        reply(text="done"),
    ])
    search, read = events(rec, ToolCallEvent)
    results = archive.get_text(search.return_blob).split("\n\n")
    assert len(results) == 6
    for block in results:
        snippet = block.split("Snippet: ", 1)[1]
        assert len(snippet) == 400
    page = archive.get_text(read.return_blob)
    assert len(page) == 6000 and page.startswith("Kyoto 3")
    assert search.request_text == "kyoto temple" and read.request_text == "https://t.example/3"
    # the agent saw exactly the archived returns, in order
    tool_msgs = [m.content for m in model.seen[-1] if m.role == "tool"]
    assert tool_msgs == [archive.get_text(search.return_blob), page]


def test_malformed_arguments_return_a_tool_error_and_the_run_continues(tmp_path, corpus):
    bad = ToolCall(id="x", name="search", arguments=None, raw_arguments='{}""', parse_error="extra data")
    rec, model, archive = run(tmp_path, corpus, [reply(calls=[bad]), reply(text="final text")])
    (ev,) = events(rec, ToolCallEvent)
    assert ev.error == "malformed_arguments"
    assert archive.get_text(ev.arguments_blob) == '{}""'
    assert "not a valid JSON object" in archive.get_text(ev.return_blob)
    assert rec.status == "completed"


def test_schema_violation_and_unknown_tool_are_tool_errors(tmp_path, corpus):
    rec, _, _ = run(tmp_path, corpus, [
        reply(calls=[call("search", q="wrong field")]),
        reply(calls=[call("delete_everything")]),
        reply(text="ok"),
    ])
    assert [e.error for e in events(rec, ToolCallEvent)] == ["invalid_arguments", "unknown_tool"]


@pytest.mark.parametrize("bad, reason", [
    (reply(text="cut off", finish="length"), "truncated"),
    (reply(text=None, finish="stop"), "empty reply"),
    (reply(text=None, finish="tool_calls"), "dropped tool call"),
    (reply(text=None, refusal="I can't help with that"), "refusal"),
])
def test_incomplete_replies_fail_and_are_never_a_final(tmp_path, corpus, bad, reason):
    rec, _, _ = run(tmp_path, corpus, [reply(calls=[call("write_report", content="draft")]), bad])
    assert rec.status == "failed" and reason in rec.status_reason
    assert rec.final_blob is None


def test_calls_after_submit_are_not_executed(tmp_path, corpus):
    rec, _, _ = run(tmp_path, corpus, [reply(calls=[call("submit_report", "a", content="f"),
                                                     call("write_report", "b", content="late")])])
    assert rec.status == "completed" and rec.counters.drafts == 0
    assert events(rec, NoticeEvent)[-1].code == "tool_call_not_executed"
