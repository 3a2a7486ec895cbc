"""Issue 12's checks repeated against a provider written apart from draligned's own test servers
(tests/independent_provider.py, from the public wire formats and LiteLLM's documented response
headers): the gateway's report, secrets and odd headers, the responses API's store = false rules, a
burst of 429s through the CLI. The real LiteLLM proxy run is benchmarks/gateway_litellm.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from draligned.archive import Archive
from draligned.cli import main
from draligned.records import ModelAttemptEvent, ModelCallEvent
from tests.independent_provider import State, serve
from tests.test_gateway import study  # the study file both gateway checks write

KEY = "sk-independent-7f3e-SECRET"
UPSTREAM = "fake-chat-2026-01-01"
#: What a LiteLLM proxy returns (docs.litellm.ai/docs/proxy/response_headers, and as LiteLLM 1.108 sends).
LITELLM = [("x-litellm-call-id", "5f0c"), ("x-litellm-model-id", "b247ea30"),
           ("x-litellm-model-name", f"openai/{UPSTREAM}"), ("x-litellm-model-api-base", "http://10.0.0.7:8000/v1"),
           ("x-litellm-response-cost", "0.00018"), ("x-litellm-key-spend", "0.5"),
           ("x-litellm-attempted-retries", "2"), ("x-litellm-max-retries", "2"),
           ("x-litellm-model-group", "gw-chat"), ("llm_provider-x-request-id", "req_up")]


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GW_KEY", KEY)


@contextmanager
def provider(state: State) -> Iterator[tuple[State, str]]:
    server = serve(state)
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def calls(tmp: Path) -> list[ModelCallEvent]:
    return [e for r in Archive(tmp / "archive").records() for e in r.events if isinstance(e, ModelCallEvent)]


def test_litellm_headers_name_the_served_model_and_the_echo_check_uses_it(tmp_path):
    with provider(State(headers=LITELLM)) as (_, url):
        path = study(tmp_path, "openai-chat", url, model_extra=f'checks = {{ accepted_model_echoes = ["{UPSTREAM}"] }}')
        assert main(["run", str(path)]) == 0
    first, follow = calls(tmp_path)
    assert first.model_echo == "gw-chat" and first.violations == []  # the alias, passed on the header's model
    g = follow.gateway
    assert g is not None and (g.gateway, g.served_model, g.retries, g.cost_usd) == ("litellm", UPSTREAM, 2, 0.00018)
    assert g.upstream_provider == "openai at http://10.0.0.7:8000/v1"


def test_credentials_in_response_headers_are_never_archived(tmp_path):
    other = "tok-upstream-55aa"
    leaks = [("set-cookie", f"sid={other}"), ("x-api-key", other), ("authorization", f"Bearer {other}"),
             ("x-access-token", other), ("x-portkey-api-key", other), ("x-forwarded-for-key", f"bearer {other}"),
             ("x-echo", f"your key {KEY}")]
    with provider(State(headers=leaks)) as (_, url):
        assert main(["run", str(study(tmp_path, "openai-chat", url))]) == 0
    archive = Archive(tmp_path / "archive")
    headers = json.loads(archive.get_text(calls(tmp_path)[0].headers_blob))
    assert {n: headers[n] for n, _ in leaks[:-1]} == {n: "[removed]" for n, _ in leaks[:-1]}
    assert headers["x-echo"] == "your key [redacted]"
    for p in (tmp_path / "archive").rglob("*"):
        assert not p.is_file() or (other.encode() not in p.read_bytes() and KEY.encode() not in p.read_bytes())


def test_rate_limit_and_usage_headers_are_kept_not_taken_for_secrets(tmp_path):
    kept = [("x-ratelimit-remaining-tokens", "9000"), ("x-litellm-key-spend", "0.5")]
    with provider(State(headers=kept)) as (_, url):
        assert main(["run", str(study(tmp_path, "openai-chat", url))]) == 0
    headers = json.loads(Archive(tmp_path / "archive").get_text(calls(tmp_path)[0].headers_blob))
    assert headers["x-ratelimit-remaining-tokens"] == "9000" and headers["x-litellm-key-spend"] == "0.5"


def test_a_key_in_a_declared_gateway_header_is_refused(tmp_path, capsys):
    path = study(tmp_path, "openai-chat", "http://127.0.0.1:9/v1",
                 model_extra='headers = { x-litellm-api-key = "sk-1234" }')
    assert main(["run", str(path)]) == 2
    assert "x-litellm-api-key would be archived with every call" in capsys.readouterr().err
    assert not (tmp_path / "archive").exists()


def test_non_ascii_and_very_many_headers_are_kept_and_no_gateway_is_invented(tmp_path):
    many = [(f"x-trace-{i:03d}", str(i)) for i in range(200)]
    odd = [("x-region", "Zürich"), ("x-utf8", "東京".encode().decode("latin-1"))]  # latin-1 and raw UTF-8 bytes
    with provider(State(headers=many + odd)) as (_, url):
        assert main(["run", str(study(tmp_path, "openai-chat", url))]) == 0
    call = calls(tmp_path)[0]
    headers = json.loads(Archive(tmp_path / "archive").get_text(call.headers_blob))
    assert all(headers[n] == v for n, v in many) and headers["x-region"] == "Zürich"
    assert headers["x-utf8"] in ("東京", "東京".encode().decode("latin-1"))
    assert call.gateway is None


def test_responses_store_false_follow_ups_pass_the_documented_rules(tmp_path):
    with provider(State()) as (state, url):
        assert main(["run", str(study(tmp_path, "openai-responses", url, "o-ind"))]) == 0
        bodies = [r["body"] for r in state.requests]
    assert [b["store"] for b in bodies] == [False, False] and "previous_response_id" not in bodies[1]
    assert bodies[1]["include"] == ["reasoning.encrypted_content"]
    kinds = [i.get("type") for i in bodies[1]["input"] if i.get("type")]
    assert kinds == ["reasoning", "function_call", "function_call_output"]
    (item,) = [i for i in bodies[1]["input"] if i.get("type") == "reasoning"]
    assert item == {"type": "reasoning", "id": "rs_0", "summary": [], "encrypted_content": "gAAAAB-0-sealed"}


def test_a_reasoning_item_without_encrypted_content_names_that_not_the_base_url(tmp_path):
    with provider(State(sealed=False)) as (_, url):  # as when a gateway drops `include`
        assert main(["run", str(study(tmp_path, "openai-responses", url, "o-ind"))]) == 1
    (rec,) = Archive(tmp_path / "archive").records()
    assert "HTTP 404" in rec.status_reason and "Item with id 'rs_0' not found" in rec.status_reason
    assert "check base_url" not in rec.status_reason
    assert "a reasoning item must carry its encrypted_content" in rec.status_reason


def test_a_wrong_path_404_still_points_at_the_base_url(tmp_path):
    with provider(State()) as (_, url):
        assert main(["run", str(study(tmp_path, "openai-chat", url.removesuffix("/v1") + "/api"))]) == 1
    (rec,) = Archive(tmp_path / "archive").records()
    assert "HTTP 404" in rec.status_reason and "check base_url" in rec.status_reason


def test_a_burst_of_429s_through_the_cli_lowers_the_limit_and_it_recovers(tmp_path):
    with provider(State(fail_first=3, fail_status=429)) as (_, url):
        path = study(tmp_path, "openai-chat", url, model="m-x", extra="seeds = 3\nconcurrency = 1", arms='"all"',
                     model_extra='retry = { max_connections = "auto", auto_start = 4, auto_min = 1, auto_max = 8 }')
        assert main(["run", str(path)]) == 0
    records = sorted(Archive(tmp_path / "archive").records(), key=lambda r: r.started_at)
    attempts = [e.attempt for r in records for e in r.events if isinstance(e, ModelAttemptEvent)]
    assert [(a.status_code, a.connection_limit) for a in attempts] == [(429, 2), (429, 1), (429, 1)]
    limits = [e.connection_limit for r in records for e in r.events if isinstance(e, ModelCallEvent)]
    # the limit after each call: +1 after as many successes as the limit, past auto_start = 4 again
    assert sorted(limits) == [2, 2, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5]  # (runs started in the same tick tie)


def test_a_study_stops_at_its_cost_cap_on_a_fresh_archive(tmp_path, capsys):
    with provider(State()) as (_, url):
        path = study(tmp_path, "openai-chat", url, model="m-x",
                     extra="seeds = 4\nconcurrency = 1\nmax_cost_usd = 0.0005", arms='"all"',
                     model_extra="price = { input = 1.0, output = 2.0 }")  # 2 calls of 120 + 30 tokens: $0.00036 a run
        assert main(["run", str(path)]) == 1
    out = capsys.readouterr().out
    records = Archive(tmp_path / "archive").records()
    spent = sum(r.counters.cost_usd for r in records)
    assert len(records) == 2 and spent >= 0.0005 and "study cost cap reached" in out
    assert f"spent: ${spent:.4f} of max_cost_usd" in out
