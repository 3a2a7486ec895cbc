"""The model interface every protocol implements, the study's model declaration, and the registry.

A provider turns (messages, tools, request fields, seed) into a ``ModelReply``. Nothing
else about a provider is visible to executors, so the simulator and real models run
through exactly the same executor, archive and evaluator code.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from draligned.hashing import sha256_json
from draligned.records import Message, ModelReply, ToolSpec

#: protocol name -> "module:Class"; imported only when a study uses the protocol.
PROTOCOLS: dict[str, str] = {
    "sim": "draligned.models.sim:SimAgent",
    "sim-evaluator": "draligned.evaluator.sim:SimEvaluator",
}

#: Request fields sent unless a model declaration overrides or omits them (paper Table 12).
DEFAULT_REQUEST_FIELDS: dict[str, Any] = {
    "temperature": 1.0,
    "max_output_tokens": 16000,
    "parallel_tool_calls": False,
}


class ModelError(Exception):
    """A model call that failed in a way the run must record (never retried silently)."""


class ModelDeclaration(BaseModel):
    """A ``[[models]]`` table of a study (or an evaluator file)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str
    """Name used in the study and in reports (e.g. deepseek-off)."""
    protocol: str
    """sim, openai-chat, openai-responses or anthropic."""
    model: str
    """Model id requested from the provider."""
    base_url: str | None = None
    """Endpoint base URL for gateways and local servers; None for the provider default."""
    api_key_env: str | None = None
    """Name of the environment variable holding the API key (never the key itself)."""
    request: dict[str, Any] = Field(default_factory=dict)
    """Request fields sent with every call, overriding the defaults (temperature, ...)."""
    omit: list[str] = Field(default_factory=list)
    """Default request fields not to send for this model (e.g. temperature for Grok)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Protocol-specific options that are not request fields (e.g. the simulator's sensitivity)."""

    def request_fields(self) -> dict[str, Any]:
        """Defaults, minus omitted fields, updated with the declared request fields."""
        fields = {k: v for k, v in DEFAULT_REQUEST_FIELDS.items() if k not in self.omit}
        fields.update(self.request)
        return fields

    @property
    def sha256(self) -> str:
        """Hash of everything that determines what is sent (no secrets are part of it)."""
        return sha256_json(self.model_dump(mode="json"))


class ModelAPI(ABC):
    """A provider behind one async call."""

    def __init__(self, declaration: ModelDeclaration) -> None:
        self.declaration = declaration

    @abstractmethod
    async def generate(self, messages: list[Message], tools: list[ToolSpec], seed: int) -> ModelReply:
        """Send one request (the declaration's request fields plus ``messages`` and ``tools``)."""


def get_model(declaration: ModelDeclaration) -> ModelAPI:
    """Instantiate the provider for a declaration, importing its module only now."""
    target = PROTOCOLS.get(declaration.protocol)
    if target is None:
        raise ModelError(
            f"model {declaration.name!r}: unknown protocol {declaration.protocol!r} "
            f"(known: {', '.join(sorted(PROTOCOLS))})"
        )
    module_name, cls_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ModelError(
            f"model {declaration.name!r}: protocol {declaration.protocol!r} needs a package that "
            f"is not installed ({exc.name})"
        ) from exc
    return getattr(module, cls_name)(declaration)
