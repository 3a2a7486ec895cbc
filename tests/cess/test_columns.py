"""The columnar path (fast JSONL loader, flat estimators) against the per-trajectory path it replaces at scale."""

from __future__ import annotations

import copy
import json
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from draligned.cess import column_estimators, fastload
from draligned.cess.batch import TrajectoryBatch
from draligned.cess.column_estimators import estimate_columns, estimate_rows, reach
from draligned.cess.columns import TrajectoryColumns
from draligned.cess.estimates import Estimates
from draligned.cess.estimators import TrajectoryEstimate, estimate, trajectory_estimates
from draligned.cess.fastload import load_columns
from draligned.cess.line_chunk import LineChunk
from draligned.cess.trajectory import TrajectoryError, load_trajectories
from tests.cess.test_trajectory import CASES, VALID


def varied_trajectory(rng: random.Random, i: int) -> dict[str, Any]:
    """A random valid trajectory: small pools (repeated choices), stopped runs, zero-probability
    rounds (support intervals), scores in the round or the pool, with or without predictions."""
    n, budget = rng.randint(1, 6), rng.randint(1, 5)
    ids = [f"d{j}" for j in range(n)]
    pool_y: list[float | None] = [rng.uniform(-1, 1) for _ in ids]
    rounds = []
    for t in range(rng.randint(1, budget)):
        weights = [0.0 if rng.random() < 0.2 else rng.random() + 0.01 for _ in ids]
        j = rng.randrange(n)
        weights[j] = weights[j] or 0.3
        total = sum(weights)
        rnd: dict[str, Any] = {"probs": [w / total for w in weights], "chosen": ids[j],
                               "stop_prob": 0.0 if t == 0 or rng.random() < 0.3 else rng.uniform(0, 0.9)}
        if rng.random() < 0.3:
            rnd["y"] = pool_y[j]
        rounds.append(rnd)
    record: dict[str, Any] = {"trajectory_id": f"t{i}", "task_id": f"q{i % 3}", "budget": budget,
                              "pool": {"doc_ids": ids}, "rounds": rounds}
    if rng.random() < 0.5:
        record["ranking"] = rng.choice(["original", "pro", "anti", None])
    if rng.random() < 0.7:
        record["pool"]["m"] = [rng.uniform(-1, 1) for _ in ids]
    if rng.random() < 0.8:
        given = {r["chosen"] for r in rounds if "y" in r}
        record["pool"]["y"] = [None if ids[j] in given and rng.random() < 0.5 else v for j, v in enumerate(pool_y)]
        for r in rounds:  # Y of a chosen document unknown to the pool must come with the round
            if record["pool"]["y"][ids.index(r["chosen"])] is None:
                r["y"] = pool_y[ids.index(r["chosen"])]
    else:
        for r in rounds:
            r["y"] = pool_y[ids.index(r["chosen"])]
    return record


def varied_file(path: Path, seed: int, n: int) -> Path:
    """``n`` trajectories of :func:`varied_trajectory` (seeded) as a JSON Lines file at ``path``."""
    rng = random.Random(seed)
    path.write_bytes(b"".join(orjson.dumps(varied_trajectory(rng, i)) + b"\n" for i in range(n)))
    return path


def varied_estimates(path: Path, seed: int, n: int) -> tuple[TrajectoryColumns, Estimates]:
    """The columns of :func:`varied_file` and their estimates (lambda 0.5)."""
    cols = load_columns(varied_file(path, seed, n))
    return cols, estimate_columns(cols, 0.5)


def _write(tmp_path: Path, records: list[Any]) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


@pytest.fixture
def varied(tmp_path: Path) -> Path:
    rng = random.Random(14)
    return _write(tmp_path, [varied_trajectory(rng, i) for i in range(400)])


def test_flat_estimators_equal_the_padded_ones_on_varied_trajectories(varied: Path) -> None:
    trajectories = load_trajectories(varied)
    padded = estimate(TrajectoryBatch.from_trajectories(trajectories), 0.4)
    for cols in (load_columns(varied), TrajectoryColumns.from_trajectories(trajectories)):
        flat = estimate_columns(cols, 0.4)
        for name in ("opened_mean", "outcome_regression", "ipw_raw", "dr_raw", "cess", "cess_clip_then_shrink",
                     "cess_opened_anchor", "theta_star"):
            np.testing.assert_allclose(getattr(flat, name), getattr(padded, name), rtol=1e-12, atol=1e-12)
        for part in ("weights", "support"):
            for name, value in vars(getattr(padded, part)).items():
                np.testing.assert_allclose(getattr(getattr(flat, part), name), value, rtol=1e-12, atol=1e-12)
    # the sample covers what the comparison is for
    assert padded.support.applies.any() and not padded.support.applies.all()
    assert np.isnan(padded.theta_star).any() and (padded.weights.ess < len(trajectories[0].rounds) + 5).all()
    assert any(len(t.rounds) < t.budget for t in trajectories)
    assert any(len({r.chosen for r in t.rounds}) < len(t.rounds) for t in trajectories)


def _arrays(est: Any) -> dict[str, np.ndarray]:
    """Every array of an :class:`Estimates`, by dotted field name."""
    return {f"{part}.{name}" if part else name: value
            for part, obj in (("", est), ("weights", est.weights), ("support", est.support))
            for name, value in vars(obj).items() if isinstance(value, np.ndarray)}


@pytest.mark.parametrize(("block", "sparse"), [(1, 2.0), (7, 0.0), (100, 1 / 16)])
def test_blocks_and_both_flag_searches_give_the_one_pass_result_bit_for_bit(
        varied: Path, monkeypatch: pytest.MonkeyPatch, block: int, sparse: float) -> None:
    trajectories = [json.loads(line) for line in varied.read_text().splitlines()]
    long = varied_trajectory(random.Random(5), 400) | {"budget": 60}  # padding would be mostly empty: by round
    long["rounds"] = [dict(long["rounds"][0], stop_prob=0.01 * (t > 0)) for t in range(60)]
    cols = load_columns(_write(varied.parent, [*trajectories, long]))
    one_pass = _arrays(estimate_columns(cols, 0.4))  # 400 small trajectories: one block
    monkeypatch.setattr(column_estimators, "BLOCK", block)  # blocks of one trajectory, or a few
    monkeypatch.setattr(column_estimators, "SPARSE", sparse)  # a binary search for every flag, or a map
    blocked = _arrays(estimate_columns(cols, 0.4))
    assert len(column_estimators._blocks(cols)) > 10 and list(blocked) == list(one_pass)
    for name, value in one_pass.items():
        assert (blocked[name].dtype, blocked[name].tobytes()) == (value.dtype, value.tobytes()), name
    assert one_pass["support.applies"].any() and np.isnan(one_pass["theta_star"]).any()


def test_reach_multiplies_each_trajectory_in_round_order_like_cumprod() -> None:
    rng = np.random.default_rng(3)
    for lengths in ([3, 1, 4, 1, 5], [1, 2, 40, 1, 1, 1], []):  # padded; mostly empty padding: by round; none
        starts = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        stop = rng.uniform(0.0, 0.9, starts[-1])
        expected = [np.cumprod(1.0 - stop[lo:hi]) for lo, hi in zip(starts[:-1], starts[1:], strict=True)]
        assert reach(stop, starts).tobytes() == np.concatenate([np.zeros(0), *expected]).tobytes()


def test_report_rows_serialise_like_the_pydantic_reports(varied: Path) -> None:
    cols = load_columns(varied)
    rows = list(estimate_rows(cols, estimate_columns(cols, 0.5)))
    reports = trajectory_estimates(load_trajectories(varied), 0.5)
    for row, report in zip(rows, reports, strict=True):
        assert list(row) == list(TrajectoryEstimate.model_fields)
        assert orjson.dumps(row).decode() == TrajectoryEstimate.model_validate(row).model_dump_json()
        again = TrajectoryEstimate.model_validate(row).model_dump()
        for name, value in report.model_dump().items():
            assert again[name] == pytest.approx(value, rel=1e-12, abs=1e-12), name


def test_cess_estimate_json_writes_the_bytes_of_the_pydantic_reports(
        varied: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from draligned.cli import main

    cols = load_columns(varied)
    rows = estimate_rows(cols, estimate_columns(cols, 0.5))
    expected = "".join(TrajectoryEstimate.model_validate(row).model_dump_json() + "\n" for row in rows)
    assert main(["cess", "estimate", str(varied), "--json"]) == 0
    assert capsys.readouterr().out == expected and expected.count("\n") == len(cols)


@pytest.mark.parametrize(("name", "mutate", "field", "message"), CASES, ids=[c[0] for c in CASES])
def test_the_fast_loader_names_the_same_line_field_and_message(
    tmp_path: Path, name: str, mutate: Callable[[dict], None], field: str, message: str
) -> None:
    bad = copy.deepcopy(VALID) | {"trajectory_id": "bad"}
    mutate(bad)
    path = _write(tmp_path, [VALID, bad])
    with pytest.raises(TrajectoryError) as slow:
        load_trajectories(path)
    with pytest.raises(TrajectoryError) as fast:
        load_columns(path)
    assert (fast.value.line, fast.value.field, str(fast.value)) == (2, field, str(slow.value))


ODD_LINES = [
    "{not json", '{"budget": NaN}', '{"trajectory_id": "a", "trajectory_id": "b"}', "[" * 100 + "]" * 100,
    json.dumps(VALID | {"trajectory_id": "x"}).replace('"budget": 2', '"budget": 2, "budget": 2'),
    json.dumps(VALID | {"trajectory_id": "x"}).replace('"chosen": "d0"', '"chosen": "d0", "chosen": "d0"'),
    json.dumps(VALID | {"trajectory_id": "x"}).replace('"budget"', '"bud\\u0067et"'),
    json.dumps(VALID | {"trajectory_id": 'x"y'}), json.dumps(VALID | {"trajectory_id": "x"}, indent=1),
    json.dumps(VALID | {"trajectory_id": "x"}, separators=(" ,", " : ")), json.dumps(VALID), "  \t",
    json.dumps(VALID | {"trajectory_id": "x", "budget": True}),
    json.dumps(VALID | {"trajectory_id": "x", "budget": 99999999999999999999999}),
    json.dumps(VALID | {"trajectory_id": "x"}).replace("0.25", "1e400", 1),
    json.dumps(VALID | {"trajectory_id": "x"}).replace('"d1"', '"\\ud800"'), "\u3000", "\x1c \x85",
]


PLAIN_VALID = json.dumps(VALID | {"trajectory_id": "x"})
UNPLAIN_LINES = [  # valid or not, lines that no JSON Lines writer of this project writes
    PLAIN_VALID + " ", " " + PLAIN_VALID, PLAIN_VALID + "\r", "\ufeff" + PLAIN_VALID, PLAIN_VALID + PLAIN_VALID,
    PLAIN_VALID.replace('"x"', '"\\u0078"'), PLAIN_VALID.replace("0.25", "NaN", 1),
    PLAIN_VALID.replace("0.1", "Infinity", 1), PLAIN_VALID.replace('"budget": 2', '"budget": 2.0'),
    PLAIN_VALID.replace('"budget": 2', '"budget": "2"'), PLAIN_VALID.replace('"ranking": "pro"', '"ranking": 1'),
    PLAIN_VALID.replace('"d0", "d1"', '"d0", 1'), PLAIN_VALID.replace('"y": [1.0', '"y": [true'),
    PLAIN_VALID.replace('"pool": {', '"pool": {"extra": null, '), PLAIN_VALID.replace("}", ', "note": null}', 1),
    PLAIN_VALID.replace('"stop_prob": 0.0', '"stop_prob": 0.0, "stop_prob": 0.0'), "{}", "",
]


@pytest.mark.parametrize("odd", ODD_LINES + UNPLAIN_LINES)
def test_odd_lines_get_the_full_validators_verdict(tmp_path: Path, odd: str) -> None:
    path = _write(tmp_path, [VALID, odd, VALID | {"trajectory_id": "last"}])
    try:
        expected: Any = [t.trajectory_id for t in load_trajectories(path)]
    except TrajectoryError as exc:
        expected = str(exc)
    try:
        got: Any = load_columns(path).trajectory_id
    except TrajectoryError as exc:
        got = str(exc)
    assert got == expected


def test_mutations_of_a_valid_line_get_the_same_verdict_from_both_loaders(tmp_path: Path) -> None:
    rng = random.Random(7)
    base = json.dumps(varied_trajectory(rng, 0))
    verdicts = set()
    for k in range(150):
        text = list(base)
        for _ in range(rng.randint(1, 3)):
            text[rng.randrange(len(text))] = rng.choice('0-1."e,:]}[{ab\\')
        path = _write(tmp_path, [VALID, "".join(text)])
        try:
            expected = [t.trajectory_id for t in load_trajectories(path)]
        except TrajectoryError as exc:
            expected = str(exc)
        try:
            got = load_columns(path).trajectory_id
        except TrajectoryError as exc:
            got = str(exc)
        assert got == expected, (k, "".join(text))
        verdicts.add(isinstance(expected, list))
    assert verdicts == {True, False}


def test_duplicate_ids_and_errors_keep_file_order(tmp_path: Path) -> None:
    bad = copy.deepcopy(VALID) | {"trajectory_id": "bad"}
    bad["budget"] = 0
    path = _write(tmp_path, [VALID, VALID, bad])
    with pytest.raises(TrajectoryError, match=r"^line 2: trajectory_id: duplicate"):
        load_columns(path)
    path = _write(tmp_path, [VALID, bad, VALID])
    with pytest.raises(TrajectoryError, match=r"^line 2: budget: "):
        load_columns(path)
    with pytest.raises(TrajectoryError, match="no trajectories"):
        load_columns(_write(tmp_path, ["", " "]))


def test_chunks_checked_in_worker_processes_give_the_single_pass_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fastload, "CHUNK_BYTES", 2_000)  # about four lines per chunk
    rng = random.Random(11)
    records = [varied_trajectory(rng, i) for i in range(60)]
    path = _write(tmp_path, records)
    assert len(fastload.ranges(path)) > 10
    single, parallel = load_columns(path, workers=1), load_columns(path, workers=2)
    assert parallel.trajectory_id == single.trajectory_id == [r["trajectory_id"] for r in records]
    for name in ("doc_start", "round_start", "p", "y", "doc_y", "first_support"):
        np.testing.assert_array_equal(getattr(parallel, name), getattr(single, name))
    bad = copy.deepcopy(records[41])
    bad["rounds"][0]["stop_prob"] = 0.5
    for broken in ([*records[:41], bad, *records[42:]], [*records[:50], records[3], *records[51:]]):
        path = _write(tmp_path, broken)
        with pytest.raises(TrajectoryError) as slow:
            load_trajectories(path)
        with pytest.raises(TrajectoryError) as fast:
            load_columns(path, workers=2)
        assert str(fast.value) == str(slow.value) and fast.value.line in (42, 51)


def _exact_path_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LineChunk, "take_line", lambda *args: False)  # every line through orjson


def _fast_path_only(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any) -> None:
        raise AssertionError("a line was left to orjson or the full validator")
    monkeypatch.setattr(LineChunk, "take", refuse)
    monkeypatch.setattr(fastload, "_full_check", refuse)


def test_ranges_are_checked_in_worker_processes_unless_the_caller_has_threads(
        varied: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fastload, "CHUNK_BYTES", 20_000)
    sent: list[tuple[int, int]] = []
    fork_pool = fastload.fork_pool

    def spied_pool(*args: Any) -> Any:  # the real pool, each range it is handed recorded
        pool = fork_pool(*args)
        submit = pool.submit

        def spy(task: Any, path: Path, start: int, end: int) -> Any:
            sent.append((start, end))
            return submit(task, path, start, end)
        pool.submit = spy  # type: ignore[method-assign]
        return pool
    monkeypatch.setattr(fastload, "fork_pool", spied_pool)
    forkable = fastload.forkable
    monkeypatch.setattr(fastload, "forkable", lambda: True)  # whatever threads the test run has left
    parallel = load_columns(varied, workers=2)
    assert sent == fastload.ranges(varied) and len(sent) > 5  # every range, none of them checked here
    single = load_columns(varied, workers=1)
    assert len(sent) == len(fastload.ranges(varied)) and parallel.trajectory_id == single.trajectory_id  # one: here
    for name in COLUMN_FIELDS:
        np.testing.assert_array_equal(getattr(parallel, name), getattr(single, name), err_msg=name)
    monkeypatch.setattr(fastload, "forkable", forkable)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()  # a caller with a thread of its own: nothing is forked, every range is checked here
    try:
        assert not fastload.forkable()
        here = load_columns(varied, workers=2)
    finally:
        stop.set()
        other.join()
    assert len(sent) == len(fastload.ranges(varied)) and here.trajectory_id == single.trajectory_id


COLUMN_FIELDS = ("budget", "doc_start", "doc_m", "doc_y", "first_support", "round_start", "chosen", "y", "p", "stop",
                 "full_support")


def test_simdjson_reads_valid_lines_alone_and_gives_the_exact_paths_columns(
        varied: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fastload, "CHUNK_BYTES", 20_000)  # many ranges, checked in two processes
    monkeypatch.setattr(fastload, "forkable", lambda: True)
    with monkeypatch.context() as patch:
        _fast_path_only(patch)
        fast = load_columns(varied, workers=2)
    with monkeypatch.context() as patch:
        _exact_path_only(patch)
        exact = load_columns(varied)
    objects = TrajectoryColumns.from_trajectories(load_trajectories(varied))
    for cols in (exact, objects):
        assert fast.trajectory_id == cols.trajectory_id and fast.task_id == cols.task_id
        for name in COLUMN_FIELDS:
            np.testing.assert_array_equal(getattr(fast, name), getattr(cols, name), err_msg=name)
            assert getattr(fast, name).dtype == getattr(cols, name).dtype, name
    assert len(fastload.ranges(varied)) > 5 and not fast.full_support.all() and np.isnan(fast.doc_y).any()
