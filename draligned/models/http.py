"""The HTTP transport under the provider SDKs (``retry.http_client``), and closing it with its event loop.

``aiohttp`` (the default) is the SDKs' own alternative transport: their ``DefaultAioHttpClient``, an
httpx client whose requests aiohttp sends, which both SDKs document for performance. Through the SDK's
request path it costs about half the CPU per call of their default httpx transport
(benchmarks/README.md). Its aiohttp session reads response heads as large as httpx reads them:
aiohttp's own default refuses more than 128 headers or a header over 8 KiB, where httpx (h11 under
httpcore) bounds only the whole head, at 100 KiB. ``httpx`` is the SDKs' own default client.
Both send the same bytes and raise the same SDK errors (remote.py names the causes of both).

On Python 3.11 aiohttp sends a request's head and body from a task of its own, which runs only after every
callback already ready on the loop: when many runs' replies arrive together, each run's next request
leaves only after all of them have been processed, so they leave together, their replies (each taking the
model's latency) arrive together again, and the runs stay in lockstep, every call waiting for every other
run's turn (benchmarks/README.md, "Branch throughput"). From Python 3.12 aiohttp starts that task eagerly
(its first step runs inside the request); :class:`EagerBodyRequest` does the same on 3.11.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import sys
from collections.abc import Coroutine, Generator
from typing import Any, Literal

from draligned.models.base import ModelError
from draligned.tls import tls_context

#: httpcore's bound on a response head (h11's ``max_incomplete_event_size``): aiohttp's line, field and
#: header-count limits are raised to what fits in it, so a gateway's long header list reads as with httpx.
HEAD_BYTES = 100 * 1024
MAX_HEADERS = HEAD_BYTES // 4  # the shortest header line, "a:\r\n", is 4 bytes

#: The tasks that close SDK clients when their loop ends (the loop itself keeps only weak references).
CLOSERS: set[asyncio.Task[None]] = set()


def sdk_http_client(sdk: Any, kind: Literal["aiohttp", "httpx"]) -> Any:
    """The ``http_client`` for an ``sdk`` client (``openai`` or ``anthropic``): its ``DefaultAioHttpClient``
    on the SDK's own aiohttp transport with httpx's head limits, or None for the SDK's default httpx client."""
    if kind == "httpx":
        return None
    vendored = aiohttp_transport(sdk)  # first: a missing aiohttp is the ModelError saying what to install
    import aiohttp
    limits = sdk.DEFAULT_CONNECTION_LIMITS

    def session() -> aiohttp.ClientSession:  # what the transport builds itself, with the head limits raised
        connector = aiohttp.TCPConnector(limit=limits.max_connections, keepalive_timeout=limits.keepalive_expiry,
                                         ssl=transport.ssl_context)
        return aiohttp.ClientSession(connector=connector, max_line_size=HEAD_BYTES, max_field_size=HEAD_BYTES,
                                     max_headers=MAX_HEADERS, request_class=eager_body_request())
    transport = vendored.AiohttpTransport(verify=tls_context(), limits=limits, client=session)
    return sdk.DefaultAioHttpClient(transport=transport)


@functools.cache
def eager_body_request() -> Any:
    """aiohttp's request class that writes its body eagerly: :class:`EagerBodyRequest` on Python 3.11, aiohttp's
    own (which does so itself) from 3.12."""
    import aiohttp
    if sys.version_info >= (3, 12):
        return aiohttp.ClientRequest

    class EagerBodyRequest(aiohttp.ClientRequest):
        """Runs ``write_bytes`` (the request's head and body onto the connection) up to its first wait inside
        ``send``, as aiohttp does with ``eager_start`` from Python 3.12, instead of in a task that waits for
        every ready callback of the loop; the rest of it, if it waits (a full socket buffer), runs in that task."""

        def write_bytes(self, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, None]:
            return started(super().write_bytes(*args, **kwargs))

    return EagerBodyRequest


def started(coro: Coroutine[Any, Any, Any]) -> Coroutine[Any, Any, Any]:
    """Run ``coro`` now up to its first wait; return a coroutine that finishes it (its result, its exception).
    An interrupt (KeyboardInterrupt, SystemExit) in that first step is raised at once, as an eager task does."""
    try:
        first = coro.send(None)
    except StopIteration as stop:
        return _finished(stop.value)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 (raised by whoever awaits it, as from the task)
        return _raise(exc)
    return _Resumed(coro, first)


async def _finished(value: Any) -> Any:
    return value


async def _raise(exc: BaseException) -> Any:
    raise exc


class _Resumed(Coroutine[Any, Any, Any]):
    """A coroutine already run to its first wait: the first step of whoever runs this hands on that wait;
    every other step, and anything thrown in (a cancel before or after the first step) or a close, goes
    straight to the coroutine, so its own handlers run as they would in its task."""

    def __init__(self, coro: Coroutine[Any, Any, Any], waiting: Any) -> None:
        self._coro, self._waiting = coro, [waiting]

    def send(self, value: Any) -> Any:
        return self._waiting.pop() if self._waiting else self._coro.send(value)

    def throw(self, *exc: Any) -> Any:  # (value), or the old (type, value, tb)
        self._waiting.clear()
        return self._coro.throw(*exc)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, Any, Any]:
        return self  # an iterator with send and throw is what await drives

    def __iter__(self) -> _Resumed:
        return self

    def __next__(self) -> Any:
        return self.send(None)


def aiohttp_transport(sdk: Any) -> Any:
    """The module of ``sdk``'s own aiohttp transport (``openai[aiohttp]``, ``anthropic[aiohttp]``); a ModelError
    saying what to install, or to declare, when this release of the SDK or aiohttp lacks it."""
    try:
        importlib.import_module("aiohttp")
        return importlib.import_module(f"{sdk.__name__}._vendor.httpx_aiohttp")
    except ImportError as exc:
        raise ModelError(f"retry.http_client = \"aiohttp\" needs the {sdk.__name__} SDK's aiohttp transport "
                         f"({exc}): pip install '{sdk.__name__}[aiohttp]' (a release that includes it), or "
                         f"declare retry.http_client = \"httpx\"") from None


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The running event loop, or None outside one."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def close_with_loop(loop: asyncio.AbstractEventLoop, client: Any) -> None:
    """Close the SDK ``client`` when ``asyncio.run`` of ``loop`` ends: it cancels the tasks still pending and
    waits for them, so this one closes the client's connections inside the loop that opened them (an aiohttp
    session left open is reported as unclosed when it is collected)."""
    async def wait_then_close() -> None:
        try:
            await loop.create_future()
        finally:
            await client.close()
    task = loop.create_task(wait_then_close())
    CLOSERS.add(task)
    task.add_done_callback(CLOSERS.discard)
