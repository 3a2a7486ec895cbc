"""Document files in JSON Lines: one pydantic model per line, errors naming file, line and field.

The search corpus and the candidate-pool files share this format and its rules: UTF-8, blank
lines skipped, one strict JSON object per line (no repeated key, no NaN, bounded nesting), every
field validated, and no two documents with the same identity (each error names the line of the
first occurrence).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from draligned.strict_json import JSONInputError, loads

M = TypeVar("M", bound=BaseModel)

#: For one document: (field, comparison key, value shown in the error) per unique identity.
UniqueKeys = Callable[[M], list[tuple[str, str, str]]]


def read_file(path: Path, error: type[Exception], what: str) -> bytes:
    """The file's bytes, or ``error`` naming the file."""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise error(f"{path}: cannot read {what} file: {exc}") from exc


def parse_documents(raw: bytes, path: Path, model: type[M], error: type[Exception], what: str,
                    unique: UniqueKeys) -> list[M]:
    """Validate JSON Lines bytes into ``model`` instances; the first bad line raises ``error``
    with a message ``<file>:<line>: field '<field>': <problem>``."""
    try:
        content = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not valid UTF-8: {exc}") from exc
    docs: list[M] = []
    first_line: dict[tuple[str, str], int] = {}
    # split on "\n" only: str.splitlines would also split on U+2028 inside JSON strings
    for lineno, line in enumerate(content.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = loads(line)  # a repeated key would silently keep its last value; nesting is bounded
        except JSONInputError as exc:
            cause = exc.__context__
            why = f"{cause.msg} (column {cause.colno})" if isinstance(cause, json.JSONDecodeError) else str(exc)
            raise error(f"{where}: invalid JSON: {why}") from exc
        if not isinstance(obj, dict):
            raise error(f"{where}: expected a JSON object, got {type(obj).__name__}")
        try:
            doc = model.model_validate(obj)
        except ValidationError as exc:
            problems = [f"field '{'.'.join(str(p) for p in err['loc']) or '<document>'}': {err['msg']}"
                        for err in exc.errors()]
            raise error(f"{where}: " + "; ".join(problems)) from exc
        for field, key, shown in unique(doc):
            seen = first_line.setdefault((field, key), lineno)
            if seen != lineno:
                raise error(f"{where}: field '{field}': duplicate {field} {shown!r} (first on line {seen})")
        docs.append(doc)
    if not docs:
        raise error(f"{path}: {what} has no documents")
    return docs
