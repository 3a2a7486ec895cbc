"""Ingest: a raw evaluator response becomes a parsed read or READ_FAILED (paper Tables 14, 15).

The response text must be one JSON object valid under the evaluator's schema, and pass the
cross-checks the schema cannot express: paragraph ids exist in the packet, axis ids are factors of
the packet, and a request read gives exactly one label per request and factor. There is no
repair of any kind: a response that fails stays failed, with its raw text kept. Only a complete
reply is read: one cut at the output cap (finish reason ``length``: the responses API's incomplete
status, Anthropic's ``max_tokens`` stop) fails as ``truncated`` even when its text happens to parse,
and one that ended for any other reason than a normal stop fails naming that reason. A repeated
JSON key is malformed (the last value would silently win).
"""

from __future__ import annotations

from typing import Any, Literal

import jsonschema

from draligned.evaluator.aggregate import AxisItem, RestoredSide
from draligned.evaluator.orientation import restore
from draligned.evaluator.packets import Manifest
from draligned.records import Record
from draligned.strict_json import JSONInputError, loads, schema_validator


class ExtractedItem(AxisItem):
    """One document item as ingested, side restored to P/Q; the other fields are kept, not used."""

    source_ids: list[str]
    """Paragraph ids the item is read from (checked to exist)."""
    entity_key: str
    """Short name of what is recommended."""
    condition_status: Literal["EXPLICIT_NONE", "EXPLICIT_CONDITION", "UNDETERMINED"]
    """Whether the advice is conditional."""
    condition: str | None = None
    """Free text, not used by the aggregation."""
    exception: str | None = None
    """Free text, not used by the aggregation."""
    explicit_priority: str | None = None
    """Free text, not used by the aggregation."""
    actual_time_or_budget: str | None = None
    """Free text, not used by the aggregation."""


class RequestLabel(Record, frozen=True):
    """One request's label on one factor, restored to P/Q."""

    request_id: str
    """Request id in the packet (r001, ...)."""
    axis_id: str
    """Factor id."""
    side: RestoredSide
    """P_SIDE, Q_SIDE, BOTH, NEITHER or UNKNOWN."""


class Ingested(Record):
    """The outcome of ingesting one response: items or labels, or the reason it failed."""

    ok: bool
    """False means READ_FAILED: the read stays missing."""
    error: str | None = None
    """Why the response failed ingest."""
    items: list[ExtractedItem] = []
    """Document reads: the items, sides restored."""
    labels: list[RequestLabel] = []
    """Request reads: one label per request and factor, sides restored."""


def _cross_check(data: dict[str, Any], manifest: Manifest) -> str | None:
    """Cross-references against the packet; None when all hold."""
    axes, units = set(manifest.axes), set(manifest.unit_ids)
    rows = data["items"] if manifest.kind == "document" else data["labels"]
    for n, row in enumerate(rows):
        if row["axis_id"] not in axes:
            return f"entry {n}: unknown axis_id {row['axis_id']!r}"
        ids = row["source_ids"] if manifest.kind == "document" else [row["request_id"]]
        if unknown := [i for i in ids if i not in units]:
            return f"entry {n}: unknown {'paragraph' if manifest.kind == 'document' else 'request'} id {unknown[0]!r}"
    if manifest.kind == "requests":
        given = [(r["request_id"], r["axis_id"]) for r in rows]
        wanted = {(u, a) for u in manifest.unit_ids for a in manifest.axes}
        if len(given) != len(set(given)) or set(given) != wanted:
            return f"expected exactly one label per request and factor ({len(wanted)}), got {len(given)}"
    return None


def schema_checked(text: str | None, schema: dict[str, Any]) -> tuple[Any, str | None]:
    """(data, None) when ``text`` is one JSON value valid under ``schema``, else (None, why); no repair.

    The structured-output path every LLM answer takes (evaluator reads, card construction)."""
    if not text:
        return None, "empty response"
    try:
        data = loads(text)
    except JSONInputError as exc:
        return None, f"malformed: {exc}"
    if (error := jsonschema.exceptions.best_match(schema_validator(schema).iter_errors(data))) is not None:
        path = "/".join(str(p) for p in error.absolute_path)
        return None, f"schema: {path or '(root)'}: {error.message}"
    return data, None


def ingest(text: str | None, manifest: Manifest, schema: dict[str, Any],
           finish_reason: str | None = "stop") -> Ingested:
    """Parse, schema-check and cross-check a complete response; restore sides with the manifest's
    orientation. ``finish_reason`` is the reply's normalised one (None: the provider gave none)."""
    if finish_reason == "length":
        return Ingested(ok=False, error="truncated: the reply hit the output cap (finish reason length)")
    if finish_reason not in ("stop", None):
        return Ingested(ok=False, error=f"incomplete: the reply ended with finish reason {finish_reason}")
    data, error = schema_checked(text, schema)
    if error is not None:
        return Ingested(ok=False, error=error)
    if error := _cross_check(data, manifest):
        return Ingested(ok=False, error=error)
    if manifest.kind == "requests":
        return Ingested(ok=True, labels=[
            RequestLabel(request_id=r["request_id"], axis_id=r["axis_id"],
                         side=restore(r["label"], manifest.alpha_is_p)) for r in data["labels"]])
    return Ingested(ok=True, items=[
        ExtractedItem(**{**i, "side": restore(i["side"], manifest.alpha_is_p)}) for i in data["items"]])
