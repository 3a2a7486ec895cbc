"""Whole studies against loopback servers of all three protocols through the real SDKs:
retries recorded, key never archived, exact-input replay with zero requests, stats and cost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from draligned.archive import Archive
from draligned.cli import main
from draligned.indexing import verify
from draligned.records import FinalEvent, ModelAttemptEvent, ModelCallEvent
from tests.fake_providers import Error, FakeProvider, provider_study

KEY = "sk-fake-0123456789-DO-NOT-ARCHIVE"
PROTOCOLS = ("openai-chat", "openai-responses", "anthropic")


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FAKE_PROVIDER_KEY", KEY)
    return KEY


def files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def run_cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_study_on_three_protocols_retries_hides_key_and_replays_read_only(tmp_path, key, capsys,
                                                                          monkeypatch):
    scripts = {p: [Error(429, {"retry-after": "2"}), Error(500)] for p in PROTOCOLS}
    with FakeProvider("openai-chat", scripts["openai-chat"]) as chat, \
            FakeProvider("openai-responses", scripts["openai-responses"]) as resp, \
            FakeProvider("anthropic", scripts["anthropic"]) as anth:
        servers = {"openai-chat": chat, "openai-responses": resp, "anthropic": anth}
        study = provider_study(tmp_path, servers, study_extra='cache = "read-write"',
                               model_extra="price = { input = 2.0, output = 8.0, cached_input = 0.5 }")
        code, out, err = run_cli(capsys, "run", str(study))
        assert code == 0, out + err
        archive = Archive(tmp_path / "archive")
        records = archive.records()
        assert len(records) == 6 and {r.status for r in records} == {"completed"}
        assert verify(archive) == []

        # Every attempt is an event: one 429 (Retry-After honoured) and one 500 per protocol.
        for proto in PROTOCOLS:
            attempts = [e.attempt for r in records if r.protocol == proto for e in r.events
                        if isinstance(e, ModelAttemptEvent)]
            assert sorted(a.status_code for a in attempts) == [429, 500]
            assert next(a for a in attempts if a.status_code == 429).wait_s == 2.0
            assert sum(r.counters.failed_attempts for r in records if r.protocol == proto) == 2
            # Retries do not change what the agent sees: a retried request is resent byte-identical.
            bodies = [json.dumps(entry["body"], sort_keys=True) for entry in servers[proto].log]
            calls = sum(r.counters.model_calls for r in records if r.protocol == proto)
            assert len(bodies) == calls + 2 and len(set(bodies)) == calls

        for r in records:
            calls = [e for e in r.events if isinstance(e, ModelCallEvent)]
            assert r.requested_model == f"fake-{r.protocol}"
            assert {c.model_echo for c in calls} == {"fake-model-2026-01-01"}
            assert archive.get_text(r.final_blob).startswith("Final. Report for:")
            assert r.counters.cost_usd is not None and r.counters.usage.cached_tokens == 40

        # The key went out in a header and was never archived.
        for fp in servers.values():
            sent = fp.log[0]["headers"]
            assert KEY in (sent.get("authorization", "") + sent.get("Authorization", "") + sent.get("x-api-key", ""))
        assert all(KEY.encode() not in p.read_bytes() for p in files_under(tmp_path / "archive"))

        code, out, _ = run_cli(capsys, "archive", "stats", str(archive.root), "--json")
        stats = json.loads(out)
        assert stats["runs"] == stats["completed_runs"] == 6 and stats["failed_attempts"] == 6
        assert stats["cached_tokens"] == 6 * 40 and stats["cost_usd"] > 0
        assert set(stats["by_model"]) == set(PROTOCOLS)
        assert {"runs", "completed_runs", "model_calls", "tool_calls", "blobs"} <= stats.keys()

        # Read-only replay into a fresh archive: no key needed, no request reaches any server, same finals.
        monkeypatch.delenv("FAKE_PROVIDER_KEY")
        sent_before = {p: len(fp.log) for p, fp in servers.items()}
        replay = tmp_path / "replay"
        code, out, err = run_cli(capsys, "run", str(study), "--archive", str(replay), "--cache", "read-only",
                                 "--cache-dir", str(archive.root / "cache"))
        assert code == 0, out + err
        assert {p: len(fp.log) for p, fp in servers.items()} == sent_before
    replayed = Archive(replay).records()
    assert {r.status for r in replayed} == {"completed"}
    assert sorted(r.final_blob for r in replayed) == sorted(r.final_blob for r in records)
    calls = [e for r in replayed for e in r.events if isinstance(e, ModelCallEvent)]
    assert calls and all(c.cache_hit for c in calls)
    assert not any(isinstance(e, ModelAttemptEvent) for r in replayed for e in r.events)
    assert sum(r.counters.cache_hits for r in replayed) == sum(r.counters.model_calls for r in replayed)


def test_read_only_miss_fails_the_run_without_a_request(tmp_path, key):
    with FakeProvider("openai-chat") as fp:
        study = provider_study(tmp_path, {"openai-chat": fp}, study_extra='cache = "read-only"\narms = ["P"]')
        assert main(["run", str(study)]) == 1
        assert fp.log == []
    (rec,) = Archive(tmp_path / "archive").records()
    assert rec.status == "failed" and "read-only replay cache has no entry" in rec.status_reason


def test_missing_key_fails_only_that_study_naming_model_and_variable(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("FAKE_PROVIDER_KEY", raising=False)
    with FakeProvider("anthropic") as fp:
        study = provider_study(tmp_path, {"anthropic": fp})
        code, _, err = run_cli(capsys, "run", str(study))
        assert fp.log == []
    assert code == 2
    assert "model 'anthropic'" in err and "FAKE_PROVIDER_KEY" in err
    assert not (tmp_path / "archive").exists()


def test_connection_limit_is_shared_by_all_runs_of_a_study(tmp_path, key):
    with FakeProvider("openai-chat", delay_s=0.02) as fp:
        study = provider_study(tmp_path, {"openai-chat": fp}, seeds=2, retry={"max_connections": 1})
        assert main(["run", str(study)]) == 0
    assert len(fp.log) == 16 and fp.max_in_flight == 1


def test_replicates_do_not_collapse_in_the_cache(tmp_path, key):
    with FakeProvider("openai-chat") as fp:
        study = provider_study(tmp_path, {"openai-chat": fp}, seeds=2,
                               study_extra='cache = "read-write"\narms = ["P"]')
        assert main(["run", str(study)]) == 0
        assert len(fp.log) == 8  # two replicates, four calls each, none served from the other's entries
    records = Archive(tmp_path / "archive").records()
    assert not any(e.cache_hit for r in records for e in r.events if isinstance(e, ModelCallEvent))
    assert all(any(isinstance(e, FinalEvent) for e in r.events) for r in records)
