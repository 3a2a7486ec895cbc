"""The exact-input replay cache: a reply is reused only for a byte-identical input.

Key: sha256 of the canonical JSON of protocol, base_url, requested model id, options,
request fields, declared headers (when any), messages (with any reasoning state) and the
replicate seed (so repeated samples never collapse); retry, timeout and connection settings
are not part of it. Entries are write-once files ``<dir>/<key[:2]>/<key>.json`` holding the
reply as received (request body and raw response text included). Modes: ``off``; ``read-write`` (reuse hits, store
misses); ``read-only`` (a miss is an error: a study replays bit for bit with no request).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from draligned.archive.store import ArchiveError, write_once
from draligned.hashing import canonical_json, sha256_json
from draligned.models.base import ModelAPI, ModelDeclaration, ModelError
from draligned.records import Message, ModelReply, ToolSpec

CacheMode = Literal["off", "read-write", "read-only"]
CACHE_MODES: tuple[str, ...] = ("off", "read-write", "read-only")


def cache_key(decl: ModelDeclaration, messages: list[Message], tools: list[ToolSpec], seed: int) -> str:
    """sha256 of everything that determines the reply (see module docstring)."""
    return sha256_json({
        "protocol": decl.protocol, "base_url": decl.base_url, "model": decl.model,
        "options": decl.options, "request": decl.request_fields(),
        "messages": [m.model_dump(mode="json") for m in messages],
        "tools": [t.model_dump(mode="json") for t in tools], "seed": seed,
        **({"headers": decl.headers} if decl.headers else {}),
    })


class ReplayCache:
    """Cache entries in a directory, used in one mode."""

    def __init__(self, root: str | Path, mode: CacheMode) -> None:
        self.root = Path(root)
        self.mode = mode

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> ModelReply | None:
        path = self.path(key)
        if not path.exists():
            return None
        return ModelReply.model_validate(json.loads(path.read_bytes())["reply"])

    def put(self, key: str, reply: ModelReply) -> None:
        """Store a reply as received (no attempts, not marked as a hit); the first writer wins."""
        entry = {"key": key, "reply": reply.model_dump(mode="json", exclude={"attempts", "cache_hit"})}
        try:
            write_once(self.path(key), canonical_json(entry))
        except ArchiveError:
            pass  # an identical request raced this one; its reply is kept, this run used its own


class CachedModel(ModelAPI):
    """Any model behind the replay cache; hits are marked ``cache_hit`` and make no request."""

    def __init__(self, inner: ModelAPI, cache: ReplayCache) -> None:
        super().__init__(inner.declaration)
        self.inner = inner
        self.cache = cache

    def check_ready(self) -> None:
        if self.cache.mode != "read-only":
            self.inner.check_ready()

    async def generate(self, messages: list[Message], tools: list[ToolSpec], seed: int) -> ModelReply:
        key = cache_key(self.declaration, messages, tools, seed)
        hit = self.cache.get(key)
        if hit is not None:
            return hit.model_copy(update={"cache_hit": True, "latency_s": 0.0})
        if self.cache.mode == "read-only":
            raise ModelError(f"model {self.declaration.name!r}: read-only replay cache has no entry "
                             f"{key[:16]}… in {self.cache.root} (the input differs from every archived call)")
        reply = await self.inner.generate(messages, tools, seed)
        self.cache.put(key, reply)
        return reply
