"""Trajectory JSON Lines format: schema, loader, and errors that name line and field."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from draligned.cess.trajectory import TrajectoryError, load_trajectories, parse_trajectory, trajectory_schema

VALID: dict[str, Any] = {
    "trajectory_id": "t1",
    "task_id": "q1",
    "ranking": "pro",
    "budget": 2,
    "pool": {"doc_ids": ["d0", "d1", "d2"], "y": [1.0, -1.0, 0.0], "m": [0.1, 0.2, 0.3]},
    "rounds": [
        {"probs": [0.5, 0.25, 0.25], "chosen": "d0", "stop_prob": 0.0},
        {"probs": [0.2, 0.3, 0.5], "chosen": "d2", "stop_prob": 0.1, "y": 0.0},
    ],
}


def _write(tmp_path: Path, records: list[Any]) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


def test_schema_is_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(trajectory_schema())


def test_valid_file_loads(tmp_path: Path) -> None:
    other = copy.deepcopy(VALID) | {"trajectory_id": "t2", "ranking": None}
    other["pool"] = {"doc_ids": ["d0", "d1", "d2"]}
    other["rounds"] = [{"probs": [1 / 3] * 3, "chosen": "d1", "stop_prob": 0.0, "y": -0.5}]
    trajs = load_trajectories(_write(tmp_path, [VALID, "", other]))
    assert [t.trajectory_id for t in trajs] == ["t1", "t2"]
    assert trajs[0].chosen_scores() == [1.0, 0.0]
    assert trajs[1].pool.m is None and trajs[1].chosen_scores() == [-0.5]


def _set(path: str, value: Any) -> Callable[[dict], None]:
    def mutate(record: dict) -> None:
        *parents, last = path.split(".")
        node: Any = record
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


def _drop(path: str) -> Callable[[dict], None]:
    def mutate(record: dict) -> None:
        *parents, last = path.split(".")
        node: Any = record
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        del node[last]

    return mutate


CASES = [
    ("probabilities do not sum to 1", _set("rounds.1.probs", [0.2, 0.3, 0.4]), "rounds[1].probs", "sums to"),
    (
        "chosen document has probability 0",
        _set("rounds.1.probs", [0.5, 0.5, 0.0]),
        "rounds[1].chosen",
        "probability 0",
    ),
    ("negative probability", _set("rounds.0.probs", [1.25, -0.25, 0.0]), "rounds[0].probs[1]", "minimum"),
    ("negative stop probability", _set("rounds.1.stop_prob", -0.1), "rounds[1].stop_prob", "minimum"),
    ("stop probability of 1", _set("rounds.1.stop_prob", 1.0), "rounds[1].stop_prob", "maximum"),
    ("c_1 is not 0 (Eq. 5)", _set("rounds.0.stop_prob", 0.5), "rounds[0].stop_prob", "c_1 = 0"),
    ("unknown document id", _set("rounds.0.chosen", "d9"), "rounds[0].chosen", "unknown document id"),
    ("more rounds than the budget", _set("budget", 1), "rounds", "exceed the budget"),
    ("non-positive budget", _set("budget", 0), "budget", "minimum"),
    ("probs length differs from N", _set("rounds.0.probs", [0.5, 0.5]), "rounds[0].probs", "3 documents"),
    ("pool.y length differs from N", _set("pool.y", [1.0, 0.0]), "pool.y", "3 documents"),
    ("pool.m length differs from N", _set("pool.m", [0.0]), "pool.m", "3 documents"),
    ("Y of a chosen document unknown", _set("pool.y", None), "rounds[0].y", "neither"),
    ("round y contradicts pool.y", _set("rounds.1.y", 0.5), "rounds[1].y", "disagrees"),
    ("missing required field", _drop("rounds.0.stop_prob"), "rounds[0].stop_prob", "required"),
    ("unexpected field", _set("rounds.0.extra", 1), "rounds[0]", "extra"),
    ("unknown ranking", _set("ranking", "sideways"), "ranking", "sideways"),
    ("duplicate doc ids", _set("pool.doc_ids", ["d0", "d0", "d2"]), "pool.doc_ids", "non-unique"),
    ("probability is a string", _set("rounds.0.probs.0", "0.5"), "rounds[0].probs[0]", "number"),
    ("pool score above 1", _set("pool.y", [1.5, 0.0, -1.0]), "pool.y[0]", "maximum"),
    ("round score below -1", _set("rounds.0.y", -2.0), "rounds[0].y", "minimum"),
]


@pytest.mark.parametrize(("name", "mutate", "field", "message"), CASES, ids=[c[0] for c in CASES])
def test_invalid_input_names_line_and_field(
    tmp_path: Path, name: str, mutate: Callable[[dict], None], field: str, message: str
) -> None:
    bad = copy.deepcopy(VALID) | {"trajectory_id": "bad"}
    mutate(bad)
    with pytest.raises(TrajectoryError) as info:
        load_trajectories(_write(tmp_path, [VALID, bad]))
    assert info.value.line == 2
    assert info.value.field == field
    assert str(info.value).startswith(f"line 2: {field}: ")
    assert message in str(info.value)


@pytest.mark.parametrize("text", ["{not json", '{"budget": NaN}'])
def test_unparsable_lines(tmp_path: Path, text: str) -> None:
    with pytest.raises(TrajectoryError, match=r"^line 3: <json>: "):
        load_trajectories(_write(tmp_path, [VALID, copy.deepcopy(VALID) | {"trajectory_id": "x"}, text]))


def test_a_line_that_is_not_utf8_is_named_not_a_traceback(tmp_path: Path) -> None:
    path = _write(tmp_path, [VALID])
    path.write_bytes(path.read_bytes() + b'{"trajectory_id": "\xff"}\n')
    with pytest.raises(TrajectoryError, match=r"^line 2: <json>: not UTF-8"):
        load_trajectories(path)


def test_duplicate_trajectory_ids(tmp_path: Path) -> None:
    with pytest.raises(TrajectoryError, match=r"^line 2: trajectory_id: duplicate"):
        load_trajectories(_write(tmp_path, [VALID, VALID]))


def test_probability_tolerance() -> None:
    ok = copy.deepcopy(VALID)
    ok["rounds"][0]["probs"] = [0.5 + 5e-7, 0.25, 0.25]
    parse_trajectory(json.dumps(ok))
    ok["rounds"][0]["probs"] = [0.5 + 5e-6, 0.25, 0.25]
    with pytest.raises(TrajectoryError):
        parse_trajectory(json.dumps(ok))


@pytest.mark.parametrize(("path", "value"), [
    ("pool.doc_ids.1", ""), ("pool.doc_ids.2", 3), ("pool.y.0", "1"), ("pool.y.2", True),
    ("pool.m.1", None), ("pool.m.0", [0.1]), ("rounds.1.probs.2", -1e-9), ("rounds.0.probs.1", None),
])
def test_item_rules_checked_outside_jsonschema_match_the_full_schema(path: str, value: object) -> None:
    """Per-document arrays skip jsonschema's per-item walk (speed) but not its verdict or field."""
    bad = copy.deepcopy(VALID)
    bad["pool"]["m"] = [0.0, 0.1, 0.2]
    _set(path, value)(bad)
    full = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(trajectory_schema()).iter_errors(bad))
    assert full is not None
    with pytest.raises(TrajectoryError) as info:
        parse_trajectory(json.dumps(bad), 7)
    assert info.value.field.replace("[", ".").replace("]", "") == ".".join(map(str, full.absolute_path))
    assert str(info.value) == f"line 7: {info.value.field}: {full.message}"
