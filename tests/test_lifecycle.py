"""The confirmation lifecycle table decides: every store decision is one row, each row's answer is
the documented one, and an illegal step raises and changes nothing."""

from __future__ import annotations

from collections import Counter
from typing import Any, get_args

import pytest

from nodes.config import wall_clock_ms
from nodes.errors import INVALID_STATE_DATA, INVALID_STATE_MESSAGE
from nodes.lifecycle import (
    TRANSITIONS,
    IllegalTransition,
    LifecycleEvent,
    LifecycleState,
    decide,
    observed_transition,
    reply_to,
)
from nodes.results import META_ERROR, META_REPLAY
from nodes.serving.demo import ALICE_ARCHIVE, ALICE_NOTES, DEMO_TENANT
from nodes.tools import DEFAULT_TOOLS, confirming_table
from nodes.tools.confirming import ConfirmingTool
from nodes.tools.confirming_table import ARCHIVE, DELETE, ConfirmingKind
from store.api import Confirmation, ConfirmOutcome, ConfirmStatus, NoteHead, Snapshot
from tests.harness import call_tool, error, make_nodes, result

NOTE = "n-1"
NOW_MS = wall_clock_ms()
"""The store's clock: states sealed now are unexpired by the node clock too."""

STATES: tuple[LifecycleState, ...] = get_args(LifecycleState)
EVENTS: tuple[LifecycleEvent, ...] = get_args(LifecycleEvent)


def outcome(status: ConfirmStatus, recorded: str | None, op: str = "delete") -> ConfirmOutcome:
    """A store decision: ``recorded`` is None (nothing), "declined" or "executed" (of ``op``)."""
    if recorded == "executed":
        return ConfirmOutcome(status, op, NOTE, NOW_MS)  # type: ignore[arg-type]
    return ConfirmOutcome(status, None, None, NOW_MS)


def every_store_decision(op: str = "delete") -> list[ConfirmOutcome]:
    """Every decision confirm.lua can report: one per status, two (by what the nonce recorded)
    for a replay and a conflict."""
    out: list[ConfirmOutcome] = []
    for status in get_args(ConfirmStatus):
        if status in ("replay", "conflict"):
            out += [outcome(status, "executed", op), outcome(status, "declined", op)]
        elif status == "executed":
            out.append(outcome(status, "executed", op))
        elif status == "declined":
            out.append(outcome(status, "declined", op))
        else:
            out.append(outcome(status, None, op))
    return out


# --- the table ---------------------------------------------------------------------------------


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("event", EVENTS)
def test_a_step_the_table_lacks_raises(state: LifecycleState, event: LifecycleEvent) -> None:
    if (state, event) in TRANSITIONS:
        assert reply_to(state, event) == TRANSITIONS[(state, event)]
        return
    with pytest.raises(IllegalTransition, match=f"{event} is not allowed from {state}"):
        reply_to(state, event)


def test_expired_meets_no_answer_and_a_recorded_state_only_a_repeat_or_another() -> None:
    assert not [key for key in TRANSITIONS if key[0] == "expired"]
    for recorded in ("executed", "declined"):
        events = {event for state, event in TRANSITIONS if state == recorded}
        assert events == {"same_answer", "other_answer"}, recorded


def test_every_store_decision_maps_onto_exactly_one_row_and_every_row_is_reached() -> None:
    rows = Counter(observed_transition(out) for out in every_store_decision())
    assert all(row in TRANSITIONS for row in rows), rows
    assert set(rows) == set(TRANSITIONS)
    assert set(rows.values()) == {1}, "two store decisions share a row"


def test_an_impossible_store_report_is_refused_by_the_table() -> None:
    # A "replay" of nothing recorded would be a step from shown the table lacks.
    with pytest.raises(IllegalTransition):
        reply_to("shown", "same_answer")
    assert decide(outcome("replay", "declined")) == "replay_not_done"


# --- what the client gets, per row -------------------------------------------------------------


class CannedStore:
    """One note titled "TPS report" in alice's Notes; ``confirm`` answers a fixed decision."""

    def __init__(self, decision: ConfirmOutcome) -> None:
        self.decision = decision
        self.confirmed: list[Confirmation] = []

    async def redis_time_ms(self) -> int:
        return NOW_MS

    async def find(self, tenant: str, workspace: str, title: str, limit: int) -> Snapshot:
        assert tenant == DEMO_TENANT
        note = NoteHead(NOTE, title, ALICE_NOTES, 1, NOW_MS, NOW_MS)
        return Snapshot(NOW_MS, (note,))

    async def confirm(self, c: Confirmation) -> ConfirmOutcome:
        self.confirmed.append(c)
        return self.decision


EXPECTED: dict[tuple[LifecycleState, LifecycleEvent], tuple[str, bool | None, bool]] = {
    # row: (what the client gets, the result key's value, marked as a replay)
    ("shown", "execute"): ("complete", True, False),
    ("shown", "decline"): ("complete", False, False),
    ("shown", "cancel"): ("complete", False, False),
    ("shown", "change"): ("input_required", None, False),
    ("shown", "vanish"): ("isError: That note no longer exists", False, False),
    ("shown", "leave"): ("isError: That note is no longer in the workspace", False, False),
    ("shown", "refuse"): (
        "isError: The target workspace holds 10000 notes, its limit",
        False,
        False,
    ),
    ("shown", "expire"): ("invalid_state", None, False),
    ("executed", "same_answer"): ("complete", True, True),
    ("declined", "same_answer"): ("complete", False, True),
    ("executed", "other_answer"): ("invalid_state", None, False),
    ("declined", "other_answer"): ("invalid_state", None, False),
}
"""The lifecycle table of nodes/lifecycle.py's docstring, as the client sees it."""


def done_content(kind: ConfirmingKind) -> dict[str, Any]:
    content: dict[str, Any] = {kind.result_key: True, "noteId": NOTE}
    if kind is ARCHIVE:
        content["uri"] = f"{ALICE_ARCHIVE}/{NOTE}.md"
    return content


def test_the_expected_table_covers_every_row() -> None:
    assert set(EXPECTED) == set(TRANSITIONS)


def test_every_served_confirming_tool_has_its_row_in_the_confirming_table() -> None:
    served = {t.name: t.kind for t in DEFAULT_TOOLS if isinstance(t, ConfirmingTool)}
    rows = [v for v in vars(confirming_table).values() if isinstance(v, ConfirmingKind)]
    assert served == {row.tool: row for row in rows}
    assert len(rows) == 2  # the scan still finds the rows (DELETE, ARCHIVE)
    assert set(served.values()) == {DELETE, ARCHIVE}
    assert len({k.form_key for k in served.values()}) == len(served), "form keys must differ"


@pytest.mark.parametrize("kind", [DELETE, ARCHIVE], ids=lambda k: k.tool)
@pytest.mark.parametrize(
    "decision", every_store_decision(), ids=lambda o: f"{o.status}-{o.recorded}"
)
async def test_each_row_answers_the_client_as_documented(
    kind: ConfirmingKind, decision: ConfirmOutcome
) -> None:
    decision = outcome(decision.status, decision.recorded, kind.op)
    store = CannedStore(decision)
    node_a, node_b = make_nodes(store, 2)  # type: ignore[arg-type]
    args = {"workspaceUri": ALICE_NOTES, "title": "TPS report"}
    first = result(await call_tool(node_a, kind.tool, args))
    assert first["resultType"] == "input_required"
    answer = {"action": "accept", "content": {"noteId": NOTE, "confirm": True}}
    reply = await call_tool(
        node_b, kind.tool, args, state=first["requestState"], responses={kind.form_key: answer}
    )

    what, done, replay = EXPECTED[observed_transition(decision)]
    assert [c.op for c in store.confirmed] == [kind.op]
    if what == "invalid_state":
        err = error(reply)
        assert (err["message"], err.get("data")) == (INVALID_STATE_MESSAGE, INVALID_STATE_DATA)
        assert node_b.statistics().rejections == 1
        return
    res = result(reply)
    assert bool(res.get("_meta", {}).get(META_REPLAY)) is replay
    assert node_b.statistics().replays == int(replay)
    if what == "input_required":
        assert res["resultType"] == "input_required"
        assert set(res["inputRequests"]) == {kind.form_key}
        return
    assert res["resultType"] == "complete"
    if what.startswith("isError: "):
        assert res["isError"] is True
        message = f"{what.removeprefix('isError: ')}; nothing was {kind.result_key}"
        assert "structuredContent" not in res
        assert res["content"] == [{"type": "text", "text": message}]
        assert res["_meta"][META_ERROR] == {"error": message, kind.result_key: False}
        return
    assert res["isError"] is False
    content = res["structuredContent"]
    assert content == (done_content(kind) if done else {kind.result_key: False})
    assert node_b.statistics().executions == int(done is True and not replay)
