"""The SDKs' HTTP transport (``retry.http_client``): aiohttp by default, httpx when declared, through the real
SDKs against loopback servers: the same request on the wire, the same named failures, and each client closed
with the event loop that opened its connections."""

from __future__ import annotations

import asyncio
import ssl
import time

import pytest

from draligned.models import ModelDeclaration, ModelError, get_model
from draligned.models.http import started
from draligned.models.remote import RemoteModel
from draligned.models.retry import RetryPolicy
from draligned.records import Message
from tests.fake_providers import FakeProvider

PROTOCOLS = ("openai-chat", "openai-responses", "anthropic")
CLIENTS = ("aiohttp", "httpx")
HI = [Message(role="user", content="Hi")]


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_PROVIDER_KEY", "sk-http-client")


def model(protocol: str, base_url: str, **retry: object) -> RemoteModel:
    m = get_model(ModelDeclaration(name="m", protocol=protocol, model="id", base_url=base_url,
                                   api_key_env="FAKE_PROVIDER_KEY", retry=retry))
    assert isinstance(m, RemoteModel)
    return m


def test_aiohttp_is_the_default_and_the_transport_is_outside_the_declaration_hash():
    default = ModelDeclaration(name="m", protocol="openai-chat", model="id")
    declared = ModelDeclaration(name="m", protocol="openai-chat", model="id", retry={"http_client": "httpx"})
    assert default.retry.http_client == "aiohttp" and declared.sha256 == default.sha256  # slot ids unchanged
    with pytest.raises(ValueError, match="http_client"):
        ModelDeclaration(name="m", protocol="openai-chat", model="id", retry={"http_client": "requests"})


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_both_transports_send_the_same_request(protocol):
    seen = []
    for client in CLIENTS:
        with FakeProvider(protocol) as fp:
            reply = asyncio.run(model(protocol, fp.base_url, http_client=client).generate(HI, [], 0))
        (sent,) = fp.log
        assert sent["body"] == reply.request_body and reply.model_echo == "fake-model-2026-01-01"
        headers = {k.lower(): v for k, v in sent["headers"].items() if k.lower() != "host"}  # names: any case
        seen.append((sent["path"], headers, sent["body"]))
    assert seen[0] == seen[1] and seen[0][1]["content-type"] == "application/json"


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_refused_connection_is_a_named_connection_error_on_both_transports(protocol, client):
    """openai's aiohttp transport raises every aiohttp connection error as a ConnectTimeout: it is still
    recorded as the connection error it is, with its cause, not as a timeout."""
    with FakeProvider(protocol) as gone:
        closed = gone.base_url  # nothing listens here once the server is closed
    m = model(protocol, closed, http_client=client, max_attempts=2)
    with pytest.raises(ModelError, match=r"APIConnectionError: connection error.*\(cause: connection refused: "
                                         r"\[Errno 111\].*gave up after 2") as err:
        asyncio.run(m.generate(HI, [], 0))
    assert [a.error for a in err.value.attempts] == ["APIConnectionError"] * 2


@pytest.mark.parametrize("client", CLIENTS)
def test_the_client_is_closed_with_its_loop_and_a_later_loop_gets_its_own(client):
    async def call(m: RemoteModel) -> object:
        await m.generate(HI, [], 0)
        return m.client()
    with FakeProvider("openai-chat") as fp:
        m = model("openai-chat", fp.base_url, http_client=client)
        first = asyncio.run(call(m))
        second = asyncio.run(call(m))
    assert len(fp.log) == 2 and second is not first
    assert first.is_closed() and second.is_closed()  # type: ignore[attr-defined]


def test_an_sdk_without_its_aiohttp_transport_is_refused_before_the_study_naming_the_fix():
    import json  # a module that, like an SDK release before the aiohttp extra, has no _vendor.httpx_aiohttp

    from draligned.models.http import aiohttp_transport
    with pytest.raises(ModelError, match=r"pip install 'json\[aiohttp\]'.*or declare retry.http_client = \"httpx\""):
        aiohttp_transport(json)
    m = model("anthropic", "http://127.0.0.1:9")
    m.check_ready()  # the installed SDK has it


def test_the_default_transport_is_not_written_so_earlier_declarations_keep_their_bytes():
    """An evaluator's ``evaluator.json`` (its declaration's dump) is compared byte for byte when it reads an
    archive again: the field added for the transport must not change the dump of a declaration made before."""
    before = {"max_attempts": 6, "max_total_s": 1800.0, "initial_wait_s": 2.0, "max_wait_s": 120.0,
              "timeout_s": 900.0, "max_connections": 8, "auto_start": 2, "auto_min": 1, "auto_max": 32,
              "stop_after_connection_failures": 3}  # RetryPolicy().model_dump() before retry.http_client
    assert RetryPolicy().model_dump(mode="json") == before
    assert RetryPolicy(http_client="httpx").model_dump(mode="json") == {**before, "http_client": "httpx"}
    assert RetryPolicy.model_validate(RetryPolicy(http_client="httpx").model_dump()).http_client == "httpx"


def test_every_client_shares_one_tls_context_per_ca_bundle(monkeypatch, tmp_path):
    import certifi

    from draligned.models.http import sdk_http_client
    from draligned.tls import tls_context
    from draligned.tools.web.wire import capturing_client

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    shared = tls_context()
    assert shared.verify_mode == ssl.CERT_REQUIRED and shared.check_hostname
    import openai
    transport = sdk_http_client(openai, "aiohttp")._transport
    assert transport.ssl_context is shared
    assert capturing_client(1.0)._transport._pool._ssl_context is shared
    bundle = tmp_path / "ca.pem"
    bundle.write_bytes(open(certifi.where(), "rb").read())
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))  # another CA bundle: a context of its own
    assert tls_context() is not shared and tls_context() is tls_context()
    assert tls_context(trust_env=False) is not tls_context()  # the page reader ignores the variables
    named = tls_context()
    rotated = tmp_path / "rotated.pem"
    rotated.write_bytes(bundle.read_bytes())
    rotated.replace(bundle)  # the bundle rotated in place: the same name, a new file
    assert tls_context() is not named and tls_context() is tls_context()


def test_a_request_is_on_the_wire_before_the_next_ready_run_is_processed():
    """Runs whose replies arrive together are processed one after another: each one's next request must leave
    when it is made, not after every other ready run's work (aiohttp on Python 3.11 sent it from a task queued
    behind them, which kept a study's runs in lockstep). The other run here blocks the loop until the server
    (a thread, keeping its connections as a real one does) has read the request, or gives up."""
    with FakeProvider("openai-chat") as fp:
        fp.server.RequestHandlerClass.protocol_version = "HTTP/1.1"  # type: ignore[attr-defined]  # keep-alive
        m = model("openai-chat", fp.base_url)

        async def main() -> int:
            await m.generate(HI, [], 0)  # the connection is open and kept
            seen: list[int] = []

            async def other_run() -> None:  # ready right behind the request: its work blocks the loop
                deadline = time.monotonic() + 5.0
                while len(fp.log) < 2 and time.monotonic() < deadline:
                    time.sleep(0.001)
                seen.append(len(fp.log))
            await asyncio.gather(m.generate(HI, [], 0), other_run())
            return seen[0]
        assert asyncio.run(main()) == 2


def test_a_started_coroutine_runs_to_its_first_wait_at_once_and_is_finished_by_whoever_awaits_it():
    steps: list[str] = []

    async def body(wait: asyncio.Future[int] | None, fail: bool = False) -> int:
        steps.append("first step")
        if fail:
            raise OSError("refused")
        got = await wait if wait is not None else 0
        steps.append(f"resumed with {got}")
        return got + 1

    async def main() -> None:
        assert await started(body(None)) == 1 and steps == ["first step", "resumed with 0"]
        steps.clear()
        failing = started(body(None, fail=True))
        assert steps == ["first step"]
        with pytest.raises(OSError, match="refused"):
            await failing
        steps.clear()
        wait = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(started(body(wait)))
        assert steps == ["first step"]  # before the task ran at all
        await asyncio.sleep(0)
        wait.set_result(41)
        assert await task == 42 and steps == ["first step", "resumed with 41"]
        steps.clear()
        task = asyncio.ensure_future(started(body(asyncio.get_running_loop().create_future())))
        await asyncio.sleep(0)
        task.cancel()  # thrown into the started coroutine where it waits
        with pytest.raises(asyncio.CancelledError):
            await task
        assert steps == ["first step"]
        steps.clear()
        wait = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(wait.set_result, 6)
        assert await started(body(wait)) == 7 and steps == ["first step", "resumed with 6"]  # awaited directly
    asyncio.run(main())


def test_a_cancel_before_the_task_of_a_started_coroutine_first_runs_reaches_the_coroutines_own_handler():
    """aiohttp closes the connection in its writer's handler: a cancel in the same loop step as the send
    must run it then, not when the collector finally closes the abandoned coroutine."""
    handled: list[str] = []

    async def body(wait: asyncio.Future[None]) -> None:
        try:
            await wait
        except asyncio.CancelledError:
            handled.append("cancelled")
            raise

    async def main() -> None:
        wait = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(started(body(wait)))
        task.cancel()  # before the task's first step
        with pytest.raises(asyncio.CancelledError):
            await task
        assert handled == ["cancelled"]
    asyncio.run(main())


def test_an_interrupt_in_a_started_coroutines_first_step_is_raised_at_once():
    async def body() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        started(body())
