"""The checker for a target without a journal: the history and the observed final state alone.

Layer: loadgen.check. Pure module: no I/O. For a foreign MCP server the load generator cannot read a
journal of mutations, nor open the states (``loadgen.states.OpaqueStates``); what it has is
every answer it got (the history) and, after the run, which notes are still listed where
(``final``: note id -> workspace, for every title the run created). From these alone it decides
the invariants below, each a ``Verdict`` with the operations that prove it:

- ``one_note_per_state``: no state was told to have acted on two different notes;
- ``no_note_acted_on_by_two_states``: no note was told deleted (or archived) under two states;
- ``told_executed_took_effect``: a note told deleted is gone, one told archived left its inbox;
- ``refused_answers_did_not_act``: no answer meant to change nothing (after a decline, under a
  tampered or foreign state, with changed arguments, after expiry) was told it acted;
- ``notes_vanish_only_by_confirmation``: every note gone at the end was named by an accept
  meant to act;
- ``retries_learn_the_outcome``: once an answer acted (told so, or its note vanished with no
  other state to explain it), every retry and copy of it under the same state learned that
  outcome, not an error;
- ``before_expiry_honoured_client_clock``: accepts answered before the state's earliest
  possible expiry, on the client's clock, acted.

What it cannot decide without the server's journal is said as ``unknown`` verdicts naming why
(``UNDECIDABLE``): whether a handler ran its mutation again where that changed nothing visible,
what answers of unknown outcome did, expiry on the server's own clock, whether used-state
records expire, and whether every reply fits the sequential model (which needs the order of
the mutations).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from loadgen.check.context import Call, pair_calls, told_executed
from loadgen.check.verdict import CheckResult, Finding, Verdict, verdict
from loadgen.history import Op

UNDECIDABLE: tuple[tuple[str, str], ...] = (
    (
        "no_double_execution",
        "whether a handler ran its mutation more than once where the second run changed "
        "nothing visible (a delete of a note already gone) needs the server's record of "
        "mutations",
    ),
    (
        "info_resolved",
        "what an answer of unknown outcome (lost reply, timeout) did, and which of several "
        "answers told 'executed' made the mutation, needs the server's journal",
    ),
    (
        "no_execution_after_expiry",
        "expiry on the server's own clock: the client sees only its own estimate of the instant",
    ),
    (
        "replay_entries_expire",
        "whether used-state records expire (memory stays bounded) is not visible from outside",
    ),
    (
        "answers_conform_to_model",
        "holding every reply to the sequential model of its state needs the order of the "
        "mutations, which only a journal gives",
    ),
)
"""Invariants of the journal checker (``loadgen.check.invariants``) this one cannot decide, and
why."""


@dataclass(frozen=True)
class Facts:
    """The history indexed for the verdicts."""

    calls: list[Call]
    confirms: dict[str, list[Call]]
    """nonce -> its confirms, in invoke order."""
    created: dict[str, str]
    """note id -> the workspace it was created in."""
    final: Mapping[str, str]
    """note id -> the workspace it was listed in at the end (absent: gone)."""


def _executed_note(c: Call) -> str | None:
    """The note an ok confirm was told it acted on (None: not told so)."""
    if c.outcome != "ok" or not told_executed(c.result):
        return None
    note = c.result.get("noteId") or c.v.get("noteId")
    return str(note) if note else None


def _facts(history: Sequence[Op], final: Mapping[str, str]) -> Facts:
    calls = pair_calls(history)
    confirms: dict[str, list[Call]] = defaultdict(list)
    created: dict[str, str] = {}
    for c in calls:
        if c.invoke.f == "confirm":
            confirms[c.nonce].append(c)
        elif c.invoke.f == "create" and c.outcome == "ok" and c.result.get("noteId"):
            created[str(c.result["noteId"])] = str(c.v.get("workspace", ""))
    return Facts(calls, dict(confirms), created, final)


def _legit(c: Call) -> bool:
    return c.is_accept and c.v.get("expect") == "execute"


def one_note_per_state(f: Facts) -> Verdict:
    """No state told to have acted on two different notes."""
    bad = []
    for nonce, cs in f.confirms.items():
        notes = {n for c in cs if (n := _executed_note(c))}
        if len(notes) > 1:
            ops = [i for c in cs for i in c.indices]
            bad.append(Finding(f"state {nonce} acted on {sorted(notes)}", ops))
    return verdict("one_note_per_state", "Every state acted on at most one note.", bad)


def no_note_acted_on_by_two_states(f: Facts) -> Verdict:
    """No note told the same operation (delete, archive) under two states."""
    by_note: dict[tuple[str, str], dict[str, list[int]]] = defaultdict(dict)
    for nonce, cs in f.confirms.items():
        for c in cs:
            note = _executed_note(c)
            if note:
                op = str(c.result.get("op", ""))
                by_note[(note, op)].setdefault(nonce, []).extend(c.indices)
    bad = [
        Finding(
            f"note {note} told {op}d under {len(states)} states",
            [i for ops in states.values() for i in ops],
        )
        for (note, op), states in by_note.items()
        if len(states) > 1
    ]
    return verdict("no_note_acted_on_by_two_states", "No note was acted on twice.", bad)


def told_executed_took_effect(f: Facts) -> Verdict:
    """A note told deleted is gone; one told archived is no longer in its inbox."""
    bad = []
    for c in (c for cs in f.confirms.values() for c in cs):
        note = _executed_note(c)
        if note is None or note not in f.created:
            continue
        where = f.final.get(note)
        archived = c.result.get("op") == "archive"
        if (not archived and where is not None) or (archived and where == f.created[note]):
            bad.append(
                Finding(f"note {note} was told {c.result.get('op')}d but is in {where}", c.indices)
            )
    return verdict("told_executed_took_effect", "Every note told acted on was.", bad)


def refused_answers_did_not_act(f: Facts) -> Verdict:
    """No answer meant to change nothing was told it acted."""
    bad = [
        Finding(f"a {c.invoke.kind} answer meant to change nothing was told it acted", c.indices)
        for cs in f.confirms.values()
        for c in cs
        if c.v.get("expect") == "no_mutation" and _executed_note(c)
    ]
    return verdict("refused_answers_did_not_act", "No answer meant to change nothing acted.", bad)


def notes_vanish_only_by_confirmation(f: Facts) -> Verdict:
    """Every note gone at the end was named by an accept meant to act."""
    named = {str(c.v.get("noteId")) for cs in f.confirms.values() for c in cs if _legit(c)}
    bad = []
    for note, workspace in f.created.items():
        if note in f.final or note in named:
            continue
        ops = [
            i
            for cs in f.confirms.values()
            for c in cs
            if c.v.get("noteId") == note
            for i in c.indices
        ]
        bad.append(Finding(f"note {note} of {workspace} vanished with no accept meant to act", ops))
    return verdict(
        "notes_vanish_only_by_confirmation", "Every vanished note had a valid accept.", bad
    )


def _acted(f: Facts, nonce: str, note: str, told: dict[str, set[str]]) -> bool:
    """The state acted on the note: told so, or the note vanished and no other state was told
    it acted on it (nothing else deletes it)."""
    if note in told.get(nonce, set()):
        return True
    others = any(note in notes for n, notes in told.items() if n != nonce)
    return note in f.created and note not in f.final and not others


def retries_learn_the_outcome(f: Facts) -> Verdict:
    """Once an answer acted, every other legit accept of the same state and note learned it."""
    told: dict[str, set[str]] = defaultdict(set)
    for nonce, cs in f.confirms.items():
        told[nonce] |= {n for c in cs if (n := _executed_note(c))}
    bad = []
    for nonce, cs in f.confirms.items():
        for c in cs:
            note = str(c.v.get("noteId"))
            if not _legit(c) or c.outcome == "info" or not _acted(f, nonce, note, told):
                continue
            if _executed_note(c) != note and not c.result.get("reask"):
                what = c.result.get("message") or ("isError" if c.result.get("isError") else "")
                bad.append(
                    Finding(
                        f"an accept of note {note} that had acted got {c.outcome} {what!r} instead "
                        "of the outcome",
                        [i for x in cs for i in x.indices],
                    )
                )
    return verdict(
        "retries_learn_the_outcome", "Every retry of an answer that acted learned so.", bad
    )


def _issued_after_ms(f: Facts) -> dict[str, int]:
    """nonce -> when the round 1 that returned it was sent (the state is no older)."""
    return {
        str(c.result["nonce"]): c.invoke.time_ms
        for c in f.calls
        if c.outcome == "ok" and c.result.get("nonce")
    }


def before_expiry_honoured(f: Facts, ttl_ms: int) -> Verdict:
    """Accepts answered before the state's earliest possible expiry (the client's clock: round
    1's send time plus the lifetime) acted. The reply's arrival bounds when the server decided,
    so an answer whose reply came later is not judged: a busy server may have queued it past
    the expiry."""
    issued = _issued_after_ms(f)
    bad = []
    for nonce, cs in f.confirms.items():
        for c in cs:
            if not _legit(c) or "redis_send_ms" not in c.v or c.done is None:
                continue
            earliest = issued.get(nonce)
            if earliest is None or c.done.time_ms > earliest + ttl_ms or c.outcome == "info":
                continue  # not surely decided before expiry: nothing to hold the server to
            if not _executed_note(c):
                bad.append(
                    Finding("an accept answered before the state's expiry did not act", c.indices)
                )
    return verdict(
        "before_expiry_honoured_client_clock",
        "Accepts answered before expiry (the client's clock) acted.",
        bad,
    )


def check_without_journal(
    history: Sequence[Op], final: Mapping[str, str], ttl_ms: int
) -> CheckResult:
    """Every invariant decidable from ``history`` and ``final`` (note id -> workspace listed at
    the end, for the titles the run created) given the states' lifetime ``ttl_ms``, then the
    undecidable ones as ``unknown``."""
    f = _facts(history, final)
    decided = (
        one_note_per_state(f),
        no_note_acted_on_by_two_states(f),
        told_executed_took_effect(f),
        refused_answers_did_not_act(f),
        notes_vanish_only_by_confirmation(f),
        retries_learn_the_outcome(f),
        before_expiry_honoured(f, ttl_ms),
    )
    undecided = tuple(
        Verdict(name, "unknown", f"Not decidable without the server's journal: {why}.")
        for name, why in UNDECIDABLE
    )
    counts = {
        "confirms": sum(len(cs) for cs in f.confirms.values()),
        "told_executed": sum(1 for cs in f.confirms.values() for c in cs if _executed_note(c)),
        "notes_created": len(f.created),
        "notes_left": sum(1 for n in f.created if n in f.final),
    }
    return CheckResult((*decided, *undecided), counts)
