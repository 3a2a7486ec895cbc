"""`cess estimate F.parquet --json` as one pipeline over row groups (draligned/cess/parquet_lines.py): the
lines of the load-everything path byte for byte, the same error for a bad row in any group, no output before it."""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from draligned.cess import json_lines as jl
from draligned.cess.column_estimators import estimate_columns
from draligned.cess.json_lines import json_lines
from draligned.cess.parquet import load_parquet, write_nested_parquet, write_parquet
from draligned.cess.parquet_lines import parquet_lines
from draligned.cess.trajectory import PROB_SUM_MARGIN, PROB_SUM_TOLERANCE, TrajectoryError
from draligned.cli import main
from tests.cess.test_columns import varied_trajectory
from tests.cess.test_trajectory import VALID


def _files(tmp: Path, records: list[dict[str, Any]], group_rows: int = 7) -> tuple[Path, Path, Path]:
    """JSON Lines, flat and nested Parquet of the records, the Parquet files in groups of ``group_rows``."""
    jsonl, flat, nested = tmp / "t.jsonl", tmp / "t.parquet", tmp / "n.parquet"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records))
    write_parquet(jsonl, flat)
    write_nested_parquet(jsonl, nested)
    for path in (flat, nested):
        pq.write_table(pq.read_table(path), path, row_group_size=group_rows)
    return jsonl, flat, nested


def _whole(path: Path, lam: float) -> bytes:
    cols = load_parquet(path, workers=1)
    return b"".join(json_lines(cols, estimate_columns(cols, lam)))


def _records(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [varied_trajectory(rng, i) for i in range(n)]


@pytest.mark.parametrize("workers", [1, 2])
def test_the_pipeline_writes_the_lines_of_the_whole_file_path_for_either_layout(tmp_path: Path, workers: int) -> None:
    jsonl, flat, nested = _files(tmp_path, _records(120, 4))
    assert pq.ParquetFile(flat).metadata.num_row_groups == 18
    whole = _whole(flat, 0.3)
    assert len(whole.splitlines()) == 120 and b'"support_interval":[' in whole and b'"support_interval":null' in whole
    assert b"".join(parquet_lines(flat, 0.3, workers)) == whole
    assert b"".join(parquet_lines(nested, 0.3, workers)) == whole
    assert b"".join(parquet_lines(flat, 0.9, workers)) != whole  # lambda is passed on


@pytest.mark.skipif(jl.compiled_writer is None, reason="the optional extension draligned.cess._kernels is not built")
def test_the_pipeline_writes_the_same_bytes_through_duckdb_as_without_the_extension(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, flat, _ = _files(tmp_path, _records(40, 6))
    whole = _whole(flat, 0.3)  # the compiled writer's
    monkeypatch.setattr(jl, "compiled_writer", None)
    assert b"".join(parquet_lines(flat, 0.3, 2)) == whole


def test_the_command_on_a_valid_flat_file_imports_neither_pydantic_jsonschema_nor_duckdb(tmp_path: Path) -> None:
    """Their imports were half the start-up of `cess estimate F.parquet --json`; an invalid row still gets the
    full validator (the tests below)."""
    _, flat, _ = _files(tmp_path, _records(12, 7))
    heavy = ("pydantic", "jsonschema", "duckdb")
    code = ("import sys; from draligned.cli import main; code = main(['cess', 'estimate', sys.argv[1], '--json']); "
            f"print(code, [m for m in {heavy!r} if m in sys.modules], file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code, str(flat)], capture_output=True, text=True, check=True)
    assert len(done.stdout.splitlines()) == 12
    expected = "0 []" if jl.compiled_writer is not None else "0 ['duckdb']"  # DuckDB writes the lines without it
    assert done.stderr.strip() == expected


def test_a_row_the_numpy_checks_suspect_but_the_validator_accepts_is_estimated_in_place(tmp_path: Path) -> None:
    near = copy.deepcopy(VALID) | {"trajectory_id": "near"}
    near["rounds"][0]["probs"][0] += PROB_SUM_TOLERANCE - PROB_SUM_MARGIN / 2  # within tolerance, not the margin
    records = _records(30, 5)
    _, flat, _ = _files(tmp_path, [*records[:17], near, *records[17:]])
    whole = _whole(flat, 0.5)
    assert b"".join(parquet_lines(flat, 0.5, 2)) == whole
    assert whole.splitlines()[17].startswith(b'{"trajectory_id":"near",')


def test_a_bad_row_or_a_repeated_id_in_a_later_group_fails_as_the_loader_does_with_no_output(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = _records(60, 6)
    bad = copy.deepcopy(records[40]) | {"trajectory_id": "bad"}
    bad["rounds"][0]["chosen"] = "zz"
    _, flat, nested = _files(tmp_path, [*records[:40], bad, *records[41:], records[3]])
    for path in (flat, nested):
        with pytest.raises(TrajectoryError) as loader:
            load_parquet(path)
        with pytest.raises(TrajectoryError) as pipeline:
            parquet_lines(path, 0.5, 2)
        assert str(pipeline.value) == str(loader.value)
        assert str(pipeline.value).startswith("row 41 (trajectory_id 'bad'): rounds[0].chosen: unknown document id")
    for table in ([], ["--json"]):  # the table as the lines: nothing printed before the whole file is checked
        assert main(["cess", "estimate", str(flat), *table]) == 2
        out = capsys.readouterr()
        assert out.out == "" and "row 41 (trajectory_id 'bad')" in out.err
    (tmp_path / "dup").mkdir()
    _, flat, _ = _files(tmp_path / "dup", [*records, records[3]])
    with pytest.raises(TrajectoryError, match=r"^row 61 \(trajectory_id 't3'\): trajectory_id: duplicate id 't3' "
                                              r"\(first in row 4\)"):
        parquet_lines(flat, 0.5, 2)
    with pytest.raises(ValueError, match="lambda must lie in"):
        parquet_lines(flat, 1.5)
