"""A draining node ends its legacy streams cleanly and refuses new legacy calls.

Layer: tests. A graceful drain on SIGTERM ends legacy streams cleanly. A legacy
``tools/call`` waiting for its user holds an SSE stream open; when the node drains
(``NodeApp.drain`` -> ``StreamableHTTPApp.drain`` -> ``LegacyAdapter.shutdown``), that stream
gets a final JSON-RPC error for its request (-32603, ``data.reason: "draining"``, retryable,
nothing changed) and ends, instead of running until uvicorn cancels it at the drain bound. In
memory on the ASGI app, and on uvicorn node processes sent SIGTERM, where the client's retry on
another node then deletes the note once.
"""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
import trio

from cluster.local import seed_demo
from cluster.serve import seed_demo_notes
from nodes import errors
from nodes.http import StreamableHTTPApp, make_app
from nodes.legacy import LegacyAdapter, LegacyLimits, open_legacy_adapter
from nodes.legacy.inbox import Drained, InboxWatch
from nodes.protocol import Node
from nodes.serving.settings import demo_settings
from store.client_factory import open_redis
from store.notes import NoteStore
from store.sessions import InboxEntry, SessionStore
from tests.conftest import raw
from tests.test_legacy import STEP_S, Events, confirm, deletions, legacy_headers, pick_2024
from tests.test_legacy_asyncio import Exchange, scope
from tests.test_sdk_interop import DELETE_ARGS, tps_reports
from tests.test_serving import node_process
from tests.test_serving import prefix as prefix  # the fixtures: a key prefix on the suite's
from tests.test_serving import serving_url as serving_url  # own redis-server

LIMITS = LegacyLimits(answer_timeout_s=120.0, keepalive_s=600.0)
"""Long waits and no keep-alive write within the test: only the drain can end a call."""
DRAIN_BOUND_S = 60.0
"""The process test's drain bound: far longer than any step may take (STEP_S), so a stream
that only ended when uvicorn cancelled it at the bound fails the test on its missing event."""


def delete_call(request_id: int = 1) -> dict[str, Any]:
    params = {"name": "notes_delete", "arguments": DELETE_ARGS}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def init_message() -> dict[str, Any]:
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "drain-test", "version": "0"},
    }
    return {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}


def assert_draining(final: dict[str, Any], request_id: int = 1) -> None:
    """The final error of a call stopped (or refused) by a draining node."""
    assert final["id"] == request_id, final
    error = final["error"]
    assert error["code"] == errors.INTERNAL_ERROR
    assert error["data"] == {"retryable": True, "reason": "draining"}
    assert "nothing was changed" in error["message"]


class Recorded(Exchange):
    """An exchange that also keeps each body message's ``more_body`` flag."""

    def __init__(self, body: bytes) -> None:
        super().__init__(body)
        self.more: list[bool] = []
        self.returned = anyio.Event()
        """Set when the app returned on its own (the client never left)."""

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            self.more.append(bool(message.get("more_body", False)))
        await super().send(message)


@asynccontextmanager
async def exchange(
    tg: anyio.abc.TaskGroup, app: StreamableHTTPApp, message: dict[str, Any], session: str | None
) -> AsyncIterator[Recorded]:
    """Run the app on one request in ``tg``, its response's head read; the client leaves on
    exit (if the app has not returned by then)."""
    ex = Recorded(json.dumps(message).encode())

    async def run() -> None:
        await app(scope(legacy_headers(session)), ex.receive, ex.send)  # type: ignore[arg-type]
        ex.returned.set()

    tg.start_soon(run)
    await ex.start()
    try:
        yield ex
    finally:
        ex.gone.set()
        with anyio.fail_after(STEP_S):
            await ex.returned.wait()


@asynccontextmanager
async def in_memory_node(
    store: NoteStore, key_prefix: str
) -> AsyncIterator[tuple[StreamableHTTPApp, LegacyAdapter]]:
    settings = demo_settings()
    await seed_demo(store)
    node = Node(settings.node, store)
    sessions = SessionStore(raw(store), prefix=key_prefix)
    async with open_legacy_adapter(node, sessions, LIMITS) as adapter:
        yield make_app(node, settings.tokens, legacy=adapter), adapter


async def test_drain_ends_a_waiting_calls_stream_with_a_final_error_and_refuses_new_calls(
    store: NoteStore, key_prefix: str
) -> None:
    async with in_memory_node(store, key_prefix) as (app, adapter), trio.open_nursery() as tg:
        before = await tps_reports(store)
        assert before
        async with exchange(tg, app, init_message(), None) as init:
            assert init.status == 200
            session = init.headers["mcp-session-id"]
        async with exchange(tg, app, delete_call(), session) as stream:
            assert stream.headers["content-type"] == "text/event-stream"
            ask = await stream.event()
            assert ask["method"] == "elicitation/create"
            assert adapter.statistics().waiting_calls == 1
            with trio.fail_after(STEP_S):
                await app.drain()
            # drain() returned once the call had ended: the form it asked for is withdrawn,
            # then the call's final event, then the stream's end.
            assert stream.returned.is_set()
            withdrawn = await stream.event()
            assert withdrawn["method"] == "notifications/cancelled"
            assert withdrawn["params"]["requestId"] == ask["id"]
            final = await stream.event()
            assert_draining(final)
            assert stream.more[-1] is False
            assert stream.more.count(False) == 1
        stats = adapter.statistics()
        assert (stats.pending_calls, stats.waiting_calls, stats.disconnects) == (0, 0, 0)

        # A new call is refused with the same error, as one JSON response; nothing streams.
        async with exchange(tg, app, delete_call(2), session) as refused:
            assert refused.status == 200
            assert refused.headers["content-type"] == "application/json"
            assert_draining(json.loads(await refused.body()), request_id=2)
        assert adapter.statistics().calls == 1
        # An answer to the stopped call's request is dropped, not executed.
        late = {"jsonrpc": "2.0", "id": ask["id"], "result": confirm(pick_2024(ask))}
        async with exchange(tg, app, late, session) as taken:
            assert taken.status == 202
        tg.cancel_scope.cancel()
    assert await tps_reports(store) == before


async def test_entries_read_before_the_drain_reach_the_call_before_it_stops() -> None:
    watch = InboxWatch("s", "0-0")
    answer = InboxEntry("1-0", "answer", "r1", "{}", 0)
    watch._take("1-0", [answer])
    watch._drain()
    # The answer the client was told we took (202) is acted on; only then the wait ends.
    assert await watch.next(anyio.current_time() + STEP_S) == [answer]
    with pytest.raises(Drained):
        await watch.next(anyio.current_time() + STEP_S)


@pytest.mark.slow
async def test_sigterm_ends_an_open_legacy_stream_and_the_retry_on_another_node_deletes(
    serving_url: str, prefix: str
) -> None:
    await seed_demo_notes(serving_url, False, prefix=prefix)
    drain = ("--drain-timeout", str(DRAIN_BOUND_S))
    async with open_redis(serving_url) as client, httpx.AsyncClient(timeout=STEP_S) as http:
        store = NoteStore(client, prefix=prefix)
        before = await tps_reports(store)
        with (
            node_process(serving_url, prefix, *drain) as a,
            node_process(serving_url, prefix, *drain) as b,
        ):
            init = await http.post(a.url, json=init_message(), headers=legacy_headers(None))
            session = init.headers["mcp-session-id"]
            headers = legacy_headers(session)
            async with http.stream("POST", a.url, json=delete_call(), headers=headers) as r:
                events = Events(r)
                ask = await events.next()
                assert ask["method"] == "elicitation/create"
                a.proc.send_signal(signal.SIGTERM)
                assert (await events.next())["method"] == "notifications/cancelled"
                assert_draining(await events.next())
                assert await events.ended()
            code = await trio.to_thread.run_sync(a.proc.wait, DRAIN_BOUND_S)
            assert code == 0

            # The client retries the call on node B: asked afresh, it deletes the note once.
            async with http.stream("POST", b.url, json=delete_call(2), headers=headers) as r:
                events = Events(r)
                ask = await events.next()
                note = pick_2024(ask)
                reply = {"jsonrpc": "2.0", "id": ask["id"], "result": confirm(note)}
                assert (await http.post(b.url, json=reply, headers=headers)).status_code == 202
                final = await events.next()
        assert final["id"] == 2
        assert final["result"]["structuredContent"] == {"deleted": True, "noteId": note}
        assert await deletions(store, note) == 1
        assert len(await tps_reports(store)) == len(before) - 1
