"""A write whose Redis reply is lost is applied once, and its request learns what happened.

Layer: tests. The store/node half, on a ``redis-server`` of this module's own (and the
embedded store where it can): a reply-dropping proxy (``cluster.reply_dropping_proxy``) lets
Redis run a script and then loses its reply, and ``CLIENT PAUSE WRITE`` stalls Redis past the
node's stream timeout. The node's Redis client never re-sends by itself; the store re-sends a
script whose reply it lost, and every write script records its operation id with its write, so
the re-send gets the first run's result: one ``notes_create`` is one note, one ``notes_update``
one version step, one ``notes_move`` says it moved the note, a setup page completion answers
success. When every re-send is lost too, the node answers "outcome unknown" and a retry with
the same idempotency key gets the recorded result.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import pytest
import redis
import trio

from cluster.reply_dropping_proxy import DropMode, ReplyDroppingProxy, open_reply_dropping_proxy
from nodes import http
from nodes.auth import TokenTable
from nodes.idempotency import META_IDEMPOTENCY_KEY
from nodes.protocol import Node, Reply
from nodes.results import META_REPLAY
from nodes.serving.demo import DEMO_TENANT, DEMO_TOKENS
from store.api import Confirmation, StoreUnavailable
from store.client_factory import CLIENT_ENV, client_kind, redis_client, sync_client
from store.journal import JournalEntry, read_journal, scan_keys
from store.notes import RESENDS, NoteStore
from store.redis_errors import NotSent, ReplyTimeout
from store.resp_client import RespRedis
from store.sessions import SessionStore
from tests.asgi_driver import Exchange, request
from tests.harness import call_tool, make_nodes, meta, rpc
from tests.own_redis import OwnRedis, own_redis
from tests.test_setup_url import ALICE, FORM, PUBLIC, SECRET, configured, retry, start

T = TypeVar("T")

NOTES = "file:///Users/alice/Documents/Notes"
ARCHIVE = "file:///Users/alice/Documents/Archive"
SHORT_TIMEOUT_S = 1.0
"""The nodes' Redis timeout in these tests: a stall past it is an unknown outcome. It bounds a
whole call on the store's own client, the connect (through the proxy) included, so it leaves
room for a loaded machine: at 0.3 s a connect alone sometimes ran out of it."""
TOKENS = TokenTable.from_plain(DEMO_TOKENS)
BEARER = {"authorization": f"Bearer {ALICE}"}


@pytest.fixture(scope="module")
def server() -> Iterator[OwnRedis]:
    """A Redis of this module's own (a pause stalls every client of a server)."""
    with own_redis(None) as r:
        yield r


@pytest.fixture(autouse=True, params=["resp", "coredis"])
def note_client(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test on the store's own Redis client, then on coredis (``NOTES_CLUSTER_REDIS_CLIENT``):
    neither may turn a lost reply into a second write."""
    monkeypatch.setenv(CLIENT_ENV, request.param)
    return str(request.param)


@pytest.fixture(params=["own-redis", "embedded"])
def upstream(request: pytest.FixtureRequest, server: OwnRedis, embedded_url: str) -> str:
    """The Redis behind the proxy: this module's own, and the embedded store."""
    return server.url if request.param == "own-redis" else embedded_url


@dataclass
class Rig:
    """One node whose store talks to Redis through a reply-dropping proxy."""

    node: Node
    store: NoteStore
    proxy: ReplyDroppingProxy
    url: str
    prefix: str
    coredis: Any
    """A coredis client through the same proxy (the legacy sessions still use coredis)."""

    def drop_script(self, name: str, n: int = 1, mode: DropMode = "close") -> None:
        """Lose the replies of the next ``n`` runs of script ``name``."""
        sha = self.store.script_digests()[name].encode()
        self.proxy.drop_next(n, matching=lambda args: len(args) > 1 and args[1] == sha, mode=mode)

    def journal(self) -> list[JournalEntry]:
        sync = sync_client(self.url)
        try:
            return read_journal(sync, self.prefix, [DEMO_TENANT])
        finally:
            sync.close()


@asynccontextmanager
async def rig(upstream: str, **overrides: Any) -> AsyncIterator[Rig]:
    """A node over the proxy; the test's keys are deleted afterwards."""
    parts = httpx.URL(upstream)
    prefix = "ncl" + secrets.token_hex(5)
    try:
        async with open_reply_dropping_proxy(parts.host, int(parts.port or 6379)) as proxy:
            client = redis_client(proxy.url(0), stream_timeout_s=SHORT_TIMEOUT_S)
            own = RespRedis.from_url(proxy.url(0), timeout_s=SHORT_TIMEOUT_S)
            async with client, own:
                store = NoteStore(own if client_kind() == "resp" else client, prefix=prefix)
                await store.check_ready()  # scripts loaded: a dropped EVALSHA is one that ran
                node = make_nodes(store, 1, public_url=PUBLIC, **overrides)[0]
                yield Rig(node, store, proxy, upstream, prefix, client)
    finally:
        sync = sync_client(upstream)
        keys = list(scan_keys(sync, f"{prefix}:*"))
        if keys:
            sync.delete(*keys)
        sync.close()


def structured(reply: Reply) -> dict[str, Any]:
    assert reply.status == 200, reply
    assert reply.body is not None
    res: dict[str, Any] = reply.body["result"]
    assert res["isError"] is False, res
    return res


def with_key(key: str) -> dict[str, Any]:
    return {**meta(), META_IDEMPOTENCY_KEY: key}


async def create(rig_: Rig, title: str, key: str | None = None) -> Reply:
    params: dict[str, Any] = {
        "name": "notes_create",
        "arguments": {"workspaceUri": NOTES, "title": title, "body": "b"},
    }
    if key is not None:
        params["_meta"] = with_key(key)
    return await rpc(rig_.node, "tools/call", params)


async def titled(rig_: Rig, title: str) -> list[str]:
    snap = await rig_.store.find(DEMO_TENANT, NOTES, title)
    return [n.note_id for n in snap.notes]


@pytest.mark.parametrize("mode", ["close", "stall"])
async def test_one_notes_create_whose_reply_is_lost_gives_one_note(
    upstream: str, mode: DropMode
) -> None:
    async with rig(upstream) as r:
        r.drop_script("create", mode=mode)
        res = structured(await create(r, "Lost reply"))
        assert r.proxy.statistics().dropped == 1
        # close: the dropped connection, then one re-send. stall: the timeout, then a re-send,
        # which may first meet the silent connection (cut, never run) if the client reuses it.
        resent = r.store.statistics().resent
        assert resent == 1 if mode == "close" else 1 <= resent <= RESENDS
        note_id = res["structuredContent"]["noteId"]
        assert await titled(r, "Lost reply") == [note_id]
        creates = [e for e in r.journal() if e.op == "create"]
        assert [e.note for e in creates] == [note_id]
        assert creates[0].op_id.startswith("r")
        assert META_REPLAY not in res.get("_meta", {}), "the request's own write is no replay"


async def test_one_notes_update_whose_reply_is_lost_is_one_version_step(upstream: str) -> None:
    async with rig(upstream) as r:
        note_id = structured(await create(r, "Edit me"))["structuredContent"]["noteId"]
        r.drop_script("update")
        args = {"workspaceUri": NOTES, "noteId": note_id, "body": "edited"}
        res = structured(await call_tool(r.node, "notes_update", args))
        assert r.proxy.statistics().dropped == 1
        assert res["structuredContent"]["version"] == 2
        note = await r.store.get(DEMO_TENANT, note_id)
        assert note is not None
        assert (note.version, note.body) == (2, "edited")
        updates = [e for e in r.journal() if e.op == "update"]
        assert [(e.note, e.version) for e in updates] == [(note_id, 2)]


async def test_one_notes_move_whose_reply_is_lost_reports_the_move(upstream: str) -> None:
    async with rig(upstream) as r:
        note_id = structured(await create(r, "Move me"))["structuredContent"]["noteId"]
        r.drop_script("move")
        args = {"workspaceUri": NOTES, "noteId": note_id, "targetWorkspaceUri": ARCHIVE}
        res = structured(await call_tool(r.node, "notes_move", args))
        assert r.proxy.statistics().dropped == 1
        assert res["structuredContent"]["uri"] == f"{ARCHIVE}/{note_id}.md"
        assert res["structuredContent"]["version"] == 2
        head = await r.store.head(DEMO_TENANT, note_id)
        assert head is not None
        assert (head.workspace, head.version) == (ARCHIVE, 2)
        moves = [e for e in r.journal() if e.op == "move"]
        assert [(e.note, e.to) for e in moves] == [(note_id, ARCHIVE)]


async def test_a_setup_completion_whose_reply_is_lost_answers_success(upstream: str) -> None:
    async with rig(upstream) as r:
        app = http.make_app(r.node, TOKENS)
        state, link = await start(r.node)
        path = httpx.URL(link).path
        r.drop_script("setup")
        body = f"api_key={SECRET}"
        headers = {**FORM, **BEARER, "content-length": str(len(body))}
        done = await request(app, "POST", path, headers, [body.encode()])
        assert r.proxy.statistics().dropped == 1
        assert done.status == 200, done.body[:300]
        assert b"Report service connected" in done.body
        assert configured(await retry(r.node, state))
        # A second completion of the used link is still refused: only re-sends are answered.
        again = await request(app, "POST", path, headers, [body.encode()])
        assert again.status == 409


async def test_a_confirmation_whose_reply_is_lost_is_executed_not_replayed(upstream: str) -> None:
    async with rig(upstream) as r:
        note_id = structured(await create(r, "Delete me"))["structuredContent"]["noteId"]
        args = {"workspaceUri": NOTES, "title": "Delete me"}
        first = (await call_tool(r.node, "notes_delete", args)).body
        assert first is not None
        state = first["result"]["requestState"]
        r.drop_script("confirm")
        answer = {"action": "accept", "content": {"noteId": note_id, "confirm": True}}
        reply = await call_tool(
            r.node, "notes_delete", args, state=state, responses={"confirm_delete": answer}
        )
        res = structured(reply)
        assert res["structuredContent"] == {"deleted": True, "noteId": note_id}
        assert META_REPLAY not in res.get("_meta", {})
        assert [e.note for e in r.journal() if e.op == "delete"] == [note_id]


GRACE_MS = 200
"""The replay grace of the store in the re-send-past-grace test: short, so its wait is too."""


@pytest.mark.parametrize(
    ("first_send", "ran"),
    [(ReplyTimeout("no reply in time"), True), (NotSent("refused connect"), False)],
    ids=["reply-lost", "not-sent"],
)
async def test_a_confirmation_resent_past_its_replay_grace_is_unknown_unless_unsent(
    upstream: str, first_send: Exception, ran: bool
) -> None:
    """The first send of a confirm runs (or is not sent), its reply is lost, and the re-send
    reaches Redis after the state's expiry plus the replay grace (a starved node, a reply
    timeout longer than the grace): the replay entry that would tell is gone, so the script
    says "expired". After a lost reply that is no proof that nothing was decided: the store
    answers unknown (the node: outcome unknown), never "expired" (the node: a definite "not
    deleted" for a deleted note). After ``NotSent`` nothing ran, and "expired" is the answer."""
    prefix = "ncl" + secrets.token_hex(5)
    kind = client_kind()
    client = RespRedis.from_url(upstream) if kind == "resp" else redis_client(upstream)
    try:
        async with client:
            store = NoteStore(client, prefix=prefix, replay_grace_ms=GRACE_MS)
            note = await store.create(DEMO_TENANT, NOTES, "Resent late", "b", "alice")
            exp_ms = await store.redis_time_ms() + 300
            send = store._send
            sends: list[str] = []

            async def late_resend(name: str, keys: list[str], args: list[str | int]) -> Any:
                sends.append(name)
                if name != "confirm" or sends.count("confirm") > 1:
                    return await send(name, keys, args)
                if ran:
                    await send(name, keys, args)
                # The Redis clock has no event to wait on: poll it past the replay grace.
                while await store.redis_time_ms() <= exp_ms + GRACE_MS:  # noqa: ASYNC110
                    await trio.sleep(0.02)
                raise first_send

            store._send = late_resend  # type: ignore[method-assign]
            c = Confirmation(
                tenant=DEMO_TENANT,
                nonce=secrets.token_urlsafe(16),
                action="accept",
                answer_digest="d1",
                exp_ms=exp_ms,
                note_id=note.note_id,
                expected_version=1,
                title="Resent late",
                workspace=NOTES,
                principal="alice",
                tool="notes_delete",
            )
            if ran:
                with pytest.raises(StoreUnavailable, match="may have run"):
                    await store.confirm(c)
            else:
                assert (await store.confirm(c)).status == "expired"
            assert sends.count("confirm") == 2
            assert (await store.get(DEMO_TENANT, note.note_id) is None) == ran
    finally:
        sync = sync_client(upstream)
        keys = list(scan_keys(sync, f"{prefix}:*"))
        if keys:
            sync.delete(*keys)
        sync.close()


async def test_a_write_whose_every_reply_is_lost_is_unknown_and_its_keyed_retry_replays(
    upstream: str,
) -> None:
    async with rig(upstream) as r:
        key = "retry-" + secrets.token_hex(8)
        r.drop_script("create", RESENDS + 1)
        lost = await create(r, "Keyed", key)
        assert lost.status == 500
        assert lost.body is not None
        error = lost.body["error"]
        assert error["code"] == -32603
        assert error["data"] == {"retryable": True, "reason": "store_unavailable"}
        assert META_IDEMPOTENCY_KEY in error["message"]
        assert r.proxy.statistics().dropped == RESENDS + 1
        retried = structured(await create(r, "Keyed", key))
        assert retried["_meta"][META_REPLAY] is True
        note_id = retried["structuredContent"]["noteId"]
        assert await titled(r, "Keyed") == [note_id]
        assert [e.note for e in r.journal() if e.op == "create"] == [note_id]


@pytest.fixture
def paused_server(server: OwnRedis) -> Iterator[redis.Redis]:
    """A client of this module's Redis that pauses it; unpaused at the end whatever happens."""
    admin = redis.Redis(port=server.port, socket_timeout=5)
    try:
        yield admin
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        admin.close()


async def wait_until(predicate: Any, what: str) -> None:
    """Poll ``predicate`` (a counter of the store) until it holds, with a deadline: the store
    offers no event for its re-sends, and this is a test of it, not a hook in it."""
    with trio.fail_after(30):
        while not predicate():  # noqa: ASYNC110 - polling a counter, with a deadline
            await trio.sleep(0.01)


async def stalled_once(r: Rig, admin: redis.Redis, act: Callable[[], Awaitable[T]]) -> T:
    """Run ``act`` with Redis paused for writes; unpause once the store timed out and re-sent
    (the first send is held by the pause, past the stream timeout)."""
    admin.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
    out: list[T] = []
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            out.append(await act())

        nursery.start_soon(run)
        await wait_until(lambda: r.store.statistics().resent >= 1, "a re-send")
        admin.execute_command("CLIENT", "UNPAUSE")
    return out[0]


async def test_a_create_stalled_past_the_timeout_by_client_pause_is_one_note(
    server: OwnRedis, paused_server: redis.Redis
) -> None:
    async with rig(server.url) as r:
        res = structured(await stalled_once(r, paused_server, lambda: create(r, "Paused")))
        note_id = res["structuredContent"]["noteId"]
        assert await titled(r, "Paused") == [note_id]
        assert [e.note for e in r.journal() if e.op == "create"] == [note_id]


async def test_an_update_stalled_past_the_timeout_by_client_pause_is_one_version_step(
    server: OwnRedis, paused_server: redis.Redis
) -> None:
    async with rig(server.url) as r:
        note_id = structured(await create(r, "Paused edit"))["structuredContent"]["noteId"]
        args = {"workspaceUri": NOTES, "noteId": note_id, "body": "edited"}
        res = structured(
            await stalled_once(r, paused_server, lambda: call_tool(r.node, "notes_update", args))
        )
        assert res["structuredContent"]["version"] == 2
        note = await r.store.get(DEMO_TENANT, note_id)
        assert note is not None
        assert (note.version, note.body) == (2, "edited")
        assert [e.version for e in r.journal() if e.op == "update"] == [2]


async def test_a_move_stalled_past_the_timeout_by_client_pause_reports_the_move(
    server: OwnRedis, paused_server: redis.Redis
) -> None:
    async with rig(server.url) as r:
        note_id = structured(await create(r, "Paused move"))["structuredContent"]["noteId"]
        args = {"workspaceUri": NOTES, "noteId": note_id, "targetWorkspaceUri": ARCHIVE}
        res = structured(
            await stalled_once(r, paused_server, lambda: call_tool(r.node, "notes_move", args))
        )
        assert res["structuredContent"]["uri"] == f"{ARCHIVE}/{note_id}.md"
        assert [(e.note, e.to) for e in r.journal() if e.op == "move"] == [(note_id, ARCHIVE)]


async def test_a_setup_completion_stalled_past_the_timeout_by_client_pause_answers_success(
    server: OwnRedis, paused_server: redis.Redis
) -> None:
    async with rig(server.url) as r:
        app = http.make_app(r.node, TOKENS)
        state, link = await start(r.node)
        body = f"api_key={SECRET}"
        headers = {**FORM, **BEARER, "content-length": str(len(body))}
        path = httpx.URL(link).path

        async def complete() -> Exchange:
            return await request(app, "POST", path, headers, [body.encode()])

        done = await stalled_once(r, paused_server, complete)
        assert done.status == 200, done.body[:300]
        assert configured(await retry(r.node, state))
        assert [e.op for e in r.journal()].count("setup") == 1


async def test_a_create_stalled_past_every_resend_is_unknown_and_its_keyed_retry_is_one_note(
    server: OwnRedis, paused_server: redis.Redis
) -> None:
    async with rig(server.url) as r:
        key = "paused-" + secrets.token_hex(8)
        paused_server.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
        lost = await create(r, "Paused long", key)
        assert lost.status == 500
        assert lost.body is not None
        assert lost.body["error"]["code"] == -32603
        assert r.store.statistics().resent == RESENDS
        paused_server.execute_command("CLIENT", "UNPAUSE")
        retried = structured(await create(r, "Paused long", key))
        note_id = retried["structuredContent"]["noteId"]
        assert await titled(r, "Paused long") == [note_id]
        assert [e.note for e in r.journal() if e.op == "create"] == [note_id]


async def test_legacy_inbox_writes_are_resent_only_when_safe_and_never_written_twice(
    upstream: str,
) -> None:
    async with rig(upstream) as r:
        sessions = SessionStore(r.coredis, prefix=r.prefix)
        sid, _ = await sessions.create("alice", "2025-11-25", {}, {}, 0, 4)
        assert await sessions.open_request(sid, "nc-" + "a" * 16, 60_000)
        shas = {name: script.sha.encode() for name, script in sessions._scripts.items()}
        for script in sessions._scripts.values():  # loaded: a dropped EVALSHA is one that ran
            await r.coredis.script_load(script.script)

        def drop(name: str) -> None:
            r.proxy.drop_next(1, matching=lambda args: len(args) > 1 and args[1] == shas[name])

        # deliver is safe to run twice: the re-send finds the answer taken (a duplicate, which
        # the adapter accepts as it accepts a client's own copy) and the inbox holds it once.
        drop("deliver")
        assert await sessions.deliver(sid, "nc-" + "a" * 16, '{"result":{}}') == "duplicate"
        # An event is never re-sent: a lost reply is an unknown outcome, the event is there once.
        drop("event")
        with pytest.raises(StoreUnavailable):
            await sessions.announce(sid, "cancelled", "7")
        assert r.proxy.statistics().dropped == 2
        _, entries = await sessions.read_inbox(sid, "0-0", block_ms=1)
        assert [e.kind for e in entries] == ["answer", "cancelled"]
