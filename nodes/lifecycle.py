"""The confirmation lifecycle as one table: the table decides, nothing beside it.

Layer: node, protocol core. Pure module: no I/O. The store decides an answer atomically
(``confirm.lua``) and reports what it found and did (``store.api.ConfirmOutcome``);
``observed_transition`` reads that report as the state the store found and the event it applied, and
the table gives what the client gets. A step the table lacks raises ``IllegalTransition``. "done" is
each tool's own word (``deleted``, ``archived``).

    state      event          reply             what the client gets
    shown      execute        done              complete {done: true, noteId}
    shown      decline        not_done          complete {done: false} (recorded)
    shown      cancel         not_done          complete {done: false} (nothing written)
    shown      change         reask             input_required again, fresh candidates
    shown      vanish         gone              isError: the note no longer exists
    shown      leave          left              isError: the note left the workspace
    shown      refuse         full              isError: the target workspace is full
    shown      expire         refused           the fixed invalid-state error
    executed   same_answer    replay_done       the recorded outcome, marked as a replay
    declined   same_answer    replay_not_done   the recorded outcome, marked as a replay
    executed   other_answer   refused           the fixed invalid-state error
    declined   other_answer   refused           the fixed invalid-state error

The table has no next-state column: a node keeps no state between answers. The state an answer
leaves is what the store records under the nonce (an execution or a decline, nothing else), and
the next answer's found state is read from that record (``observed_transition``). So a recorded
state (``executed``, ``declined``) meets only answers that repeat or contradict it, and ``expired``
meets nothing: the store keeps no record of an expiry, so an unrecorded state past its expiry is
found ``shown`` again and expires again, with the same answer.
"""

from __future__ import annotations

from collections.abc import Mapping
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
ReplyKind = Literal[
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


TRANSITIONS: Mapping[tuple[LifecycleState, LifecycleEvent], ReplyKind] = MappingProxyType(
    {
        ("shown", "execute"): "done",
        ("shown", "decline"): "not_done",
        ("shown", "cancel"): "not_done",
        ("shown", "change"): "reask",
        ("shown", "vanish"): "gone",
        ("shown", "leave"): "left",
        ("shown", "refuse"): "full",
        ("shown", "expire"): "refused",
        ("executed", "same_answer"): "replay_done",
        ("declined", "same_answer"): "replay_not_done",
        ("executed", "other_answer"): "refused",
        ("declined", "other_answer"): "refused",
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


def reply_to(state: LifecycleState, event: LifecycleEvent) -> ReplyKind:
    """The table's reply to ``event`` in ``state``, or IllegalTransition."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(f"{event} is not allowed from {state}") from None


def observed_transition(out: ConfirmOutcome) -> tuple[LifecycleState, LifecycleEvent]:
    """The store's decision read as the state it found and the event it applied: a replay or a
    conflict found the decision recorded under the nonce; every other status found none."""
    found: LifecycleState = "shown"
    if out.status in ("replay", "conflict"):
        found = "declined" if out.recorded == "declined" else "executed"
    return found, STORE_EVENTS[out.status]


def decide(out: ConfirmOutcome) -> ReplyKind:
    """What the client gets for the store's decision ``out``, by the table."""
    return reply_to(*observed_transition(out))
