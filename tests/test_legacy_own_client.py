"""Legacy sessions on the store's own Redis client, as a node opens them (``cluster.asgi``).

Layer: tests. The session store runs on ``RespRedis`` (one connection, so anything queued behind
a blocking read would wait for it) with its blocking ``XREAD`` on a client of its own
(``store.client_factory.blocking_client``). While a read blocks, calls on the main client are
answered: the read is seen still waiting when they return (its end needs the wake below, or its
block bound far beyond the test). Then the wake ends it, and an answer delivered to a session is
read back through the same path.
"""

from __future__ import annotations

import trio

from store.client_factory import blocking_client
from store.resp_client import RespRedis
from store.sessions import SessionStore
from tests.conftest import new_prefix, suite_redis_url

BLOCK_MS = 60_000
"""The blocking read's bound: far beyond the test, so only the wake ends it."""
STEP_S = 30.0
"""A guard against a hang, not a measurement."""


async def blocked_in_xread(client: RespRedis) -> None:
    """Until Redis lists a connection blocked in XREAD (the read reached it)."""
    while True:
        listing = str(await client.execute("CLIENT", "LIST", "TYPE", "normal"))
        if "cmd=xread" in listing:
            return
        await trio.sleep(0.01)


async def test_a_blocking_inbox_read_holds_no_connection_the_store_s_calls_need() -> None:
    url = suite_redis_url()
    prefix = new_prefix()
    async with RespRedis.from_url(url, client_name="own-legacy", max_connections=1) as client:
        blocking = blocking_client(client, BLOCK_MS)
        assert blocking is not None
        assert blocking.max_connections == 1
        async with blocking:
            sessions = SessionStore(client, prefix=prefix, blocking=blocking)
            sid, _ = await sessions.create("alice", "2025-11-25", {}, {}, 1_000, 4)
            read_ended = trio.Event()
            batches = []

            async def read() -> None:
                batch = await sessions.read_inboxes(
                    {sid: "0-0"}, block_ms=BLOCK_MS, wake=("reader-1", "$")
                )
                batches.append(batch)
                read_ended.set()

            with trio.fail_after(STEP_S):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(read)
                    await blocked_in_xread(client)
                    record = await sessions.load(sid)
                    assert record is not None
                    assert record.principal == "alice"
                    assert not read_ended.is_set(), "the read ended without an entry or a wake"
                    await sessions.wake("reader-1")
                    await read_ended.wait()
            assert batches[0].wake_position is not None
            assert batches[0].sessions == {}

            rid = "nc-" + "r" * 20
            assert await sessions.open_request(sid, rid, 60_000)
            assert await sessions.deliver(sid, rid, '{"ok": true}') == "ok"
            with trio.fail_after(STEP_S):
                position, entries = await sessions.read_inbox(sid, "0-0", block_ms=1_000)
            assert [(e.kind, e.request_id, e.body) for e in entries] == [
                ("answer", rid, '{"ok": true}')
            ]
            assert position == entries[-1].entry_id
            assert await sessions.end(sid)
