"""The model interface every protocol implements, the study's model declaration, and the registry.

A provider turns (messages, tools, request fields, seed) into a ``ModelReply``. Nothing
else about a provider is visible to executors, so the simulator and real models run
through exactly the same executor, archive and evaluator code.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

from pydantic import Field, field_validator

from draligned.hashing import sha256_json
from draligned.models.checks import ModelChecks
from draligned.models.gateway import is_secret
from draligned.models.pricing import Price
from draligned.models.retry import RetryPolicy
from draligned.records import Message, ModelAttempt, ModelReply, Record, ToolSpec

#: protocol name -> "module:Class" of the agent models; imported only when a study uses the protocol.
#: Other registries (the evaluator's simulator) extend it where they live and pass it to ``get_model``.
PROTOCOLS: dict[str, str] = {
    "sim": "draligned.models.sim:SimAgent",
    "openai-chat": "draligned.models.openai_chat:OpenAIChat",
    "openai-responses": "draligned.models.openai_responses:OpenAIResponses",
    "anthropic": "draligned.models.anthropic_messages:AnthropicMessages",
}

#: Request fields sent unless a model declaration overrides or omits them (paper Table 12).
DEFAULT_REQUEST_FIELDS: dict[str, Any] = {
    "temperature": 1.0,
    "max_output_tokens": 16000,
    "parallel_tool_calls": False,
}


RETRY_LISTENER: ContextVar[Callable[[int], None] | None] = ContextVar("retry_listener", default=None)
"""Told +1 when a model call made in the current context starts retrying and -1 when that call ends:
how the runner counts retrying runs live (each run sets its own listener)."""


class ModelError(Exception):
    """A model call that failed in a way the run must record (never retried silently)."""

    def __init__(self, message: str, attempts: list[ModelAttempt] | None = None) -> None:
        super().__init__(message)
        self.attempts: list[ModelAttempt] = attempts or []
        """The failed attempts of the call, recorded in the run before the failure."""


class ModelDeclaration(Record, strict=True):
    """A ``[[models]]`` table of a study (or an evaluator file)."""

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
    checks: ModelChecks = Field(default_factory=ModelChecks)
    """Checks evaluated on every reply (e.g. require_zero_reasoning_tokens); a violation fails the run."""
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    """Retries, timeout and connection limit (transport only: not part of ``sha256``)."""
    price: Price | None = None
    """US dollars per million tokens, for cost reporting and cost caps (not part of ``sha256``)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP headers sent verbatim with every request and recorded with each call (e.g.
    ``x-litellm-num-retries = "0"`` to keep retries in draligned, where they are recorded)."""

    @field_validator("headers")
    @classmethod
    def _no_credentials(cls, headers: dict[str, str]) -> dict[str, str]:
        """Declared headers are archived with every call, so a credential must come from ``api_key_env``."""
        secret = sorted(h for h, v in headers.items() if is_secret(h.lower(), v))
        if secret:
            raise ValueError(f"{', '.join(secret)} would be archived with every call; put the key in the "
                             f"environment variable named by api_key_env instead")
        return headers

    def request_fields(self) -> dict[str, Any]:
        """Defaults, minus omitted fields, updated with the declared request fields."""
        fields = {k: v for k, v in DEFAULT_REQUEST_FIELDS.items() if k not in self.omit}
        fields.update(self.request)
        return fields

    @property
    def sha256(self) -> str:
        """Hash of everything that determines what is sent and how replies are judged (no secrets;
        transport and price settings excluded; default checks and no headers left out so older hashes hold)."""
        skip = {"retry", "price"} | ({"checks"} if self.checks == ModelChecks() else set()) | (
            set() if self.headers else {"headers"})
        return sha256_json(self.model_dump(mode="json", exclude=skip))


class ModelAPI(ABC):
    """A provider behind one async call."""

    def __init__(self, declaration: ModelDeclaration) -> None:
        self.declaration = declaration

    @abstractmethod
    async def generate(self, messages: list[Message], tools: list[ToolSpec], seed: int) -> ModelReply:
        """Send one request (the declaration's request fields plus ``messages`` and ``tools``)."""

    def check_ready(self) -> None:  # noqa: B027 - an optional hook: a model that needs no check keeps this one
        """Raise ModelError if the model cannot be called (e.g. its key is missing); before a study."""


def get_model(declaration: ModelDeclaration, protocols: Mapping[str, str] = PROTOCOLS) -> ModelAPI:
    """Instantiate the provider for a declaration from ``protocols``, importing its module only now."""
    target = protocols.get(declaration.protocol)
    if target is None:
        raise ModelError(
            f"model {declaration.name!r}: unknown protocol {declaration.protocol!r} "
            f"(known: {', '.join(sorted(protocols))})"
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
