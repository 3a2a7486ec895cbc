"""The flat Parquet layout `cess export` writes: the columns of the nested layout and of JSON Lines exactly,
every rule checked, errors naming row and field (the record's field, or the flat column for a list length).

Every test that takes the ``checks`` fixture runs over both checks of a ``flat-2`` batch: the compiled pass and
numpy's."""

from __future__ import annotations

import copy
import itertools
import json
import os
import random
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from draligned.cess import parquet, parquet_batch, parquet_flat, parquet_lines
from draligned.cess.columns import TrajectoryColumns
from draligned.cess.fastload import load_columns
from draligned.cess.heap import keep_freed_memory
from draligned.cess.parquet import load_parquet, write_nested_parquet, write_parquet
from draligned.cess.parquet_flat import FLAT_BINARY, FLAT_BINARY_SCHEMA, FLAT_SCHEMA, LAYOUT_KEY
from draligned.cess.trajectory import TrajectoryError, load_trajectories
from draligned.cess.trajectory_rules import PROB_SUM_MARGIN, PROB_SUM_TOLERANCE
from draligned.cli import main
from tests.cess.extensions import with_and_without
from tests.cess.test_columns import varied_trajectory
from tests.cess.test_parquet import ROW_CASES
from tests.cess.test_trajectory import VALID

checks = with_and_without(parquet_flat, "compiled_checks", "_kernels", "numpy", "checks",
                          also=((parquet_batch, "compiled_sums"),))
"""The checks of a flat-2 batch in this test: the compiled pass, or numpy's with numpy's probability sums (as
without the extension)."""
FIELDS = ("budget", "doc_start", "doc_m", "doc_y", "first_support", "round_start", "chosen", "y", "p", "stop",
          "full_support")
NULLABLE = pa.schema([pa.field(f.name, pa.list_(f.type.value_type) if pa.types.is_list(f.type) else f.type)
                      for f in FLAT_SCHEMA], metadata=FLAT_SCHEMA.metadata)
"""The flat columns with every list and item nullable: what another writer may produce."""
BINARY = pa.schema([pa.field(f.name, pa.binary()) if f.name == "probs" else f for f in NULLABLE],
                   metadata=FLAT_BINARY_SCHEMA.metadata)
"""``flat-2`` as another writer may write it: nullable, ``probs`` with 32-bit offsets."""


def _equal(a: TrajectoryColumns, b: TrajectoryColumns) -> None:
    assert a.trajectory_id == b.trajectory_id and a.task_id == b.task_id
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def flat_row(record: dict[str, Any]) -> dict[str, Any]:
    """A JSON record as one flat row, written here by hand (not by the code under test)."""
    pool, rounds = record.get("pool", {}), record.get("rounds", [])
    return {"trajectory_id": record.get("trajectory_id"), "task_id": record.get("task_id"),
            "ranking": record.get("ranking"), "budget": record.get("budget"), "doc_ids": pool.get("doc_ids"),
            "doc_y": pool.get("y"), "doc_m": pool.get("m"), "chosen": [r.get("chosen") for r in rounds],
            "stop_prob": [r.get("stop_prob") for r in rounds], "round_y": [r.get("y") for r in rounds],
            "probs": [p for r in rounds for p in r.get("probs", [])]}


def binary_row(record: dict[str, Any]) -> dict[str, Any]:
    """A JSON record as one ``flat-2`` row (``probs`` as little-endian float64 bytes), written here by hand."""
    row = flat_row(record)
    return row | {"probs": b"".join(struct.pack("<d", p) for p in row["probs"])}


def _binary(case: tuple[str, Callable[[dict], None], str, str]) -> bool:
    """Whether a bad record's probabilities are all numbers (else flat-2 cannot hold them)."""
    record = copy.deepcopy(VALID)
    case[1](record)
    return all(type(p) in (int, float) for r in record.get("rounds", []) for p in r.get("probs", []))


BINARY_CASES = [c for c in ROW_CASES if _binary(c)]


def _flat_file(path: Path, rows: list[dict[str, Any]], schema: pa.Schema = NULLABLE, **kw: Any) -> Path:
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, **kw)
    return path


def test_flat_nested_and_json_lines_give_exactly_the_same_columns(tmp_path: Path, checks: str) -> None:
    rng = random.Random(3)
    records = [varied_trajectory(rng, i) for i in range(300)]
    jsonl, flat, nested = tmp_path / "t.jsonl", tmp_path / "t.parquet", tmp_path / "n.parquet"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records))
    write_parquet(jsonl, flat)
    write_nested_parquet(jsonl, nested)
    assert pq.read_metadata(flat).metadata[LAYOUT_KEY] == FLAT_BINARY and not pq.read_metadata(nested).metadata
    assert pq.read_schema(flat).remove_metadata() == FLAT_BINARY_SCHEMA.remove_metadata()
    from_flat = load_parquet(flat)
    _equal(from_flat, load_columns(jsonl))
    _equal(from_flat, load_parquet(nested))
    by_hand = _flat_file(tmp_path / "h.parquet", [flat_row(r) for r in records], row_group_size=7)  # 43 groups
    _equal(load_parquet(by_hand, workers=2), from_flat)  # flat-1, as cess export wrote it before
    binary = _flat_file(tmp_path / "b.parquet", [binary_row(r) for r in records], BINARY, row_group_size=9)
    _equal(load_parquet(binary, workers=2), from_flat)
    assert not from_flat.full_support.all() and np.isnan(from_flat.doc_y).any()


@pytest.mark.parametrize(("name", "mutate", "field", "message"), ROW_CASES, ids=[c[0] for c in ROW_CASES])
def test_a_bad_flat_row_is_named_by_row_trajectory_and_field(
        tmp_path: Path, name: str, mutate: Callable[[dict], None], field: str, message: str, checks: str) -> None:
    rng = random.Random(8)
    good = [varied_trajectory(rng, i) for i in range(30)]
    bad = copy.deepcopy(VALID) | {"trajectory_id": "bad"}
    mutate(bad)
    path = _flat_file(tmp_path / "t.parquet", [flat_row(r) for r in [*good, bad, VALID]], row_group_size=8)
    with pytest.raises(TrajectoryError) as info:
        load_parquet(path)
    if any(c[0] == name for c in BINARY_CASES):  # the same row in flat-2, the same error
        binary = _flat_file(tmp_path / "b.parquet", [binary_row(r) for r in [*good, bad, VALID]], BINARY,
                            row_group_size=8)
        with pytest.raises(TrajectoryError) as in_binary:
            load_parquet(binary)
        assert str(in_binary.value) == str(info.value)
    assert str(info.value).startswith(f"row 31 (trajectory_id 'bad'): {info.value.field}: ")
    if name == "probs length differs from N":  # the flat list holds every round's probabilities
        assert (info.value.field, info.value.message) == ("probs", "has 5 values, expected 2 rounds × 3 documents = 6")
        return
    if name == "missing required field":  # a missing value is a NULL in the column
        assert (info.value.field, info.value.message) == (field, "None is not of type 'number'")
        return
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text(json.dumps(bad) + "\n")
    with pytest.raises(TrajectoryError) as slow:
        load_trajectories(jsonl)
    assert (info.value.field, info.value.message) == (field, slow.value.message)


def _set(column: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda row: row.__setitem__(column, value)


SHAPES = [
    ("stop_prob", _set("stop_prob", [0.0, 0.1, 0.1]), "has 3 entries, expected 2 (one per round, as in chosen)"),
    ("round_y", _set("round_y", [None] * 4), "has 4 entries, expected 2 (one per round, as in chosen)"),
    ("probs", _set("probs", None), "is NULL (a list is required: use [] or a list of NULLs for absent values)"),
    ("chosen", _set("chosen", None), "is NULL (a list is required: use [] or a list of NULLs for absent values)"),
    ("doc_ids", _set("doc_ids", None), "is NULL (a list is required: use [] or a list of NULLs for absent values)"),
    ("probs", lambda row: row["probs"].append(0.0), "has 7 values, expected 2 rounds × 3 documents = 6"),
]


@pytest.mark.parametrize(("field", "mutate", "message"), SHAPES, ids=[f"{s[0]}-{i}" for i, s in enumerate(SHAPES)])
def test_flat_lists_of_the_wrong_length_name_their_column(
        tmp_path: Path, field: str, mutate: Callable[[dict[str, Any]], None], message: str) -> None:
    bad = flat_row(copy.deepcopy(VALID) | {"trajectory_id": "bad"})
    mutate(bad)
    path = _flat_file(tmp_path / "t.parquet", [flat_row(VALID), bad, flat_row(VALID | {"trajectory_id": "t3"})])
    with pytest.raises(TrajectoryError) as info:
        load_parquet(path)
    assert str(info.value) == f"row 2 (trajectory_id 'bad'): {field}: {message}"


BINARY_SHAPES = [
    (b"\0" * 47, "has 47 bytes, not a whole number of float64 values (8 bytes each)"),
    (struct.pack("<7d", *[1 / 7] * 7), "has 7 values, expected 2 rounds × 3 documents = 6"),
    (None, "is NULL (a list is required: use [] or a list of NULLs for absent values)"),
]


@pytest.mark.parametrize(("probs", "message"), BINARY_SHAPES, ids=["odd bytes", "7 values", "null"])
def test_flat_2_probabilities_of_the_wrong_size_are_named(
        tmp_path: Path, probs: bytes | None, message: str, checks: str) -> None:
    """A later batch of the same row group still reads its probabilities where they start (row 2 shifts them)."""
    rows = [binary_row(VALID | {"trajectory_id": f"t{i}"}) for i in range(5)]
    path = _flat_file(tmp_path / "t.parquet", [rows[0], rows[1] | {"probs": probs}, *rows[2:]], BINARY)
    with pytest.raises(TrajectoryError) as info:
        load_parquet(path)
    assert str(info.value) == f"row 2 (trajectory_id 't1'): probs: {message}"


def _batches(path: Path) -> list[pa.RecordBatch]:
    """A flat file's batches as the reader decodes them (the ids as dictionaries)."""
    file = pq.ParquetFile(path, read_dictionary=parquet.DICTIONARIES)
    return [b for g in range(file.num_row_groups) for b in file.read_row_group(g).to_batches()]


def _scores_absent(record: dict[str, Any]) -> dict[str, Any]:
    """The record with every score in the pool (no round's own): a file whose round scores are all NULL."""
    record = copy.deepcopy(record)
    pool, ids = record["pool"], record["pool"]["doc_ids"]
    for r in record["rounds"]:
        if "y" in r and pool.get("y") is not None:
            pool["y"][ids.index(r["chosen"])] = r.pop("y")
        r.pop("y", None)
    if pool.get("y") is None or None in pool["y"]:
        pool["y"] = [0.5 if v is None else v for v in pool.get("y") or [0.5] * len(ids)]
    return record


@pytest.mark.skipif(parquet_flat.compiled_checks is None, reason="the optional extension is not built")
def test_the_compiled_check_flags_and_gathers_what_numpys_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same suspect rows, bad rows of every kind among varied good ones (pool scores unknown, absent lists,
    zero probabilities; round scores some, all or none NULL; sums within the tolerance but not its margin,
    suspect but valid), and the same arrays wherever no row is badly shaped: the loader estimates a suspect
    row the validator accepts from these arrays."""
    rng = random.Random(11)
    good = [varied_trajectory(rng, i) for i in range(120)]
    for record in good[::15]:
        record["rounds"][0]["probs"][0] += PROB_SUM_TOLERANCE - PROB_SUM_MARGIN / 2
    bad = []
    for i, case in enumerate(BINARY_CASES):
        record = copy.deepcopy(VALID) | {"trajectory_id": f"bad{i}"}
        case[1](record)
        bad.append(record)
    files = [[binary_row(r) for r in good], [binary_row(_scores_absent(r)) for r in good],
             [binary_row(r) for r in [*good, *bad]], [binary_row(_scores_absent(r)) for r in good[:40]] + [
                 binary_row(r) for r in bad]]
    flagged = 0
    for k, rows in enumerate(files):
        for batch in _batches(_flat_file(tmp_path / f"{k}.parquet", rows, BINARY, row_group_size=37)):
            compiled = parquet_flat.compiled_check(batch)
            assert compiled is not None  # the pass applies to these batches
            with monkeypatch.context() as numpy_only:
                numpy_only.setattr(parquet_flat, "compiled_checks", None)
                expected = parquet_flat.check_flat_batch(batch)
            np.testing.assert_array_equal(compiled[0], expected[0])
            assert compiled[2] == expected[2]
            flagged += int(expected[0].sum())
            if not parquet_flat._shape_faults(batch).any():  # (else numpy's are of the well-shaped rows only)
                assert compiled[3] == expected[3] and compiled[1].keys() == expected[1].keys()
                for name, values in expected[1].items():
                    assert compiled[1][name].dtype == values.dtype, name
                    np.testing.assert_array_equal(compiled[1][name], values, err_msg=name)
    near = range(0, len(good), 15)
    assert flagged == 2 * len(bad) + 3 * len(near) + sum(i < 40 for i in near)  # the fourth file has good[:40]


def test_an_earlier_bad_row_is_named_before_a_later_badly_shaped_one(tmp_path: Path) -> None:
    early = flat_row(copy.deepcopy(VALID) | {"trajectory_id": "early", "budget": 0})
    late = flat_row(VALID | {"trajectory_id": "late"}) | {"round_y": []}
    path = _flat_file(tmp_path / "t.parquet", [flat_row(VALID), early, late])
    with pytest.raises(TrajectoryError, match=r"^row 2 \(trajectory_id 'early'\): budget: "):
        load_parquet(path)


SCHEMAS = [
    (NULLABLE.remove(NULLABLE.get_field_index("round_y")),
     r"^schema: round_y: column missing \(expected list<double>\)"),
    (NULLABLE.set(3, pa.field("budget", pa.string())), r"^schema: budget: has type string, expected int64"),
    (NULLABLE.set(10, pa.field("probs", pa.list_(pa.float32()))),
     r"^schema: probs: has type list<float>, expected list<double>"),
    (NULLABLE.append(pa.field("note", pa.string())), r"^schema: note: unexpected column"),
    (NULLABLE.with_metadata({LAYOUT_KEY: b"flat-9"}),
     r"^metadata: draligned\.cess\.layout: unknown layout b'flat-9' \(this version reads b'flat-1' and b'flat-2'\)"),
    (NULLABLE.with_metadata({LAYOUT_KEY: FLAT_BINARY}), r"^schema: probs: has type list<double>, expected binary"),
]


@pytest.mark.parametrize(("schema", "error"), SCHEMAS,
                         ids=["missing", "type", "item type", "extra", "version", "flat-2 probs"])
def test_a_flat_file_of_another_schema_or_version_is_refused(tmp_path: Path, schema: pa.Schema, error: str) -> None:
    row = flat_row(VALID)
    values = {f.name: str(row[f.name]) if f.type == pa.string() and f.name == "budget" else row.get(f.name)
              for f in schema}
    path = _flat_file(tmp_path / "t.parquet", [values], schema=schema)
    with pytest.raises(TrajectoryError, match=error):
        load_parquet(path)


def test_budget_of_any_integer_type_and_non_nullable_lists_read(tmp_path: Path) -> None:
    rows = [flat_row(VALID), flat_row(VALID | {"trajectory_id": "t2"})]
    small = _flat_file(tmp_path / "a.parquet", rows, schema=NULLABLE.set(3, pa.field("budget", pa.int8())))
    strict = _flat_file(tmp_path / "b.parquet", rows, schema=FLAT_SCHEMA)
    _equal(load_parquet(small), load_parquet(strict))
    assert load_parquet(strict).trajectory_id == ["t1", "t2"]


def test_keep_freed_memory_turns_numpys_huge_page_advice_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIMALLOC_PURGE_DELAY", "")  # records the variable as it was: undone after the test
    monkeypatch.delenv("MIMALLOC_PURGE_DELAY")
    keep_freed_memory()
    assert np._core.multiarray._set_madvise_hugepage(False) is False  # the setting it found: already off
    assert os.environ["MIMALLOC_PURGE_DELAY"] == "-1"  # read by pyarrow's mimalloc when it loads
    monkeypatch.setenv("MIMALLOC_PURGE_DELAY", "50")
    keep_freed_memory()
    assert os.environ["MIMALLOC_PURGE_DELAY"] == "50"  # the user's own setting stands


def _damaged(data: bytes, tid: bytes, replace: bytes) -> bytes:
    """The file with one trajectory id's PLAIN bytes (4-byte length, then the text) replaced."""
    value = len(tid).to_bytes(4, "little") + tid
    assert data.count(value) == 1
    return data.replace(value, replace)


DAMAGES = [  # the id's length says more bytes than the page holds / the id is not UTF-8
    (lambda tid: (1 << 30).to_bytes(4, "little") + tid, "not readable (Invalid or truncated PLAIN-encoded BYTE_ARRAY"),
    (lambda tid: len(tid).to_bytes(4, "little") + b"\xff" * len(tid),
     "not readable (In chunk 0: Invalid: Invalid UTF8 sequence at string index 1)"),
]


@pytest.mark.parametrize(("replace", "message"), DAMAGES, ids=["truncated", "not-utf8"])
def test_a_damaged_row_group_exits_2_naming_its_rows_and_column(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], replace: Callable[[bytes], bytes], message: str) -> None:
    rows = [flat_row(VALID | {"trajectory_id": f"traj-{i:04d}"}) for i in range(6)]
    good = _flat_file(tmp_path / "t.parquet", rows, schema=FLAT_SCHEMA, row_group_size=4, use_dictionary=False)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(_damaged(good.read_bytes(), b"traj-0005", replace(b"traj-0005")))
    with pytest.raises(TrajectoryError) as info:
        load_parquet(bad)
    assert str(info.value).startswith(f"row group 1 (rows 5-6): trajectory_id: {message}")
    assert main(["cess", "estimate", str(bad)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {bad}: row group 1 (rows 5-6): trajectory_id: {message}")


def _header_damaged(path: Path, group: int, column: str) -> Path:
    """The file with the first bytes of ``column``'s first page header in row group ``group`` overwritten (a list
    column by its name: its one leaf)."""
    meta = pq.read_metadata(path)
    index = [meta.schema.column(i).path.split(".")[0] for i in range(meta.num_columns)].index(column)
    at = meta.row_group(group).column(index).data_page_offset
    data = bytearray(path.read_bytes())
    data[at:at + 6] = b"\xff" * 6
    path.write_bytes(bytes(data))
    return path


def test_a_damaged_page_header_exits_2_naming_its_rows_and_column(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """pyarrow raises OSError itself (not an ArrowException) for a page header it cannot deserialize."""
    rows = [flat_row(VALID | {"trajectory_id": f"traj-{i:04d}"}) for i in range(6)]
    path = _header_damaged(_flat_file(tmp_path / "t.parquet", rows, schema=FLAT_SCHEMA, row_group_size=4), 1,
                           "budget")
    with pytest.raises(TrajectoryError) as info:
        load_parquet(path)
    assert str(info.value).startswith("row group 1 (rows 5-6): budget: not readable (Couldn't deserialize thrift")
    assert main(["cess", "estimate", str(path), "--json"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {path}: row group 1 (rows 5-6): budget: not readable (")


def test_a_file_holding_more_values_than_its_metadata_counts_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _flat_file(tmp_path / "t.parquet", [flat_row(VALID), flat_row(VALID | {"trajectory_id": "t2"})])
    assert load_parquet(path).trajectory_id == ["t1", "t2"]
    def short(meta: Any, flat: bool) -> tuple[int, int, int]:  # a round short
        return meta.num_rows, 6, 3
    for module in (parquet, parquet_lines):  # the load and the --json pipeline refuse it alike
        monkeypatch.setattr(module, "metadata_counts", short)
    refused = r"^file: <file>: holds more values than its metadata counts \(chosen: more values than the 3 counted\)$"
    with pytest.raises(TrajectoryError, match=refused):
        load_parquet(path)
    with pytest.raises(TrajectoryError, match=refused):
        list(parquet_lines.parquet_lines(path, 0.5))


def test_the_export_gathers_duckdbs_batches_into_full_row_groups(tmp_path: Path) -> None:
    """DuckDB hands over a big file in batches of a few thousand rows whatever size is asked for."""
    rng = random.Random(5)
    jsonl, out = tmp_path / "t.jsonl", tmp_path / "t.parquet"
    jsonl.write_text("".join(json.dumps(varied_trajectory(rng, i)) + "\n" for i in range(20)))
    write_parquet(jsonl, out)
    table = pq.read_table(out)
    cuts = [0, 3, 8, 9, 18, 20]  # batches of 3, 5, 1, 9 and 2 rows
    batches = [b for lo, hi in itertools.pairwise(cuts) for b in table.slice(lo, hi - lo).to_batches()]
    groups = list(parquet.full_groups(batches, 4))
    assert [g.num_rows for g in groups] == [8, 8, 4] and all(g.num_rows % 4 == 0 for g in groups)
    assert pa.concat_tables(groups).equals(table)
    assert [g.num_rows for g in parquet.full_groups(batches, 6)] == [6, 12, 2]


def _export_like(path: Path, records: list[dict[str, Any]], **kw: Any) -> Path:
    """``flat-2`` rows written as ``cess export`` writes them (REQUIRED probabilities, uncompressed, the ids as
    dictionaries), with ``kw`` for the writer (page sizes, page version, codec)."""
    options: dict[str, Any] = {"compression": "none", "use_dictionary": parquet.DICTIONARIES} | kw
    return _flat_file(path, [binary_row(r) for r in records], FLAT_BINARY_SCHEMA, **options)


def _probs_of(path: Path, group: int) -> parquet_flat.Probs | None:
    return parquet.group_probs(path, pq.read_metadata(path), group)


MANY_PAGES = {"data_page_size": 256, "write_batch_size": 10}
"""Pages cut after every 10 values that pass 256 bytes (pyarrow checks a page's size once per batch of values)."""
PAGES = [({}, "one page a group"), (MANY_PAGES, "many pages"), (MANY_PAGES | {"data_page_version": "2.0"}, "pages v2")]


@pytest.mark.skipif(parquet_flat.compiled_checks is None, reason="the optional extension is not built")
@pytest.mark.parametrize("writer", [p[0] for p in PAGES], ids=[p[1] for p in PAGES])
def test_probabilities_are_read_where_the_pages_hold_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: dict[str, Any]) -> None:
    """Every row's span holds exactly the bytes pyarrow decodes for it, and the load through the spans gives
    the columns the load through pyarrow's decode gives, with the in-place read taken for every row group."""
    rng = random.Random(4)
    records = [varied_trajectory(rng, i) for i in range(150)]
    path = _export_like(tmp_path / "t.parquet", records, row_group_size=40, **writer)
    file = pq.ParquetFile(path)
    for group in range(file.num_row_groups):
        probs = _probs_of(path, group)
        assert probs is not None
        pages, starts, ends = probs
        decoded = file.read_row_group(group, columns=["probs"]).column(0).to_pylist()
        assert [bytes(pages[a:b]) for a, b in zip(starts, ends, strict=True)] == decoded
    calls = []
    spans = parquet_flat.compiled_checks.plain_spans
    monkeypatch.setattr(parquet_flat, "compiled_checks", type("Spied", (), {
        "check_flat": staticmethod(parquet_flat.compiled_checks.check_flat),
        "plain_doubles": staticmethod(parquet_flat.compiled_checks.plain_doubles),
        "plain_spans": staticmethod(lambda *a: calls.append(1) or spans(*a))}))
    in_place = load_parquet(path, workers=2)
    assert len(calls) == file.num_row_groups
    monkeypatch.setattr(parquet, "page_probs", lambda *a: None)
    _equal(in_place, load_parquet(path, workers=2))
    assert len(calls) == file.num_row_groups  # not called again: pyarrow decoded the probabilities
    assert not in_place.full_support.all()


OTHER_PAGES = [({"compression": "snappy"}, "compressed"),
               ({"use_dictionary": [*parquet.DICTIONARIES, "probs"]}, "dictionary")]


@pytest.mark.skipif(parquet_flat.compiled_checks is None, reason="the optional extension is not built")
@pytest.mark.parametrize("writer", [p[0] for p in OTHER_PAGES], ids=[p[1] for p in OTHER_PAGES])
def test_pages_of_another_kind_are_decoded_by_pyarrow(tmp_path: Path, writer: dict[str, Any]) -> None:
    rng = random.Random(6)
    records = [varied_trajectory(rng, i) for i in range(30)]
    path = _export_like(tmp_path / "t.parquet", records, **writer)
    assert _probs_of(path, 0) is None
    _equal(load_parquet(path), load_parquet(_export_like(tmp_path / "plain.parquet", records)))
    nullable = _flat_file(tmp_path / "n.parquet", [binary_row(r) for r in records], BINARY)  # OPTIONAL probs
    assert _probs_of(nullable, 0) is None


@pytest.mark.parametrize(("probs", "message"), BINARY_SHAPES[:2], ids=["odd bytes", "7 values"])
def test_probabilities_read_in_place_of_the_wrong_size_are_named(
        tmp_path: Path, probs: bytes, message: str) -> None:
    rows = [binary_row(VALID | {"trajectory_id": f"t{i}"}) for i in range(5)]
    rows[1]["probs"] = probs
    path = _flat_file(tmp_path / "t.parquet", rows, FLAT_BINARY_SCHEMA, compression="none")
    with pytest.raises(TrajectoryError) as info:
        load_parquet(path)
    assert str(info.value) == f"row 2 (trajectory_id 't1'): probs: {message}"


DAMAGED_PAGES = [
    ("probs", "page_probs", lambda path: _probs_of(path, 0) is None),
    ("doc_m", "page_doubles", lambda path: "doc_m" not in parquet.group_doubles(path, pq.read_metadata(path), 0))]
"""A column whose first page header is damaged, the page reader that reads it in place, and whether it declined."""


@pytest.mark.skipif(parquet_flat.compiled_checks is None, reason="the optional extension is not built")
@pytest.mark.parametrize(("column", "reader", "declined"), DAMAGED_PAGES, ids=[d[0] for d in DAMAGED_PAGES])
def test_a_damaged_page_read_in_place_is_left_to_pyarrow_which_names_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, column: str, reader: str,
        declined: Callable[[Path], bool]) -> None:
    """The page reader declines what it cannot read (here the first page header's bytes overwritten), and the
    load fails with the error it gave before there was a page reader."""
    rng = random.Random(8)
    path = _header_damaged(_export_like(tmp_path / "t.parquet", [varied_trajectory(rng, i) for i in range(20)]), 0,
                           column)
    assert declined(path)
    with pytest.raises(TrajectoryError) as info:
        load_parquet(path)
    monkeypatch.setattr(parquet, reader, lambda *a: None)
    with pytest.raises(TrajectoryError) as before:
        load_parquet(path)
    assert str(info.value) == str(before.value)
    assert str(info.value).startswith(f"row group 0 (rows 1-20): {column}: ")


@pytest.mark.skipif(parquet_flat.compiled_checks is None, reason="the optional extension is not built")
def test_the_page_reader_stays_within_any_bytes_it_is_given(tmp_path: Path) -> None:
    """Cut short, bytes flipped or random: it answers False, or spans that lie within the bytes."""
    rng, records = random.Random(9), [varied_trajectory(random.Random(9), i) for i in range(12)]
    path = _export_like(tmp_path / "t.parquet", records, **MANY_PAGES)
    pages, _, _ = _probs_of(path, 0) or pytest.fail("the export's pages are read in place")
    chunk = bytes(pages)
    tries = [chunk[:rng.randrange(len(chunk))] for _ in range(300)]
    for _ in range(300):
        flipped = bytearray(chunk)
        for _ in range(rng.randint(1, 4)):
            flipped[rng.randrange(min(len(chunk), 64))] = rng.randrange(256)  # mostly the first header
        tries.append(bytes(flipped))
    tries += [rng.randbytes(rng.randrange(1, 400)) for _ in range(300)]
    accepted = 0
    for data in tries:
        starts, ends = np.full(12, -1, np.int64), np.full(12, -1, np.int64)
        buffer = np.frombuffer(data, np.uint8) if data else np.zeros(0, np.uint8)
        if parquet_flat.compiled_checks.plain_spans(buffer, starts, ends):
            accepted += 1
            assert ((0 <= starts) & (starts <= ends) & (ends <= len(data))).all()
    assert accepted < len(tries)


FOOTERS = [(lambda data: data[:100], "Parquet magic bytes not found in footer"),
           (lambda data: data[:-8] + b"\xff" * 4 + data[-4:], "Parquet file size is"),
           (lambda data: b"PAR1" + b"\xff" * 40 + (40).to_bytes(4, "little") + b"PAR1", "Couldn't deserialize thrift")]


@pytest.mark.parametrize(("damage", "message"), FOOTERS, ids=["truncated", "footer length", "footer thrift"])
def test_a_file_whose_footer_cannot_be_read_is_named_as_not_parquet(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: Callable[[bytes], bytes], message: str) -> None:
    good = _flat_file(tmp_path / "t.parquet", [flat_row(VALID)], schema=FLAT_SCHEMA)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(damage(good.read_bytes()))
    with pytest.raises(TrajectoryError, match=rf"^file: <file>: not a readable Parquet file \({message}"):
        load_parquet(bad)
    assert main(["cess", "estimate", str(bad), "--json"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {bad}: file: <file>: not a readable Parquet file ({message}")


def test_a_missing_parquet_file_is_named_by_the_system_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(FileNotFoundError):
        load_parquet(tmp_path / "absent.parquet")
    assert main(["cess", "estimate", str(tmp_path / "absent.parquet")]) == 2
    assert "No such file or directory" in capsys.readouterr().err
