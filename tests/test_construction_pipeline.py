"""The offline construction pipeline over the bundled PDR-Bench sample: propose and verify with the
SIMULATORs, every PASS card validates and runs in a study, the blinded review with kappa checked by
hand, the fatal-flag rule, and the frozen assignment (deterministic, seed-sensitive)."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from draligned.cards import Card, require_runnable
from draligned.cli import main
from draligned.construction.assign import assign
from draligned.construction.review import ReviewError, export_sheet, import_answers
from draligned.construction.store import construction_cards
from draligned.workflow import run_study_file
from tests.study_helpers import write_study

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "construction" / "pdr_sample"
RULE = REPO / "construction" / "assign.example.toml"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """Both languages, single- and two-factor designs, proposed and verified through the CLI."""
    out = tmp_path_factory.mktemp("construction") / "cards"
    for lang in ("en", "zh"):
        for design in ("single", "two"):
            args = ["cards", "propose", "--tasks", str(SAMPLE / f"tasks_{lang}.jsonl"), "--personas",
                    str(SAMPLE / f"personas_{lang}.jsonl"), "--pairs", str(SAMPLE / f"queries_{lang}.jsonl"),
                    "--model", "sim", "--design", design, "--out", str(out)]
            assert main(args) == 0
    assert main(["cards", "verify", str(out), "--model", "sim"]) == 0
    return out


def _copy(built: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(built, tmp_path / "cards"))


def test_proposals_record_prompt_hashes_and_rerun_without_model_calls(built, capsys):
    cards = construction_cards(built)
    assert len(cards) == 48 and {c.card.task.language for c in cards} == {"en", "zh"}
    two = [c.card for c in cards if len(c.card.factors) == 2]
    assert len(two) == 36 and {c.card_id.rsplit("_", 1)[-1] for c in two} >= {"2f", "alt1", "alt2"}
    for lc in cards:
        proposed = lc.card.status.decisions[0]
        assert proposed.by == "proposer:sim-proposer" and "prompt proposal.v1.md sha256 " in proposed.reason
        assert [d.by.split(":")[0] for d in lc.card.status.decisions] == ["proposer", "validator", "verifier",
                                                                           "verifier", "gate"]
        raw = proposed.reason.rsplit("raw response sha256 ", 1)[1].rstrip(".")
        assert "SIMULATOR" in (built / "responses" / f"{raw}.txt").read_text()
    capsys.readouterr()
    assert main(["cards", "propose", "--tasks", str(SAMPLE / "tasks_en.jsonl"), "--personas",
                 str(SAMPLE / "personas_en.jsonl"), "--pairs", str(SAMPLE / "queries_en.jsonl"), "--model", "sim",
                 "--out", str(built)]) == 0
    assert "6 pairs: 0 cards written, 6 proposed before" in capsys.readouterr().out


@pytest.mark.slow
def test_every_pass_card_validates_and_runs_in_a_study(built, tmp_path):
    passed = [lc for lc in construction_cards(built) if lc.card.status.current == "PASS"]
    assert len(passed) >= 24
    for lc in passed:
        require_runnable(lc.path)
    study = write_study(tmp_path, [str(lc.path) for lc in passed], name="pass-cards")
    result = run_study_file(study)
    arms = sum(len(lc.card.arms()) for lc in passed)
    assert len(result.runs) == arms and all(r.status == "completed" for r in result.runs)


def test_review_sheet_is_blinded(built, tmp_path):
    out = _copy(built, tmp_path)
    text, sheet_id = export_sheet(out, "jsonl")
    rows = [json.loads(line) for line in text.splitlines()]
    assert len(rows) == 48 and set(rows[0]) >= {"item_id", "task", "factors", "H1", "H5", "fatal", "comment"}
    for secret in ("pdr_en_", "pdr_zh_", "sim-verifier", "sim-proposer", "gate:", "PASS", "validator"):
        assert secret not in text
    key = json.loads((out / "reviews" / f"{sheet_id}.key.json").read_text())
    assert {k["item_id"] for k in key} == {r["item_id"] for r in rows}
    assert main(["cards", "review", "export", str(out), "--out", str(tmp_path / "sheet.txt")]) == 2


H1_A = ["yes", "yes", "no", "no", "yes", "cannot_tell"]
H1_B = ["yes", "no", "no", "yes", "yes", "yes"]


def _answers(items: list[str], reviewer: str, columns: dict[str, list[str]], fatal: list[str]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["item_id", "reviewer", "H1", "H2", "H3", "H4", "H5", "fatal", "comment"])
    w.writeheader()
    for n, item in enumerate(items):
        w.writerow({"item_id": item, "reviewer": reviewer, **{h: v[n] for h, v in columns.items()},
                    "fatal": fatal[n], "comment": ""})
    return buf.getvalue()


def test_review_import_kappa_by_hand_and_the_fatal_flag_rule(built, tmp_path, capsys):
    out = _copy(built, tmp_path)
    text, _ = export_sheet(out, "csv")
    key = {k["item_id"]: k["card_id"] for p in (out / "reviews").glob("*.key.json") for k in json.loads(p.read_text())}
    items = [r["item_id"] for r in csv.DictReader(io.StringIO(text))][:6]
    a = _answers(items, "CR1", {"H1": H1_A, "H2": ["yes"] * 6, "H3": ["yes", "no"] * 3, "H4": ["yes"] * 6,
                                "H5": ["yes", "no"] * 3}, ["yes", "yes", "no", "", "no", "no"])
    b = _answers(items, "CR2", {"H1": H1_B, "H2": ["yes", "no", "yes", "yes", "yes", "yes"], "H3": ["yes", "no"] * 3,
                                "H4": ["yes"] * 6, "H5": ["no", "yes"] * 3}, ["yes", "no", "no", "no", "no", "no"])
    (tmp_path / "a.csv").write_text(a)
    (tmp_path / "b.csv").write_text(b)
    assert main(["cards", "review", "import", str(out), str(tmp_path / "a.csv"), str(tmp_path / "b.csv"),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    got = {c["criterion"]: c["agreement"] for c in report["criteria"]}
    # H1 by hand: po = 3/6; pe = (3*4 + 2*2 + 1*0) / 36 = 4/9; kappa = (1/2 - 4/9) / (5/9) = 0.1
    assert got["H1"]["exact"] == pytest.approx(0.5) and got["H1"]["kappa"] == pytest.approx(0.1)
    assert got["H2"]["exact"] == pytest.approx(5 / 6) and got["H2"]["kappa"] == pytest.approx(0.0)  # CR1 constant
    assert got["H3"]["kappa"] == pytest.approx(1.0)
    assert got["H4"]["exact"] == 1.0 and got["H4"]["kappa"] is None  # neither reviewer varies: undefined
    assert got["H5"]["exact"] == 0.0 and got["H5"]["kappa"] == pytest.approx(-1.0)
    h1 = report["criteria"][0]["counts"]
    assert h1["CR1"] == {"yes": 3, "no": 2, "cannot_tell": 1} and h1["CR2"] == {"yes": 4, "no": 2, "cannot_tell": 0}
    both, one = key[items[0]], key[items[1]]
    assert report["excluded"] == [both] and report["flagged"] == [one]
    cards = {lc.card.card_id: lc.card for lc in construction_cards(out)}
    assert cards[both].status.current == "FAIL" and cards[both].status.decisions[-1].by == "review:CR1+CR2"
    assert cards[one].status.current == "PASS"  # one fatal flag: registered, not excluded
    assert cards[one].status.decisions[-1].outcome == "RETAINED" and "exclusion requires both" in \
        cards[one].status.decisions[-1].reason
    stored = sorted(p.name for p in (out / "reviews" / "answers").iterdir())
    assert len(stored) == 2 and all(len(name.split(".")[0]) == 64 for name in stored)
    before = (out / f"{one}.json").read_bytes()
    assert main(["cards", "review", "import", str(out), str(tmp_path / "a.csv"), str(tmp_path / "b.csv")]) == 0
    assert (out / f"{one}.json").read_bytes() == before  # the same import twice adds no decision
    assert "H4" in capsys.readouterr().out


def test_review_answer_errors_name_file_line_and_field(built, tmp_path, capsys):
    out = _copy(built, tmp_path)
    text, _ = export_sheet(out, "csv")
    item = next(csv.DictReader(io.StringIO(text)))["item_id"]
    bad = tmp_path / "bad.csv"
    bad.write_text(f"item_id,reviewer,H1,H2,H3,H4,H5,fatal\n{item},CR1,yes,maybe,yes,yes,yes,no\n")
    with pytest.raises(ReviewError, match=r"bad\.csv:2: H2: expected one of yes, no, cannot_tell, got 'maybe'"):
        import_answers(out, [(str(bad), bad.read_bytes())])
    bad.write_text(f"item_id,reviewer,H1,H2,H3,H4,H5,fatal\n{item},CR1,yes,yes,yes,yes,Cannot Tell,perhaps\n")
    with pytest.raises(ReviewError, match=r"bad\.csv:2: fatal: expected yes or no"):
        import_answers(out, [(str(bad), bad.read_bytes())])
    bad.write_text(f"item_id,reviewer,H1,H2,H3,H4,H5,fatal\n{item},CR1,yes,yes,yes,yes,yes,no\n")
    assert main(["cards", "review", "import", str(out), str(bad)]) == 2
    assert "expected answers from exactly two reviewers, found ['CR1']" in capsys.readouterr().err
    # without a reviewer column, each file is one reviewer, named by its file
    for name, flag in (("CR1", "true"), ("CR2", "1")):
        (tmp_path / f"{name}.jsonl").write_text(json.dumps({"item_id": item, "H1": "yes", "H2": "Yes", "H3": "no",
                                                            "H4": "cannot tell", "H5": "yes", "fatal": flag}) + "\n")
    report = import_answers(out, [(str(tmp_path / f"{n}.jsonl"), (tmp_path / f"{n}.jsonl").read_bytes())
                                  for n in ("CR1", "CR2")])
    assert report.reviewers == ["CR1", "CR2"] and len(report.excluded) == 1


def test_assignment_is_deterministic_seed_sensitive_and_runs(built, tmp_path):
    first = assign(built, RULE, tmp_path / "one")
    again = assign(built, RULE, tmp_path / "two")
    assert first == again
    assert (tmp_path / "one" / "assignment.json").read_bytes() == (tmp_path / "two" / "assignment.json").read_bytes()
    assert assign(built, RULE, tmp_path / "one") == first  # rerun into the same directory: identical, accepted
    chosen = [a.card_id for a in first.cards if a.selected]
    assert len(chosen) == 12  # per_task = 1 over 12 tasks (6 per language)
    assert first.parameters.seed == 20260115 and len(first.rule_file_sha256) == 64
    reseeded = tmp_path / "rule.toml"
    reseeded.write_text(RULE.read_text().replace("seed = 20260115", "seed = 7"))
    other = assign(built, reseeded, tmp_path / "three")
    assert [a.card_id for a in other.cards if a.selected] != chosen
    reasons = {a.card_id: a.reason for a in first.cards if not a.selected}
    assert any(r.startswith("second factor not selected") for r in reasons.values())
    assert any("per_task = 1" in r for r in reasons.values())
    for card_id in reasons:
        card = Card.model_validate_json((tmp_path / "one" / "not_selected" / f"{card_id}.json").read_bytes())
        assert card.status.current == "NOT_SELECTED" and card.status.decisions[-1].reason.endswith(reasons[card_id])
    for card_id in chosen:
        loaded = require_runnable(tmp_path / "one" / "cards" / f"{card_id}.json")
        assert loaded.card.status.decisions[-1].by == "assignment:frozen-assignment-v1"
        assert first.rule_file_sha256 in loaded.card.status.decisions[-1].reason
    groups = [(c.split("_2f")[0]) for c in chosen if "_2f" in c]
    assert len(groups) == len(set(groups))  # one second factor per task, user and factor 1


def test_assignment_rule_errors_and_non_pass_cards(built, tmp_path, capsys):
    rule = tmp_path / "rule.toml"
    rule.write_text("per_task = 1\n")
    assert main(["cards", "assign", str(built), "--rule", str(rule), "--out", str(tmp_path / "o")]) == 2
    assert "rule.toml: seed: Field required" in capsys.readouterr().err
    out = _copy(built, tmp_path)
    victim = out / "pdr_en_t1_user1.json"
    data = json.loads(victim.read_text())
    data["status"]["current"] = "FAIL"
    victim.write_text(json.dumps(data))
    rule.write_text("seed = 1\n")
    result = assign(out, rule, tmp_path / "o2")
    entry = next(a for a in result.cards if a.card_id == "pdr_en_t1_user1")
    assert not entry.selected and entry.reason == "status FAIL, not PASS"


@pytest.mark.slow
def test_cards_demo_runs_offline_and_its_study_runs(tmp_path, capsys):
    assert main(["cards", "demo", "--out", str(tmp_path / "demo")]) == 0
    text = capsys.readouterr().out
    assert "SIMULATOR proposer, verifiers and reviewers" in text and "every planted defect caught" in text
    result = run_study_file(tmp_path / "demo" / "study.toml")
    assert result.runs and all(r.status == "completed" for r in result.runs)
