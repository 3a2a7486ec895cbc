"""Study files, slots, the simulator's contract and the run command's errors."""

from __future__ import annotations

import json

import pytest

from draligned.archive import Archive
from draligned.cli import main
from draligned.executors import EXECUTORS
from draligned.models.sim import SIM_LABEL
from draligned.records import ToolCallEvent
from draligned.study import StudyError, load_study
from tests.study_helpers import REPO, records, run, write_study


def test_slots_are_the_cartesian_product_with_stable_ids(tmp_path):
    study = load_study(write_study(tmp_path, ["car_insurance_2f_en.json", "travel_budget_en.json"], seeds=3))
    slots = study.slots("c" * 64)
    assert len(slots) == (4 + 2) * 3
    assert len({s.slot_id for s in slots}) == len(slots)
    assert [s.slot_id for s in slots] == [s.slot_id for s in study.slots("c" * 64)]
    assert all(s.slot_id not in {t.slot_id for t in study.slots("d" * 64)} for s in slots)


def test_study_errors_name_file_and_field(tmp_path):
    bad = tmp_path / "bad.toml"
    model = '[[models]]\nname = "m"\nprotocol = "sim"\nmodel = "sim-agent-v1"\n'
    bad.write_text('name = "x"\ncards = ["c.json"]\ncorpus = "c"\nseeds = 0\n' + model)
    with pytest.raises(StudyError, match=r"bad.toml: field seeds"):
        load_study(bad)
    bad.write_text('name = "x"\ncards = ["nothing*.json"]\ncorpus = "c"\n' + model)
    with pytest.raises(StudyError, match=r"field cards: 'nothing\*.json' matches no card file"):
        load_study(bad)


def test_non_pass_card_cannot_be_run(tmp_path):
    card = json.loads((REPO / "factor_cards/travel_budget_en.json").read_text())
    card["status"]["current"] = "DISPUTED"
    (tmp_path / "disputed.json").write_text(json.dumps(card))
    study = tmp_path / "s.toml"
    study.write_text(write_study(tmp_path, ["travel_budget_en.json"]).read_text().replace(
        str(REPO / "factor_cards" / "travel_budget_en.json"), str(tmp_path / "disputed.json")))
    assert main(["run", str(study)]) == 2
    assert not (tmp_path / "archive").exists()


def test_unknown_protocol_fails_only_that_study_with_the_model_named(tmp_path, capsys):
    path = write_study(tmp_path, ["travel_budget_en.json"])
    path.write_text(path.read_text().replace('protocol = "sim"', 'protocol = "carrier-pigeon"'))
    assert main(["run", str(path)]) == 2
    assert "model 'sim-agent': unknown protocol 'carrier-pigeon'" in capsys.readouterr().err


def test_sim_with_zero_sensitivity_issues_identical_requests_in_both_arms(tmp_path):
    result = run(write_study(tmp_path, ["travel_budget_en.json"], sensitivity=0.0))
    reqs = {r.slot.arm: [e.request_text for e in r.events if isinstance(e, ToolCallEvent) and e.request_text]
            for r in records(result)}
    assert reqs["P"] == reqs["Q"] and reqs["P"]


def test_sim_reports_are_labelled_as_simulator_output(tmp_path):
    result = run(write_study(tmp_path, ["learning_residence_zh.json"]))
    for r in records(result):
        assert SIM_LABEL in result.archive.get_text(r.final_blob)


def test_run_records_name_card_contract_and_request_fields(tmp_path):
    result = run(write_study(tmp_path, ["travel_budget_en.json"]))
    rec = records(result)[0]
    assert rec.slot.card_sha256 == __import__("draligned.hashing").hashing.sha256_file(
        REPO / "factor_cards/travel_budget_en.json")
    first_call = rec.events[0]
    assert first_call.request_fields == {"model": "sim-agent-v1", "seed": 0, "temperature": 1.0,
                                         "max_output_tokens": 16000, "parallel_tool_calls": False}
    body = json.loads(result.archive.get_text(first_call.request_blob))
    assert body["messages"][1]["content"] == result.archive.get_text(rec.user_message_blob)
    assert [t["name"] for t in body["tools"]] == ["search", "read", "write_report", "submit_report"]


def test_arms_that_no_card_has_are_refused_not_silently_dropped(tmp_path, capsys):
    path = write_study(tmp_path, ["travel_budget_en.json"], extra='arms = ["p", "Q"]')
    with pytest.raises(StudyError, match=r"t.toml: field arms: \['p'\] is not an arm of any listed card"):
        load_study(path)
    path = write_study(tmp_path, ["travel_budget_en.json", "car_insurance_2f_en.json"], extra='arms = ["P", "Q"]')
    with pytest.raises(StudyError, match=r"field arms: no listed arm applies to card\(s\) \['car_insurance_2f_en'\]"):
        load_study(path)
    assert main(["run", str(path)]) == 2 and "field arms" in capsys.readouterr().err
    assert not (tmp_path / "archive").exists()


@pytest.mark.parametrize("key", ["max_model_calls", "max_tool_calls"])
def test_non_positive_budget_is_refused_naming_the_field(tmp_path, key):
    path = write_study(tmp_path, ["travel_budget_en.json"])
    path.write_text(path.read_text().replace(f"{key} = ", f"{key} = 0 # "))
    with pytest.raises(StudyError, match=rf"t.toml: field budget.{key}: must be at least 1"):
        load_study(path)


def test_unknown_harness_and_protocol_name_study_file_and_field(tmp_path):
    path = write_study(tmp_path, ["travel_budget_en.json"], extra='harnesses = ["H01"]')
    with pytest.raises(StudyError, match=r"t.toml: field harnesses: .*no contract for harness 'H01'"):
        load_study(path)
    path = write_study(tmp_path, ["travel_budget_en.json"])
    path.write_text(path.read_text().replace('protocol = "sim"', 'protocol = "simm"'))
    with pytest.raises(StudyError, match=r"t.toml: field models\[0\].protocol: model 'sim-agent': unknown protocol"):
        load_study(path)


def test_a_study_cannot_declare_the_evaluators_simulator(tmp_path):
    """``sim-evaluator`` is registered by the evaluator (EVALUATOR_PROTOCOLS), not as an agent model."""
    path = write_study(tmp_path, ["travel_budget_en.json"])
    path.write_text(path.read_text().replace('protocol = "sim"', 'protocol = "sim-evaluator"'))
    with pytest.raises(StudyError, match=r"models\[0\].protocol: model 'sim-agent': unknown protocol 'sim-evaluator'"):
        load_study(path)


def test_a_bad_corpus_line_is_named_under_the_corpus_field(tmp_path, capsys):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "x", "url": "u", "title": "t"}\n')
    path = write_study(tmp_path, ["travel_budget_en.json"])
    path.write_text(path.read_text().replace(str(REPO / "corpora/demo/corpus.jsonl"), str(corpus)))
    assert main(["run", str(path)]) == 2
    assert f"t.toml: field corpus: {corpus}:1: field 'text'" in capsys.readouterr().err


def test_ctrl_c_during_a_study_exits_130_with_a_resume_hint_and_an_index(tmp_path, capsys, monkeypatch):
    async def interrupted(study, progress=None, verify=True, execute=None, part=None):
        Archive(study.archive_root).root.mkdir(parents=True)
        raise KeyboardInterrupt

    monkeypatch.setattr("draligned.workflow.run_study", interrupted)
    path = write_study(tmp_path, ["travel_budget_en.json"])
    assert main(["run", str(path)]) == 130
    assert "interrupted: finished runs are kept" in capsys.readouterr().err
    assert (tmp_path / "archive" / "index.duckdb").exists()


def test_an_archive_path_that_is_not_a_directory_is_a_clean_error(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    path = write_study(tmp_path, ["travel_budget_en.json"])
    assert main(["run", str(path), "--archive", str(tmp_path / "afile" / "archive")]) == 2
    assert f"{tmp_path / 'afile' / 'archive'}: cannot use it as the archive directory" in capsys.readouterr().err


def test_paper_families_example_parses_and_declares_table9_fields():
    """The shipped real-model example is a valid study whose request fields follow Tables 9 and 12."""
    study = load_study(REPO / "studies" / "paper_families.example.toml")
    fields = {m.name: m.request_fields() for m in study.spec.models}
    assert "temperature" not in fields["grok-none"] and fields["grok-none"]["reasoning"] == {"effort": "none"}
    assert fields["deepseek-off"]["thinking"] == {"type": "disabled"}
    assert all(f["max_output_tokens"] == 16000 and f["parallel_tool_calls"] is False for f in fields.values())
    assert len(study.slots("c" * 64)) == 5 * (3 * 2 + 4)


def test_a_harness_needs_both_a_contract_and_an_executor(tmp_path, monkeypatch, capsys):
    monkeypatch.delitem(EXECUTORS, "H-D")  # a contract file with no executor
    path = write_study(tmp_path, ["travel_budget_en.json"], extra='harnesses = ["H00", "H-D"]')
    with pytest.raises(StudyError, match=r"t.toml: field harnesses\[1\]: .*H-D.json: no executor for harness 'H-D' "
                                         r"\(known: H-W, H00\)"):
        load_study(path)
    assert main(["run", str(path)]) == 2 and "field harnesses[1]" in capsys.readouterr().err
    monkeypatch.setitem(EXECUTORS, "H-X", EXECUTORS["H00"])  # an executor with no contract file
    path = write_study(tmp_path, ["travel_budget_en.json"], extra='harnesses = ["H-X"]')
    with pytest.raises(StudyError, match=r"t.toml: field harnesses: .*no contract for harness 'H-X'"):
        load_study(path)
    assert main(["run", str(path)]) == 2 and "no contract for harness 'H-X'" in capsys.readouterr().err
