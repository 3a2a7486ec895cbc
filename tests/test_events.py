"""Run events: every event type lists its own blobs and index columns, and the index rows stay as they were."""

from __future__ import annotations

import typing

import pytest

from draligned.archive import Archive
from draligned.archive.runs import event_rows, run_tables
from draligned.records import (
    Acquisition,
    DelegateEvent,
    DraftEvent,
    Event,
    FetchAttemptEvent,
    FinalEvent,
    ModelAttempt,
    ModelAttemptEvent,
    ModelCallEvent,
    NoticeEvent,
    PoolRoundEvent,
    RunEvent,
    RunRecord,
    Slot,
    SnapshotEvent,
    ToolCallEvent,
    Usage,
    WorkerRun,
)

EVENT_TYPES = typing.get_args(typing.get_args(Event)[0])


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
def test_every_event_type_defines_its_blob_refs_and_index_columns(cls: type[RunEvent]):
    assert issubclass(cls, RunEvent)
    missing = [m for m in ("blob_refs", "index_columns") if m not in vars(cls)]
    assert not missing, f"{cls.__name__} inherits {missing} from RunEvent instead of defining them"


def test_the_rows_below_cover_every_event_type_of_the_union():
    assert set(EVENT_TYPES) == {type(e) for e, _ in ONE_OF_EACH}


U = Usage(input_tokens=11, output_tokens=7, reasoning_tokens=3, cached_tokens=2)
ONE_OF_EACH: list[tuple[Event, tuple]] = [  # (event, its expected events row after run_id, seq, event_id, type)
    (ModelAttemptEvent(event_id="e0001", attempt=ModelAttempt(attempt=1, error="RateLimitError", detail="429")),
     ("executor", None, None, None, None, None, "429", "RateLimitError", None, None, None, None, None, None)),
    (ModelCallEvent(event_id="e0002", role="worker-1", request_blob="rq", response_blob="rs", request_fields={},
                    model_echo="m-1", finish_reason="tool_calls", usage=U, latency_s=0.5, n_tool_calls=1),
     ("worker-1", None, None, "rs", None, None, None, None, "m-1", "tool_calls", 11, 7, 3, 0.5)),
    (ToolCallEvent(event_id="e0003", call_id="c1", tool="search", request_text="kyoto", arguments_blob="ar",
                   return_blob="rt", return_chars=42, error="bad"),
     ("executor", "search", "kyoto", "rt", 42, None, "bad", None, None, None, None, None, None, None)),
    (DraftEvent(event_id="e0004", version=2, blob="dr", chars=9, tool_event="e0003"),
     (None, None, None, "dr", 9, 2, None, None, None, None, None, None, None, None)),
    (FinalEvent(event_id="e0005", blob="fi", chars=5, delivered_by="text_reply"),
     (None, None, None, "fi", 5, None, None, "text_reply", None, None, None, None, None, None)),
    (NoticeEvent(event_id="e0006", code="tool_call_not_executed", detail="d"),
     (None, None, None, None, None, None, None, "tool_call_not_executed", None, None, None, None, None, None)),
    (SnapshotEvent(event_id="e0007", role="worker-2", tool_event="e0003", manifest_blob="mf",
                   changed={"a.txt": "wa", "gone.txt": None}),
     ("worker-2", None, None, "mf", None, None, None, None, None, None, None, None, None, None)),
    (DelegateEvent(event_id="e0008", tool_event="e0003", workers=[
        WorkerRun(worker="worker-1", assignment_blob="as1", input_files=[], status="completed",
                  reply_blob="re1", transcript_blob="tr1"),
        WorkerRun(worker="worker-2", assignment_blob="as2", input_files=[], status="failed", transcript_blob="tr2")]),
     (None,) * 14),
    (PoolRoundEvent(event_id="e0009", round=1, query="q", pool_blob="po", budget=3, wish_stop=False, stop_prob=0.0,
                    probs_blob="pr", chosen="d1", p_chosen=0.5, u_select=0.2),
     (None, None, "q", "pr", None, None, None, None, None, None, None, None, None, None)),
    (PoolRoundEvent(event_id="e0010", round=2, query="q2", pool_blob="po", budget=3, wish_stop=True, stop_prob=0.75,
                    u_stop=0.1),
     (None, None, "q2", None, None, None, None, None, None, None, None, None, None, None)),
    (FetchAttemptEvent(event_id="e0011", tool="search", attempt=ModelAttempt(attempt=1, error="rate_limited",
                                                                              status_code=429, detail="HTTP 429")),
     ("executor", "search", None, None, None, None, "HTTP 429", "rate_limited", None, None, None, None, None, None)),
    (ToolCallEvent(event_id="e0012", call_id="c2", tool="read", request_text="https://a.example/", arguments_blob="ar",
                   return_blob="rt2", return_chars=7, acquisition=Acquisition(
                       store_key="k", live=True, provider="http", endpoint="https://a.example/",
                       fetched_at="t", raw_blob="wb", entry_blob="we")),
     ("executor", "read", "https://a.example/", "rt2", 7, None, None, None, None, None, None, None, None, None)),
]

BLOBS = [("st", "study"), ("ca", "card"), ("co", "contract"), ("sp", "system_prompt"), ("um", "user_message"),
         ("to", "tools"), ("rq", "model_request"), ("rs", "model_response"), ("ar", "tool_arguments"),
         ("rt", "tool_return"), ("dr", "draft"), ("fi", "final"), ("mf", "snapshot_manifest"),
         ("wa", "workspace_file"), ("as1", "worker_assignment"), ("tr1", "worker_transcript"),
         ("re1", "worker_reply"), ("as2", "worker_assignment"), ("tr2", "worker_transcript"), ("po", "pool"),
         ("pr", "pool_probs"), ("po", "pool"), ("ar", "tool_arguments"), ("rt2", "tool_return"),
         ("wb", "acquisition_body"), ("we", "acquisition_entry")]


def test_a_tool_event_without_acquisition_serialises_as_before_web_acquisition():
    ev = ToolCallEvent(event_id="e0001", call_id="c", tool="search", arguments_blob="a", return_blob="r",
                       return_chars=1)
    assert "acquisition" not in ev.model_dump(mode="json")
    assert ToolCallEvent.model_validate(ev.model_dump(mode="json")) == ev
    web = ev.model_copy(update={"acquisition": Acquisition(store_key="k", live=False, provider="tavily",
                                                           endpoint="e")})
    assert ToolCallEvent.model_validate(web.model_dump(mode="json")) == web


def _record() -> RunRecord:
    slot = Slot(study="s", card_id="c", card_sha256="ca", arm="P", model="m", model_sha256="x", harness="H-D",
                contract_sha256="co", search_sha256="se", budget={}, seed=0)
    return RunRecord(run_id="r1", attempt=1, slot_id=slot.slot_id, slot=slot, study_sha256="st", card_path="c.json",
                     protocol="sim", requested_model="m", system_prompt_blob="sp", user_message_blob="um",
                     tools_blob="to", status="completed", started_at="t", events=[e for e, _ in ONE_OF_EACH])


def test_events_rows_and_blob_refs_are_the_ones_each_event_type_gives():
    record = _record()
    assert event_rows(record) == [("r1", seq, ev.event_id, ev.type, *row)
                                  for seq, (ev, row) in enumerate(ONE_OF_EACH)]
    assert record.blob_refs() == BLOBS


def test_artifacts_rows_are_the_distinct_blob_refs_with_their_sizes(tmp_path):
    archive = Archive(tmp_path)
    sha = archive.put_blob("a draft")
    record = _record()
    record.events.append(DraftEvent(event_id="e0013", version=3, blob=sha, chars=7, tool_event="e0003"))
    (batch,) = run_tables(archive, [[record]])  # one batch of records, one batch of rows
    rows = batch["artifacts"]
    assert rows == sorted({(s, kind, "r1", None) for s, kind in BLOBS} | {(sha, "draft", "r1", 7)})
