"""A client can retry any write safely with ``_meta["dev.notes-cluster/idempotencyKey"]``.

Layer: tests. The extension: the same key with the same arguments from the same
principal gets the recorded result, marked ``_meta["dev.notes-cluster/replay"] = true``, on any
node, whatever happened to the note since; the same key with other arguments or another tool is
-32602 ``idempotency_key_reused`` and writes nothing; another principal's key names another
operation; a key is forgotten after ``idempotency_window_ms``. The races a retry can run into
(the first request writing between the retry's look-up and its own checks) are forced in order
through a store whose record look-up calls a hook.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

from nodes.idempotency import META_IDEMPOTENCY_KEY
from nodes.protocol import Node, Reply
from nodes.results import META_ERROR, META_REPLAY
from nodes.serving.demo import ALICE_ARCHIVE, ALICE_NOTES, BOB_NOTES, DEMO_TENANT
from store.api import NoteStoreAPI, RecordedWrite
from store.client_factory import sync_client
from store.journal import read_journal
from store.notes import NoteStore
from tests.conftest import raw
from tests.harness import error, make_nodes, meta, result, rpc

KEY = "0b7c6f4e-8a52-4d1e-9f3a-6c2d1e0f9a11"


async def call(
    node: Node,
    tool: str,
    arguments: dict[str, Any],
    key: Any = KEY,
    principal: str = "alice",
) -> Reply:
    """``tools/call`` with the idempotency key ``key`` in ``_meta`` (None: no key)."""
    m = meta() if key is None else {**meta(), META_IDEMPOTENCY_KEY: key}
    params = {"name": tool, "arguments": arguments, "_meta": m}
    return await rpc(node, "tools/call", params, principal=principal)


def ok(reply: Reply) -> dict[str, Any]:
    assert reply.status == 200, reply
    res = result(reply)
    assert res["isError"] is False, res
    return res


def replayed(res: dict[str, Any]) -> bool:
    return bool(res.get("_meta", {}).get(META_REPLAY))


def journal_ops(store: NoteStore, redis_url: str) -> list[tuple[str, str]]:
    sync = sync_client(redis_url)
    try:
        return [(e.op, e.note) for e in read_journal(sync, store.prefix, [DEMO_TENANT])]
    finally:
        sync.close()


def create_args(title: str = "Keyed note", body: str = "b") -> dict[str, Any]:
    return {"workspaceUri": ALICE_NOTES, "title": title, "body": body}


async def test_a_create_retried_with_its_key_on_another_node_is_the_recorded_result(
    store: NoteStore, redis_url: str
) -> None:
    a, b = make_nodes(store, 2)
    first = ok(await call(a, "notes_create", create_args()))
    again = ok(await call(b, "notes_create", create_args()))
    assert not replayed(first)
    assert replayed(again)
    assert again["structuredContent"] == first["structuredContent"]
    assert again["content"] == first["content"]
    note_id = first["structuredContent"]["noteId"]
    assert [
        n.note_id for n in (await store.find(DEMO_TENANT, ALICE_NOTES, "Keyed note")).notes
    ] == [note_id]
    assert journal_ops(store, redis_url) == [("create", note_id)]
    assert b.statistics().replays == 1


async def test_an_update_retried_with_its_key_is_one_version_step(
    store: NoteStore, redis_url: str
) -> None:
    node = make_nodes(store, 1)[0]
    note_id = ok(await call(node, "notes_create", create_args(), key=None))["structuredContent"][
        "noteId"
    ]
    args = {"workspaceUri": ALICE_NOTES, "noteId": note_id, "body": "edited"}
    first = ok(await call(node, "notes_update", args))
    again = ok(await call(node, "notes_update", args))
    assert first["structuredContent"]["version"] == 2
    assert replayed(again)
    assert again["structuredContent"] == first["structuredContent"]
    note = await store.get(DEMO_TENANT, note_id)
    assert note is not None
    assert note.version == 2
    # Without a key the same arguments are a new edit: the version steps again.
    assert ok(await call(node, "notes_update", args, key=None))["structuredContent"]["version"] == 3


async def test_a_move_retried_with_its_key_reports_the_move_not_a_missing_note(
    store: NoteStore, redis_url: str
) -> None:
    node = make_nodes(store, 1)[0]
    note_id = ok(await call(node, "notes_create", create_args(), key=None))["structuredContent"][
        "noteId"
    ]
    args = {"workspaceUri": ALICE_NOTES, "noteId": note_id, "targetWorkspaceUri": ALICE_ARCHIVE}
    first = ok(await call(node, "notes_move", args))
    # The note was moved on since: the retry still gets what its request did.
    back = {"workspaceUri": ALICE_ARCHIVE, "noteId": note_id, "targetWorkspaceUri": ALICE_NOTES}
    ok(await call(node, "notes_move", back, key=None))
    again = ok(await call(node, "notes_move", args))
    assert replayed(again)
    assert again["structuredContent"] == first["structuredContent"]
    assert first["structuredContent"]["uri"] == f"{ALICE_ARCHIVE}/{note_id}.md"
    assert [op for op, _ in journal_ops(store, redis_url)] == ["create", "move", "move"]


async def test_a_key_reused_with_other_arguments_or_another_tool_is_refused_and_writes_nothing(
    store: NoteStore, redis_url: str
) -> None:
    node = make_nodes(store, 1)[0]
    note_id = ok(await call(node, "notes_create", create_args()))["structuredContent"]["noteId"]
    other_args = await call(node, "notes_create", create_args(body="other"))
    update = {"workspaceUri": ALICE_NOTES, "noteId": note_id, "body": "x"}
    other_tool = await call(node, "notes_update", update)
    for reply in (other_args, other_tool):
        assert reply.status == 400
        err = error(reply)
        assert err["code"] == -32602
        assert err["data"] == {"reason": "idempotency_key_reused"}
        assert "Idempotency key already used" in err["message"]
    assert journal_ops(store, redis_url) == [("create", note_id)]
    # Argument order is not a difference: the same arguments in another order replay.
    reordered = dict(reversed(list(create_args().items())))
    assert replayed(ok(await call(node, "notes_create", reordered)))


async def test_another_principals_same_key_is_another_operation(
    store: NoteStore, redis_url: str
) -> None:
    node = make_nodes(store, 1)[0]
    alice = ok(await call(node, "notes_create", create_args()))
    bob_args = {"workspaceUri": BOB_NOTES, "title": "Keyed note", "body": "b"}
    bob = ok(await call(node, "notes_create", bob_args, principal="bob"))
    assert not replayed(bob)
    assert bob["structuredContent"]["noteId"] != alice["structuredContent"]["noteId"]
    # Bob's key does not reach alice's record either way: alice's arguments from bob are his own
    # request, refused for his lack of access, never alice's recorded result.
    refused = result(await call(node, "notes_create", create_args(), principal="bob"))
    assert refused["isError"] is True
    assert "structuredContent" not in refused
    assert "noteId" not in refused["_meta"][META_ERROR]


async def test_a_key_is_forgotten_after_the_window_and_then_writes_again(
    store: NoteStore, redis_url: str
) -> None:
    node = make_nodes(store, 1, idempotency_window_ms=50)[0]
    first = ok(await call(node, "notes_create", create_args()))
    op_keys = f"{store.keys(DEMO_TENANT).base}:op:*"
    with trio.fail_after(10):
        while [k async for k in raw(store).scan_iter(match=op_keys)]:  # noqa: ASYNC110 - Redis TTL
            await trio.sleep(0.02)
    again = ok(await call(node, "notes_create", create_args()))
    assert not replayed(again)
    assert again["structuredContent"]["noteId"] != first["structuredContent"]["noteId"]
    assert len((await store.find(DEMO_TENANT, ALICE_NOTES, "Keyed note")).notes) == 2


async def test_a_malformed_key_is_invalid_params_and_nothing_runs(
    store: NoteStore, redis_url: str
) -> None:
    node = make_nodes(store, 1)[0]
    for bad in ("short", 12345678901234567890, "x" * 129, "has space in the key!!", None):
        m = {**meta(), META_IDEMPOTENCY_KEY: bad}
        params = {"name": "notes_create", "arguments": create_args(), "_meta": m}
        reply = await rpc(node, "tools/call", params)
        assert reply.status == 400, bad
        err = error(reply)
        assert err["code"] == -32602
        assert err["data"] == {"reason": "invalid_idempotency_key"}
    assert journal_ops(store, redis_url) == []


async def test_a_key_on_a_read_is_accepted_and_changes_nothing(store: NoteStore) -> None:
    node = make_nodes(store, 1)[0]
    ok(await call(node, "notes_create", create_args(), key=None))
    listed = ok(await call(node, "notes_list", {"workspaceUri": ALICE_NOTES}))
    assert len(listed["structuredContent"]["notes"]) == 1
    assert not replayed(listed)


class LookupHook:
    """The store, with a hook run once after the next record look-up that finds nothing."""

    def __init__(self, inner: NoteStore) -> None:
        self.inner = inner
        self.hook: Callable[[], Awaitable[None]] | None = None

    async def recorded_write(self, tenant: str, op_id: str) -> RecordedWrite | None:
        found = await self.inner.recorded_write(tenant, op_id)
        hook, self.hook = self.hook, None
        if found is None and hook is not None:
            await hook()
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def hooked(store: NoteStore) -> tuple[LookupHook, Node]:
    wrapper = LookupHook(store)
    proxy: NoteStoreAPI = wrapper  # type: ignore[assignment]
    return wrapper, make_nodes(proxy, 1)[0]


async def test_a_duplicate_create_racing_the_first_is_told_the_replay(
    store: NoteStore, redis_url: str
) -> None:
    wrapper, node = hooked(store)
    plain = make_nodes(store, 1)[0]
    firsts: list[dict[str, Any]] = []

    async def first_request() -> None:
        firsts.append(ok(await call(plain, "notes_create", create_args())))

    wrapper.hook = first_request  # the duplicate looked, found nothing; then the first wrote
    dup = ok(await call(node, "notes_create", create_args()))
    assert replayed(dup)
    assert not replayed(firsts[0])
    assert dup["structuredContent"] == firsts[0]["structuredContent"]
    assert len((await store.find(DEMO_TENANT, ALICE_NOTES, "Keyed note")).notes) == 1


async def test_a_keyed_move_retry_racing_its_first_request_reports_the_move(
    store: NoteStore, redis_url: str
) -> None:
    wrapper, node = hooked(store)
    plain = make_nodes(store, 1)[0]
    note_id = ok(await call(plain, "notes_create", create_args(), key=None))["structuredContent"][
        "noteId"
    ]
    args = {"workspaceUri": ALICE_NOTES, "noteId": note_id, "targetWorkspaceUri": ALICE_ARCHIVE}
    firsts: list[dict[str, Any]] = []

    async def first_request() -> None:
        firsts.append(ok(await call(plain, "notes_move", args)))

    wrapper.hook = first_request
    again = ok(await call(node, "notes_move", args))
    assert replayed(again)
    assert again["structuredContent"] == firsts[0]["structuredContent"]
    assert [op for op, _ in journal_ops(store, redis_url)] == ["create", "move"]


async def test_a_keyed_update_retry_whose_note_left_meanwhile_gets_the_recorded_edit(
    store: NoteStore, redis_url: str
) -> None:
    wrapper, node = hooked(store)
    plain = make_nodes(store, 1)[0]
    note_id = ok(await call(plain, "notes_create", create_args(), key=None))["structuredContent"][
        "noteId"
    ]
    args = {"workspaceUri": ALICE_NOTES, "noteId": note_id, "body": "edited"}
    move = {"workspaceUri": ALICE_NOTES, "noteId": note_id, "targetWorkspaceUri": ALICE_ARCHIVE}
    firsts: list[dict[str, Any]] = []

    async def first_request_then_a_move() -> None:
        firsts.append(ok(await call(plain, "notes_update", args)))
        ok(await call(plain, "notes_move", move, key=None))

    wrapper.hook = first_request_then_a_move
    # The retry's own checks now fail (the note is no longer in the workspace): the record wins.
    again = ok(await call(node, "notes_update", args))
    assert replayed(again)
    assert again["structuredContent"] == firsts[0]["structuredContent"]
    assert [op for op, _ in journal_ops(store, redis_url)] == ["create", "update", "move"]
