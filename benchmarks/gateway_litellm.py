"""Issue 12 §1 checked against the real LiteLLM proxy (too heavy for CI: ~750 MB installed).

Starts tests/independent_provider.py on loopback (every 3rd request answered with HTTP 500), a
LiteLLM proxy in front of it (``drop_params: true``, alias ``gw-chat`` for
``openai/fake-chat-2026-01-01``, ``num_retries: 2``, a price), then through the proxy: a draligned
study (openai-chat, sim cards), the same study with ``headers = {x-litellm-num-retries = "0"}``, a
study whose ``accepted_model_echoes`` names another model, an ``openai-responses`` study (store =
false, reasoning items carried) and an evaluator read. Each check prints
PASS or FAIL; the exit code is the number of failures.

    python -m venv /tmp/llvenv && /tmp/llvenv/bin/pip install 'litellm[proxy]'
    PYTHONPATH=$PWD python benchmarks/gateway_litellm.py --litellm /tmp/llvenv/bin/litellm
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from draligned.archive import Archive
from draligned.cli import main as cli
from draligned.evaluator.storage import ReadStore
from draligned.records import ModelAttemptEvent, ModelCallEvent
from tests.independent_provider import State, serve
from tests.study_helpers import write_evaluator

REPO = Path(__file__).resolve().parents[1]
UPSTREAM = "fake-chat-2026-01-01"
MASTER = "sk-litellm-master-bench"
FAILURES: list[str] = []


def check(name: str, ok: bool, detail: object = "") -> None:
    print(f"{'PASS' if ok else 'FAIL'}  {name}{'  ' + str(detail) if detail else ''}")
    if not ok:
        FAILURES.append(name)


def start_proxy(litellm: str, upstream: str, port: int, work: Path) -> subprocess.Popen[bytes]:
    (work / "config.yaml").write_text(f"""model_list:
  - model_name: gw-chat
    litellm_params: {{model: openai/{UPSTREAM}, api_base: "{upstream}", api_key: sk-upstream-fake}}
    model_info: {{input_cost_per_token: 0.000001, output_cost_per_token: 0.000002}}
litellm_settings: {{drop_params: true, num_retries: 2, request_timeout: 30}}
general_settings: {{master_key: {MASTER}}}
""")
    env = os.environ | {"LITELLM_LOG": "ERROR", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_DOCS": "True"}
    proc = subprocess.Popen([litellm, "--config", str(work / "config.yaml"), "--host", "127.0.0.1",
                             "--port", str(port)], cwd=work, env=env, stdout=open(work / "proxy.log", "wb"),
                            stderr=subprocess.STDOUT)
    for _ in range(120):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health/liveliness", timeout=1)
            return proc
        except OSError:
            time.sleep(1)
    proc.kill()
    raise SystemExit(f"LiteLLM did not start; see {work / 'proxy.log'}")


def write_study(work: Path, name: str, proxy: str, extra: str = "", echo: str = UPSTREAM) -> Path:
    path = work / f"{name}.toml"
    path.write_text(f"""name = "{name}"
cards = ["{REPO / 'factor_cards' / 'travel_budget_en.json'}"]
arms = "all"
harnesses = ["H00"]
seeds = 2
concurrency = 2
archive = "{name}"
corpus = "{REPO / 'corpora' / 'demo' / 'corpus.jsonl'}"
[[models]]
name = "gw"
protocol = "openai-chat"
model = "gw-chat"
base_url = "{proxy}"
api_key_env = "LITELLM_KEY"
request = {{ thinking = {{ type = "disabled" }} }}
checks = {{ accepted_model_echoes = ["{echo}"] }}
price = {{ input = 1.0, output = 2.0 }}
{extra}
""")
    return path


def model_calls(archive: Path) -> list[tuple[object, ModelCallEvent]]:
    return [(r, e) for r in Archive(archive).records() for e in r.events if isinstance(e, ModelCallEvent)]


def run(litellm: str, port: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="gw-litellm-"))
    state = State(fail_every=3)
    upstream = serve(state)
    proxy = start_proxy(litellm, f"http://127.0.0.1:{upstream.server_address[1]}/v1", port, work)
    os.environ["LITELLM_KEY"] = MASTER
    base = f"http://127.0.0.1:{port}/v1"
    try:
        started = time.perf_counter()
        check("study through LiteLLM completes", cli(["run", str(write_study(work, "plain", base))]) == 0,
              f"{time.perf_counter() - started:.1f} s")
        calls = model_calls(work / "plain")
        archive = Archive(work / "plain")
        headers = json.loads(archive.get_text(calls[0][1].headers_blob))
        check("archived headers name the upstream model", headers.get("x-litellm-model-name") == f"openai/{UPSTREAM}",
              headers.get("x-litellm-model-name"))
        check("echo is the alias, gateway.served_model the upstream, no violation",
              all(c.model_echo == "gw-chat" and c.gateway and c.gateway.served_model == UPSTREAM and not c.violations
                  for _, c in calls))
        retries = sum(c.gateway.retries or 0 for _, c in calls if c.gateway)
        failed = sum(r.counters.failed_attempts for r in Archive(work / "plain").records())
        check("LiteLLM's own retries recorded in gateway.retries, none in draligned", retries > 0 and failed == 0,
              f"gateway retries {retries}, draligned failed attempts {failed}")
        check("LiteLLM's reported cost recorded", all(c.gateway and c.gateway.cost_usd for _, c in calls),
              sorted({c.gateway.cost_usd for _, c in calls if c.gateway}))
        sent = [r["body"] for r in state.requests]
        check("drop_params: the declared thinking field never reached the provider (the archive shows it sent)",
              not any("thinking" in b for b in sent)
              and all(json.loads(archive.get_text(c.request_blob)).get("thinking") for _, c in calls))
        state.requests.clear()
        no_retry = write_study(work, "noretry", base, 'headers = { x-litellm-num-retries = "0" }')
        check("study with x-litellm-num-retries = 0 completes", cli(["run", str(no_retry)]) == 0)
        records = Archive(work / "noretry").records()
        attempts = [e for r in records for e in r.events if isinstance(e, ModelAttemptEvent)]
        calls = model_calls(work / "noretry")
        check("retries kept in draligned: each upstream 500 is a recorded attempt, the gateway retried none",
              len(attempts) == sum(r.counters.failed_attempts for r in records) > 0
              and all(c.gateway and c.gateway.retries == 0 for _, c in calls),
              f"{len(attempts)} attempt(s) recorded, {len(state.requests)} upstream requests for {len(calls)} calls")
        wrong = write_study(work, "wrong", base, echo="fake-chat-2025-06-01")
        check("echo check against another model fails", cli(["run", str(wrong)]) == 1)
        reason = Archive(work / "wrong").records()[0].status_reason or ""
        check("its message says the gateway's model was checked",
              f"served model '{UPSTREAM}' (checked instead of the echo 'gw-chat'" in reason, reason)
        state.requests.clear()
        responses = write_study(work, "responses", base).read_text().replace('"openai-chat"', '"openai-responses"')
        (work / "responses.toml").write_text(responses.replace("request = { thinking", "request = { reasoning"))
        check("responses study (store = false) through LiteLLM completes",
              cli(["run", str(work / "responses.toml")]) == 0)
        follow = [r["body"] for r in state.requests if any(i.get("type") == "function_call_output"
                                                            for i in r["body"].get("input", []))]
        check("its follow-ups reached the provider with store = false and sealed reasoning items",
              bool(follow) and all(b.get("store") is False and any(
                  i.get("type") == "reasoning" and i.get("encrypted_content") for i in b["input"]) for b in follow),
              f"{len(follow)} follow-up(s)")
        read = evaluator_read(work, base)
        check("evaluator read through LiteLLM keeps headers and the served model", read, read)
    finally:
        proxy.terminate()
        proxy.wait(timeout=30)
        upstream.shutdown()
    print(f"{len(FAILURES)} failure(s); files in {work}")


def evaluator_read(work: Path, base: str) -> bool:
    path = write_evaluator(work / "eval.toml", """evaluator_id = "gw-eval-v1"
description = "an evaluator behind LiteLLM"
max_tokens = 512
concurrency = 2""", f"""name = "gw-read"
protocol = "openai-chat"
model = "gw-chat"
base_url = "{base}"
api_key_env = "LITELLM_KEY"
checks = {{ accepted_model_echoes = ["{UPSTREAM}"] }}""")
    cli(["read", str(work / "plain"), "--evaluator", str(path), "--phase", "final"])
    reads = list(ReadStore(Archive(work / "plain"), "gw-eval-v1").reads().values())
    return bool(reads) and all(r.gateway and r.gateway.served_model == UPSTREAM and r.headers_blob for r in reads)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description="issue 12 §1 against the real LiteLLM proxy")
    p.add_argument("--litellm", default="litellm", help="the litellm console script (from its own venv)")
    p.add_argument("--port", type=int, default=18802)
    a = p.parse_args()
    run(a.litellm, a.port)
    raise SystemExit(len(FAILURES))
