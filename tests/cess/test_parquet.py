"""Parquet trajectories in the nested layout (files exported before the flat one): the same columns as the JSON
Lines file, the same rules, errors naming row and field. The flat layout: tests/cess/test_parquet_flat.py.
Every test that takes the ``sums`` fixture runs over both sums of the probabilities: the compiled kernel and numpy's."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import pytest

from draligned.cess import parquet_batch
from draligned.cess.fastload import load_columns
from draligned.cess.parquet import COLUMNS, load_parquet, write_nested_parquet
from draligned.cess.trajectory import TrajectoryError, load_trajectories
from draligned.cli import main
from tests.cess.extensions import with_and_without
from tests.cess.test_columns import varied_trajectory
from tests.cess.test_trajectory import CASES, VALID

sums = with_and_without(parquet_batch, "compiled_sums", "_kernels", "numpy", "sums")
"""The sums of each round's probabilities in this test: the compiled kernel's, or numpy's (as without it)."""


@pytest.mark.skipif(parquet_batch.compiled_sums is None, reason="the optional extension is not built")
def test_the_compiled_round_sums_are_numpys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bit for bit: the same minima and the same sums, added in numpy's pairwise order (segments of 0 to 299)."""
    rng = np.random.default_rng(3)
    lengths = np.concatenate([rng.integers(0, 6, 300), rng.integers(0, 300, 100)])
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    specials = rng.choice([0.0, -0.0, -1e-300, 1.0, np.inf, -np.inf, np.nan], offsets[-1])
    plain = rng.random(offsets[-1]) * 10.0 ** rng.integers(-3, 3, offsets[-1])
    values = np.where(rng.random(offsets[-1]) < 0.05, specials, plain)
    compiled = parquet_batch._round_min_sum(values, offsets)
    monkeypatch.setattr(parquet_batch, "compiled_sums", None)
    with np.errstate(invalid="ignore"):  # inf + -inf
        expected = parquet_batch._round_min_sum(values, offsets)
    for got, want in zip(compiled, expected, strict=True):
        assert np.isnan(want).any() and np.array_equal(got, want, equal_nan=True)


def _files(tmp_path: Path, records: list[dict]) -> tuple[Path, Path]:
    jsonl, parquet = tmp_path / "t.jsonl", tmp_path / "t.parquet"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records))
    write_nested_parquet(jsonl, parquet)
    return jsonl, parquet


def test_parquet_holds_exactly_the_columns_of_the_json_lines_file(tmp_path: Path) -> None:
    rng = random.Random(3)
    jsonl, parquet = _files(tmp_path, [varied_trajectory(rng, i) for i in range(300)])
    fast, columnar = load_columns(jsonl), load_parquet(parquet)
    assert columnar.trajectory_id == fast.trajectory_id and columnar.task_id == fast.task_id
    for name in ("budget", "doc_start", "doc_m", "doc_y", "first_support", "round_start", "chosen", "y", "p",
                 "stop", "full_support"):
        np.testing.assert_array_equal(getattr(columnar, name), getattr(fast, name), err_msg=name)
    assert not columnar.full_support.all()


def test_cess_estimate_prints_the_same_estimates_from_either_format(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(5)
    jsonl, parquet = _files(tmp_path, [varied_trajectory(rng, i) for i in range(50)])
    assert main(["cess", "estimate", "--trajectories", str(jsonl), "--json"]) == 0
    from_jsonl = capsys.readouterr().out
    other = tmp_path / "t.data"
    other.write_bytes(parquet.read_bytes())
    assert main(["cess", "estimate", str(other), "--format", "parquet", "--json"]) == 0
    assert capsys.readouterr().out == from_jsonl and len(from_jsonl.splitlines()) == 50
    assert main(["cess", "estimate", str(parquet)]) == 0
    assert "support interval" in capsys.readouterr().out
    assert main(["cess", "estimate", str(parquet), "--trajectories", str(jsonl)]) == 2
    assert "name the trajectory file once" in capsys.readouterr().err


# An extra field or a string probability has no place in the Parquet schema (the conversion drops or casts it).
ROW_CASES = [c for c in CASES if c[0] not in ("unexpected field", "probability is a string")]


@pytest.mark.parametrize(("name", "mutate", "field", "message"), ROW_CASES, ids=[c[0] for c in ROW_CASES])
def test_a_bad_row_is_named_by_row_trajectory_and_field(
    tmp_path: Path, name: str, mutate: Callable[[dict], None], field: str, message: str, sums: str
) -> None:
    bad = copy.deepcopy(VALID) | {"trajectory_id": "bad"}
    mutate(bad)
    jsonl, parquet = _files(tmp_path, [VALID, bad])
    with pytest.raises(TrajectoryError) as info:
        load_parquet(parquet)
    text = str(info.value)
    assert text.startswith(f"row 2 (trajectory_id 'bad'): {info.value.field}: ")
    if name == "missing required field":  # a missing value is a NULL in the column
        assert (info.value.field, info.value.message) == (field, "None is not of type 'number'")
        return
    with pytest.raises(TrajectoryError) as slow:
        load_trajectories(jsonl)
    assert (info.value.field, info.value.message) == (field, slow.value.message)


REFUSED = [
    ("SELECT * REPLACE (CASE WHEN trajectory_id = 't2' THEN {'doc_ids': pool.doc_ids, 'y': pool.y, "
     "'m': [0.1, 'nan'::DOUBLE, 0.3]} ELSE pool END AS pool) FROM t",
     r"^row 2 \(trajectory_id 't2'\): pool\.m\[1\]: is not a finite"),
    ("SELECT * REPLACE ('t1' AS trajectory_id) FROM t", r"^row 2 \(trajectory_id 't1'\): trajectory_id: duplicate id"),
    ("SELECT * REPLACE (budget::VARCHAR AS budget) FROM t", r"^schema: budget: has type VARCHAR, expected BIGINT"),
    ("SELECT *, 1 AS note FROM t", r"^schema: note: unexpected column"),
    ("SELECT * EXCLUDE (ranking) FROM t", r"^schema: ranking: column missing"),
    ("SELECT * FROM t WHERE false", "no trajectories"),
]


@pytest.mark.parametrize(("select", "error"), REFUSED, ids=["nan", "duplicate", "type", "extra", "missing", "empty"])
def test_non_finite_numbers_wrong_types_duplicates_and_empty_files_are_refused(
        tmp_path: Path, select: str, error: str) -> None:
    con = duckdb.connect()
    _, parquet = _files(tmp_path, [VALID, VALID | {"trajectory_id": "t2"}])
    con.execute(f"CREATE TABLE t AS SELECT * FROM '{parquet}'")
    assert list(COLUMNS) == [d[0] for d in con.execute("SELECT * FROM t").description]
    con.execute(f"COPY ({select}) TO '{tmp_path / 'x.parquet'}' (FORMAT parquet)")
    with pytest.raises(TrajectoryError, match=error):
        load_parquet(tmp_path / "x.parquet")


def test_cess_estimate_reports_a_bad_parquet_row_with_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = copy.deepcopy(VALID) | {"trajectory_id": "bad"}
    bad["rounds"][1]["chosen"] = "zz"
    _, parquet = _files(tmp_path, [VALID, bad])
    assert main(["cess", "estimate", str(parquet)]) == 2
    assert "row 2 (trajectory_id 'bad'): rounds[1].chosen: unknown document id" in capsys.readouterr().err
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    assert main(["cess", "estimate", str(tmp_path / "broken.parquet")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'broken.parquet'}: ")


ROUND_VALUES = [
    ("[0.5, 'nan'::DOUBLE, 0.5]", "0.0", r"rounds\[0\]\.probs\[1\]: is not a finite"),
    ("[0.5, NULL, 0.5]", "0.0", r"rounds\[0\]\.probs\[1\]: None is not of type 'number'"),
    ("[0.5, 0.25, 0.25]", "'-inf'::DOUBLE", r"rounds\[0\]\.stop_prob: is not a finite"),
]


@pytest.mark.parametrize(("probs", "stop", "error"), ROUND_VALUES, ids=["nan", "null", "infinite"])
def test_nan_null_and_infinite_numbers_inside_rounds_are_refused_in_a_row_after_many_good_ones(
        tmp_path: Path, probs: str, stop: str, error: str, sums: str) -> None:
    rng = random.Random(7)
    _, parquet = _files(tmp_path, [varied_trajectory(rng, i) for i in range(40)] + [VALID | {"trajectory_id": "tv"}])
    con = duckdb.connect()
    con.execute(f"COPY (SELECT * REPLACE (CASE WHEN trajectory_id = 'tv' THEN [{{'probs': {probs}, 'chosen': 'd0', "
                f"'stop_prob': {stop}, 'y': NULL::DOUBLE}}] ELSE rounds END AS rounds) FROM '{parquet}') "
                f"TO '{tmp_path / 'x.parquet'}' (FORMAT parquet)")
    with pytest.raises(TrajectoryError, match=r"^row 41 \(trajectory_id 'tv'\): " + error):
        load_parquet(tmp_path / "x.parquet")


def test_row_groups_checked_in_threads_give_the_one_thread_result_and_error(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    rng = random.Random(9)
    records = [varied_trajectory(rng, i) for i in range(120)]
    bad = copy.deepcopy(records[97]) | {"trajectory_id": "bad"}
    bad["rounds"][0]["chosen"] = "zz"
    _, good = _files(tmp_path, records)
    many = tmp_path / "many.parquet"
    pq.write_table(pq.read_table(good), many, row_group_size=7)  # 18 row groups
    assert pq.ParquetFile(many).metadata.num_row_groups == 18
    one, two = load_parquet(many, workers=1), load_parquet(many, workers=2)
    assert two.trajectory_id == one.trajectory_id == [r["trajectory_id"] for r in records]
    for name in ("budget", "doc_start", "doc_m", "doc_y", "first_support", "round_start", "chosen", "y", "p", "stop",
                 "full_support"):
        np.testing.assert_array_equal(getattr(two, name), getattr(one, name), err_msg=name)
    (tmp_path / "bad").mkdir()
    _, broken = _files(tmp_path / "bad", [*records[:97], bad, *records[98:]])
    pq.write_table(pq.read_table(broken), many, row_group_size=7)
    with pytest.raises(TrajectoryError, match=r"^row 98 \(trajectory_id 'bad'\): rounds\[0\]\.chosen: unknown"):
        load_parquet(many, workers=2)
