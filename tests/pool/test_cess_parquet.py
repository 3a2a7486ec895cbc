"""`cess export --format parquet`: the archive's pool runs as a Parquet file that `cess estimate` reads."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from draligned.archive import Archive
from draligned.cess.parquet_flat import FLAT_BINARY, LAYOUT_KEY
from draligned.cli import main


def test_export_parquet_estimates_equal_the_json_lines_export(
        pool_archive: Archive, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jsonl, parquet = tmp_path / "t.jsonl", tmp_path / "t.parquet"
    assert main(["cess", "export", str(pool_archive.root), "--out", str(jsonl)]) == 0
    assert main(["cess", "export", str(pool_archive.root), "--out", str(parquet)]) == 0
    assert "16 trajectories written" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl", "t.parquet"]  # no temporary copy left
    assert pq.read_metadata(parquet).metadata[LAYOUT_KEY] == FLAT_BINARY
    outputs = []
    for path in (jsonl, parquet):
        assert main(["cess", "estimate", str(path), "--json"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == 16
    assert {json.loads(line)["trajectory_id"] for line in outputs[0].splitlines()} == {
        r.stem for r in (pool_archive.root / "runs").glob("*.json") if not r.name.endswith(".started.json")}
