"""Issue 3 as its checker sees it: a study whose openai-chat, openai-responses and anthropic
models point at loopback servers written separately from the provider code and from
``tests/fake_providers.py`` (``tests/loopback_wire.py``). Runs complete or fail with the right
recorded reason, every attempt is an event, the key is in no archived file nor in any
message, and a read-only replay sends no request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from draligned.archive import Archive
from draligned.cli import main
from draligned.hashing import canonical_json
from draligned.records import (
    ModelAttemptEvent,
    ModelCallEvent,
    NoticeEvent,
    ToolCallEvent,
)
from tests.conftest import REPO
from tests.loopback_wire import ECHO, WireServer

KEY = "sk-independent-checker-7f3a9c-SECRET"
PROTOCOLS = ("openai-chat", "openai-responses", "anthropic")


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("INDEPENDENT_KEY", KEY)
    return KEY


def study_file(tmp: Path, servers: dict[str, WireServer], extra: str = "", model_extra: str = "") -> Path:
    models = "".join(f"""
[[models]]
name = "m-{proto}"
protocol = "{proto}"
model = "requested-{proto}"
base_url = "{server.base_url}"
api_key_env = "INDEPENDENT_KEY"
{model_extra}
""" for proto, server in servers.items())
    path = tmp / "independent.toml"
    path.write_text(f"""name = "independent"
cards = ["{REPO / 'factor_cards' / 'travel_budget_en.json'}"]
seeds = 1
archive = "archive"
corpus = "{REPO / 'corpora' / 'demo' / 'corpus.jsonl'}"
{extra}
{models}""")
    return path


def assert_key_nowhere(tmp: Path, *texts: str) -> None:
    for path in (tmp / "archive").rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    for text in texts:
        assert KEY not in text


@pytest.mark.slow
def test_faults_malformed_and_split_replies_complete_on_all_three_protocols(tmp_path, capsys):
    turns = ["malformed", "split", "two"]
    servers = {p: WireServer(p, turns, {0: (429, {"retry-after": "3"}), 1: (500, {})}) for p in PROTOCOLS}
    for s in servers.values():
        s.__enter__()
    try:
        study = study_file(tmp_path, servers, 'cache = "read-write"')
        assert main(["run", str(study)]) == 0
        out = capsys.readouterr()
        archive = Archive(tmp_path / "archive")
        records = archive.records()
        assert len(records) == 6 and {r.status for r in records} == {"completed"}
        for proto, server in servers.items():
            runs = [r for r in records if r.protocol == proto]
            attempts = [e.attempt for r in runs for e in r.events if isinstance(e, ModelAttemptEvent)]
            assert sorted(a.status_code for a in attempts) == [429, 500]
            assert next(a for a in attempts if a.status_code == 429).wait_s >= 3.0  # Retry-After honoured
            assert len(server.log) == 2 * 3 + 2  # two runs of three calls, plus the two failed attempts
            for r in runs:
                assert r.requested_model == f"requested-{proto}"
                calls = [e for e in r.events if isinstance(e, ModelCallEvent)]
                assert {c.model_echo for c in calls} == {ECHO}
                tools = [e for e in r.events if isinstance(e, ToolCallEvent)]
                # malformed arguments reach the agent as a tool error; the split call is merged back
                assert [(t.tool, t.error) for t in tools] == [
                    ("search", "malformed_arguments"), ("search", None),
                    ("write_report", None), ("submit_report", None)]
                assert tools[1].request_text == "travel budget"
                assert any(e.code == "multiple_tool_calls_in_order" for e in r.events
                           if isinstance(e, NoticeEvent))
                assert archive.get_text(r.final_blob) == "Independent final report."
                assert r.counters.usage.reasoning_tokens == (0 if proto == "anthropic" else 15)
                assert r.counters.usage.cached_tokens == 30
            # the key went out on every request
            assert all(KEY in (e["headers"].get("authorization", "") + e["headers"].get("x-api-key", ""))
                       for e in server.log)
        assert_key_nowhere(tmp_path, out.out, out.err)

        before = {p: len(s.log) for p, s in servers.items()}
        code = main(["run", str(study), "--archive", str(tmp_path / "replay"), "--cache", "read-only",
                     "--cache-dir", str(tmp_path / "archive" / "cache")])
        assert code == 0
        assert {p: len(s.log) for p, s in servers.items()} == before
    finally:
        for s in servers.values():
            s.__exit__()
    replayed = Archive(tmp_path / "replay").records()
    assert sorted(r.final_blob for r in replayed) == sorted(r.final_blob for r in records)
    assert all(e.cache_hit for r in replayed for e in r.events if isinstance(e, ModelCallEvent))


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_a_call_repeated_under_its_id_with_the_arguments_runs_once(tmp_path, proto):
    with WireServer(proto, ["split_ids", "submit"]) as server:
        study = study_file(tmp_path, {proto: server}, 'arms = ["P"]')
        assert main(["run", str(study)]) == 0
        sent_back = json.dumps(server.log[1]["body"])
    (rec,) = Archive(tmp_path / "archive").records()
    tools = [e for e in rec.events if isinstance(e, ToolCallEvent)]
    assert [(t.tool, t.error) for t in tools] == [("search", None), ("submit_report", None)]
    assert tools[0].request_text == "travel budget"
    first = next(e for e in rec.events if isinstance(e, ModelCallEvent))
    assert first.n_tool_calls == 1 and any("split tool call" in a for a in first.anomalies)
    assert sent_back.count('"call_0"') == 2  # the call and its one result, not two calls


@pytest.mark.parametrize(("proto", "turns", "reason"), [
    # the responses API declares no tool-call finish, so a dropped call cannot be told from a text final
    *((p, ["dropped"], "dropped tool call") for p in ("openai-chat", "anthropic")),
    *((p, ["length"], "truncated") for p in PROTOCOLS),
    *((p, ["empty"], "empty reply") for p in PROTOCOLS),
    *((p, ["malformed", "refusal"], "refusal") for p in PROTOCOLS),
])
def test_broken_replies_fail_the_run_with_their_reason(tmp_path, proto, turns, reason):
    with WireServer(proto, turns) as server:
        study = study_file(tmp_path, {proto: server}, 'arms = ["P"]')
        assert main(["run", str(study)]) == 1
    (rec,) = Archive(tmp_path / "archive").records()
    assert rec.status == "failed" and rec.status_reason.startswith(reason), rec.status_reason
    assert rec.final_blob is None


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_persistent_5xx_gives_up_with_every_attempt_recorded(tmp_path, proto, capsys):
    with WireServer(proto, ["submit"], always=(503, {})) as server:
        study = study_file(tmp_path, {proto: server}, 'arms = ["P"]',
                           model_extra="retry = { max_attempts = 3, initial_wait_s = 0.01 }")
        assert main(["run", str(study)]) == 1
        assert len(server.log) == 3
    out = capsys.readouterr()
    (rec,) = Archive(tmp_path / "archive").records()
    assert rec.status == "failed"
    assert "HTTP 503" in rec.status_reason and "gave up after 3 attempt(s)" in rec.status_reason
    assert f"m-{proto}" in rec.status_reason
    attempts = [e.attempt for e in rec.events if isinstance(e, ModelAttemptEvent)]
    assert [(a.attempt, a.status_code) for a in attempts] == [(1, 503), (2, 503), (3, 503)]
    assert_key_nowhere(tmp_path, out.out, out.err)


@pytest.mark.parametrize("proto", PROTOCOLS)
@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_client_errors_fail_fast_naming_the_model_never_the_key(tmp_path, proto, status, capsys):
    with WireServer(proto, ["submit"], always=(status, {})) as server:
        study = study_file(tmp_path, {proto: server}, 'arms = ["P"]')
        assert main(["run", str(study)]) == 1
        assert len(server.log) == 1
    out = capsys.readouterr()
    (rec,) = Archive(tmp_path / "archive").records()
    assert rec.status == "failed" and f"HTTP {status}" in rec.status_reason
    assert "failed fast" in rec.status_reason and f"m-{proto}" in rec.status_reason
    assert "[redacted]" in rec.status_reason  # the server quoted the key back; it was removed
    assert_key_nowhere(tmp_path, out.out, out.err)


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_a_hang_up_and_a_proxy_error_page_are_retried(tmp_path, proto):
    with WireServer(proto, ["submit"], {0: (-1, {}), 1: (502, {})}) as server:
        study = study_file(tmp_path, {proto: server}, 'arms = ["P"]')
        assert main(["run", str(study)]) == 0
        assert len(server.log) == 3
    (rec,) = Archive(tmp_path / "archive").records()
    assert rec.status == "completed"
    attempts = [e.attempt for e in rec.events if isinstance(e, ModelAttemptEvent)]
    assert [(a.attempt, a.status_code) for a in attempts] == [(1, None), (2, 502)]
    assert "Connection" in attempts[0].error


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_a_stalled_attempt_times_out_and_is_retried(tmp_path, proto):
    with WireServer(proto, ["submit"], {0: (0, {"seconds": "0.8"})}) as server:
        study = study_file(tmp_path, {proto: server}, 'arms = ["P"]',
                           model_extra="retry = { timeout_s = 0.2, initial_wait_s = 0.01 }")
        assert main(["run", str(study)]) == 0
        assert len(server.log) == 2
    (rec,) = Archive(tmp_path / "archive").records()
    assert rec.status == "completed"
    (attempt,) = [e.attempt for e in rec.events if isinstance(e, ModelAttemptEvent)]
    assert attempt.status_code is None and "Timeout" in attempt.error


@pytest.mark.parametrize(("proto", "fields", "expected"), [
    ("openai-chat", 'request = { reasoning_effort = "none", thinking = { type = "disabled" } }\nomit = ["temperature"]',
     {"reasoning_effort": "none", "thinking": {"type": "disabled"}, "max_completion_tokens": 16000,
      "parallel_tool_calls": False}),
    ("openai-responses", 'request = { reasoning = { effort = "none" } }',
     {"reasoning": {"effort": "none"}, "temperature": 1.0, "max_output_tokens": 16000,
      "parallel_tool_calls": False, "store": False, "include": ["reasoning.encrypted_content"]}),
    ("anthropic", 'request = { thinking = { type = "disabled" } }\nomit = ["temperature"]',
     {"thinking": {"type": "disabled"}, "max_tokens": 16000,
      "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}),
])
def test_declared_fields_are_sent_exactly_and_the_body_as_sent_is_archived(tmp_path, proto, fields, expected):
    with WireServer(proto, ["submit"]) as server:
        study = study_file(tmp_path, {proto: server}, 'arms = ["P"]', model_extra=fields)
        assert main(["run", str(study)]) == 0
        (sent,) = [e["body"] for e in server.log]
    context = {"messages", "tools", "input", "system", "model"}
    assert {k: v for k, v in sent.items() if k not in context} == expected
    assert sent["model"] == f"requested-{proto}"
    archive = Archive(tmp_path / "archive")
    (rec,) = archive.records()
    (call,) = [e for e in rec.events if isinstance(e, ModelCallEvent)]
    assert json.loads(archive.get_text(call.request_blob)) == sent


@pytest.mark.parametrize("proto", ["openai-chat", "openai-responses", "anthropic"])
def test_the_archived_body_is_the_wire_body_byte_for_byte(tmp_path, proto):
    """Every call of a growing context (a search, then submit): the bytes on the wire are the SDK's compact JSON of
    the archived body, and the archived blob is exactly the canonical JSON of those bytes."""
    with WireServer(proto, ["split", "submit"]) as server:
        study = study_file(tmp_path, {proto: server}, 'arms = ["P"]')
        assert main(["run", str(study)]) == 0
    archive = Archive(tmp_path / "archive")
    (rec,) = archive.records()
    calls = [e for e in rec.events if isinstance(e, ModelCallEvent)]
    assert len(calls) == len(server.log) == 2
    for call, sent in zip(calls, server.log, strict=True):
        blob = archive.get_blob(call.request_blob)
        compact = json.dumps(json.loads(sent["raw"]), ensure_ascii=False, separators=(",", ":")).encode()
        assert sent["raw"] == compact  # the SDK's own serialisation: compact separators, UTF-8
        assert canonical_json(json.loads(sent["raw"])) == blob
        assert sent["headers"]["content-type"] == "application/json"


@pytest.mark.parametrize("proto", ("openai-chat", "openai-responses"))
def test_reported_reasoning_tokens_violate_require_zero_reasoning_tokens(tmp_path, proto):
    with WireServer(proto, ["submit"]) as server:  # every reply reports 5 reasoning tokens
        study = study_file(tmp_path, {proto: server}, 'arms = ["P"]',
                           model_extra="checks = { require_zero_reasoning_tokens = true }")
        assert main(["run", str(study)]) == 1
    (rec,) = Archive(tmp_path / "archive").records()
    assert rec.status == "failed" and "require_zero_reasoning_tokens" in rec.status_reason
    assert rec.final_blob is None
