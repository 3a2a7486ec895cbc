"""PDR-Bench loader: tasks, personas and (task, user) queries, English and Chinese (JSON Lines).

Formats (upstream ``OPPO-PersonalAI/PersonalizedDeepResearchBench``, see the data's SOURCE.md):
tasks ``{taskid, domain, language, task}``; personas ``{userid, <attribute group>: {...}, ...}``
where a group is an object or an object written as a string (a Python or JSON dict literal, parsed
with ``ast.literal_eval`` / ``json.loads``, never evaluated); queries ``{id, taskid, userid, task,
query, ...}``. Every error names the file, the line and the field.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from draligned.records import Record

Language = Literal["en", "zh"]


class PdrBenchError(ValueError):
    """A PDR-Bench file that cannot be used; the message names file, line and field."""

    def __init__(self, path: Path | str, line: int | None, field: str, message: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {field}: {message}")


class PdrTask(Record, frozen=True):
    """One PDR-Bench task."""

    taskid: int
    """Task number, shared by both languages."""
    domain: str
    """Domain, e.g. Education."""
    language: Language
    """Language of the task text."""
    task: str = Field(min_length=1)
    """The research request."""


class PdrPersona(Record, frozen=True):
    """One PDR-Bench user: attribute groups, each a nested mapping of attribute names to texts."""

    userid: str = Field(min_length=1)
    """User id, e.g. User1."""
    groups: dict[str, Any]
    """Attribute groups in file order (values are texts or nested mappings)."""

    def attributes(self) -> list[tuple[str, str]]:
        """(path, value) of every leaf text, e.g. ("Basic Attributes > Identity Characteristics > Gender", "Male")."""
        out: list[tuple[str, str]] = []

        def walk(prefix: str, node: Any) -> None:
            if isinstance(node, dict):
                for key, value in node.items():
                    walk(f"{prefix} > {key}" if prefix else str(key), value)
            elif isinstance(node, list):
                walk(prefix, "; ".join(str(v) for v in node))
            elif str(node).strip():
                out.append((prefix, str(node).strip()))

        walk("", self.groups)
        return out


class PdrPair(Record, frozen=True):
    """A (task, user) pair to build cards for: a query line or a line of a pairs file."""

    taskid: int
    """Task number."""
    userid: str
    """User id."""
    line: int
    """Line of the pairs file it came from (errors name it)."""


def _lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) of every non-blank line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PdrBenchError(path, None, "(file)", str(exc)) from None
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PdrBenchError(path, n, "(line)", f"not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise PdrBenchError(path, n, "(line)", "expected a JSON object")
        rows.append((n, obj))
    if not rows:
        raise PdrBenchError(path, None, "(file)", "no records")
    return rows


def _get(path: Path, n: int, obj: dict[str, Any], field: str, kind: type | tuple[type, ...]) -> Any:
    if field not in obj:
        raise PdrBenchError(path, n, field, "missing")
    value = obj[field]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise PdrBenchError(path, n, field, f"expected {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    return value


def _taskid(path: Path, n: int, obj: dict[str, Any]) -> int:
    value = _get(path, n, obj, "taskid", (int, str))
    try:
        return int(value)
    except ValueError:
        raise PdrBenchError(path, n, "taskid", f"not a task number: {value!r}") from None


def parse_group(text: str) -> dict[str, Any]:
    """A stringified attribute group as a dict: JSON, else a Python literal; ValueError otherwise."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
            raise ValueError(f"not a dict literal ({type(exc).__name__}: {exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"expected a dict, got {type(value).__name__}")
    return value


def load_tasks(path: str | Path) -> dict[int, PdrTask]:
    """Tasks by task number; a repeated number is an error."""
    path = Path(path)
    tasks: dict[int, PdrTask] = {}
    for n, obj in _lines(path):
        tid = _taskid(path, n, obj)
        lang = _get(path, n, obj, "language", str)
        if lang not in ("en", "zh"):
            raise PdrBenchError(path, n, "language", f"expected en or zh, got {lang!r}")
        if tid in tasks:
            raise PdrBenchError(path, n, "taskid", f"task {tid} appears twice")
        tasks[tid] = PdrTask(taskid=tid, domain=_get(path, n, obj, "domain", str), language=lang,
                             task=_get(path, n, obj, "task", str))
        if not tasks[tid].task.strip():
            raise PdrBenchError(path, n, "task", "empty")
    return tasks


def load_personas(path: str | Path) -> dict[str, PdrPersona]:
    """Personas by user id; every group is an object or a dict literal."""
    path = Path(path)
    personas: dict[str, PdrPersona] = {}
    for n, obj in _lines(path):
        uid = _get(path, n, obj, "userid", str)
        groups: dict[str, Any] = {}
        for key, value in obj.items():
            if key == "userid":
                continue
            if isinstance(value, str):
                try:
                    value = parse_group(value)
                except ValueError as exc:
                    raise PdrBenchError(path, n, key, f"unparseable attribute group: {exc}") from None
            if not isinstance(value, dict):
                raise PdrBenchError(path, n, key, f"expected an attribute group (object), got {type(value).__name__}")
            groups[key] = value
        if not groups:
            raise PdrBenchError(path, n, "(line)", f"user {uid} has no attribute groups")
        if uid in personas:
            raise PdrBenchError(path, n, "userid", f"user {uid} appears twice")
        personas[uid] = PdrPersona(userid=uid, groups=groups)
    return personas


def load_pairs(path: str | Path) -> list[PdrPair]:
    """(task, user) pairs from a queries file or any JSONL with ``taskid`` and ``userid``; duplicates once."""
    path = Path(path)
    pairs: dict[tuple[int, str], PdrPair] = {}
    for n, obj in _lines(path):
        pair = PdrPair(taskid=_taskid(path, n, obj), userid=_get(path, n, obj, "userid", str), line=n)
        pairs.setdefault((pair.taskid, pair.userid), pair)
    return list(pairs.values())


def check_pairs(pairs: list[PdrPair], tasks: dict[int, PdrTask], personas: dict[str, PdrPersona],
                pairs_path: str | Path) -> None:
    """Every pair names a known task and a user with a persona; PdrBenchError naming the line otherwise."""
    for p in pairs:
        if p.taskid not in tasks:
            raise PdrBenchError(pairs_path, p.line, "taskid", f"task {p.taskid} is not in the tasks file")
        if p.userid not in personas:
            raise PdrBenchError(pairs_path, p.line, "userid",
                                f"task {p.taskid} names user {p.userid}, who has no persona in the personas file")


def default_pairs(tasks: dict[int, PdrTask], personas: dict[str, PdrPersona]) -> list[PdrPair]:
    """Without a pairs file: task k (in task order) with the k-th persona (in file order), cycling."""
    users = list(personas)
    return [PdrPair(taskid=tid, userid=users[k % len(users)], line=0) for k, tid in enumerate(sorted(tasks))]
