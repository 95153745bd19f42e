"""A call's store operation (``CallContext.write_op``) is made on first use, once per call.

Layer: tests. A fresh operation costs a random id, and only writes record one, so the confirming
tools' rounds make none; a write makes exactly one and uses it for every store call of the
request (its recorded-write lookup and its write).
"""

from __future__ import annotations

import pytest

from nodes.serving.demo import ALICE_NOTES, DEMO_TENANT
from nodes.tools.base import CallContext
from store.api import WriteOp
from store.notes import NoteStore
from tests.harness import accept, call_tool, demo_config, make_nodes, result


@pytest.fixture
def fresh_ops(monkeypatch: pytest.MonkeyPatch) -> list[WriteOp]:
    """Every operation ``WriteOp.fresh`` makes, in order."""
    made: list[WriteOp] = []
    real = WriteOp.fresh

    def counted() -> WriteOp:
        made.append(real())
        return made[-1]

    monkeypatch.setattr(WriteOp, "fresh", counted)
    return made


def test_the_operation_is_made_once_and_kept(fresh_ops: list[WriteOp]) -> None:
    ctx = CallContext(
        principal="alice",
        capabilities={},
        arguments={},
        input_responses=None,
        request_state=None,
        config=demo_config(),
        store=None,  # type: ignore[arg-type]
        counters=None,  # type: ignore[arg-type]
        write_op_of=WriteOp.fresh,
    )
    assert fresh_ops == []
    first = ctx.write_op
    assert ctx.write_op is first
    assert fresh_ops == [first]


async def test_a_delete_flow_makes_no_operation_and_a_create_one(
    store: NoteStore, fresh_ops: list[WriteOp]
) -> None:
    note = await store.create(DEMO_TENANT, ALICE_NOTES, "TPS report", "", "alice")
    fresh_ops.clear()  # the seeding's own
    (node,) = make_nodes(store, 1)
    args = {"workspaceUri": ALICE_NOTES, "title": "TPS report"}
    asked = result(await call_tool(node, "notes_delete", args))
    state = asked["requestState"]
    done = result(
        await call_tool(node, "notes_delete", args, state=state, responses=accept(note.note_id))
    )
    assert done["structuredContent"] == {"deleted": True, "noteId": note.note_id}
    assert fresh_ops == []

    created = result(await call_tool(node, "notes_create", {**args, "title": "Groceries"}))
    assert created["isError"] is False, created
    assert len(fresh_ops) == 1
