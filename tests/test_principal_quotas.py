"""Per-principal quotas: notes and bytes per principal, and a principal's share of a shared
workspace.

Finding reproduced: with Redis near its memory limit, alice's notes filled it and bob's creates
then failed with ``store_full``; alice filled the shared team workspace to its 10,000-note cap,
after which bob was refused there. Now each principal's notes are counted in the scripts that
write them (``store/keys.py``: the tenant's usage hash, each workspace's), checked in the same
atomic step, and kept in step by create, update, move, delete and archive. Every test but the
last runs on the embedded store and on a real Redis; the last on a Redis of its own with a small
``maxmemory``.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from typing import Any

import pytest

from nodes.idempotency import META_IDEMPOTENCY_KEY
from nodes.protocol import Node
from nodes.results import META_ERROR
from nodes.serving.demo import ALICE_ARCHIVE, ALICE_NOTES, BOB_NOTES, DEMO_TENANT, TEAM
from store.api import Quota, QuotaExceeded, WriteOp
from store.client_factory import redis_client
from store.keys import TenantKeys
from store.notes import NoteStore
from tests.conftest import raw
from tests.harness import accept, call_tool, error, make_nodes, meta, result, rpc
from tests.own_redis import own_redis

SEED_ENV = "NOTES_CLUSTER_QUOTA_SEED"


def created(reply: Any) -> str:
    out = result(reply)
    assert out["isError"] is False, out
    note_id: str = out["structuredContent"]["noteId"]
    return note_id


def refusal(reply: Any) -> str:
    out = result(reply)
    assert out["isError"] is True, out
    text: str = out["content"][0]["text"]
    return text


async def create(node: Node, workspace: str, title: str, body: str = "", who: str = "alice") -> Any:
    args = {"workspaceUri": workspace, "title": title, "body": body}
    return await call_tool(node, "notes_create", args, principal=who)


async def confirm(node: Node, tool: str, workspace: str, title: str, note_id: str, who: str) -> Any:
    """Both rounds of ``notes_delete`` / ``notes_archive`` for ``note_id``."""
    args = {"workspaceUri": workspace, "title": title}
    asked = result(await call_tool(node, tool, args, principal=who))
    assert asked["resultType"] == "input_required", asked
    key = "confirm_delete" if tool == "notes_delete" else "confirm_archive"
    answer = {key: accept(note_id)["confirm_delete"]}
    return await call_tool(
        node, tool, args, principal=who, state=asked["requestState"], responses=answer
    )


async def usage_in_step(store: NoteStore) -> dict[str, tuple[int, int]]:
    """Assert the usage hashes equal what the stored notes add up to (no field left at 0);
    return notes and bytes by owner."""
    keys = TenantKeys(store.prefix, DEMO_TENANT)
    notes: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    per_workspace: dict[str, Counter[str]] = {}
    async for key in raw(store).scan_iter(match=f"{keys.base}:note:*"):
        fields = await raw(store).hgetall(key)
        owner = fields["owner"]
        notes[owner] += 1
        sizes[owner] += len(fields["title"].encode()) + len(fields["body"].encode())
        per_workspace.setdefault(fields["workspace"], Counter())[owner] += 1
    usage = {k: int(v) for k, v in (await raw(store).hgetall(keys.usage)).items()}
    counted = {f"n:{p}": n for p, n in notes.items()} | {f"b:{p}": b for p, b in sizes.items()}
    assert usage == counted, "a count that reached 0 leaves no field behind"
    for workspace in (ALICE_NOTES, ALICE_ARCHIVE, BOB_NOTES, TEAM):
        held = await raw(store).hgetall(keys.workspace_usage(workspace))
        assert {p: int(n) for p, n in held.items()} == dict(
            per_workspace.get(workspace, Counter())
        ), workspace
    return {p: (notes[p], sizes[p]) for p in notes}


# --- notes and bytes per principal --------------------------------------------------------------


async def test_past_the_notes_quota_a_principal_is_refused_and_others_are_not(
    store: NoteStore,
) -> None:
    node = make_nodes(store, 1, max_notes_per_principal=3)[0]
    ids = [created(await create(node, ALICE_NOTES, f"n{i}")) for i in range(2)]
    created(await create(node, TEAM, "in the team"))
    text = refusal(await create(node, ALICE_NOTES, "one too many"))
    assert text == (
        "Quota exceeded: you already own 3 notes in this tenant, the max_notes_per_principal "
        "quota; nothing was created"
    )
    assert result(await create(node, ALICE_NOTES, "one too many"))["_meta"][META_ERROR] == {
        "error": text,
        "quota": "notes",
    }
    for i in range(3):
        created(await create(node, BOB_NOTES, f"bob {i}", who="bob"))
    assert (await usage_in_step(store))["alice"] == (3, len("n0n1in the team"))
    done = result(await confirm(node, "notes_delete", ALICE_NOTES, "n0", ids[0], "alice"))
    assert done["structuredContent"]["deleted"] is True, done
    created(await create(node, ALICE_NOTES, "fits again"))
    await usage_in_step(store)


async def test_the_bytes_quota_counts_utf8_titles_and_bodies_through_create_update_delete(
    store: NoteStore,
) -> None:
    node = make_nodes(store, 1, max_bytes_per_principal=1000)[0]
    first = created(await create(node, ALICE_NOTES, "a", "é" * 250))  # 1 + 500 bytes
    second = created(await create(node, ALICE_NOTES, "b", "x" * 400))  # 401: 902 in all
    text = refusal(await create(node, ALICE_NOTES, "c", "y" * 98))  # 1001
    assert "max_bytes_per_principal quota; nothing was created" in text, text
    assert "more than 1000 bytes" in text, text
    created(await create(node, BOB_NOTES, "bob's", "z" * 900, who="bob"))
    update = {"workspaceUri": ALICE_NOTES, "noteId": first}
    grown = await call_tool(node, "notes_update", {**update, "body": "é" * 300})
    assert "max_bytes_per_principal quota; nothing was updated" in refusal(grown)
    shrunk = result(await call_tool(node, "notes_update", {**update, "body": "short"}))
    assert shrunk["isError"] is False, shrunk
    assert (await usage_in_step(store))["alice"] == (2, 6 + 401)
    created(await create(node, ALICE_NOTES, "c", "y" * 98))
    assert (await usage_in_step(store))["alice"] == (3, 6 + 401 + 99)
    done = result(await confirm(node, "notes_delete", ALICE_NOTES, "b", second, "alice"))
    assert done["structuredContent"]["deleted"] is True, done
    assert (await usage_in_step(store))["alice"] == (2, 6 + 99)
    created(await create(node, ALICE_NOTES, "d", "w" * 800))


# --- a write run again is charged once ----------------------------------------------------------


async def keyed(node: Node, tool: str, arguments: dict[str, Any], key: str) -> Any:
    """``tools/call`` as alice with the idempotency key ``key``."""
    params = {"name": tool, "arguments": arguments, "_meta": {**meta(), META_IDEMPOTENCY_KEY: key}}
    return await rpc(node, "tools/call", params, principal="alice")


async def test_a_write_run_again_under_its_operation_id_answers_the_first_run_and_charges_nothing(
    store: NoteStore,
) -> None:
    """The store's re-send after a lost reply and a keyed retry run the script again under the
    same operation id: the usage counts moved in the first run's atomic step only, and a replay
    is the first run's answer even where the quota is now full."""
    quota = Quota(notes=1, bytes=100, workspace_notes=1)
    create, edit, move = (
        WriteOp("create" + "0" * 12),
        WriteOp("update" + "0" * 12),
        WriteOp("move" + "0" * 14),
    )
    first = await store.create(
        DEMO_TENANT, ALICE_NOTES, "once", "b" * 10, "alice", quota=quota, op=create
    )
    again = await store.create(
        DEMO_TENANT, ALICE_NOTES, "once", "b" * 10, "alice", quota=quota, op=create
    )
    assert (again.note_id, again.replayed) == (first.note_id, True)
    assert await usage_in_step(store) == {"alice": (1, 4 + 10)}
    with pytest.raises(QuotaExceeded) as refused:
        await store.create(DEMO_TENANT, ALICE_NOTES, "twice", "b", "alice", quota=quota)
    assert (refused.value.quota, refused.value.used, refused.value.limit) == ("notes", 1, 1)
    updates = [
        await store.update(DEMO_TENANT, first, "once", "c" * 90, "alice", quota=quota, op=edit)
        for _ in range(2)
    ]
    assert [(u.status, u.replayed) for u in updates] == [("updated", False), ("updated", True)]
    assert await usage_in_step(store) == {"alice": (1, 4 + 90)}
    moves = [
        await store.move(
            DEMO_TENANT, first.note_id, ALICE_NOTES, TEAM, "alice", quota=quota, op=move
        )
        for _ in range(2)
    ]
    assert [(m.status, m.replayed) for m in moves] == [("moved", False), ("moved", True)]
    assert await usage_in_step(store) == {"alice": (1, 4 + 90)}
    held = await raw(store).hgetall(TenantKeys(store.prefix, DEMO_TENANT).workspace_usage(TEAM))
    assert held == {"alice": "1"}


async def test_writes_retried_with_their_idempotency_key_are_charged_to_the_quota_once(
    store: NoteStore,
) -> None:
    node = make_nodes(store, 1, max_notes_per_principal=2, max_notes_per_workspace=4)[0]
    args = {"workspaceUri": ALICE_NOTES, "title": "keyed", "body": "x" * 300}
    outs = [result(await keyed(node, "notes_create", args, "create-key-00001")) for _ in range(3)]
    assert [o["isError"] for o in outs] == [False] * 3, outs
    note_id = outs[0]["structuredContent"]["noteId"]
    assert {o["structuredContent"]["noteId"] for o in outs} == {note_id}
    assert (await usage_in_step(store))["alice"] == (1, 5 + 300)
    update = {"workspaceUri": ALICE_NOTES, "noteId": note_id, "body": "y" * 600}
    for _ in range(3):
        assert (
            result(await keyed(node, "notes_update", update, "update-key-00001"))["isError"]
            is False
        )
    assert (await usage_in_step(store))["alice"] == (1, 5 + 600)
    move = {"workspaceUri": ALICE_NOTES, "noteId": note_id, "targetWorkspaceUri": TEAM}
    for _ in range(3):
        assert result(await keyed(node, "notes_move", move, "move-key-0000001"))["isError"] is False
    await usage_in_step(store)
    # The retries took no place of their own: one more note fits, the next is refused.
    created(await create(node, ALICE_NOTES, "second"))
    assert "max_notes_per_principal" in refusal(await create(node, ALICE_NOTES, "third"))
    await usage_in_step(store)


# --- a principal's share of a shared workspace --------------------------------------------------


async def test_one_principal_cannot_fill_a_shared_workspace_for_the_others(
    store: NoteStore,
) -> None:
    node = make_nodes(store, 1, max_notes_per_workspace=4)[0]  # a share of 0.5: 2 each
    for i in range(2):
        created(await create(node, TEAM, f"alice {i}"))
    text = refusal(await create(node, TEAM, "alice 2"))
    assert text == (
        f"Quota exceeded: you already own 2 notes in {TEAM}, the share of a shared workspace "
        "one principal may fill (max_share_of_shared_workspace 0.5 of max_notes_per_workspace "
        "4); nothing was created"
    )
    for i in range(2):
        created(await create(node, TEAM, f"bob {i}", who="bob"))
    # A workspace of her own is not shared: its cap alone applies.
    for i in range(4):
        created(await create(node, ALICE_NOTES, f"private {i}"))
    assert "holds 4 notes, its limit" in refusal(await create(node, ALICE_NOTES, "private 4"))
    await usage_in_step(store)


async def test_moves_and_archives_into_a_shared_workspace_count_against_the_owners_share(
    store: NoteStore,
) -> None:
    node = make_nodes(store, 1, max_notes_per_workspace=4, archives={ALICE_NOTES: TEAM})[0]
    in_team = [created(await create(node, TEAM, f"team {i}")) for i in range(2)]
    mine = created(await create(node, ALICE_NOTES, "TPS report"))
    move = {"workspaceUri": ALICE_NOTES, "noteId": mine, "targetWorkspaceUri": TEAM}
    text = refusal(await call_tool(node, "notes_move", move))
    assert text.startswith("Quota exceeded: the note's owner already owns 2 notes in"), text
    assert text.endswith("nothing was moved"), text
    out = result(await confirm(node, "notes_archive", ALICE_NOTES, "TPS report", mine, "alice"))
    assert out["isError"] is True, out
    assert "structuredContent" not in out, out
    assert out["_meta"][META_ERROR]["archived"] is False
    assert out["_meta"][META_ERROR]["quota"] == "share"
    assert "nothing was archived" in out["_meta"][META_ERROR]["error"]
    assert (await store.get(DEMO_TENANT, mine)).workspace == ALICE_NOTES  # type: ignore[union-attr]
    # Bob moving alice's note out of the team frees her share, not his.
    back = {"workspaceUri": TEAM, "noteId": in_team[0], "targetWorkspaceUri": ALICE_NOTES}
    assert result(await call_tool(node, "notes_move", back))["isError"] is False
    out = result(await confirm(node, "notes_archive", ALICE_NOTES, "TPS report", mine, "alice"))
    assert out["structuredContent"]["archived"] is True, out
    await usage_in_step(store)


# --- the counters stay in step under any mix ----------------------------------------------------


@pytest.fixture
def seed() -> int:
    """The mix's seed: ``NOTES_CLUSTER_QUOTA_SEED`` or a random one, printed to replay it."""
    value = int(os.environ.get(SEED_ENV) or random.randrange(2**32))
    print(f"{SEED_ENV}={value}")
    return value


async def test_usage_stays_in_step_with_the_notes_under_a_random_mix(
    store: NoteStore, seed: int
) -> None:
    rng = random.Random(seed)
    node = make_nodes(
        store,
        1,
        max_notes_per_workspace=6,
        max_notes_per_principal=8,
        max_bytes_per_principal=1500,
        archives={ALICE_NOTES: TEAM},
    )[0]
    places = {"alice": [ALICE_NOTES, ALICE_ARCHIVE, TEAM], "bob": [BOB_NOTES, TEAM]}
    refused: Counter[str] = Counter()
    for step in range(150):
        who = rng.choice(["alice", "bob"])
        ws = rng.choice(places[who])
        listed = result(await call_tool(node, "notes_list", {"workspaceUri": ws}, principal=who))
        notes = listed["structuredContent"]["notes"]
        kind = rng.choice(["create", "create", "update", "move", "delete", "archive"])
        if kind == "create" or not notes:
            body = "é" * rng.randrange(0, 200)
            out = result(await create(node, ws, f"s{step}", body, who))
        else:
            note = rng.choice(notes)
            if kind == "update":
                body = "ü" * rng.randrange(300)
                args = {"workspaceUri": ws, "noteId": note["noteId"], "body": body}
                out = result(await call_tool(node, "notes_update", args, principal=who))
            elif kind == "move":
                target = rng.choice([w for w in places[who] if w != ws])
                args = {"workspaceUri": ws, "noteId": note["noteId"], "targetWorkspaceUri": target}
                out = result(await call_tool(node, "notes_move", args, principal=who))
            elif kind == "archive" and ws == ALICE_NOTES:
                out = result(
                    await confirm(node, "notes_archive", ws, note["title"], note["noteId"], who)
                )
            else:
                out = result(
                    await confirm(node, "notes_delete", ws, note["title"], note["noteId"], who)
                )
        if out.get("isError"):
            refused[out["_meta"][META_ERROR].get("quota", "other")] += 1
        if step % 20 == 0:
            await usage_in_step(store)
    await usage_in_step(store)
    print("refused by quota:", dict(refused))
    assert refused["notes"] + refused["bytes"] + refused["share"] > 0, (
        "the mix never reached a quota: it checked too little"
    )


# --- one principal cannot fill Redis for the others ---------------------------------------------

BODY = "m" * 60_000
MAXMEMORY = "8mb"
QUOTA_BYTES = 2 * 1024 * 1024
MAX_CREATES = 400
"""Bound on every fill loop (8 MB of Redis holds far fewer 60 KB notes)."""


async def test_alice_filling_her_quota_does_not_stop_bob_on_a_small_redis() -> None:
    with own_redis(None, "--maxmemory", MAXMEMORY) as server:
        client = redis_client(server.url)
        async with client:
            store = NoteStore(client, prefix="ncquota")
            node = make_nodes(store, 1, max_bytes_per_principal=QUOTA_BYTES)[0]
            alice = 0
            for i in range(MAX_CREATES):
                out = result(await create(node, ALICE_NOTES, f"fill {i}", BODY))
                if out["isError"]:
                    assert "max_bytes_per_principal" in out["content"][0]["text"], out
                    break
                alice += 1
            sizes = [len(f"fill {i}") + len(BODY) for i in range(MAX_CREATES)]
            assert sum(sizes[:alice]) <= QUOTA_BYTES < sum(sizes[: alice + 1])
            for i in range(10):
                created(await create(node, BOB_NOTES, f"bob {i}", BODY, who="bob"))
            created(await create(node, TEAM, "bob in the team", BODY, who="bob"))
            await usage_in_step(store)
            # Without the quota, the same fill reaches Redis' memory limit: the test's Redis is
            # small enough for the quota to be what stopped alice.
            unbounded = make_nodes(store, 1, max_bytes_per_principal=2**40)[0]
            for i in range(MAX_CREATES):
                reply = await create(unbounded, BOB_NOTES, f"more {i}", BODY, who="bob")
                if reply.body is not None and "error" in reply.body:
                    assert error(reply)["data"]["reason"] == "store_full"
                    break
            else:
                pytest.fail("an unbounded principal never filled the small Redis")
