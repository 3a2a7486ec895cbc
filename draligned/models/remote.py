"""What the real providers share: key, client, connection limit, retries, timing, errors.

A protocol subclass says only how to build its wire body (one function, ``build_body``, that a
batch line can reuse), how to post it with its SDK (returning the body exactly as sent, the raw reply
text and the response headers) and how to read a reply body. Everything else — the key from the
environment, ``max_retries=0`` clients, the declared headers sent verbatim, the per-model
connection limit shared by all runs (fixed or adaptive), tenacity retries with recorded attempts,
the response headers kept and a gateway's report read from them, failing fast with the model and
the cause named and the key never shown — lives here once.

The archived request body is what draligned sent to its ``base_url``: a gateway behind it may drop
or rewrite fields (LiteLLM's ``drop_params``) before the provider sees them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import ssl
import time
from abc import abstractmethod
from asyncio import AbstractEventLoop
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from draligned.backoff import chain
from draligned.models.base import RETRY_LISTENER, ModelAPI, ModelDeclaration, ModelError
from draligned.models.gateway import clean_headers, gateway_info
from draligned.models.http import aiohttp_transport, close_with_loop, running_loop, sdk_http_client
from draligned.models.limits import ConnectionLimit
from draligned.models.retry import Failure, GaveUp, call_with_retries, status_failure
from draligned.records import Message, ModelAttempt, ModelReply, ToolSpec

#: What ``post`` returns: (the request body as sent, raw response text, response headers).
Posted = tuple[dict[str, Any], str, Mapping[str, str]]

#: The SDKs' request header asking their request path for the unparsed response (``with_raw_response``).
RAW_RESPONSE = "X-Stainless-Raw-Response"

#: Sent as the key when a model declares no ``api_key_env`` (local servers that need none).
NO_KEY = "no-key"

T = TypeVar("T")


class RemoteModel(ModelAPI):
    """Base of the SDK-backed protocols (see module docstring)."""

    #: The SDK module (``openai`` or ``anthropic``); its error classes are shared by name.
    sdk: Any

    def __init__(self, declaration: ModelDeclaration) -> None:
        super().__init__(declaration)
        self._client: Any = None
        self._client_loop: AbstractEventLoop | None = None
        self._key: str | None = None
        r = declaration.retry
        self.connections = (ConnectionLimit(r.auto_start, r.auto_min, r.auto_max) if r.max_connections == "auto"
                            else ConnectionLimit(r.max_connections))
        """The model's connection limit, shared by every run of the study."""
        self._headers = {"Content-Type": "application/json", RAW_RESPONSE: self.raw_response_mode,
                         **declaration.headers}
        """The headers every call sends: JSON, the raw-response marker and the declared headers verbatim."""

    # ------------------------------------------------------------------ protocol hooks
    @abstractmethod
    def build_body(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        """The JSON body to send: model, context, tools and mapped request fields."""

    @abstractmethod
    def make_client(self, api_key: str) -> Any:
        """An async SDK client with ``max_retries=0`` and ``http_client=self.http_client()``."""

    def http_client(self) -> Any:
        """The SDK's HTTP client for the declared ``retry.http_client`` (draligned.models.http)."""
        return sdk_http_client(self.sdk, self.declaration.retry.http_client)

    @abstractmethod
    async def post(self, client: Any, body: dict[str, Any], timeout: float) -> Posted:
        """Send ``body`` once with the declared headers; return (the body as sent, raw response text, headers)."""

    async def post_json(self, client: Any, path: str, body: dict[str, Any], timeout: float) -> Posted:
        """Send ``body`` once to ``path`` as exactly the bytes the SDK would serialise (compact separators,
        UTF-8), through the SDK's own request path: its auth, default headers, timeout handling and error
        types (APIStatusError, RateLimitError, APIConnectionError, ...) with the declared headers. It skips
        the SDK's per-call transform of the typed parameters, which walks the whole growing context on
        every call; the body is already the wire JSON. ``RAW_RESPONSE`` asks for the unparsed response,
        as ``with_raw_response`` does.

        Per call the SDK also builds its request options, merging defaults, and resolves ``path`` against its
        base URL. Both are given here ready-made, so it does neither: the URL as the SDK would resolve it (its
        base URL's path ends in "/"), and ``max_retries`` and ``params`` as the client has them (0 and none), which
        it would otherwise deep-copy from its defaults.

        The body returned as sent is decoded from the bytes the SDK sent, unless they are the very bytes encoded
        from ``body`` (as they are: the SDK sends ``content`` as given): then it is ``body``, not decoded again."""
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        options: dict[str, Any] = {"timeout": timeout, "max_retries": 0, "params": {},
                                   "headers": dict(self._headers)}
        if self.security is not None:
            options["security"] = self.security
        url = f"{str(client.base_url).rstrip('/')}/{path.lstrip('/')}"  # a host root prints without its "/"
        raw = await client.post(url, cast_to=object, content=content, options=options)
        sent = raw.http_request.content
        return body if sent == content else json.loads(sent), raw.http_response.text, raw.headers


    #: The value of ``RAW_RESPONSE`` the SDK's ``with_raw_response`` sends (openai "true", anthropic "raw").
    raw_response_mode: str = "raw"
    #: The auth schemes a call uses (the SDK's create methods name them; None: the SDK's default).
    security: dict[str, bool] | None = None

    @abstractmethod
    def read_reply(self, data: dict[str, Any]) -> dict[str, Any]:
        """ModelReply fields (text, tool_calls, finish_reason, refusal, usage, model_echo, anomalies)."""

    def failure_hint(self, status: int | None, message: str, body: dict[str, Any]) -> str:
        """What to check after a final failure: a 404 that names nothing the request sent is a wrong URL."""
        if status != 404 or any(i in message for i in sent_ids(body)):
            return ""
        return " — check base_url: the host root for anthropic, including /v1 for openai"

    # ------------------------------------------------------------------ shared machinery
    @property
    def label(self) -> str:
        """How errors name this model: declaration name, requested id and endpoint."""
        d = self.declaration
        return f"model {d.name!r} ({d.protocol} {d.model}{' at ' + d.base_url if d.base_url else ''})"

    def api_key(self) -> str:
        """The key from the declared environment variable; a clear error naming it when unset."""
        env = self.declaration.api_key_env
        if env is None:
            return NO_KEY
        key = os.environ.get(env)
        if not key:
            raise ModelError(f"{self.label}: environment variable {env} (api_key_env) is not set; "
                             f"it must hold the API key")
        return key

    def check_ready(self) -> None:
        self.api_key()
        if self.declaration.retry.http_client == "aiohttp":
            aiohttp_transport(self.sdk)

    def redact(self, text: str) -> str:
        """``text`` with the key (if one is in use) replaced, so it can be recorded or shown."""
        return text.replace(self._key, "[redacted]") if self._key and self._key != NO_KEY else text

    def classify(self, exc: BaseException) -> Failure | None:
        """Map an SDK error to a Failure; None for anything else (a bug: it propagates)."""
        failure = self._classify(exc)
        limit = self.connections.limit if self.connections.adaptive else None
        return None if failure is None else dataclasses.replace(failure, connection_limit=limit)

    def _classify(self, exc: BaseException) -> Failure | None:
        sdk = self.sdk
        if isinstance(exc, sdk.APITimeoutError) and aiohttp_connection_error(exc):
            # The SDKs' aiohttp transport maps every aiohttp connection error (refused, reset, server
            # disconnected) to httpx's ConnectTimeout: nothing timed out, so name the SDK's base class.
            return Failure(True, sdk.APIConnectionError.__name__, None, self.redact(f"connection error{cause(exc)}"))
        if isinstance(exc, sdk.APITimeoutError):
            return Failure(True, type(exc).__name__, None, "request timed out")
        if isinstance(exc, sdk.APIConnectionError):
            return Failure(True, type(exc).__name__, None, self.redact(f"connection error: {exc}{cause(exc)}"))
        if isinstance(exc, sdk.APIStatusError):
            return status_failure(type(exc).__name__, exc.status_code, self.redact(str(exc)),
                                  exc.response.headers)
        return None

    async def _attempt(self, body: dict[str, Any]) -> Posted:
        await self.connections.acquire()
        outcome: Any = "failed"
        try:
            posted = await self.post(self._client, body, self.declaration.retry.timeout_s)
            outcome = "ok"
            return posted
        except self.sdk.APIStatusError as exc:
            outcome = "throttled" if exc.status_code == 429 else "failed"
            raise
        finally:
            await self.connections.release(outcome)

    def client(self) -> Any:
        """The SDK client, made on first use in each event loop with the key from the environment (shared
        by the synchronous calls and the batch transport). Its connections belong to that loop, so a later
        ``asyncio.run`` gets a client of its own, closed when that ``asyncio.run`` ends."""
        loop = running_loop()
        if self._client is None or self._client_loop is not loop:
            self._key = self.api_key()
            self._client, self._client_loop = self.make_client(self._key), loop
            if loop is not None:
                close_with_loop(loop, self._client)
        return self._client

    async def with_retries(self, attempt_once: Callable[[], Awaitable[T]],
                           on_retry: Callable[[], None] | None = None,
                           body: dict[str, Any] | None = None) -> tuple[T, list[ModelAttempt]]:
        """Run one API call (a model call with its request ``body``, or a batch upload, poll or download)
        with the model's retries; a ModelError naming the model, the status, how it ended and what to check
        when they give up."""
        try:
            return await call_with_retries(attempt_once, self.classify, self.declaration.retry, on_retry)
        except GaveUp as exc:
            f = exc.failure
            how = "failed fast (not retried)" if not f.retryable else f"gave up after {len(exc.attempts)} attempt(s)"
            status = f"HTTP {f.status_code} " if f.status_code else ""
            hint = self.failure_hint(f.status_code, f.message, body or {})
            raise ModelError(f"{self.label}: {status}{f.error}: {f.message} ({how}){hint}", exc.attempts) from None

    async def generate(self, messages: list[Message], tools: list[ToolSpec], seed: int) -> ModelReply:
        """One model call: build the body, send it with retries, read the reply.

        ``seed`` is not sent (most APIs ignore or reject it); the replay cache keys on it.
        """
        self.client()
        body = self.build_body(messages, tools)
        started = time.perf_counter()
        listener, retrying = RETRY_LISTENER.get(), False

        def on_retry() -> None:
            nonlocal retrying
            if listener is not None and not retrying:
                retrying = True
                listener(1)
        try:
            (sent, raw, headers), attempts = await self.with_retries(lambda: self._attempt(body), on_retry, body)
        finally:
            if retrying and listener is not None:
                listener(-1)
        return self.parse_reply(raw, sent, time.perf_counter() - started, attempts, headers)

    def parse_reply(self, raw: str, request_body: dict[str, Any], latency_s: float = 0.0,
                    attempts: list[ModelAttempt] | None = None,
                    headers: Mapping[str, str] | None = None) -> ModelReply:
        """A reply body as received (the synchronous response, or a batch line's body, which has no HTTP
        headers of its own) as a ModelReply: the key redacted if echoed, the JSON read by the protocol, the
        headers cleaned and read for a gateway's report; ModelError if it is not a JSON object."""
        redacted = self.redact(raw)
        echoed, raw = redacted != raw, redacted  # a key echoed back is never archived
        try:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise ValueError(f"JSON {type(data).__name__}, not an object")
        except ValueError as exc:
            raise ModelError(f"{self.label}: unreadable reply body ({exc}): {raw[:200]!r}",
                             attempts) from None
        fields = self.read_reply(data)
        if echoed:
            fields["anomalies"].append("the reply contained the API key; it was redacted before archiving")
        kept = None if headers is None else clean_headers(headers, self._key if self._key != NO_KEY else None)
        return ModelReply(**fields, request_body=request_body, raw_response=raw, latency_s=latency_s,
                          attempts=attempts or [], request_headers=self.declaration.headers or None,
                          response_headers=kept, gateway=gateway_info(kept or {}, data),
                          connection_limit=self.connections.limit if self.connections.adaptive else None)


def sdk_security(sdk: Any, schemes: dict[str, bool]) -> dict[str, bool] | None:
    """``schemes`` (the auth a create method asks for) when the SDK's request options take ``security``;
    None for an SDK without them, whose request path sends its one key anyway."""
    options = getattr(getattr(sdk, "_types", None), "RequestOptions", None)
    return schemes if "security" in getattr(options, "__annotations__", {}) else None


def sent_ids(value: Any) -> set[str]:
    """Every ``id`` and ``previous_response_id`` in a request body: a 404 naming one is about the request."""
    if isinstance(value, list):
        return set().union(*(sent_ids(v) for v in value)) if value else set()
    if not isinstance(value, dict):
        return set()
    own = {v for k, v in value.items() if k in ("id", "previous_response_id") and isinstance(v, str) and v}
    return own.union(*(sent_ids(v) for v in value.values()))


#: Socket errors under a connection error, named as a reader would.
CAUSES: tuple[tuple[type[BaseException], str], ...] = (
    (ConnectionRefusedError, "connection refused"), (ConnectionResetError, "connection reset"),
    (socket.gaierror, "host name not resolved"), (ssl.SSLError, "TLS error"),
)


def aiohttp_connection_error(exc: BaseException) -> bool:
    """Whether an aiohttp error other than a timeout (aiohttp's are ``TimeoutError``s) is under ``exc``."""
    return any(type(e).__module__.startswith("aiohttp.") and not isinstance(e, TimeoutError) for e in chain(exc)[1:])


def cause(exc: BaseException) -> str:
    """`` (cause: ...)`` naming the innermost error under an SDK error (e.g. connection refused), or ''."""
    inner = chain(exc)[-1]
    if inner is exc:
        return ""
    name = next((words for kind, words in CAUSES if isinstance(inner, kind)), None)
    text = str(inner).strip()
    return f" (cause: {name + ': ' if name else ''}{text})"
