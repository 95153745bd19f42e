"""notes_archive: the confirming flow of notes_delete, moving the note to its workspace's archive.

Every test runs on the embedded store and on a real Redis (the ``store`` fixture). The archive of
alice's Notes is alice's Archive (``nodes.serving.demo.DEMO_ARCHIVES``, in ``tests.harness``'
config).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import trio

from nodes.protocol import Node, Reply
from nodes.results import META_REPLAY
from nodes.scope import Scope
from nodes.serving.demo import ALICE_ARCHIVE, ALICE_NOTES, BOB_NOTES, DEMO_TENANT, TEAM
from nodes.serving.settings import ConfigError, load_settings
from store.notes import NoteStore
from tests.harness import call_tool, demo_config, error, make_nodes, result, rpc
from tests.test_config import KEY_K1, KEY_K2, config_text, write
from tests.test_delete_flow import (
    assert_invalid_state,
    journal,
    present,
    seed,
    tool_failed,
)

ARCHIVE = "notes_archive"
ARGS: dict[str, Any] = {"workspaceUri": ALICE_NOTES, "title": "TPS report"}
KEY = "confirm_archive"


def accept(note_id: str, confirm: bool = True) -> dict[str, Any]:
    return {KEY: {"action": "accept", "content": {"noteId": note_id, "confirm": confirm}}}


async def ask(node: Node, args: dict[str, Any] | None = None) -> tuple[str, list[str]]:
    """Round 1: the sealed state and the offered note ids."""
    res = result(await call_tool(node, ARCHIVE, ARGS if args is None else args))
    assert res["resultType"] == "input_required", res
    form = res["inputRequests"][KEY]
    assert form["method"] == "elicitation/create"
    assert form["params"]["mode"] == "form"
    options = form["params"]["requestedSchema"]["properties"]["noteId"]["oneOf"]
    return res["requestState"], [o["const"] for o in options]


async def answer(
    node: Node, state: str, responses: dict[str, Any], args: dict[str, Any] | None = None
) -> Reply:
    return await call_tool(
        node, ARCHIVE, ARGS if args is None else args, state=state, responses=responses
    )


def archived(reply: Reply) -> tuple[dict[str, Any], bool]:
    """The structured content of a complete, non-error result and whether it is a replay."""
    assert reply.status == 200, reply
    res = result(reply)
    assert res["resultType"] == "complete", res
    assert res["isError"] is False, res
    return res["structuredContent"], bool(res.get("_meta", {}).get(META_REPLAY, False))


def archive_uri(note_id: str) -> str:
    return f"{ALICE_ARCHIVE}/{note_id}.md"


async def workspace_of(store: NoteStore, note_id: str) -> str | None:
    note = await store.get(DEMO_TENANT, note_id)
    return None if note is None else note.workspace


async def moves_of(store: NoteStore, note_id: str) -> list[dict[str, str]]:
    return [e for e in await journal(store) if e["op"] == "move" and e["note"] == note_id]


async def test_round_one_on_one_node_and_round_two_on_another_archives_the_chosen_note(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    node_a, node_b, node_c = make_nodes(store, 3)
    state, ids = await ask(node_a)
    assert ids == list(seeded.tps)

    content, replay = archived(await answer(node_b, state, accept(seeded.tps[1])))
    assert content == {"archived": True, "noteId": seeded.tps[1], "uri": archive_uri(seeded.tps[1])}
    assert not replay
    note = await store.get(DEMO_TENANT, seeded.tps[1])
    assert note is not None
    assert note.workspace == ALICE_ARCHIVE
    left = await store.find(DEMO_TENANT, ALICE_NOTES, "TPS report")
    assert [n.note_id for n in left.notes] == [seeded.tps[0], seeded.tps[2]]
    moved = await store.find(DEMO_TENANT, ALICE_ARCHIVE, "TPS report")
    assert [n.note_id for n in moved.notes] == [seeded.tps[1]]
    (entry,) = await moves_of(store, seeded.tps[1])
    assert entry["tool"] == ARCHIVE
    assert entry["nonce"]
    assert entry["ws"] == ALICE_NOTES
    assert entry["to"] == ALICE_ARCHIVE
    assert await present(store, seeded.all) == set(seeded.all), "archived, not deleted"

    # The same answer again on a third node: the recorded outcome, nothing moves twice.
    again, replay = archived(await answer(node_c, state, accept(seeded.tps[1])))
    assert again == content
    assert replay
    assert len(await moves_of(store, seeded.tps[1])) == 1


async def test_archive_asks_for_confirmation_even_when_one_note_matches(store: NoteStore) -> None:
    seeded = await seed(store)
    (node,) = make_nodes(store, 1)
    _, ids = await ask(node, {"workspaceUri": ALICE_NOTES, "title": "Groceries"})
    assert ids == [seeded.groceries]
    assert await workspace_of(store, seeded.groceries) == ALICE_NOTES


async def test_archive_is_listed_as_destructive_with_its_output_schema(store: NoteStore) -> None:
    (node,) = make_nodes(store, 1)
    tools = {t["name"]: t for t in result(await rpc(node, "tools/list", caps={}))["tools"]}
    tool = tools[ARCHIVE]
    assert tool["annotations"]["destructiveHint"] is True
    assert tool["annotations"]["readOnlyHint"] is False
    assert set(tool["inputSchema"]["required"]) == {"workspaceUri", "title"}
    assert set(tool["outputSchema"]["properties"]) == {"archived", "noteId", "uri"}


async def test_concurrent_duplicate_accepts_on_several_nodes_archive_exactly_once(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    nodes = make_nodes(store, 4)
    state, _ = await ask(nodes[0])
    replies: list[Reply] = []

    async def send(node: Node) -> None:
        replies.append(await answer(node, state, accept(seeded.tps[0])))

    async with trio.open_nursery() as nursery:
        for copy in range(8):
            nursery.start_soon(send, nodes[copy % 4])

    outcomes = [archived(r) for r in replies]
    expected = {"archived": True, "noteId": seeded.tps[0], "uri": archive_uri(seeded.tps[0])}
    assert all(content == expected for content, _ in outcomes)
    assert sum(1 for _, replay in outcomes if not replay) == 1
    assert len(await moves_of(store, seeded.tps[0])) == 1
    stats = [n.statistics() for n in nodes]
    assert sum(s.executions for s in stats) == 1
    assert sum(s.replays for s in stats) == 7


async def test_a_declined_archive_moves_nothing_and_the_state_cannot_be_reused(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    node_a, node_b = make_nodes(store, 2)
    state, _ = await ask(node_a)

    content, replay = archived(await answer(node_b, state, {KEY: {"action": "decline"}}))
    assert content == {"archived": False}
    assert not replay
    assert_invalid_state(await answer(node_a, state, accept(seeded.tps[0])))
    again, replay = archived(await answer(node_a, state, {KEY: {"action": "decline"}}))
    assert again == {"archived": False}
    assert replay
    assert await workspace_of(store, seeded.tps[0]) == ALICE_NOTES
    assert [e["op"] for e in await journal(store)].count("move") == 0


async def test_a_cancelled_archive_moves_nothing_and_the_state_stays_usable(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    node_a, node_b = make_nodes(store, 2)
    state, _ = await ask(node_a)
    before = await journal(store)

    content, _ = archived(await answer(node_b, state, {KEY: {"action": "cancel"}}))
    assert content == {"archived": False}
    assert await journal(store) == before, "a cancel writes nothing"
    content, _ = archived(await answer(node_a, state, accept(seeded.tps[2])))
    assert content["archived"] is True
    assert await workspace_of(store, seeded.tps[2]) == ALICE_ARCHIVE


async def test_a_note_deleted_between_the_rounds_is_a_tool_error_and_nothing_moves(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    node_a, node_b = make_nodes(store, 2)
    state, _ = await ask(node_a)
    delete_state = result(await call_tool(node_b, "notes_delete", ARGS))["requestState"]
    responses = {
        "confirm_delete": {
            "action": "accept",
            "content": {"noteId": seeded.tps[0], "confirm": True},
        }
    }
    await call_tool(node_b, "notes_delete", ARGS, state=delete_state, responses=responses)

    failure = tool_failed(await answer(node_a, state, accept(seeded.tps[0])))
    assert failure["archived"] is False
    assert "no longer exists" in failure["error"]
    assert await moves_of(store, seeded.tps[0]) == []


async def test_a_note_moved_elsewhere_between_the_rounds_stays_where_it_was_moved(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    node_a, node_b = make_nodes(store, 2)
    state, _ = await ask(node_a)
    move = {"workspaceUri": ALICE_NOTES, "noteId": seeded.tps[0], "targetWorkspaceUri": TEAM}
    assert not result(await call_tool(node_b, "notes_move", move))["isError"]

    failure = tool_failed(await answer(node_a, state, accept(seeded.tps[0])))
    assert failure["archived"] is False
    assert "no longer in the workspace" in failure["error"]
    assert await workspace_of(store, seeded.tps[0]) == TEAM


async def test_a_note_edited_between_the_rounds_is_offered_again(store: NoteStore) -> None:
    seeded = await seed(store)
    node_a, node_b = make_nodes(store, 2)
    state, _ = await ask(node_a)
    edit = {"workspaceUri": ALICE_NOTES, "noteId": seeded.tps[0], "body": "edited"}
    assert not result(await call_tool(node_b, "notes_update", edit))["isError"]

    res = result(await answer(node_a, state, accept(seeded.tps[0])))
    assert res["resultType"] == "input_required"
    assert res["requestState"] != state
    assert await workspace_of(store, seeded.tps[0]) == ALICE_NOTES


async def test_a_workspace_without_an_archive_is_a_tool_error(store: NoteStore) -> None:
    await seed(store)
    await store.create(DEMO_TENANT, TEAM, "Standup", "daily", "alice")
    (node,) = make_nodes(store, 1)
    failure = tool_failed(
        await call_tool(node, ARCHIVE, {"workspaceUri": TEAM, "title": "Standup"})
    )
    assert failure["archived"] is False
    assert "No archive workspace" in failure["error"]
    assert node.statistics().rounds == 0


async def test_an_archive_the_caller_may_not_use_is_a_tool_error(store: NoteStore) -> None:
    seeded = await seed(store)
    node = Node(demo_config(archives={BOB_NOTES: ALICE_ARCHIVE}), store)
    reply = await call_tool(
        node, ARCHIVE, {"workspaceUri": BOB_NOTES, "title": "TPS report"}, principal="bob"
    )
    failure = tool_failed(reply)
    assert failure["archived"] is False
    assert "not authorized" in failure["error"]
    assert await present(store, seeded.all) == set(seeded.all)
    assert node.statistics().rounds == 0


async def test_an_archive_in_another_tenant_is_a_tool_error(store: NoteStore) -> None:
    elsewhere = "file:///Users/alice/Elsewhere"
    scope = Scope.build(
        {ALICE_NOTES: DEMO_TENANT, elsewhere: "other"}, {"alice": ("file:///Users/alice",)}
    )
    await seed(store)
    node = Node(demo_config(scope=scope, archives={ALICE_NOTES: elsewhere}), store)
    failure = tool_failed(await call_tool(node, ARCHIVE, ARGS))
    assert "another tenant" in failure["error"]
    assert node.statistics().rounds == 0


async def test_losing_the_archive_between_the_rounds_moves_nothing(store: NoteStore) -> None:
    seeded = await seed(store)
    (node_a,) = make_nodes(store, 1)
    state, _ = await ask(node_a)
    # A node of the same cluster whose config no longer grants alice her Archive.
    scope = Scope.build(dict(node_a.config.scope.workspaces), {"alice": (ALICE_NOTES,)})
    node_b = Node(replace(node_a.config, scope=scope), store)

    failure = tool_failed(await answer(node_b, state, accept(seeded.tps[0])))
    assert failure["archived"] is False
    assert await moves_of(store, seeded.tps[0]) == []
    # Nothing was recorded: where the archive is still granted, the state still works.
    content, _ = archived(await answer(node_a, state, accept(seeded.tps[0])))
    assert content["archived"] is True


async def test_archive_without_form_elicitation_is_missing_capability(store: NoteStore) -> None:
    await seed(store)
    (node,) = make_nodes(store, 1)
    no_form: list[dict[str, Any]] = [{}, {"elicitation": {"url": {}}}]
    for caps in no_form:
        reply = await call_tool(node, ARCHIVE, ARGS, caps=caps)
        assert reply.status == 400
        assert error(reply) == {
            "code": -32021,
            "message": "Missing required client capability: elicitation.form",
            "data": {"requiredCapabilities": {"elicitation": {"form": {}}}},
        }


async def test_an_archive_state_does_not_open_for_delete_nor_a_delete_state_for_archive(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    (node,) = make_nodes(store, 1)
    archive_state, _ = await ask(node)
    delete_state = result(await call_tool(node, "notes_delete", ARGS))["requestState"]
    delete_answer = {
        "confirm_delete": {
            "action": "accept",
            "content": {"noteId": seeded.tps[0], "confirm": True},
        }
    }

    assert_invalid_state(
        await call_tool(node, "notes_delete", ARGS, state=archive_state, responses=delete_answer)
    )
    assert_invalid_state(await answer(node, delete_state, accept(seeded.tps[0])))
    assert await present(store, seeded.all) == set(seeded.all)
    assert await moves_of(store, seeded.tps[0]) == []


# --- the archive rule in the TOML config -------------------------------------------------------


@pytest.fixture
def key_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NOTES_TEST_KEY_K1", KEY_K1)
    path = tmp_path / "k2.key"
    path.write_text(KEY_K2 + "\n", encoding="utf-8")
    return path


def test_the_config_maps_workspaces_to_archives_and_may_set_a_public_url(
    tmp_path: Path, key_file: Path
) -> None:
    extra = (
        'public_url = "https://notes.example"\n'
        "[archives]\n"
        '"file:///Users/alice/Documents/Notes" = "file:///Users/alice/Documents/Notes-evil"\n'
    )
    node = load_settings(write(tmp_path, config_text(key_file, extra))).node
    assert dict(node.archives) == {
        "file:///Users/alice/Documents/Notes": "file:///Users/alice/Documents/Notes-evil"
    }
    assert node.public_url == "https://notes.example"


@pytest.mark.parametrize(
    "archive",
    [
        pytest.param("file:///Users/alice/Documents/Nowhere", id="unconfigured"),
        pytest.param("file:///Users/alice/Documents/Notes", id="itself"),
        pytest.param("file:///Users/alice/Documents/Notes%2F..", id="malformed"),
    ],
)
def test_a_config_with_a_bad_archive_is_refused(
    tmp_path: Path, key_file: Path, archive: str
) -> None:
    extra = f'[archives]\n"file:///Users/alice/Documents/Notes" = "{archive}"\n'
    with pytest.raises(ConfigError, match="archive"):
        load_settings(write(tmp_path, config_text(key_file, extra)))
