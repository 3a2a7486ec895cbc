"""Each readout over small synthetic rows with answers worked out by hand."""

from __future__ import annotations

import random

import pytest

from draligned.analysis import agreement, coverage, matrices, process, provenance, retention
from draligned.analysis.cess_side import cess_by_pair, cluster_bootstrap
from draligned.analysis.consistency import recurrence
from draligned.analysis.interventions import InterventionRow, icc_1k, intervention_effects
from draligned.analysis.pairs import StateIndex, build_pairs
from draligned.analysis.plan import Plan, PlanError, load_plan
from draligned.analysis.rows import CessRow, RunRow, RunTexts, StateRow, ToolReturn
from draligned.cards import load_card

REPO_CARDS = {c: load_card(f"factor_cards/{c}.json").card for c in ("travel_budget_en", "car_insurance_2f_en")}
PLAN = Plan(name="t", version=1)


def run(run_id: str, arm: str, card: str = "travel_budget_en", seed: int = 0, status: str = "completed",
        model: str = "m1", harness: str = "H00", drafts: int = 1, attempt: int = 1, requests: int = 3) -> RunRow:
    return RunRow(run_id=run_id, attempt=attempt, slot_id=f"{card}/{arm}/{model}/{harness}/{seed}", study="s",
                  card_id=card, card_sha256="x", arm=arm, model=model, harness=harness, seed=seed, status=status,
                  model_calls=5, tool_calls=4, drafts=drafts, requests=requests, has_final=status == "completed",
                  record_sha256=run_id)


def st(run_id: str, document: str, state: str, axis: str = "budget_cap", reason: str | None = None,
       evaluator: str = "e1") -> StateRow:
    phase = "requests" if document == "requests" else document.split(":")[0]
    return StateRow(run_id=run_id, evaluator_id=evaluator, phase=phase, document=document, axis=axis, state=state,
                    reason=reason)


# Three seeds of a P/Q card: seed 0 distinguished (OWN/OWN), seed 1 coincides (BOTH/BOTH),
# seed 2 has UNKNOWN on P while Q's only attempt failed (NO_RUN).
RUNS = [run("p0", "P", seed=0), run("q0", "Q", seed=0), run("p1", "P", seed=1), run("q1", "Q", seed=1),
        run("p2", "P", seed=2), run("q2", "Q", seed=2, status="failed")]
STATES = [st("p0", "final", "OWN"), st("q0", "final", "OWN"), st("p1", "final", "BOTH"), st("q1", "final", "BOTH"),
          st("p2", "final", "UNKNOWN", reason="READS_DISAGREE"),
          st("p0", "draft:1", "OWN"), st("q0", "draft:1", "OTHER"), st("p1", "draft:1", "BOTH"),
          st("q1", "draft:1", "UNKNOWN", reason="READS_DISAGREE"),
          st("p0", "requests", "OTHER"), st("q0", "requests", "UNDEFINED", reason="NO_IDENTIFIED_REQUEST")]


def pairs():
    return build_pairs(RUNS, REPO_CARDS, PLAN)


def test_pairs_use_card_comparisons_and_name_missing_runs():
    ps = pairs()
    assert [(p.comparison, p.seed, p.run_a and p.run_a.run_id, p.run_b and p.run_b.run_id) for p in ps] == [
        ("P-Q", 0, "p0", "q0"), ("P-Q", 1, "p1", "q1"), ("P-Q", 2, "p2", None)]
    two = build_pairs([run(a + "1", a, card="car_insurance_2f_en") for a in ("PP", "QP", "PQ", "QQ")],
                      REPO_CARDS, PLAN)
    assert [(p.comparison, p.axis) for p in two] == [("PP-QP", "driving_pattern"), ("PQ-QQ", "driving_pattern"),
                                                     ("PP-PQ", "spending"), ("QP-QQ", "spending")]


def test_pair_matrix_counts_and_shares():
    long, summary = matrices.pair_matrices(pairs(), {"e1": StateIndex(STATES)}, PLAN)
    final_all = {(r["state_a"], r["state_b"]): r["pairs"] for r in long.records()
                 if r["phase"] == "final" and r["group_by"] == "all"}
    assert final_all == {("OWN", "OWN"): 1, ("BOTH", "BOTH"): 1, ("UNKNOWN", "NO_RUN"): 1}
    row = next(r for r in summary.records() if r["phase"] == "final" and r["group_by"] == "all")
    counts = (row["pairs"], row["both_own"], row["coincide"], row["either_unknown"], row["either_absent"])
    assert counts == (3, 1, 2, 1, 1)
    assert row["both_own_share"] == pytest.approx(1 / 3, abs=1e-4) and row["coincide_share"] == pytest.approx(0.6667)
    reqs = next(r for r in summary.records() if r["phase"] == "requests" and r["group_by"] == "all")
    assert reqs["coincide"] == 0 and reqs["either_absent"] == 2  # NOT_READ/NOT_READ (seed 1) is no direction
    assert reqs["either_undefined"] == 1  # seed 0: OTHER vs UNDEFINED is counted, not left out of every column
    req = {(r["state_a"], r["state_b"]) for r in long.records() if r["phase"] == "requests" and r["group_by"] == "all"}
    assert req == {("OTHER", "UNDEFINED"), ("NOT_READ", "NOT_READ"), ("NOT_READ", "NO_RUN")}


def test_retention_direction_and_text_change():
    flows, kept = retention.direction_retention(pairs(), StateIndex(STATES), PLAN)
    f = {(r["draft_state"], r["final_state"]): r["runs"] for r in flows.records()}
    assert f == {("OWN", "OWN"): 1, ("OTHER", "OWN"): 1, ("BOTH", "BOTH"): 1, ("UNKNOWN", "BOTH"): 1,
                 ("NOT_READ", "UNKNOWN"): 1}
    k = kept.records()[0]
    assert (k["runs"], k["readable"], k["kept"], k["kept_share"]) == (5, 3, 2, 0.6667)
    assert (k["own_at_draft"], k["own_kept"], k["pairs_readable"], k["pairs_distinguished_draft"]) == (1, 1, 1, 0)

    words = " ".join(f"w{i}" for i in range(10))
    assert retention.jaccard(words, words, 5) == 1.0
    # 10 tokens -> 6 shingles each; changing the last token changes 1 shingle: 5 shared / 7 in the union
    changed = " ".join(f"w{i}" for i in range(9)) + " zz"
    assert retention.jaccard(words, changed, 5) == pytest.approx(5 / 7)
    assert retention.jaccard("住在杭州的用户", "住在杭州的用户", 5) == 1.0
    runs = [run("a", "P", harness="H-W"), run("b", "P", harness="H00"), run("c", "P", harness="H00")]
    texts = {"a": RunTexts(run_id="a", drafts={1: words}, final=words, returns_before_first_draft=[]),
             "b": RunTexts(run_id="b", drafts={1: "x", 2: words}, final=words, returns_before_first_draft=[]),
             "c": RunTexts(run_id="c", drafts={}, final=words, returns_before_first_draft=[])}
    tc = retention.text_change(runs, texts, PLAN).records()
    assert [(r["run_id"], r["draft_version"], r["identical"], r["structural"]) for r in tc] == [
        ("a", 1, True, True), ("b", 2, True, False)]


def test_process_request_readout_next_to_final_and_counts():
    cross, alt = process.request_vs_final(pairs(), StateIndex(STATES))
    assert [r[0] for r in alt.rows] == ["p0"]  # searched OTHER, final OWN: the Table 24 pattern
    c = {(r["request_state"], r["final_state"]): r["runs"] for r in cross.records()}
    assert c[("OTHER", "OWN")] == 1 and c[("UNDEFINED", "OWN")] == 1 and sum(c.values()) == 5
    per_run, per_arm = process.process_counts(RUNS)
    assert len(per_run.rows) == 6
    q = next(r for r in per_arm.records() if r["arm"] == "Q")
    assert q["n"] == 2 and q["requests_mean"] == 3


def test_consistency_recurs_across_settings():
    runs = [run(rid, arm, model=f"m{i // 2 + 1}") for i, (rid, arm) in enumerate(zip("abcdef", "PQPQPQ", strict=True))]
    states = [st("a", "final", "OWN"), st("b", "final", "OWN"), st("c", "final", "OWN"), st("d", "final", "OTHER"),
              st("e", "final", "UNKNOWN")]
    by_setting, by_card = recurrence(build_pairs(runs, REPO_CARDS, PLAN), StateIndex(states), PLAN)
    assert [(r["model"], r["readable"], r["distinguished"]) for r in by_setting.records()] == [
        ("m1", 1, 1), ("m2", 1, 0), ("m3", 0, 0)]
    c = by_card.records()[0]
    assert (c["settings"], c["settings_readable"], c["settings_recurring"], c["recurrence_share"]) == (3, 2, 1, 0.5)


def test_kappa_known_value_and_undefined():
    k = agreement.cohen(["OWN", "OWN", "OTHER", "OTHER"], ["OWN", "OTHER", "OTHER", "OTHER"])
    assert (k.n, k.exact, k.kappa) == (4, 0.75, 0.5) and agreement.undefined_reason(k) is None
    same = agreement.cohen(["OWN"] * 5, ["OWN"] * 5)
    assert same.exact == 1.0 and same.kappa is None and "neither rater varied" in agreement.undefined_reason(same)
    assert agreement.undefined_reason(agreement.cohen([], [])) == "no items"
    one_varies = agreement.cohen(["OWN"] * 4, ["OWN", "OWN", "OWN", "OTHER"])
    assert one_varies.kappa == 0.0
    e2 = [st("p0", "final", "OWN", evaluator="e2"), st("q0", "final", "OTHER", evaluator="e2")]
    states = {"e1": STATES, "e2": e2, "e3": []}
    rows = agreement.evaluator_agreement("e1", states).records()
    final = next(r for r in rows if r["phase"] == "final")
    assert (final["n"], final["agree"], final["only_evaluator"], final["only_other"]) == (2, 1, 3, 0)
    assert "e3" in agreement.evaluator_agreement("e1", states).note


def test_coverage_counts_every_category_by_name():
    runs = RUNS + [run("p3", "P", seed=3, status="started"),
                   run("p3b", "P", seed=3, attempt=2, status="budget_exhausted"), run("q3", "Q", seed=3, drafts=0)]
    cov = coverage.run_coverage(runs).records()[0]
    assert (cov["slots"], cov["slots_finished"], cov["attempts"], cov["completed"], cov["failed"],
            cov["interrupted"], cov["budget_exhausted"]) == (8, 7, 9, 6, 1, 1, 1)
    assert cov["completed_rate"] == pytest.approx(6 / 9, abs=1e-4)
    states = coverage.state_coverage(runs, REPO_CARDS, {"e1": StateIndex(STATES)}, PLAN).records()
    final = {(r["state"], r["reason"]): r["documents"] for r in states if r["phase"] == "final"}
    # 7 finished runs x 1 factor: p3b has no final (budget_exhausted), q3 completed but not read
    assert final == {("OWN", ""): 2, ("BOTH", ""): 2, ("UNKNOWN", "READS_DISAGREE"): 1, ("NO_DOCUMENT", ""): 1,
                     ("NOT_READ", ""): 1}
    assert all(r["denominator"] == 7 for r in states)
    draft = {r["state"]: r["documents"] for r in states if r["phase"] == "draft:first"}
    assert draft["NO_DOCUMENT"] == 1  # q3 saved no draft
    pc = coverage.pair_coverage(build_pairs(runs, REPO_CARDS, PLAN)).records()[0]
    assert (pc["pairs"], pc["both_runs"], pc["missing_arm_b"]) == (4, 3, 1)


def test_provenance_links_by_url_and_fragment():
    search = ("[1] Cheap rail passes\nURL: https://x.test/rail\nSnippet: Rail passes cost 120 euros for a week.\n\n"
              "[2] Hostels\nURL: https://x.test/hostel\nSnippet: Dorm beds from 18 euros.\n\n"
              "[3] Museums\nURL: https://x.test/museum\nSnippet: Free entry on the first Sunday of the month.")
    read = "The night train leaves at 22:10 from the central station every day."
    draft = ("Plan: buy a pass (see https://x.test/rail). Take a night train leaves at 22:10 from town.\n"
             "Budget is tight.")
    texts = {"r": RunTexts(run_id="r", drafts={1: draft, 2: "later"}, final="f", returns_before_first_draft=[
        ToolReturn(tool="search", request_text="rail", text=search),
        ToolReturn(tool="read", request_text="https://x.test/train", text=read)])}
    rows = {r["unit"].strip(): r for r in provenance.provenance([run("r", "P")], texts, PLAN).records()}
    assert (rows["search results"]["linked"], rows["search results"]["total"]) == (1, 3)  # by URL
    assert (rows["page reads"]["linked"], rows["page reads"]["total"]) == (1, 1)  # 20-char fragment
    before = rows["return units before first draft"]
    assert (before["linked"], before["total"]) == (2, 4)
    # draft units: 3 sentences; the first by URL, the second by fragment, the third unlinked
    assert (rows["first-draft units"]["linked"], rows["first-draft units"]["total"]) == (2, 3)
    # the shared fragment " night train leaves at 22:10 from " is 34 chars: not a 40-char strict link
    assert rows["strict fragments"]["linked"] == 1



@pytest.mark.parametrize("lengths", [(20, 40), (20, 12), (16, 16)])
def test_the_shared_windows_of_a_return_text_are_exactly_those_a_draft_window_can_meet(lengths):
    rng = random.Random(7)
    words = ["rail", "pass", "night", "train", "22:10", "euros", "hostel", "dorm", "beds", "museum", "free"]
    text = " ".join(rng.choice(words) for _ in range(400))
    draft = " ".join(rng.choice(words) for _ in range(60)) + "  \n " + text[300:380]
    k = lengths[0]
    shared = provenance.shared_fragments(text, draft, lengths, provenance.fragments(draft, k))
    for n, got in zip(lengths, shared, strict=True):
        full = provenance.fragments(text, n)
        assert got <= full  # only windows of the return text
        assert {w for w in provenance.fragments(draft, n) if w in got} == provenance.fragments(draft, n) & full

def test_cess_side_by_side_and_bootstrap():
    cess = {"p0": CessRow(run_id="p0", opened_mean=0.2, estimate=0.5),
            "q0": CessRow(run_id="q0", opened_mean=0.6, estimate=0.4),
            "p1": CessRow(run_id="p1", opened_mean=0.3, estimate=None, interval_low=0.1, interval_high=0.9),
            "q1": CessRow(run_id="q1", opened_mean=0.5, estimate=0.3)}
    t = cess_by_pair(pairs(), cess, PLAN.cess).records()[0]
    # "P-Q" is P minus Q: (0.2 - 0.6 + 0.3 - 0.5) / 2 and 0.5 - 0.4, clustered by card
    assert (t["cluster"], t["om_pairs"], t["opened_mean_a_minus_b"], t["cess_pairs"], t["cess_a_minus_b"],
            t["pairs_interval_only"]) == ("card", 2, pytest.approx(-0.3), 1, pytest.approx(0.1), 1)
    assert t["om_low"] <= t["opened_mean_a_minus_b"] <= t["om_high"]
    # mean within cluster, then clusters equally: (1 + 3) / 2, not the run-weighted 5/3
    iv = cluster_bootstrap([1.0, 1.0, 3.0], ["a", "a", "b"], PLAN.cess)
    assert iv.mean == pytest.approx(2.0) and iv.low == 1.0 and iv.high == 3.0


def test_plan_errors_name_file_and_field(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nversion = 1\n[retention]\ndraft = "middle"\n')
    with pytest.raises(PlanError, match=r"bad.toml: retention.draft"):
        load_plan(bad)
    bad.write_text('name = "x"\nversion = 1\nphases = ["final"]\nprimary_phase = "requests"\n')
    with pytest.raises(PlanError, match=r"bad.toml: primary_phase"):
        load_plan(bad)
    bad.write_text('name = "x"\nversion = 1\n[cess]\ncluster = "pair"\n')  # finer than the card: refused
    with pytest.raises(PlanError, match=r"bad.toml: cess.cluster"):
        load_plan(bad)
    bad.write_text('name = "x"\nversion = 1\n[cess]\ncluster = "study"\n')  # coarser: allowed
    assert load_plan(bad).plan.cess.cluster == "study"
    bad.write_text('name = "x"\nversion = 1\nsurprise = 1\n')
    with pytest.raises(PlanError, match=r"bad.toml: surprise"):
        load_plan(bad)
    for shipped in ("analysis/demo.toml", "analysis/paper_main.toml"):
        loaded = load_plan(shipped)
        assert len(loaded.sha256) == 64 and loaded.plan.primary_phase == "final"
    assert load_plan("analysis/paper_main.toml").plan.comparisons.primary == ["PP-QP"]
    assert load_plan("analysis/demo.toml").plan.cess.cluster == "card"


def test_intervention_effects_and_icc():
    def cells(task, rep, t00, t10, t01, t11):
        return [InterventionRow(study="s", card_id=task, block="P/m/H00/original", replicate=rep, selection=a,
                                stopping=b, opened_mean=v)
                for (a, b), v in {(0, 0): t00, (1, 0): t10, (0, 1): t01, (1, 1): t11}.items()]
    rows = (cells("A", 0, 0.1, 0.2, 0.1, 0.4) + cells("A", 1, 0.1, 0.2, 0.2, 0.4)
            + cells("B", 0, 0.1, 0.4, 0.1, 0.5) + cells("B", 1, 0.1, 0.4, 0.2, 0.5)
            + cells("C", 0, 0.1, 0.1, 0.1, 0.1)[:3])
    t = {r["effect"]: r for r in intervention_effects(rows, PLAN.cess).records()}
    assert t["selection"]["blocks"] == 4 and t["selection"]["incomplete_blocks"] == 1
    assert t["selection"]["mean"] == pytest.approx(0.2)  # (0.1 + 0.1 + 0.3 + 0.3) / 4
    assert t["total"]["mean"] == pytest.approx(0.35)
    assert t["interaction"]["mean"] == pytest.approx(0.1)  # blocks: 0.2, 0.1, 0.1, 0.0
    # selection is the same in both replicates of a task and differs between tasks -> ICC 1
    assert t["selection"]["icc"] == 1.0 and t["selection"]["icc_k"] == 2
    # stopping is 0 then 0.1 in every card: no between-card variation -> undefined
    assert t["stopping"]["icc"] is None and t["stopping"]["icc_undefined"] == "no between-card variation"
    assert icc_1k({"A": [1.0]}).undefined_reason == "needs two cards with two replicates"
    assert t["selection"]["cluster"] == "card"
    assert intervention_effects([], PLAN.cess).empty_reason.startswith("the archive has no complete 2x2")


def test_interventions_cluster_by_card_not_by_arm():
    """Two arms of one card are one cluster: the CI resamples 2 cards, the ICC compares 2 cards."""
    def cells(card, arm, rep, sel):
        return [InterventionRow(study="s", card_id=card, block=f"{arm}/m/H00/original", replicate=rep, selection=a,
                                stopping=b, opened_mean=sel * a) for a, b in ((0, 0), (1, 0), (0, 1), (1, 1))]
    rows = [r for card, sel in (("A", 0.2), ("B", 0.6)) for arm in ("P", "Q") for rep in (0, 1)
            for r in cells(card, arm, rep, sel + (0.1 if arm == "P" else 0.0) + 0.01 * rep)]
    t = {r["effect"]: r for r in intervention_effects(rows, PLAN.cess).records()}["selection"]
    assert (t["cluster"], t["blocks"], t["icc_cards"], t["icc_k"]) == ("card", 8, 2, 2)
    assert t["mean"] == pytest.approx((0.255 + 0.655) / 2)
    assert (t["low"], t["high"]) == (pytest.approx(0.255), pytest.approx(0.655))  # only 2 clusters to draw


def test_pool_runs_pair_within_their_search_cell_and_cells_are_not_averaged():
    """A pool study has one slot per (card, arm, model, harness, seed) and search cell: every cell
    is its own pair, never collapsed into one, and the per-arm CESS table keeps cells apart."""
    from draligned.analysis.cess_side import cess_by_arm
    cells = ("agent/fixed/original", "uniform/fixed/original")
    runs = [run(f"{a}{i}", a).model_copy(update={"search_cell": c, "slot_id": f"{a}/{c}"})
            for i, c in enumerate(cells) for a in ("P", "Q")]
    ps = build_pairs(runs, REPO_CARDS, PLAN)
    assert [(p.search_cell, p.run_a.run_id, p.run_b.run_id) for p in ps] == [
        ("agent/fixed/original", "P0", "Q0"), ("uniform/fixed/original", "P1", "Q1")]
    cess = {"P0": CessRow(run_id="P0", opened_mean=0.2, estimate=0.1),
            "Q0": CessRow(run_id="Q0", opened_mean=0.6, estimate=0.3),
            "P1": CessRow(run_id="P1", opened_mean=0.4, estimate=0.2),
            "Q1": CessRow(run_id="Q1", opened_mean=0.4, estimate=0.2)}
    by_pair = {r["search_cell"]: r for r in cess_by_pair(ps, cess, PLAN.cess).records()}
    assert by_pair["agent/fixed/original"]["opened_mean_a_minus_b"] == pytest.approx(-0.4)  # P0 - Q0
    assert by_pair["uniform/fixed/original"]["opened_mean_a_minus_b"] == 0.0
    by_arm = {(r["arm"], r["search_cell"]): r for r in cess_by_arm(runs, cess).records()}
    assert len(by_arm) == 4 and by_arm[("P", "agent/fixed/original")]["opened_mean"] == 0.2


def test_intervention_rows_use_the_latest_finished_attempt_of_each_slot():
    """A failed attempt, or an earlier attempt of a retried slot, never fills a 2x2 cell."""
    import duckdb

    from draligned.analysis.adapters import QueryLog
    from draligned.analysis.cess_source import load_interventions
    from draligned.cess.archive_runs import CESS_RUNS_DDL, CessRun

    con = duckdb.connect()
    con.execute(CESS_RUNS_DDL)
    base = {f: None for f in CessRun.model_fields} | {
        "study": "s", "card_id": "c", "arm": "P", "model": "m", "harness": "H00", "seed": 0, "ranking": "original",
        "status": "completed", "attempt": 1}
    rows = [base | {"run_id": f"r{a}{b}", "slot_id": f"s{a}{b}", "selection": ("uniform", "agent")[a],
                    "stopping": ("fixed", "adaptive")[b], "opened_mean": 0.1 * (a + 2 * b)}
            for a in (0, 1) for b in (0, 1)]
    rows += [base | {"run_id": "late", "slot_id": "s11", "attempt": 2, "selection": "agent", "stopping": "adaptive",
                     "opened_mean": 0.9},
             base | {"run_id": "bad", "slot_id": "s00", "attempt": 2, "status": "failed", "selection": "uniform",
                     "stopping": "fixed", "opened_mean": -1.0}]
    con.executemany(f"INSERT INTO cess_runs VALUES ({','.join('?' * len(CessRun.model_fields))})",
                    [list(r.values()) for r in rows])
    got = {(r.selection, r.stopping): r.opened_mean for r in load_interventions(con, QueryLog())}
    assert got == {(0, 0): 0.0, (1, 0): 0.1, (0, 1): 0.2, (1, 1): 0.9}
