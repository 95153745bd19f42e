"""The in-memory streaming httpx transport (``cluster.memory_http``): ASGI apps with no socket.

Layer: tests. A response streams while its request waits (what httpx's own ``ASGITransport``
cannot: it buffers the whole response, shown here as the control); the client closing the
stream reaches the app as ``http.disconnect``; an app that fails before answering is a 500; an
unknown host a connect error. Each race is forced with events, never with timing.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio
import trio.testing

from cluster.memory_http import MemoryASGITransport


class Conversation:
    """An app whose response streams "first", then waits for the client's second request
    (``POST /answer``) before it sends "second": it needs a transport that streams."""

    def __init__(self) -> None:
        self.answered = trio.Event()
        self.received: list[dict[str, Any]] = []
        self.disconnected = trio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/answer":
            self.answered.set()
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        self.received.append(await receive())
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"first\n", "more_body": True})
        with trio.move_on_after(30):
            await self.answered.wait()
        if not self.answered.is_set():
            return
        await send({"type": "http.response.body", "body": b"second\n", "more_body": True})
        message = await receive()  # the client closes the stream after "second"
        if message["type"] == "http.disconnect":
            self.disconnected.set()


async def _converse(client: httpx.AsyncClient) -> list[str]:
    lines: list[str] = []
    async with client.stream("POST", "http://node-0/mcp", content=b"{}") as response:
        async for line in response.aiter_lines():
            lines.append(line)
            if line == "first":
                answer = await client.post("http://node-0/answer")
                assert answer.status_code == 202
            if line == "second":
                break
    return lines


async def test_a_response_streams_while_its_request_waits_and_its_close_is_a_disconnect() -> None:
    app = Conversation()
    async with trio.open_nursery() as nursery:
        transport = MemoryASGITransport({"node-0": app}, nursery)
        async with httpx.AsyncClient(transport=transport) as client:
            assert await _converse(client) == ["first", "second"]
        with trio.fail_after(5):
            await app.disconnected.wait()
    assert app.received == [{"type": "http.request", "body": b"{}", "more_body": False}]


async def test_control_httpx_asgi_transport_buffers_the_whole_response(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = Conversation()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport) as client:
        with trio.move_on_after(1) as waited:  # never done: "second" waits for the answer
            await _converse(client)
    assert waited.cancelled_caught, "httpx's ASGITransport streamed: the control is moot"


async def test_a_client_that_gives_up_waiting_disconnects_the_app(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[str] = []
    done = trio.Event()

    async def slow(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        seen.append((await receive())["type"])  # no response yet: waits for the client
        done.set()

    async with trio.open_nursery() as nursery:
        transport = MemoryASGITransport({"slow": slow}, nursery)
        async with httpx.AsyncClient(transport=transport) as client:
            with trio.move_on_after(1):
                await client.get("http://slow/")
        with trio.fail_after(5):
            await done.wait()
    assert seen == ["http.disconnect"]


async def test_an_app_failing_before_its_response_is_a_500() -> None:
    async def broken(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("planted")

    async with trio.open_nursery() as nursery:
        transport = MemoryASGITransport({"broken": broken}, nursery)
        async with httpx.AsyncClient(transport=transport) as client:
            response = await client.get("http://broken/")
    assert response.status_code == 500


async def test_an_unknown_host_is_a_connect_error() -> None:
    async with trio.open_nursery() as nursery:
        transport = MemoryASGITransport({}, nursery)
        async with httpx.AsyncClient(transport=transport) as client:
            with pytest.raises(httpx.ConnectError, match="no in-process app"):
                await client.get("http://nowhere/")
