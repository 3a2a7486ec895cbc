"""`cess estimate --json` through the compiled writer and through DuckDB's JSON writer: every byte that of
the record's model per row (``TrajectoryEstimate.model_dump_json``). Every test that takes the ``writer``
fixture runs over both."""

from __future__ import annotations

import gc
import weakref
from dataclasses import replace

import numpy as np
import pytest

from draligned.cess import json_lines as jl
from draligned.cess.column_estimators import estimate_rows
from draligned.cess.columns import TrajectoryColumns
from draligned.cess.estimators import Estimates
from tests.cess.extensions import with_and_without
from tests.cess.test_columns import varied_estimates


def _model(cols: TrajectoryColumns, est: Estimates) -> bytes:
    return b"".join(map(jl.model_line, estimate_rows(cols, est)))


def _written(cols: TrajectoryColumns, est: Estimates) -> bytes:
    return b"".join(jl.json_lines(cols, est))


writer = with_and_without(jl, "compiled_writer", "_kernels", "duckdb", "writer")
"""The writer of the lines in this test: the compiled one, or DuckDB's (as without the extension)."""


@pytest.fixture(scope="module")
def estimated(tmp_path_factory: pytest.TempPathFactory) -> tuple[TrajectoryColumns, Estimates]:
    return varied_estimates(tmp_path_factory.mktemp("jl") / "t.jsonl", 5, 400)


def test_the_lines_are_the_models_bytes_with_support_intervals_and_unknown_targets(
        estimated: tuple[TrajectoryColumns, Estimates], monkeypatch: pytest.MonkeyPatch, writer: str) -> None:
    cols, est = estimated
    assert est.support.applies.any() and np.isnan(est.theta_star).any()
    monkeypatch.setattr(jl, "SLICE", 64)  # several queries, each with its chunks
    monkeypatch.setattr(jl, "PIECE", 64)  # several calls of the compiled writer
    assert _written(cols, est) == _model(cols, est)


def test_floats_of_every_bit_pattern_are_written_as_the_model_writes_them(
        estimated: tuple[TrajectoryColumns, Estimates], writer: str) -> None:
    """1% random bit patterns (mostly what DuckDB writes itself), and for the compiled writer all of them
    (DuckDB would leave most rows to the model)."""
    for share_of_bits in (0.01, 1.0) if writer == "compiled" else (0.01,):
        _bit_patterns_are_written_as_the_model_writes_them(estimated, share_of_bits)


def _bit_patterns_are_written_as_the_model_writes_them(estimated: tuple[TrajectoryColumns, Estimates],
                                                       share_of_bits: float) -> None:
    cols, est = estimated
    n, rng = len(cols), np.random.default_rng(7)
    bits = rng.integers(0, 2**64, (12, n), dtype=np.uint64).view(np.float64)
    plain = rng.uniform(0.1, 1, (12, n)) * rng.choice([-1, 1], (12, n)) * 10.0 ** rng.integers(-4, 16, (12, n))
    values = np.where(rng.random((12, n)) < share_of_bits, bits, plain)  # 1%: mostly what DuckDB writes itself
    edges = [0.0, -0.0, 1e-5, 9.999999999999999e-6, 1e16, 9.999999999999998e15, np.inf, -np.inf, np.nan, 5e-324,
             1e-7, 0.5, 3.0, 1e15, 1.7976931348623157e308]  # of DuckDB's forms, NaN, infinities, integer values:
    # each in a row of its own, for each field
    for shift, edge in enumerate(edges):
        rows = (np.arange(12) * len(edges) + shift) * 2 + 1
        values[np.arange(12), rows] = edge
        values[:, rows] = np.where(np.abs(values[:, rows]) < 1e-5, 0.5, values[:, rows])  # no other odd value
        values[np.arange(12), rows] = edge
    weights = replace(est.weights, ess=values[7], max_weight=values[8])
    support = replace(est.support, lower=values[9], upper=values[10])
    wild = replace(est, opened_mean=values[0], outcome_regression=values[1], ipw_raw=values[2], dr_raw=values[3],
                   cess=values[4], cess_clip_then_shrink=values[5], cess_opened_anchor=values[6],
                   theta_star=values[11], weights=weights, support=support)
    if share_of_bits < 1:
        assert 0 < len(jl._rows_it_writes_apart(jl._table(cols, wild, jl.pa.array(cols.task_id)))) < n / 2
    assert _written(cols, wild) == _model(cols, wild)


def test_ids_of_every_character_are_written_as_the_model_writes_them(
        estimated: tuple[TrajectoryColumns, Estimates], writer: str) -> None:
    cols, est = estimated
    characters = [chr(c) for c in range(0x2100) if not 0xD800 <= c < 0xE000] + ["\u2028", "\ufeff", "\U0001f600"]
    step = len(characters) // len(cols) + 1
    ids = [f"t{i}" + "".join(characters[i * step:(i + 1) * step]) + '"\\' for i in range(len(cols))]
    named = replace(cols, trajectory_id=ids, task_id=[characters[(5 * i) % 128] for i in range(len(cols))])
    assert _written(named, est) == _model(named, est)


@pytest.mark.skipif(jl.compiled_writer is None, reason="the optional extension draligned.cess._kernels is not built")
def test_the_compiled_writer_refuses_an_array_of_the_wrong_type_naming_it() -> None:
    ids, n = ["t1", "t2"], 2
    floats, rounds, hidden = np.zeros(n), np.ones(n, np.int64), np.zeros(n, bool)
    jl.compiled_writer.write_lines(ids, ids, rounds, (floats,) * 10, hidden, floats, floats)  # the right types
    for bad, name in (((ids, ids, floats, (floats,) * 10, hidden, floats, floats), "rounds"),
                      ((ids, ids, rounds, (rounds,) * 10, hidden, floats, floats), "numbers"),
                      ((ids, ids, rounds, (floats,) * 10, np.zeros(n, np.uint8), floats, floats), "hidden"),
                      ((ids, ids, rounds, (floats,) * 10, hidden, floats, np.zeros(n, np.float32)), "upper")):
        with pytest.raises(ValueError, match=rf"^{name}: expected 2 items of type"):
            jl.compiled_writer.write_lines(*bad)


def test_deferred_lines_are_the_lines_and_keep_only_what_they_are_made_from(
        estimated: tuple[TrajectoryColumns, Estimates], writer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Made later, in pieces, they are the same bytes, and the estimates they were made from are let go (the
    compiled writer's inputs are kept, or DuckDB's text, made at once)."""
    cols, est = estimated
    monkeypatch.setattr(jl, "PIECE", 64)
    copied = replace(est, weights=replace(est.weights), support=replace(est.support))
    later = jl.deferred(replace(cols), copied)
    held = weakref.ref(copied)
    del copied
    gc.collect()
    assert held() is None
    assert b"".join(later.lines()) == b"".join(later.lines()) == _model(cols, est)
