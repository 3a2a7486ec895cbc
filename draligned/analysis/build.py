"""Build a report: load rows at the edge, run the pure readouts, collect tables and sections."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from draligned.analysis import (
    agreement,
    cess_side,
    consistency,
    coverage,
    interventions,
    matrices,
    process,
    provenance,
    retention,
    sides,
)
from draligned.analysis.adapters import (
    RUNS_SQL,
    TEXT_EVENTS_SQL,
    QueryLog,
    archive_sha256,
    load_cards,
    load_runs,
    load_texts,
    with_search_cells,
)
from draligned.analysis.cess_source import CESS_SQL, INTERVENTIONS_SQL, load_cess, load_interventions
from draligned.analysis.findings import Fact, findings
from draligned.analysis.pairs import StateIndex, build_pairs, finished_runs, in_subset
from draligned.analysis.plan import LoadedPlan, PlanError
from draligned.analysis.simulators import simulators
from draligned.analysis.states_source import STATES_SQL, load_states
from draligned.analysis.table import Table
from draligned.archive import Archive
from draligned.archive.index import connect
from draligned.records import Record

_STATE_TABLES = ("coverage_states", "pair_matrix", "pair_index", "pair_summary", "retention_flows", "retention_summary",
                 "request_vs_final", "searched_alternative", "state_distribution", "consistency_settings",
                 "consistency_cards", "evaluator_agreement")
_SOURCES: dict[str, list[str]] = {
    **{name: [RUNS_SQL, STATES_SQL] for name in _STATE_TABLES},
    "text_change": [RUNS_SQL, TEXT_EVENTS_SQL], "provenance": [RUNS_SQL, TEXT_EVENTS_SQL],
    "cess_by_arm": [RUNS_SQL, CESS_SQL], "cess_by_pair": [RUNS_SQL, CESS_SQL],
    "cess_interventions": [INTERVENTIONS_SQL],
}
"""The queries whose rows feed each table (tables not listed read only the runs query)."""


class Identity(Record):
    """What produced a report: plan, evaluator and archive, each by hash."""

    plan_name: str
    """Plan name."""
    plan_path: str
    """Plan file."""
    plan_sha256: str
    """sha256 of the plan file."""
    evaluator_id: str
    """Evaluator whose states are read."""
    archive_path: str
    """Archive root."""
    archive_sha256: str
    """sha256 over the sorted record hashes of every run in the index."""
    runs_in_archive: int
    """Run attempts in the index."""
    runs_in_subset: int
    """Run attempts in the plan's subset."""
    index_warning: str | None = None
    """Set when the index does not list the same runs as the run files on disk (stale index)."""
    simulators: list[str] = []
    """The simulators among the subset's agent models and the report's evaluators (the SIMULATOR banner)."""
    verified: bool = True
    """False when the report was built with ``--no-verify``: the archive's files were not checked against
    their hashes first."""

    def line(self) -> str:
        """One-line provenance stamp shown under every table."""
        return (f"plan {self.plan_name} ({self.plan_sha256[:12]}) · evaluator {self.evaluator_id} · "
                f"archive {self.archive_sha256[:12]}")


class Section(Record):
    """A report section: its tables and figures, or why it is empty."""

    key: str
    """Anchor id."""
    title: str
    """Heading."""
    intro: str
    """What the readout means (with the paper table it mirrors)."""
    tables: list[str] = []
    """Names of the tables shown."""
    figures: list[str] = []
    """Names of the figures shown."""
    notice: str | None = None
    """Shown prominently when the section has no data (e.g. no evaluator reads)."""


class Report(Record):
    """Everything a report writes."""

    identity: Identity
    """Provenance of every number."""
    states_available: bool
    """Whether the evaluator's states exist in this archive."""
    tables: dict[str, Table]
    """All tables by name."""
    sections: list[Section]
    """Sections in order."""
    queries: list[str]
    """Every query run, in order."""
    findings: list[list[Fact]] = []
    """The findings section: one sentence per answer, each number naming its table."""


def build_report(archive_root: str | Path, loaded: LoadedPlan, evaluator_id: str, verified: bool = True) -> Report:
    """Compute every readout of the plan over the archive for one evaluator (``verified``: whether the
    caller checked the archive's hashes first; recorded in the identity)."""
    archive, plan, log = Archive(archive_root), loaded.plan, QueryLog()
    con = connect(archive)
    try:
        all_runs = with_search_cells(archive, load_runs(con, log))
        runs = [r for r in all_runs if in_subset(r, plan)]
        if not runs:
            raise PlanError(_matches_nothing(loaded, archive, all_runs))
        cards = load_cards(archive, runs)
        evaluators = [evaluator_id] + [e for e in plan.agreement.evaluators if e != evaluator_id]
        states = {e: load_states(con, e, log) for e in evaluators}
        done = list(finished_runs(runs).values())
        texts = load_texts(con, archive, {r.run_id for r in done}, log)
        cess = {c.run_id: c for c in load_cess(con, log)}
        trials = load_interventions(con, log, plan.subset)
    finally:
        con.close()
    ident = Identity(plan_name=plan.name, plan_path=loaded.path, plan_sha256=loaded.sha256,
                     evaluator_id=evaluator_id, archive_path=str(archive.root),
                     archive_sha256=archive_sha256(all_runs), runs_in_archive=len(all_runs),
                     runs_in_subset=len(runs), index_warning=_stale(archive, all_runs),
                     simulators=simulators(archive, {r.run_id for r in runs}, evaluators), verified=verified)
    pairs = build_pairs(runs, cards, plan)
    indexes = {e: StateIndex(rows) for e, rows in states.items()}
    main = indexes[evaluator_id]
    have = bool(main)
    t: list[Table] = [coverage.run_coverage(runs), coverage.pair_coverage(pairs),
                      coverage.state_coverage(runs, cards, {evaluator_id: main}, plan),
                      *process.process_counts(runs), retention.text_change(done, texts, plan),
                      provenance.provenance(done, texts, plan),
                      cess_side.cess_by_arm(runs, cess), cess_side.cess_by_pair(pairs, cess, plan.cess),
                      interventions.intervention_effects(trials, plan.cess)]
    if have:
        t += [sides.pair_index(pairs, main, cards, plan),
              *matrices.pair_matrices(pairs, {e: i for e, i in indexes.items() if i}, plan),
              *retention.direction_retention(pairs, main, plan), *process.request_vs_final(pairs, main),
              consistency.state_distribution(pairs, main, plan), *consistency.recurrence(pairs, main, plan),
              agreement.evaluator_agreement(evaluator_id, states)]
    tables = {x.name: x.model_copy(update={"sql": _SOURCES.get(x.name, [RUNS_SQL])}) for x in t}
    return Report(identity=ident, states_available=have, tables=tables,
                  sections=_sections(have, evaluator_id, plan.primary_phase, plan.comparisons.primary),
                  queries=log.queries,
                  findings=findings(tables, plan, evaluator_id))


def _matches_nothing(loaded: LoadedPlan, archive: Archive, runs: list) -> str:
    """Why a plan selects no run, and what the archive holds instead (an empty report answers nothing)."""
    if not runs:
        return f"{archive.root}: the archive has no runs, so there is nothing to report"
    have = {field: sorted({getattr(r, attr) for r in runs}) for field, attr in
            (("studies", "study"), ("cards", "card_id"), ("models", "model"), ("harnesses", "harness"))}
    return (f"{loaded.path}: [subset] matches none of the {len(runs)} runs in {archive.root}; the archive has "
            + "; ".join(f"{field} {', '.join(map(str, values))}" for field, values in have.items()))


def _stale(archive: Archive, runs: list) -> str | None:
    """A warning when run files and index disagree (the index is derived and may be out of date)."""
    on_disk = {p.name.removesuffix(".started.json").removesuffix(".json")
               for p in archive.record_paths() + archive.started_paths()}
    indexed = {r.run_id for r in runs}
    if on_disk == indexed:
        return None
    return (f"the index lists {len(indexed)} runs but the archive holds {len(on_disk)} run files; "
            f"run `draligned archive reindex {archive.root}` and rebuild the report")


def _sections(have: bool, evaluator: str, phase: str, primary: Sequence[str]) -> list[Section]:
    no_reads = None if have else (
        f"No evaluator reads in this archive for evaluator '{evaluator}': directional states do not exist yet, "
        "so this readout is not computed. Run the evaluator on the archive, then rebuild the report.")
    return [
        Section(key="coverage", title="Coverage",
                intro="What was started, finished, paired and read (paper Tables 1 and 15). Each table has its "
                      "own denominator; every non-directional or missing category keeps its own name.",
                tables=["coverage_runs", "coverage_pairs", "coverage_states"]),
        Section(key="matrices", title="Pair matrices",
                intro=f"For each matched pair, the state of arm a crossed with the state of arm b on the factor the "
                      f"pair changes (paper Figure 2, Table 22). Both OWN = the final recommendations distinguish "
                      f"the user conditions. Headline phase: {phase}. The headline and the heatmaps count the "
                      f"primary comparisons ({' + '.join(primary)}) pooled over cards, models and harnesses; the "
                      f"tables keep every comparison.",
                tables=["pair_summary", "pair_index", "pair_matrix"] if have else [],
                figures=["pair_heatmaps"] if have else [], notice=no_reads),
        Section(key="retention", title="Draft to final",
                intro="Whether the final keeps the draft's direction, and how much the text changed on the way "
                      "(paper Tables 25, 32). Identity under file-delivering harnesses can be structural.",
                tables=(["retention_summary", "retention_flows"] if have else []) + ["text_change"],
                figures=(["retention_flows"] if have else []) + ["text_change"],
                notice=None if have else (no_reads or "") + " Text change below needs no evaluator."),
        Section(key="process", title="Process vs delivery",
                intro="What the run did (requests, drafts, calls) next to what it recommended; the paper's "
                      "Table 24 pattern: searching for an alternative is not recommending it.",
                tables=["process_by_arm"] + (["request_vs_final", "searched_alternative"] if have else [])
                + ["process_runs"],
                figures=["process_counts"],
                notice=None if have else (no_reads or "") + " Process counts below need no evaluator."),
        Section(key="consistency", title="Directional consistency",
                intro="Final states across model families, harnesses, reasoning settings and seeds, how often the "
                      "directional difference recurs, and agreement between evaluators on the same documents.",
                tables=["state_distribution", "consistency_cards", "consistency_settings", "evaluator_agreement"]
                if have else [], figures=["state_distribution"] if have else [], notice=no_reads),
        Section(key="provenance", title="Mechanical provenance",
                intro="Share of tool-return units received before the first draft that are linked into it by URL "
                      "or a verbatim fragment, and of first-draft units linked back (paper Table 35). Units of "
                      "different kinds are never pooled.",
                tables=["provenance"]),
        Section(key="cess", title="CESS next to the Opened Mean",
                intro="Opened Mean (what the run opened) next to the CESS estimate of the searchable pool, per arm "
                      "and as arm differences with cluster-bootstrap CIs; 2x2 search-policy intervention effects "
                      "with their ICC when the study ran them. Different estimands: read them side by side, never "
                      "as corrections of each other.",
                tables=["cess_by_arm", "cess_by_pair", "cess_interventions"], figures=["cess_vs_opened"]),
    ]
