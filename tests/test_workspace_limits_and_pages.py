"""Bounded workspaces and unamplified reads. Embedded store and real Redis.

Findings reproduced: no limit on notes per workspace; every list and every round 1 read the
full body of every candidate note; ``notes_list`` silently returned only 1,000 of 2,000+ notes.
Now a workspace holds at most ``max_notes_per_workspace`` notes (checked in the create and move
scripts, so concurrent creates cannot overshoot), reads fetch no bodies, and ``notes_list``
pages with a signed cursor.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import trio

from nodes.protocol import Node
from nodes.results import META_ERROR
from nodes.serving.demo import ALICE_ARCHIVE, ALICE_NOTES, DEMO_TENANT, TEAM
from store.notes import NoteStore
from tests.conftest import raw
from tests.harness import accept, call_tool, make_nodes, random_seed, result

WS = {"workspaceUri": ALICE_NOTES}


def content(reply: Any) -> dict[str, Any]:
    out = result(reply)
    assert out["isError"] is False, out
    structured: dict[str, Any] = out["structuredContent"]
    return structured


def refusal(reply: Any) -> str:
    out = result(reply)
    assert out["isError"] is True, out
    text: str = out["content"][0]["text"]
    return text


async def count(store: NoteStore, workspace: str = ALICE_NOTES) -> int:
    return len((await store.list(DEMO_TENANT, workspace, 10_000)).notes)


# --- notes per workspace ------------------------------------------------------------------------


async def test_a_full_workspace_refuses_creates_until_a_note_leaves(store: NoteStore) -> None:
    node = make_nodes(store, 1, max_notes_per_workspace=3)[0]
    ids = [
        content(await call_tool(node, "notes_create", {**WS, "title": f"n{i}"}))["noteId"]
        for i in range(3)
    ]
    text = refusal(await call_tool(node, "notes_create", {**WS, "title": "one too many"}))
    assert text == f"{ALICE_NOTES} holds 3 notes, its limit; nothing was created"
    assert await count(store) == 3
    moved = await call_tool(
        node, "notes_move", {**WS, "noteId": ids[0], "targetWorkspaceUri": ALICE_ARCHIVE}
    )
    assert content(moved)["noteId"] == ids[0]
    content(await call_tool(node, "notes_create", {**WS, "title": "fits again"}))
    assert await count(store) == 3


async def test_concurrent_creates_never_overshoot_the_limit(store: NoteStore) -> None:
    node = make_nodes(store, 1, max_notes_per_workspace=5)[0]
    outcomes: list[bool] = []

    async def create(i: int) -> None:
        out = result(await call_tool(node, "notes_create", {**WS, "title": f"race {i}"}))
        outcomes.append(bool(out["isError"]))

    async with trio.open_nursery() as nursery:
        for i in range(12):
            nursery.start_soon(create, i)
    assert sorted(outcomes) == [False] * 5 + [True] * 7
    assert await count(store) == 5


async def test_moves_and_archives_into_a_full_workspace_are_refused_and_change_nothing(
    store: NoteStore,
) -> None:
    node = make_nodes(store, 1, max_notes_per_workspace=2)[0]
    for i in range(2):
        await store.create(DEMO_TENANT, ALICE_ARCHIVE, f"old {i}", "", "alice")
    note = await store.create(DEMO_TENANT, ALICE_NOTES, "TPS report", "", "alice")
    text = refusal(
        await call_tool(
            node, "notes_move", {**WS, "noteId": note.note_id, "targetWorkspaceUri": ALICE_ARCHIVE}
        )
    )
    assert text == f"{ALICE_ARCHIVE} holds 2 notes, its limit; nothing was moved"
    asked = result(await call_tool(node, "notes_archive", {**WS, "title": "TPS report"}))
    answer = {"confirm_archive": accept(note.note_id)["confirm_delete"]}
    out = result(
        await call_tool(
            node,
            "notes_archive",
            {**WS, "title": "TPS report"},
            state=asked["requestState"],
            responses=answer,
        )
    )
    assert out["isError"] is True
    assert "structuredContent" not in out
    message = "The target workspace holds 2 notes, its limit; nothing was archived"
    assert out["content"] == [{"type": "text", "text": message}]
    assert out["_meta"][META_ERROR] == {"error": message, "archived": False}
    assert (await store.get(DEMO_TENANT, note.note_id)) == note
    assert await count(store, ALICE_ARCHIVE) == 2


# --- reads fetch no bodies ----------------------------------------------------------------------


class ReplyBytes:
    """Counts the characters of every store script reply (what Redis sent back)."""

    def __init__(self, store: NoteStore) -> None:
        self.total = 0
        inner = store._run

        async def counting(name: str, keys: list[str], args: list[str | int]) -> list[Any]:
            reply = await inner(name, keys, args)
            self.total += sum(len(str(part)) for part in reply)
            return reply

        store._run = counting  # type: ignore[method-assign]


async def test_round_one_and_list_read_no_bodies(store: NoteStore) -> None:
    body = "b" * 60_000
    for _ in range(20):
        await store.create(DEMO_TENANT, ALICE_NOTES, "TPS report", body, "alice")
    node = make_nodes(store, 1)[0]
    read = ReplyBytes(store)
    asked = result(await call_tool(node, "notes_delete", {**WS, "title": "TPS report"}))
    assert asked["resultType"] == "input_required"
    archive = result(await call_tool(node, "notes_archive", {**WS, "title": "TPS report"}))
    assert archive["resultType"] == "input_required"
    listed = content(await call_tool(node, "notes_list", WS))
    assert len(listed["notes"]) == 20
    # Three reads of 20 notes with 60 kB bodies: 3.6 MB with bodies; a few kB without.
    assert read.total < 20_000, read.total


# --- notes_list pages ---------------------------------------------------------------------------


async def pages(
    node: Node, arguments: dict[str, Any], *, principal: str = "alice", limit: int = 100
) -> list[list[dict[str, Any]]]:
    """Every page of a listing, following nextCursor (at most ``limit`` pages)."""
    out: list[list[dict[str, Any]]] = []
    cursor: str | None = None
    for _ in range(limit):
        args = dict(arguments) if cursor is None else {**arguments, "cursor": cursor}
        page = content(await call_tool(node, "notes_list", args, principal=principal))
        out.append(page["notes"])
        cursor = page.get("nextCursor")
        if cursor is None:
            return out
    raise AssertionError(f"more than {limit} pages")


async def test_2500_notes_list_completely_across_pages_without_duplicates(
    store: NoteStore,
) -> None:
    created = set()
    for i in range(2_500):
        created.add((await store.create(DEMO_TENANT, ALICE_NOTES, f"n{i}", "", "alice")).note_id)
    node = make_nodes(store, 1, list_page_size=300)[0]
    listed = await pages(node, WS)
    assert [len(p) for p in listed] == [300] * 8 + [100]
    seen = [n["noteId"] for page in listed for n in page]
    assert len(seen) == len(set(seen)) == 2_500
    assert set(seen) == created


async def test_a_listing_survives_concurrent_creates_and_deletes(store: NoteStore) -> None:
    rng = random.Random(random_seed())
    stable = {
        (await store.create(DEMO_TENANT, ALICE_NOTES, "s", "", "a")).note_id for _ in range(60)
    }
    doomed = [
        (await store.create(DEMO_TENANT, ALICE_NOTES, "d", "", "a")).note_id for _ in range(30)
    ]
    node = make_nodes(store, 1, list_page_size=7)[0]
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(100):
        args = WS if cursor is None else {**WS, "cursor": cursor}
        page = content(await call_tool(node, "notes_list", args))
        seen += [n["noteId"] for n in page["notes"]]
        # Between pages, others delete and create notes.
        if doomed:
            victim = doomed.pop(rng.randrange(len(doomed)))
            assert await raw(store).delete([store.keys(DEMO_TENANT).note(victim)]) == 1
        await store.create(DEMO_TENANT, ALICE_NOTES, "new", "", "a")
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    assert len(seen) == len(set(seen))
    assert stable <= set(seen)


async def test_a_tampered_or_foreign_cursor_is_refused(store: NoteStore) -> None:
    for _ in range(5):
        await store.create(DEMO_TENANT, ALICE_NOTES, "TPS report", "", "alice")
        await store.create(DEMO_TENANT, TEAM, "TPS report", "", "alice")
    node = make_nodes(store, 1, list_page_size=2)[0]
    first = content(await call_tool(node, "notes_list", WS))
    cursor = first["nextCursor"]
    assert content(await call_tool(node, "notes_list", {**WS, "cursor": cursor}))["notes"]
    prefix, kid, payload, mac = cursor.split(".")
    flipped = payload[:-2] + ("A" if payload[-2] != "A" else "B") + payload[-1]
    other = make_nodes(store, 1, list_page_size=2)[0]  # another cluster: another key ring
    refused = [
        (WS, ".".join((prefix, kid, flipped, mac))),
        (WS, ".".join((prefix, kid, payload, mac[::-1]))),
        (WS, cursor + "x"),
        (WS, "not a cursor"),
        ({"workspaceUri": TEAM}, cursor),  # another workspace
        ({**WS, "title": "TPS report"}, cursor),  # another title filter
    ]
    for arguments, bad in refused:
        text = refusal(await call_tool(node, "notes_list", {**arguments, "cursor": bad}))
        assert text.startswith("Invalid cursor"), text
    assert refusal(await call_tool(other, "notes_list", {**WS, "cursor": cursor})).startswith(
        "Invalid cursor"
    )
    bob_ws = {"workspaceUri": TEAM}
    bob_cursor = content(await call_tool(node, "notes_list", bob_ws, principal="alice"))[
        "nextCursor"
    ]
    text = refusal(
        await call_tool(node, "notes_list", {**bob_ws, "cursor": bob_cursor}, principal="bob")
    )
    assert text.startswith("Invalid cursor")


@pytest.mark.parametrize("size", [1, 3])
async def test_a_title_filtered_listing_pages_too(store: NoteStore, size: int) -> None:
    ids = {
        (await store.create(DEMO_TENANT, ALICE_NOTES, "same", "", "a")).note_id for _ in range(7)
    }
    await store.create(DEMO_TENANT, ALICE_NOTES, "other", "", "a")
    node = make_nodes(store, 1, list_page_size=size)[0]
    listed = await pages(node, {**WS, "title": "same"})
    assert {n["noteId"] for page in listed for n in page} == ids
    assert all(len(p) <= size for p in listed)
