"""The confirmation lifecycle as one transition table: the table decides, nothing beside it.

Layer: node, protocol core. Pure module: no I/O. The store decides an answer atomically
(``confirm.lua``) and reports what it found and did (``store.api.ConfirmOutcome``); ``observed``
reads that report as the state the store found and the event it applied, and the table gives the
next state and what the client gets. A step the table lacks raises ``IllegalTransition`` and
changes nothing. "done" is each tool's own word (``deleted``, ``archived``).

    state      event          next       reply             what the client gets
    shown      execute        executed   done              complete {done: true, noteId}
    shown      decline        declined   not_done          complete {done: false} (recorded)
    shown      cancel         shown      not_done          complete {done: false} (nothing written)
    shown      change         shown      reask             input_required again, fresh candidates
    shown      vanish         shown      gone              isError: the note no longer exists
    shown      leave          shown      left              isError: the note left the workspace
    shown      refuse         shown      full              isError: the target workspace is full
    shown      expire         expired    refused           the fixed invalid-state error
    executed   same_answer    executed   replay_done       the recorded outcome, marked as a replay
    declined   same_answer    declined   replay_not_done   the recorded outcome, marked as a replay
    executed   other_answer   executed   refused           the fixed invalid-state error
    declined   other_answer   declined   refused           the fixed invalid-state error

``expired`` is terminal: no row leaves it. The store keeps no record of an expiry (only of
decisions), so an unrecorded state past its expiry is reported as found ``shown`` again and
expires again, with the same answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from store.api import ConfirmOutcome, ConfirmStatus

LifecycleState = Literal["shown", "executed", "declined", "expired"]
LifecycleEvent = Literal[
    "execute",
    "decline",
    "cancel",
    "change",
    "vanish",
    "leave",
    "refuse",
    "expire",
    "same_answer",
    "other_answer",
]
Reply = Literal[
    "done",
    "not_done",
    "reask",
    "gone",
    "left",
    "full",
    "refused",
    "replay_done",
    "replay_not_done",
]
"""What the client gets, named; each confirming tool words it (``nodes.tools.confirming``)."""


class IllegalTransition(Exception):
    """A step the lifecycle does not allow; raising it changes nothing."""


@dataclass(frozen=True, slots=True)
class Step:
    """One row's outcome: the next state and what the client gets."""

    next: LifecycleState
    reply: Reply


TRANSITIONS: Mapping[tuple[LifecycleState, LifecycleEvent], Step] = MappingProxyType(
    {
        ("shown", "execute"): Step("executed", "done"),
        ("shown", "decline"): Step("declined", "not_done"),
        ("shown", "cancel"): Step("shown", "not_done"),
        ("shown", "change"): Step("shown", "reask"),
        ("shown", "vanish"): Step("shown", "gone"),
        ("shown", "leave"): Step("shown", "left"),
        ("shown", "refuse"): Step("shown", "full"),
        ("shown", "expire"): Step("expired", "refused"),
        ("executed", "same_answer"): Step("executed", "replay_done"),
        ("declined", "same_answer"): Step("declined", "replay_not_done"),
        ("executed", "other_answer"): Step("executed", "refused"),
        ("declined", "other_answer"): Step("declined", "refused"),
    }
)

STORE_EVENTS: Mapping[ConfirmStatus, LifecycleEvent] = MappingProxyType(
    {
        "executed": "execute",
        "declined": "decline",
        "cancelled": "cancel",
        "changed": "change",
        "gone": "vanish",
        "moved": "leave",
        "full": "refuse",
        "expired": "expire",
        "replay": "same_answer",
        "conflict": "other_answer",
    }
)
"""Each store status as the event it applied to the state it found."""


def step(state: LifecycleState, event: LifecycleEvent) -> Step:
    """The table's row for ``event`` in ``state``, or IllegalTransition."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(f"{event} is not allowed from {state}") from None


class Lifecycle:
    """One confirmation state; ``fire`` moves it by the table, or raises and leaves it as it was."""

    def __init__(self, state: LifecycleState = "shown") -> None:
        self.state: LifecycleState = state

    def fire(self, event: LifecycleEvent) -> Reply:
        """Apply ``event``: the next state is the table's, and so is the reply."""
        row = step(self.state, event)
        self.state = row.next
        return row.reply


def observed(out: ConfirmOutcome) -> tuple[LifecycleState, LifecycleEvent]:
    """The store's decision read as the state it found and the event it applied: a replay or a
    conflict found the decision recorded under the nonce; every other status found none."""
    found: LifecycleState = "shown"
    if out.status in ("replay", "conflict"):
        found = "declined" if out.recorded == "declined" else "executed"
    return found, STORE_EVENTS[out.status]


def decide(out: ConfirmOutcome) -> Reply:
    """What the client gets for the store's decision ``out``, by the table."""
    found, event = observed(out)
    return Lifecycle(found).fire(event)
