"""The legacy adapter is backend-neutral: a whole legacy deletion on asyncio.

Layer: tests. The rest of the suite runs the adapter on trio (pytest-trio, hypercorn's trio
worker). Here ``anyio.run(..., backend="asyncio")`` drives the node's ASGI app directly through a
hand-made ``receive``/``send`` pair (an in-memory ASGI client that streams SSE as it comes, and
can report ``http.disconnect``): initialize, a ``notes_delete`` whose form is answered by a
second request while the first streams, the note deleted once; then a call whose client goes
away stops at once. The store is the embedded one and the real Redis.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc

from cluster.local import seed_demo
from nodes.http import ASGIApp, make_app
from nodes.legacy import LEGACY_VERSION, LegacyAdapter, open_legacy_adapter
from nodes.protocol import Node
from nodes.serving.demo import DEMO_TENANT
from nodes.serving.settings import demo_settings
from store.client_factory import open_redis
from store.notes import NoteStore
from store.sessions import SessionStore
from tests.test_legacy import confirm, legacy_headers, pick_2024
from tests.test_sdk_interop import DELETE_ARGS

STEP_S = 10.0


class Exchange:
    """One HTTP request to an ASGI app, its response read as it is sent."""

    def __init__(self, body: bytes) -> None:
        self._body: bytes | None = body
        self.gone = anyio.Event()
        self._out, self._in = anyio.create_memory_object_stream[dict[str, Any]](100)
        self.status = 0
        self.headers: dict[str, str] = {}
        self._buffer = b""

    async def receive(self) -> dict[str, Any]:
        if self._body is not None:
            body, self._body = self._body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        await self._out.send(message)

    async def start(self) -> None:
        """Wait for the response's status and headers."""
        with anyio.fail_after(STEP_S):
            message = await self._in.receive()
        assert message["type"] == "http.response.start"
        self.status = message["status"]
        self.headers = {k.decode(): v.decode() for k, v in message["headers"]}

    async def body(self) -> bytes:
        """The rest of the body, to its end."""
        chunks = [self._buffer]
        while True:
            with anyio.fail_after(STEP_S):
                message = await self._in.receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def event(self) -> dict[str, Any]:
        """The next SSE event's JSON-RPC message."""
        while b"\n\n" not in self._buffer:
            with anyio.fail_after(STEP_S):
                message = await self._in.receive()
            self._buffer += message.get("body", b"")
        raw, self._buffer = self._buffer.split(b"\n\n", 1)
        data = [line[6:] for line in raw.split(b"\n") if line.startswith(b"data: ")]
        out: dict[str, Any] = json.loads(b"".join(data))
        return out


def scope(headers: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }


@asynccontextmanager
async def request(
    tg: anyio.abc.TaskGroup, app: ASGIApp, message: dict[str, Any], session: str | None
) -> AsyncIterator[Exchange]:
    """Run the app on one request in ``tg``; the exchange is left (client gone) on exit."""
    exchange = Exchange(json.dumps(message).encode())
    done = anyio.Event()

    async def run() -> None:
        await app(scope(legacy_headers(session)), exchange.receive, exchange.send)
        done.set()

    tg.start_soon(run)
    await exchange.start()
    try:
        yield exchange
    finally:
        exchange.gone.set()
        with anyio.fail_after(STEP_S):
            await done.wait()


async def legacy_flow(url: str, embedded: bool, prefix: str) -> LegacyAdapter:
    asyncio.get_running_loop()  # raises unless this runs on asyncio
    settings = demo_settings()
    async with open_redis(url, embedded=embedded) as client:
        store = NoteStore(client, prefix=prefix)
        await seed_demo(store)
        node = Node(settings.node, store)
        sessions = SessionStore(client, prefix=prefix)
        async with (
            open_legacy_adapter(node, sessions) as adapter,
            anyio.create_task_group() as tg,
        ):
            app = make_app(node, settings.tokens, legacy=adapter)
            params = {
                "protocolVersion": LEGACY_VERSION,
                "capabilities": {"elicitation": {}},
                "clientInfo": {"name": "asyncio-test", "version": "0"},
            }
            init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
            async with request(tg, app, init, None) as answer:
                assert answer.status == 200
                await answer.body()
                session = answer.headers["mcp-session-id"]

            call = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "notes_delete", "arguments": DELETE_ARGS},
            }
            async with request(tg, app, call, session) as stream:
                assert stream.headers["content-type"] == "text/event-stream"
                ask = await stream.event()
                note = pick_2024(ask)
                reply = {"jsonrpc": "2.0", "id": ask["id"], "result": confirm(note)}
                async with request(tg, app, reply, session) as taken:
                    assert taken.status == 202
                final = await stream.event()
            assert final["id"] == 1
            assert final["result"]["structuredContent"] == {"deleted": True, "noteId": note}
            assert await store.get(DEMO_TENANT, note) is None

            # A client that goes away: its call stops and leaves the reader at once (leaving
            # ``request`` waits for the app to return, within STEP_S, not the call's 300 s).
            async with request(tg, app, call, session) as stream:
                await stream.event()
                assert adapter.statistics().waiting_calls == 1
            stats = adapter.statistics()
            assert (stats.pending_calls, stats.waiting_calls, stats.disconnects) == (0, 0, 1)
            tg.cancel_scope.cancel()
    return adapter


def test_a_legacy_deletion_runs_on_asyncio(
    redis_url: str, embedded_url: str, key_prefix: str
) -> None:
    adapter = anyio.run(
        legacy_flow, redis_url, redis_url == embedded_url, key_prefix, backend="asyncio"
    )
    stats = adapter.statistics()
    assert (stats.sessions_opened, stats.calls, stats.streams) == (1, 2, 1)
    assert (stats.waiting_calls, stats.pending_calls) == (0, 0)
