"""The sequential model of one confirmation state: the legal replies to each answer under it.

Layer: loadgen.check. Pure module: no I/O, and deliberately no node code. It is an independent
statement of what the protocol promises (design §1 and §4, docs/explanation/model.md), in the
manner of porcupine's ``Model{Init, Step}``: ``INIT`` is a state nobody answered yet, ``step``
gives, for one answer and what the journal says of its note at that point, every legal reply
with the state it leaves behind and the journal entry it implies. ``loadgen.check.model_search``
drives it along the order the journal fixes.

    state                     answer                        legal replies
    shown                     accept, note as shown         executed:N   (journal: execution)
    shown                     accept, note edited           reask
    shown                     accept, note gone or moved    error_result (isError)
    shown                     decline, accept confirm=no    declined     (journal: decline)
    shown                     cancel                        cancelled    (state stays shown)
    used (recorded)           the same answer               the recorded outcome, as a replay
    used (recorded)           another answer                refusal
    expired, not used         accept, decline, cancel       refusal (legacy: error_result)
    any                       silence (no answer)           reask
    any                       altered token, arguments      refusal
                              or principal
    any                       a note not offered            invalid_params

A used state stays used past its expiry until its replay entry goes, ``grace`` after it
(``forget``); a refusal is the one fixed error (-32602 "Invalid or expired requestState", HTTP
400). A re-ask looks the title up again: with no note of that title left it is an ``isError``
result instead, so where the lookup's outcome is uncertain both are legal (``World.reask``).
A legacy (2025-11-25) client never sees a requestState, so the adapter tells it of an expired
state with an ``isError`` result ("The request expired before it completed", or "No answer from
the client in time" when its answer reached the call only past the state's lifetime): for a
legacy answer (``World.legacy``) that is the expired state's one reply in place of the refusal.
The model judges an answer where its call ended; a legacy call waits out its state, so an
answer a node took in time and the call then never heard looks expired here:
``loadgen.check.legacy`` judges it at the moment it was posted (``legacy_answers_heard``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

AnswerKind = Literal["accept", "accept_no", "decline", "cancel", "silence", "altered", "off_list"]
Effect = Literal["execute", "decline"]

EXECUTED = "executed"
REPLAY_EXECUTED = "replay_executed"
REPLAY_DECLINED = "replay_declined"
DECLINED = "declined"
CANCELLED = "cancelled"
REFUSAL = "refusal"
REASK = "reask"
ERROR_RESULT = "error_result"
INVALID_PARAMS = "invalid_params"

PROGRESS = frozenset({EXECUTED, REPLAY_EXECUTED, REPLAY_DECLINED, DECLINED, CANCELLED, REASK})
"""Replies that move the user forward: a model that owes only these owes progress (liveness)."""


@dataclass(frozen=True)
class ModelReply:
    """One reply a client can see: its name and, for an execution or its replay, the note."""

    name: str
    note: str = ""

    def __str__(self) -> str:
        return f"{self.name}:{self.note}" if self.note else self.name


@dataclass(frozen=True)
class Answer:
    """What a client sent under a state (``altered``: a token, arguments or principal the state
    does not bind, so the state never opens)."""

    kind: AnswerKind
    note: str = ""

    @property
    def key(self) -> str:
        """Same key, same answer: what the replay store compares."""
        return f"{self.kind}:{self.note}" if self.kind in ("accept", "accept_no") else self.kind


@dataclass(frozen=True)
class Recorded:
    """The outcome recorded under a state's nonce. ``key`` None: no observed answer explains
    the decision, so a later answer may count as the same one or as another."""

    key: str | None
    outcome: Literal["executed", "declined"]
    note: str = ""


@dataclass(frozen=True)
class State:
    """One confirmation state: its recorded outcome (if used) and whether it expired."""

    recorded: Recorded | None = None
    expired: bool = False
    forgotten: bool = False


INIT = State()


@dataclass(frozen=True)
class NoteView:
    """The answered note as the journal has it at one point; ``known`` False: the journal holds
    nothing of it up to there (created before the journal starts), so anything goes."""

    known: bool = False
    exists: bool = False
    workspace: str = ""
    version: int = 0


@dataclass(frozen=True)
class World:
    """What an answer's legal replies depend on besides the state."""

    workspace: str
    """The workspace the state was shown for."""
    shown_version: int | None
    """The version of the answered note as shown (None: not one of the candidates)."""
    note: NoteView
    reask: frozenset[str] = frozenset({REASK})
    """What a re-ask may come out as: ``reask``, or ``error_result`` when no note of the title
    is left for it to offer, or both when that is uncertain."""
    legacy: bool = False
    """A 2025-11-25 client's answer: an expired state is told with an ``isError`` result."""


@dataclass(frozen=True)
class Step:
    """One legal reply's consequence: the next state and the journal entry it implies."""

    state: State
    effect: Effect | None = None


def expire(s: State) -> State:
    """The state's expiry passed on the Redis clock."""
    return replace(s, expired=True)


def forget(s: State) -> State:
    """The replay entry went (expiry plus grace): nothing is recorded any more."""
    return replace(s, recorded=None, forgotten=s.recorded is not None or s.forgotten)


def replay_of(r: Recorded) -> ModelReply:
    """The recorded outcome sent again."""
    return (
        ModelReply(REPLAY_EXECUTED, r.note)
        if r.outcome == "executed"
        else ModelReply(REPLAY_DECLINED)
    )


def step(s: State, a: Answer, w: World) -> dict[ModelReply, Step]:
    """Every legal reply to answer ``a`` in state ``s``, with its consequence."""
    stay = Step(s)
    if a.kind == "silence":
        return dict.fromkeys((ModelReply(r) for r in w.reask), stay)
    if a.kind == "altered":
        return {ModelReply(REFUSAL): stay}
    if a.kind == "off_list":
        return {ModelReply(INVALID_PARAMS): stay}
    rec = s.recorded
    if rec is not None:
        if rec.key is None:
            return {replay_of(rec): stay, ModelReply(REFUSAL): stay}
        return {replay_of(rec) if rec.key == a.key else ModelReply(REFUSAL): stay}
    if s.expired:
        return {ModelReply(ERROR_RESULT if w.legacy else REFUSAL): stay}
    if a.kind == "cancel":
        return {ModelReply(CANCELLED): stay}
    if a.kind in ("decline", "accept_no"):
        return {
            ModelReply(DECLINED): Step(replace(s, recorded=Recorded(a.key, "declined")), "decline")
        }
    return _accept(s, a, w)


def _accept(s: State, a: Answer, w: World) -> dict[ModelReply, Step]:
    stay = Step(s)
    done = Step(replace(s, recorded=Recorded(a.key, "executed", a.note)), "execute")
    executed = {ModelReply(EXECUTED, a.note): done}
    reask = dict.fromkeys((ModelReply(r) for r in w.reask), stay)
    if not w.note.known:
        return executed | reask | {ModelReply(ERROR_RESULT): stay}
    if not w.note.exists or w.note.workspace != w.workspace:
        return {ModelReply(ERROR_RESULT): stay}
    if w.note.version != w.shown_version:
        return reask
    return executed
