"""Factor cards: demo cards, rendering, comparisons, one bad fixture per rule, and the CLI."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jsonschema
import pytest

from draligned.cards import (
    Card,
    CardError,
    Comparison,
    card_schema_json,
    comparisons,
    load_card,
    require_runnable,
    runnable,
    validate_card_file,
)
from draligned.cli.cards import register
from draligned.hashing import sha256_file

ROOT = Path(__file__).resolve().parents[1]
CARDS = ROOT / "factor_cards"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "cards"
DEMO = sorted(p for p in CARDS.glob("*.json") if p.name != "schema.json")

# card_id -> (task_id, language, [(factor_id, type, P, Q)]) exactly as agreed for the demo corpus
EXPECTED_DEMO = {
    "travel_budget_en": ("t_travel_japan", "en", [(
        "budget_cap", "constraint",
        "Our total budget cap for the trip is 6,000 yuan for both of us, including flights.",
        "Our total budget cap for the trip is 15,000 yuan for both of us, including flights.")]),
    "learning_residence_zh": ("t_leadership_plan", "zh", [(
        "residence", "persona_field", "我目前住在杭州。", "我目前住在深圳。")]),
    "career_mobility_en": ("t_career_data", "en", [(
        "mobility", "preference",
        "I am open to relocating to another city for the right job.",
        "I only want jobs in my current city and will not relocate.")]),
    "car_insurance_2f_en": ("t_car_insurance", "en", [
        ("driving_pattern", "persona_field",
         "I mainly use the car for long self-drive trips to remote areas such as Tibet and Yunnan.",
         "I mainly use the car for a short daily commute within the city."),
        ("spending", "preference",
         "I want the most complete coverage and do not mind paying more.",
         "I want the cheapest plan that is still adequate.")]),
}

# bad fixture -> (field every problem names, text one problem contains)
BAD = {
    "schema_missing_endpoint": ("factors[0].endpoints.Q", "Field required"),
    "schema_slot_kind": ("message.slots.f_home", "a slot needs one of the keys"),
    "schema_slot_field": ("message.slots.f_home.separator", "Input should be a valid string"),
    "bad_template": ("message.template", "unmatched or invalid '{'"),
    "missing_slot": ("message.template", "placeholder {closing} has no slot"),
    "unused_slot": ("message.slots.note", "slot is not used"),
    "placeholder_repeated": ("message.template", "{f_home} places endpoints; use it once"),
    "factor_not_placed": ("factors[1]", "placed in exactly one slot, found 0"),
    "factor_placed_twice": ("factors[0]", "placed in exactly one slot, found 2 (f_home, f_again)"),
    "duplicate_factor_id": ("factors[1].factor_id", "duplicate factor id 'residence'"),
    "empty_endpoint": ("factors[0].endpoints.Q", "endpoint text is empty"),
    "identical_endpoints": ("factors[0].endpoints", "P and Q are identical"),
    "by_arm_differs": ("message.slots.weather",
                       "P vs Q (changing residence): differs outside the endpoint spans"),
    "by_arm_wrong_keys": ("message.slots.note.by_arm", "keys must be exactly ['PP', 'QP', 'PQ', 'QQ']"),
    # both arms render the same text: the diff sees nothing, the segment-by-segment check does
    "by_arm_masks_endpoint": ("message.slots.weather",
                              "P vs Q (changing residence): text outside the endpoint spans differs"),
    "two_factor_changes_two": ("message.slots.agree",
                               "PP vs QP (changing residence): differs outside the endpoint spans"),
    "leak_core_in_profile": ("profile", "core of endpoint P of factor residence: 'Hangzhou'"),
    "endpoint_contains_other_core": ("factors[0].endpoints.Q", "core of endpoint P: 'Hangzhou'"),
    "unknown_factor_ref": ("message.slots.f_home.factor", "unknown factor 'home_city'"),
    "invalid_json": ("(file)", "not valid JSON"),
    "duplicate_key": ("(file)", "duplicate keys ['profile']"),
}
# fixtures whose one fault necessarily shows up in a second field as well
ALSO = {"unknown_factor_ref": {"factors[0]"}}  # the misnamed factor is then placed nowhere


def _cli(argv: list[str]) -> int:
    """Run `draligned` argv through this module's `register` on a fresh parser."""
    parser = argparse.ArgumentParser(prog="draligned")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def _outside(text: str, spans: list[tuple[int, int]]) -> list[str]:
    pos, out = 0, []
    for start, end in sorted(spans):
        out.append(text[pos:start])
        pos = end
    return out + [text[pos:]]


def test_demo_corpus_is_exactly_the_agreed_cards() -> None:
    assert {p.stem for p in DEMO} == set(EXPECTED_DEMO)
    for path in DEMO:
        card = load_card(path).card
        task_id, language, factors = EXPECTED_DEMO[card.card_id]
        assert (card.task.task_id, card.task.language) == (task_id, language)
        got = [(f.factor_id, f.type, f.endpoints.P, f.endpoints.Q) for f in card.factors]
        assert got == factors
        assert all(2 <= len(f.unknown_cases) <= 4 for f in card.factors)
        assert [d.by for d in card.status.decisions] == ["validator:draligned-0.1"]


@pytest.mark.parametrize("path", DEMO, ids=lambda p: p.stem)
def test_demo_card_validates_and_is_runnable(path: Path) -> None:
    assert validate_card_file(path) == []
    loaded = require_runnable(path)
    assert runnable(loaded)
    assert loaded.file_sha256 == sha256_file(path)
    assert loaded.card.card_id == path.stem


def test_committed_schema_matches_export() -> None:
    assert (CARDS / "schema.json").read_text(encoding="utf-8") == card_schema_json()


def test_exported_schema_accepts_demo_cards_and_rejects_bad_ones() -> None:
    schema = json.loads(card_schema_json())
    for path in DEMO:
        jsonschema.validate(json.loads(path.read_text(encoding="utf-8")), schema)
    for name in ("schema_missing_endpoint", "schema_slot_kind"):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(json.loads((FIXTURES / f"{name}.json").read_text()), schema)
    assert all("description" in prop for prop in schema["$defs"]["Factor"]["properties"].values())


@pytest.mark.parametrize("path", DEMO, ids=lambda p: p.stem)
def test_rendered_arms_differ_only_inside_the_changed_factor_spans(path: Path) -> None:
    card = load_card(path).card
    endpoints = {f.factor_id: f.endpoints for f in card.factors}
    for comp in comparisons(card):
        ra, rb = card.render(comp.arm_a), card.render(comp.arm_b)
        assert ra.text != rb.text
        for rendered in (ra, rb):
            assert [s.factor_id for s in rendered.spans] == [f.factor_id for f in card.factors]
            for span in rendered.spans:
                assert span.endpoint == card.endpoint_for(rendered.arm, span.factor_id)
                assert rendered.text[span.start:span.end] == getattr(endpoints[span.factor_id], span.endpoint)
        changed = [[(s.start, s.end) for s in r.spans if s.factor_id == comp.factor_id] for r in (ra, rb)]
        assert _outside(ra.text, changed[0]) == _outside(rb.text, changed[1])
        assert ra.text[slice(*changed[0][0])] != rb.text[slice(*changed[1][0])]


def test_two_factor_card_cells_and_comparisons() -> None:
    card = load_card(CARDS / "car_insurance_2f_en.json").card
    assert card.arms() == ["PP", "QP", "PQ", "QQ"]
    texts = {arm: card.render(arm).text for arm in card.arms()}
    assert len(set(texts.values())) == 4
    assert card.endpoint_for("QP", "driving_pattern") == "Q"
    assert card.endpoint_for("QP", "spending") == "P"
    for comp in comparisons(card):
        changed = set()
        for fid in ("driving_pattern", "spending"):
            a, b = (card.render(arm) for arm in (comp.arm_a, comp.arm_b))
            span_a = next(s for s in a.spans if s.factor_id == fid)
            span_b = next(s for s in b.spans if s.factor_id == fid)
            if a.text[span_a.start:span_a.end] != b.text[span_b.start:span_b.end]:
                changed.add(fid)
        assert changed == {comp.factor_id}


def test_comparisons_follow_table_5() -> None:
    single = load_card(CARDS / "travel_budget_en.json").card
    assert comparisons(single) == [Comparison(arm_a="P", arm_b="Q", factor_id="budget_cap")]
    two = load_card(CARDS / "car_insurance_2f_en.json").card
    assert [(c.arm_a, c.arm_b, c.factor_id) for c in comparisons(two)] == [
        ("PP", "QP", "driving_pattern"), ("PQ", "QQ", "driving_pattern"),
        ("PP", "PQ", "spending"), ("QP", "QQ", "spending"),
    ]


def test_render_is_literal_about_braces_and_rejects_unknown_arms() -> None:
    data = json.loads((CARDS / "travel_budget_en.json").read_text(encoding="utf-8"))
    data["factors"][0]["endpoints"]["P"] = "Budget {cap}: 6,000 yuan."
    data["message"]["template"] = "{{note}} {profile} {f_budget}\n\n{task}"
    card = Card.model_validate(data)
    rendered = card.render("P")
    assert rendered.text.startswith("{note} I am 34")
    span = rendered.spans[0]
    assert rendered.text[span.start:span.end] == "Budget {cap}: 6,000 yuan."
    with pytest.raises(ValueError, match="unknown arm"):
        card.render("PQ")
    with pytest.raises(ValueError, match="unknown arm"):
        card.endpoint_for("X", "budget_cap")


def test_every_fixture_is_checked() -> None:
    assert {p.stem for p in FIXTURES.glob("*.json")} == set(BAD) | {"not_pass_status"}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_card_is_rejected_naming_file_card_and_field(name: str) -> None:
    path = FIXTURES / f"{name}.json"
    problems = validate_card_file(path)
    field, text = BAD[name]
    assert problems, f"{name} should be rejected"
    assert {p.field for p in problems} == {field} | ALSO.get(name, set())
    assert any(text in p.message for p in problems), [str(p) for p in problems]
    card_id = None if field == "(file)" else json.loads(path.read_text())["card_id"]
    for problem in problems:
        assert problem.card_id == card_id
        assert str(problem) == f"{path}: card {card_id or '(unknown)'}: {problem.field}: {problem.message}"
    assert any(str(p).startswith(f"{path}: card {card_id or '(unknown)'}: {field}: ") for p in problems)


def test_load_card_raises_card_error_with_field_paths() -> None:
    with pytest.raises(CardError) as info:
        load_card(FIXTURES / "schema_missing_endpoint.json")
    assert [p.field for p in info.value.problems] == ["factors[0].endpoints.Q"]
    assert "card schema_missing_endpoint: factors[0].endpoints.Q" in str(info.value)
    with pytest.raises(CardError, match="not valid JSON"):
        load_card(FIXTURES / "invalid_json.json")
    with pytest.raises(CardError, match="cannot read"):
        load_card(FIXTURES / "no_such_card.json")


def test_require_runnable_refuses_non_pass_status() -> None:
    path = FIXTURES / "not_pass_status.json"
    assert validate_card_file(path) == []
    assert not runnable(load_card(path))
    with pytest.raises(CardError) as info:
        require_runnable(path)
    assert [p.field for p in info.value.problems] == ["status.current"]
    assert "status is DISPUTED; only PASS cards can be run" in str(info.value)


def test_require_runnable_refuses_invalid_pass_card() -> None:
    path = FIXTURES / "by_arm_differs.json"
    assert load_card(path).card.status.current == "PASS"
    with pytest.raises(CardError, match="message.slots.weather"):
        require_runnable(path)


def test_by_arm_slot_with_equal_variants_passes(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "by_arm_differs.json").read_text())
    data["card_id"] = "by_arm_equal"
    data["message"]["slots"]["weather"]["by_arm"]["Q"] = data["message"]["slots"]["weather"]["by_arm"]["P"]
    path = tmp_path / "by_arm_equal.json"
    path.write_text(json.dumps(data))
    assert validate_card_file(path) == []


def test_cli_validate_good_cards(capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(["cards", "validate", str(CARDS)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(DEMO)
    assert f"OK {CARDS / 'car_insurance_2f_en.json'} (car_insurance_2f_en, 4 arms)" in out
    assert f"OK {CARDS / 'travel_budget_en.json'} (travel_budget_en, 2 arms)" in out


def test_cli_validate_bad_card(capsys: pytest.CaptureFixture[str]) -> None:
    bad = FIXTURES / "by_arm_differs.json"
    assert _cli(["cards", "validate", str(CARDS / "travel_budget_en.json"), str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"{bad}: card by_arm_differs: message.slots.weather: " in out
    assert _cli(["cards", "validate", str(FIXTURES / "missing.json")]) == 1
    assert "cannot read" in capsys.readouterr().out


def test_cli_schema_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "schema.json"
    assert _cli(["cards", "schema", "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == card_schema_json()
    capsys.readouterr()
    assert _cli(["cards", "schema", "--out", "-"]) == 0
    assert capsys.readouterr().out == card_schema_json()


def test_main_entry_point_runs_cards_validate(capsys: pytest.CaptureFixture[str]) -> None:
    from draligned.cli import main

    assert main(["cards", "validate", str(CARDS / "career_mobility_en.json")]) == 0
    assert main(["cards", "validate", str(FIXTURES / "unused_slot.json")]) == 1
    assert "card unused_slot: message.slots.note:" in capsys.readouterr().out
