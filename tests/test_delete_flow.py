"""Acceptance tests of the MRTR delete flow: two rounds on any nodes, and the races around them.

Every test runs on the embedded store and on a real Redis (the ``store`` fixture). Races are forced
either by a ``trio.testing.Sequencer`` hooked in front of the store's atomic step, or by firing
concurrent tasks at the shared store, where the atomic script makes the outcome deterministic.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import pytest
import trio
import trio.testing
from fakeredis.commands_mixins import server_mixin

from nodes.config import wall_clock_ms
from nodes.errors import INVALID_STATE_DATA, INVALID_STATE_MESSAGE
from nodes.protocol import Node, Reply
from nodes.results import META_ERROR, META_REPLAY
from nodes.serving.demo import (
    ALICE_ARCHIVE,
    ALICE_EVIL,
    ALICE_NOTES,
    BOB_NOTES,
    DEMO_TENANT,
)
from store.api import Confirmation, ConfirmOutcome
from store.client_factory import redis_client
from store.notes import NoteStore
from tests.conftest import delete_prefix, new_prefix, raw
from tests.harness import accept, call_tool, demo_config, error, make_nodes, result, rpc

DELETE = "notes_delete"
ARGS: dict[str, Any] = {"workspaceUri": ALICE_NOTES, "title": "TPS report"}
DAY_MS = 86_400_000
BASE_MS = 1_700_000_000_000


@dataclass(frozen=True)
class Seeded:
    """The notes of one test: alice's three TPS reports (oldest first) and the bystanders."""

    tps: tuple[str, str, str]
    groceries: str
    evil: str
    bob: str

    @property
    def all(self) -> tuple[str, ...]:
        return (*self.tps, self.groceries, self.evil, self.bob)


async def seed(store: NoteStore) -> Seeded:
    """Alice's three TPS reports, her groceries, the look-alike workspace's and bob's reports."""
    tps = [
        await store.create(
            DEMO_TENANT, ALICE_NOTES, "TPS report", f"{year} edition", "alice", BASE_MS + i * DAY_MS
        )
        for i, year in enumerate((2023, 2024, 2025))
    ]
    groceries = await store.create(DEMO_TENANT, ALICE_NOTES, "Groceries", "Milk", "alice")
    evil = await store.create(DEMO_TENANT, ALICE_EVIL, "TPS report", "look-alike", "alice")
    bob = await store.create(DEMO_TENANT, BOB_NOTES, "TPS report", "bob's", "bob")
    return Seeded(
        (tps[0].note_id, tps[1].note_id, tps[2].note_id),
        groceries.note_id,
        evil.note_id,
        bob.note_id,
    )


async def ask(
    node: Node, args: dict[str, Any] | None = None, principal: str = "alice"
) -> tuple[str, list[str]]:
    """Round 1: the sealed state and the note ids the form offers, in order."""
    res = result(await call_tool(node, DELETE, ARGS if args is None else args, principal=principal))
    assert res["resultType"] == "input_required", res
    return res["requestState"], offered(res)


def offered(res: dict[str, Any]) -> list[str]:
    """The note ids an input_required result offers in its pick list."""
    form = res["inputRequests"]["confirm_delete"]
    assert form["method"] == "elicitation/create"
    pick = form["params"]["requestedSchema"]["properties"]["noteId"]
    return [option["const"] for option in pick["oneOf"]]


async def answer(
    node: Node,
    state: str,
    responses: dict[str, Any] | None,
    *,
    args: dict[str, Any] | None = None,
    principal: str = "alice",
) -> Reply:
    """Round 2: the original call again, with the state and the answers."""
    return await call_tool(
        node,
        DELETE,
        ARGS if args is None else args,
        principal=principal,
        state=state,
        responses=responses,
    )


def decline() -> dict[str, Any]:
    return {"confirm_delete": {"action": "decline"}}


def cancel() -> dict[str, Any]:
    return {"confirm_delete": {"action": "cancel"}}


async def present(store: NoteStore, ids: tuple[str, ...] | list[str]) -> set[str]:
    """Which of ``ids`` still exist."""
    return {i for i in ids if await store.get(DEMO_TENANT, i) is not None}


async def journal(store: NoteStore) -> list[dict[str, str]]:
    """Every journal entry of the demo tenant, oldest first."""
    entries = await raw(store).xrange(store.keys(DEMO_TENANT).journal)
    return [dict(e.field_values) for e in entries]


async def deletes_of(store: NoteStore, note_id: str) -> int:
    """How many journal entries record deleting ``note_id``."""
    return sum(1 for e in await journal(store) if e["op"] == "delete" and e["note"] == note_id)


def assert_invalid_state(reply: Reply) -> None:
    """The one fixed answer to any rejected requestState."""
    assert reply.status == 400
    err = error(reply)
    assert err == {
        "code": -32602,
        "message": INVALID_STATE_MESSAGE,
        "data": dict(INVALID_STATE_DATA),
    }
    assert err["message"] == "Invalid or expired requestState"
    assert err["data"] == {"reason": "invalid_request_state"}


def assert_invalid_params(reply: Reply) -> None:
    assert reply.status == 400
    assert error(reply)["code"] == -32602


def deleted(reply: Reply) -> tuple[dict[str, Any], bool]:
    """The structured content of a complete, non-error result and whether it is a replay."""
    assert reply.status == 200
    res = result(reply)
    assert res["resultType"] == "complete", res
    assert res["isError"] is False, res
    return res["structuredContent"], bool(res.get("_meta", {}).get(META_REPLAY, False))


def tool_failed(reply: Reply) -> dict[str, Any]:
    """The machine-readable form of an isError result (its ``_meta``): an error carries no
    ``structuredContent`` (it would not match the tool's outputSchema), its text is the message."""
    assert reply.status == 200
    res = result(reply)
    assert res["resultType"] == "complete", res
    assert res["isError"] is True, res
    assert "requestState" not in res
    assert "structuredContent" not in res, res
    details: dict[str, Any] = res["_meta"][META_ERROR]
    assert res["content"] == [{"type": "text", "text": details["error"]}], res
    return details


class GatedStore:
    """The shared store with a gate around each confirmation's trip to the script, so a test can
    make something happen while a round 2 is in flight past all the node's checks, or only once
    its confirmation has run."""

    def __init__(
        self, inner: NoteStore, gate: Callable[[], AbstractAsyncContextManager[None]]
    ) -> None:
        self.inner = inner
        self.gate = gate

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def confirm(self, c: Confirmation) -> ConfirmOutcome:
        async with self.gate():
            return await self.inner.confirm(c)


def sequenced_node(
    node: Node, store: NoteStore, seq: trio.testing.Sequencer, step: int, *, holding: bool = False
) -> Node:
    """A twin of ``node`` (same key ring and audience) whose confirmations wait for ``step``;
    ``holding``: each runs whole inside it (a later step meets its outcome, never a confirmation
    still on its way to Redis), else it goes on once the step has passed."""

    @asynccontextmanager
    async def gate() -> AsyncIterator[None]:
        if holding:
            async with seq(step):
                yield
        else:
            async with seq(step):
                pass
            yield

    return Node(replace(node.config, node_id="gated"), GatedStore(store, gate))  # type: ignore[arg-type]


# --- the happy path across nodes -------------------------------------------------------------


async def test_round_one_on_one_node_and_round_two_on_another_deletes_the_chosen_note(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    node_a, node_b = make_nodes(store, 2)
    state, ids = await ask(node_a)
    assert ids == list(seeded.tps), "alice's three reports, oldest first, nothing else"

    content, replay = deleted(await answer(node_b, state, accept(seeded.tps[1])))

    assert content == {"deleted": True, "noteId": seeded.tps[1]}
    assert not replay
    assert await store.get(DEMO_TENANT, seeded.tps[1]) is None
    remaining = await store.find(DEMO_TENANT, ALICE_NOTES, "TPS report")
    assert [n.note_id for n in remaining.notes] == [seeded.tps[0], seeded.tps[2]]
    assert await present(store, seeded.all) == set(seeded.all) - {seeded.tps[1]}
    assert await deletes_of(store, seeded.tps[1]) == 1


async def test_the_confirmation_form_is_flat_and_asks_for_a_note_and_a_boolean(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    (node,) = make_nodes(store, 1)
    res = result(await call_tool(node, DELETE, ARGS))
    assert set(res) == {"resultType", "inputRequests", "requestState", "_meta"}
    assert "ttlMs" not in res
    assert "cacheScope" not in res
    params = res["inputRequests"]["confirm_delete"]["params"]
    assert params["mode"] == "form"
    schema = params["requestedSchema"]
    assert schema["type"] == "object"
    assert schema["required"] == ["noteId", "confirm"]
    assert schema["properties"]["confirm"]["type"] == "boolean"
    assert [o["const"] for o in schema["properties"]["noteId"]["oneOf"]] == list(seeded.tps)


async def test_the_pick_list_offers_up_to_the_configured_limit_and_refuses_past_it(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    (at_limit,) = make_nodes(store, 1, max_offered=3)
    res = result(await call_tool(at_limit, DELETE, ARGS))
    offered = res["inputRequests"]["confirm_delete"]["params"]["requestedSchema"]
    assert [o["const"] for o in offered["properties"]["noteId"]["oneOf"]] == list(seeded.tps)

    (below,) = make_nodes(store, 1, max_offered=2)
    refused = result(await call_tool(below, DELETE, ARGS))
    assert refused["isError"] is True
    assert "More than 2 notes are titled 'TPS report'" in refused["content"][0]["text"]
    assert "requestState" not in refused
    assert await present(store, seeded.all) == set(seeded.all)


# --- states that must not open ---------------------------------------------------------------


async def test_a_node_with_another_key_ring_refuses_the_state_with_the_fixed_error(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    (node_a,) = make_nodes(store, 1)
    stranger = Node(demo_config(), store)  # same audience, its own freshly generated ring
    state, _ = await ask(node_a)

    assert_invalid_state(await answer(stranger, state, accept(seeded.tps[0])))
    assert await present(store, seeded.all) == set(seeded.all)


async def test_a_node_with_another_audience_refuses_the_state_even_under_the_same_key_ring(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    (node_a,) = make_nodes(store, 1)
    other = Node(replace(node_a.config, server_name="another-cluster"), store)
    state, _ = await ask(node_a)

    assert_invalid_state(await answer(other, state, accept(seeded.tps[0])))
    assert await present(store, seeded.all) == set(seeded.all)
    # The refusal burned nothing: the right cluster still honours the state.
    content, _ = deleted(await answer(node_a, state, accept(seeded.tps[0])))
    assert content == {"deleted": True, "noteId": seeded.tps[0]}


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda s: s[:-1] + ("A" if s[-1] != "A" else "B"), id="last-char-flipped"),
        pytest.param(
            lambda s: s[:20] + ("A" if s[20] != "A" else "B") + s[21:], id="nonce-char-flipped"
        ),
        pytest.param(lambda s: s[: len(s) // 2], id="truncated-half"),
        pytest.param(lambda s: s[:-4], id="truncated-tail"),
        pytest.param(lambda s: s.replace(".k1.", ".k2.", 1), id="unknown-kid"),
        pytest.param(lambda s: s.replace("ns1.", "ns2.", 1), id="wrong-format-version"),
        pytest.param(lambda s: s + "=", id="padded"),
        pytest.param(lambda s: "", id="empty"),
    ],
)
async def test_a_tampered_or_truncated_state_is_refused_and_deletes_nothing(
    store: NoteStore, mutate: Callable[[str], str]
) -> None:
    seeded = await seed(store)
    (node,) = make_nodes(store, 1)
    state, _ = await ask(node)
    bad = mutate(state)
    assert bad != state

    assert_invalid_state(await answer(node, bad, accept(seeded.tps[0])))
    assert await present(store, seeded.all) == set(seeded.all)
    assert await deletes_of(store, seeded.tps[0]) == 0


async def test_a_state_sealed_under_another_key_with_the_same_key_id_is_refused(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    (node,) = make_nodes(store, 1)
    (forger,) = make_nodes(store, 1)  # another random key, also named "k1"
    forged, _ = await ask(forger)
    assert forged.split(".")[1] == node.config.key_ring.active

    assert_invalid_state(await answer(node, forged, accept(seeded.tps[0])))
    assert await present(store, seeded.all) == set(seeded.all)


@pytest.mark.parametrize("state", [123, ["ns1"], {"s": 1}, True])
async def test_a_state_that_is_not_a_string_is_refused_with_the_fixed_error(
    store: NoteStore, state: object
) -> None:
    seeded = await seed(store)
    (node,) = make_nodes(store, 1)
    params = {
        "name": DELETE,
        "arguments": ARGS,
        "requestState": state,
        "inputResponses": accept(seeded.tps[0]),
    }
    assert_invalid_state(await rpc(node, "tools/call", params))
    assert await present(store, seeded.all) == set(seeded.all)


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param({"workspaceUri": ALICE_NOTES, "title": "Groceries"}, id="other-title"),
        pytest.param(
            {"workspaceUri": "file://localhost/Users/alice/Documents/Notes", "title": "TPS report"},
            id="same-workspace-other-spelling",
        ),
        pytest.param({"workspaceUri": ALICE_ARCHIVE, "title": "TPS report"}, id="other-workspace"),
        pytest.param({"title": "TPS report"}, id="workspace-dropped"),
        pytest.param({**ARGS, "force": True}, id="extra-argument"),
    ],
)
async def test_changed_arguments_under_the_original_state_are_refused(
    store: NoteStore, changed: dict[str, Any]
) -> None:
    seeded = await seed(store)
    node_a, node_b = make_nodes(store, 2)
    state, _ = await ask(node_a)

    assert_invalid_state(await answer(node_b, state, accept(seeded.tps[0]), args=changed))
    assert await present(store, seeded.all) == set(seeded.all)


async def test_argument_key_order_does_not_change_the_bound_arguments(store: NoteStore) -> None:
    seeded = await seed(store)
    node_a, node_b = make_nodes(store, 2)
    state, _ = await ask(node_a)
    reordered = {"title": ARGS["title"], "workspaceUri": ARGS["workspaceUri"]}

    content, _ = deleted(await answer(node_b, state, accept(seeded.tps[0]), args=reordered))
    assert content == {"deleted": True, "noteId": seeded.tps[0]}


async def test_a_state_issued_to_alice_is_refused_for_bob(store: NoteStore) -> None:
    seeded = await seed(store)
    node_a, node_b = make_nodes(store, 2)
    state, _ = await ask(node_a, principal="alice")

    assert_invalid_state(await answer(node_b, state, accept(seeded.tps[0]), principal="bob"))
    assert await present(store, seeded.all) == set(seeded.all)
    # Bob's attempt recorded nothing: alice can still use her own state.
    content, replay = deleted(await answer(node_b, state, accept(seeded.tps[0])))
    assert content == {"deleted": True, "noteId": seeded.tps[0]}
    assert not replay


# --- workspace containment through the tool --------------------------------------------------


@pytest.mark.parametrize(
    ("principal", "workspace"),
    [
        pytest.param("alice", ALICE_EVIL, id="prefix-confusion"),
        pytest.param("alice", "file:///Users/alice/Documents/Notes-evil/", id="prefix-slash"),
        pytest.param(
            "alice", "file:///Users/alice/Documents/Notes/%2e%2e/Notes-evil", id="encoded-dotdot"
        ),
        pytest.param(
            "alice", "file:///Users/alice/Documents/Notes/%2E%2E/Notes-evil", id="upper-dotdot"
        ),
        pytest.param("alice", "file:///Users/alice/Documents/Notes/../Notes-evil", id="raw-dotdot"),
        pytest.param(
            "alice", "file:///Users/alice/Documents/Notes%2f..%2fNotes-evil", id="encoded-slash"
        ),
        pytest.param("alice", "file:///Users/alice/Documents/Notes%252e%252e", id="double-encoded"),
        pytest.param("alice", "file://evil.example/Users/alice/Documents/Notes", id="host"),
        pytest.param("alice", "file:///Users/alice/Documents/Notes%00", id="nul"),
        pytest.param("alice", BOB_NOTES, id="other-users-workspace"),
        pytest.param("bob", ALICE_NOTES, id="bob-in-alices-workspace"),
    ],
)
async def test_a_workspace_outside_the_callers_grants_is_a_tool_error_and_deletes_nothing(
    store: NoteStore, principal: str, workspace: str
) -> None:
    seeded = await seed(store)
    (node,) = make_nodes(store, 1)
    reply = await call_tool(
        node, DELETE, {"workspaceUri": workspace, "title": "TPS report"}, principal=principal
    )

    failure = tool_failed(reply)
    assert failure["error"]
    assert await present(store, seeded.all) == set(seeded.all)
    assert node.statistics().rounds == 0


# --- decline and cancel ----------------------------------------------------------------------


async def test_a_declined_confirmation_deletes_nothing_and_cannot_be_reused(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    node_a, node_b, node_c = make_nodes(store, 3)
    state, _ = await ask(node_a)

    first, replay = deleted(await answer(node_b, state, decline()))
    assert first == {"deleted": False}
    assert not replay

    assert_invalid_state(await answer(node_a, state, accept(seeded.tps[0])))
    assert_invalid_state(await answer(node_a, state, cancel()))

    again, replay = deleted(await answer(node_c, state, decline()))
    assert again == {"deleted": False}
    assert replay

    assert await present(store, seeded.all) == set(seeded.all)
    ops = [e["op"] for e in await journal(store)]
    assert ops.count("decline") == 1
    assert "delete" not in ops


async def test_an_accept_with_confirm_false_behaves_as_a_decline(store: NoteStore) -> None:
    seeded = await seed(store)
    node_a, node_b = make_nodes(store, 2)
    state, _ = await ask(node_a)

    first, replay = deleted(await answer(node_b, state, accept(seeded.tps[0], confirm=False)))
    assert first == {"deleted": False}
    assert not replay

    assert_invalid_state(await answer(node_a, state, accept(seeded.tps[0])))
    again, replay = deleted(await answer(node_a, state, accept(seeded.tps[0], confirm=False)))
    assert again == {"deleted": False}
    assert replay
    assert await present(store, seeded.all) == set(seeded.all)
    assert [e["op"] for e in await journal(store)].count("decline") == 1


async def test_a_cancel_deletes_nothing_and_the_same_state_can_later_be_accepted(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    node_a, node_b = make_nodes(store, 2)
    state, _ = await ask(node_a)
    before = await journal(store)

    for node in (node_b, node_a):
        content, replay = deleted(await answer(node, state, cancel()))
        assert content == {"deleted": False}
        assert not replay
    assert await present(store, seeded.all) == set(seeded.all)
    assert await journal(store) == before, "a cancel writes nothing"

    content, replay = deleted(await answer(node_b, state, accept(seeded.tps[2])))
    assert content == {"deleted": True, "noteId": seeded.tps[2]}
    assert not replay
    assert await present(store, seeded.all) == set(seeded.all) - {seeded.tps[2]}


# --- exactly once under concurrency ----------------------------------------------------------


async def test_one_confirmation_sent_to_several_nodes_at_once_executes_exactly_once(
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

    outcomes = [deleted(r) for r in replies]
    assert len(outcomes) == 8
    assert all(c == {"deleted": True, "noteId": seeded.tps[0]} for c, _ in outcomes)
    assert sum(1 for _, replay in outcomes if not replay) == 1
    assert sum(1 for _, replay in outcomes if replay) == 7
    assert await deletes_of(store, seeded.tps[0]) == 1
    assert await present(store, seeded.all) == set(seeded.all) - {seeded.tps[0]}
    stats = [n.statistics() for n in nodes]
    assert sum(s.executions for s in stats) == 1
    assert sum(s.replays for s in stats) == 7


async def test_an_accept_and_a_decline_racing_under_one_state_have_exactly_one_winner(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    nodes = make_nodes(store, 4)
    state, _ = await ask(nodes[0])
    accepts: list[Reply] = []
    declines: list[Reply] = []

    async def send(node: Node, responses: dict[str, Any], out: list[Reply]) -> None:
        out.append(await answer(node, state, responses))

    async with trio.open_nursery() as nursery:
        for i in range(4):
            nursery.start_soon(send, nodes[i], accept(seeded.tps[0]), accepts)
            nursery.start_soon(send, nodes[3 - i], decline(), declines)

    accept_won = await store.get(DEMO_TENANT, seeded.tps[0]) is None
    winners, losers = (accepts, declines) if accept_won else (declines, accepts)
    for reply in losers:
        assert_invalid_state(reply)
    results = [deleted(r) for r in winners]
    assert sum(1 for _, replay in results if not replay) == 1
    expected = {"deleted": True, "noteId": seeded.tps[0]} if accept_won else {"deleted": False}
    assert all(content == expected for content, _ in results)
    assert await deletes_of(store, seeded.tps[0]) == (1 if accept_won else 0)
    untouched = set(seeded.all) - {seeded.tps[0]}
    assert await present(store, seeded.all) == (untouched if accept_won else set(seeded.all))


async def test_two_states_racing_to_delete_the_same_note_delete_it_once(store: NoteStore) -> None:
    seeded = await seed(store)
    nodes = make_nodes(store, 2)
    first, _ = await ask(nodes[0])
    second, _ = await ask(nodes[1])
    replies: list[Reply] = []

    async def send(node: Node, state: str) -> None:
        replies.append(await answer(node, state, accept(seeded.tps[1])))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send, nodes[1], first)
        nursery.start_soon(send, nodes[0], second)

    oks = [r for r in replies if not result(r)["isError"]]
    failures = [tool_failed(r) for r in replies if result(r)["isError"]]
    assert len(oks) == 1
    assert len(failures) == 1
    assert deleted(oks[0]) == ({"deleted": True, "noteId": seeded.tps[1]}, False)
    assert failures[0]["deleted"] is False
    assert await deletes_of(store, seeded.tps[1]) == 1
    assert await present(store, seeded.all) == set(seeded.all) - {seeded.tps[1]}


# --- answers that do not fit the state -------------------------------------------------------


async def test_a_different_answer_under_a_used_state_is_refused(store: NoteStore) -> None:
    seeded = await seed(store)
    node_a, node_b = make_nodes(store, 2)
    state, _ = await ask(node_a)
    deleted(await answer(node_b, state, accept(seeded.tps[0])))

    for other in (accept(seeded.tps[1]), decline(), accept(seeded.tps[0], confirm=False)):
        assert_invalid_state(await answer(node_a, state, other))
    assert await present(store, seeded.all) == set(seeded.all) - {seeded.tps[0]}
    assert await deletes_of(store, seeded.tps[1]) == 0


async def test_a_note_id_outside_the_signed_candidates_is_refused_and_changes_nothing(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    node_a, node_b = make_nodes(store, 2)
    state, _ = await ask(node_a)
    before = await journal(store)

    for outsider in (seeded.evil, seeded.bob, seeded.groceries, "n0123456789abcdef"):
        assert_invalid_params(await answer(node_b, state, accept(outsider)))
    assert await present(store, seeded.all) == set(seeded.all)
    assert await journal(store) == before

    # An invalid answer writes nothing: the state is still good for a valid one.
    content, replay = deleted(await answer(node_b, state, accept(seeded.tps[0])))
    assert content == {"deleted": True, "noteId": seeded.tps[0]}
    assert not replay


MALFORMED: list[Any] = [
    pytest.param(lambda n: {"confirm_delete": {"action": "maybe"}}, id="wrong-action"),
    pytest.param(lambda n: {"confirm_delete": {"action": "ACCEPT"}}, id="action-case"),
    pytest.param(lambda n: {"confirm_delete": {}}, id="no-action"),
    pytest.param(lambda n: {"confirm_delete": {"action": "accept"}}, id="accept-no-content"),
    pytest.param(
        lambda n: {"confirm_delete": {"action": "accept", "content": {"noteId": n}}},
        id="missing-confirm",
    ),
    pytest.param(
        lambda n: {"confirm_delete": {"action": "accept", "content": {"confirm": True}}},
        id="missing-note-id",
    ),
    pytest.param(
        lambda n: {
            "confirm_delete": {
                "action": "accept",
                "content": {"noteId": n, "confirm": True, "also": n},
            }
        },
        id="extra-content-field",
    ),
    pytest.param(
        lambda n: {
            "confirm_delete": {
                "action": "accept",
                "content": {"noteId": n, "confirm": True},
                "resultType": "complete",
            }
        },
        id="extra-answer-field",
    ),
    pytest.param(
        lambda n: {"confirm_delete": {"action": "accept", "content": {"noteId": n, "confirm": 1}}},
        id="confirm-not-boolean",
    ),
    pytest.param(
        lambda n: {
            "confirm_delete": {"action": "accept", "content": {"noteId": [n], "confirm": True}}
        },
        id="note-id-not-string",
    ),
    pytest.param(
        lambda n: {"confirm_delete": {"action": "accept", "content": [n, True]}},
        id="content-not-object",
    ),
    pytest.param(lambda n: {"confirm_delete": "accept"}, id="answer-is-string"),
    pytest.param(lambda n: {"confirm_delete": None}, id="answer-is-null"),
    pytest.param(lambda n: {"confirm_delete": [{"action": "accept"}]}, id="answer-is-list"),
    pytest.param(lambda n: [{"action": "accept"}], id="responses-not-object"),
    pytest.param(lambda n: "accept", id="responses-is-string"),
]


@pytest.mark.parametrize("make_responses", MALFORMED)
async def test_a_malformed_answer_is_invalid_params_and_changes_nothing(
    store: NoteStore, make_responses: Callable[[str], Any]
) -> None:
    seeded = await seed(store)
    node_a, node_b = make_nodes(store, 2)
    state, _ = await ask(node_a)
    before = await journal(store)
    params = {
        "name": DELETE,
        "arguments": ARGS,
        "requestState": state,
        "inputResponses": make_responses(seeded.tps[0]),
    }

    assert_invalid_params(await rpc(node_b, "tools/call", params))
    assert await present(store, seeded.all) == set(seeded.all)
    assert await journal(store) == before
    content, _ = deleted(await answer(node_b, state, accept(seeded.tps[0])))
    assert content == {"deleted": True, "noteId": seeded.tps[0]}


# --- the world changes between the rounds ----------------------------------------------------


async def test_a_note_deleted_by_someone_else_between_the_rounds_is_a_tool_error(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    node_a, node_b = make_nodes(store, 2)
    mine, _ = await ask(node_a)
    theirs, _ = await ask(node_b)
    deleted(await answer(node_b, theirs, accept(seeded.tps[0])))

    failure = tool_failed(await answer(node_a, mine, accept(seeded.tps[0])))
    assert failure["deleted"] is False
    assert await present(store, seeded.all) == set(seeded.all) - {seeded.tps[0]}
    assert await deletes_of(store, seeded.tps[0]) == 1


async def test_a_note_moved_out_of_the_workspace_while_round_two_is_in_flight_stays_moved(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    (node_a,) = make_nodes(store, 1)
    seq = trio.testing.Sequencer()
    gated = sequenced_node(node_a, store, seq, step=1)
    state, _ = await ask(node_a)
    before = await store.get(DEMO_TENANT, seeded.tps[0])
    replies: list[Reply] = []

    async def round_two() -> None:
        replies.append(await answer(gated, state, accept(seeded.tps[0])))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(round_two)
        async with seq(0):
            move = await call_tool(
                node_a,
                "notes_move",
                {
                    "workspaceUri": ALICE_NOTES,
                    "noteId": seeded.tps[0],
                    "targetWorkspaceUri": ALICE_ARCHIVE,
                },
            )
            assert result(move)["isError"] is False

    failure = tool_failed(replies[0])
    assert failure["deleted"] is False
    after = await store.get(DEMO_TENANT, seeded.tps[0])
    assert before is not None
    assert after is not None
    assert after.workspace == ALICE_ARCHIVE
    assert (after.title, after.body) == (before.title, before.body)
    assert await present(store, seeded.all) == set(seeded.all)
    assert await deletes_of(store, seeded.tps[0]) == 0


async def test_a_confirmation_that_executes_first_makes_a_later_move_find_nothing(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    (node_a,) = make_nodes(store, 1)
    seq = trio.testing.Sequencer()
    # The confirmation runs whole in step 0 (gated before it only, it could still be on its
    # way to Redis when step 1's move starts: trio may run either first).
    gated = sequenced_node(node_a, store, seq, step=0, holding=True)
    state, _ = await ask(node_a)
    replies: list[Reply] = []

    async def round_two() -> None:
        replies.append(await answer(gated, state, accept(seeded.tps[0])))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(round_two)
        async with seq(1):
            move = await call_tool(
                node_a,
                "notes_move",
                {
                    "workspaceUri": ALICE_NOTES,
                    "noteId": seeded.tps[0],
                    "targetWorkspaceUri": ALICE_ARCHIVE,
                },
            )

    assert deleted(replies[0]) == ({"deleted": True, "noteId": seeded.tps[0]}, False)
    assert result(move)["isError"] is True
    assert await store.get(DEMO_TENANT, seeded.tps[0]) is None
    archive = await store.list(DEMO_TENANT, ALICE_ARCHIVE)
    assert archive.notes == ()


async def test_a_note_edited_between_the_rounds_is_asked_again_and_not_deleted(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    node_a, node_b = make_nodes(store, 2)
    state, _ = await ask(node_a)
    edit = await call_tool(
        node_b,
        "notes_update",
        {"workspaceUri": ALICE_NOTES, "noteId": seeded.tps[0], "body": "rewritten"},
    )
    assert result(edit)["isError"] is False

    reply = await answer(node_b, state, accept(seeded.tps[0]))
    res = result(reply)
    assert res["resultType"] == "input_required"
    assert res["requestState"] != state
    assert offered(res) == list(seeded.tps)
    assert await present(store, seeded.all) == set(seeded.all)
    assert await deletes_of(store, seeded.tps[0]) == 0

    # The old state keeps re-asking; the fresh one, showing the edited note, deletes it.
    assert result(await answer(node_a, state, accept(seeded.tps[0])))["resultType"] == (
        "input_required"
    )
    content, _ = deleted(await answer(node_a, res["requestState"], accept(seeded.tps[0])))
    assert content == {"deleted": True, "noteId": seeded.tps[0]}


@pytest.mark.parametrize(
    "responses",
    [
        pytest.param(None, id="no-input-responses"),
        pytest.param({}, id="empty-input-responses"),
        pytest.param({"something_else": {"action": "accept"}}, id="other-key-only"),
    ],
)
async def test_a_missing_answer_is_asked_again(
    store: NoteStore, responses: dict[str, Any] | None
) -> None:
    seeded = await seed(store)
    node_a, node_b = make_nodes(store, 2)
    state, _ = await ask(node_a)

    res = result(await answer(node_b, state, responses))
    assert res["resultType"] == "input_required"
    assert res["requestState"]
    assert res["requestState"] != state
    assert offered(res) == list(seeded.tps)
    assert await present(store, seeded.all) == set(seeded.all)


# --- expiry on the Redis clock ---------------------------------------------------------------

SKEW_MS = 10 * 60_000
SHORT_TTL_MS = 1_500


async def test_expiry_is_decided_by_the_redis_clock_whatever_the_node_clocks_say(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    base = demo_config(state_ttl_ms=SHORT_TTL_MS)
    ahead = Node(
        replace(base, node_id="ahead", node_clock_ms=lambda: wall_clock_ms() + SKEW_MS), store
    )
    behind = Node(
        replace(base, node_id="behind", node_clock_ms=lambda: wall_clock_ms() - SKEW_MS), store
    )

    # Honoured before expiry on a node whose clock says it expired minutes ago.
    honoured, _ = await ask(behind)
    content, _ = deleted(await answer(ahead, honoured, accept(seeded.tps[0])))
    assert content == {"deleted": True, "noteId": seeded.tps[0]}

    # Refused after expiry on a node whose clock says there are minutes left.
    late, _ = await ask(ahead)
    exp_ms = ahead.config.key_ring.open(late, audience=base.server_name).exp_ms
    await sleep_until(store, exp_ms + 100)
    assert_invalid_state(await answer(behind, late, accept(seeded.tps[1])))
    assert_invalid_state(await answer(ahead, late, cancel()))
    assert await present(store, seeded.all) == set(seeded.all) - {seeded.tps[0]}


async def sleep_until(store: NoteStore, redis_ms: int) -> None:
    """Sleep (trio's clock) until the Redis server clock reads at least ``redis_ms``."""
    await trio.sleep(max(0, redis_ms - await store.redis_time_ms()) / 1000)
    assert await store.redis_time_ms() >= redis_ms


class FrozenTime:
    """Stands in for the ``time`` module the embedded server's TIME command reads."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def time(self) -> float:
        # Mid-millisecond, so float rounding cannot move TIME to a neighbouring millisecond.
        return (self.now_ms * 1000 + 500) / 1_000_000


@pytest.fixture
async def embedded_store(embedded_url: str) -> AsyncIterator[NoteStore]:
    """A NoteStore on the embedded store only, under a prefix of the test's own."""
    prefix = new_prefix()
    async with redis_client(embedded_url) as client:
        yield NoteStore(client, prefix=prefix, replay_grace_ms=1_000)
    delete_prefix(embedded_url, prefix)


async def test_a_state_is_honoured_one_millisecond_before_expiry_and_refused_at_expiry(
    embedded_store: NoteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded server's clock frozen at exp - 1, then at exp. A real server's clock cannot
    be set: tests/test_expiry_on_redis_clock.py aims answers at the boundary by Redis' TIME."""
    store = embedded_store
    seeded = await seed(store)
    node_a, node_b = make_nodes(store, 2)
    ring, audience = node_a.config.key_ring, node_a.config.server_name
    before_exp, _ = await ask(node_a)
    at_exp, _ = await ask(node_a)

    exp = ring.open(before_exp, audience=audience).exp_ms
    monkeypatch.setattr(server_mixin, "time", FrozenTime(exp - 1))
    assert await store.redis_time_ms() == exp - 1
    content, _ = deleted(await answer(node_b, before_exp, accept(seeded.tps[0])))
    assert content == {"deleted": True, "noteId": seeded.tps[0]}

    exp = ring.open(at_exp, audience=audience).exp_ms
    monkeypatch.setattr(server_mixin, "time", FrozenTime(exp))
    assert await store.redis_time_ms() == exp
    assert_invalid_state(await answer(node_b, at_exp, accept(seeded.tps[1])))
    assert_invalid_state(await answer(node_b, at_exp, decline()))
    assert await present(store, seeded.all) == set(seeded.all) - {seeded.tps[0]}


async def test_replay_entries_answer_late_retries_then_vanish_after_expiry_plus_grace(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    ttl_ms, grace_ms = 400, store.replay_grace_ms
    node_a, node_b = make_nodes(store, 2, state_ttl_ms=ttl_ms)
    ring, audience = node_a.config.key_ring, node_a.config.server_name
    executed, _ = await ask(node_a)
    declined, _ = await ask(node_a)
    deleted(await answer(node_b, executed, accept(seeded.tps[0])))
    deleted(await answer(node_b, declined, decline()))

    keys = store.keys(DEMO_TENANT)
    replay_keys = [keys.replay(ring.open(s, audience=audience).nonce) for s in (executed, declined)]
    exp = max(ring.open(s, audience=audience).exp_ms for s in (executed, declined))
    for key in replay_keys:
        assert await raw(store).exists([key]) == 1
        assert 0 < await raw(store).pttl(key) <= ttl_ms + grace_ms

    # Past the expiry but within the grace, a retry still learns the recorded outcome.
    await sleep_until(store, exp + 200)
    assert deleted(await answer(node_a, executed, accept(seeded.tps[0]))) == (
        {"deleted": True, "noteId": seeded.tps[0]},
        True,
    )
    assert deleted(await answer(node_a, declined, decline())) == ({"deleted": False}, True)

    # Past expiry plus grace, the entries are gone and the states are plainly expired.
    await sleep_until(store, exp + grace_ms + 200)
    for key in replay_keys:
        assert await raw(store).exists([key]) == 0
    assert_invalid_state(await answer(node_a, executed, accept(seeded.tps[0])))
    assert await deletes_of(store, seeded.tps[0]) == 1


# --- counters --------------------------------------------------------------------------------


async def test_node_statistics_count_rounds_executions_replays_and_rejections(
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    node_a, node_b = make_nodes(store, 2)
    state, _ = await ask(node_a)
    for _ in range(3):
        deleted(await answer(node_b, state, accept(seeded.tps[0])))
    assert_invalid_state(await answer(node_b, state, decline()))

    a, b = node_a.statistics(), node_b.statistics()
    assert (a.requests, a.rounds, a.executions, a.replays) == (1, 1, 0, 0)
    assert (b.requests, b.rounds, b.executions, b.replays) == (4, 0, 1, 2)
    assert b.rejections == 1
    assert b.errors == {-32602: 1}
    assert a.errors == {}
