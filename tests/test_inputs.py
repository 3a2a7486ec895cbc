"""Odd study and evaluator files are refused with an error naming file and field: no traceback, no hang,
no silent acceptance (issue 11, "odd inputs fail cleanly")."""

from __future__ import annotations

import json

import pytest

from draligned.cards import validate_card_file
from draligned.cess.trajectory import TrajectoryError, load_trajectories
from draligned.cli import main
from draligned.evaluator.config import EvaluatorError, load_evaluator
from draligned.strict_json import JSONInputError, loads
from draligned.study import StudyError, load_study
from draligned.tools.corpus import CorpusError, load_corpus
from tests.study_helpers import REPO, write_study

SIM_EVALUATOR = (REPO / "evaluators" / "sim.toml").read_text()


def _edited(path, old: str, new: str):
    """``path`` with the first ``old`` (which must be there) replaced by ``new``."""
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return path


def _study(tmp_path, old: str, new: str):
    return _edited(write_study(tmp_path, ["travel_budget_en.json"]), old, new)


@pytest.mark.parametrize(("old", "new", "message"), [
    ("seeds = 1", "seeds = 1000000000", r"field seeds: Input should be less than or equal to 10000"),
    ("seeds = 1", "seeds = 0", r"field seeds: Input should be greater than or equal to 1"),
    ("concurrency = 3", "concurrency = 0", r"field concurrency: Input should be greater than or equal to 1"),
    ("concurrency = 3", "concurrency = 100000", r"field concurrency: Input should be less than or equal to 256"),
    ("name = \"t\"", "name = \"\"", r"field name: String should have at least 1 character"),
    ("name = \"t\"", "name = \"   \"", r"field name: String should match pattern"),
    ("seeds = 1", "seeds = 1\nharnesses = []", r"field harnesses: List should have at least 1 item"),
    ("seeds = 1", "seeds = 1\nharnesses = [\"H00\", \"H00\"]", r"field harnesses: lists a harness twice"),
    ("seeds = 1", "seeds = 1\narms = []", r"field arms: lists no arm"),
    ("max_model_calls = 24", "max_model_calls = 10000000", r"field budget.max_model_calls: must be at most 100000"),
    ("sensitivity = 0.8", "sensitivity = nan", r"field models\[0\].options.sensitivity: model 'sim-agent': "
                                               r"Input should be a finite number"),
    ("sensitivity = 0.8", "sensitivity = 1e308", r"field models\[0\].options.sensitivity: .*less than or equal to 1"),
    ("sensitivity = 0.8", "sensitivty = 0.8", r"field models\[0\].options.sensitivty: model 'sim-agent': "
                                              r"unknown option \(known: sensitivity, revise, final_mode, latency_s\)"),
    ("latency_s = 0.0", "latency_s = -1", r"field models\[0\].options.latency_s: .*greater than or equal to 0"),
    ("model = \"sim-agent-v1\"", "model = \"sim-agent-v1\"\nretry = { max_connections = 0 }",
     r"field models\[0\].retry.max_connections: .*must be 1 to 1024"),  # waited forever
    ("model = \"sim-agent-v1\"", "model = \"sim-agent-v1\"\nretry = { timeout_s = nan }",
     r"field models\[0\].retry.timeout_s: Input should be a finite number"),
    ("model = \"sim-agent-v1\"", "model = \"sim-agent-v1\"\nprice = { input = -1.0, output = 2.0 }",
     r"field models\[0\].price.input: Input should be greater than or equal to 0"),
    ("model = \"sim-agent-v1\"", "model = 3",
     r"field models\[0\].model: Input should be a valid string"),
    ("protocol = \"sim\"", "protocol = \"anthropic\"\napi_key_env = \"K\"",
     r"field models\[0\].options.sensitivity: model 'sim-agent': unknown option \(known: none\)"),
])
def test_invalid_study_values_are_refused_naming_file_and_field(tmp_path, old, new, message):
    with pytest.raises(StudyError, match=r"t.toml: " + message):
        load_study(_study(tmp_path, old, new))


def test_a_study_that_expands_to_too_many_slots_is_refused_before_expanding(tmp_path):
    """Every count is below its own bound; their product is checked before any slot is built."""
    path = write_study(tmp_path, ["travel_budget_en.json", "car_insurance_2f_en.json"], seeds=10_000,
                       extra='harnesses = ["H00", "H-W", "H-D"]')
    with pytest.raises(StudyError, match=r"t.toml: field seeds: the study expands to 180000 slots, more than 100000"):
        load_study(path)


def test_chat_options_are_typed_too(tmp_path):
    path = _study(tmp_path, "protocol = \"sim\"", "protocol = \"openai-chat\"\napi_key_env = \"K\"")
    path.write_text(path.read_text().replace("sensitivity = 0.8\nlatency_s = 0.0", 'max_tokens_field = "max_tokns"'))
    with pytest.raises(StudyError, match=r"models\[0\].options.max_tokens_field: model 'sim-agent': Input should be"):
        load_study(path)


@pytest.mark.parametrize(("load", "error"), [(load_study, StudyError), (load_evaluator, EvaluatorError)])
def test_a_toml_file_that_is_not_utf8_or_nested_too_deeply_is_a_clean_error(tmp_path, load, error):
    bad = tmp_path / "s.toml"
    bad.write_bytes(b'name="x"\xff\n')
    with pytest.raises(error, match=r"s.toml: not UTF-8 text \(byte 8\)"):
        load(bad)
    bad.write_text("a = " + "[" * 200_000 + "]" * 200_000 + "\n")
    with pytest.raises(error, match=r"s.toml: invalid TOML: nested"):
        load(bad)
    bad.write_text("a = " + "[" * 100 + "]" * 100 + "\n")  # parses, but deeper than any input needs
    with pytest.raises(error, match=r"s.toml: invalid TOML: nested deeper than 64 levels"):
        load(bad)


def _evaluator(tmp_path, old: str = "", new: str = ""):
    path = tmp_path / "e.toml"
    path.write_text(SIM_EVALUATOR.replace("../evaluator_prompts/", f"{REPO}/evaluator_prompts/"))
    return _edited(path, old, new)


@pytest.mark.parametrize(("old", "new", "message"), [
    ("concurrency = 8", "concurrency = 0", r"field concurrency: Input should be greater than or equal to 1"),
    ("concurrency = 8", "concurrency = 1000000", r"field concurrency: Input should be less than or equal to 256"),
    ("max_tokens = 16384", "max_tokens = -1", r"field max_tokens: Input should be greater than or equal to 1"),
    ("model = \"sim-evaluator-v1\"", "model = \"sim-evaluator-v1\"\noptions = { order_bais = true }",
     r"field model: options.order_bais: unknown option \(known: order_bias\)"),
    ("evaluator_id = \"sim-lexical-v1\"", "evaluator_id = \"\"", r"field evaluator_id: String should match"),
])
def test_invalid_evaluator_values_are_refused_naming_file_and_field(tmp_path, old, new, message):
    with pytest.raises(EvaluatorError, match=r"e.toml: " + message):
        load_evaluator(_evaluator(tmp_path, old, new))


def test_an_evaluator_schema_that_is_not_json_names_the_schema_field(tmp_path):
    (tmp_path / "s.json").write_text("not json {")
    path = _evaluator(tmp_path, f"{REPO}/evaluator_prompts/document_items.v1.schema.json", str(tmp_path / "s.json"))
    with pytest.raises(EvaluatorError, match=r"e.toml: field schemas.document: s.json: not valid JSON"):
        load_evaluator(path)
    (tmp_path / "s.json").write_text('{"type": 12}')
    with pytest.raises(EvaluatorError, match=r"e.toml: field schemas.document: s.json: 12 is not valid"):
        load_evaluator(path)
    (tmp_path / "s.json").write_bytes(b"\xff")
    with pytest.raises(EvaluatorError, match=r"field schemas.document: s.json: not valid JSON"):
        load_evaluator(path)


@pytest.mark.parametrize(("text", "message"), [
    ("[" * 200_000 + "]" * 200_000, "nested deeper than 64 levels"),
    ('{"a": 1, "a": 2}', r"duplicate keys \['a'\]"),
    ('{"a": NaN}', "non-finite number NaN"),
    (b"\xff", "not valid JSON"),
    ('{"a": ["\\ud800x"]}', r"the string '\\ud800x' holds an unpaired UTF-16 surrogate"),
    (b'{"\\udc00": 1}', "unpaired UTF-16 surrogate"),
])
def test_strict_json_refuses_what_plain_json_would_keep_or_crash_on(text, message):
    with pytest.raises(JSONInputError, match=message):
        loads(text)


DEEP = "[" * 200_000 + "]" * 200_000


@pytest.mark.parametrize("text", [DEEP, '{"card_id": "a", "card_id": "b"}'])
def test_a_card_file_nested_too_deeply_or_with_a_repeated_key_is_a_card_problem(tmp_path, text, capsys):
    card = tmp_path / "c.json"
    card.write_text(text)
    assert main(["cards", "validate", str(card)]) == 1
    err = capsys.readouterr()
    assert f"{card}: card (unknown): (file): not valid JSON: " in err.out + err.err


@pytest.mark.parametrize(("text", "message"), [
    (DEEP, "nested deeper than 64 levels"), ('{"trajectory_id": "a", "trajectory_id": "b"}', "duplicate keys")])
def test_a_trajectory_line_nested_too_deeply_or_with_a_repeated_key_names_its_line(tmp_path, text, message):
    path = tmp_path / "t.jsonl"
    path.write_text("\n" + text + "\n")
    with pytest.raises(TrajectoryError, match=rf"^line 2: <json>: not valid JSON: {message}"):
        load_trajectories(path)


def test_strict_json_keeps_a_surrogate_pair_and_an_escaped_backslash_before_u():
    assert loads('{"a": "\\ud83d\\ude00", "b": "\\\\ud800"}') == {"a": "\U0001f600", "b": "\\ud800"}


def test_a_trajectory_id_with_an_unpaired_surrogate_names_its_line_and_prints_nothing(tmp_path, capsys):
    import random

    from tests.cess.test_columns import varied_trajectory

    rng = random.Random(0)
    good, other = (json.dumps(varied_trajectory(rng, i)) for i in range(2))
    path = tmp_path / "t.jsonl"
    path.write_text(good + "\n" + other.replace('"trajectory_id": "', '"trajectory_id": "\\ud800', 1) + "\n")
    assert main(["cess", "estimate", str(path), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "line 2: <json>: not valid JSON: the string" in captured.err and "unpaired UTF-16 surrogate" in captured.err


def test_an_empty_trajectories_file_is_refused_not_an_empty_estimate(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text("\n  \n")
    assert main(["cess", "estimate", "--trajectories", str(path), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "no trajectories" in captured.err


@pytest.mark.parametrize(("text", "message"), [
    (DEEP, "nested deeper than 64 levels"), ('{"id": "a", "id": "b"}', r"duplicate keys \['id'\]")])
def test_a_corpus_line_nested_too_deeply_or_with_a_repeated_key_names_its_line(tmp_path, text, message):
    path = tmp_path / "c.jsonl"
    path.write_text(text + "\n")
    with pytest.raises(CorpusError, match=rf"c.jsonl:1: invalid JSON: {message}"):
        load_corpus(path)


def _budget_card(tmp_path, profile: str, p: str = "5,000", q: str = "12,000"):
    text = (REPO / "factor_cards" / "travel_budget_en.json").read_text()
    card = json.loads(text.replace("is 6,000 yuan", f"is {p} yuan").replace("is 15,000 yuan", f"is {q} yuan"))
    card["profile"] = profile
    path = tmp_path / "travel_budget_en.json"
    path.write_text(json.dumps(card))
    return [f"{x.field}: {x.message}" for x in validate_card_file(path)]


@pytest.mark.parametrize(("profile", "p", "q", "leaked"), [
    ("My old laptop cost 5,000 yuan.", "5,000", "12,000", "'5,000' of endpoint P"),  # missed before: core '5'
    ("My old laptop cost 5000 yuan.", "5,000", "12,000", "'5000' of endpoint P"),
    ("A 5k laptop.", "5,000", "12,000", "'5k' of endpoint P"),
    ("My old laptop cost 12,000 yuan.", "5,000", "12,000", "'12,000' of endpoint Q"),
    ("Last year we spent 1.2万 yuan.", "5,000", "12,000", "'1.2万' of endpoint Q"),
    ("We saved 6000 last year.", "6,000", "15,000", "'6000' of endpoint P"),
])
def test_a_whole_number_of_an_endpoint_in_the_shared_text_is_a_leak(tmp_path, profile, p, q, leaked):
    problems = _budget_card(tmp_path, profile, p, q)
    assert problems and all(x.startswith("profile: shared text contains the number ") for x in problems)
    assert any(leaked in x for x in problems), problems


@pytest.mark.parametrize("profile", [
    "I want a battery life of at least 12 hours.",  # flagged before: the core '12' inside a text search
    "We walk 5 km a day and have 120,000 photos, 50,000 of them from 2012.",
    "Room 512 and flight 125 are booked; version 5.0.12.",
])
def test_a_digit_inside_another_number_or_a_different_number_is_no_leak(tmp_path, profile):
    assert _budget_card(tmp_path, profile) == []


@pytest.mark.parametrize(("key", "value", "message"), [
    ("temperature", "nan", "Input should be a finite number"),
    ("ranking_strength", "1e308", "Input should be less than or equal to 1000"),
    ("budget", "1000000000", "Input should be less than or equal to 10000"),
])
def test_pool_controller_settings_are_finite_and_bounded(tmp_path, key, value, message):
    path = write_study(tmp_path, ["travel_budget_en.json"])
    path.write_text(path.read_text() + '[search]\nbackend = "pool"\n[search.pools]\ntravel_budget_en = "p.jsonl"\n'
                    f"[search.controller]\n{key} = {value}\n")
    with pytest.raises(StudyError, match=rf"t.toml: field search.controller.{key}: {message}"):
        load_study(path)
