"""Logged candidate-pool search inside H00: sampling, logging, CRN, stopping, and the pool file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from draligned.archive import Archive
from draligned.archive.writer import RunWriter, new_record
from draligned.cess.pool import ControllerConfig, PoolController, PoolIndex
from draligned.records import (
    PoolRoundEvent,
    RunRecord,
    SearchCondition,
    Slot,
    ToolCallEvent,
)
from draligned.study import StudyError, load_study
from draligned.tools.acquisition import SearchSpent
from draligned.tools.corpus import tokenize
from draligned.tools.pool_file import PoolFileError, load_pool
from draligned.tools.pool_search import SPENT_MESSAGE, PoolSearchBackend, pair_seed
from tests.pool.helpers import POOL, pool_records, rounds_of

EPSILON, N_DOCS, K = 0.2, 20, 3


def test_each_search_returns_one_sampled_document_and_logs_a_full_positive_vector(pool_archive: Archive):
    pool = load_pool(POOL)
    for record in pool_records(pool_archive):
        searches = [e for e in record.events if isinstance(e, ToolCallEvent) and e.tool == "search"]
        chosen = [e for e in rounds_of(record) if e.chosen is not None]
        assert chosen and len(searches) >= len(chosen)
        for ev in chosen:
            probs = json.loads(pool_archive.get_blob(ev.probs_blob))
            assert len(probs) == N_DOCS and math.isclose(math.fsum(probs), 1.0, abs_tol=1e-12)
            assert min(probs) >= EPSILON / N_DOCS - 1e-15  # ε share: every document stays reachable
            index = [d.id for d in pool.documents].index(ev.chosen)
            assert ev.p_chosen == probs[index]
        returned = [pool_archive.get_blob(e.return_blob).decode() for e in searches[: len(chosen)]]
        for text, ev in zip(returned, chosen, strict=True):
            assert text.count("\nURL: ") == 1 and text.startswith("[1] ")
            assert f"URL: {pool.documents[[d.id for d in pool.documents].index(ev.chosen)].address}" in text


def test_paired_p_and_q_runs_share_their_uniform_draws(pool_archive: Archive):
    by_key: dict[tuple, dict[str, RunRecord]] = {}
    for r in pool_records(pool_archive):
        by_key.setdefault((r.slot.seed, r.slot.search_condition.model_dump_json()), {})[r.slot.arm] = r
    assert len(by_key) == 8
    for arms in by_key.values():
        p, q = (rounds_of(arms[a]) for a in ("P", "Q"))
        common = min(len(p), len(q))
        assert common >= 2
        assert [(e.u_select, e.u_stop) for e in p[:common]] == [(e.u_select, e.u_stop) for e in q[:common]]
    seeds = {pair_seed(r.slot) for r in pool_records(pool_archive)}
    assert len(seeds) == 2  # one pair seed per replicate, shared by arms and cells


def test_fixed_stopping_opens_exactly_k_documents_then_search_is_spent(pool_archive: Archive):
    fixed = [r for r in pool_records(pool_archive) if r.slot.search_condition.stopping == "fixed"]
    assert fixed
    for record in fixed:
        rounds = rounds_of(record)
        assert [e.round for e in rounds] == list(range(1, K + 1))
        assert all(e.chosen is not None and e.stop_prob == 0.0 and e.u_stop is None for e in rounds)
        searches = [e for e in record.events if isinstance(e, ToolCallEvent) and e.tool == "search"]
        for extra in searches[K:]:
            assert extra.error == "search_spent"
            assert pool_archive.get_blob(extra.return_blob).decode() == SPENT_MESSAGE


def test_adaptive_stopping_logs_stop_probabilities_from_the_agents_wish(pool_archive: Archive):
    adaptive = [r for r in pool_records(pool_archive) if r.slot.search_condition.stopping == "adaptive"]
    for record in adaptive:
        rounds = rounds_of(record)
        assert rounds[0].stop_prob == 0.0 and rounds[0].u_stop is None
        for ev in rounds[1:]:
            assert ev.stop_prob == (0.75 if ev.wish_stop else 0.10) and ev.u_stop is not None
            assert (ev.chosen is None) == (ev.u_stop < ev.stop_prob)
    assert any(rounds_of(r)[-1].chosen is None for r in adaptive)  # some searches were stopped


def _backend(tmp_path: Path, config: ControllerConfig) -> tuple[PoolSearchBackend, RunWriter]:
    pool = load_pool(POOL)
    archive = Archive(tmp_path / "a")
    slot = Slot(study="t", card_id="travel_budget_en", card_sha256="c", arm="P", model="m", model_sha256="m",
                harness="H00", contract_sha256="h", search_sha256="s", budget={}, seed=0,
                search_condition=SearchCondition(selection="agent", stopping=config.stopping, ranking="original"))
    record = new_record(run_id="r1", attempt=1, slot_id=slot.slot_id, slot=slot, study_sha256="x",
                        card_path="c", protocol="sim", requested_model="m", system_prompt_blob="a",
                        user_message_blob="b", tools_blob="c")
    controller = PoolController(PoolIndex.build(pool.candidates, tokenize), config, "original", pair_seed(slot))
    writer = RunWriter(archive, record)
    return PoolSearchBackend(pool, controller, writer), writer


def test_a_draft_since_the_last_search_is_a_wish_to_stop_and_a_stop_is_logged(tmp_path: Path):
    config = ControllerConfig(budget=5, stopping="adaptive", stop_prob_wish_stop=0.999, stop_prob_wish_continue=0.0)
    backend, writer = _backend(tmp_path, config)
    assert len(backend.search("japan budget hostel", 6)) == 1
    assert len(backend.search("cheap flights osaka", 6)) == 1  # no draft in between: wish to continue
    writer.draft("draft text", "e0001")
    with pytest.raises(SearchSpent, match="budget for this pool is spent"):
        backend.search("ryokan", 6)
    with pytest.raises(SearchSpent):
        backend.search("again", 6)
    events = [e for e in writer.record.events if isinstance(e, PoolRoundEvent)]
    assert [(e.round, e.wish_stop, e.stop_prob, e.chosen is None) for e in events] == [
        (1, False, 0.0, False), (2, False, 0.0, False), (3, True, 0.999, True)]
    assert [e.event_id for e in writer.record.events] == ["e0001", "e0002", "e0003", "e0004"]


def test_only_documents_the_search_returned_can_be_read(tmp_path: Path):
    backend, _ = _backend(tmp_path, ControllerConfig(budget=2))
    assert backend.page("pool://x001") is None and backend.page(load_pool(POOL).documents[0].address) is None
    hit = backend.search("japan", 6)[0]
    assert backend.page(hit.url) is not None and backend.page(hit.url).text == hit.text


def test_pool_file_errors_name_file_line_and_field(tmp_path: Path):
    good = {"id": "a", "title": "T", "text": "x"}
    cases = [
        ([good, {**good, "id": "b", "score": 1.5}], "2: field 'score'"),
        ([good, good], "2: field 'id': duplicate id 'a'"),
        ([{"id": "a", "title": "T"}], "1: field 'text'"),
        ([{**good, "extra": 1}], "1: field 'extra'"),
    ]
    for lines, expected in cases:
        path = tmp_path / "pool.jsonl"
        path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
        with pytest.raises(PoolFileError, match=f"pool.jsonl:{expected}"):
            load_pool(path)


def test_study_cells_expand_into_slots_and_the_search_config_is_in_the_slot(tmp_path: Path, pool_study: Path):
    study = load_study(pool_study)
    slots = study.slots("s" * 64)
    assert len(slots) == 2 * 2 * 4  # seeds x arms x (selection x stopping)
    assert {(s.search_condition.selection, s.search_condition.stopping) for s in slots} == {
        ("agent", "fixed"), ("agent", "adaptive"), ("uniform", "fixed"), ("uniform", "adaptive")}
    assert not {s.slot_id for s in slots} & {s.slot_id for s in study.slots("t" * 64)}
    corpus_slot = slots[0].model_copy(update={"search_condition": None})
    assert "search_condition" not in corpus_slot.model_dump(exclude_none=True)  # corpus slot ids unchanged

    from draligned.tools.pool_search import open_search
    base = open_search(study.spec.search, study.corpus_path, study.pool_paths).sha256
    changed = study.spec.search.model_copy(update={"controller": ControllerConfig(budget=4)})
    assert open_search(changed, study.corpus_path, study.pool_paths).sha256 != base

    bad = tmp_path / "bad.toml"
    bad.write_text(pool_study.read_text().replace("travel_budget_en =", "other_card ="))
    with pytest.raises(StudyError, match="search.pools: no pool file for card 'travel_budget_en'"):
        load_study(bad)
