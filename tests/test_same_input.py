"""Same input across harnesses: for an arm, H00, H-W and H-D send the identical user message
(the card's rendering), P and Q differ only in the endpoint, and the system messages differ only
in how they describe the tools."""

from __future__ import annotations

import json

from draligned.cards import load_card
from draligned.harness import load_contract
from draligned.records import ModelCallEvent
from tests.harness_helpers import needs_bwrap
from tests.study_helpers import REPO, records, run, write_study

pytestmark = needs_bwrap
HARNESSES = ["H00", "H-W", "H-D"]


def test_identical_user_message_in_all_three_harnesses(tmp_path):
    result = run(write_study(tmp_path, ["travel_budget_en.json"], extra=f"harnesses = {json.dumps(HARNESSES)}"))
    archive = result.archive
    assert sorted(result.statuses.elements()) == ["completed"] * 6
    card = load_card(REPO / "factor_cards" / "travel_budget_en.json").card
    sent: dict[str, dict[str, str]] = {}
    for rec in records(result):
        first = next(e for e in rec.events if isinstance(e, ModelCallEvent))
        body = json.loads(archive.get_blob(first.request_blob))
        user = [m["content"] for m in body["messages"] if m["role"] == "user"]
        assert user == [archive.get_text(rec.user_message_blob)]
        sent.setdefault(rec.slot.arm, {})[rec.slot.harness] = user[0]
    for arm, by_harness in sent.items():
        assert sorted(by_harness) == sorted(HARNESSES)
        assert set(by_harness.values()) == {card.render(arm).text}
    p, q = card.render("P"), card.render("Q")
    (sp,), (sq,) = p.spans, q.spans
    assert p.text[:sp.start] == q.text[:sq.start] and p.text[sp.end:] == q.text[sq.end:]
    assert p.text[sp.start:sp.end] != q.text[sq.start:sq.end]


def test_system_messages_differ_only_in_the_tool_sentences():
    prompts = {h: load_contract(h).contract.system_prompt for h in HARNESSES}
    head = prompts["H00"].split("Use search")[0]
    for prompt in prompts.values():
        assert prompt.startswith(head + "Use search to find sources and read to open a page by its URL.")
        assert prompt.endswith(" Write the report for this user.")
