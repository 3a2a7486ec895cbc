"""Studies and web backends over the loopback servers of ``tests/web_servers.py``."""

from __future__ import annotations

from pathlib import Path

from draligned.archive import Archive
from draligned.records import RunRecord, ToolCallEvent
from draligned.tools.search_spec import SearchSpec
from draligned.tools.web import open_web
from draligned.tools.web.backend import StudyWeb
from tests.study_helpers import write_study

KEY_ENV = "DRALIGNED_TEST_WEB_KEY"


def search_table(kind: str, base_url: str, reader: str = "http", extra: str = "") -> str:
    """A ``[search]`` table for a web backend at ``base_url`` (loopback pages allowed, short timeouts)."""
    key = "" if kind == "searxng" else f'api_key_env = "{KEY_ENV}"\n'
    return (f'[search]\nbackend = "{kind}"\nbase_url = "{base_url}"\n{key}reader = "{reader}"\n'
            f'allow_private_addresses = ["127.0.0.1"]\nretry = {{ timeout_s = 1.0, max_attempts = 3 }}\n{extra}')


def web_study(tmp: Path, kind: str, base_url: str, reader: str = "http", extra: str = "",
              cards: tuple[str, ...] = ("travel_budget_en.json",), name: str = "web") -> Path:
    """A sim-agent study over one web backend."""
    tmp.mkdir(parents=True, exist_ok=True)
    return write_study(tmp, list(cards), name=name, extra=search_table(kind, base_url, reader, extra))


def study_web(kind: str, base_url: str, store: Path, reader: str = "http", **fields: object) -> StudyWeb:
    """A StudyWeb built from a spec as a study would declare it."""
    data: dict[str, object] = {"backend": kind, "base_url": base_url, "reader": reader,
                               "allow_private_addresses": ["127.0.0.1"],
                               "retry": {"timeout_s": 1.0, "max_attempts": 3}, **fields}
    if kind != "searxng":
        data["api_key_env"] = KEY_ENV
    return open_web(SearchSpec.model_validate(data), store)


def tool_events(record: RunRecord, tool: str | None = None) -> list[ToolCallEvent]:
    """The record's search/read tool events (or one tool's)."""
    return [e for e in record.events if isinstance(e, ToolCallEvent) and e.tool in ((tool,) if tool else
                                                                                     ("search", "read"))]


def returns(archive: Archive, record: RunRecord, tool: str) -> list[str]:
    """The texts one tool returned in a run, in order."""
    return [archive.get_text(e.return_blob) for e in tool_events(record, tool)]
