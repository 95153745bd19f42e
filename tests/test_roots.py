"""notes_search without workspaceUri: roots over MRTR, intersected with the caller's grants.

Every test runs on the embedded store and on a real Redis (the ``store`` fixture). Alice may use
her Notes, her Archive and the team workspace; bob his Notes and the team workspace. Roots are
hints: they narrow what alice may use, never widen it.
"""

from __future__ import annotations

from typing import Any

import pytest

from nodes.protocol import Node, Reply
from nodes.serving.demo import ALICE_ARCHIVE, ALICE_EVIL, ALICE_NOTES, BOB_NOTES, DEMO_TENANT, TEAM
from store.api import Confirmation, ConfirmOutcome, Note, Snapshot, WriteOutcome
from store.notes import NoteStore
from tests.conftest import raw
from tests.harness import call_tool, error, make_nodes, result
from tests.test_delete_flow import Seeded, seed

SEARCH = "notes_search"
TPS: dict[str, Any] = {"title": "TPS report"}
ROOTS_CAPS: dict[str, Any] = {"roots": {}}
ROOTS_AND_FORM: dict[str, Any] = {"roots": {}, "elicitation": {"form": {}}}


def roots(*uris: str) -> dict[str, Any]:
    return {"roots": {"roots": [{"uri": u, "name": u.rsplit("/", 1)[-1]} for u in uris]}}


def pick(workspace: str) -> dict[str, Any]:
    return {"workspace": {"action": "accept", "content": {"workspaceUri": workspace}}}


async def search(
    node: Node,
    responses: dict[str, Any] | None = None,
    caps: dict[str, Any] | None = None,
    args: dict[str, Any] | None = None,
    principal: str = "alice",
) -> Reply:
    return await call_tool(
        node,
        SEARCH,
        TPS if args is None else args,
        caps=ROOTS_AND_FORM if caps is None else caps,
        responses=responses,
        principal=principal,
    )


def found(reply: Reply) -> list[tuple[str, str]]:
    """(workspaceUri, noteId) of each note a complete result lists."""
    assert reply.status == 200, reply
    res = result(reply)
    assert res["resultType"] == "complete", res
    assert res["isError"] is False, res
    return [(n["workspaceUri"], n["noteId"]) for n in res["structuredContent"]["notes"]]


def asked(reply: Reply) -> dict[str, Any]:
    """The inputRequests of an input_required result (which carries no state)."""
    assert reply.status == 200, reply
    res = result(reply)
    assert res["resultType"] == "input_required", res
    assert "requestState" not in res, "nothing to protect: every round re-derives its answer"
    requests: dict[str, Any] = res["inputRequests"]
    return requests


async def seeded_with_archive(store: NoteStore) -> tuple[Seeded, str]:
    seeded = await seed(store)
    archived = await store.create(DEMO_TENANT, ALICE_ARCHIVE, "TPS report", "old", "alice")
    return seeded, archived.note_id


class RecordingStore:
    """The shared store, recording which of its methods a node called."""

    def __init__(self, inner: NoteStore) -> None:
        self.inner = inner
        self.calls: list[str] = []

    async def redis_time_ms(self) -> int:
        self.calls.append("redis_time_ms")
        return await self.inner.redis_time_ms()

    async def find(self, tenant: str, workspace: str, title: str, limit: int) -> Snapshot:
        self.calls.append("find")
        return await self.inner.find(tenant, workspace, title, limit)

    async def create(self, *args: Any) -> Note:
        raise AssertionError("a search must not write")

    async def update(self, *args: Any) -> WriteOutcome:
        raise AssertionError("a search must not write")

    async def move(self, *args: Any) -> WriteOutcome:
        raise AssertionError("a search must not write")

    async def confirm(self, c: Confirmation) -> ConfirmOutcome:
        raise AssertionError("a search must not write")

    def __getattr__(self, name: str) -> Any:
        self.calls.append(name)
        return getattr(self.inner, name)


async def test_without_workspace_and_without_roots_capability_the_answer_is_missing_capability(
    store: NoteStore,
) -> None:
    await seed(store)
    (node,) = make_nodes(store, 1)
    no_roots: list[dict[str, Any]] = [{}, {"elicitation": {"form": {}, "url": {}}}]
    for caps in no_roots:
        reply = await search(node, caps=caps)
        assert reply.status == 400
        assert error(reply) == {
            "code": -32021,
            "message": "Missing required client capability: roots",
            "data": {"requiredCapabilities": {"roots": {}}},
        }


async def test_with_a_workspace_no_roots_are_needed(store: NoteStore) -> None:
    seeded = await seed(store)
    (node,) = make_nodes(store, 1)
    reply = await search(node, caps={}, args={**TPS, "workspaceUri": ALICE_NOTES})
    assert found(reply) == [(ALICE_NOTES, n) for n in seeded.tps]
    failure = result(await search(node, caps={}, args={**TPS, "workspaceUri": BOB_NOTES}))
    assert failure["isError"] is True


async def test_round_one_asks_for_roots_and_touches_no_store(store: NoteStore) -> None:
    await seed(store)
    recording = RecordingStore(store)
    (node,) = make_nodes(recording, 1)
    before = {str(k) async for k in raw(store).scan_iter(match=f"{store.prefix}:*")}

    requests = asked(await search(node))
    assert requests == {"roots": {"method": "roots/list"}}
    assert recording.calls == [], "a client that never retries leaves nothing behind"
    after = {str(k) async for k in raw(store).scan_iter(match=f"{store.prefix}:*")}
    assert after == before


async def test_one_root_inside_the_grants_searches_that_workspace(store: NoteStore) -> None:
    seeded, _ = await seeded_with_archive(store)
    recording = RecordingStore(store)
    node_a, node_b = make_nodes(recording, 2)
    asked(await search(node_a))
    assert found(await search(node_b, roots(ALICE_NOTES))) == [(ALICE_NOTES, n) for n in seeded.tps]
    assert set(recording.calls) == {"find"}, "reads only"


async def test_roots_outside_the_authorized_workspaces_are_ignored(store: NoteStore) -> None:
    seeded, _ = await seeded_with_archive(store)
    (node,) = make_nodes(store, 1)
    hints = roots(
        BOB_NOTES,
        ALICE_EVIL,
        "file:///Users/alice/Documents/Notes/../Notes-evil",
        "file:///Users/alice/Documents/Notes%2f..%2fNotes-evil",
        "file://evil.example/Users/alice/Documents/Notes",
        "https://example.com/Users/alice/Documents/Notes",
        f"{ALICE_NOTES}/sub",  # inside a workspace: below any note, so it adds nothing
        ALICE_NOTES,
    )
    listed = found(await search(node, hints))
    assert listed == [(ALICE_NOTES, n) for n in seeded.tps]
    assert seeded.evil not in {n for _, n in listed}
    assert seeded.bob not in {n for _, n in listed}


async def test_roots_covering_no_authorized_workspace_are_a_tool_error(store: NoteStore) -> None:
    await seed(store)
    (node,) = make_nodes(store, 1)
    res = result(await search(node, roots(BOB_NOTES, ALICE_EVIL, "file:///etc")))
    assert res["isError"] is True
    assert "structuredContent" not in res
    assert res["content"] == [
        {
            "type": "text",
            "text": "None of your roots contains a workspace you are authorized for; "
            "pass workspaceUri",
        }
    ]
    # Bob's roots never reach alice's notes either.
    res = result(await search(node, roots(ALICE_NOTES, ALICE_ARCHIVE), principal="bob"))
    assert res["isError"] is True


async def test_roots_covering_several_workspaces_ask_for_roots_and_a_form_in_one_round(
    store: NoteStore,
) -> None:
    seeded, archived = await seeded_with_archive(store)
    node_a, node_b, node_c = make_nodes(store, 3)
    documents = "file:///Users/alice/Documents"  # covers Notes, Archive and (unauthorized) evil

    requests = asked(await search(node_a, roots(documents)))
    assert set(requests) == {"roots", "workspace"}
    assert requests["roots"] == {"method": "roots/list"}
    form = requests["workspace"]
    assert form["method"] == "elicitation/create"
    schema = form["params"]["requestedSchema"]
    assert schema["required"] == ["workspaceUri"]
    options = [o["const"] for o in schema["properties"]["workspaceUri"]["oneOf"]]
    assert options == [ALICE_ARCHIVE, ALICE_NOTES], "only authorized workspaces, never evil"

    both = {**roots(documents), **pick(ALICE_ARCHIVE)}
    assert found(await search(node_b, both)) == [(ALICE_ARCHIVE, archived)]
    both = {**roots(documents), **pick(ALICE_NOTES)}
    assert found(await search(node_c, both)) == [(ALICE_NOTES, n) for n in seeded.tps]


async def test_a_pick_the_fresh_roots_no_longer_cover_is_asked_again(store: NoteStore) -> None:
    await seeded_with_archive(store)
    (node,) = make_nodes(store, 1)
    responses = {**roots(ALICE_NOTES, TEAM), **pick(ALICE_ARCHIVE)}
    requests = asked(await search(node, responses))
    options = requests["workspace"]["params"]["requestedSchema"]["properties"]["workspaceUri"]
    assert [o["const"] for o in options["oneOf"]] == [TEAM, ALICE_NOTES]  # sorted by URI


async def test_a_forged_pick_outside_the_grants_is_asked_again_not_searched(
    store: NoteStore,
) -> None:
    await seeded_with_archive(store)
    (node,) = make_nodes(store, 1)
    responses = {**roots("file:///"), **pick(ALICE_EVIL)}
    requests = asked(await search(node, responses))
    options = requests["workspace"]["params"]["requestedSchema"]["properties"]["workspaceUri"]
    assert [o["const"] for o in options["oneOf"]] == [TEAM, ALICE_ARCHIVE, ALICE_NOTES]


async def test_without_forms_several_workspaces_are_all_searched(store: NoteStore) -> None:
    seeded, archived = await seeded_with_archive(store)
    (node,) = make_nodes(store, 1)
    listed = found(await search(node, roots("file:///Users/alice"), caps=ROOTS_CAPS))
    assert sorted(listed) == sorted(
        [(ALICE_ARCHIVE, archived)] + [(ALICE_NOTES, n) for n in seeded.tps]
    )


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_a_declined_pick_searches_nothing(store: NoteStore, action: str) -> None:
    await seeded_with_archive(store)
    (node,) = make_nodes(store, 1)
    responses = {**roots("file:///Users/alice"), "workspace": {"action": action}}
    assert found(await search(node, responses)) == []


async def test_silence_about_roots_asks_for_them_again(store: NoteStore) -> None:
    await seed(store)
    (node,) = make_nodes(store, 1)
    assert asked(await search(node, {"unrelated": {"action": "accept"}})) == {
        "roots": {"method": "roots/list"}
    }


@pytest.mark.parametrize(
    "responses",
    [
        pytest.param({"roots": {"roots": "file:///"}}, id="roots-not-a-list"),
        pytest.param({"roots": {"roots": [{"name": "x"}]}}, id="root-without-uri"),
        pytest.param({"roots": {"roots": [{"uri": 7}]}}, id="uri-not-a-string"),
        pytest.param({"roots": []}, id="answer-not-an-object"),
        pytest.param({"roots": {"roots": [{"uri": ALICE_NOTES}] * 257}}, id="too-many"),
        pytest.param(
            {**roots("file:///Users/alice"), "workspace": {"action": "accept"}}, id="pick-empty"
        ),
        pytest.param(
            {
                **roots("file:///Users/alice"),
                "workspace": {"action": "accept", "content": {"workspaceUri": 1}},
            },
            id="pick-not-a-string",
        ),
    ],
)
async def test_a_malformed_answer_is_invalid_params(
    store: NoteStore, responses: dict[str, Any]
) -> None:
    (node,) = make_nodes(store, 1)
    reply = await search(node, responses)
    assert reply.status == 400
    assert error(reply)["code"] == -32602
