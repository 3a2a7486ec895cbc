"""The simdjson line parse (the loader's fast path) against orjson's and the full validator, line by line.

Every test that takes the ``walk`` fixture runs over both walks of the parsed line: Python's
(:meth:`LineChunk.take_line`) and, when the extension is built, the compiled one
(:meth:`LineChunk.take_lines`, which must also gather exactly what Python's gathers from a line it accepts, or
orjson's path from a line with a ``[`` in a string, which only the compiled walk reads).
For every line, the walk either declines (the line goes on to orjson and the full
validator) or gathers exactly what :meth:`LineChunk.take` gathers from orjson's record; it never gathers a
line the full validator rejects for its shape or types. Through the loader, a bad line's error names the
same line, field and message as :func:`load_trajectories` wherever the line falls.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from draligned.cess import fastload, line_chunk
from draligned.cess.fastload import load_columns
from draligned.cess.line_chunk import LineChunk
from draligned.cess.trajectory import TrajectoryError, load_trajectories, parse_trajectory
from tests.cess.extensions import with_and_without
from tests.cess.test_columns import ODD_LINES, UNPLAIN_LINES, _write, varied_trajectory
from tests.cess.test_trajectory import CASES, VALID, _drop, _set


def _gathered(chunk: LineChunk) -> dict[str, Any]:
    """Everything a chunk gathered, with the numbers' arrays and the per-line check's verdict."""
    bad, arrays = chunk.check()
    return {"ids": chunk.ids, "tasks": chunk.tasks, "bad": bad.tolist(),
            **{name: (value.dtype.str, value.tobytes()) for name, value in arrays.items()}}


walk = with_and_without(line_chunk, "compiled_walk", "_line_walk", "python", "walk")
"""The walk the loader uses in this test: the compiled one, or Python's alone (as without the extension)."""


def _take(chunk: LineChunk, raw: bytes) -> bool:
    """Whether the loader's first walk gathers the line ``raw`` into ``chunk``: the compiled walk when it is
    in use (and then Python's gathers the same from it), else :meth:`LineChunk.take_line`."""
    if line_chunk.compiled_walk is None:
        return chunk.take_line(raw)
    start, taken = chunk.take_lines(raw, 0, 7)
    assert (start, taken) in ((0, 0), (len(raw), 1)) and len(chunk.ids) == taken
    if taken:
        assert chunk.lines == [7]
        python, rec = LineChunk(), orjson.loads(raw)
        arrays = 2 + len(rec["rounds"]) + len(rec["pool"].keys() & {"y", "m"})
        if raw.count(b"[") > arrays:  # a "[" in a string: Python's walk, which counts them, leaves it to orjson's
            assert not python.take_line(raw) and python.take(rec, raw)
        else:
            assert python.take_line(raw)
        assert _gathered(python) == _gathered(chunk), raw
    return bool(taken)


def _verdicts(raw: bytes) -> tuple[dict[str, Any] | None, dict[str, Any] | None, bool]:
    """What the simdjson parse gathers (None: declined), what the exact path gathers (orjson's parse, else
    the full validator's record; None: rejected), and whether the full validator accepts the line."""
    fast, slow = LineChunk(), LineChunk()
    try:
        rec = orjson.loads(raw)
    except orjson.JSONDecodeError:
        rec = None
    try:
        checked = parse_trajectory(raw.decode("utf-8")).model_dump()
    except (TrajectoryError, UnicodeDecodeError):
        checked = None
    exact = rec is not None and slow.take(rec, raw) or checked is not None and slow.take(checked, None)
    return _gathered(fast) if _take(fast, raw) else None, _gathered(slow) if exact else None, checked is not None


def _agree(raw: bytes) -> bool:
    """Assert the two paths agree on ``raw``; whether the simdjson parse gathered it."""
    fast, slow, valid = _verdicts(raw)
    if fast is not None:
        assert fast == slow, raw
        assert valid or any(fast["bad"]), raw  # gathered: the full validator accepts, or the number checks flag it
    return fast is not None


def _mutated(record: dict[str, Any], mutate: Callable[[dict], None]) -> bytes:
    bad = copy.deepcopy(record)
    mutate(bad)
    return orjson.dumps(bad)


BAD_SHAPES = [  # (mutation, field the full validator names): every kind of line the fast parse must decline
    (_set("rounds.0.probs.1", "0.25"), "rounds[0].probs[1]"), (_set("rounds.0.probs.1", True), "rounds[0].probs[1]"),
    (_set("rounds.0.probs.1", None), "rounds[0].probs[1]"), (_set("rounds.0.probs.1", [0.25]), "rounds[0].probs[1]"),
    (_set("rounds.0.probs.1", {"p": 0.25}), "rounds[0].probs[1]"), (_set("pool.y.1", [-1.0]), "pool.y[1]"),
    (_set("pool.m.1", []), "pool.m[1]"), (_set("rounds.1.probs", [0.2, [0.3, 0.5]]), "rounds[1].probs"),
    (_set("rounds.0.stop_prob", "0"), "rounds[0].stop_prob"), (_set("rounds.0.stop_prob", None), "rounds[0].stop_prob"),
    (_set("rounds.1.y", "0"), "rounds[1].y"), (_set("rounds.1.y", False), "rounds[1].y"),
    (_set("pool.m.0", None), "pool.m[0]"), (_set("pool.m", {"d0": 1}), "pool.m"), (_set("pool.y.0", "1"), "pool.y[0]"),
    (_set("pool.y", 1.0), "pool.y"), (_set("pool.doc_ids", "d0"), "pool.doc_ids"),
    (_set("pool.doc_ids.1", 1), "pool.doc_ids[1]"),
    (_set("pool.doc_ids.1", ""), "pool.doc_ids[1]"), (_set("pool.doc_ids", []), "pool.doc_ids"),
    (_set("trajectory_id", 7), "trajectory_id"), (_set("trajectory_id", ""), "trajectory_id"),
    (_set("trajectory_id", ["t1"]), "trajectory_id"), (_set("task_id", None), "task_id"),
    (_set("budget", "2"), "budget"), (_set("budget", True), "budget"),
    (_set("budget", 0), "budget"), (_set("ranking", 1), "ranking"), (_set("ranking", "sideways"), "ranking"),
    (_set("rounds.0.chosen", 0), "rounds[0].chosen"), (_set("rounds.0.chosen", "d9"), "rounds[0].chosen"),
    (_set("rounds.0.probs", [0.5, 0.5]), "rounds[0].probs"), (_set("pool.y", [1.0]), "pool.y"),
    (_set("pool.m", [0.1, 0.2, 0.3, 0.4]), "pool.m"), (_set("rounds", []), "rounds"),
    (_set("rounds.0", []), "rounds[0]"),
    (_set("pool", []), "pool"), (_drop("rounds.0.chosen"), "rounds[0].chosen"), (_drop("pool.doc_ids"), "pool.doc_ids"),
    (_drop("task_id"), "task_id"), (_drop("budget"), "budget"), (_set("extra", 1), "<record>"),
    (_set("pool.extra", None), "pool"), (_set("rounds.1.extra", 0), "rounds[1]"), (_set("budget", 1), "rounds"),
]


@pytest.mark.parametrize(("mutate", "field"), BAD_SHAPES, ids=[f for _, f in BAD_SHAPES])
def test_the_fast_parse_declines_a_line_of_the_wrong_shape_or_type(
        walk: str, mutate: Callable[[dict], None], field: str) -> None:
    raw = _mutated(VALID, mutate)
    assert _agree(orjson.dumps(VALID)) and not _agree(raw)
    with pytest.raises(TrajectoryError):
        parse_trajectory(raw.decode())


@pytest.mark.parametrize(("name", "mutate", "field", "message"), CASES, ids=[c[0] for c in CASES])
def test_every_kind_of_bad_line_is_declined_or_flagged_by_the_number_checks(
        walk: str, name: str, mutate: Callable[[dict], None], field: str, message: str) -> None:
    raw = _mutated(VALID, mutate)
    fast, _, valid = _verdicts(raw)
    assert not valid and (fast is None or any(fast["bad"])) and _agree(raw) == (fast is not None)


COMPACT = orjson.dumps(VALID).decode()


@pytest.mark.parametrize("line", ODD_LINES + UNPLAIN_LINES + [
    COMPACT + "\r\n", "\ufeff" + COMPACT, COMPACT + "\n", COMPACT[:-1], COMPACT.replace('"d0"', '"d\\u0030"'),
    COMPACT.replace('"d1"', '"d\\ud800"'), COMPACT.replace("0.1,", "1E-1,", 1), COMPACT.replace("0.1,", "-0.0,", 1),
    COMPACT.replace("0.1,", "01,", 1), COMPACT.replace("0.1,", "12345678901234567890,", 1),
    COMPACT.replace('"t1"', '"t1\x00"'), COMPACT + "\x00", COMPACT.replace('"t1"', '"[t1]"'),
    COMPACT.replace('"m":', '"y":'), COMPACT.replace('"m":', '"n":'), COMPACT.replace('"m":', '"doc_ids":'),
])
def test_odd_lines_the_two_paths_agree(walk: str, line: str) -> None:
    _agree(line.encode("utf-8", "surrogatepass"))


@pytest.mark.parametrize("record", [
    VALID, VALID | {"ranking": None}, {k: v for k, v in VALID.items() if k != "ranking"},
    VALID | {"pool": {"doc_ids": ["d0", "d1", "d2"]}, "rounds": [dict(r, y=0.5) for r in VALID["rounds"]]},
    VALID | {"pool": {"doc_ids": ["d0", "d1", "d2"], "y": [1.0, None, 0.0], "m": None}},
    VALID | {"pool": {"doc_ids": ["d0", "d1", "d2"], "y": None, "m": [0, 1, 2]}, "rounds": [
        {"probs": [1, 0, 0], "chosen": "d0", "stop_prob": 0, "y": 1},
        {"probs": [0, 0, 1], "chosen": "d2", "stop_prob": 0, "y": None}]},
], ids=["valid", "ranking null", "no ranking", "no pool scores", "null pool scores", "ints, nulls"])
def test_the_fast_parse_reads_every_valid_form_as_orjson_does(walk: str, record: dict[str, Any]) -> None:
    raw = orjson.dumps(record)
    fast, slow, valid = _verdicts(raw)
    if valid and (walk == "python" or b"null" not in raw):  # the compiled walk leaves nulls to Python's
        assert fast is not None and fast == slow
        assert _agree(json.dumps(record, indent=None).encode())
    _agree(json.dumps(record, indent=None).encode())


def test_byte_mutations_of_valid_lines_the_two_paths_agree(walk: str) -> None:
    """Hypothesis is imported here, not at collection: every xdist worker collects this module, and the
    import (~0.9 CPU-s) is needed only by the one that runs this test."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=300, deadline=None)
    @given(st.integers(0, 10**6), st.lists(st.tuples(st.floats(0, 1), st.sampled_from('0-1."e,:]}[{ab\\ nt')),
                                          min_size=1, max_size=3))
    def mutated_lines_agree(seed: int, edits: list[tuple[float, str]]) -> None:
        text = list(json.dumps(varied_trajectory(random.Random(seed), seed)))
        for where, char in edits:
            text[int(where * (len(text) - 1))] = char
        _agree("".join(text).encode())

    mutated_lines_agree()


@pytest.mark.skipif(line_chunk.compiled_walk is None, reason="the optional extension is not built")
@pytest.mark.parametrize("line", [
    COMPACT.replace('"d0"', '"d\\u0030"'), "\ufeff" + COMPACT, COMPACT.replace("0.1,", "12345678901234567890,", 1),
    COMPACT.replace('"budget":2', '"budget":2,"budget":2'), COMPACT.replace('"m":', '"n":'),
    orjson.dumps(VALID | {"ranking": None}).decode(), _mutated(VALID, _set("rounds.1.y", None)).decode(),
    _mutated(VALID, _set("pool.y.1", None)).decode(), _mutated(VALID, _set("rounds.0.probs.1", [0.25])).decode(),
    COMPACT.replace('"budget":2', '"budget":18446744073709551615'), COMPACT.replace('"t1"', '"t\\"1"'),
], ids=["escaped id", "BOM", "big integer", "repeated key", "unknown key", "null ranking", "null round y",
        "null pool y", "nested array", "unsigned budget", "escaped quote"])
def test_the_compiled_walk_declines_every_odd_line(line: str) -> None:
    """Declined, each goes on to Python's walk or the exact path (which the other tests check)."""
    chunk = LineChunk()
    assert chunk.take_lines(line.encode(), 0, 1) == (0, 0) and not chunk.ids and chunk.check()[0].size == 0


def test_the_compiled_walk_and_the_python_paths_gather_a_mixed_chunk_alike(walk: str) -> None:
    """Lines the compiled walk declines, between lines it takes, keep their places in the chunk."""
    rng = random.Random(5)
    lines = [orjson.dumps(varied_trajectory(rng, i)) for i in range(30)]
    lines[3:3] = [b"", orjson.dumps(VALID | {"ranking": None}).replace(b'"t1"', b'"\\u0074x"'),
                  _mutated(VALID, _set("pool.y.1", None)), orjson.dumps(VALID).replace(b'"t1"', b'"[t1]"')]
    text = b"\n".join(lines) + b"\n"
    chunk, count, error = fastload._gather(text, 1)
    python, python_count, python_error = _python_gather(text)
    assert error is None and python_error is None and count == python_count == 34
    assert chunk.lines == python.lines and len(chunk.ids) == 33 and _gathered(chunk) == _gathered(python)


def _python_gather(text: bytes) -> tuple[LineChunk, int, TrajectoryError | None]:
    """:func:`fastload._gather` with Python's walk alone, as without the extension."""
    walk, line_chunk.compiled_walk = line_chunk.compiled_walk, None
    try:
        return fastload._gather(text, 1)
    finally:
        line_chunk.compiled_walk = walk


BAD_LINES = [  # (line text, field named in the error): one of each kind, as a writer might get it wrong
    (_mutated(VALID, _set("rounds.0.probs.1", "0.25")).decode(), "rounds[0].probs[1]"),
    (_mutated(VALID, _set("rounds.0.probs.1", 1.5)).decode(), "rounds[0].probs"),
    (_mutated(VALID, _set("rounds.0.probs.1", -0.25)).decode(), "rounds[0].probs[1]"),
    (_mutated(VALID, _set("pool.m", [0.1])).decode(), "pool.m"),
    (_mutated(VALID, _drop("rounds.1.stop_prob")).decode(), "rounds[1].stop_prob"),
    (_mutated(VALID, _set("rounds.1.note", 1)).decode(), "rounds[1]"),
    (orjson.dumps(VALID).decode()[:-2], "<json>"),
    (_mutated(VALID, _set("rounds.0.probs.1", [0.25])).decode(), "rounds[0].probs[1]"),  # flattens to 3 numbers
    (orjson.dumps(VALID).decode().replace('"budget":2', '"budget":2,"budget":2'), "<json>"),
]


@pytest.mark.parametrize(("line", "field"), BAD_LINES, ids=[f"{i}-{f}" for i, (_, f) in enumerate(BAD_LINES)])
def test_a_bad_line_in_a_worker_range_names_its_line_and_field(
        walk: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str, field: str) -> None:
    monkeypatch.setattr(fastload, "CHUNK_BYTES", 3_000)  # many ranges, checked in two worker processes
    monkeypatch.setattr(fastload, "forkable", lambda: True)
    rng = random.Random(3)
    records: list[Any] = [varied_trajectory(rng, i) for i in range(40)]
    records[23:23] = ["", line.replace('"t1"', '"bad"'), "\r"]  # a blank line before it: numbering stays exact
    path = _write(tmp_path, records)
    assert len(fastload.ranges(path)) > 5
    with pytest.raises(TrajectoryError) as slow:
        load_trajectories(path)
    for workers in (2, 1):
        with pytest.raises(TrajectoryError) as fast:
            load_columns(path, workers=workers)
        assert (fast.value.line, fast.value.field, str(fast.value)) == (25, field, str(slow.value))
        assert str(fast.value).startswith(f"line 25: {field}: ")


def test_the_fast_parse_keeps_a_pool_it_checked_and_no_dom_outlives_a_line() -> None:
    chunk, raw = LineChunk(), orjson.dumps(VALID)
    assert chunk.take_line(raw) and chunk.take_line(raw.replace(b'"t1"', b'"t2"')) and len(chunk.pools) == 1
    assert not chunk.take_line(_mutated(VALID, _set("pool.doc_ids.1", "d0")))  # same length, repeated id
    assert chunk.take_line(raw.replace(b'"t1"', b'"t3"')) and chunk.ids == ["t1", "t2", "t3"]
    np.testing.assert_array_equal(chunk.check()[1]["chosen"], [0, 2] * 3)


def test_a_nested_array_that_flattens_to_the_right_length_is_caught_by_the_lines_bracket_count(walk: str) -> None:
    nested = _mutated(VALID, _set("rounds.0.probs.1", [0.25]))  # [0.5, [0.25], 0.25]: three numbers flattened
    assert not LineChunk().take_line(nested) and not _take(LineChunk(), nested)
    text = orjson.dumps(VALID) + b"\n" + nested + b"\n"
    chunk, count, error = fastload._gather(text, 1)
    assert count == 2 and chunk.lines == [1] and error is not None and error.line == 2
    bracketed = orjson.dumps(VALID).replace(b'"t1"', b'"[t1]"')  # valid: a "[" in a string
    first = orjson.dumps(VALID) + b"\n"
    chunk, count, error = fastload._gather(first + bracketed, 1)  # a last line without a line end
    assert error is None and chunk.ids == ["t1", "[t1]"] and chunk.lines == [1, 2]


def test_each_thread_parses_with_its_own_simdjson_parser():
    """A caller with threads may load two files at once: a shared parser would refuse the second parse
    while the first's document is in use, and every line would silently take the slow path."""
    import threading

    from draligned.cess import line_chunk

    here, there = line_chunk._parser(), []
    thread = threading.Thread(target=lambda: there.append(line_chunk._parser()))
    thread.start()
    thread.join()
    assert line_chunk._parser() is here and there and there[0] is not here
