"""The `cess estimate` table through the compiled writer: the same text as the CLI's table in Python over
``estimate_rows``, for every kind of cell (estimates not given, unknown targets, NaN, infinities, -0, wide
numbers, ids of every width and alphabet)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from draligned.cess import estimate_table, json_lines
from draligned.cess.column_estimators import estimate_columns, estimate_rows
from draligned.cess.columns import TrajectoryColumns
from draligned.cess.estimates import Estimates
from draligned.cess.fastload import load_columns
from draligned.cess.parquet import write_parquet
from draligned.cli import main
from draligned.cli.cess import python_table
from tests.cess.extensions import with_and_without
from tests.cess.test_columns import varied_estimates, varied_file

compiled = pytest.mark.skipif(json_lines.compiled_writer is None, reason="the optional extension is not built")


@pytest.fixture(scope="module")
def estimated(tmp_path_factory: pytest.TempPathFactory) -> tuple[TrajectoryColumns, Estimates]:
    return varied_estimates(tmp_path_factory.mktemp("table") / "t.jsonl", 12, 300)


def _compiled(cols: TrajectoryColumns, est: Estimates) -> str:
    return b"".join(estimate_table.table_text([estimate_table.TablePart.of(cols, est)], 2)).decode()


@compiled
def test_the_table_is_the_python_tables_text(estimated: tuple[TrajectoryColumns, Estimates],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    cols, est = estimated
    assert est.support.applies.any() and not est.support.applies.all() and np.isnan(est.theta_star).any()
    monkeypatch.setattr(json_lines, "PIECE", 32)  # several pieces, the widths over all of them
    assert _compiled(cols, est) == python_table(list(estimate_rows(cols, est))) + "\n"


@compiled
def test_every_kind_of_number_and_id_is_written_as_python_writes_it(
        estimated: tuple[TrajectoryColumns, Estimates]) -> None:
    cols, est = estimated
    n, rng = len(cols), np.random.default_rng(3)
    values = rng.uniform(-1, 1, (12, n)) * 10.0 ** rng.integers(-6, 20, (12, n))
    edges = [0.0, -0.0, -1e-9, 0.00005, -0.00005, 9.99995, 0.99995, np.nan, np.inf, -np.inf, 1e300, -1e-300, 123.45675]
    for k, edge in enumerate(edges):
        values[:, k * 3 + 1] = edge
    wild = replace(est, opened_mean=values[0], outcome_regression=values[1], ipw_raw=values[2], dr_raw=values[3],
                   cess=values[4], cess_clip_then_shrink=values[5], cess_opened_anchor=values[6],
                   theta_star=values[11], weights=replace(est.weights, ess=values[7], max_weight=values[8]),
                   support=replace(est.support, lower=values[9], upper=values[10]))
    names = ["é", "日本語", "a" * 40, "x\u0301", "\U0001f600", "tab\there", "", "z"]
    named = replace(cols, trajectory_id=[names[i % len(names)] + str(i) for i in range(n)],
                    task_id=[names[(3 * i) % len(names)] for i in range(n)])
    assert _compiled(named, wild) == python_table(list(estimate_rows(named, wild))) + "\n"


@compiled
def test_a_column_narrower_than_its_cells_is_refused(estimated: tuple[TrajectoryColumns, Estimates]) -> None:
    cols, est = estimated
    piece = next(json_lines.WriterInputs.of(cols, est).pieces())
    with pytest.raises(ValueError, match="a cell is wider than its column"):
        json_lines.compiled_writer.write_table(*piece, np.ones(14, np.int64))


writer = with_and_without(json_lines, "compiled_writer", "_kernels", "python", "writer")
"""The writer of the command's table: the extension's (through the pipelines), or the CLI's in Python."""


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_the_commands_table_is_the_same_either_way_and_from_either_format(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, writer: str,
        suffix: str) -> None:
    """From Parquet the extension's table is made by the row groups' pipeline (each group measured where it
    was estimated, several groups on two threads); the text is the Python table's over the loaded columns."""
    jsonl = path = varied_file(tmp_path / "t.jsonl", 13, 90)
    if suffix == ".parquet":
        path = tmp_path / "t.parquet"
        write_parquet(jsonl, path)
        pq.write_table(pq.read_table(path), path, row_group_size=13)  # 7 groups
    cols = load_columns(jsonl)
    expected = python_table(list(estimate_rows(cols, estimate_columns(cols, 0.25)))) + "\n"
    assert main(["cess", "estimate", str(path), "--lambda", "0.25"]) == 0
    out = capsys.readouterr().out
    preamble, table = out.split("\n", 1)
    assert preamble.startswith("CESS lambda = 0.25;") and table == expected


@compiled
@pytest.mark.parametrize("column", [[99.5, -10.0, 3.0], [9.99995, 9.9999, -0.0], [np.nan, np.inf, 0.5],
                                    [np.nan, np.nan, np.nan], [-np.inf, 1.0, 2.0], [-0.00001, 0.0, 0.00004]],
                         ids=["a shorter negative", "rounding up a digit", "nan and inf", "all unknown", "-inf",
                              "negative zero"])
def test_a_columns_width_is_its_widest_cell(estimated: tuple[TrajectoryColumns, Estimates],
                                            column: list[float]) -> None:
    """The widths are found from each sign's largest magnitude: these columns put the widest cell elsewhere."""
    cols, est = estimated
    values = np.resize(np.array(column), len(cols))
    wild = replace(est, opened_mean=values, theta_star=values, weights=replace(est.weights, ess=values))
    assert _compiled(cols, wild) == python_table(list(estimate_rows(cols, wild))) + "\n"
