"""The logged-trajectory JSON Lines format: models, schema validation and semantic checks.

One line is one adaptive search over a fixed candidate pool (CESS paper, Eq. 5):
each round logs the full selection-probability vector, the chosen document and
the stop probability c_t before the round. Invalid input raises
:class:`TrajectoryError` naming the line number and the offending field.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any, Literal

import jsonschema

from draligned.cess.trajectory_rules import PROB_SUM_MARGIN as PROB_SUM_MARGIN
from draligned.cess.trajectory_rules import PROB_SUM_TOLERANCE, Y_TOLERANCE, TrajectoryError
from draligned.records import Record
from draligned.strict_json import JSONInputError, loads

SCHEMA_PATH = Path(__file__).with_name("trajectory.schema.json")
Ranking = Literal["original", "pro", "anti"]


class TrajectoryPool(Record):
    """The candidate pool of one trajectory."""

    doc_ids: list[str]
    """Every candidate document, in the order of each round's probability vector."""
    y: list[float | None] | None = None
    """Evidence score per document in [-1, 1] (None where unknown); used only for θ* and errors."""
    m: list[float] | None = None
    """Outcome-model prediction per document, fixed before the search; None means m ≡ 0 (IPW)."""


class TrajectoryRound(Record):
    """One logged selection round."""

    probs: list[float]
    """Selection probability of every pool document at this round, in ``doc_ids`` order."""
    chosen: str
    """Id of the document selected at this round."""
    stop_prob: float
    """Logged probability c_t of stopping before this round (c_1 = 0; 0 under fixed stopping)."""
    y: float | None = None
    """Evidence score of the chosen document; when None it is read from ``pool.y``."""


class Trajectory(Record):
    """One logged search over a candidate pool (one JSON Lines record)."""

    trajectory_id: str
    """Unique id of this trajectory."""
    task_id: str
    """Research question (task) whose pool was searched."""
    ranking: Ranking | None = None
    """Ranking condition: original, supporting-first (pro) or opposing-first (anti)."""
    budget: int
    """Maximum number of rounds K; Eq. 6 always divides by K, even when fewer rounds ran."""
    pool: TrajectoryPool
    """The candidate pool with optional scores and predictions."""
    rounds: list[TrajectoryRound]
    """The T ≤ K observed rounds in order."""

    def chosen_scores(self) -> list[float]:
        """Y of the chosen document per round (round value first, else ``pool.y``)."""
        index = {doc: i for i, doc in enumerate(self.pool.doc_ids)}
        pool_y = self.pool.y or [None] * len(index)
        scores = [r.y if r.y is not None else pool_y[index[r.chosen]] for r in self.rounds]
        known = [float(s) for s in scores if s is not None]
        if len(known) < len(scores):
            raise ValueError(f"trajectory {self.trajectory_id}: Y unknown for a chosen document")
        return known


@cache
def trajectory_schema() -> dict[str, Any]:
    """The shipped JSON Schema of one trajectory record."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def _field_path(parts: Iterable[str | int]) -> str:
    """``['rounds', 1, 'probs']`` → ``rounds[1].probs``."""
    path = ""
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "<record>"


#: Per-document arrays whose item rules :func:`_item_error` checks instead of jsonschema.
_FAST_ARRAYS = (("pool", "doc_ids"), ("pool", "y"), ("pool", "m"), ("rounds", "probs"))


def _schema_at(schema: dict[str, Any], where: str, name: str) -> dict[str, Any]:
    """The schema of ``pool.<name>`` or of ``rounds[].<name>``."""
    parent = schema["properties"][where]
    return (parent["items"] if where == "rounds" else parent)["properties"][name]


@cache
def _validator() -> tuple[jsonschema.Draft202012Validator, dict[tuple[str, str], dict[str, Any]]]:
    """The schema without the item rules of the per-document arrays, and those item rules.

    Walking jsonschema over every number of a record cost about 6 ms per trajectory of 50
    documents and 10 rounds (two minutes for 20,000 trajectories); a plain loop over the
    items gives the same verdict, with jsonschema's messages, in a fraction of that.
    """
    schema = json.loads(json.dumps(trajectory_schema()))
    items = {(where, name): _schema_at(schema, where, name).pop("items") for where, name in _FAST_ARRAYS}
    return jsonschema.Draft202012Validator(schema), items


def _item_problem(value: Any, rule: dict[str, Any]) -> str | None:
    """Why ``value`` breaks an item rule (``type`` string/number/null, ``minLength``, ``minimum``, ``maximum``)."""
    types = rule["type"] if isinstance(rule["type"], list) else [rule["type"]]
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not any({"string": isinstance(value, str), "number": is_number, "null": value is None}[t] for t in types):
        return f"{value!r} is not of type {', '.join(repr(t) for t in types)}"
    if isinstance(value, str) and len(value) < rule.get("minLength", 0):
        return f"{value!r} should be non-empty"
    if is_number and "minimum" in rule and value < rule["minimum"]:
        return f"{value!r} is less than the minimum of {rule['minimum']}"
    if is_number and "maximum" in rule and value > rule["maximum"]:
        return f"{value!r} is greater than the maximum of {rule['maximum']}"
    return None


def _item_error(record: dict[str, Any], line: int,
                rules: dict[tuple[str, str], dict[str, Any]]) -> TrajectoryError | None:
    """The first item of a per-document array (in document order) that breaks its rule."""
    arrays = [(f"pool.{name}", record["pool"].get(name), rules[("pool", name)])
              for where, name in _FAST_ARRAYS if where == "pool"]
    arrays += [(f"rounds[{t}].probs", rnd["probs"], rules[("rounds", "probs")])
               for t, rnd in enumerate(record["rounds"])]
    for field, values, rule in arrays:
        if not values or _all_fine(values, rule):
            continue
        for j, value in enumerate(values):
            if (problem := _item_problem(value, rule)) is not None:
                return TrajectoryError(line, f"{field}[{j}]", problem)
    return None


def _all_fine(values: list[Any], rule: dict[str, Any]) -> bool:
    """Quick verdict for the usual case: every number a plain int/float within any minimum/maximum."""
    if rule["type"] != "number" or not all(type(v) is float or type(v) is int for v in values):
        return False
    return ("minimum" not in rule or min(values) >= rule["minimum"]) and (
        "maximum" not in rule or max(values) <= rule["maximum"])


def schema_error(record: Any, line: int) -> TrajectoryError | None:
    """The most relevant JSON Schema violation of ``record``, if any."""
    validator, item_rules = _validator()
    error = jsonschema.exceptions.best_match(validator.iter_errors(record))
    if error is None:
        return _item_error(record, line, item_rules)
    parts: list[str | int] = list(error.absolute_path)
    missing = re.match(r"'(.+)' is a required property", error.message)
    if error.validator == "required" and missing:
        parts.append(missing.group(1))
    return TrajectoryError(line, _field_path(parts), error.message)


def _check_semantics(traj: Trajectory, line: int) -> None:
    """Rules the schema cannot express: lengths, sums, membership, positivity, T ≤ K, c_1 = 0, Y known."""
    n = len(traj.pool.doc_ids)
    for name in ("y", "m"):
        values = getattr(traj.pool, name)
        if values is not None and len(values) != n:
            raise TrajectoryError(
                line, f"pool.{name}", f"has {len(values)} entries but the pool has {n} documents"
            )
    if len(traj.rounds) > traj.budget:
        raise TrajectoryError(
            line, "rounds", f"T={len(traj.rounds)} rounds exceed the budget K={traj.budget}"
        )
    if traj.rounds and traj.rounds[0].stop_prob != 0.0:
        raise TrajectoryError(
            line,
            "rounds[0].stop_prob",
            f"is {traj.rounds[0].stop_prob!r}, but c_1 = 0 (Eq. 5: round 1 is always reached)",
        )
    index = {doc: i for i, doc in enumerate(traj.pool.doc_ids)}
    pool_y = traj.pool.y or [None] * n
    for t, rnd in enumerate(traj.rounds):
        where = f"rounds[{t}]"
        if len(rnd.probs) != n:
            raise TrajectoryError(
                line, f"{where}.probs", f"has {len(rnd.probs)} entries but the pool has {n} documents"
            )
        total = math.fsum(rnd.probs)
        if abs(total - 1.0) > PROB_SUM_TOLERANCE:
            raise TrajectoryError(
                line, f"{where}.probs", f"sums to {total!r}, not 1 within {PROB_SUM_TOLERANCE}"
            )
        if rnd.chosen not in index:
            raise TrajectoryError(
                line, f"{where}.chosen", f"unknown document id {rnd.chosen!r} (not in pool.doc_ids)"
            )
        j = index[rnd.chosen]
        if rnd.probs[j] <= 0.0:
            raise TrajectoryError(
                line, f"{where}.chosen", f"chosen document {rnd.chosen!r} has probability 0 in probs[{j}]"
            )
        y_pool = pool_y[j]
        if rnd.y is None and y_pool is None:
            raise TrajectoryError(
                line, f"{where}.y", f"Y of chosen document {rnd.chosen!r} is in neither the round nor pool.y"
            )
        if rnd.y is not None and y_pool is not None and abs(rnd.y - y_pool) > Y_TOLERANCE:
            raise TrajectoryError(line, f"{where}.y", f"{rnd.y!r} disagrees with pool.y[{j}] = {y_pool!r}")


def parse_trajectory(text: str, line: int = 1) -> Trajectory:
    """Parse and fully validate one JSON Lines record."""
    try:
        record = loads(text)  # no NaN/Infinity, no repeated key, bounded nesting
    except JSONInputError as exc:
        raise TrajectoryError(line, "<json>", f"not valid JSON: {exc}") from None
    return check_record(record, line)


def check_record(record: Any, line: int) -> Trajectory:
    """Fully validate one parsed record (schema, then the semantic rules) as line ``line``."""
    error = schema_error(record, line)
    if error is not None:
        raise error
    traj = Trajectory.model_validate(record)
    _check_semantics(traj, line)
    return traj


def load_trajectories(path: str | Path) -> list[Trajectory]:
    """Read a JSON Lines file of trajectories (blank lines ignored); the first invalid line raises, and
    so does a file with no trajectory (an estimate of nothing is not a result)."""
    trajectories: list[Trajectory] = []
    seen: set[str] = set()
    with Path(path).open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TrajectoryError(number, "<json>", f"not UTF-8 text: {exc}") from None
            if text.strip():
                traj = parse_trajectory(text, number)
                if traj.trajectory_id in seen:
                    raise TrajectoryError(number, "trajectory_id", f"duplicate id {traj.trajectory_id!r}")
                seen.add(traj.trajectory_id)
                trajectories.append(traj)
    if not trajectories:
        raise TrajectoryError(0, "<file>", "no trajectories (the file is empty or has only blank lines)")
    return trajectories
