"""What the journal says about time and notes, for the model search.

Layer: loadgen.check. Pure module: no I/O, no node code.

- **When on the Redis clock an operation took effect.** The journal stamps every mutation with
  the Redis clock (``at``); the history stamps every operation's invoke and completion with the
  load generator's wall clock. The two are never compared. Instead some operations are
  *anchors*: the one operation that caused one journal entry (a create and its ``create``, a
  confirm told it executed and its nonce's only execution, a move or edit of a note moved or
  edited once). An operation invoked after an anchor completed took effect no earlier than the
  anchor's ``at``; one that completed before an anchor was invoked took effect no later. Both
  clocks need only be monotonic: no offset, no skew bound. When anchors contradict each other
  for an operation (a clock stepped back; a synthetic history) it gets no bound at all.
- **Each note's state along the journal**, and how many notes of a title a workspace holds at
  a time (what a re-ask's lookup can find); and the notes the journal cannot hold: a create of
  unknown outcome sent before a failover ended may have run on the old master only, where reads
  saw its note before the failover forgot it (``forgettable_creates``).
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loadgen.check.model import ERROR_RESULT, REASK, NoteView

if TYPE_CHECKING:
    from loadgen.check.context import Call
    from loadgen.check.limits import FaultWindow
    from store.journal import JournalEntry


def forgettable_creates(
    calls: Iterable[Call], faults: Sequence[FaultWindow] | None
) -> dict[tuple[str, str, str], list[int]]:
    """(tenant, workspace, title) -> invoke times (ms, sorted) of the creates of unknown outcome
    sent before a failover ended: each may have made a note that reads saw on the old master (a
    read does not wait for replicas) and that the failover then forgot, so the journal never
    holds it. Empty without a recorded failover."""
    ends = [f.end_ms for f in faults or () if f.kind == "failover"]
    out: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    if not ends:
        return out
    for c in calls:
        if c.invoke.f == "create" and c.outcome == "info" and c.invoke.time_ms <= max(ends):
            where = (str(c.v.get("tenant", "")), str(c.v.get("workspace", "")))
            out[(*where, str(c.v.get("title", "")))].append(c.invoke.time_ms)
    for times in out.values():
        times.sort()
    return out


EARLIEST = -(1 << 62)
LATEST = 1 << 62

MAX_OFFERED = 50
"""Most notes a pick list offers unless the run's limits say otherwise (the tool's default): a
lookup finding more refuses with an ``isError`` result, so past it a re-ask may be either."""


@dataclass(frozen=True)
class Bounds:
    """When, on the Redis clock, an operation may have taken effect (ms, both inclusive)."""

    lo: int = EARLIEST
    hi: int = LATEST
    before: frozenset[str] = frozenset()
    """Journal entries known to precede the effect (its own flow's, by history order)."""
    after: frozenset[str] = frozenset()
    """Journal entries known to follow it: at the same ms as the effect, the clock cannot say."""

    def holds(self, at_ms: int) -> bool:
        """Whether an effect at ``at_ms`` fits."""
        return self.lo <= at_ms <= self.hi


def precedes(a: Call, b: Call) -> bool:
    """``a`` completed before ``b`` was invoked. Across flows by the wall clock (strictly: both
    are truncated to ms); within a flow also by history order, which one recorder appended in
    the order things happened (in-process requests often take well under a millisecond). An
    unknown outcome has no completion to precede anything with."""
    done = a.done
    if done is None or a.outcome == "info":
        return False
    same_flow = a.invoke.flow == b.invoke.flow
    return done.time_ms < b.invoke.time_ms or (same_flow and done.index < b.invoke.index)


def _told_executed(c: Call) -> bool:
    r = c.result
    done = r.get("deleted") is True or r.get("archived") is True
    return c.outcome == "ok" and done and r.get("replay") is not True


def anchors(calls: Sequence[Call], journal: Sequence[JournalEntry]) -> dict[tuple[str, str], Call]:
    """(tenant, journal entry id) -> the one operation that caused it, where exactly one could
    have. Keyed by tenant too: every tenant's journal is a stream of its own, so two tenants'
    entries may carry the same id (a checker holding several tenants at once)."""
    by_key: dict[tuple[str, str, str], list[JournalEntry]] = defaultdict(list)
    for e in journal:
        if e.op in ("create", "move", "update") and not e.nonce:
            by_key[(e.op, e.tenant, e.note)].append(e)
        elif e.nonce and e.op in ("delete", "move"):
            by_key[("confirm", e.tenant, e.nonce)].append(e)
    ops: dict[tuple[str, str, str], list[Call]] = defaultdict(list)
    # A write sent again with its idempotency key: which of the sends wrote is not known (the
    # one answered may be a retry told the recorded result), so none of them anchors.
    keys = Counter(str(c.v["key"]) for c in calls if "key" in c.v)
    for c in calls:
        tenant = str(c.v.get("tenant", ""))
        if c.outcome != "ok" or c.result.get("isError"):
            continue
        if keys.get(str(c.v.get("key")), 0) > 1 or c.result.get("replay") is True:
            continue
        f = c.invoke.f
        if f == "create" and isinstance(c.result.get("noteId"), str):
            ops[("create", tenant, c.result["noteId"])].append(c)
        elif f in ("move", "update"):
            ops[(f, tenant, str(c.v.get("noteId", "")))].append(c)
        elif f == "confirm" and _told_executed(c):
            ops[("confirm", tenant, c.nonce)].append(c)
    return {
        (entries[0].tenant, entries[0].id): ops[key][0]
        for key, entries in by_key.items()
        if len(entries) == 1 and len(ops.get(key, ())) == 1
    }


@dataclass(frozen=True)
class Clock:
    """The anchors, sorted for the two bounds."""

    by_done: tuple[tuple[int, int], ...]
    """(completion wall ms, at) by completion, with ``at`` replaced by the running maximum."""
    by_invoke: tuple[tuple[int, int], ...]
    """(invoke wall ms, at) by invoke, with ``at`` replaced by the running minimum from the end."""
    flows: dict[int, tuple[tuple[Call, JournalEntry], ...]]
    """Anchors per flow, ordered by history too (see ``precedes``)."""

    @classmethod
    def build(cls, pairs: Iterable[tuple[Call, JournalEntry]]) -> Clock:
        """From (anchor operation, its journal entry) pairs."""
        pairs = list(pairs)
        done = sorted((c.done.time_ms, e.at_ms) for c, e in pairs if c.done is not None)
        inv = sorted((c.invoke.time_ms, e.at_ms) for c, e in pairs)
        running = list(itertools.accumulate((at for _, at in done), max))
        tail = list(itertools.accumulate((at for _, at in reversed(inv)), min))[::-1]
        flows: dict[int, list[tuple[Call, JournalEntry]]] = defaultdict(list)
        for c, e in pairs:
            flows[c.invoke.flow].append((c, e))
        return cls(
            tuple(zip((t for t, _ in done), running, strict=True)),
            tuple(zip((t for t, _ in inv), tail, strict=True)),
            {f: tuple(v) for f, v in flows.items()},
        )

    def bounds(self, c: Call) -> Bounds:
        """Bounds of ``c``'s effect; an unknown outcome has no upper one (a timed-out request
        may still run); contradictory anchors give no bound."""
        i = bisect.bisect_left(self.by_done, (c.invoke.time_ms, EARLIEST))
        lo = self.by_done[i - 1][1] if i else EARLIEST
        hi = LATEST
        if c.outcome != "info" and c.done is not None:
            j = bisect.bisect_right(self.by_invoke, (c.done.time_ms, LATEST))
            hi = self.by_invoke[j][1] if j < len(self.by_invoke) else LATEST
        before: set[str] = set()
        after: set[str] = set()
        for anchor, e in self.flows.get(c.invoke.flow, ()):
            if precedes(anchor, c):
                lo = max(lo, e.at_ms)
                before.add(e.id)
            elif precedes(c, anchor):
                hi = min(hi, e.at_ms)
                after.add(e.id)
        if lo > hi:
            return Bounds()
        return Bounds(lo, hi, frozenset(before), frozenset(after))


def note_after(view: NoteView, e: JournalEntry) -> NoteView:
    """A note's state after journal entry ``e`` about it."""
    if e.op == "delete":
        return NoteView(True, False)
    if e.op == "move":
        # confirm.lua journals the version it found; a plain move the version it wrote.
        return NoteView(True, True, e.to, e.version + 1 if e.nonce else e.version)
    if e.op in ("create", "update"):
        return NoteView(True, True, e.ws, e.version or 1)
    return view


@dataclass(frozen=True)
class Titles:
    """Per (tenant, workspace, title): the number of notes over time, as the journal has it."""

    steps: dict[tuple[str, str, str], tuple[tuple[int, int, str], ...]]
    """(at, count after, journal entry id) per change, in journal order."""
    max_offered: int = MAX_OFFERED
    """The nodes' pick-list limit (``Limits.max_offered``): past it a lookup refuses."""

    @classmethod
    def build(cls, journal: Sequence[JournalEntry], max_offered: int = MAX_OFFERED) -> Titles:
        """Follow every note's workspace and title through the journal."""
        where: dict[tuple[str, str], tuple[str, str]] = {}
        count: dict[tuple[str, str, str], int] = defaultdict(int)
        steps: dict[tuple[str, str, str], list[tuple[int, int, str]]] = defaultdict(list)

        def change(key: tuple[str, str, str], by: int, e: JournalEntry) -> None:
            count[key] += by
            steps[key].append((e.at_ms, count[key], e.id))

        for e in journal:
            if e.op not in ("create", "update", "move", "delete"):
                continue
            key = (e.tenant, e.note)
            before = where.pop(key, None)
            after = None if e.op == "delete" else (e.to if e.op == "move" else e.ws, e.title)
            if after is not None:
                where[key] = after
            if before == after:
                continue  # an edit that kept the title: no count changes, not even for a moment
            if before is not None:
                change((e.tenant, *before), -1, e)
            if after is not None:
                change((e.tenant, *after), +1, e)
        return cls({k: tuple(v) for k, v in steps.items()}, max_offered)

    def reask(
        self, tenant: str, workspace: str, title: str, b: Bounds, forgotten: int = 0
    ) -> frozenset[str]:
        """What a re-ask's lookup within ``b`` can come out as; ``forgotten``: notes of the title
        the journal cannot hold that the lookup may have found (``forgettable_creates``)."""
        steps = self.steps.get((tenant, workspace, title), ())
        i = bisect.bisect_left(steps, (b.lo,))  # the first change at or after lo
        prior = steps[i - 1][1] if i else 0
        seen: set[int] = set()
        for at, n, eid in itertools.islice(steps, i, None):
            if eid in b.after or at > b.hi:
                break  # journal order: nothing after a later entry can come before the lookup
            if eid in b.before:
                prior = n
                seen.clear()
            else:
                seen.add(n)
        seen.add(prior)
        seen |= {n + k for n in seen for k in range(1, forgotten + 1)}
        out: set[str] = set()
        if any(1 <= n <= self.max_offered for n in seen):
            out.add(REASK)
        if any(n == 0 or n > self.max_offered for n in seen):
            out.add(ERROR_RESULT)
        return frozenset(out)
