"""The float lists of a flat Parquet file read from its pages (``_kernels.plain_doubles``, parquet_flat.page_doubles):
exactly what pyarrow decodes, for every page kind and nullability a writer may choose, and declined otherwise."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from draligned.cess import parquet, parquet_flat
from draligned.cess.parquet import load_parquet
from draligned.cess.parquet_flat import DOUBLE_LISTS, FLAT_BINARY_SCHEMA, double_list
from tests.cess.test_columns import varied_trajectory
from tests.cess.test_parquet_flat import (
    BINARY,
    MANY_PAGES,
    _equal,
    _export_like,
    _flat_file,
    binary_row,
)

pytestmark = pytest.mark.skipif(parquet_flat.compiled_checks is None, reason="the optional extension is not built")

PLAIN: dict[str, Any] = {"compression": "none", "use_dictionary": parquet.DICTIONARIES}
"""As ``cess export`` writes the float lists: uncompressed PLAIN pages."""
WRITERS = [({}, "one page"), (MANY_PAGES, "many pages"), ({"data_page_version": "2.0"}, "v2"),
           (MANY_PAGES | {"data_page_version": "2.0"}, "many pages v2")]


def _holey(rng: random.Random, row: dict[str, Any]) -> dict[str, Any]:
    """A flat row with NULL and empty lists and NULL items here and there (decoded only: no rule applies)."""
    for name in DOUBLE_LISTS:
        roll = rng.random()
        if roll < 0.15:
            row[name] = None
        elif roll < 0.25:
            row[name] = []
        elif roll < 0.6 and row[name] is not None:
            row[name] = [None if rng.random() < 0.4 else v for v in row[name]]
    return row


def _rows(seed: int, n: int, holes: bool) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = [binary_row(varied_trajectory(rng, i)) for i in range(n)]
    return [_holey(rng, row) for row in rows] if holes else rows


def _page_lists(path: Path, group: int) -> dict[str, parquet_flat.DoubleList]:
    return parquet.group_doubles(path, pq.read_metadata(path), group)


def _same(got: parquet_flat.DoubleList, arr: pa.Array) -> None:
    off, values, valid, absent = double_list(arr)
    assert np.array_equal(got[0], off) and np.array_equal(got[1], values, equal_nan=True)
    assert np.array_equal(got[2], valid if len(valid) else np.ones(len(values), bool))
    assert np.array_equal(got[3], absent)


@pytest.mark.parametrize("writer", [w[0] for w in WRITERS], ids=[w[1] for w in WRITERS])
@pytest.mark.parametrize("holes", [False, True], ids=["as exported", "NULLs and empty lists"])
def test_the_float_lists_read_from_pages_are_pyarrows(tmp_path: Path, writer: dict[str, Any], holes: bool) -> None:
    rows = _rows(3, 90, holes)
    schema = BINARY if holes else FLAT_BINARY_SCHEMA  # every list and item nullable, or as `cess export` writes them
    path = _flat_file(tmp_path / "t.parquet", rows, schema, row_group_size=25, **PLAIN, **writer)
    file = pq.ParquetFile(path)
    for group in range(file.num_row_groups):
        lists = _page_lists(path, group)
        assert sorted(lists) == sorted(DOUBLE_LISTS)
        table = file.read_row_group(group).combine_chunks()
        for name in DOUBLE_LISTS:
            _same(lists[name], table.column(name).chunk(0))


def test_the_load_gives_the_same_columns_with_the_lists_read_in_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(4)
    path = _export_like(tmp_path / "t.parquet", [varied_trajectory(rng, i) for i in range(150)], row_group_size=40,
                        **MANY_PAGES)
    calls: list[int] = []
    decode = parquet_flat.compiled_checks.plain_doubles
    spied = type("Spied", (), {name: staticmethod(getattr(parquet_flat.compiled_checks, name))
                               for name in ("check_flat", "plain_spans")})
    spied.plain_doubles = staticmethod(lambda *a: calls.append(1) or decode(*a))  # type: ignore[attr-defined]
    monkeypatch.setattr(parquet_flat, "compiled_checks", spied)
    in_place = load_parquet(path, workers=2)
    assert len(calls) == len(DOUBLE_LISTS) * pq.ParquetFile(path).num_row_groups
    monkeypatch.setattr(parquet, "page_doubles", lambda *a: None)
    _equal(in_place, load_parquet(path, workers=2))


OTHER = [({"compression": "snappy"}, "compressed"), ({"use_dictionary": True}, "dictionary")]


@pytest.mark.parametrize("writer", [w[0] for w in OTHER], ids=[w[1] for w in OTHER])
def test_float_lists_in_pages_of_another_kind_are_left_to_pyarrow(tmp_path: Path, writer: dict[str, Any]) -> None:
    path = _flat_file(tmp_path / "t.parquet", _rows(5, 20, False), FLAT_BINARY_SCHEMA, **(PLAIN | writer))
    assert _page_lists(path, 0) == {}
    flat_1 = _flat_file(tmp_path / "f1.parquet", [{**r, "probs": None} for r in _rows(5, 3, False)],
                        pa.schema([f.with_type(pa.list_(pa.float64())) if f.name == "probs" else f
                                   for f in FLAT_BINARY_SCHEMA]), **PLAIN)
    assert sorted(_page_lists(flat_1, 0)) == sorted(DOUBLE_LISTS)  # the float lists of any flat file read alike


def test_the_float_list_reader_stays_within_any_bytes_it_is_given(tmp_path: Path) -> None:
    """Cut short, bytes flipped or random: it answers -1, or items within its outputs at offsets that ascend."""
    rng = random.Random(9)
    path = _flat_file(tmp_path / "t.parquet", _rows(9, 12, True), BINARY, **MANY_PAGES, **PLAIN)
    meta = pq.read_metadata(path)
    index = [meta.schema.column(i).path for i in range(meta.num_columns)].index("doc_y.list.element")
    chunk = meta.row_group(0).column(index)
    data = path.read_bytes()[chunk.data_page_offset:chunk.data_page_offset + chunk.total_compressed_size]
    tries = [data[:rng.randrange(len(data))] for _ in range(300)]
    for _ in range(600):
        flipped = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            flipped[rng.randrange(len(data))] = rng.randrange(256)
        tries.append(bytes(flipped))
    tries += [rng.randbytes(rng.randrange(1, 400)) for _ in range(300)]
    accepted = 0
    for raw in tries:
        off, values = np.full(13, -1, np.int64), np.empty(chunk.num_values)
        valid, absent = np.empty(chunk.num_values, bool), np.empty(12, bool)
        items = parquet_flat.compiled_checks.plain_doubles(np.frombuffer(raw, np.uint8), 1, 3, off, values, valid,
                                                           absent)
        if items >= 0:
            accepted += 1
            assert items <= chunk.num_values and off[0] == 0 and off[-1] == items and (np.diff(off) >= 0).all()
    assert 0 < accepted < len(tries)
