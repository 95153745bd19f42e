"""The legacy 2025-11-25 adapter on a real 3-master Redis Cluster, started and stopped here.

Three HTTP nodes (``cluster.serve.serve_http_node``, which mounts the adapter) open the cluster as
production does (the URL is detected as a cluster). Every session script runs with a ``#!lua``
shebang, so Redis itself refuses any key outside the slot of the session's hash tag
(``{s:<sid>}``): a clean run is the server's proof that each script stays in one slot. The SDK in
legacy mode deletes once with every request on another node; a raw answer POSTed to one node
reaches the stream held by another (blocking XREAD on the inbox's master); sessions spread over
the masters. Under CI (``CI`` set) a cluster that cannot start fails the run; elsewhere the
module is skipped without ``redis-server``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import coredis
import httpx
import mcp_types as types
import pytest
import redis
import trio
from mcp.client import ClientRequestContext

import store.sessions
from cluster.redis_cluster import RedisClusterInfo, local_redis_cluster, redis_server_available
from cluster.serve import seed_demo_notes, start_http_nodes
from nodes.legacy import LEGACY_VERSION
from nodes.serving.settings import demo_settings
from store.client_factory import open_redis
from store.notes import NoteStore
from store.sessions import SessionStore
from tests.ci import in_ci
from tests.test_legacy import (
    ALICE_DOCS,
    LIMITS,
    NODES,
    STEP_S,
    Cluster,
    accepted,
    answer,
    confirm,
    deletions,
    initialize,
    legacy_headers,
    legacy_sdk_client,
    notify,
    open_call,
    pick_2024,
    post,
)
from tests.test_sdk_interop import DELETE_ARGS, Elicitations, tps_reports

SESSION_SCRIPTS = (
    "_CREATE",
    "_LOAD",
    "_SET_FIELDS",
    "_DELIVER",
    "_EVENT",
    "_END",
    "_OPEN_REQUEST",
    "_TRACK",
    "_BEGIN_CALL",
    "_WAKE",
)
SESSIONS = 12
"""Sessions opened by the spread test: all on one of 3 masters by chance has p ~ 3 / 3**12."""


def master_client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=5)


def keys_on(port: int, match: str) -> list[str]:
    """The keys matching ``match`` held by the server on ``port`` (a plain SCAN of that node)."""
    with master_client(port) as c:
        return [str(k) for k in c.scan_iter(match=match, count=1000)]


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[RedisClusterInfo]:
    """3 masters on free loopback ports; afterwards no key is left and every server is gone."""
    if not redis_server_available():
        if in_ci():
            pytest.fail("CI needs redis-server and redis-cli to start a Redis Cluster")
        pytest.skip("redis-server is not installed")
    with local_redis_cluster(masters=3, replicas=0) as rc:
        yield rc
        # Each test's key prefix was deleted by conftest's ``key_prefix``, on every master.
        left = {port: keys_on(port, "*") for port in rc.masters}
        assert all(not keys for keys in left.values()), left
    for pid in rc.pids.values():  # stopped and reaped
        assert not Path(f"/proc/{pid}").exists(), f"redis-server {pid} survived"
    assert not rc.directory.exists()


@pytest.fixture
def redis_url(redis_cluster: RedisClusterInfo) -> str:
    """Overrides conftest's: the store is the cluster (``key_prefix`` cleans up through the
    cluster-aware sync client)."""
    return redis_cluster.url


@pytest.fixture
def strict_session_scripts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every SessionStore built from now on (the nodes' too) flags its scripts with ``#!lua``:
    Redis then refuses a key outside the slot of the first key a script touched."""
    for name in SESSION_SCRIPTS:
        code = getattr(store.sessions, name)
        monkeypatch.setattr(store.sessions, name, "#!lua\n" + code)


@pytest.fixture
async def cluster(
    redis_url: str,
    key_prefix: str,
    nursery: trio.Nursery,
    strict_session_scripts: None,
    caplog: pytest.LogCaptureFixture,
) -> AsyncIterator[Cluster]:
    """Three legacy-capable HTTP nodes on the cluster, one shared settings (one key ring), the
    demo notes seeded under this test's prefix."""
    caplog.set_level(logging.WARNING)
    settings = demo_settings()
    await seed_demo_notes(redis_url, False, prefix=key_prefix)
    urls = await start_http_nodes(
        nursery,
        settings,
        redis_url,
        count=NODES,
        embedded=False,
        prefix=key_prefix,
        legacy_limits=LIMITS,
    )
    async with open_redis(redis_url) as client, httpx.AsyncClient(timeout=STEP_S) as http:
        assert isinstance(client, coredis.RedisCluster)
        notes = NoteStore(client, prefix=key_prefix, replay_grace_ms=1_000)
        yield Cluster(urls, notes, SessionStore(client, prefix=key_prefix), http)
    # No CROSSSLOT, MOVED or other store failure was swallowed into a log line.
    problems = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not problems, problems


async def test_the_sdk_in_legacy_mode_deletes_once_with_every_request_on_another_node(
    cluster: Cluster,
) -> None:
    before = await tps_reports(cluster.store)
    listed: list[str] = []

    async def list_roots(context: ClientRequestContext) -> types.ListRootsResult:
        listed.append("roots")
        return types.ListRootsResult(roots=[types.Root(uri=ALICE_DOCS)])

    callback = Elicitations("accept")
    async with legacy_sdk_client(
        cluster.urls, elicitation_callback=callback, list_roots_callback=list_roots
    ) as (client, rotation):
        assert client.protocol_version == LEGACY_VERSION
        result = await client.call_tool("notes_delete", DELETE_ARGS)

    assert result.is_error is False, result
    picked = next(k for k, v in before.items() if v == 1_719_835_200_000)
    assert result.structured_content == {"deleted": True, "noteId": picked}
    assert set(await tps_reports(cluster.store)) == set(before) - {picked}
    assert await deletions(cluster.store, picked) == 1
    assert listed == ["roots"]
    assert len(callback.shown) == 1
    methods = [h.method for h in rotation.hops]
    assert methods[:5] == [
        "initialize",
        "notifications/initialized",
        "tools/call",
        "answer",
        "answer",
    ]
    assert methods[-1] == "DELETE"
    call = rotation.hops[2]
    assert all(h.node != call.node for h in rotation.hops[3:5])
    assert rotation.session_id is not None
    assert await cluster.sessions.load(rotation.session_id) is None


async def test_a_raw_answer_posted_to_another_node_reaches_the_stream_on_the_cluster(
    cluster: Cluster,
) -> None:
    session = await initialize(cluster, node=0)
    async with open_call(cluster, 1, session, DELETE_ARGS) as events:
        ask = await events.next()
        note = pick_2024(ask)
        await accepted(cluster, 2, answer(ask["id"], confirm(note)), session)
        final = await events.next()
        assert await events.ended()
    assert final["id"] == 1
    assert final["result"]["structuredContent"] == {"deleted": True, "noteId": note}
    # A late copy to yet another node: accepted and dropped.
    await accepted(cluster, 0, answer(ask["id"], confirm(note)), session)
    inbox = await cluster.store.client.xrange(cluster.sessions.keys(session).inbox)
    assert [e.field_values["rid"] for e in inbox if e.field_values["kind"] == "answer"] == [
        ask["id"]
    ]
    assert await deletions(cluster.store, note) == 1
    assert note not in await tps_reports(cluster.store)


async def test_sessions_spread_over_the_masters_and_every_session_script_stays_in_its_slot(
    cluster: Cluster, redis_cluster: RedisClusterInfo, key_prefix: str
) -> None:
    caps = {"elicitation": {}, "roots": {"listChanged": True}}
    sessions = [
        await initialize(cluster, node=i % NODES, capabilities=caps) for i in range(SESSIONS)
    ]
    listing = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}
    for i, session in enumerate(sessions):
        # Every script once per session, each on another node: load (every request),
        # set_fields (initialized, roots), event (roots change, cancel), open_request, deliver.
        await accepted(
            cluster, (i + 1) % NODES, notify("notifications/roots/list_changed"), session
        )
        cancel = notify("notifications/cancelled", {"requestId": 99, "reason": "test"})
        await accepted(cluster, (i + 2) % NODES, cancel, session)
        assert (await post(cluster, i % NODES, listing, session)).status_code == 200
        assert await cluster.sessions.set_roots(session, (ALICE_DOCS,), 1)
        rid = store.sessions.new_request_id()
        assert await cluster.sessions.open_request(session, rid, 10_000)
        await accepted(cluster, (i + 1) % NODES, answer(rid, {"roots": []}), session)
        record = await cluster.sessions.load(session)
        assert record is not None
        assert record.initialized
        assert record.current_roots == (ALICE_DOCS,)
        kinds = [e.kind for e in (await cluster.sessions.read_inbox(session, "0-0", 1))[1]]
        assert kinds == ["roots_changed", "cancelled", "answer"]

    # Each master holds whole sessions (record, inbox, request marker together), and the
    # sessions are spread over more than one master.
    held: dict[int, set[str]] = {}
    for port in redis_cluster.masters:
        keys = keys_on(port, f"{key_prefix}:{{s:*")
        ids = {k.split("{s:", 1)[1].split("}", 1)[0] for k in keys}
        for sid in ids:
            k = cluster.sessions.keys(sid)
            assert {k.session, k.inbox} <= set(keys), sid
        held[port] = ids
    print(f"\nlegacy sessions per master: { {p: len(s) for p, s in held.items()} }")
    assert sorted(sid for ids in held.values() for sid in ids) == sorted(sessions)
    assert sum(1 for ids in held.values() if ids) > 1

    # DELETE on yet another node ends each session (the end script), wherever its slot lives.
    for i, session in enumerate(sessions):
        ended = await cluster.http.delete(
            cluster.urls[(i + 2) % NODES],
            headers=legacy_headers(session),
        )
        assert ended.status_code == 204
        assert await cluster.sessions.load(session) is None
