"""Waiting legacy calls hold no Redis connection, and a client that goes away is let go at once.

Layer: tests. On the real Redis: one node (served here with a Redis client of
its own name, so ``CLIENT LIST`` tells its connections from everyone else's) takes 100 legacy
``tools/call`` requests that each wait for the user's answer; their clients then drop. The node's
one inbox reader waits for them all: a call that held a pooled connection in a blocking ``XREAD``
would keep it until its state expired (48-64 blocked connections, other principals slowed for
minutes).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import httpx
import pytest
import redis
import trio

from cluster.local import seed_demo
from nodes.config import LegacyCaps
from nodes.http import serve_node
from nodes.legacy import LegacyAdapter, LegacyLimits, open_legacy_adapter
from nodes.protocol import Node
from nodes.serving.settings import demo_settings
from store.client_factory import open_redis
from store.notes import NoteStore
from store.sessions import SessionStore
from tests.conftest import require_real_redis
from tests.test_http_transport import good_headers, message
from tests.test_legacy import BOB_TOKEN, STEP_S, Events, legacy_headers
from tests.test_sdk_interop import ALICE_TOKEN, DELETE_ARGS

CALLS = 100
SESSIONS = 14
"""Alice's sessions the calls are spread over: within the default caps (16 sessions per
principal, 8 pending calls per session)."""
LIMITS = LegacyLimits(answer_timeout_s=120.0, keepalive_s=600.0)
"""Long waits and no keep-alive write within the test: only the disconnect can end a call."""


@pytest.fixture
def redis_url() -> str:
    """The real Redis only (overrides conftest's parameters): finding 1 is about its
    connections."""
    return require_real_redis()


@dataclass
class OneNode:
    url: str
    node: Node
    adapter: LegacyAdapter
    sessions: SessionStore
    redis_url: str
    client_name: str

    def connections(self) -> list[dict[str, Any]]:
        """This node's Redis connections (``CLIENT LIST``, by the node's client name)."""
        with redis.Redis.from_url(self.redis_url, decode_responses=True) as c:
            return [x for x in c.client_list() if x.get("name") == self.client_name]

    def in_use(self) -> int:
        """Connections leased from the node's pool now (coredis' pool statistics)."""
        return int(self.sessions.client.connection_pool.statistics.in_use_connections)

    async def blocked(self) -> int:
        """How many of them are blocked in a command (``XREAD ... BLOCK``)."""
        listing = await trio.to_thread.run_sync(self.connections)
        return sum(1 for x in listing if "b" in x.get("flags", ""))


@asynccontextmanager
async def one_node(
    redis_url: str,
    prefix: str,
    caps: LegacyCaps | None = None,
    limits: LegacyLimits = LIMITS,
) -> AsyncIterator[OneNode]:
    """One HTTP node over ``redis_url`` whose Redis connections carry a name of their own."""
    name = "nct-legacy-" + secrets.token_hex(4)
    settings = demo_settings()
    config = settings.node if caps is None else replace(settings.node, legacy=caps)
    async with open_redis(redis_url, client_name=name) as client:
        store = NoteStore(client, prefix=prefix)
        await seed_demo(store)
        node = Node(config, store)
        sessions = SessionStore(client, prefix=prefix)
        async with (
            open_legacy_adapter(node, sessions, limits) as adapter,
            trio.open_nursery() as nursery,
        ):
            url = await nursery.start(partial(serve_node, node, settings.tokens, legacy=adapter))
            yield OneNode(url, node, adapter, sessions, redis_url, name)
            nursery.cancel_scope.cancel()


async def open_session(http: httpx.AsyncClient, url: str, token: str = ALICE_TOKEN) -> str:
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "waiting-test", "version": "0"},
    }
    msg = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
    response = await http.post(url, json=msg, headers=legacy_headers(None, token))
    assert response.status_code == 200, response.text
    return str(response.headers["mcp-session-id"])


def delete_call(request_id: int = 1) -> dict[str, Any]:
    params = {"name": "notes_delete", "arguments": DELETE_ARGS}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def eventually(check: Callable[[], Any], what: str) -> None:
    """Poll ``check`` (sync or async) until true; fail after STEP_S."""
    with trio.move_on_after(STEP_S):
        while True:
            value = check()
            if hasattr(value, "__await__"):
                value = await value
            if value:
                return
            await trio.sleep(0.02)
    raise AssertionError(f"not within {STEP_S} s: {what}")


async def test_abandoned_calls_hold_no_redis_connection_and_another_principal_is_served(
    redis_url: str, key_prefix: str
) -> None:
    url = redis_url
    limits = httpx.Limits(max_connections=CALLS + 10)
    async with (
        one_node(url, key_prefix) as served,
        httpx.AsyncClient(timeout=STEP_S, limits=limits) as http,
    ):
        sessions = [await open_session(http, served.url) for _ in range(SESSIONS)]
        asked: list[dict[str, Any]] = []
        drop = trio.Event()

        async def wait_then_drop(i: int) -> None:
            headers = legacy_headers(sessions[i % SESSIONS])
            async with http.stream("POST", served.url, json=delete_call(), headers=headers) as r:
                events = Events(r)  # held: a collected line iterator would close the response
                asked.append(await events.next())
                await drop.wait()
            # Leaving the block closes the connection with the response unread: the client
            # is gone, as one that was killed or timed out.

        async with trio.open_nursery() as nursery:
            for i in range(CALLS):
                nursery.start_soon(wait_then_drop, i)
            await eventually(lambda: len(asked) == CALLS, "every call asked its user")
            assert all(a["method"] == "elicitation/create" for a in asked)
            waiting = served.adapter.statistics()
            assert (waiting.waiting_calls, waiting.pending_calls) == (CALLS, CALLS), waiting

            # While the 100 wait: at most the reader's one connection is blocked (in Redis'
            # own view) or leased from the pool (in the client's); the rest are free to serve.
            assert await served.blocked() <= 1
            assert served.in_use() <= 1

            # Another principal is served by that node meanwhile, through the store.
            listing = message("tools/call", {"name": "notes_list", "arguments": BOB_LIST})
            started = trio.current_time()
            response = await http.post(
                served.url, json=listing, headers=good_headers(listing, BOB_TOKEN)
            )
            took_ms = (trio.current_time() - started) * 1000
            opened = len(await trio.to_thread.run_sync(served.connections))
            print(f"\nwith {CALLS} calls waiting: bob's notes_list took {took_ms:.1f} ms;")
            print(f"the node has {opened} Redis connections, {await served.blocked()} blocked")
            assert response.status_code == 200, response.text
            notes = response.json()["result"]["structuredContent"]["notes"]
            assert [n["title"] for n in notes] == ["TPS report"]
            assert served.adapter.statistics().waiting_calls == CALLS

            drop.set()

        # Every call stops when its client goes away, not when its state expires.
        await eventually(
            lambda: served.adapter.statistics().pending_calls == 0, "every call stopped"
        )
        after = served.adapter.statistics()
        assert after.waiting_calls == 0
        assert after.disconnects == CALLS
        assert after.streams == 0  # none ran to its end
        # The reader, with nothing to read, leaves its blocking read within one block.
        await eventually(lambda: _zero(served.blocked()), "no connection blocked")
        # Redis stops listing the read as blocked when it sends the reply; the client gives the
        # connection back to its pool only after reading it, a moment later on a busy machine.
        await eventually(lambda: served.in_use() == 0, "no connection leased from the pool")
        # Nothing is counted pending in the store either: the sessions take new calls.
        for session in sessions:
            calls = await served.sessions.client.zcard(served.sessions.keys(session).calls)
            assert calls == 0


BOB_LIST = {"workspaceUri": "file:///Users/bob/Notes"}


async def _zero(count: Any) -> bool:
    return bool(await count == 0)


async def test_a_call_stops_waiting_the_moment_its_client_disconnects(
    redis_url: str, key_prefix: str
) -> None:
    url = redis_url
    async with (
        one_node(url, key_prefix) as served,
        httpx.AsyncClient(timeout=STEP_S) as http,
    ):
        session = await open_session(http, served.url)
        headers = legacy_headers(session)
        async with http.stream("POST", served.url, json=delete_call(), headers=headers) as r:
            events = Events(r)  # held: a collected line iterator would close the response
            ask = await events.next()
            assert ask["method"] == "elicitation/create"
            await eventually(
                lambda: served.adapter.statistics().waiting_calls == 1, "the call waits"
            )
        await eventually(
            lambda: served.adapter.statistics().waiting_calls == 0, "the call left the reader"
        )
        # A call is counted pending until it is off its session's list in the store: one more
        # round trip after it left the reader.
        await eventually(
            lambda: served.adapter.statistics().pending_calls == 0, "the call left its session"
        )
        stats = served.adapter.statistics()
        assert (stats.pending_calls, stats.waiting_calls, stats.disconnects) == (0, 0, 1)
        # Its answer, sent late, finds the request still open (and is dropped): 202.
        late = {"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "cancel"}}
        response = await http.post(served.url, json=late, headers=headers)
        assert response.status_code == 202
