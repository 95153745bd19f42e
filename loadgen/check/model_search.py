"""Every answer held to the model: per confirmation state, is there an order of the concurrent
operations that explains the replies the clients saw and the journal?

Layer: loadgen.check. Pure module: no I/O, no node code. Reads the checker's paired history
(``loadgen.check.context.Context``) and returns findings; the checker folds them into two verdicts.

How (porcupine's and Knossos' question, shaped by what this store guarantees):

- **Partition** (P-compositionality). States and notes are joined when an answer under the
  state names the note or the state executed on it; each group is checked alone. A group is a
  flow's state, its re-asks and the rival states that raced it on the same note.
- **The journal fixes the order of every change.** ``confirm.lua`` and the other scripts journal
  each mutation inside the atomic step that makes it, so within a group the sequence of changes
  is known: journal entries, and each state's expiry (``exp``) and replay-entry expiry (``exp``
  plus grace) placed among them by the Redis clock. What is left to find is (1) which of the
  concurrent answers made each decision (an execution or a decline), and (2) for every other
  answer, a point in that sequence where the model (``loadgen.check.model``) allows the reply it
  got, consistent with real time: the history's invoke/complete order between operations, and the
  Redis-clock bounds of ``loadgen.check.timeline``.
- **Search.** Depth first over the attributions of decisions (a handful of duplicates at most),
  each leaf placing the other answers greedily at their earliest legal point in invoke order
  (exact: every constraint between them is "no earlier than"); model steps are memoised on
  (state, answer, world). A leaf with no unexplained answer ends the search; past
  ``MAX_LEAVES`` without one the group is undecided.

An answer with an unknown outcome (info) constrains nothing, but may be the one that executed.
A finding names the race kind and the operations that prove it: a *liveness* finding when the
client got a refusal or an error where the model owed it progress at every point it could have
run; a *safety* finding otherwise (a reply the model never gives there, an acknowledged
execution missing from the journal, a decision no answer explains, replays that disagree).
"""

from __future__ import annotations

import bisect
import functools
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from loadgen.check.answers import (
    Answered,
    Event,
    JournalIndex,
    answer_of,
    events_of,
    groups,
    observed,
    titles_of,
)
from loadgen.check.model import (
    DECLINED,
    EXECUTED,
    INIT,
    PROGRESS,
    REPLAY_EXECUTED,
    Answer,
    ModelReply,
    NoteView,
    Recorded,
    State,
    Step,
    World,
    expire,
    forget,
    step,
)
from loadgen.check.timeline import (
    LATEST,
    MAX_OFFERED,
    Clock,
    Titles,
    anchors,
    forgettable_creates,
    note_after,
)

if TYPE_CHECKING:
    from loadgen.check.context import Context, LearnedState
    from loadgen.check.limits import FaultWindow
    from store.journal import JournalEntry

PER_REQUEST = frozenset({"replay", "posted_redis_ms"})
"""Fields of a reply that tell of the request, not of the execution it reports."""

MAX_LEAVES = 4096
"""Attributions tried per group before it is left undecided (a group holds one flow's answers
and its rivals': a few duplicates, so a few dozen leaves at most in practice)."""

Severity = Literal["safety", "liveness", "undecided"]


@dataclass(frozen=True)
class ModelFinding:
    """One answer (or decision) no legal order explains."""

    severity: Severity
    kind: str
    text: str
    ops: tuple[int, ...] = ()
    journal: tuple[str, ...] = ()


@dataclass
class ModelReport:
    """Findings, the per-kind table of replies seen against legal sets, and counters."""

    findings: list[ModelFinding] = field(default_factory=list)
    table: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


# --- the search -----------------------------------------------------------------------------


def maker_replies(e: JournalEntry) -> tuple[ModelReply, ...]:
    """What the answer that made decision ``e`` may be told: the decision, never a replay. The
    store records the call that decided (``confirm.lua``'s call id), so even the node's own
    re-send after a lost Redis reply gets the first run's status back: a deciding answer told
    "replay" is a finding."""
    if e.op == "decline":
        return (ModelReply(DECLINED),)
    return (ModelReply(EXECUTED, e.note),)


@functools.lru_cache(maxsize=65_536)
def legal(state: State, answer: Answer, world: World) -> dict[ModelReply, Step]:
    """The model's step, memoised (the same state, answer and world recur across leaves)."""
    return step(state, answer, world)


@dataclass
class Timeline:
    """The group's model states at each point 0..m (point p: after the first p events)."""

    states: list[dict[str, State]]
    notes: list[dict[tuple[str, str], NoteView]]
    findings: list[ModelFinding]


class Group:
    """One group's answers and changes, and the search for an order that explains them."""

    def __init__(
        self, ops: list[Answered], events: list[Event], shown: Mapping[str, LearnedState]
    ) -> None:
        self.ops = sorted(ops, key=lambda o: o.index)
        self.events = events
        self.shown = shown
        self.decisions = [k for k, ev in enumerate(events, 1) if ev.decision]
        self.leaves = 0

    # -- the states along the sequence, for one attribution --

    def timeline(self, chosen: Mapping[int, Answered | None]) -> Timeline:
        """Apply every event in order; a decision goes through the model as its chosen op's
        answer (findings when no op, or one the model does not allow there)."""
        states: dict[str, State] = {op.nonce: INIT for op in self.ops}
        notes: dict[tuple[str, str], NoteView] = {}
        for ev in self.events:
            e = ev.entry
            if e is not None and (e.tenant, e.note) not in notes:
                # Known from the start only if the journal saw the note created.
                notes[(e.tenant, e.note)] = NoteView(e.op == "create", False)
        out = Timeline([dict(states)], [dict(notes)], [])
        for k, ev in enumerate(self.events, 1):
            if ev.what == "expire":
                states[ev.nonce] = expire(states.get(ev.nonce, INIT))
            elif ev.what == "forget":
                states[ev.nonce] = forget(states.get(ev.nonce, INIT))
            else:
                assert ev.entry is not None
                e = ev.entry
                if ev.decision:
                    states[e.nonce] = self._decide(ev, chosen.get(k), states, notes, out.findings)
                if e.note:
                    key = (e.tenant, e.note)
                    notes[key] = note_after(notes.get(key, NoteView()), e)
            out.states.append(dict(states))
            out.notes.append(dict(notes))
        return out

    def _decide(
        self,
        ev: Event,
        op: Answered | None,
        states: dict[str, State],
        notes: dict[tuple[str, str], NoteView],
        findings: list[ModelFinding],
    ) -> State:
        e = ev.entry
        assert e is not None
        before = states.get(e.nonce, INIT)
        outcome: Literal["executed", "declined"] = "declined" if e.op == "decline" else "executed"
        want = ModelReply(DECLINED) if e.op == "decline" else ModelReply(EXECUTED, e.note)
        if op is None:
            what = f"{e.op} {e.note}" if e.note else e.op
            text = f"{what} under nonce {e.nonce} that no answer explains"
            shown = self.shown.get(e.nonce)
            proof = [*(shown.ops if shown else ()), *self._indices(e.nonce)]
            findings.append(self._finding("safety", self._kind(e.nonce), text, proof, (e.id,)))
            return State(Recorded(None, outcome, e.note), before.expired, before.forgotten)
        view = notes.get((e.tenant, op.answer.note), NoteView())
        steps = legal(before, op.answer, op.world(view))
        if want in steps:
            return steps[want].state
        allowed = ", ".join(sorted(str(r) for r in steps))
        text = f"journal {e.op} {e.note} under {e.nonce} where the model allows only {allowed}"
        findings.append(self._finding("safety", op.kind, text, (op.index,), (e.id,)))
        return State(Recorded(op.answer.key, outcome, e.note), before.expired, before.forgotten)

    # -- where each answer may sit --

    def points(self, op: Answered, chosen: Mapping[int, Answered | None]) -> range:
        """The points 0..m the op may sit at by the Redis clock and by real time against every
        change with a known cause (empty range: none)."""
        lo, hi = 0, len(self.events)
        b = op.bounds
        for k, ev in enumerate(self.events, 1):
            cause = chosen.get(k) if ev.decision else None
            cause_call = cause.call if cause is not None else ev.cause
            if b.hi < ev.after_min or (cause_call is not None and op.before(cause_call)):
                hi = min(hi, k - 1)
            if b.lo > ev.before_max or (cause_call is not None and op.after(cause_call)):
                lo = max(lo, k)
        return range(lo, hi + 1)

    def replies_at(self, op: Answered, tl: Timeline, p: int) -> dict[ModelReply, Step]:
        """The model's legal replies for ``op`` at point ``p``."""
        tenant = self.shown[op.nonce].tenant
        view = tl.notes[p].get((tenant, op.answer.note), NoteView())
        return legal(tl.states[p].get(op.nonce, INIT), op.answer, op.world(view))

    # -- one leaf: an attribution of every decision --

    def evaluate(
        self, chosen: Mapping[int, Answered | None]
    ) -> tuple[list[ModelFinding], Timeline]:
        """Findings of the best placement of every unattributed answer under ``chosen``."""
        tl = self.timeline(chosen)
        findings = list(tl.findings)
        used = {id(op) for op in chosen.values() if op is not None}
        placed: list[tuple[Answered, int]] = []
        for op in self.ops:
            if id(op) in used:
                continue
            if op.observed is None:
                continue  # an unknown outcome that made no decision: it may never have run
            floor = max((p for prev, p in placed if prev.before(op.call)), default=0)
            spot = next(
                (
                    p
                    for p in self.points(op, chosen)
                    if p >= floor and self._quiet(self.replies_at(op, tl, p).get(op.observed))
                ),
                None,
            )
            if spot is None:
                findings.append(self._unexplained(op, tl, chosen))
            else:
                placed.append((op, spot))
        for k, maker in chosen.items():
            if maker is not None and maker.observed is not None:
                findings.extend(self._attributed_reply(maker, k))
        return findings, tl

    @staticmethod
    def _quiet(s: Step | None) -> bool:
        """A legal reply that changes nothing (a change would be in the journal)."""
        return s is not None and s.effect is None

    def _attributed_reply(self, op: Answered, k: int) -> list[ModelFinding]:
        e = self.events[k - 1].entry
        assert e is not None
        assert op.observed is not None
        if op.observed in maker_replies(e):
            return []
        text = f"confirm at {op.index} made {e.op} {e.note} but was answered {op.observed}"
        return [self._finding("safety", op.kind, text, op.call.indices, (e.id,))]

    def legal_names(
        self, op: Answered, tl: Timeline, chosen: Mapping[int, Answered | None]
    ) -> set[str]:
        """Names of every reply the model allows ``op`` at any point it may sit."""
        at = next((k for k, o in chosen.items() if o is op), None)
        spots = [at - 1] if at is not None else list(self.points(op, chosen))
        return {r.name for p in spots for r in self.replies_at(op, tl, p)}

    def _unexplained(
        self, op: Answered, tl: Timeline, chosen: Mapping[int, Answered | None]
    ) -> ModelFinding:
        assert op.observed is not None
        names = self.legal_names(op, tl, chosen)
        severity: Severity = "safety"
        if op.observed.name not in PROGRESS and names and names <= PROGRESS:
            severity = "liveness"
        if op.observed.name in (EXECUTED, DECLINED):
            what = "acknowledged, but no decision in the journal can be its own"
        else:
            what = f"legal at every point it may have run: {', '.join(sorted(names)) or 'none'}"
        text = f"confirm at {op.index} ({op.answer.key}) answered {op.observed}; {what}"
        proof = [*self.shown[op.nonce].ops, *op.call.indices]
        proof += [i for o in chosen.values() if o is not None for i in o.call.indices]
        journal = tuple(ev.entry.id for ev in self.events if ev.entry is not None and ev.decision)
        return self._finding(severity, op.kind, text, tuple(proof), journal)

    def _indices(self, nonce: str) -> list[int]:
        return [i for op in self.ops if op.nonce == nonce for i in op.call.indices]

    def _kind(self, nonce: str) -> str:
        kinds = [op.kind for op in self.ops if op.nonce == nonce]
        return kinds[0] if kinds else "?"

    @staticmethod
    def _finding(
        severity: Severity, kind: str, text: str, ops: Sequence[int], journal: Sequence[str]
    ) -> ModelFinding:
        return ModelFinding(
            severity, kind, f"[{kind}] {text}", tuple(sorted(set(ops))), tuple(journal)
        )

    # -- the search over attributions --

    def candidates(self, k: int) -> list[Answered | None]:
        """The answers that could have made decision ``k``, then None (none of them)."""
        e = self.events[k - 1].entry
        assert e is not None
        out: list[Answered | None] = []
        for op in self.ops:
            if op.nonce != e.nonce or not op.bounds.holds(e.at_ms):
                continue
            a = op.answer
            fits = (
                a.kind in ("decline", "accept_no")
                if e.op == "decline"
                else a.kind == "accept" and a.note == e.note
            )
            if fits and (op.observed is None or op.observed in maker_replies(e)):
                out.append(op)
        # Try the answers told of a fresh decision first, then unknown outcomes.
        out.sort(key=lambda o: 1 if o is None or o.observed is None else 0)
        return [*out, None]

    def search(self) -> tuple[list[ModelFinding], Timeline, dict[int, Answered | None], bool]:
        """The attribution with the fewest findings (first with none), and whether the search
        was exhausted within ``MAX_LEAVES``."""
        best: tuple[list[ModelFinding], Timeline, dict[int, Answered | None]] | None = None
        for chosen in self._attributions(0, {}):
            self.leaves += 1
            findings, tl = self.evaluate(chosen)
            if best is None or len(findings) < len(best[0]):
                best = (findings, tl, dict(chosen))
            if not findings or self.leaves >= MAX_LEAVES:
                break
        assert best is not None
        return (*best, self.leaves < MAX_LEAVES or not best[0])

    def _attributions(
        self, i: int, chosen: dict[int, Answered | None]
    ) -> Iterator[dict[int, Answered | None]]:
        if i == len(self.decisions):
            yield chosen
            return
        k = self.decisions[i]
        taken = {id(o) for o in chosen.values() if o is not None}
        for op in self.candidates(k):
            if op is not None and (id(op) in taken or not self._in_order(op, k, chosen)):
                continue
            chosen[k] = op
            yield from self._attributions(i + 1, chosen)
            del chosen[k]

    def _in_order(self, op: Answered, k: int, chosen: Mapping[int, Answered | None]) -> bool:
        """Real time allows ``op`` to have made decision ``k`` given the ones already chosen
        and the changes with a known cause."""
        for j, ev in enumerate(self.events, 1):
            other = chosen.get(j)
            cause = other.call if other is not None else ev.cause
            if cause is None or cause is op.call:
                continue
            if (j < k and op.before(cause)) or (j > k and op.after(cause)):
                return False
        return True


# --- the whole check ------------------------------------------------------------------------


def _ops(
    ctx: Context,
    clock: Clock,
    titles: Titles,
    report: ModelReport,
    faults: Sequence[FaultWindow] | None = None,
) -> list[Answered]:
    seen_titles = titles_of(ctx.calls)
    forgettable = forgettable_creates(ctx.calls, faults)
    out: list[Answered] = []
    for nonce, calls in ctx.confirms.items():
        shown = ctx.states.get(nonce)
        if shown is None:
            report.counts["model_unchecked"] = report.counts.get("model_unchecked", 0) + len(calls)
            continue
        ws, title = seen_titles.get(nonce, (shown.workspace, ""))
        sent = forgettable.get((shown.tenant, ws, title), [])
        for c in calls:
            a = answer_of(c, shown)
            b = clock.bounds(c)
            answered = c.done.time_ms if c.done is not None else LATEST
            forgotten = bisect.bisect_right(sent, answered)
            out.append(
                Answered(
                    c,
                    nonce,
                    a,
                    observed(c, shown.tool, a),
                    b,
                    shown.workspace,
                    shown.candidates.get(a.note),
                    titles.reask(shown.tenant, ws, title, b, forgotten),
                )
            )
    return out


def _same_content(ops: Sequence[Answered]) -> list[ModelFinding]:
    """Every reply telling a state's execution (fresh or replayed) carries the same content."""
    out: list[ModelFinding] = []
    first: dict[str, tuple[Answered, dict[str, Any]]] = {}
    for op in ops:
        if op.observed is None or op.observed.name not in (EXECUTED, REPLAY_EXECUTED):
            continue
        content = {k: v for k, v in op.call.result.items() if k not in PER_REQUEST}
        seen = first.setdefault(op.nonce, (op, content))
        if seen[1] != content:
            text = (
                f"[{op.kind}] confirm at {op.index} told {content}, confirm at "
                f"{seen[0].index} told {seen[1]} for the same execution"
            )
            ops_ = tuple(sorted({*op.call.indices, *seen[0].call.indices}))
            out.append(ModelFinding("safety", op.kind, text, ops_))
    return out


def check_answers(
    ctx: Context, faults: Sequence[FaultWindow] | None = None, max_offered: int = MAX_OFFERED
) -> ModelReport:
    """Hold every confirm of the history to the model; see the module docstring. ``faults``:
    the run's fault windows; after a failover a re-ask may find a note the journal never held
    (``loadgen.check.timeline.forgettable_creates``). ``max_offered``: the nodes' pick-list
    limit."""
    report = ModelReport()
    causes = anchors(ctx.calls, ctx.journal)
    by_id = {(e.tenant, e.id): e for e in ctx.journal}
    clock = Clock.build((c, by_id[eid]) for eid, c in causes.items())
    ops = _ops(ctx, clock, Titles.build(ctx.journal, max_offered), report, faults)
    by_nonce: dict[str, list[Answered]] = defaultdict(list)
    for op in ops:
        by_nonce[op.nonce].append(op)
    table: Counter[tuple[str, str, tuple[str, ...], str]] = Counter()
    parts = groups(ops, ctx.states, ctx.journal)
    index = JournalIndex.build(ctx.journal)
    for nonces, notes in parts:
        group_ops = [op for k in nonces for op in by_nonce[k]]
        events = events_of(nonces, notes, ctx.states, index, causes, ctx.grace_ms)
        group = Group(group_ops, events, ctx.states)
        findings, tl, chosen, decided = group.search()
        if not decided:
            findings = [
                ModelFinding("undecided", f.kind, f.text, f.ops, f.journal) for f in findings
            ]
        report.findings.extend(findings)
        for op in group.ops:
            names = tuple(sorted(group.legal_names(op, tl, chosen)))
            seen = "info" if op.observed is None else op.observed.name
            table[(op.kind, op.answer.kind, names, seen)] += 1
    report.findings.extend(_same_content(ops))
    report.table = _table(table)
    report.counts |= {
        "model_groups": len(parts),
        "model_answers": len(ops),
        "model_ambiguous": sum(n for (_, _, names, _), n in table.items() if len(names) > 1),
        "model_anchors": len(causes),
    }
    return report


def _table(
    rows: Counter[tuple[str, str, tuple[str, ...], str]],
) -> dict[str, list[dict[str, Any]]]:
    """kind -> [{answer, legal, seen: {reply: n}}], for results.json."""
    merged: dict[tuple[str, str, tuple[str, ...]], Counter[str]] = defaultdict(Counter)
    for (kind, answer, names, seen), n in rows.items():
        merged[(kind, answer, names)][seen] += n
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (kind, answer, names), replies in sorted(merged.items()):
        out[kind].append(
            {"answer": answer, "legal": list(names), "seen": dict(sorted(replies.items()))}
        )
    return dict(sorted(out.items()))


def merge_tables(
    tables: Iterable[Mapping[str, list[dict[str, Any]]]],
) -> dict[str, list[dict[str, Any]]]:
    """The tables of several partitions (tenants, say) as one: replies seen summed per race
    kind, answer and legal set."""
    rows: Counter[tuple[str, str, tuple[str, ...], str]] = Counter()
    for table in tables:
        for kind, entries in table.items():
            for row in entries:
                for seen, n in row["seen"].items():
                    rows[(kind, row["answer"], tuple(row["legal"]), seen)] += n
    return _table(rows)
