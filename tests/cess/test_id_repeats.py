"""Repeated trajectory ids found from hashes (draligned/cess/id_repeats.py): equal ids hash alike, distinct ones
apart, and a hash shared by distinct ids only makes the Parquet load look at the ids, never refuse the file."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from draligned.cess import id_repeats, parquet
from draligned.cess.id_repeats import any_repeated, id_hashes
from draligned.cess.parquet import load_parquet, write_parquet
from draligned.cess.parquet_lines import parquet_lines
from draligned.cess.trajectory import TrajectoryError
from tests.cess.extensions import with_and_without
from tests.cess.test_columns import varied_trajectory

hashing = with_and_without(id_repeats, "compiled_hashes", "_kernels", "python", "hashing")
"""The ids hashed by the compiled kernel, or by Python's hash() (as without it)."""

IDS = ["", "a", "b", "ab", "ba", "t000001", "t0000001", "t00000001", "t0000000000000001", "t0000000000000002",
       "é", "e\u0301", "日本語の軌跡", "a\x00", "a\x00\x00", "x" * 64, "x" * 65]
"""Ids of every length around the kernel's 8-byte words, non-ASCII ones and ones that differ only by NULs."""


def test_equal_ids_hash_alike_and_distinct_ones_apart(hashing: str) -> None:
    hashes = id_hashes([*IDS, *reversed(IDS), None, None])
    assert hashes.dtype == np.uint64 and len(hashes) == 2 * len(IDS) + 2
    assert hashes[:len(IDS)].tolist() == hashes[len(IDS):2 * len(IDS)].tolist()[::-1]  # equal ids, equal hashes
    assert len(set(hashes[:len(IDS)].tolist())) == len(IDS)
    assert hashes[-1] == hashes[-2]
    many = id_hashes([f"t{i:07d}" for i in range(200_000)])
    assert len(np.unique(many)) == len(many)  # a file's usual ids: no two share a hash


def test_a_repeat_is_found_in_any_pair_of_arrays() -> None:
    first, second = id_hashes(["a", "b", "c"]), id_hashes(["d", "e"])
    assert not any_repeated([]) and not any_repeated([first]) and not any_repeated([first, second])
    assert any_repeated([first, second, id_hashes(["f", "a"])])
    assert any_repeated([id_hashes(["g", "g"])])


def _file(tmp_path: Path, records: list[dict]) -> Path:
    jsonl, flat = tmp_path / "t.jsonl", tmp_path / "t.parquet"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records))
    write_parquet(jsonl, flat)
    return flat


def test_a_shared_hash_makes_the_load_look_at_the_ids_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every id hashed alike: distinct ids still load (the same columns), a real repeat is still the error."""
    rng = random.Random(5)
    records = [varied_trajectory(rng, i) for i in range(40)]
    distinct = _file(tmp_path, records)
    (tmp_path / "dup").mkdir()
    repeated = _file(tmp_path / "dup", [*records, records[7]])
    expected, lines = load_parquet(distinct), b"".join(parquet_lines(distinct, 0.5, 2))
    monkeypatch.setattr(parquet, "id_hashes", lambda ids: np.zeros(len(ids), np.uint64))
    assert load_parquet(distinct).trajectory_id == expected.trajectory_id
    assert b"".join(parquet_lines(distinct, 0.5, 2)) == lines
    for read in (load_parquet, lambda path: b"".join(parquet_lines(path, 0.5, 2))):
        with pytest.raises(TrajectoryError, match=r"^row 41 \(trajectory_id 't7'\): trajectory_id: duplicate id 't7' "
                                                  r"\(first in row 8\)"):
            read(repeated)
