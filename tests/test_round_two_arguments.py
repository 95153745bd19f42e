"""Round 2 of a confirming tool takes its arguments as the sealed state binds them.

The state binds the digest of the arguments exactly as round 1 sent them, and round 1 sealed it
only after those arguments passed every rule, so round 2 does not run the title rules again
(``nodes.tools.base.BOUND_BY_STATE``): it keeps the types and NFC. What must not change with
that: every argument that differs from round 1's, in value, spelling, type or presence, is still
the one fixed invalid-state error and touches no note. Both confirming tools, embedded store and
real Redis.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any

import pytest

from nodes.errors import INVALID_STATE_DATA, INVALID_STATE_MESSAGE
from nodes.protocol import Node, Reply, RequestContext
from nodes.serving.demo import ALICE_ARCHIVE, ALICE_NOTES, DEMO_TENANT
from nodes.tools import crud, text_rules
from store.notes import NoteStore
from tests.harness import call_tool, error, make_nodes, result

TITLE = "Café report"
"""Not ASCII, so round 1 walks every character (the fast path would hide a second walk)."""
NFD_TITLE = unicodedata.normalize("NFD", TITLE)
ARGS: dict[str, Any] = {"workspaceUri": ALICE_NOTES, "title": TITLE}


@dataclass(frozen=True)
class Flow:
    """One confirming tool: its name, form key and result key."""

    tool: str
    form_key: str
    done: str


FLOWS = (
    Flow("notes_delete", "confirm_delete", "deleted"),
    Flow("notes_archive", "confirm_archive", "archived"),
)


def accept(flow: Flow, note_id: str) -> dict[str, Any]:
    return {flow.form_key: {"action": "accept", "content": {"noteId": note_id, "confirm": True}}}


async def ask(node: Node, flow: Flow, args: dict[str, Any]) -> str:
    res = result(await call_tool(node, flow.tool, args))
    assert res["resultType"] == "input_required", res
    state: str = res["requestState"]
    return state


async def answer(node: Node, flow: Flow, state: str, note_id: str, args: Any) -> Reply:
    return await node.handle(
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {
                "name": flow.tool,
                "arguments": args,
                "requestState": state,
                "inputResponses": accept(flow, note_id),
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
                },
            },
        },
        RequestContext(principal="alice"),
    )


def assert_invalid_state(reply: Reply) -> None:
    """The one fixed answer to any rejected requestState."""
    assert reply.status == 400, reply
    assert error(reply) == {
        "code": -32602,
        "message": INVALID_STATE_MESSAGE,
        "data": INVALID_STATE_DATA,
    }


def done(reply: Reply, flow: Flow) -> dict[str, Any]:
    assert reply.status == 200, reply
    res = result(reply)
    assert res["resultType"] == "complete", res
    assert res["isError"] is False, res
    content: dict[str, Any] = res["structuredContent"]
    assert content[flow.done] is True, content
    return content


async def untouched(store: NoteStore, note_id: str) -> bool:
    note = await store.get(DEMO_TENANT, note_id)
    return note is not None and note.workspace == ALICE_NOTES


@pytest.fixture
def counted_rules(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The titles the title rules were run on (``nodes.tools.crud``'s validator calls them)."""
    seen: list[object] = []
    rules = text_rules.normalize_title

    def counting(value: object) -> object:
        seen.append(value)
        return rules(value)

    monkeypatch.setattr(crud, "normalize_title", counting)
    return seen


@pytest.mark.parametrize("flow", FLOWS, ids=lambda f: f.tool)
async def test_round_two_does_not_run_the_title_rules_again(
    store: NoteStore, flow: Flow, counted_rules: list[object]
) -> None:
    note = await store.create(DEMO_TENANT, ALICE_NOTES, TITLE, "", "alice")
    node_a, node_b = make_nodes(store, 2)
    state = await ask(node_a, flow, ARGS)
    assert counted_rules == [TITLE]

    content = done(await answer(node_b, flow, state, note.note_id, ARGS), flow)
    assert content["noteId"] == note.note_id
    assert counted_rules == [TITLE]


@pytest.mark.parametrize("flow", FLOWS, ids=lambda f: f.tool)
async def test_a_title_sent_in_nfd_in_both_rounds_is_taken_as_nfc_in_round_two(
    store: NoteStore, flow: Flow
) -> None:
    """Round 2 still normalizes: the store is asked for the title as round 1 showed it."""
    note = await store.create(DEMO_TENANT, ALICE_NOTES, TITLE, "", "alice")
    args = {"workspaceUri": ALICE_NOTES, "title": NFD_TITLE}
    node_a, node_b = make_nodes(store, 2)
    state = await ask(node_a, flow, args)

    content = done(await answer(node_b, flow, state, note.note_id, args), flow)
    assert content["noteId"] == note.note_id
    assert not await untouched(store, note.note_id)


TAMPERED: dict[str, Any] = {
    "other title": {**ARGS, "title": "Groceries"},
    "title in NFD (same title, other spelling)": {**ARGS, "title": NFD_TITLE},
    "title with a lookalike letter": {**ARGS, "title": "Cafe\u0301 rep\u043ert"},
    "title with a trailing space": {**ARGS, "title": TITLE + " "},
    "title not a string": {**ARGS, "title": 123},
    "title as a list": {**ARGS, "title": [TITLE]},
    "title dropped": {"workspaceUri": ALICE_NOTES},
    "workspace in another spelling": {**ARGS, "workspaceUri": ALICE_NOTES + "/"},
    "other workspace": {**ARGS, "workspaceUri": ALICE_ARCHIVE},
    "workspace not a string": {**ARGS, "workspaceUri": None},
    "workspace dropped": {"title": TITLE},
    "extra argument": {**ARGS, "force": True},
    "no arguments": {},
    "arguments not an object": [ARGS],
}


@pytest.mark.parametrize("flow", FLOWS, ids=lambda f: f.tool)
@pytest.mark.parametrize("change", sorted(TAMPERED))
async def test_every_changed_argument_under_a_state_is_refused_and_touches_nothing(
    store: NoteStore, flow: Flow, change: str
) -> None:
    note = await store.create(DEMO_TENANT, ALICE_NOTES, TITLE, "", "alice")
    other = await store.create(DEMO_TENANT, ALICE_NOTES, "Groceries", "", "alice")
    node_a, node_b = make_nodes(store, 2)
    state = await ask(node_a, flow, ARGS)

    reply = await answer(node_b, flow, state, note.note_id, TAMPERED[change])
    if change == "arguments not an object":
        assert reply.status == 400, reply
        assert error(reply)["code"] == -32602
    else:
        assert_invalid_state(reply)
    assert await untouched(store, note.note_id)
    assert await untouched(store, other.note_id)
    # The state itself is still good for the arguments it binds.
    done(await answer(node_a, flow, state, note.note_id, ARGS), flow)
