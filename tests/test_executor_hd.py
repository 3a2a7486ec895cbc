"""H-D conformance: worker isolation (assignment and selected files only, no siblings, no root
history, no submit or delegate), verbatim replies, linked transcripts, and one shared ledger."""

from __future__ import annotations

import json

import pytest

from draligned.executors import Budget
from draligned.harness import load_contract
from draligned.records import DelegateEvent, FinalEvent, ModelCallEvent, SnapshotEvent, ToolCallEvent, Usage
from tests.harness_helpers import USER, needs_bwrap, of_type, returns, run_harness
from tests.scripted import ScriptedModel, call, reply

pytestmark = needs_bwrap

TASKS = [{"assignment": "task one", "input_files": ["notes.md"]}, {"assignment": "task two", "input_files": []}]


@pytest.fixture
def isolation_run(tmp_path):
    model = ScriptedModel([
        reply(calls=[call("write_file", "r1", path="secret.md", content="ROOT-SECRET-UNSELECTED")]),
        reply(calls=[call("write_file", "r2", path="notes.md", content="selected notes")]),
        reply(calls=[call("delegate_batch", "r3", tasks=TASKS)]),
        # worker-1
        reply(calls=[call("write_file", "a1", path="scratch.txt", content="SIBLING-SCRATCH")]),
        reply(calls=[call("shell", "a2", command="cat /workspace/inputs/notes.md; cat /workspace/secret.md; "
                                                 "ls -R /workspace; echo x > /workspace/inputs/notes.md")]),
        reply(calls=[call("view_file", "a3", path="secret.md")]),
        reply(calls=[call("write_file", "a4", path="inputs/notes.md", content="changed")]),
        reply(calls=[call("submit_file", "a5", path="scratch.txt")]),
        reply(calls=[call("delegate_batch", "a6", tasks=TASKS)]),
        reply(text="worker one reply"),
        # worker-2
        reply(calls=[call("shell", "b1", command="ls -laR /workspace /tmp; cat /workspace/scratch.txt")]),
        reply(text="worker two reply"),
        # root
        reply(calls=[call("submit_file", "r4", path="notes.md")]),
    ])
    rec, archive = run_harness(tmp_path, "H-D", model)
    return rec, archive, model


def test_worker_sees_only_its_assignment_and_selected_files(isolation_run):
    rec, archive, _ = isolation_run
    w1 = returns(rec, archive, role="worker-1")
    assert "selected notes" in w1[1] and "ROOT-SECRET" not in "".join(w1)
    assert "secret.md: No such file" in w1[1] and "Read-only file system" in w1[1]
    errors = [e.error for e in of_type(rec, ToolCallEvent, "worker-1")]
    assert errors == [None, None, "refused", "refused", "unknown_tool", "unknown_tool"]
    assert "read-only input snapshot" in w1[3]
    (w2_shell,) = returns(rec, archive, "shell", "worker-2")
    assert "SIBLING-SCRATCH" not in w2_shell and "notes.md" not in w2_shell
    assert "scratch.txt: No such file" in w2_shell and w2_shell.count("scratch.txt") == 1


def test_workers_get_no_root_history(isolation_run):
    _, _, model = isolation_run
    worker_prompt = load_contract("H-D").contract.role("worker").system_prompt
    worker_calls = model.seen[3:12]
    assert len(worker_calls) == 9
    for messages in worker_calls:
        assert messages[0].content == worker_prompt
        assert messages[1].content.startswith(("task one", "task two"))
        text = json.dumps([m.model_dump(mode="json") for m in messages])
        assert USER.splitlines()[0] not in text and "ROOT-SECRET" not in text and "r1" not in text
    assert model.seen[10][1].content == "task two\n\nInput files (read-only): none"


def test_replies_return_verbatim_and_transcripts_are_linked(isolation_run):
    rec, archive, _ = isolation_run
    delegate_call = next(e for e in of_type(rec, ToolCallEvent, "executor") if e.tool == "delegate_batch")
    assert archive.get_text(delegate_call.return_blob) == (
        "=== worker 1 of 2 (completed) ===\nworker one reply\n=== end of worker 1 ===\n\n"
        "=== worker 2 of 2 (completed) ===\nworker two reply\n=== end of worker 2 ===")
    (ev,) = of_type(rec, DelegateEvent)
    assert ev.tool_event == delegate_call.event_id
    assert [w.worker for w in ev.workers] == ["worker-1", "worker-2"]
    assert ev.workers[0].input_files == ["notes.md"]
    for w, n_calls in zip(ev.workers, (7, 2), strict=True):
        transcript = json.loads(archive.get_text(w.transcript_blob))
        assert transcript[-1] == {"role": "assistant", "content": archive.get_text(w.reply_blob), "tool_calls": [],
                                  "tool_call_id": None, "name": None}
        assert len(of_type(rec, ModelCallEvent, w.worker)) == n_calls
        assert len(of_type(rec, SnapshotEvent, w.worker)) == len(of_type(rec, ToolCallEvent, w.worker))
    assert {k for _, k in rec.blob_refs()} >= {"worker_transcript", "worker_reply", "worker_assignment"}
    (final,) = of_type(rec, FinalEvent)  # worker replies are not finals
    assert archive.get_text(rec.final_blob) == "selected notes" and final.delivered_by == "submit_file"


def test_budget_spent_by_workers_stops_the_root(tmp_path):
    model = ScriptedModel([
        reply(calls=[call("write_file", "r0", path="deliverable.md", content="a draft")]),
        reply(calls=[call("write_file", "r1", path="notes.md", content="notes")]),
        reply(calls=[call("delegate_batch", "r2", tasks=TASKS)]),
        reply(calls=[call("search", "a1", query="kyoto")]),
        reply(calls=[call("search", "a2", query="temple")]),
        reply(calls=[call("search", "a3", query="garden")]),
        reply(text="root would deliver this if it were asked again"),
    ])
    rec, _ = run_harness(tmp_path, "H-D", model, Budget(max_model_calls=20, max_tool_calls=4))
    assert rec.status == "budget_exhausted" and "delegated workers" in rec.status_reason
    assert rec.final_blob is None and not of_type(rec, FinalEvent)  # no draft promoted
    assert rec.counters.drafts == 1
    assert len(model.seen) == 6 and len(model.replies) == 1  # the root made no further call
    (ev,) = of_type(rec, DelegateEvent)
    assert [w.status for w in ev.workers] == ["budget_exhausted"]  # the second worker never started


def test_tokens_spent_by_workers_stop_the_root_and_wall_time_is_on_the_ledger(tmp_path):
    heavy = Usage(input_tokens=150, output_tokens=50)
    model = ScriptedModel([
        reply(calls=[call("write_file", "r1", path="notes.md", content="notes")]),
        reply(calls=[call("delegate_batch", "r2", tasks=TASKS)]),
        reply(calls=[call("search", "a1", query="kyoto")]).model_copy(update={"usage": heavy}),
        reply(text="never sent"),
    ])
    rec, _ = run_harness(tmp_path, "H-D", model, Budget(max_tokens=100))
    (ev,) = of_type(rec, DelegateEvent)
    assert [(w.status, w.status_reason) for w in ev.workers] == [("budget_exhausted", "token budget spent")]
    assert rec.status == "budget_exhausted" and len(model.seen) == 3 and rec.final_blob is None
    (tmp_path / "wall").mkdir()
    rec, _ = run_harness(tmp_path / "wall", "H-W", ScriptedModel([reply(text="never sent")]), Budget(max_wall_s=0))
    assert (rec.status, rec.status_reason, rec.counters.model_calls) == (
        "budget_exhausted", "wall-time budget spent", 0)
    assert Budget().model_dump() == {"max_model_calls": 30, "max_tool_calls": 60}  # unset limits keep slot ids
