"""JSON (and TOML) input read without surprises: no repeated keys, no non-finite numbers, bounded nesting,
no string that UTF-8 cannot hold.

Every input file the toolkit reads (cards, trajectories, corpora, pool files, evaluator schemas,
evaluator replies) goes through ``loads``: a repeated key would silently keep only its last
value, and a document nested thousands of levels deep would end in a RecursionError deep inside
the parser or the validators instead of an error naming the file; an unpaired surrogate escape
(``"\\ud800"``, which Python's parser keeps) would pass every check and fail only when the text is written
out. ``check_depth`` applies the same nesting bound to already parsed data (study and evaluator TOML).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from functools import lru_cache
from typing import Any

import jsonschema

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects accepted; real inputs stay below ten levels."""
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""A UTF-16 surrogate's escape in JSON text: only then can a parsed string hold an unpaired one."""


class JSONInputError(ValueError):
    """Input that is not strict JSON; the message says why (callers add the file, line and field)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    dups = sorted(k for k, n in Counter(k for k, _ in pairs).items() if n > 1)
    if dups:
        raise JSONInputError(f"duplicate keys {dups}")
    return dict(pairs)


def _reject_constant(name: str) -> float:
    raise JSONInputError(f"non-finite number {name} is not allowed")


def check_depth(data: Any, limit: int = MAX_DEPTH) -> None:
    """JSONInputError when lists and dicts in ``data`` nest deeper than ``limit`` (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > limit:
                raise JSONInputError(f"nested deeper than {limit} levels")
            stack += [(v, depth + 1) for v in (value.values() if isinstance(value, dict) else value)]


def loads(text: str | bytes, limit: int = MAX_DEPTH) -> Any:
    """Parse JSON; JSONInputError for invalid JSON, repeated keys, NaN/Infinity or nesting beyond ``limit``."""
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_reject_constant)
    except JSONInputError:
        raise
    except RecursionError:
        raise JSONInputError(f"nested deeper than {limit} levels") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise JSONInputError(f"not valid JSON: {exc}") from None
    check_depth(data, limit)
    if _SURROGATE_ESCAPE.search(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text):
        _check_encodable(data)
    return data


def _check_encodable(data: Any) -> None:
    """JSONInputError when a key or string in ``data`` holds an unpaired surrogate (no UTF-8 text holds one)."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack += [*value, *value.values()]
        elif isinstance(value, list):
            stack += value
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise JSONInputError(f"the string {value[:40]!r} holds an unpaired UTF-16 surrogate "
                                     f"{value[exc.start]!r}, which no UTF-8 text can hold") from None


def schema_validator(schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    """A validator for ``schema`` (its draft's class), the schema itself checked once per distinct content.

    Checking a schema costs far more than validating a small value against it, and the same few
    schemas (tool parameters, evaluator replies) are used for every run and every read; SchemaError
    as from ``check_schema`` when the schema is not valid."""
    return _validator(json.dumps(schema, sort_keys=True))


@lru_cache(maxsize=256)
def _validator(canonical: str) -> jsonschema.protocols.Validator:
    schema = json.loads(canonical)  # a private copy: a caller changing its dict cannot change the cached one
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)
