"""`cess estimate F.jsonl --json` as one pipeline over ranges (draligned/cess/jsonl_lines.py): the lines of
the load-everything path byte for byte, the same error for a bad line or a repeated id in any range, no output."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest

from draligned.cess import fastload
from draligned.cess import json_lines as jl
from draligned.cess import jsonl_lines as jsonl_lines_module
from draligned.cess.column_estimators import estimate_columns, estimate_rows
from draligned.cess.json_lines import json_lines
from draligned.cess.jsonl_lines import jsonl_lines, range_bytes
from draligned.cess.trajectory import PROB_SUM_MARGIN, PROB_SUM_TOLERANCE, TrajectoryError, load_trajectories
from draligned.cli import main
from draligned.cli.cess import python_table
from tests.cess.extensions import with_and_without
from tests.cess.test_columns import varied_trajectory
from tests.cess.test_trajectory import VALID

writer = with_and_without(jl, "compiled_writer", "_kernels", "duckdb", "writer")
"""Who writes the lines, in the workers too (they fork after the fixture set it): the compiled writer, or
DuckDB (as without the extension)."""


def _write(tmp: Path, records: list[Any]) -> Path:
    path = tmp / "t.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def _whole(path: Path, lam: float) -> bytes:
    cols = fastload.load_columns(path, workers=1)
    return b"".join(json_lines(cols, estimate_columns(cols, lam)))


@pytest.fixture
def records() -> list[dict[str, Any]]:
    rng = random.Random(21)
    return [varied_trajectory(rng, i) for i in range(90)]


@pytest.fixture
def many_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fastload, "CHUNK_BYTES", 500)  # about four lines per range of the pipeline's
    monkeypatch.setattr(fastload, "forkable", lambda: True)  # whatever threads the test run has left


@pytest.mark.parametrize("workers", [1, 2])
def test_the_ranges_lines_are_the_whole_files_lines(tmp_path: Path, records: list[dict[str, Any]],
                                                    many_ranges: None, workers: int, writer: str) -> None:
    near = copy.deepcopy(VALID) | {"trajectory_id": "near"}  # suspect to the numpy checks, kept by the validator
    near["rounds"][0]["probs"][0] += PROB_SUM_TOLERANCE - PROB_SUM_MARGIN / 2
    path = _write(tmp_path, [*records[:40], near, "", " " + json.dumps(records[40]), *records[41:]])
    assert len(fastload.ranges(path, range_bytes())) > 15
    whole = _whole(path, 0.3)
    assert len(whole.splitlines()) == 91 and b'"support_interval":[' in whole and b'"trajectory_id":"near"' in whole
    assert b"".join(jsonl_lines(path, 0.3, workers)) == whole
    assert jsonl_lines_module._CONNECTION.con is None  # none left open here for a later call's fork to copy
    assert b"".join(jsonl_lines(path, 0.9, workers)) != whole  # lambda is passed on


@pytest.mark.parametrize("workers", [1, 2])
def test_a_bad_line_or_a_repeated_id_in_any_range_is_the_single_passs_error(
        tmp_path: Path, records: list[dict[str, Any]], many_ranges: None, workers: int) -> None:
    bad = copy.deepcopy(records[60]) | {"budget": 0}
    for broken, line, field in (([*records[:60], bad, *records[61:]], 61, "budget"),
                                ([*records[:70], records[5], *records[71:]], 71, "trajectory_id")):
        path = _write(tmp_path, broken)
        with pytest.raises(TrajectoryError) as slow:
            load_trajectories(path)
        with pytest.raises(TrajectoryError) as fast:
            jsonl_lines(path, 0.5, workers)
        assert str(fast.value) == str(slow.value) and (fast.value.line, fast.value.field) == (line, field)
    with pytest.raises(TrajectoryError, match="no trajectories"):
        jsonl_lines(_write(tmp_path, ["", "  "]), 0.5, workers)


def test_cess_estimate_json_prints_nothing_for_a_file_with_a_bad_last_line(
        tmp_path: Path, records: list[dict[str, Any]], many_ranges: None, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, [*records, "{not json"])
    assert main(["cess", "estimate", str(path), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "line 91" in err
    path = _write(tmp_path, records)
    assert main(["cess", "estimate", str(path), "--json"]) == 0
    assert capsys.readouterr().out.encode() == _whole(path, 0.5)


@pytest.mark.skipif(jl.compiled_writer is None, reason="the optional extension draligned.cess._kernels is not built")
@pytest.mark.parametrize("workers", [1, 2])
def test_the_ranges_table_is_the_whole_files_table(tmp_path: Path, records: list[dict[str, Any]],
                                                   many_ranges: None, workers: int) -> None:
    """Each range measured in its worker process: the columns' widths of the whole file, the Python table's text."""
    records[7]["trajectory_id"] = "a much longer id than the others, in one range only"
    path = _write(tmp_path, records)
    assert len(fastload.ranges(path, range_bytes())) > 15
    cols = fastload.load_columns(path, workers=1)
    expected = python_table(list(estimate_rows(cols, estimate_columns(cols, 0.3)))) + "\n"
    assert b"".join(jsonl_lines_module.jsonl_table(path, 0.3, workers)).decode() == expected
