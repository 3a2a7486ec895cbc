"""A truncated evaluator reply is never a read, through each real SDK and its wire format: chat
``finish_reason: "length"``, responses ``status: "incomplete"``, Anthropic ``stop_reason: "max_tokens"``
(issue 11: 12 of 12 such replies, whose text happened to parse, were ingested)."""

from __future__ import annotations

import shutil

import pytest

from draligned.archive import Archive
from draligned.cli import main
from draligned.evaluator.storage import ReadStore
from tests.fake_providers import FakeProvider, Wire
from tests.study_helpers import run, write_evaluator, write_study

PROTOCOLS = ("openai-chat", "openai-responses", "anthropic")
pytestmark = pytest.mark.slow  # a few seconds: a small study plus reads through three SDKs


def _evaluator_file(tmp_path, protocol: str, base_url: str):
    return write_evaluator(tmp_path / f"{protocol}.toml", f"""evaluator_id = "cut-{protocol}"
concurrency = 4""", f"""name = "cut"
protocol = "{protocol}"
model = "fake-{protocol}"
base_url = "{base_url}"
api_key_env = "FAKE_PROVIDER_KEY"
retry = {{ initial_wait_s = 0.01, timeout_s = 5.0 }}""")


@pytest.fixture(scope="module")
def small_archive(tmp_path_factory):
    """One pair of sim-agent runs (H00) to read."""
    tmp = tmp_path_factory.mktemp("small")
    run(write_study(tmp, ["travel_budget_en.json"]))
    return tmp / "archive"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_truncated_reply_whose_text_parses_is_read_failed_truncated(small_archive, tmp_path, protocol,
                                                                      monkeypatch, capsys):
    monkeypatch.setenv("FAKE_PROVIDER_KEY", "sk-fake")
    archive = shutil.copytree(small_archive, tmp_path / "archive")
    cut = Wire(protocol, "fake-model").reply(text='{"items": []}', finish="length")  # valid JSON, schema-valid
    with FakeProvider(protocol, [cut] * 2000) as fp:
        code = main(["read", str(archive), "--evaluator", str(_evaluator_file(tmp_path, protocol, fp.base_url)),
                     "--phase", "final"])
    assert code == 0, capsys.readouterr().err
    reads = list(ReadStore(Archive(archive), f"cut-{protocol}").reads().values())
    assert reads and all(r.status == "READ_FAILED" and r.finish_reason == "length" for r in reads)
    assert all(r.error is not None and r.error.startswith("truncated") for r in reads)
    assert Archive(archive).get_text(reads[0].text_blob) == '{"items": []}'  # the raw text is kept
