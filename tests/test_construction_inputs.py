"""PDR-Bench loading (both languages, stringified attribute groups parsed safely, errors naming file,
line and field) and the bad inputs of card construction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from draligned.cards import Card
from draligned.cli import main
from draligned.construction.pdrbench import PdrBenchError, load_pairs, load_personas, load_tasks, parse_group
from draligned.construction.prompts import PROPOSAL_PROMPT, prompt_file, proposal_schema_json
from draligned.construction.propose import language_problems, load_inputs, render_prompt
from draligned.construction.sim import propose
from tests.fake_providers import Error, FakeProvider, Wire
from tests.loopback_wire import WireServer

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "construction" / "pdr_sample"
SHARED = Path("/work/shared/data/pdr-bench")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_bundled_sample_loads_in_both_languages(lang):
    tasks, personas, pairs = load_inputs(SAMPLE / f"tasks_{lang}.jsonl", SAMPLE / f"personas_{lang}.jsonl",
                                         SAMPLE / f"queries_{lang}.jsonl")
    assert sorted(tasks) == [1, 2, 3, 4, 11, 12]
    assert {t.language for t in tasks.values()} == {lang}
    assert sorted(personas) == ["User1", "User2", "User5", "User8"]
    assert [(p.taskid, p.userid) for p in pairs][:2] == [(1, "User1"), (2, "User2")]
    gender = dict(personas["User1"].attributes())
    key = "Basic Attributes > Identity Characteristics > Gender" if lang == "en" else "基础属性 > 身份特征 > 性别"
    assert gender[key] == ("Male" if lang == "en" else "男")


@pytest.mark.skipif(not SHARED.exists(), reason="the shared PDR-Bench copy is not on this machine")
def test_the_full_shared_files_load():
    for lang in ("en", "zh"):
        assert len(load_tasks(SHARED / f"tasks_{lang}.jsonl")) == 50
        assert len(load_personas(SHARED / f"personas_{lang}.jsonl")) == 25
        assert len(load_pairs(SHARED / f"queries250_{lang}.jsonl")) == 250


def _stringified(tmp_path: Path, style: str) -> Path:
    """The sample's English personas with every attribute group written as a string."""
    out = []
    for line in (SAMPLE / "personas_en.jsonl").read_text().splitlines():
        obj = json.loads(line)
        dump = repr if style == "python" else (lambda v: json.dumps(v, ensure_ascii=False))
        out.append(json.dumps({k: v if k == "userid" else dump(v) for k, v in obj.items()}, ensure_ascii=False))
    path = tmp_path / f"personas_{style}.jsonl"
    path.write_text("\n".join(out) + "\n")
    return path


@pytest.mark.parametrize("style", ["python", "json"])
def test_stringified_attribute_groups_parse_to_the_same_persona(tmp_path, style):
    plain = load_personas(SAMPLE / "personas_en.jsonl")
    assert load_personas(_stringified(tmp_path, style)) == plain


def test_an_unparseable_attribute_dict_names_file_line_and_field(tmp_path):
    path = tmp_path / "personas.jsonl"
    good = json.dumps({"userid": "User1", "Basic Attributes": "{'Identity': {'Age': '30'}}"})
    bad = json.dumps({"userid": "User2", "Health Status": "{'Physical': {'Condition': 'fine'"})
    path.write_text(good + "\n" + bad + "\n")
    with pytest.raises(PdrBenchError, match=r"personas\.jsonl:2: Health Status: unparseable attribute group"):
        load_personas(path)


def test_a_stringified_group_is_never_evaluated(tmp_path):
    marker = tmp_path / "evaluated"
    code = f"__import__('pathlib').Path({str(marker)!r}).write_text('x')"
    with pytest.raises(ValueError, match="not a dict literal"):
        parse_group(code)
    path = tmp_path / "personas.jsonl"
    path.write_text(json.dumps({"userid": "User1", "Basic Attributes": code}) + "\n")
    with pytest.raises(PdrBenchError, match=":1: Basic Attributes:"):
        load_personas(path)
    assert not marker.exists()
    with pytest.raises(ValueError, match="expected a dict"):
        parse_group("['a', 'list']")


def test_task_and_query_errors_name_file_line_and_field(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"taskid": 1, "domain": "D", "language": "en", "task": "x"}\n'
                     '{"taskid": 2, "domain": "D", "language": "fr", "task": "y"}\n')
    with pytest.raises(PdrBenchError, match=r"tasks\.jsonl:2: language: expected en or zh"):
        load_tasks(tasks)
    tasks.write_text('{"taskid": 1, "domain": "D", "language": "en"}\n')
    with pytest.raises(PdrBenchError, match=r"tasks\.jsonl:1: task: missing"):
        load_tasks(tasks)
    pairs = tmp_path / "q.jsonl"
    pairs.write_text('{"taskid": 1, "userid": "User1"}\nnot json\n')
    with pytest.raises(PdrBenchError, match=r"q\.jsonl:2: \(line\): not JSON"):
        load_pairs(pairs)


def test_a_task_whose_user_has_no_persona_is_an_error(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"taskid": 1, "userid": "User1"}\n{"taskid": 2, "userid": "User99"}\n')
    with pytest.raises(PdrBenchError, match=r"pairs\.jsonl:2: userid: task 2 names user User99, who has no persona"):
        load_inputs(SAMPLE / "tasks_en.jsonl", SAMPLE / "personas_en.jsonl", pairs)
    pairs.write_text('{"taskid": 77, "userid": "User1"}\n')
    with pytest.raises(PdrBenchError, match=r"pairs\.jsonl:1: taskid: task 77 is not in the tasks file"):
        load_inputs(SAMPLE / "tasks_en.jsonl", SAMPLE / "personas_en.jsonl", pairs)


def test_cli_bad_input_exits_2_naming_the_problem(tmp_path, capsys):
    personas = tmp_path / "personas.jsonl"
    personas.write_text(json.dumps({"userid": "User1", "Environment": "{'Time': "}) + "\n")
    code = main(["cards", "propose", "--tasks", str(SAMPLE / "tasks_en.jsonl"), "--personas", str(personas),
                 "--model", "sim", "--out", str(tmp_path / "out")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "personas.jsonl:1: Environment: unparseable attribute group" in err
    assert not (tmp_path / "out").exists()


def test_the_committed_proposal_schema_is_derived_from_the_card_schema():
    committed = (REPO / "construction" / "prompts" / "proposal.v1.schema.json").read_text(encoding="utf-8")
    assert committed == proposal_schema_json(), "regenerate with proposal_schema_json() under a new version name"


def model_file(tmp_path: Path, fp: FakeProvider | WireServer, name: str = "remote") -> Path:
    """A model TOML for a loopback server of either set (key in FAKE_PROVIDER_KEY)."""
    path = tmp_path / f"{name}.toml"
    path.write_text(f"""[model]
name = "{name}"
protocol = "{fp.protocol}"
model = "fake-{fp.protocol}"
base_url = "{fp.base_url}"
api_key_env = "FAKE_PROVIDER_KEY"
retry = {{ initial_wait_s = 0.01, timeout_s = 5.0, max_attempts = 2 }}
""")
    return path


def test_a_proposal_in_the_wrong_language_fails_with_the_field(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_PROVIDER_KEY", "sk-test")
    en_tasks, personas, _ = load_inputs(SAMPLE / "tasks_en.jsonl", SAMPLE / "personas_en.jsonl",
                                            SAMPLE / "queries_en.jsonl")
    english = propose(render_prompt(prompt_file(PROPOSAL_PROMPT), en_tasks[1], personas["User1"], "single"))
    zh_tasks = load_tasks(SAMPLE / "tasks_zh.jsonl")
    wire = Wire("openai-chat", "fake-echo")
    one_pair = tmp_path / "pairs.jsonl"
    one_pair.write_text('{"taskid": 1, "userid": "User1"}\n')
    with FakeProvider("openai-chat", script=[wire.reply(text=json.dumps(english))]) as fp:
        code = main(["cards", "propose", "--tasks", str(SAMPLE / "tasks_zh.jsonl"),
                     "--personas", str(SAMPLE / "personas_en.jsonl"), "--pairs", str(one_pair),
                     "--model", str(model_file(tmp_path, fp)), "--out", str(tmp_path / "out")])
        sent = fp.log[0]["body"]["messages"][0]["content"]
    assert zh_tasks[1].task in sent and "Chinese (zh)" in sent  # the zh task was asked for, in Chinese
    card = Card.model_validate_json((tmp_path / "out" / "pdr_zh_t1_user1.json").read_bytes())
    reason = card.status.decisions[-1].reason
    assert card.status.current == "FAIL" and card.status.decisions[-1].outcome == "FAIL"
    assert "factors[0].endpoints.P: written in English, but the task is in Chinese (zh)" in reason
    assert language_problems(card.model_copy(update={"task": card.task.model_copy(update={"language": "en"})})) == []
    assert code == 0 and len(fp.log) == 1


def test_unusable_replies_model_errors_and_a_missing_key(tmp_path, monkeypatch, capsys):
    """A reply that fails the schema is recorded with its raw text and no card; a failed call leaves the
    pair for the next run (exit 1); a missing key stops before any call (exit 2)."""
    one_pair = tmp_path / "pairs.jsonl"
    one_pair.write_text('{"taskid": 1, "userid": "User1"}\n')
    args = ["cards", "propose", "--tasks", str(SAMPLE / "tasks_en.jsonl"), "--personas",
            str(SAMPLE / "personas_en.jsonl"), "--pairs", str(one_pair), "--out", str(tmp_path / "out"), "--model"]
    wire = Wire("anthropic", "echo")
    with FakeProvider("anthropic", script=[wire.reply(text='{"profile": "x"}'), Error(400), Error(400)]) as fp:
        assert main([*args, str(model_file(tmp_path, fp))]) == 2  # FAKE_PROVIDER_KEY is not set
        assert "FAKE_PROVIDER_KEY" in capsys.readouterr().err and fp.log == []
        monkeypatch.setenv("FAKE_PROVIDER_KEY", "sk-test")
        assert main([*args, str(model_file(tmp_path, fp))]) == 0
        printed = capsys.readouterr().out
        assert "UNUSABLE en_t1_User1_single: schema: (root): 'factors' is a required property" in printed
        record = json.loads((tmp_path / "out" / "proposals" / "en_t1_User1_single.json").read_text())
        assert record["cards"] == [] and record["prompt"].startswith("proposal.v1.md@")
        raw = (tmp_path / "out" / "responses" / f"{record['response_sha256']}.txt").read_text()
        assert '{\\"profile\\": \\"x\\"}' in raw
        two = tmp_path / "pairs2.jsonl"
        two.write_text('{"taskid": 2, "userid": "User2"}\n')
        assert main([*args[:7], str(two), *args[8:], str(model_file(tmp_path, fp))]) == 1
        assert "MODEL ERROR task 2 / User2" in capsys.readouterr().err
    assert not (tmp_path / "out" / "proposals" / "en_t2_User2_single.json").exists()
