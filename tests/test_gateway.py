"""Issue 12 §1, §2 and §4 and issue 11's dead endpoint, as a checker sees them: a study through a
LiteLLM-like proxy, reasoning carried through the tool loop against servers that refuse a follow-up
without it, an adaptive connection limit under a burst of 429s, spend caps, live counts, and a model
that cannot be reached. Real openai and anthropic SDKs against loopback servers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from draligned.archive import Archive
from draligned.cli import main
from draligned.models.limits import ConnectionLimit
from draligned.records import ModelAttemptEvent, ModelCallEvent
from draligned.runner import RunProgress
from draligned.workflow import run_study_file
from tests.conftest import REPO
from tests.loopback_gateway import LiteLLMProxy, ReasoningServer
from tests.loopback_wire import WireServer
from tests.study_helpers import write_evaluator

KEY = "sk-gateway-checker-91b2-SECRET"
UPSTREAM = "fake-chat-2026-01-01"


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GW_KEY", KEY)


def study(tmp: Path, protocol: str, base_url: str, model: str = "gw-chat", extra: str = "", model_extra: str = "",
          arms: str = '["P"]', harness: str = "H00") -> Path:
    path = tmp / "gw.toml"
    path.write_text(f"""name = "gw"
cards = ["{REPO / 'factor_cards' / 'travel_budget_en.json'}"]
arms = {arms}
harnesses = ["{harness}"]
archive = "archive"
corpus = "{REPO / 'corpora' / 'demo' / 'corpus.jsonl'}"
{extra}
[[models]]
name = "m"
protocol = "{protocol}"
model = "{model}"
base_url = "{base_url}"
api_key_env = "GW_KEY"
{model_extra}
""")
    return path


def calls(tmp: Path) -> list[ModelCallEvent]:
    return [e for r in Archive(tmp / "archive").records() for e in r.events if isinstance(e, ModelCallEvent)]


# --------------------------------------------------------------------------- §1 gateways
def test_a_litellm_proxy_shows_served_model_provider_retries_and_cost(tmp_path, capsys):
    with WireServer("openai-chat", ["submit"], faults={0: (500, {})}) as upstream, \
            LiteLLMProxy("gw-chat", upstream.base_url, UPSTREAM) as proxy:
        path = study(tmp_path, "openai-chat", proxy.base_url,
                     model_extra=f'checks = {{ accepted_model_echoes = ["{UPSTREAM}"] }}')
        assert main(["run", str(path)]) == 0
    (call,) = calls(tmp_path)
    assert call.model_echo == "gw-chat"  # the alias, echoed by the proxy
    g = call.gateway
    assert g is not None and g.gateway == "litellm" and g.served_model == UPSTREAM
    assert g.upstream_provider == f"openai at {upstream.base_url}" and g.retries == 1 and g.cost_usd == 0.00042
    archive = Archive(tmp_path / "archive")
    (rec,) = archive.records()
    assert rec.counters.failed_attempts == 0  # the proxy's retry is not draligned's: it shows only here
    headers = json.loads(archive.get_text(call.headers_blob))
    assert headers["x-litellm-model-name"] == f"openai/{UPSTREAM}" and headers["set-cookie"] == "[removed]"
    for p in (tmp_path / "archive").rglob("*"):
        assert not p.is_file() or KEY.encode() not in p.read_bytes()
    capsys.readouterr()
    assert main(["archive", "stats", str(tmp_path / "archive"), "--json"]) == 0
    gw = json.loads(capsys.readouterr().out)["gateways"]["m"]
    assert gw | {"gateway_cost_usd": round(gw["gateway_cost_usd"], 6)} == {
        "gateway": "litellm", "calls": 1, "echoes": ["gw-chat"], "served_models": [UPSTREAM],
        "upstream_providers": [f"openai at {upstream.base_url}"], "gateway_retries": 1, "gateway_cost_usd": 0.00042}
    assert main(["archive", "show", str(tmp_path / "archive"), rec.run_id]) == 0
    assert f'"served_model": "{UPSTREAM}"' in capsys.readouterr().out


def test_declared_headers_are_sent_verbatim_so_retries_stay_in_draligned(tmp_path):
    with WireServer("openai-chat", ["submit"], faults={0: (500, {})}) as upstream, \
            LiteLLMProxy("gw-chat", upstream.base_url, UPSTREAM) as proxy:
        path = study(tmp_path, "openai-chat", proxy.base_url, model_extra='headers = { x-litellm-num-retries = "0" }')
        assert main(["run", str(path)]) == 0
        assert [e["headers"]["x-litellm-num-retries"] for e in proxy.log] == ["0", "0"]
    (rec,) = Archive(tmp_path / "archive").records()
    attempts = [e for e in rec.events if isinstance(e, ModelAttemptEvent)]
    assert [a.attempt.status_code for a in attempts] == [500] and rec.counters.failed_attempts == 1
    (call,) = calls(tmp_path)
    assert call.request_headers == {"x-litellm-num-retries": "0"} and call.gateway.retries == 0


def test_an_alias_echo_is_checked_against_the_gateway_model_and_the_message_says_so(tmp_path):
    with WireServer("openai-chat", ["submit"]) as upstream, LiteLLMProxy("gw-chat", upstream.base_url, UPSTREAM) as p:
        path = study(tmp_path, "openai-chat", p.base_url,
                     model_extra='checks = { accepted_model_echoes = ["fake-chat-2025-06-01"] }')
        assert main(["run", str(path)]) == 1
    (rec,) = Archive(tmp_path / "archive").records()
    assert rec.status == "failed"
    assert (f"the litellm gateway's served model '{UPSTREAM}' (checked instead of the echo 'gw-chat', which is "
            f"the requested alias) is not one of ['fake-chat-2025-06-01']") in rec.status_reason


# --------------------------------------------------------------------------- §2 reasoning
def test_responses_follow_ups_carry_reasoning_items_with_store_false(tmp_path):
    with ReasoningServer("openai-responses") as server:
        assert main(["run", str(study(tmp_path, "openai-responses", server.base_url, "o-x"))]) == 0
        assert server.refused == []
        first, follow = (e["body"] for e in server.log)
    assert first["store"] is False and follow["store"] is False
    assert follow["include"] == ["reasoning.encrypted_content"]
    reasoning = [i for i in follow["input"] if i.get("type") == "reasoning"]
    assert reasoning == [{"type": "reasoning", "id": "rs_0", "summary": [], "encrypted_content": "gAAAA-encrypted-0"}]
    assert [c.request_fields["include"] for c in calls(tmp_path)] == [["reasoning.encrypted_content"]] * 2


def test_responses_with_store_true_name_the_previous_response(tmp_path):
    with ReasoningServer("openai-responses") as server:
        path = study(tmp_path, "openai-responses", server.base_url, "o-x", model_extra="request = { store = true }")
        assert main(["run", str(path)]) == 0
        assert server.refused == []
        follow = server.log[1]["body"]
    assert follow["previous_response_id"] == "resp_0" and follow["store"] is True and "include" not in follow
    assert [i["type"] for i in follow["input"]] == ["function_call_output"]
    assert calls(tmp_path)[1].request_fields["previous_response_id"] == "resp_0"


def test_a_follow_up_without_its_reasoning_item_is_refused_by_the_server(tmp_path):
    with ReasoningServer("openai-responses") as server:
        path = study(tmp_path, "openai-responses", server.base_url, "o-x",
                     model_extra="[models.options]\ncarry_reasoning = false")
        assert main(["run", str(path)]) == 1
    (rec,) = Archive(tmp_path / "archive").records()
    assert "HTTP 400" in rec.status_reason and "required 'reasoning' item: 'rs_0'" in rec.status_reason


@pytest.mark.parametrize("harness", ["H00", pytest.param("H-W", marks=pytest.mark.sandbox),
                                     pytest.param("H-D", marks=pytest.mark.sandbox)])
def test_anthropic_extended_thinking_with_tool_use_sends_the_signed_blocks_back(tmp_path, harness):
    with ReasoningServer("anthropic", harness) as server:
        path = study(tmp_path, "anthropic", server.base_url, "claude-x", harness=harness,
                     model_extra='request = { thinking = { type = "enabled", budget_tokens = 2000 } }')
        assert main(["run", str(path)]) == 0
        assert server.refused == []
        follow = [e["body"] for e in server.log if any(m["role"] == "assistant" for m in e["body"]["messages"])]
        turns = len(server.log)
    assert turns == {"H00": 2, "H-W": 2, "H-D": 5}[harness]  # H-D: root, worker twice, root twice
    assert len(follow) == turns - {"H00": 1, "H-W": 1, "H-D": 2}[harness]  # every follow-up, workers' too
    for body in follow:
        for m in (m for m in body["messages"] if m["role"] == "assistant"):
            assert m["content"][0]["type"] == "thinking" and m["content"][0]["signature"].startswith("sig-")
    assistant = [m for m in follow[0]["messages"] if m["role"] == "assistant"]
    use = next(b for b in assistant[0]["content"] if b["type"] == "tool_use")
    assert assistant[0]["content"][0] == server.issued[use["id"]]  # exactly as received, signature included
    assert follow[0]["thinking"] == {"type": "enabled", "budget_tokens": 2000}
    (rec,) = Archive(tmp_path / "archive").records()
    assert rec.status == "completed" and rec.final_blob is not None


# --------------------------------------------------------------------------- §4 limits, spend, live counts
def test_a_burst_of_429s_lowers_the_adaptive_limit_and_it_recovers(tmp_path):
    burst = {n: (429, {"retry-after": "0"}) for n in range(3)}
    with WireServer("openai-chat", ["submit"], faults=burst) as server:
        path = study(tmp_path, "openai-chat", server.base_url, "m-x", extra="seeds = 3\nconcurrency = 1",
                     arms='"all"', model_extra='retry = { max_connections = "auto", auto_start = 4, auto_max = 8 }')
        assert main(["run", str(path)]) == 0
    records = sorted(Archive(tmp_path / "archive").records(), key=lambda r: r.started_at)
    attempts = [e.attempt.connection_limit for r in records for e in r.events if isinstance(e, ModelAttemptEvent)]
    assert attempts == [2, 1, 1]  # halved per 429, down to the floor
    limits = sorted(e.connection_limit for r in records for e in r.events if isinstance(e, ModelCallEvent))
    assert limits[0] == 2 and limits[-1] == 4  # +1 after as many successes as the limit: 2, 2, 3, 3, 3, 4


def test_the_adaptive_limit_bounds_requests_in_flight():
    async def go() -> tuple[int, list[int]]:
        limit, peak, now = ConnectionLimit(2, 1, 4), 0, 0

        async def request(outcome: str) -> None:
            nonlocal peak, now
            await limit.acquire()
            now += 1
            peak = max(peak, now)
            await asyncio.sleep(0)
            now -= 1
            await limit.release(outcome)  # type: ignore[arg-type]
        await asyncio.gather(*(request("ok") for _ in range(40)))
        top = limit.limit
        await asyncio.gather(*(request("throttled") for _ in range(5)))
        return peak, [top, limit.limit]
    peak, (top, after) = asyncio.run(go())
    assert peak <= 4 and top == 4 and after == 1


def sim_study(tmp: Path, extra: str = "", price: bool = True, budget: str = "") -> Path:
    path = tmp / "spend.toml"
    price_table = "price = { input = 1000.0, output = 1000.0 }" if price else ""
    path.write_text(f"""name = "spend"
cards = ["{REPO / 'factor_cards' / 'travel_budget_en.json'}"]
seeds = 3
concurrency = 1
archive = "archive"
corpus = "{REPO / 'corpora' / 'demo' / 'corpus.jsonl'}"
{extra}
[budget]
max_model_calls = 24
{budget}
[[models]]
name = "sim-agent"
protocol = "sim"
model = "sim-agent-v1"
{price_table}
""")
    return path


def test_a_study_stops_at_its_cost_cap_and_a_later_run_resumes(tmp_path, capsys):
    path = sim_study(tmp_path, "max_cost_usd = 1.0")
    assert main(["run", str(path)]) == 1
    out = capsys.readouterr().out
    records = Archive(tmp_path / "archive").records()
    spent = sum(r.counters.cost_usd for r in records)
    # One run at a time (concurrency 1) and the first already costs more than the cap: it finishes, no other
    # starts. Its cost is its tokens at the $1,000 per million price.
    assert len(records) == 1
    usage = records[0].counters.usage
    assert spent == round((usage.input_tokens + usage.output_tokens) * 1000.0 / 1e6, 8) and spent > 1.0
    assert f"spent: ${spent:.4f} of max_cost_usd $1" in out and "study cost cap reached" in out
    path.write_text(path.read_text().replace("max_cost_usd = 1.0", "max_cost_usd = 1000.0"))
    assert main(["run", str(path)]) == 0
    assert len({r.slot_id for r in Archive(tmp_path / "archive").records()}) == 6


def test_a_run_stops_at_its_own_cost_budget(tmp_path):
    assert main(["run", str(sim_study(tmp_path, budget="max_cost_usd = 0.2"))]) == 0
    recs = Archive(tmp_path / "archive").records()
    assert {r.status_reason for r in recs} == {"cost budget spent"} and {r.status for r in recs} == {"budget_exhausted"}


def test_a_cost_cap_on_an_unpriced_model_is_refused_at_load(tmp_path, capsys):
    path = sim_study(tmp_path, "max_cost_usd = 1.0", price=False)
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "models[0].price" in err and "max_cost_usd" in err
    assert not (tmp_path / "archive").exists()


def test_progress_shows_completed_failed_and_retrying_runs_with_cost(tmp_path):
    seen: list[RunProgress] = []
    with WireServer("openai-chat", ["submit"], faults={0: (503, {})}) as server:
        path = study(tmp_path, "openai-chat", server.base_url, "m-x", extra="concurrency = 1",
                     model_extra="price = { input = 1.0, output = 2.0 }")
        run_study_file(path, progress=seen.append)
    assert any(e.retrying == 1 for e in seen) and seen[-1].retrying == 0
    assert (seen[-1].done, seen[-1].completed, seen[-1].failed) == (1, 1, 0)
    assert seen[-1].cost_usd == pytest.approx(calls(tmp_path)[0].cost_usd)
    from draligned.cli.run import live_counts
    assert live_counts(seen[-1]) == f"completed 1 · failed 0 · retrying 0 · ${seen[-1].cost_usd:.4f}"
    assert "retrying 1" in live_counts(next(e for e in seen if e.retrying))


def test_an_unreachable_model_stops_after_consecutive_connection_failures(tmp_path, capsys):
    path = study(tmp_path, "openai-chat", "http://127.0.0.1:9/v1", "m-x", arms='"all"',
                 extra="seeds = 3\nconcurrency = 1",
                 model_extra="retry = { max_attempts = 2, stop_after_connection_failures = 2 }")
    assert main(["run", str(path)]) == 1
    out = capsys.readouterr().out
    records = Archive(tmp_path / "archive").records()
    assert len(records) == 2 and all("(cause: connection refused: [Errno 111]" in r.status_reason for r in records)
    assert "not started: 4 slot(s): model 'm' unreachable: 2 consecutive runs failed to connect" in out
    assert main(["run", str(path)]) == 1  # a later run starts the unstarted slots again
    assert len(Archive(tmp_path / "archive").records()) == 4


def test_records_without_the_new_fields_keep_their_hash_and_cache_keys():
    from draligned.hashing import sha256_json
    from draligned.records import Message, ModelCallEvent
    old = {"event_id": "e0001", "type": "model_call", "role": "executor", "request_blob": "a" * 64,
           "response_blob": "b" * 64, "request_fields": {}, "model_echo": "x", "finish_reason": "stop",
           "usage": {"input_tokens": 1, "output_tokens": 2, "reasoning_tokens": 0, "cached_tokens": 0},
           "latency_s": 0.1, "n_tool_calls": 0, "anomalies": [], "violations": [], "cache_hit": False,
           "cost_usd": None}
    assert sha256_json(ModelCallEvent.model_validate(old).model_dump(mode="json")) == sha256_json(old)
    msg = {"role": "assistant", "content": "hi", "tool_calls": [], "tool_call_id": None, "name": None}
    assert Message.model_validate(msg).model_dump(mode="json") == msg


def test_openrouter_and_ngrok_reports_are_read_and_secrets_removed():
    from draligned.models.gateway import clean_headers, gateway_info
    body = {"id": "gen-123", "model": "anthropic/claude-x", "provider": "Anthropic", "usage": {"cost": 0.0031}}
    g = gateway_info({}, body)
    assert g is not None and (g.gateway, g.served_model, g.upstream_provider, g.cost_usd) == (
        "openrouter", "anthropic/claude-x", "Anthropic", 0.0031)
    h = clean_headers({"Ngrok-AIG-Model": "gpt-x-2026", "Ngrok-AIG-Attempts": "3", "Authorization": "Bearer k",
                       "x-echo": "key k1 here"}, "k1")
    assert h["authorization"] == "[removed]" and h["x-echo"] == "key [redacted] here"
    n = gateway_info(h, {})
    assert n is not None and (n.gateway, n.served_model, n.retries) == ("ngrok", "gpt-x-2026", 2)


def test_an_evaluator_read_through_the_proxy_keeps_headers_and_the_served_model(tmp_path):
    from draligned.evaluator.storage import ReadStore
    assert main(["run", str(sim_study(tmp_path))]) == 0
    evaluator = tmp_path / "gw-eval.toml"
    with WireServer("openai-chat", ["length"]) as upstream, LiteLLMProxy("gw-read", upstream.base_url, UPSTREAM) as p:
        write_evaluator(evaluator, """evaluator_id = "gw-eval-v1"
description = "an evaluator behind a gateway"
max_tokens = 512
concurrency = 2""", f"""name = "gw-read"
protocol = "openai-chat"
model = "gw-read"
base_url = "{p.base_url}"
api_key_env = "GW_KEY"
headers = {{ x-litellm-num-retries = "0" }}""")
        main(["read", str(tmp_path / "archive"), "--evaluator", str(evaluator), "--phase", "final"])
    archive = Archive(tmp_path / "archive")
    reads = list(ReadStore(archive, "gw-eval-v1").reads().values())
    assert reads and all(r.gateway.served_model == UPSTREAM and r.model_echo == "gw-read" for r in reads)
    headers = json.loads(archive.get_text(reads[0].headers_blob))
    assert headers["x-litellm-model-name"] == f"openai/{UPSTREAM}"
    assert main(["archive", "verify", str(tmp_path / "archive")]) == 0


def test_a_credential_in_declared_headers_is_refused_naming_the_field(tmp_path, capsys):
    path = study(tmp_path, "openai-chat", "http://127.0.0.1:9/v1",
                 model_extra='headers = { Authorization = "Bearer x" }')
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "models[0].headers" in err and "Authorization would be archived" in err
