"""Provider quirks through the real SDKs and the H00 loop: malformed arguments, split replies,
dropped tool calls, truncation, refusal, checks, fail-fast and bounded retries, request mapping."""

from __future__ import annotations

import asyncio
import json

import pytest

from draligned.archive import Archive
from draligned.cli import main
from draligned.models import ModelDeclaration, ModelError, get_model
from draligned.models.cache import cache_key
from draligned.records import (
    FinalEvent,
    Message,
    ModelAttemptEvent,
    ModelCallEvent,
    NoticeEvent,
    RunRecord,
    ToolCallEvent,
    ToolSpec,
)
from tests.fake_providers import Error, FakeProvider, Raw, Slow, Wire, provider_study

KEY = "sk-fake-quirks-SECRET"
PROTOCOLS = ("openai-chat", "openai-responses", "anthropic")


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_PROVIDER_KEY", KEY)


def run_one(tmp_path, protocol: str, script: list, **study) -> tuple[RunRecord, FakeProvider]:
    """Run the P arm of one demo card against a fake provider playing ``script`` first."""
    with FakeProvider(protocol, script) as fp:
        path = provider_study(tmp_path, {protocol: fp}, study_extra='arms = ["P"]', **study)
        main(["run", str(path)])
    (rec,) = Archive(tmp_path / "archive").records()
    return rec, fp


def of(rec: RunRecord, kind: type) -> list:
    return [e for e in rec.events if isinstance(e, kind)]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_malformed_arguments_return_a_tool_error_and_the_run_goes_on(tmp_path, protocol):
    bad = Wire(protocol, "m").reply(calls=[("c_bad", "search", '{}""')])
    rec, _ = run_one(tmp_path, protocol, [bad])
    first = of(rec, ToolCallEvent)[0]
    archive = Archive(tmp_path / "archive")
    assert first.error == "malformed_arguments"
    assert archive.get_text(first.arguments_blob) == '{}""'
    assert "not a valid JSON object" in archive.get_text(first.return_blob)
    assert rec.status == "completed" and of(rec, FinalEvent)


@pytest.mark.parametrize("protocol", ("openai-chat", "anthropic"))
def test_tool_call_split_into_fragments_is_merged_in_order(tmp_path, protocol):
    split = Wire(protocol, "m").fragments("c_split", "search", ['{"query": "kyoto ', 'budget ', 'trip"}'])
    rec, _ = run_one(tmp_path, protocol, [split])
    call = of(rec, ModelCallEvent)[0]
    assert call.n_tool_calls == 1 and any("split tool call" in a for a in call.anomalies)
    assert of(rec, ToolCallEvent)[0].request_text == "kyoto budget trip"
    assert rec.status == "completed"


def test_wrong_base_url_fails_fast_with_a_hint(tmp_path):
    with FakeProvider("anthropic") as fp:
        model = get_model(ModelDeclaration(name="claude", protocol="anthropic", model="id",
                                           api_key_env="FAKE_PROVIDER_KEY", base_url=fp.base_url + "/v1"))
        with pytest.raises(ModelError, match="model 'claude'.*HTTP 404.*check base_url"):
            asyncio.run(model.generate([Message(role="user", content="Hi")], [], 0))
        assert len(fp.log) == 1


@pytest.mark.parametrize("protocol", ("openai-chat", "openai-responses"))
def test_reply_split_over_choices_is_merged_and_calls_run_in_order(tmp_path, protocol):
    calls = [("c1", "search", json.dumps({"query": "kyoto"})), ("c2", "search", json.dumps({"query": "osaka"}))]
    rec, _ = run_one(tmp_path, protocol, [Wire(protocol, "m").reply(text="Searching twice.", calls=calls, split=True)])
    call = of(rec, ModelCallEvent)[0]
    assert any(a.startswith("split reply") for a in call.anomalies) and call.finish_reason == "tool_calls"
    assert [e.request_text for e in of(rec, ToolCallEvent)[:2]] == ["kyoto", "osaka"]
    assert "multiple_tool_calls_in_order" in {n.code for n in of(rec, NoticeEvent)}


@pytest.mark.parametrize("protocol", ("openai-chat", "anthropic"))
def test_dropped_tool_call_fails_the_run_with_that_reason(tmp_path, protocol):
    rec, _ = run_one(tmp_path, protocol, [Wire(protocol, "m").reply(finish="tool_calls")])
    assert rec.status == "failed" and rec.status_reason.startswith("dropped tool call")
    assert any("dropped tool call" in a for a in of(rec, ModelCallEvent)[0].anomalies)
    assert rec.final_blob is None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_truncated_reply_fails_and_is_never_a_final(tmp_path, protocol):
    rec, _ = run_one(tmp_path, protocol, [Wire(protocol, "m").reply(text="My report begins", finish="length")])
    assert rec.status == "failed" and rec.status_reason.startswith("truncated")
    assert of(rec, ModelCallEvent)[0].finish_reason == "length" and rec.final_blob is None


def test_refusal_is_recorded_as_a_failure(tmp_path):
    refusal = {"id": "x", "model": "m", "choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": None, "refusal": "I can't help with that."}}]}
    rec, _ = run_one(tmp_path, "openai-chat", [refusal])
    assert rec.status == "failed" and rec.status_reason == "refusal: I can't help with that."


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_reasoning_tokens_violate_a_zero_reasoning_check(tmp_path, protocol):
    w = Wire(protocol, "m")
    thinking = w.reply(calls=[("c1", "search", '{"query": "kyoto"}')], usage=w.usage(reasoning=12))
    rec, _ = run_one(tmp_path, protocol, [thinking], model_extra="checks = { require_zero_reasoning_tokens = true }")
    call = of(rec, ModelCallEvent)[0]
    assert call.usage.reasoning_tokens == 12 and call.violations
    assert rec.status == "failed" and "require_zero_reasoning_tokens" in rec.status_reason


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_client_errors_fail_fast_naming_the_model_never_the_key(tmp_path, protocol):
    rec, fp = run_one(tmp_path, protocol, [Error(401, message=f"bad key {KEY}")])
    assert len(fp.log) == 1 and rec.status == "failed"
    (attempt,) = of(rec, ModelAttemptEvent)
    assert attempt.attempt.status_code == 401 and attempt.attempt.wait_s is None
    assert f"model '{protocol}'" in rec.status_reason and "failed fast" in rec.status_reason
    assert KEY not in rec.status_reason and KEY not in attempt.attempt.detail


def test_retries_are_bounded_by_attempts_and_by_total_time(tmp_path):
    rec, fp = run_one(tmp_path, "openai-chat", [Error(503)] * 5, retry={"max_attempts": 3})
    assert len(fp.log) == 3 and "gave up after 3 attempt(s)" in rec.status_reason
    assert [e.attempt.attempt for e in of(rec, ModelAttemptEvent)] == [1, 2, 3]

    (tmp_path / "b").mkdir()
    rec, fp = run_one(tmp_path / "b", "anthropic", [Error(529, {"retry-after": "3600"})], retry={"max_total_s": 60})
    assert len(fp.log) == 1 and "gave up after 1 attempt(s)" in rec.status_reason


def test_timeouts_and_connection_errors_are_retried(tmp_path):
    rec, _ = run_one(tmp_path, "openai-responses", [Slow(1.0)], retry={"timeout_s": 0.2})
    assert rec.status == "completed"
    assert [e.attempt.error for e in of(rec, ModelAttemptEvent)] == ["APITimeoutError"]

    with FakeProvider("openai-chat") as gone:
        closed = gone.base_url  # nothing listens here once the server is closed
    model = get_model(ModelDeclaration(name="gone", protocol="openai-chat", model="id", base_url=closed,
                                       api_key_env="FAKE_PROVIDER_KEY", retry={"max_attempts": 2}))
    with pytest.raises(ModelError, match="model 'gone'.*gave up after 2") as err:
        asyncio.run(model.generate([Message(role="user", content="Hi")], [], 0))
    assert [a.error for a in err.value.attempts] == ["APIConnectionError"] * 2


def test_a_key_echoed_in_a_reply_is_redacted_before_archiving(tmp_path):
    leaky = Wire("openai-chat", "m").reply(text=f"Your key is {KEY}.")
    rec, _ = run_one(tmp_path, "openai-chat", [leaky])
    assert rec.status == "completed" and any("redacted" in a for a in of(rec, ModelCallEvent)[0].anomalies)
    assert all(KEY.encode() not in f.read_bytes() for f in (tmp_path / "archive").rglob("*") if f.is_file())


def test_a_repeated_tool_call_in_a_split_reply_runs_once(tmp_path):
    call = ("c1", "search", json.dumps({"query": "kyoto"}))
    rec, _ = run_one(tmp_path, "openai-chat", [Wire("openai-chat", "m").reply(calls=[call, call], split=True)])
    assert of(rec, ModelCallEvent)[0].n_tool_calls == 1
    assert any("repeated tool call c1" in a for a in of(rec, ModelCallEvent)[0].anomalies)


def test_unreadable_reply_body_fails_the_run(tmp_path):
    rec, _ = run_one(tmp_path, "openai-chat", [Raw("<html>gateway error</html>")])
    assert rec.status == "failed" and "unreadable reply body" in rec.status_reason


def _body_sent(protocol: str, **decl: object) -> dict:
    tools = [ToolSpec(name="search", description="Search.", parameters={"type": "object"})]
    msgs = [Message(role="system", content="SYS"), Message(role="user", content="Hi")]
    with FakeProvider(protocol) as fp:
        model = get_model(ModelDeclaration(name="m", protocol=protocol, model="id-1", base_url=fp.base_url,
                                           api_key_env="FAKE_PROVIDER_KEY", **decl))
        reply = asyncio.run(model.generate(msgs, tools, 0))
    assert reply.request_body == fp.log[0]["body"]  # archived body == bytes received
    return fp.log[0]["body"]


def test_request_fields_map_to_each_wire_format_and_extras_pass_through():
    chat = _body_sent("openai-chat", omit=["temperature"], options={"max_tokens_field": "max_tokens"},
                      request={"reasoning_effort": "low", "thinking": {"type": "disabled"}})
    assert "temperature" not in chat and chat["max_tokens"] == 16000 and chat["parallel_tool_calls"] is False
    assert chat["reasoning_effort"] == "low" and chat["thinking"] == {"type": "disabled"}
    resp = _body_sent("openai-responses", request={"reasoning": {"effort": "none"}})
    assert resp["reasoning"] == {"effort": "none"} and resp["max_output_tokens"] == 16000
    assert resp["input"][0] == {"role": "system", "content": "SYS"} and resp["tools"][0]["name"] == "search"
    # An explicit timeout is always given, so the SDK does not refuse a large non-streaming max_tokens.
    anth = _body_sent("anthropic", request={"thinking": {"type": "disabled"}, "max_output_tokens": 32000})
    assert anth["system"] == "SYS" and anth["messages"] == [{"role": "user", "content": "Hi"}]
    assert anth["max_tokens"] == 32000 and anth["thinking"] == {"type": "disabled"}
    assert anth["tool_choice"]["disable_parallel_tool_use"] is True
    assert anth["tools"][0]["input_schema"] == {"type": "object"} and "parallel_tool_calls" not in anth


def test_cache_key_covers_inputs_and_seed_but_not_transport():
    decl = ModelDeclaration(name="m", protocol="openai-chat", model="id-1", base_url="http://x/v1")
    msgs = [Message(role="user", content="Hi")]
    key = cache_key(decl, msgs, [], 0)
    assert key == cache_key(decl.model_copy(update={"retry": decl.retry.model_copy(update={"timeout_s": 5})}),
                            msgs, [], 0)
    assert key != cache_key(decl, msgs, [], 1)
    assert key != cache_key(decl, [Message(role="user", content="Hi!")], [], 0)
    assert key != cache_key(decl.model_copy(update={"request": {"temperature": 0.5}}), msgs, [], 0)


def test_missing_key_at_call_time_is_a_model_error_naming_the_variable(monkeypatch):
    monkeypatch.delenv("FAKE_PROVIDER_KEY")
    model = get_model(ModelDeclaration(name="gpt", protocol="openai-chat", model="id", api_key_env="FAKE_PROVIDER_KEY"))
    with pytest.raises(ModelError, match="model 'gpt'.*FAKE_PROVIDER_KEY"):
        asyncio.run(model.generate([Message(role="user", content="Hi")], [], 0))


def test_split_parts_with_the_same_id_and_name_are_joined_until_the_arguments_parse():
    from draligned.models import wire
    notes: list[str] = []
    parts = [wire.tool_call("c1", "search", '{"query": "ky'), wire.tool_call("c1", "search", 'oto"}'),
             wire.tool_call("c2", "read", '{"url": "u"}'), wire.tool_call("c3", "search", '{}""')]
    merged = wire.merge_fragments(parts, notes, "a later choice")
    assert [(c.id, c.arguments) for c in merged] == [("c1", {"query": "kyoto"}), ("c2", {"url": "u"}), ("c3", None)]
    assert len(notes) == 1


def test_price_bills_cached_prompt_tokens_at_their_own_rate():
    from draligned.models.pricing import Price
    from draligned.records import Usage
    usage = Usage(input_tokens=1000, output_tokens=100, reasoning_tokens=30, cached_tokens=400)
    expected = (600 * 2 + 400 * 0.5 + 100 * 8) / 1e6
    assert Price(input=2.0, output=8.0, cached_input=0.5).cost(usage) == pytest.approx(expected)
    assert Price(input=2.0, output=8.0).cost(usage) == pytest.approx((1000 * 2 + 100 * 8) / 1e6)
