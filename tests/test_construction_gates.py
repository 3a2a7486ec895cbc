"""The frozen gate rule (FAIL / RETAINED / DISPUTED / PASS) and the verifiers' structured-output path:
schema-checked replies, no repair, raw reply kept, an unreadable reply keeps the card out of PASS;
real verifier models through the providers against loopback servers; the planted-defect pilot."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from draligned.cards import Card
from draligned.cli import main
from draligned.construction.pilot import run_pilot
from draligned.construction.prompts import (
    SIM_VERIFIERS,
    VERIFY_PROMPT,
    ConstructionError,
    prompt_file,
    verifier_declarations,
)
from draligned.construction.sim import verify
from draligned.construction.verify import (
    CRITERIA,
    GATE_RULE,
    Verdict,
    cross_check,
    gate,
    render_prompt,
    verify_dir,
)
from tests.fake_providers import FakeProvider, Wire
from tests.loopback_wire import WireServer
from tests.test_construction_inputs import model_file

REPO = Path(__file__).resolve().parent.parent
PILOT = REPO / "construction" / "pilot"


def verdict(name: str, no: str = "", unsure: str = "", exclusive: dict[str, bool] | None = None,
            error: str | None = None) -> Verdict:
    """A verdict answering yes except "no" on the criteria in ``no`` and cannot_tell on those in ``unsure``."""
    answers = {h: {"answer": "no" if h in no.split() else "cannot_tell" if h in unsure.split() else "yes",
                   "reason": f"{name} on {h}"} for h in CRITERIA}
    return Verdict(card_id="c", card_sha256="0" * 64, verifier=name, model_sha256="1" * 64, model=name, prompt="p@x",
                   schema_file="s@y", response_sha256="2" * 64, error=error,
                   criteria={} if error else answers,
                   soft_preferences=[{"factor_id": f, "mutually_exclusive": x, "reason": "r"}
                                     for f, x in (exclusive or {}).items()])


@pytest.mark.parametrize(("a", "b", "outcome", "says"), [
    (verdict("A"), verdict("B"), "PASS", "both verifiers answered yes"),
    (verdict("A", no="H3"), verdict("B", no="H3"), "FAIL", "both verifiers failed H3 one factor changed (gate G2)"),
    (verdict("A", no="H1 H3"), verdict("B", no="H3 H5"), "FAIL", "failed H3"),
    # one flags, the other does not (the t23 case): retained with the flag
    (verdict("A", no="H1"), verdict("B"), "RETAINED", "A flagged H1 faithful to source"),
    (verdict("A"), verdict("B", unsure="H4"), "RETAINED", "B flagged H4 clear and plausible (cannot_tell"),
    # both flag, but never both "no" on the same gate: not a FAIL
    (verdict("A", no="H1"), verdict("B", no="H2"), "RETAINED", "flag registered"),
    (verdict("A", no="H2"), verdict("B", unsure="H2"), "RETAINED", "flag registered"),
    # the t46_x1 case: one judges the soft preference mutually exclusive, the other agrees with the design
    (verdict("A", exclusive={"spend": True}), verdict("B", exclusive={"spend": False}), "DISPUTED",
     "A judged spend mutually exclusive, B agreed with the design"),
    (verdict("A", exclusive={"spend": False}, no="H4"), verdict("B", exclusive={"spend": True}), "DISPUTED",
     "B judged spend"),
    (verdict("A", exclusive={"spend": True}), verdict("B", exclusive={"spend": True}), "FAIL",
     "both verifiers judge the soft preference spend mutually exclusive"),
    (verdict("A", exclusive={"spend": True}, no="H5"), verdict("B", exclusive={"spend": False}, no="H5"), "FAIL",
     "failed H5"),
    (verdict("A", error="not JSON: Expecting value"), verdict("B"), "RETAINED", "unreadable reply from A"),
    (verdict("A", error="schema: criteria: 'H5' is a required property"), verdict("B", no="H1"), "RETAINED",
     "unreadable reply from A"),
])
def test_the_frozen_gate_rule(a, b, outcome, says):
    result = gate([a, b])
    assert result.outcome == outcome
    assert says in result.reason and result.reason.startswith(GATE_RULE)
    assert gate([b, a]).outcome == outcome  # the order of the two verifiers does not matter


def _card_dir(tmp_path: Path, *names: str) -> Path:
    out = tmp_path / "cards"
    out.mkdir()
    for n in names:
        shutil.copyfile(PILOT / n, out / n)
    return out


@pytest.mark.parametrize("protocol", ["openai-chat", "anthropic", "openai-responses"])
def test_real_verifiers_through_the_providers_and_an_unreadable_reply(tmp_path, monkeypatch, protocol):
    """Verifier 1 answers valid JSON; verifier 2 answers the same JSON in a code fence: no repair, so
    its reply is unreadable, its raw response is kept and the card stays out of PASS with that reason."""
    monkeypatch.setenv("FAKE_PROVIDER_KEY", "sk-test")
    out = _card_dir(tmp_path, "pilot_1_clean.json")
    card = Card.model_validate_json((out / "pilot_1_clean.json").read_bytes())
    answer = json.dumps(verify(render_prompt(prompt_file(VERIFY_PROMPT), card)))
    wire = Wire(protocol, "echo-v")
    with (FakeProvider(protocol, script=[wire.reply(text=answer)]) as one,
          FakeProvider(protocol, script=[wire.reply(text=f"```json\n{answer}\n```")]) as two):
        code = main(["cards", "verify", str(out), "--model", str(model_file(tmp_path, one, "v-one")),
                     "--model", str(model_file(tmp_path, two, "v-two"))])
        assert code == 0
        prompt = json.dumps(one.log[0]["body"])
        assert "SOURCE: I mainly use the laptop for 3D modelling" in prompt and "H5 no answer leakage" in prompt
    after = Card.model_validate_json((out / "pilot_1_clean.json").read_bytes())
    assert after.status.current == "RETAINED"
    assert "unreadable reply from v-two (malformed: not valid JSON" in after.status.decisions[-1].reason
    bad = Verdict.model_validate_json((out / "verifications" / "pilot_1_clean" / "v-two.json").read_bytes())
    raw = (out / "responses" / f"{bad.response_sha256}.txt").read_text()
    assert "```json" in raw and bad.criteria == {}  # the raw reply is kept, nothing was repaired
    good = Verdict.model_validate_json((out / "verifications" / "pilot_1_clean" / "v-one.json").read_bytes())
    assert good.error is None and {c.answer for c in good.criteria.values()} == {"yes"}
    assert [d.by for d in after.status.decisions[-3:]] == ["verifier:v-one", "verifier:v-two", f"gate:{GATE_RULE}"]
    # a rerun sends nothing: the card is gated, its verdicts are recorded
    assert asyncio.run(verify_dir(out, SIM_VERIFIERS)).skipped == {"pilot_1_clean": "already gated: RETAINED"}


def test_a_soft_preference_judgement_must_cover_the_cards_soft_preferences():
    """A reply that is valid JSON under the schema but judges no soft preference of a card that has one
    fails the cross-check: unreadable, not PASS."""
    data = json.loads((PILOT / "pilot_1_clean.json").read_text())
    data["factors"][0]["type"] = "preference"
    answer = {"criteria": {h: {"answer": "yes", "reason": "r"} for h in CRITERIA}, "soft_preferences": []}
    jsonschema.validate(answer, json.loads(prompt_file("verify.v1.schema.json").text))
    error = cross_check(answer, Card.model_validate(data))
    assert error is not None and "expected exactly the soft preferences ['use']" in error


def test_verifier_declarations_need_two_distinct_verifiers(tmp_path):
    assert verifier_declarations(["sim"]) == SIM_VERIFIERS
    with pytest.raises(ConstructionError, match="two verifiers are needed"):
        verifier_declarations([str(tmp_path / "x.toml")])
    with pytest.raises(ConstructionError, match="x.toml"):
        verifier_declarations(["sim", str(tmp_path / "x.toml")])


def test_the_simulator_pilot_catches_every_planted_defect_with_its_gate(tmp_path):
    report = run_pilot(SIM_VERIFIERS, tmp_path / "pilot")
    by = {r.defect: r for r in report.fixtures}
    assert by["none"].outcome == "PASS" and by["none"].failed_gates == []
    assert by["polarity"].relation == "R2" and by["polarity"].failed_gates == ["H4"]
    assert by["binding"].relation == "R3" and by["binding"].failed_gates == ["H2"]
    assert by["mapping"].relation == "R1" and by["mapping"].failed_gates == ["H1"]
    assert all(r.outcome == "FAIL" for d, r in by.items() if d != "none")
    assert report.all_caught and report.per_gate == {"H1": ["pilot_4_mapping"], "H2": ["pilot_3_binding"], "H3": [],
                                                     "H4": ["pilot_2_polarity"], "H5": []}


def test_pilot_cli_json_and_with_a_real_model(tmp_path, monkeypatch, capsys):
    assert main(["cards", "pilot", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["all_caught"] is True
    monkeypatch.setenv("FAKE_PROVIDER_KEY", "sk-test")
    yes = json.dumps({"criteria": {h: {"answer": "yes", "reason": "fine"} for h in CRITERIA}, "soft_preferences": []})
    wire = Wire("openai-chat", "echo")
    with FakeProvider("openai-chat", script=[wire.reply(text=yes) for _ in range(8)]) as fp:
        assert main(["cards", "pilot", "--model", str(model_file(tmp_path, fp, "lenient"))]) == 0
        assert len(fp.log) == 8  # four fixtures, the one model as both verifiers
    text = capsys.readouterr().out
    assert "verifiers lenient and lenient-2" in text and "polarity (R2), target gate H4" in text
    assert "missed" in text and "NOT every planted defect was caught" in text


@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses", "anthropic"])
def test_truncated_and_refused_verifier_replies_keep_cards_out_of_pass(tmp_path, monkeypatch, protocol):
    """Against the independent loopback servers: a 429 then a truncated reply, and a refusal. Neither is
    repaired; both are unreadable with the finish reason named, and the card is RETAINED, not PASS."""
    monkeypatch.setenv("FAKE_PROVIDER_KEY", "sk-test")
    out = _card_dir(tmp_path, "pilot_1_clean.json")
    with (WireServer(protocol, ["length"], {0: (429, {"retry-after": "1"})}) as cut,
          WireServer(protocol, ["refusal"]) as refused):
        files = [model_file(tmp_path, s, name) for s, name in ((cut, "cut"), (refused, "refuses"))]
        assert main(["cards", "verify", str(out), "--model", str(files[0]), "--model", str(files[1])]) == 0
        assert len(cut.log) == 2  # the 429 was retried once
    card = Card.model_validate_json((out / "pilot_1_clean.json").read_bytes())
    reason = card.status.decisions[-1].reason
    assert card.status.current == "RETAINED" and "unreadable reply from cut" in reason
    assert "finish_reason length" in reason and "refuses" in reason

