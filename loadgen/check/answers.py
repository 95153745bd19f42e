"""Each confirm of the history in the model's words, and the groups and changes the search
works on.

Layer: loadgen.check. Pure module: no I/O, no node code. ``model_search`` searches; this module
reads: what each answer sent (``answer_of``) and got (``observed``), where it may sit on the
Redis clock, which states and notes belong together (``groups``: P-compositionality), and the
ordered changes of one group (``events_of``: journal entries, expiries, replay-entry expiries).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from loadgen.check.model import (
    CANCELLED,
    DECLINED,
    EXECUTED,
    INVALID_PARAMS,
    REFUSAL,
    REPLAY_DECLINED,
    REPLAY_EXECUTED,
    Answer,
    ModelReply,
    NoteView,
    World,
)
from loadgen.check.timeline import Bounds, precedes

if TYPE_CHECKING:
    from loadgen.check.context import Call, LearnedState
    from store.journal import JournalEntry

INVALID_STATE_CODE = -32602
INVALID_STATE_MESSAGE = "Invalid or expired requestState"
REFUSAL_STATUS = 400
LEGACY_STREAM_STATUS = 200
"""A legacy call's error arrives on its SSE stream, whose HTTP status was 200 from the start."""


@dataclass(frozen=True)
class Answered:
    """One confirm in the search."""

    call: Call
    nonce: str
    answer: Answer
    observed: ModelReply | None
    """None: outcome unknown (info)."""
    bounds: Bounds
    workspace: str
    shown_version: int | None
    reask: frozenset[str]

    @property
    def index(self) -> int:
        """History index of the invoke."""
        return self.call.invoke.index

    @property
    def kind(self) -> str:
        """The flow's race kind."""
        return self.call.invoke.kind

    def before(self, other: Call) -> bool:
        """Completed before ``other`` was invoked (real time)."""
        return precedes(self.call, other)

    def after(self, other: Call) -> bool:
        """Invoked after ``other`` completed."""
        return precedes(other, self.call)

    @property
    def legacy(self) -> bool:
        """Answered by a 2025-11-25 client (its confirm names the call's stream node)."""
        return _is_legacy(self.call)

    def world(self, note: NoteView) -> World:
        """The world this answer meets where its note is ``note``."""
        return World(self.workspace, self.shown_version, note, self.reask, self.legacy)


@dataclass(frozen=True)
class Event:
    """One change in a group's sequence: a journal entry, an expiry, a replay entry's expiry."""

    what: Literal["journal", "expire", "forget"]
    nonce: str
    entry: JournalEntry | None
    before_max: int
    """An answer placed before this event took effect no later than this (Redis ms)."""
    after_min: int
    """An answer placed after it took effect no earlier than this."""
    cause: Call | None = None

    @property
    def decision(self) -> bool:
        """An execution or a decline of one of the group's states."""
        e = self.entry
        return e is not None and bool(e.nonce) and e.op in ("delete", "move", "decline")


# --- reading the history --------------------------------------------------------------------


def observed(c: Call, tool: str, answer: Answer) -> ModelReply | None:
    """The reply a confirm got, in the model's words (None: unknown outcome)."""
    if c.outcome == "info":
        return None
    r = c.result
    if c.outcome == "fail":
        return _error(r, legacy=_is_legacy(c))
    if r.get("reask"):
        return ModelReply("reask")
    if r.get("isError"):
        return ModelReply("error_result")
    word, other = ("archived", "deleted") if tool == "notes_archive" else ("deleted", "archived")
    if r.get(other) is True:
        return ModelReply(f"told {other} by a {tool}")
    note = str(r.get("noteId") or "")
    if r.get(word) is True:
        return ModelReply(REPLAY_EXECUTED if r.get("replay") else EXECUTED, note)
    if r.get("replay"):
        return ModelReply(REPLAY_DECLINED)
    return ModelReply(
        {"cancel": CANCELLED, "decline": DECLINED, "accept_no": DECLINED}.get(
            answer.kind, "not_done"
        )
    )


def _is_legacy(c: Call) -> bool:
    return "stream_node" in c.v


def _error(r: Mapping[str, Any], *, legacy: bool) -> ModelReply:
    code, status = r.get("code"), r.get("status")
    statuses = {REFUSAL_STATUS, LEGACY_STREAM_STATUS} if legacy else {REFUSAL_STATUS}
    if code == INVALID_STATE_CODE and r.get("message") == INVALID_STATE_MESSAGE:
        return (
            ModelReply(REFUSAL) if status in statuses else ModelReply(f"refusal with HTTP {status}")
        )
    if code == INVALID_STATE_CODE and status in statuses:
        return ModelReply(INVALID_PARAMS)
    return ModelReply(f"error {code} (HTTP {status})")


def answer_of(c: Call, shown: LearnedState) -> Answer:
    """What the confirm sent, as the model sees it."""
    v = c.v
    if v.get("altered") or (v.get("principal"), v.get("tenant")) != (shown.principal, shown.tenant):
        return Answer("altered")
    action = v.get("action")
    if action in ("silence", "cancel", "decline"):
        return Answer(action)
    note = str(v.get("noteId") or "")
    if note not in shown.candidates:
        return Answer("off_list", note)
    return Answer("accept" if v.get("confirm") is not False else "accept_no", note)


def titles_of(calls: Sequence[Call]) -> dict[str, tuple[str, str]]:
    """nonce -> (workspace, title) its form was asked for (a re-ask inherits its parent's)."""
    out: dict[str, tuple[str, str]] = {}
    for c in calls:
        nonce = c.result.get("nonce") if c.outcome == "ok" else None
        if not isinstance(nonce, str):
            continue
        if c.invoke.f == "ask":
            out[nonce] = (str(c.v.get("workspace", "")), str(c.v.get("title", "")))
        elif c.nonce in out:
            out[nonce] = out[c.nonce]
    return out


# --- groups ---------------------------------------------------------------------------------


class _Groups:
    """Union-find over ("k", nonce) and ("n", tenant, note)."""

    def __init__(self) -> None:
        self.parent: dict[tuple[str, ...], tuple[str, ...]] = {}

    def find(self, x: tuple[str, ...]) -> tuple[str, ...]:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def join(self, a: tuple[str, ...], b: tuple[str, ...]) -> None:
        self.parent[self.find(a)] = self.find(b)

    def members(self) -> list[list[tuple[str, ...]]]:
        out: dict[tuple[str, ...], list[tuple[str, ...]]] = defaultdict(list)
        for x in list(self.parent):
            out[self.find(x)].append(x)
        return list(out.values())


def groups(
    ops: Sequence[Answered], shown: Mapping[str, LearnedState], journal: Sequence[JournalEntry]
) -> list[tuple[set[str], set[tuple[str, str]]]]:
    """(nonces, notes) per group."""
    g = _Groups()
    for op in ops:
        g.find(("k", op.nonce))
        if op.answer.note:
            g.join(("k", op.nonce), ("n", shown[op.nonce].tenant, op.answer.note))
    for e in journal:
        if e.nonce and e.note and e.nonce in shown:
            g.join(("k", e.nonce), ("n", e.tenant, e.note))
    out = []
    for members in g.members():
        nonces = {m[1] for m in members if m[0] == "k"}
        notes = {(m[1], m[2]) for m in members if m[0] == "n"}
        if nonces:
            out.append((nonces, notes))
    return out


@dataclass(frozen=True)
class JournalIndex:
    """Journal positions by nonce (decisions) and by note (its create, edits, moves, deletes),
    so that a group collects its entries without reading the whole journal."""

    entries: Sequence[JournalEntry]
    by_nonce: dict[str, list[int]]
    by_note: dict[tuple[str, str], list[int]]

    @classmethod
    def build(cls, journal: Sequence[JournalEntry]) -> JournalIndex:
        """Index a journal in order."""
        by_nonce: dict[str, list[int]] = defaultdict(list)
        by_note: dict[tuple[str, str], list[int]] = defaultdict(list)
        for i, e in enumerate(journal):
            if e.nonce:
                by_nonce[e.nonce].append(i)
            if e.note and e.op in ("create", "update", "move", "delete"):
                by_note[(e.tenant, e.note)].append(i)
        return cls(journal, dict(by_nonce), dict(by_note))


def events_of(
    nonces: set[str],
    notes: set[tuple[str, str]],
    shown: Mapping[str, LearnedState],
    journal: JournalIndex,
    causes: Mapping[tuple[str, str], Call],
    grace_ms: int,
) -> list[Event]:
    """The group's changes in order: its journal entries, expiries and replay-entry expiries.
    An expiry falls before every entry at or after ``exp`` (``now >= exp`` is expired); a
    replay entry set to expire at ``t`` may still be read at ``t`` (and by some stores not):
    both are allowed there."""
    where = {i for k in nonces for i in journal.by_nonce.get(k, ())}
    where |= {i for n in notes for i in journal.by_note.get(n, ())}
    timed: list[tuple[tuple[int, int, int], Event]] = []
    for i in where:
        e = journal.entries[i]
        cause = causes.get((e.tenant, e.id))
        timed.append(((e.at_ms, 1, i), Event("journal", e.nonce, e, e.at_ms, e.at_ms, cause)))
    for k in nonces:
        exp = shown[k].exp_ms
        if exp is None:
            continue
        timed.append(((exp, 0, 0), Event("expire", k, None, exp - 1, exp)))
        keep = exp + grace_ms
        timed.append(((keep + 1, 0, 1), Event("forget", k, None, keep + 1, keep)))
    timed.sort(key=lambda t: t[0])
    return [ev for _, ev in timed]
