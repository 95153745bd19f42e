"""Quotas bound everything a principal makes Redis hold, and nobody spends another's.

- **Writes per window** (``max_writes_per_principal`` per ``idempotency_window_ms``): every
  create, update and move leaves an operation record that lives one window at most, so the
  bound on writes is a bound on the records a principal keeps Redis holding (at most twice the
  limit). Updates count. A principal whose keyed updates reach the bound is refused with a
  quota error naming the setting; another principal's creates go on.
- **A shared workspace**: bob may edit alice's shared note but not make it larger (its bytes
  count against alice's quota), and may not move it into a workspace alice is not granted
  (she could neither list nor delete it there, and it would still count as hers).

Embedded store and a real Redis (conftest's ``store`` fixture), each Redis client.
"""

from __future__ import annotations

from typing import Any

import pytest

from nodes.idempotency import META_IDEMPOTENCY_KEY
from nodes.protocol import Node
from nodes.results import META_ERROR
from nodes.serving.demo import ALICE_NOTES, BOB_NOTES, DEMO_TENANT, TEAM
from store.keys import TenantKeys
from store.notes import NoteStore
from store.resp_client import RespRedis
from tests.conftest import raw
from tests.harness import call_tool, error, make_nodes, meta, result, rpc
from tests.own_redis import own_redis
from tests.test_principal_quotas import confirm, create, created, refusal, usage_in_step

WRITES = 40


async def keyed(node: Node, tool: str, arguments: dict[str, Any], key: str, who: str) -> Any:
    params = {"name": tool, "arguments": arguments, "_meta": {**meta(), META_IDEMPOTENCY_KEY: key}}
    return await rpc(node, "tools/call", params, principal=who)


async def records_of(store: NoteStore) -> int:
    keys = TenantKeys(store.prefix, DEMO_TENANT)
    return len([k async for k in raw(store).scan_iter(match=f"{keys.base}:op:*")])


async def test_keyed_updates_stop_at_the_writes_bound_and_another_principals_creates_go_on(
    store: NoteStore,
) -> None:
    (node,) = make_nodes(store, 1, max_writes_per_principal=WRITES)
    note = created(await create(node, ALICE_NOTES, "busy"))
    accepted = 1  # the create is a write too
    refused = ""
    for i in range(WRITES * 3):
        args = {"workspaceUri": ALICE_NOTES, "noteId": note, "body": f"edit {i}"}
        out = result(await keyed(node, "notes_update", args, f"key-{i:04d}-update-0000", "alice"))
        if out["isError"]:
            refused = out["content"][0]["text"]
            assert out["_meta"][META_ERROR]["quota"] == "writes"
            break
        accepted += 1
    assert accepted == WRITES
    assert refused.startswith(
        f"Quota exceeded: you made {WRITES} writes in this tenant within 3600 s, the "
        "max_writes_per_principal quota"
    ), refused
    assert refused.endswith("nothing was updated")
    # Creates count too: alice is refused there as well until her window ends.
    assert "max_writes_per_principal" in refusal(await create(node, ALICE_NOTES, "one more"))
    # alice's records are bounded by her writes; bob writes on as if alice were idle.
    assert await records_of(store) == WRITES
    for i in range(WRITES // 2):
        created(await create(node, BOB_NOTES, f"bob {i}", who="bob"))
    await usage_in_step(store)


async def test_a_retry_with_its_key_is_answered_past_the_bound_and_charges_nothing(
    store: NoteStore,
) -> None:
    (node,) = make_nodes(store, 1, max_writes_per_principal=2)
    args = {"workspaceUri": ALICE_NOTES, "title": "keyed", "body": ""}
    first = result(await keyed(node, "notes_create", args, "key-0001-create-00000", "alice"))
    again = result(await keyed(node, "notes_create", args, "key-0001-create-00000", "alice"))
    assert first["isError"] is False
    assert again["isError"] is False
    assert again["structuredContent"] == first["structuredContent"]
    created(await create(node, ALICE_NOTES, "second"))
    assert "max_writes_per_principal" in refusal(await create(node, ALICE_NOTES, "third"))
    replay = result(await keyed(node, "notes_create", args, "key-0001-create-00000", "alice"))
    assert replay["structuredContent"] == first["structuredContent"]


async def test_bob_may_not_grow_alices_shared_note_but_may_edit_it(store: NoteStore) -> None:
    (node,) = make_nodes(store, 1, max_bytes_per_principal=1024)
    note = created(await create(node, TEAM, "shared", "x" * 100))
    update = {"workspaceUri": TEAM, "noteId": note}
    grown = await rpc(
        node,
        "tools/call",
        {"name": "notes_update", "arguments": {**update, "body": "y" * 900}, "_meta": meta()},
        principal="bob",
    )
    assert refusal(grown) == (
        "Only the note's owner may make it larger: its bytes count against the owner's quota; "
        "nothing was updated"
    )
    same = await rpc(
        node,
        "tools/call",
        {"name": "notes_update", "arguments": {**update, "body": "z" * 100}, "_meta": meta()},
        principal="bob",
    )
    assert result(same)["isError"] is False
    assert (await usage_in_step(store))["alice"] == (1, len("shared") + 100)
    # alice's own quota is hers alone: she fills it in her private workspace.
    created(await create(node, ALICE_NOTES, "mine", "m" * (1024 - 106 - 4)))


async def test_bob_may_not_move_alices_note_where_she_cannot_reach_it(store: NoteStore) -> None:
    (node,) = make_nodes(store, 1)
    note = created(await create(node, TEAM, "hers"))
    args = {"workspaceUri": TEAM, "noteId": note, "targetWorkspaceUri": BOB_NOTES}
    moved = await rpc(
        node,
        "tools/call",
        {"name": "notes_move", "arguments": args, "_meta": meta()},
        principal="bob",
    )
    assert refusal(moved) == (
        f"The note's owner is not granted {BOB_NOTES}: they could neither list nor delete it "
        "there, so only they may move it there; nothing was moved"
    )
    found = await store.head(DEMO_TENANT, note)
    assert found is not None
    assert found.workspace == TEAM
    await usage_in_step(store)
    # bob's own note moves where he likes.
    his = created(await create(node, TEAM, "his", who="bob"))
    args = {"workspaceUri": TEAM, "noteId": his, "targetWorkspaceUri": BOB_NOTES}
    ok = await rpc(
        node,
        "tools/call",
        {"name": "notes_move", "arguments": args, "_meta": meta()},
        principal="bob",
    )
    assert result(ok)["isError"] is False


SMALL_REDIS = "3mb"
ALICE_WRITES = 500
MAX_UPDATES = 20_000


async def test_alices_keyed_updates_stop_at_her_bound_long_before_bob_is_refused() -> None:
    """On a Redis of its own with a small ``maxmemory``: alice's keyed updates of one note
    stop at her writes bound, bob's creates all succeed after, and the same updates without
    the bound fill the Redis to ``store_full``: the bound, not the memory, stopped her."""
    with own_redis(None, "--maxmemory", SMALL_REDIS) as server:
        async with RespRedis.from_url(server.url) as client:
            store = NoteStore(client, prefix="ncwrites")
            (node,) = make_nodes(store, 1, max_writes_per_principal=ALICE_WRITES)
            note = created(await create(node, ALICE_NOTES, "busy"))
            done = 1
            for i in range(ALICE_WRITES * 2):
                args = {"workspaceUri": ALICE_NOTES, "noteId": note, "body": f"edit {i}"}
                out = result(await keyed(node, "notes_update", args, f"alice-{i:06d}-key", "alice"))
                if out["isError"]:
                    assert "max_writes_per_principal" in out["content"][0]["text"], out
                    break
                done += 1
            assert done == ALICE_WRITES
            for i in range(10):
                created(await create(node, BOB_NOTES, f"bob {i}", who="bob"))
            (unbounded,) = make_nodes(store, 1, max_writes_per_principal=10**8)
            for i in range(MAX_UPDATES):
                args = {"workspaceUri": ALICE_NOTES, "noteId": note, "body": f"more {i}"}
                reply = await keyed(unbounded, "notes_update", args, f"more-{i:06d}-key-0", "alice")
                if reply.body is not None and "error" in reply.body:
                    assert error(reply)["data"]["reason"] == "store_full"
                    print(f"\n{SMALL_REDIS} Redis: bound {ALICE_WRITES}; unbounded: full at {i}")
                    assert i > ALICE_WRITES * 2  # the bound stopped alice long before this
                    break
            else:
                pytest.fail("unbounded keyed updates never filled the small Redis")


async def decline(node: Node, title: str, who: str = "alice") -> Any:
    """Both rounds of ``notes_delete`` for ``title``, the second declining."""
    args = {"workspaceUri": ALICE_NOTES, "title": title}
    asked = result(await call_tool(node, "notes_delete", args, principal=who))
    assert asked["resultType"] == "input_required", asked
    answer = {"confirm_delete": {"action": "decline"}}
    return await call_tool(
        node, "notes_delete", args, principal=who, state=asked["requestState"], responses=answer
    )


async def test_declines_and_archives_are_writes_and_deletes_are_not(store: NoteStore) -> None:
    (node,) = make_nodes(store, 1, max_writes_per_principal=3)
    one = created(await create(node, ALICE_NOTES, "one"))
    two = created(await create(node, ALICE_NOTES, "two"))
    assert result(await decline(node, "one"))["isError"] is False  # the third write
    refused = refusal(await decline(node, "one"))
    assert "max_writes_per_principal" in refused, refused
    archived = await confirm(node, "notes_archive", ALICE_NOTES, "two", two, "alice")
    assert "max_writes_per_principal" in refusal(archived)
    # A delete frees what a create made: never refused by the writes bound.
    done = await confirm(node, "notes_delete", ALICE_NOTES, "one", one, "alice")
    assert result(done)["structuredContent"]["deleted"] is True
