"""What the history and the journal say, indexed once for every invariant: each invoke paired
with its completion (``Call``), the states the history learned (``LearnedState``), the journal's
decisions by nonce (``Context``).

Layer: loadgen.check, above ``verdict`` (imports only ``loadgen.history`` and
``loadgen.check.pairing`` of ours). The definitions the invariants use (execution, decision,
state, accepts, legit, told executed) are in ``loadgen.check.invariants``' docstring.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loadgen.check.pairing import InFlight
from loadgen.history import Op

if TYPE_CHECKING:
    from store.journal import JournalEntry

INVALID_PARAMS = -32602
INVALID_STATE_MESSAGE = "Invalid or expired requestState"
INVALID_STATE_REASON = "invalid_request_state"


@dataclass(frozen=True)
class Call:
    """An invoke with its completion (None: never completed, treated as info)."""

    invoke: Op
    done: Op | None

    @property
    def v(self) -> dict[str, Any]:
        """The invoke's value."""
        return self.invoke.value

    @property
    def outcome(self) -> str:
        """ok, fail or info."""
        return "info" if self.done is None else self.done.type

    @property
    def result(self) -> dict[str, Any]:
        """The completion's value ({} if none)."""
        return {} if self.done is None else self.done.value

    @property
    def indices(self) -> tuple[int, ...]:
        """History indices of invoke and completion."""
        return (self.invoke.index,) if self.done is None else (self.invoke.index, self.done.index)

    @property
    def nonce(self) -> str:
        """The nonce a confirm answered under."""
        return str(self.v.get("nonce") or "")

    @property
    def is_accept(self) -> bool:
        """action accept with confirm true."""
        return self.v.get("action") == "accept" and self.v.get("confirm") is True

    @property
    def is_decline(self) -> bool:
        """action decline, or accept with confirm false."""
        act = self.v.get("action")
        return act == "decline" or (act == "accept" and self.v.get("confirm") is False)

    def same_flow_as(self, e: JournalEntry) -> bool:
        """Same nonce, tenant and principal as a journal entry."""
        v = self.v
        return (self.nonce, v.get("tenant"), v.get("principal")) == (e.nonce, e.tenant, e.principal)

    def accepts(self, e: JournalEntry) -> bool:
        """This confirm accepts the note ``e`` executed on, as ``e``'s principal."""
        return self.same_flow_as(e) and self.is_accept and self.v.get("noteId") == e.note

    def legit_for(self, e: JournalEntry) -> bool:
        """An accept of ``e`` the workload meant to execute."""
        return self.accepts(e) and self.v.get("expect") == "execute"


@dataclass(frozen=True)
class LearnedState:
    """A sealed confirmation state as the history learned it."""

    nonce: str
    tenant: str
    workspace: str
    principal: str
    exp_ms: int | None
    candidates: dict[str, int]
    tool: str
    ops: tuple[int, ...]
    title: str = ""
    """The title round 1 looked up (the state binds it with the other arguments)."""
    target: str = ""
    """An archive state's sealed target workspace ("" for a delete)."""


def pair_calls(history: Sequence[Op]) -> list[Call]:
    """Invokes in history order, each with its completion: the one naming it (``completes``),
    or in older histories the first in first out per process, flow and f
    (``loadgen.check.pairing``)."""
    in_flight: InFlight[int] = InFlight()
    calls: list[Call] = []
    for op in history:
        key = (op.process, op.flow, op.f)
        if op.type == "invoke":
            in_flight.invoke(op.index, key, len(calls))
            calls.append(Call(op, None))
        else:
            slot = in_flight.complete(key, op.completes)
            if slot is not None:
                calls[slot] = Call(calls[slot].invoke, op)
    return calls


def int_or_none(value: object) -> int | None:
    return int(value) if isinstance(value, int | str) and str(value).lstrip("-").isdigit() else None


def learn_states(calls: Sequence[Call]) -> dict[str, LearnedState]:
    """nonce -> LearnedState from ask oks and re-asking confirm oks carrying a ``nonce``."""
    states: dict[str, LearnedState] = {}
    for c in calls:
        nonce = c.result.get("nonce") if c.outcome == "ok" else None
        if not isinstance(nonce, str) or not nonce:
            continue
        if c.invoke.f == "ask":
            scope = (str(c.v.get("tenant", "")), str(c.v.get("workspace", "")))
            principal, title = str(c.v.get("principal", "")), str(c.v.get("title", ""))
        else:
            parent = states.get(c.nonce)
            scope = (parent.tenant, parent.workspace) if parent else ("", "")
            principal = parent.principal if parent else ""
            title = parent.title if parent else ""
        cands = {str(n): int(ver) for n, ver in c.result.get("candidates") or []}
        states[nonce] = LearnedState(
            nonce,
            *scope,
            principal,
            int_or_none(c.result.get("exp_ms")),
            cands,
            str(c.result.get("tool", "")),
            c.indices,
            title,
            str(c.result.get("target") or ""),
        )
    return states


@dataclass
class Context:
    """The history and journal, indexed once for every invariant."""

    calls: list[Call]
    states: dict[str, LearnedState]
    confirms: dict[str, list[Call]]
    journal: Sequence[JournalEntry]
    decisions: dict[str, list[JournalEntry]]
    final_notes: Mapping[tuple[str, str], str]
    replay_left: Mapping[tuple[str, str], int]
    redis_end_ms: int
    grace_ms: int

    def flow_ops(self, nonce: str) -> list[int]:
        """History indices of a nonce's state and every confirm answered under it."""
        st = self.states.get(nonce)
        ops = list(st.ops) if st else []
        for c in self.confirms.get(nonce, []):
            ops.extend(c.indices)
        return ops

    def unlanded_decline(self, nonce: str) -> bool:
        """A decline-shaped confirm of ``nonce`` ended info and the journal holds no decline:
        a later accept labelled no_mutation may then legitimately have executed."""
        cs = self.confirms.get(nonce, [])
        journaled = any(e.op == "decline" for e in self.decisions.get(nonce, []))
        return not journaled and any(c.is_decline and c.outcome == "info" for c in cs)


def is_execution(e: JournalEntry) -> bool:
    """A delete or move that a confirmation executed (it carries a nonce)."""
    return e.op in ("delete", "move") and bool(e.nonce)


def is_decision(e: JournalEntry) -> bool:
    """An execution or a recorded decline."""
    return is_execution(e) or e.op == "decline"


def build_context(
    history: Sequence[Op],
    journal: Sequence[JournalEntry],
    final_notes: Mapping[tuple[str, str], str],
    replay_left: Mapping[tuple[str, str], int],
    redis_end_ms: int,
    grace_ms: int,
) -> Context:
    """Pair the history and index it and the journal by nonce."""
    journal = sorted(journal, key=lambda e: e.sort_key)
    calls = pair_calls(history)
    confirms: dict[str, list[Call]] = defaultdict(list)
    for c in calls:
        if c.invoke.f == "confirm":
            confirms[c.nonce].append(c)
    decisions: dict[str, list[JournalEntry]] = defaultdict(list)
    for e in journal:
        if is_decision(e):
            decisions[e.nonce].append(e)
    return Context(
        calls,
        learn_states(calls),
        dict(confirms),
        journal,
        dict(decisions),
        final_notes,
        replay_left,
        redis_end_ms,
        grace_ms,
    )


JOURNAL_OP = {"delete": "delete", "archive": "move"}
"""The ``op`` a confirm was told it executed -> the journal entry that execution writes."""


def told_executed(value: Mapping[str, Any]) -> bool:
    """Whether a confirm's ok value says it executed (deleted or archived; see the module)."""
    return value.get("executed", value.get("deleted")) is True
