"""Studies over the live web backends: the sim agent against loopback servers speaking each provider's wire
format, through the real clients (tavily-python, exa-py, httpx)."""

from __future__ import annotations

import json
import re

import pytest

from draligned.archive import Archive
from draligned.audit import make_report, read_and_index
from draligned.cards import Card
from draligned.cli import main
from draligned.evaluator.config import load_evaluator
from draligned.evaluator.storage import ReadStore
from draligned.indexing import verify
from draligned.records import FetchAttemptEvent
from draligned.study import StudyError, load_study
from draligned.workflow import run_study_file
from tests.harness_helpers import needs_bwrap
from tests.study_helpers import REPO, run, write_study
from tests.web_helpers import KEY_ENV, returns, search_table, tool_events, web_study
from tests.web_servers import KEY, SEARCH_PATHS, PageServer, ProviderServer

BACKENDS = [("tavily", "http"), ("tavily", "tavily"), ("exa", "http"), ("exa", "exa"), ("brave", "http"),
            ("searxng", "http")]


pytestmark = pytest.mark.usefixtures("web_key")


def _by_arm(archive: Archive) -> dict[str, object]:
    return {r.slot.arm: r for r in archive.records()}


@pytest.mark.parametrize(("kind", "reader"), BACKENDS, ids=lambda v: str(v))
def test_the_sim_agent_runs_over_each_backend_within_the_contract_caps(tmp_path, web_pages, kind, reader):
    with ProviderServer(kind, web_pages) as provider:
        result = run(web_study(tmp_path, kind, provider.url, reader))
    assert result.statuses == {"completed": 2}
    archive = result.archive
    assert verify(archive) == []
    sent = provider.requests(SEARCH_PATHS[kind])
    assert sent, "the provider was never asked"
    first = sent[0]
    headers = {k.lower(): v for k, v in first["headers"].items()}
    if kind == "tavily":
        assert headers["authorization"] == f"Bearer {KEY}" and first["body"]["max_results"] == 6
    elif kind == "exa":
        assert headers["x-api-key"] == KEY and first["body"]["numResults"] == 6
    elif kind == "brave":
        assert headers["x-subscription-token"] == KEY and first["query"]["count"] == ["6"]
    else:
        assert first["query"]["format"] == ["json"]
    for record in archive.records():
        for text in returns(archive, record, "search"):
            blocks = text.split("\n\n")
            assert len(blocks) <= 6 and all(len(b.split("\nSnippet: ")[1]) <= 400 for b in blocks)
        reads = returns(archive, record, "read")
        assert reads and all(len(t) <= 6000 for t in reads)
        for ev in tool_events(record):
            a = ev.acquisition
            assert a is not None and a.store_key and a.raw_blob and a.entry_blob and a.fetched_at
            assert archive.get_blob(a.raw_blob)  # the raw provider body is in the archive
    if reader != "http":
        assert provider.requests({"tavily": "/extract", "exa": "/contents"}[reader])
        assert not web_pages.log  # the provider read the web_pages, not draligned


def test_p_and_q_issuing_one_query_get_identical_return_blobs(tmp_path, web_pages):
    with ProviderServer("tavily", web_pages) as provider:
        result = run(web_study(tmp_path, "tavily", provider.url))
    arms = _by_arm(result.archive)
    p, q = (tool_events(arms[a]) for a in ("P", "Q"))
    shared = {e.request_text for e in p} & {e.request_text for e in q}
    assert shared, "the sim agent shares queries and URLs between its arms"
    for text in shared:
        ep = next(e for e in p if e.request_text == text)
        eq = next(e for e in q if e.request_text == text)
        assert ep.return_blob == eq.return_blob and ep.acquisition.store_key == eq.acquisition.store_key
        assert ep.acquisition.raw_blob == eq.acquisition.raw_blob
        assert sorted([ep.acquisition.live, eq.acquisition.live]) == [False, True]  # one fetch, one hit
    queries = [r["body"]["query"] for r in provider.requests("/search")]
    assert len(queries) == len(set(queries))  # every distinct query went to the provider once


def test_a_429_is_retried_honouring_retry_after_and_each_attempt_recorded(tmp_path, web_pages):
    faults = {"/search": {1: (429, {"Retry-After": "7"}), 2: (503, {})}}
    with ProviderServer("tavily", web_pages, faults=faults) as provider:
        result = run(web_study(tmp_path, "tavily", provider.url))
    assert result.statuses == {"completed": 2}
    attempts = [e for r in result.archive.records() for e in r.events if isinstance(e, FetchAttemptEvent)]
    assert [(a.attempt.error, a.attempt.status_code) for a in attempts] == [("rate_limited", 429),
                                                                            ("provider_error", 503)]
    assert attempts[0].attempt.wait_s >= 7 and attempts[0].tool == "search"
    record = next(r for r in result.archive.records() if any(e in r.events for e in attempts))
    after = record.events[record.events.index(attempts[-1]) + 1]
    assert after.type == "tool_call" and after.error is None and after.acquisition.live
    assert len(provider.requests("/search")) == 2 + len({e.request_text for r in result.archive.records()
                                                         for e in tool_events(r, "search")})


def test_a_provider_that_keeps_failing_is_a_named_tool_error_not_a_crashed_run(tmp_path, web_pages):
    faults = {"/search": {n: (500, {}) for n in range(1, 100)}}
    with ProviderServer("tavily", web_pages, faults=faults) as provider:
        result = run(web_study(tmp_path, "tavily", provider.url))
    for record in result.archive.records():
        assert record.status != "failed" or "harness error" not in (record.status_reason or "")
        searches = tool_events(record, "search")
        assert searches and all(e.error == "provider_error" for e in searches)
        assert "(provider_error)" in result.archive.get_text(searches[0].return_blob)
    assert not (result.archive.root / "acquisition" / "entries").exists()  # faults are not stored
    assert len(provider.requests("/search")) >= 3


def test_read_only_replay_sends_nothing_and_returns_the_same_bytes(tmp_path, web_pages, monkeypatch):
    with ProviderServer("brave", web_pages) as provider:
        study = web_study(tmp_path, "brave", provider.url)
        first = run(study)
        sent, fetched = len(provider.log), len(web_pages.log)
        monkeypatch.delenv(KEY_ENV)  # a replay needs no key
        replay = run_study_file(study, tmp_path / "new", acquisition_store=first.archive.root / "acquisition")
        assert (len(provider.log), len(web_pages.log)) == (sent, fetched)  # zero requests
    old, new = _by_arm(first.archive), _by_arm(replay.archive)
    assert replay.statuses == {"completed": 2}
    for arm in ("P", "Q"):
        assert [e.return_blob for e in tool_events(old[arm])] == [e.return_blob for e in tool_events(new[arm])]
        assert not any(e.acquisition.live for e in tool_events(new[arm]))
    assert verify(replay.archive) == []


def test_a_read_only_miss_is_not_in_store_and_never_a_live_call(tmp_path, web_pages, monkeypatch):
    with ProviderServer("exa", web_pages) as provider:
        study = web_study(tmp_path, "exa", provider.url, extra='cache = "read-only"\n')
        monkeypatch.delenv(KEY_ENV)
        result = run(study)
        assert provider.log == [] and web_pages.log == []
    for record in result.archive.records():
        searches = tool_events(record, "search")
        assert searches and all(e.error == "not_in_store" and not e.acquisition.live for e in searches)


def test_export_writes_a_corpus_that_an_offline_rerun_completes_on(tmp_path, web_pages, capsys):
    with ProviderServer("searxng", web_pages) as provider:
        live = run(web_study(tmp_path, "searxng", provider.url))
    out = tmp_path / "snap" / "corpus.jsonl"
    assert main(["acquisition", "export", str(live.archive.root), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    snapshot = json.loads((tmp_path / "snap" / "corpus.snapshot.json").read_text())
    assert re.search(r"snapshot of the web as fetched from \S+ to \S+", printed)
    assert snapshot["first_fetch"] <= snapshot["last_fetch"] and snapshot["pages"] >= 1
    (tmp_path / "offline").mkdir()
    offline = write_study(tmp_path / "offline", ["travel_budget_en.json"], name="offline")
    offline.write_text(re.sub(r'corpus = ".*"', f'corpus = "{out}"', offline.read_text()))
    with PageServer() as quiet_pages:
        rerun = run(offline)
        assert quiet_pages.log == []
    assert rerun.statuses == {"completed": 2}
    live_reads = {e.request_text for r in live.archive.records() for e in tool_events(r, "read") if not e.error}
    offline_reads = [e for r in rerun.archive.records() for e in tool_events(r, "read")]
    assert offline_reads and all(e.error is None for e in offline_reads if e.request_text in live_reads)
    assert main(["acquisition", "export", str(live.archive.root), "--out", str(out)]) == 0  # same bytes: fine


def test_acquisition_stats_and_archive_stats_report_the_web_figures(tmp_path, web_pages, capsys):
    faults = {"/search": {1: (429, {"Retry-After": "1"})}}
    with ProviderServer("tavily", web_pages, faults=faults) as provider:
        result = run(web_study(tmp_path, "tavily", provider.url))
    capsys.readouterr()
    assert main(["acquisition", "stats", str(result.archive.root), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    events = [e for r in result.archive.records() for e in tool_events(r)]
    assert stats["searches"] + stats["reads"] == len(events)
    assert stats["live"] == sum(e.acquisition.live for e in events) and stats["store_hits"] >= 1
    assert stats["failed_attempts"] == 1 and stats["bytes"] > 0 and stats["first_fetch"]
    assert main(["archive", "stats", str(result.archive.root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["acquisition"] == stats
    assert main(["archive", "stats", str(result.archive.root)]) == 0
    assert "web acquisition:" in capsys.readouterr().out


@pytest.mark.parametrize(("table", "field"), [
    ('backend = "bing"', "search.backend"),
    ('backend = "brave"\nreader = "tavily"', "search.reader"),
    ('backend = "tavily"\noptions = { search_depth = 3 }', "search.options.search_depth"),
    ('backend = "tavily"\noptions = { max_results = 3 }', "search.options.max_results"),
    ('backend = "searxng"', "search.base_url"),
    ('backend = "corpus"\nreader = "http"', "search.reader"),
])
def test_bad_web_configuration_names_file_and_field(tmp_path, table, field):
    study = write_study(tmp_path, ["travel_budget_en.json"], extra=f"[search]\n{table}\n")
    with pytest.raises(StudyError, match=rf"{re.escape(str(study))}: field {re.escape(field)}:"):
        load_study(study)


def test_a_missing_key_stops_the_study_before_any_run(tmp_path, web_pages, monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    with ProviderServer("tavily", web_pages) as provider:
        study = web_study(tmp_path, "tavily", provider.url)
        with pytest.raises(StudyError, match=rf"{re.escape(str(study))}: field search.api_key_env: .*{KEY_ENV}"):
            run(study)
        assert provider.log == []
    assert not (tmp_path / "archive" / "runs").exists()


def test_the_run_command_replays_with_acquisition_store_and_exits_2_on_bad_use(tmp_path, web_pages, capsys):
    with ProviderServer("tavily", web_pages) as provider:
        study = web_study(tmp_path, "tavily", provider.url)
        assert main(["run", str(study)]) == 0
        n = len(provider.log)
        store = tmp_path / "archive" / "acquisition"
        assert main(["run", str(study), "--archive", str(tmp_path / "new"), "--acquisition-store", str(store)]) == 0
        assert len(provider.log) == n
    (tmp_path / "c").mkdir()
    corpus_study = write_study(tmp_path / "c", ["travel_budget_en.json"])
    assert main(["run", str(corpus_study), "--acquisition", "read-only"]) == 2
    assert "field search.backend" in capsys.readouterr().err


def test_the_example_web_study_loads_without_network(repo, monkeypatch):
    study = load_study(repo / "studies" / "web.example.toml")
    assert study.spec.search.backend == "tavily" and study.spec.search.key_env == "TAVILY_API_KEY"
    assert any(m.protocol != "sim" for m in study.spec.models)
    assert {c.card.card_id for c in study.cards} == {"travel_budget_en", "learning_residence_zh",
                                                     "career_mobility_en", "car_insurance_2f_en"}
    assert len(study.slots("identity")) == 10  # 3 one-factor cards x 2 arms + 4 cells


@pytest.mark.slow
def test_packets_hold_no_tool_return_even_when_a_page_carries_an_endpoint_text(tmp_path, web_pages):
    card = Card.model_validate_json((REPO / "factor_cards" / "travel_budget_en.json").read_text())
    endpoint = card.factors[0].endpoints.P
    marker = "Page-only sentence from a travel forum, never written by the agent."
    html = f"<html><head><title>Forum</title></head><body><article><p>{endpoint}</p><p>{marker}</p>" \
           f"<p>{' '.join(['Hostels and trains in Kyoto.'] * 30)}</p></article></body></html>"
    web_pages.pages["/forum"] = (200, {"Content-Type": "text/html; charset=utf-8"}, html.encode())
    with ProviderServer("tavily", web_pages, results=["/forum", "/kyoto-hostels"]) as provider:
        result = run(web_study(tmp_path, "tavily", provider.url))
    archive = result.archive
    read_and_index(archive, load_evaluator(REPO / "evaluators" / "sim.toml"))
    manifests = ReadStore(archive, "sim-lexical-v1").manifests()
    assert manifests and not any(m.blocked for m in manifests)
    records = {r.run_id: r for r in archive.records()}
    forum_reads = [ev for r in records.values() for ev in tool_events(r, "read") if ev.request_text.endswith("/forum")]
    assert forum_reads and endpoint in archive.get_text(forum_reads[0].return_blob)
    for m in manifests:
        prompt = archive.get_text(m.prompt_blob)
        record = records[m.run_id]
        own = "".join(archive.get_text(e.blob) for e in record.events if e.type in ("draft", "final"))
        for ev in tool_events(record):
            assert archive.get_text(ev.return_blob) not in prompt
        assert marker not in prompt or marker in own  # only the agent's own text is read
        assert "Snippet:" not in prompt
    plan = tmp_path / "plan.toml"  # mechanical provenance (Table 35) over web returns
    plan.write_text(re.sub(r"studies = \[.*\]", 'studies = ["web"]', (REPO / "analysis" / "demo.toml").read_text()))
    report = make_report(archive.root, plan, "sim-lexical-v1", tmp_path / "report")
    rows = (report.tables / "provenance.csv").read_text().splitlines()
    assert rows[1].split(",")[2:4] != ["0", "0"] and rows[1].split(",")[-1] == "2"  # linked, total; runs


@pytest.mark.slow
@pytest.mark.parametrize("harnesses", [pytest.param('["H-W", "H-D"]', marks=needs_bwrap)])
def test_the_workspace_harnesses_search_and_read_the_web_too(tmp_path, web_pages, harnesses):
    with ProviderServer("brave", web_pages) as provider:
        study = write_study(tmp_path, ["travel_budget_en.json"], name="web",
                            extra=f"harnesses = {harnesses}\n" + search_table("brave", provider.url))
        result = run(study)
    assert result.statuses == {"completed": 4}
    for record in result.archive.records():
        events = tool_events(record)
        assert events and all(e.acquisition is not None for e in events)


def test_the_acquisition_commands_exit_2_naming_what_is_wrong(tmp_path, capsys):
    (tmp_path / "c").mkdir()
    corpus_run = run(write_study(tmp_path / "c", ["travel_budget_en.json"]))
    capsys.readouterr()
    assert main(["acquisition", "export", str(corpus_run.archive.root), "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "no web search hit or page read to export" in capsys.readouterr().err
    assert main(["acquisition", "stats", str(tmp_path / "nowhere")]) == 2
    assert "not an archive" in capsys.readouterr().err
    assert main(["acquisition", "stats", str(corpus_run.archive.root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["searches"] == 0  # corpus returns are not web acquisitions
