"""PERSPECTRUM loader on the shipped fixture, evidence mode, and the benchmark pipeline."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from draligned.cess.bench import BenchSettings, run_bench
from draligned.cess.perspectrum import load_perspectrum, shared_document_ids, without_shared_documents
from draligned.cess.pool import CandidatePool
from draligned.cess.searches import SearchSettings

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "perspectrum"


def test_loader_on_fixture() -> None:
    data = load_perspectrum(FIXTURE)
    assert data.documents == "perspectives"
    assert [c.claim_id for c in data.tuning] == [12, 57, 91, 398, 180, 453]
    assert [c.claim_id for c in data.evaluation] == [214, 246, 360]
    raw = {c["cId"]: c for c in json.loads((FIXTURE / "perspectrum_with_answers_v1.0.json").read_text())}
    texts = {p["pId"]: p["text"] for p in json.loads((FIXTURE / "perspective_pool_v1.0.json").read_text())}
    for claim in data.tuning + data.evaluation:
        labels: dict[int, list[float]] = {}
        for cluster in raw[claim.claim_id]["perspectives"]:
            for pid in cluster["pids"]:
                labels.setdefault(pid, []).append(1.0 if cluster["stance_label_3"] == "SUPPORT" else -1.0)
        assert [d.id for d in claim.pool.documents] == [f"p{pid}" for pid in sorted(labels)]
        assert claim.y.tolist() == [np.mean(labels[pid]) for pid in sorted(labels)]
        assert [d.text for d in claim.pool.documents] == [texts[pid] for pid in sorted(labels)]
        assert claim.theta_star == pytest.approx(np.mean(claim.y))
        assert len(claim.pool.documents) >= 10 and claim.y.min() < 0 < claim.y.max()
    claim_398 = next(c for c in data.tuning if c.claim_id == 398)
    assert [d.id for d in claim_398.pool.documents].count("p2967") == 1  # listed in two clusters
    assert {c.split for c in data.tuning} == {"train", "dev"}


def test_min_docs_filter() -> None:
    data = load_perspectrum(FIXTURE, min_docs=5)
    assert 943 in [c.claim_id for c in data.evaluation]  # 5 perspectives of both signs
    assert 249 not in [c.claim_id for c in data.evaluation]  # one sign only


def _release(tmp_path: Path, evidence: bool) -> Path:
    claims = [
        {
            "cId": 1,
            "text": "claim one",
            "source": "x",
            "perspectives": [
                {
                    "pids": [10, 11],
                    "stance_label_3": "SUPPORT",
                    "stance_label_5": "SUPPORT",
                    "voter_counts": [1, 0, 0, 0, 0],
                    "evidence": [100, 101],
                },
                {
                    "pids": [11, 12],
                    "stance_label_3": "UNDERMINE",
                    "stance_label_5": "UNDERMINE",
                    "voter_counts": [0, 0, 0, 1, 0],
                    "evidence": [101, 102],
                },
                {
                    "pids": [13],
                    "stance_label_3": "UNDERMINE",
                    "stance_label_5": "UNDERMINE",
                    "voter_counts": [0, 0, 0, 1, 0],
                    "evidence": [101],
                },
            ],
        }
    ]
    (tmp_path / "perspectrum_with_answers_v1.0.json").write_text(json.dumps(claims))
    (tmp_path / "perspective_pool_v1.0.json").write_text(
        json.dumps([{"pId": i, "text": f"perspective {i}", "source": "x"} for i in (10, 11, 12, 13)])
    )
    (tmp_path / "dataset_split_v1.0.json").write_text(json.dumps({"1": "test"}))
    if evidence:
        (tmp_path / "evidence_pool_v1.0.json").write_text(
            json.dumps([{"eId": i, "text": f"paragraph {i}", "source": "x"} for i in (100, 101, 102)])
        )
    return tmp_path


def test_mixed_clusters_average_the_stance(tmp_path: Path) -> None:
    data = load_perspectrum(_release(tmp_path, evidence=False), min_docs=2)
    (claim,) = data.evaluation
    assert [d.id for d in claim.pool.documents] == ["p10", "p11", "p12", "p13"]
    assert claim.y.tolist() == [1.0, 0.0, -1.0, -1.0]


def test_evidence_pool_uses_eq_11(tmp_path: Path) -> None:
    root = _release(tmp_path, evidence=True)
    (claim,) = load_perspectrum(root, min_docs=2).evaluation
    assert [d.id for d in claim.pool.documents] == ["e100", "e101", "e102"]
    assert claim.y.tolist() == pytest.approx([1.0, -1 / 3, -1.0])  # e101: one SUPPORT link, two UNDERMINE
    assert load_perspectrum(root, min_docs=2, documents="perspectives").documents == "perspectives"


def _settings(**update: object) -> BenchSettings:
    return BenchSettings(search=SearchSettings(seeds=1, budget=6), n_resamples=500).model_copy(update=update)


def test_bench_on_fixture() -> None:
    report = run_bench(load_perspectrum(FIXTURE), _settings())
    methods = {m.method: m for m in report.methods}
    assert report.n_eval_runs == 3 * 2 * 2 * 2
    assert list(methods)[:5] == ["Opened Mean", "Outcome Regression", "Tuning-set Mean",
                                 "Opened Mean shrunk to Tuning Mean", "CESS"]
    assert f"CESS (tuned lambda = {report.lam:g})" in methods
    assert methods["Outcome Regression"].sensitivity == 0.0 == methods["Tuning-set Mean"].sensitivity
    assert methods["CESS"].sensitivity < methods["Opened Mean"].sensitivity
    assert [r.slice for r in report.by_round] == ["1", "2", "4", "6"]
    assert report.by_round[-1].cess == pytest.approx(methods["CESS"].mae)  # the headline row is lambda = 0.5
    others = [m for m in methods if m != "CESS"]
    assert [p.comparison for p in report.paired] == [f"CESS - {o}" for o in others for _ in range(3)]
    for row in report.paired:
        assert row.lower <= row.difference <= row.upper
    for m in report.methods:  # direction disagreement with its CI on every row
        assert m.direction_error_ci[0] <= m.direction_error <= m.direction_error_ci[1]
    assert report.weights.min_p_times_s > 0
    cal = report.calibration
    assert cal is not None and cal.chosen == min(cal.points, key=lambda p: p.loss)
    assert (report.search.ranking_strength, report.search.temperature, report.search.epsilon,
            report.search.stop_rule) == (cal.chosen.ranking_strength, cal.chosen.temperature,
                                         cal.chosen.epsilon, cal.chosen.stop_rule)


def test_outcome_model_is_honoured_in_every_row() -> None:
    """With m = the tuning mean (default), Outcome Regression is that constant; with the ridge, every
    row that has an m changes (it used to be the ridge whatever --outcome said)."""
    data = load_perspectrum(FIXTURE)
    mean = {m.method: m for m in run_bench(data, _settings(calibrate=False)).methods}
    ridge = {m.method: m for m in run_bench(data, _settings(calibrate=False, outcome="ridge")).methods}
    assert mean["Outcome Regression"] == mean["Tuning-set Mean"].model_copy(update={"method": "Outcome Regression"})
    assert ridge["Outcome Regression"].mae != mean["Outcome Regression"].mae
    assert ridge["CESS"].mae != mean["CESS"].mae and ridge["Sequential DR (raw)"] != mean["Sequential DR (raw)"]
    for name in ("Opened Mean", "Tuning-set Mean", "Opened Mean shrunk to Tuning Mean", "Sequential IPW (raw)"):
        assert ridge[name] == mean[name]  # no m in these


def test_shared_documents_leave_the_tuning_pools() -> None:
    data = load_perspectrum(FIXTURE)
    test_doc = data.evaluation[0].pool.documents[0]
    first = data.tuning[0]
    leaky = data.model_copy(update={"tuning": [
        first.model_copy(update={"pool": CandidatePool(documents=[*first.pool.documents, test_doc])}),
        *data.tuning[1:]]})
    assert shared_document_ids(leaky) == {test_doc.id}
    clean = without_shared_documents(leaky)
    assert shared_document_ids(clean) == set() and clean.evaluation == leaky.evaluation
    assert [d.id for d in clean.tuning[0].pool.documents] == [d.id for d in first.pool.documents]
    shrunk = without_shared_documents(leaky, min_docs=11)  # 10 documents left: no longer eligible
    assert first.claim_id not in [c.claim_id for c in shrunk.tuning]
    report = run_bench(leaky, _settings(calibrate=False, shared_documents="keep"))
    assert (report.leakage.shared_test_documents, report.leakage.test_documents) == (
        1, sum(len(c.pool.documents) for c in data.evaluation))


def test_tuning_never_sees_evaluation_outcomes() -> None:
    data = load_perspectrum(FIXTURE)
    flipped = data.model_copy(deep=True)
    for claim in flipped.evaluation:
        for doc in claim.pool.documents:
            doc.score = -doc.score
    original, changed = run_bench(data, _settings()), run_bench(flipped, _settings())
    assert (original.lam, original.alpha, original.ridge_alpha, original.tuning_mean, original.calibration) == (
        changed.lam, changed.alpha, changed.ridge_alpha, changed.tuning_mean, changed.calibration)
    assert original.methods != changed.methods  # the evaluation did change
