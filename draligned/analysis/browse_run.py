"""The body of a run page: the whole transcript in event order, as the archive holds it.

Model calls with usage and latency, tool calls with the arguments as sent and the return the agent
saw, drafts, the final, H-W/H-D snapshot manifests, delegations and pool rounds. Every event has an
anchor (``#e0007``) so pair pages can link to the request or document they show.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable

from draligned.records import (
    DelegateEvent,
    DraftEvent,
    FinalEvent,
    ModelAttemptEvent,
    ModelCallEvent,
    NoticeEvent,
    PoolRoundEvent,
    RunEvent,
    RunRecord,
    SnapshotEvent,
    ToolCallEvent,
)

Texts = Callable[[str], str]
"""A blob's verified text by its sha256 (``Archive.get_text``, or a cache of it)."""

MAX_SHOWN_CHARS = 40_000
"""Longest text shown inline; the rest is named with its blob (``draligned archive text`` prints it)."""


def text_block(texts: Texts, sha: str | None, cls: str = "") -> str:
    """A blob's text in a <pre>, cut at MAX_SHOWN_CHARS with a note naming the blob."""
    if sha is None:
        return '<p class="empty">none</p>'
    text = texts(sha)
    cut = f"\n[… {len(text) - MAX_SHOWN_CHARS} more characters in blob {sha}]" if len(text) > MAX_SHOWN_CHARS else ""
    return f'<pre class="{cls}">{html.escape(text[:MAX_SHOWN_CHARS] + cut)}</pre>'


def _json_block(texts: Texts, sha: str) -> str:
    try:
        return f"<pre>{html.escape(json.dumps(json.loads(texts(sha)), indent=1, ensure_ascii=False))}</pre>"
    except ValueError:
        return text_block(texts, sha)


def _kv(pairs: list[tuple[str, object]]) -> str:
    return " · ".join(f"<b>{html.escape(k)}</b> {html.escape(str(v))}" for k, v in pairs if v not in (None, "", []))


def _event(texts: Texts, e: RunEvent) -> tuple[str, str]:
    if isinstance(e, ModelCallEvent):
        u = e.usage
        head = _kv([("model call", e.role), ("input", u.input_tokens), ("output", u.output_tokens),
                    ("reasoning", u.reasoning_tokens), ("cached", u.cached_tokens), ("latency", f"{e.latency_s:.3f} s"),
                    ("finish", e.finish_reason), ("tool calls", e.n_tool_calls), ("echo", e.model_echo),
                    ("cache hit", e.cache_hit or None), ("anomalies", ", ".join(e.anomalies)),
                    ("violations", ", ".join(e.violations))])
        body = (f"<details><summary>request fields</summary><pre>{html.escape(json.dumps(e.request_fields, indent=1))}"
                f"</pre></details><details><summary>raw response</summary>{text_block(texts, e.response_blob)}"
                f"</details>")
        return head, body
    if isinstance(e, ModelAttemptEvent):
        a = e.attempt
        return _kv([("failed attempt", a.attempt), ("error", a.error), ("status", a.status_code),
                    ("wait", a.wait_s), ("detail", a.detail)]), ""
    if isinstance(e, ToolCallEvent):
        head = _kv([("tool call", e.tool), ("role", e.role), ("request", e.request_text),
                    ("return chars", e.return_chars), ("error", e.error)])
        return head, (f"<div class=\"lbl\">arguments as sent</div>{text_block(texts, e.arguments_blob)}"
                      f"<div class=\"lbl\">return the agent saw</div>{text_block(texts, e.return_blob, 'ret')}")
    if isinstance(e, DraftEvent):
        return _kv([("draft", f"version {e.version}"), ("chars", e.chars), ("saved by", e.tool_event)]), \
            text_block(texts, e.blob, "doc")
    if isinstance(e, FinalEvent):
        return _kv([("final", e.delivered_by), ("chars", e.chars)]), text_block(texts, e.blob, "doc")
    if isinstance(e, SnapshotEvent):
        changed = ", ".join(f"{p} {'removed' if s is None else s[:10]}" for p, s in e.changed.items())
        manifest = f"<details><summary>manifest</summary>{_json_block(texts, e.manifest_blob)}</details>"
        return _kv([("snapshot", e.role), ("after", e.tool_event), ("files", e.files), ("bytes", e.bytes),
                    ("changed", changed)]), manifest
    if isinstance(e, DelegateEvent):
        parts = [f"<div class=\"lbl\">{html.escape(w.worker)} · {html.escape(w.status)} · inputs "
                 f"{html.escape(', '.join(w.input_files))}</div><div class=\"lbl\">assignment</div>"
                 f"{text_block(texts, w.assignment_blob)}<div class=\"lbl\">reply</div>"
                 f"{text_block(texts, w.reply_blob)}"
                 for w in e.workers]
        return _kv([("delegate_batch", e.tool_event), ("workers", len(e.workers))]), "".join(parts)
    if isinstance(e, PoolRoundEvent):
        return _kv([("pool round", e.round), ("query", e.query), ("chosen", e.chosen), ("p", e.p_chosen),
                    ("stop prob", e.stop_prob), ("wish stop", e.wish_stop)]), ""
    if isinstance(e, NoticeEvent):
        return _kv([("notice", e.code), ("detail", e.detail)]), ""
    return html.escape(type(e).__name__), ""


def run_body(texts: Texts, record: RunRecord, protocol_note: str, pairs: list[str]) -> str:
    """The run page's body: header facts, prompts, and every event in order."""
    s, c = record.slot, record.counters
    facts = _kv([("status", record.status), ("reason", record.status_reason), ("study", s.study),
                 ("card", s.card_id), ("arm", s.arm), ("model", f"{s.model} ({record.requested_model}, "
                                                                  f"protocol {record.protocol})"),
                 ("harness", s.harness), ("seed", s.seed), ("attempt", record.attempt),
                 ("model calls", c.model_calls), ("tool calls", c.tool_calls), ("drafts", c.drafts),
                 ("input tokens", c.usage.input_tokens), ("output tokens", c.usage.output_tokens),
                 ("started", record.started_at), ("ended", record.ended_at)])
    pair_links = " · ".join(f'<a href="../pairs/{html.escape(p)}.html">{html.escape(p)}</a>' for p in pairs)
    out = [f"<p>{facts}</p>"]
    if protocol_note:
        out.append(f'<p class="simnote">{html.escape(protocol_note)}</p>')
    if pair_links:
        out.append(f"<p>In pairs: {pair_links}</p>")
    out.append(f"<details><summary>system prompt</summary>{text_block(texts, record.system_prompt_blob)}"
               f"</details><details open><summary>user message</summary>"
               f"{text_block(texts, record.user_message_blob)}</details>")
    for e in record.events:
        head, body = _event(texts, e)
        out.append(f'<div class="ev ev-{e.type}" id="{e.event_id}"><div class="evh"><a href="#{e.event_id}">'
                   f'{e.event_id}</a> {head}</div>{body}</div>')
    return "".join(out)
